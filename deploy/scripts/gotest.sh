#!/usr/bin/env bash
# gotest.sh — run the whole Go test suite, keep the verbose log, and print a
# readable summary: failures with their messages, every skipped test with its
# reason (taken from go test -json, so parallel tests' interleaved output
# cannot hide it), and a closing "N passed, N failed, N skipped" line.
#
# Usage: deploy/scripts/gotest.sh [extra go test flags]   (used by `make test`)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || { echo "gotest.sh: cannot cd to the repository root" >&2; exit 2; }
mkdir -p .test-output
log=.test-output/test.log
echo "go test ./... (log: $log)"
echo "services: KAFKA_BROKERS=${KAFKA_BROKERS:-<unset>} DATABASE_URL=${DATABASE_URL:+set} REDIS_URL=${REDIS_URL:-<unset>} S3_ENDPOINT=${S3_ENDPOINT:-<unset>} CI=${CI:-<unset>}"
start=$SECONDS
# The summary tool is built first so that its own build cannot be mistaken
# for a test failure; go test -json names the test of every output line, so
# skip reasons survive parallel tests interleaving their output (see
# deploy/scripts/testsummary).
summary_bin=.test-output/testsummary
if ! go build -o "$summary_bin" ./deploy/scripts/testsummary; then
	echo "gotest.sh: cannot build deploy/scripts/testsummary" >&2
	exit 2
fi
go test -json -count=1 -timeout 45m "$@" ./... 2>&1 | "$summary_bin" -log "$log" -counts .test-output/counts
rc=${PIPESTATUS[0]}
echo
echo "Kafka used by the tests (testkit): $(grep -oE 'testkit: Kafka \([a-z-]+\)' "$log" | sort | uniq -c | sed 's/testkit: Kafka //' | tr '\n' ' ')"
echo
echo "go test took $((SECONDS - start))s"
cat .test-output/counts
exit "$rc"
