#!/usr/bin/env bash
# make bench-silver: the silver pipeline vs the seed's SKIP LOCKED design vs
# the database ceiling, on the real local stack (Kafka + PostgreSQL).
#
#   bash bench/silver.sh                 # N=1 000 000, writes bench/results-silver.md
#   SILVER_N=100000 bash bench/silver.sh # a quicker run (report not written)
#   SILVER_ARGS="--profile --keep" bash bench/silver.sh
#   SILVER_ARGS="--variants abcpm" bash bench/silver.sh  # also b, the seed's SKIP LOCKED design (minutes)
#   SILVER_ARGS="--variants acpmkw" bash bench/silver.sh # also the peers (make bench-silver-peers):
#       k = Kafka Streams 4.4 (bench/silverpeers/kstreams; Java 17, Maven),
#       w = Watermill v1.5.1 (bench/silverpeers/watermill; its own Go module)
#
# The default variants are a (sluice), c (upsert ceiling), p (c′, the full
# ingest ceiling with its COPY timed) and m (a in a 512 MiB memory cgroup,
# as deployed; needs root, reported as not run otherwise).
#
# Needs KAFKA_BROKERS and DATABASE_URL; when they are unset, the stack's env
# file (deploy/stack, `make stack-up`) is sourced.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=bench/stackenv.sh
. bench/stackenv.sh
bench_stack_env bench-silver KAFKA_BROKERS DATABASE_URL

N=${SILVER_N:-1000000}
OUT=${SILVER_OUT:-}
if [[ -z $OUT && $N -ge 1000000 ]]; then
	OUT=bench/results-silver.md
fi

mkdir -p bench/.work
go build -o bench/.work/silverbench ./bench/silverbench
args=(run --n "$N" --workdir bench/.work)
[[ -n $OUT ]] && args+=(--out "$OUT")
# shellcheck disable=SC2206
args+=(${SILVER_ARGS:-})
exec bench/.work/silverbench "${args[@]}"
