#!/usr/bin/env bash
# gotest.sh — run the whole Go test suite, keep the verbose log, and print a
# readable summary: failures with their messages, every skipped test with its
# reason, and a closing "N passed, N failed, N skipped" line.
#
# Usage: deploy/scripts/gotest.sh [extra go test flags]   (used by `make test`)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || { echo "gotest.sh: cannot cd to the repository root" >&2; exit 2; }
mkdir -p .test-output
log=.test-output/test.log
echo "go test ./... (log: $log)"
echo "services: KAFKA_BROKERS=${KAFKA_BROKERS:-<unset>} DATABASE_URL=${DATABASE_URL:+set} REDIS_URL=${REDIS_URL:-<unset>} S3_ENDPOINT=${S3_ENDPOINT:-<unset>} CI=${CI:-<unset>}"
start=$SECONDS
go test -count=1 -timeout 45m -v "$@" ./... >"$log" 2>&1
rc=$?
grep -E '^(ok|FAIL|---|\?)\s' "$log" | grep -E '^(ok|FAIL)\s' || true
skips=$(grep -cE -- '^\s*--- SKIP' "$log" || true)
if [ "${skips:-0}" -gt 0 ]; then
	echo
	echo "Skipped tests (with reasons):"
	# go test -v prints a test's skip message on the line(s) just before its
	# "--- SKIP" line.
	grep -E -B1 -- '^\s*--- SKIP' "$log" | grep -vE '^--$|^=== ' | sed 's/^/  /'
fi
fails=$(grep -cE -- '^\s*--- FAIL' "$log" || true)
if [ "$rc" -ne 0 ]; then
	echo
	echo "Failures:"
	grep -E -- '^\s*--- FAIL|^FAIL|^panic:|_test\.go:[0-9]+:|build failed|cannot|undefined' "$log" | head -200 | sed 's/^/  /'
fi
echo
echo "Kafka used by the tests (testkit): $(grep -oE 'testkit: Kafka \([a-z-]+\)' "$log" | sort | uniq -c | sed 's/testkit: Kafka //' | tr '\n' ' ')"
passes=$(grep -cE -- '^\s*--- PASS' "$log" || true)
echo
echo "go test took $((SECONDS - start))s"
echo "${passes:-0} passed, ${fails:-0} failed, ${skips:-0} skipped"
exit "$rc"
