#!/usr/bin/env bash
# firstrun.sh — make first-run: follows the README's first screen on a fresh
# clone of this repository's committed tree, on the demo's embedded defaults
# (the service variables of the calling shell are unset):
#
#   1. make build, then ./bin/sluice version names the clone's commit;
#   2. ./bin/sluice demo --keep (what `make demo ARGS=--keep` runs after the
#      build; free ports instead of 9092/9464/8080, so that it runs next to
#      other work) until it prints its export line;
#   3. in another "shell": the exports, then every command the demo and the
#      README's first screen name — sluice lag, dlq inspect, migrate
#      --status, ingest status, smap progress PROJECT (the demo's project),
#      trades status --user, modules status — and a GET of the console;
#   4. Ctrl-C (SIGINT) to the demo, which must exit 0.
#
# Exits 0 when every step did; otherwise prints the failing step and the
# demo's output. Needs Go, git and the PostgreSQL server binaries.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
demo_pid=""
cleanup() {
	[[ -z $demo_pid ]] || kill -INT "$demo_pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
step() { printf 'first-run: %s\n' "$*"; }
fail() {
	printf 'first-run: FAILED: %s\n' "$*" >&2
	[[ ! -f $work/demo.out ]] || { echo "--- demo output:" >&2; tail -40 "$work/demo.out" >&2; }
	exit 1
}

# The README's first screen runs on a machine with none of the services.
unset KAFKA_BROKERS DATABASE_URL REDIS_URL S3_ENDPOINT S3_ACCESS_KEY S3_SECRET_KEY S3_BUCKET OBJECT_STORE_DIR \
	SLUICE_API_TOKEN SLUICE_CONSOLE_TOKEN

step "git clone $src"
git clone -q --no-hardlinks "$src" "$work/sluice"
cd "$work/sluice"
commit=$(git rev-parse --short=12 HEAD)

step "make build"
make build >"$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; fail "make build"; }
./bin/sluice version | tee "$work/version.out"
grep -q "$commit" "$work/version.out" || fail "sluice version does not name the clone's commit $commit"

step "./bin/sluice demo --keep"
./bin/sluice demo --keep --kafka-addr 127.0.0.1:0 --ops-addr 127.0.0.1:0 --console-addr 127.0.0.1:0 \
	--records 2000 --smap-items 30 >"$work/demo.out" 2>&1 &
demo_pid=$!
for ((i = 0; i < 600; i++)); do
	grep -q '^  export ' "$work/demo.out" && grep -q '^console: http' "$work/demo.out" && break
	kill -0 "$demo_pid" 2>/dev/null || fail "the demo exited before printing its exports"
	sleep 0.5
done
grep -q '^  export ' "$work/demo.out" || fail "no export line after 300 s"

step "the printed exports, then the commands"
eval "$(grep -m1 '^  export ' "$work/demo.out")"
project=$(grep -oE 'project demo-[0-9]+' "$work/demo.out" | head -1 | cut -d' ' -f2)
[[ -n $project ]] || fail "no smap project in the demo's summary"
user=$(grep -oE 'demo-[0-9]+-push' "$work/demo.out" | head -1 || true)
ticker=$(grep -oE 'DEMO[0-9A-Z]+' "$work/demo.out" | head -1 || true)
run() {
	step "sluice $*"
	./bin/sluice "$@" >"$work/cmd.out" 2>&1 || { cat "$work/cmd.out" >&2; fail "sluice $*"; }
	head -5 "$work/cmd.out"
}
run lag
run dlq inspect --limit 5
run migrate --status
run ingest status
run smap progress "$project"
[[ -z $user ]] || run trades status --user "$user"
[[ -z $ticker ]] || run modules status "$ticker"
url=$(grep -m1 -oE '^console: http://[^ ]+' "$work/demo.out" | cut -d' ' -f2)
step "GET $url"
curl -fsS -o /dev/null "$url" || fail "console $url"

step "Ctrl-C"
kill -INT "$demo_pid"
rc=0
wait "$demo_pid" || rc=$?
demo_pid=""
((rc == 0)) || fail "the demo exited $rc after Ctrl-C"
step "ok"
