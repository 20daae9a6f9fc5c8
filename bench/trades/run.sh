#!/usr/bin/env bash
# make bench-trades: the weekly digest aggregation of the trades pipeline on a
# deterministic corpus of trade.scored records, by the Kafka Streams 4.4.0
# peer (bench/trades/peer) and by sluice's trades-digest, one after the
# other on the same corpus topic and broker; then the seed's SLOs.
#
#   bash bench/trades/run.sh                      # 2 000 users × 600 trades = 1.2 M records
#   TRADES_USERS=100 bash bench/trades/run.sh     # a quick run (60 000 records)
#   TRADES_OUT=bench/results-trades-peer.md ...   # also append the results there
#
# For each implementation: records/s from the RUNNING (peer) or ready
# (sluice: /readyz) state to the last of the users × 8 digests (the peer's
# output topic; sluice's digests table), the digests checked exactly against
# trades.Aggregate (tradesbench check, checkdb), changelog bytes on the
# broker (DescribeLogDirs), peak RSS (VmHWM), CPU time, and the restore time
# after kill -9 with the local state wiped (start → RUNNING or ready again,
# the changelog replayed). sluice's trades-digest runs as its own process
# (tradesbench digest: the service the trades declaration builds, renamed
# with the run's prefix, settle 1 s and a 1 s emission timer since the
# corpus's weeks are closed; grace stays 1 h). Set TRADES_SIDES=sluice (or
# peer) to run one side only. Then (TRADES_SLO=0 skips it) the seed's
# SLOs on the same stack: tradesbench slo (20 synthetic imports of 500
# trades since 30 days ago, command produced → import.completed; 100 cached
# sims) and, on sluice's side, tradesbench latency (20 digest.request →
# digest.ready).
# Needs KAFKA_BROKERS (the stack's env file is sourced when unset), Go, Java
# 17 and Maven; DATABASE_URL for sluice's side. The run's topics, groups
# (prefix bench-trades-<time>), Postgres schema and the peer's local state
# are deleted at the end unless TRADES_KEEP=1; the logs and sluice's CPU
# profile stay in the run's temporary directory.
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=bench/stackenv.sh
. bench/stackenv.sh
bench_stack_env bench-trades KAFKA_BROKERS

USERS=${TRADES_USERS:-2000}
SIDES=${TRADES_SIDES:-peer sluice}
OUT=${TRADES_OUT:-}
RUN=bench-trades-$(date -u +%Y%m%dT%H%M%S)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/$RUN.XXXX")
BIN=$WORK/tradesbench
PEER_DIR=bench/trades/peer
DIGESTS=$((USERS * 8))
SP=$RUN.                                   # sluice's topic and group prefix
SCHEMA=bt_$(echo "${RUN#bench-trades-}" | tr 'A-Z' 'a-z')
CORPUS=${SP}trades.bias                    # the corpus: both sides read it
now_ms() { date +%s%3N; }
log() { echo "bench-trades: $*" >&2; }
has() { [[ " $SIDES " == *" $1 "* ]]; }
# cpu_s PID: user+system CPU seconds of PID so far.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f", ($14 + $15) / hz}' "/proc/$1/stat"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

go build -o "$BIN" ./bench/trades/tradesbench
if has peer; then
	log "building the Kafka Streams peer (Maven)"
	if [[ -d $HOME/.m2/repository/org/apache/kafka/kafka-streams/4.4.0 ]]; then
		(cd "$PEER_DIR" && mvn -B -q -o package)
	else
		(cd "$PEER_DIR" && mvn -B -q package)
	fi
fi

cleanup() {
	[[ -n ${SL_PID:-} ]] && kill -9 "$SL_PID" 2>/dev/null || true
	[[ -n ${PEER_PID:-} ]] && kill -9 "$PEER_PID" 2>/dev/null || true
	if [[ ${TRADES_KEEP:-0} != 1 ]]; then
		"$BIN" delete --prefix "$RUN" >/dev/null || true
		"$BIN" teardown --prefix "$RUN" --schema "$SCHEMA" || true
		rm -rf "$WORK/peer-state" "$WORK/objects"
		log "deleted the topics and groups $RUN*, the schema $SCHEMA and the local state (TRADES_KEEP=1 keeps them)"
	fi
}
trap cleanup EXIT

