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

# shellcheck source=bench/stackenv.sh
. bench/stackenv.sh
bench_stack_env bench-modules KAFKA_BROKERS DATABASE_URL

mkdir -p bench/.work
go build -o bench/.work/modulesbench ./bench/modules
# shellcheck disable=SC2206
exec bench/.work/modulesbench --out "${MODULES_BENCH_OUT:-bench/results-modules.md}" ${MODULES_BENCH_ARGS:-}
