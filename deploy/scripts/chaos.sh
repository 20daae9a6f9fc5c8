#!/usr/bin/env bash
# chaos.sh — make chaos: the pipelines under faults on a private real stack
# (a 3-node Kafka cluster, replication factor 3 and min.insync.replicas 2,
# PostgreSQL, Redis and MinIO, under ~/.sluice-chaos3, ports +10000), so that
# stopping and starting its services disturbs no other user of the local
# stack.
#
# silver (bench/silverbench/chaos.go): kill -9 of one of two members (dynamic
# and static membership), a restart of every broker, kill -9 of the
# partition leader, a PostgreSQL restart; rows and dead letters against what
# the corpus implies.
# smap, ticks, trades, modules (bench/chaos): kill -9 of one of two `sluice
# run` members, and per pipeline a restart of a service it depends on —
# smap: redis, postgres, broker, minio; ticks: redis, broker, minio; trades:
# broker, postgres, redis (sim calls across it), minio; modules: postgres,
# redis, broker — each verified against what the input implies (tables,
# counters, events, objects and their content, sim answers, upstream calls,
# dead letters).
# Every scenario fails on any lost or duplicated effect.
# CHAOS_KAFKA_NODES=1 runs them on a single broker (~/.sluice-chaos; silver's
# leader scenario needs 3).
#
#   bash deploy/scripts/chaos.sh                             # every pipeline, every scenario
#   CHAOS_PIPELINES=smap,ticks bash deploy/scripts/chaos.sh  # some pipelines
#   CHAOS_SCENARIOS=kill,smap:redis,ticks …                  # bare names are silver's; PIPELINE[:FAULT] the others'
#   CHAOS_N=50000 …                                          # silver's corpus size (default 200 000)
#   CHAOS_SCALE=0.5 …                                        # the others' input size factor (default 1)
#   CHAOS_KEEP=1 …                                           # leave the private stack running
#
# The report goes to stdout and, for the default sizes, to
# bench/results-chaos.md (silver's section, then the others'; a run of only
# some pipelines replaces only its own section).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

export SLUICE_KAFKA_NODES=${CHAOS_KAFKA_NODES:-3}
if [[ $SLUICE_KAFKA_NODES == 3 ]]; then
	export SLUICE_STACK_DIR=${CHAOS_STACK_DIR:-$HOME/.sluice-chaos3}
	silver_default=kill,kill-static,broker,leader,postgres
else
	export SLUICE_STACK_DIR=${CHAOS_STACK_DIR:-$HOME/.sluice-chaos}
	silver_default=kill,kill-static,broker,postgres
fi
# Below the kernel's ephemeral port range (32768+), so that no client socket
# holds a node's port.
export SLUICE_STACK_PORT_OFFSET=${CHAOS_PORT_OFFSET:-10000}
N=${CHAOS_N:-200000}
SCALE=${CHAOS_SCALE:-1}
PIPELINES=${CHAOS_PIPELINES:-silver,smap,ticks,trades,modules}

# Split CHAOS_SCENARIOS (or the pipelines' defaults) into silver's and the
# others'.
silver_scen="" other_scen=""
add() { if [[ -z ${!1} ]]; then printf -v "$1" '%s' "$2"; else printf -v "$1" '%s,%s' "${!1}" "$2"; fi; }
if [[ -n ${CHAOS_SCENARIOS:-} ]]; then
	IFS=, read -ra items <<<"$CHAOS_SCENARIOS"
	for s in "${items[@]}"; do
		case $s in
		silver) add silver_scen "$silver_default" ;;
		silver:*) add silver_scen "${s#silver:}" ;;
		*:* | smap | ticks | trades | modules) add other_scen "$s" ;;
		*) add silver_scen "$s" ;;
		esac
	done
else
	IFS=, read -ra items <<<"$PIPELINES"
	for p in "${items[@]}"; do
		if [[ $p == silver ]]; then
			silver_scen=$silver_default
		else
			add other_scen "$p"
			# The partition leader's kill needs the 3 nodes.
			[[ $SLUICE_KAFKA_NODES == 3 ]] && add other_scen "$p:leader"
		fi
	done
fi

services=(kafka postgres)
[[ -n $other_scen ]] && services+=(redis minio)
stop_stack() {
	[[ -n ${CHAOS_KEEP:-} ]] || bash deploy/stack/down.sh "${services[@]}" >&2 || true
}
trap stop_stack EXIT
envfile=$(bash deploy/stack/up.sh "${services[@]}")
# shellcheck disable=SC1090
. "$envfile"

work=bench/.work/chaos
mkdir -p "$work"
out=bench/results-chaos.md
marker='## smap, ticks, trades and modules under faults'
status=0
silver_md="" other_md=""
if [[ -n $silver_scen ]]; then
	go build -o "$work/silverbench" ./bench/silverbench
	args=(chaos --n "$N" --workdir "$work" --scenarios "$silver_scen")
	[[ $N -ge 200000 ]] && silver_md=$work/silver.md && args+=(--out "$silver_md")
	"$work/silverbench" "${args[@]}" || status=$?
fi
if [[ -n $other_scen ]]; then
	go build -o "$work/sluice" ./cmd/sluice
	go build -o "$work/chaos" ./bench/chaos
	args=(--sluice "$work/sluice" --workdir "$work" --scale "$SCALE" --scenarios "$other_scen")
	[[ $SCALE == 1 ]] && other_md=$work/other.md && args+=(--out "$other_md")
	"$work/chaos" "${args[@]}" || status=$?
fi
# The results file: each section from this run when it ran at the default
# size, else the one already there.
if [[ -n $silver_md || -n $other_md ]]; then
	old_silver=$work/old-silver.md old_other=$work/old-other.md
	: >"$old_silver"
	: >"$old_other"
	if [[ -f $out ]]; then
		awk -v m="$marker" 'index($0, m) == 1 { exit } { print }' "$out" >"$old_silver"
		awk -v m="$marker" 'index($0, m) == 1 { on = 1 } on { print }' "$out" >"$old_other"
	fi
	{
		if [[ -n $silver_md ]]; then cat "$silver_md"; echo; else cat "$old_silver"; fi
		if [[ -n $other_md ]]; then cat "$other_md"; else cat "$old_other"; fi
	} | cat -s >"$out.tmp"
	mv "$out.tmp" "$out"
fi
exit "$status"
