#!/usr/bin/env bash
# make bench-trades: the weekly digest aggregation of the trades pipeline on a
# deterministic corpus of trade.scored records, by the Kafka Streams 4.4.0
# peer (bench/trades/peer) and — once it exists — by sluice's trades-digest.
#
#   bash bench/trades/run.sh                      # 2 000 users × 600 trades = 1.2 M records
#   TRADES_USERS=100 bash bench/trades/run.sh     # a quick run (60 000 records)
#   TRADES_OUT=bench/results-trades-peer.md ...   # also append the results there
#
# For each implementation: records/s from the RUNNING state to the last of
# the users × 8 digests on the output topic, the digests checked exactly
# against trades.Aggregate (tradesbench check), changelog bytes on the broker
# (DescribeLogDirs), peak RSS (VmHWM), and the restore time after kill -9
# with the local state wiped (start → RUNNING again, the changelog replayed).
# Needs KAFKA_BROKERS (the stack's env file is sourced when unset), Go, Java
# 17 and Maven. The run's topics (prefix bench-trades-<time>) and the peer's
# local state are deleted at the end unless TRADES_KEEP=1; the logs stay in
# the run's temporary directory.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [[ -z ${KAFKA_BROKERS:-} ]]; then
	envfile=$(bash deploy/stack/env.sh 2>/dev/null || true)
	envfile=${envfile:-$HOME/.sluice-stack/env}
	if [[ ! -f $envfile ]]; then
		echo "bench-trades: no KAFKA_BROKERS and no stack env file; run: make stack-up" >&2
		exit 1
	fi
	# shellcheck disable=SC1090
	. "$envfile"
fi

USERS=${TRADES_USERS:-2000}
OUT=${TRADES_OUT:-}
RUN=bench-trades-$(date -u +%Y%m%dT%H%M%S)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/$RUN.XXXX")
BIN=$WORK/tradesbench
PEER_DIR=bench/trades/peer
DIGESTS=$((USERS * 8))
now_ms() { date +%s%3N; }
log() { echo "bench-trades: $*" >&2; }

go build -o "$BIN" ./bench/trades/tradesbench
log "building the Kafka Streams peer (Maven)"
if [[ -d $HOME/.m2/repository/org/apache/kafka/kafka-streams/4.4.0 ]]; then
	(cd "$PEER_DIR" && mvn -B -q -o package)
else
	(cd "$PEER_DIR" && mvn -B -q package)
fi

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
log "run $RUN: producing $((USERS * 600)) trade.scored records"
"$BIN" create --topic "$RUN.peer.digests"
produced=$("$BIN" produce --topic "$RUN.bias" --users "$USERS")
log "$produced"
records=$((USERS * 600))

# peer_start APP_ID STATE_DIR LOG: starts the peer in the background, sets PEER_PID.
peer_start() {
	java -Xmx1g -cp "$PEER_DIR/target/trades-digest-peer-1.0.jar:$PEER_DIR/target/lib/*" \
		sluice.bench.DigestPeer "$RUN.bias" "$RUN.peer.digests" "$1" "$2" >"$3" 2>&1 &
	PEER_PID=$!
}
# running_ms LOG N: the at_ms of the N-th RUNNING state in LOG (waits for it).
running_ms() {
	local i
	for i in $(seq 1 600); do
		local t
		t=$(grep '"state":"RUNNING"' "$1" | sed -n "${2}p" | sed 's/.*"at_ms":\([0-9]*\).*/\1/')
		if [[ -n $t ]]; then
			echo "$t"
			return 0
		fi
		if ! kill -0 "$PEER_PID" 2>/dev/null; then
			log "the peer exited; see $1"
			return 1
		fi
		sleep 1
	done
	return 1
}

