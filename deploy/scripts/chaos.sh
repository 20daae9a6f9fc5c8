#!/usr/bin/env bash
# chaos.sh — make chaos: the silver pipeline under faults on a private real
# stack (a 3-node Kafka cluster, replication factor 3 and min.insync.replicas
# 2, and PostgreSQL, under ~/.sluice-chaos3, ports +10000), so that stopping
# and starting its services disturbs no other user of the local stack.
# Scenarios: kill -9 of one of two members (dynamic and static membership),
# a restart of every broker, kill -9 of the partition leader, a PostgreSQL
# restart; each checks rows and dead letters against what the corpus implies
# (bench/silverbench/chaos.go) and fails on any lost or duplicated one.
# CHAOS_KAFKA_NODES=1 runs them on a single broker (~/.sluice-chaos; the
# leader scenario needs 3).
#
#   bash deploy/scripts/chaos.sh                       # 200 000 records, every scenario
#   CHAOS_N=50000 CHAOS_SCENARIOS=kill bash deploy/scripts/chaos.sh
#   CHAOS_KEEP=1 …                                     # leave the private stack running
#
# The report goes to stdout and, for the default size, to bench/results-chaos.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

export SLUICE_KAFKA_NODES=${CHAOS_KAFKA_NODES:-3}
if [[ $SLUICE_KAFKA_NODES == 3 ]]; then
	export SLUICE_STACK_DIR=${CHAOS_STACK_DIR:-$HOME/.sluice-chaos3}
	scenarios=kill,kill-static,broker,leader,postgres
else
	export SLUICE_STACK_DIR=${CHAOS_STACK_DIR:-$HOME/.sluice-chaos}
	scenarios=kill,kill-static,broker,postgres
fi
# Below the kernel's ephemeral port range (32768+), so that no client socket
# holds a node's port.
export SLUICE_STACK_PORT_OFFSET=${CHAOS_PORT_OFFSET:-10000}
N=${CHAOS_N:-200000}
OUT=${CHAOS_OUT:-}
if [[ -z $OUT && $N -ge 200000 ]]; then
	OUT=bench/results-chaos.md
fi

stop_stack() {
	[[ -n ${CHAOS_KEEP:-} ]] || bash deploy/stack/down.sh kafka postgres >&2 || true
}
trap stop_stack EXIT
envfile=$(bash deploy/stack/up.sh kafka postgres)
# shellcheck disable=SC1090
. "$envfile"

mkdir -p bench/.work/chaos
go build -o bench/.work/chaos/silverbench ./bench/silverbench
args=(chaos --n "$N" --workdir bench/.work/chaos --scenarios "${CHAOS_SCENARIOS:-$scenarios}")
[[ -n $OUT ]] && args+=(--out "$OUT")
bench/.work/chaos/silverbench "${args[@]}"
