#!/usr/bin/env bash
# make bench-modules: the seed's refresh locks ported to Go vs sluice's
# modules-refresh group, same workload, same synthetic upstream, same
# PostgreSQL (a database of its own, dropped afterwards). See the doc
# comment of bench/modules/main.go.
#
#   bash bench/modules.sh                          # writes bench/results-modules.md
#   MODULES_BENCH_ARGS="--variants i,chaos" bash bench/modules.sh
#
# Needs DATABASE_URL (and KAFKA_BROKERS for variant ii); when unset, the
# stack's env file (deploy/stack, `make stack-up`) is sourced.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z ${KAFKA_BROKERS:-} || -z ${DATABASE_URL:-} ]]; then
	envfile=$(bash deploy/stack/env.sh 2>/dev/null || true)
	envfile=${envfile:-$HOME/.sluice-stack/env}
	if [[ ! -f $envfile ]]; then
		echo "bench-modules: no KAFKA_BROKERS/DATABASE_URL and no stack env file; run: make stack-up" >&2
		exit 1
	fi
	# shellcheck disable=SC1090
	. "$envfile"
fi

mkdir -p bench/.work
go build -o bench/.work/modulesbench ./bench/modules
# shellcheck disable=SC2206
exec bench/.work/modulesbench --out "${MODULES_BENCH_OUT:-bench/results-modules.md}" ${MODULES_BENCH_ARGS:-}