app="$RUN-peer"
state=$WORK/peer-state
peerlog=$WORK/peer.log
log "starting the Kafka Streams peer ($app), log $peerlog"
start_ms=$(now_ms)
peer_start "$app" "$state" "$peerlog"
run_ms=$(running_ms "$peerlog" 1)
done_ms=$("$BIN" wait --topic "$RUN.peer.digests" --count "$DIGESTS" --timeout 60m)
rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$PEER_PID/status")
elapsed_ms=$((done_ms - run_ms))
rate=$((records * 1000 / (elapsed_ms > 0 ? elapsed_ms : 1)))
log "peer: $records records in $elapsed_ms ms after RUNNING ($rate records/s), start → RUNNING $((run_ms - start_ms)) ms, peak RSS $((rss_kb / 1024)) MiB"
check=$("$BIN" check --topic "$RUN.peer.digests" --users "$USERS" 2>&1) && check_ok=yes || check_ok=no
log "check: $check"
sleep 35 # one commit interval (30 s): the last cache flush reaches the changelog
changelog=$("$BIN" logsize --prefix "$app")
log "changelog: $changelog"

log "kill -9 the peer, wipe its local state, restart: restore from the changelog"
kill -9 "$PEER_PID"
wait "$PEER_PID" 2>/dev/null || true
rm -rf "$state"
restart_ms=$(now_ms)
peer_start "$app" "$state" "$WORK/peer-restore.log"
rerun_ms=$(running_ms "$WORK/peer-restore.log" 1)
restored=$(grep -o 'digest-agg/[0-9]* records [0-9]*' "$WORK/peer-restore.log" | awk '{s += $3} END {print s + 0}')
restore_ms=$((rerun_ms - restart_ms))
# The replay itself: first restore start → last restore end. Before it, the
# group waits for the killed member's session to time out (45 s default).
at_ms() { grep "\"event\":\"$1\"" "$WORK/peer-restore.log" | sed 's/.*"at_ms":\([0-9]*\).*/\1/' | sort -n; }
first=$(at_ms restoring | head -1)
last=$(at_ms restored | tail -1)
replay_ms=$((${last:-0} - ${first:-0}))
log "restore: start → RUNNING $restore_ms ms (replay $replay_ms ms), $restored window-store records replayed"
kill "$PEER_PID"
wait "$PEER_PID" 2>/dev/null || true
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# Hook: sluice's trades-digest (consumer group trades-digest, input
# trades.bias, changelog trades.digest.state) on the same corpus. Pending
# until the service exists: it is then run with its input topic set to
# $RUN.bias and its digest.ready/digests output read by
# `tradesbench check` (from the objects or the digests table), with the same
# measures (records/s, changelog bytes of trades.digest.state, peak RSS,
# restore time after kill -9).
sluice_status="PENDING: sluice's trades-digest service is not built yet; nothing was run"
log "sluice trades-digest: $sluice_status"

if [[ -n $OUT ]]; then
	{
		echo
		echo "### Run $RUN ($USERS users, $records records, $DIGESTS digests)"
		echo
		echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); load average before $load_before, after $load_after (shared with other work)."
		echo
		echo "| measure | Kafka Streams 4.4.0 peer | sluice trades-digest |"
		echo "| --- | --- | --- |"
		echo "| records/s (RUNNING → last digest on the output topic) | $rate ($records in $elapsed_ms ms) | pending |"
		echo "| start → RUNNING (empty state) | $((run_ms - start_ms)) ms | pending |"
		echo "| digests equal to trades.Aggregate | $check_ok: \`$check\` | pending |"
		echo "| changelog bytes | \`$changelog\` | pending |"
		echo "| peak RSS (VmHWM, -Xmx1g) | $((rss_kb / 1024)) MiB | pending |"
		echo "| restore after kill -9, local state wiped: start → RUNNING (incl. the dead member's 45 s session timeout) | $restore_ms ms | pending |"
		echo "| of which the changelog replay (first restore start → last restore end) | $replay_ms ms, $restored window-store records | pending |"
	} >>"$OUT"
	log "results appended to $OUT"
fi
if [[ ${TRADES_KEEP:-0} != 1 ]]; then
	"$BIN" delete --prefix "$RUN" >/dev/null
	rm -rf "$state"
	log "deleted the topics $RUN* and the peer's state (TRADES_KEEP=1 keeps them)"
fi
[[ $check_ok == yes ]]