load_before=$(loadavg)
log "run $RUN: producing $((USERS * 600)) trade.scored records to $CORPUS"
produced=$("$BIN" produce --topic "$CORPUS" --users "$USERS")
log "$produced"
records=$((USERS * 600))

if has peer; then
	"$BIN" create --topic "$RUN.peer.digests"
	# peer_start APP_ID STATE_DIR LOG: starts the peer in the background, sets PEER_PID.
	peer_start() {
		java -Xmx1g -cp "$PEER_DIR/target/trades-digest-peer-1.0.jar:$PEER_DIR/target/lib/*" \
			sluice.bench.DigestPeer "$CORPUS" "$RUN.peer.digests" "$1" "$2" >"$3" 2>&1 &
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
	p_load0=$(loadavg)
	log "starting the Kafka Streams peer ($app), log $peerlog"
	start_ms=$(now_ms)
	peer_start "$app" "$state" "$peerlog"
	run_ms=$(running_ms "$peerlog" 1)
	done_ms=$("$BIN" wait --topic "$RUN.peer.digests" --count "$DIGESTS" --timeout 60m)
	p_rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$PEER_PID/status")
	p_cpu=$(cpu_s "$PEER_PID")
	p_load1=$(loadavg)
	p_elapsed=$((done_ms - run_ms))
	p_rate=$((records * 1000 / (p_elapsed > 0 ? p_elapsed : 1)))
	p_start=$((run_ms - start_ms))
	log "peer: $records records in $p_elapsed ms after RUNNING ($p_rate records/s), start → RUNNING $p_start ms, peak RSS $((p_rss_kb / 1024)) MiB, CPU $p_cpu s"
	p_check=$("$BIN" check --topic "$RUN.peer.digests" --users "$USERS" 2>&1) && p_check_ok=yes || p_check_ok=no
	log "peer check: $p_check"
	sleep 35 # one commit interval (30 s): the last cache flush reaches the changelog
	p_changelog=$("$BIN" logsize --prefix "$app")
	log "peer changelog: $p_changelog"

	log "kill -9 the peer, wipe its local state, restart: restore from the changelog"
	kill -9 "$PEER_PID"
	wait "$PEER_PID" 2>/dev/null || true
	rm -rf "$state"
	restart_ms=$(now_ms)
	peer_start "$app" "$state" "$WORK/peer-restore.log"
	rerun_ms=$(running_ms "$WORK/peer-restore.log" 1)
	p_restored=$(grep -o 'digest-agg/[0-9]* records [0-9]*' "$WORK/peer-restore.log" | awk '{s += $3} END {print s + 0}')
	p_restore=$((rerun_ms - restart_ms))
	# The replay itself: first restore start → last restore end. Before it, the
	# group waits for the killed member's session to time out (45 s default).
	at_ms() { grep "\"event\":\"$1\"" "$WORK/peer-restore.log" | sed 's/.*"at_ms":\([0-9]*\).*/\1/' | sort -n; }
	first=$(at_ms restoring | head -1)
	last=$(at_ms restored | tail -1)
	p_replay=$((${last:-0} - ${first:-0}))
	log "peer restore: start → RUNNING $p_restore ms (replay $p_replay ms), $p_restored window-store records replayed"
	kill "$PEER_PID"
	wait "$PEER_PID" 2>/dev/null || true
	PEER_PID=
fi

if has sluice; then
	log "sluice: schema $SCHEMA, topics and groups ${SP}*"
	"$BIN" setup --prefix "$SP" --schema "$SCHEMA"
	mkdir -p "$WORK/objects"
	# sluice_start LOG [FLAGS…]: starts trades-digest in the background, sets SL_PID.
	sluice_start() {
		local logf=$1
		shift
		rm -f "$WORK/addr"
		"$BIN" digest --prefix "$SP" --schema "$SCHEMA" --objects "$WORK/objects" --addr-file "$WORK/addr" "$@" >"$logf" 2>&1 &
		SL_PID=$!
	}
	# sluice_ready: waits until /readyz answers 200 (assigned, store
	# restored); prints the unix ms, then the unix ms of the first poll
	# that saw a partition restoring (the ready time if none did).
	sluice_ready() {
		local RESTORING_MS=
		local i
		for i in $(seq 1 3000); do
			if [[ -s $WORK/addr ]]; then
				local a
				a=$(cat "$WORK/addr")
				if [[ -z $RESTORING_MS ]] && curl -sf "http://$a/metrics" | grep -Eq '^sluice_state_restoring\{[^}]*\} [1-9]'; then
					RESTORING_MS=$(now_ms)
				fi
				if curl -sf -o /dev/null "http://$a/readyz"; then
					local t
					t=$(now_ms)
					echo "$t ${RESTORING_MS:-$t}"
					return 0
				fi
			fi
			if ! kill -0 "$SL_PID" 2>/dev/null; then
				log "sluice's trades-digest exited"
				return 1
			fi
			sleep 0.2
		done
		return 1
	}
	metric() { curl -sf "http://$(cat "$WORK/addr")/metrics" | awk -v m="$1" 'index($0, m) == 1 {s += $NF} END {printf "%.0f", s}'; }

	s_load0=$(loadavg)
	log "starting sluice's trades-digest (log $WORK/sluice.log, CPU profile $WORK/sluice.cpu.pprof)"
	start_ms=$(now_ms)
	sluice_start "$WORK/sluice.log" --cpuprofile "$WORK/sluice.cpu.pprof"
	read -r ready_ms _ < <(sluice_ready)
	done_ms=$("$BIN" waitdb --schema "$SCHEMA" --count "$DIGESTS" --timeout 60m)
	s_rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$SL_PID/status")
	s_cpu=$(cpu_s "$SL_PID")
	s_load1=$(loadavg)
	s_elapsed=$((done_ms - ready_ms))
	s_rate=$((records * 1000 / (s_elapsed > 0 ? s_elapsed : 1)))
	s_start=$((ready_ms - start_ms))
	log "sluice: $records records in $s_elapsed ms after ready ($s_rate records/s), start → ready $s_start ms, peak RSS $((s_rss_kb / 1024)) MiB, CPU $s_cpu s"
	sleep 5 # the last timer tick's window-state writes
	s_check=$("$BIN" checkdb --prefix "$SP" --schema "$SCHEMA" --users "$USERS" 2>&1) && s_check_ok=yes || s_check_ok=no
	log "sluice check: $s_check"
	s_changelog=$("$BIN" logsize --prefix "${SP}trades.digest.state" --suffix state)
	log "sluice changelog: $s_changelog"
	kill -INT "$SL_PID" # writes the CPU profile
	wait "$SL_PID" 2>/dev/null || true

	log "sluice: restart after a clean stop (the store restored from the changelog)"
	restart_ms=$(now_ms)
	sluice_start "$WORK/sluice-2.log"
	read -r clean_ms restoring_ms < <(sluice_ready)
	s_clean=$((clean_ms - restart_ms))
	s_clean_replay=$((clean_ms - restoring_ms))
	log "sluice: start → ready $s_clean ms after a clean stop (replay ≥ $s_clean_replay ms seen)"

	log "kill -9 sluice's trades-digest, restart: restore from the changelog"
	kill -9 "$SL_PID"
	wait "$SL_PID" 2>/dev/null || true
	restart_ms=$(now_ms)
	sluice_start "$WORK/sluice-restore.log"
	read -r rerun_ms restoring_ms < <(sluice_ready)
	s_restore=$((rerun_ms - restart_ms))
	s_replay=$((rerun_ms - restoring_ms))
	s_restored=$(metric sluice_state_restore_records_total)
	s_restore_rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$SL_PID/status")
	log "sluice restore: start → ready $s_restore ms (replay ≈ $s_replay ms, from the first poll that saw a partition restoring), $s_restored changelog records read, peak RSS $((s_restore_rss_kb / 1024)) MiB"

	log "SLO: digest.request → digest.ready, 20 users one at a time (the restored process)"
	slo_load=$(loadavg)
	s_latency=$("$BIN" latency --prefix "$SP" --users "$USERS" --n 20 --timeout 60s 2>&1) && s_latency_ok=yes || s_latency_ok=no
	log "digest latency: $s_latency"
	kill -INT "$SL_PID"
	wait "$SL_PID" 2>/dev/null || true
	SL_PID=
	if [[ -s $WORK/sluice.cpu.pprof ]]; then
		go tool pprof -top -nodecount=25 "$BIN" "$WORK/sluice.cpu.pprof" >"$WORK/sluice.cpu.top" 2>/dev/null || true
		log "CPU profile of the first run: $WORK/sluice.cpu.top"
	fi
fi

if [[ ${TRADES_SLO:-1} == 1 ]]; then
	has sluice || "$BIN" setup --prefix "$SP" --schema "$SCHEMA"
	log "SLOs: 20 synthetic imports (500 trades since 30 days ago) one at a time, then 10 uncached and 100 cached sims"
	slo_load0=$(loadavg)
	slo=$("$BIN" slo --prefix "$SP" --schema "$SCHEMA" --imports 20 --sims 100 2>"$WORK/slo.log") && slo_ok=yes || slo_ok=no
	slo_load1=$(loadavg)
	log "SLOs ($slo_ok): $slo"
fi
load_after=$(loadavg)

if [[ -n $OUT ]]; then
	{
		echo
		echo "### Run $RUN ($USERS users, $records records, $DIGESTS digests)"
		echo
		echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); load average at the start $load_before, at the end $load_after (shared with other work)."
		echo
		echo "| measure | Kafka Streams 4.4.0 peer | sluice trades-digest |"
		echo "| --- | --- | --- |"
		echo "| load average (1, 5, 15 min) when the side started → when its last digest was out | ${p_load0:-} → ${p_load1:-} | ${s_load0:-} → ${s_load1:-} |"
		echo "| records/s (RUNNING / ready → last digest) | ${p_rate:-} (${records} in ${p_elapsed:-} ms) | ${s_rate:-} (${records} in ${s_elapsed:-} ms) |"
		echo "| CPU time of the process until the last digest | ${p_cpu:-} s | ${s_cpu:-} s |"
		echo "| start → RUNNING / ready (empty state) | ${p_start:-} ms | ${s_start:-} ms |"
		echo "| digests equal to trades.Aggregate | ${p_check_ok:-}: \`${p_check:-}\` | ${s_check_ok:-}: \`${s_check:-}\` |"
		echo "| changelog bytes | \`${p_changelog:-}\` | \`${s_changelog:-}\` |"
		echo "| peak RSS (VmHWM) | $((${p_rss_kb:-0} / 1024)) MiB (-Xmx1g) | $((${s_rss_kb:-0} / 1024)) MiB |"
		echo "| restore after kill -9 (peer: local state wiped; sluice keeps none): start → RUNNING / ready, incl. the dead member's 45 s session timeout | ${p_restore:-} ms | ${s_restore:-} ms (peak RSS $((${s_restore_rss_kb:-0} / 1024)) MiB) |"
		echo "| of which the changelog replay | ${p_replay:-} ms, ${p_restored:-} window-store records | ≈ ${s_replay:-} ms, ${s_restored:-} changelog records |"
		echo "| restart after a clean stop: start → ready | – | ${s_clean:-} ms |"
		echo
		echo "SLO digest ≤ 5 s per user: digest.request → digest.ready, 20 users one at a time, on the restored trades-digest holding the whole corpus (load average ${slo_load:-}): ${s_latency_ok:-}: \`${s_latency:-}\`"
		echo
		echo "SLO import ≤ 60 s p95 and cached sim ≤ 1 s p95 (load average ${slo_load0:-} → ${slo_load1:-}): ${slo_ok:-}: \`${slo:-}\`"
	} >>"$OUT"
	log "results appended to $OUT"
fi
if [[ ${TRADES_SLO:-1} == 1 ]]; then [[ $slo_ok == yes ]]; fi
if has peer; then [[ $p_check_ok == yes ]]; fi
if has sluice; then [[ $s_check_ok == yes ]]; fi
