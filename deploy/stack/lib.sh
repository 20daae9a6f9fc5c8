# shellcheck shell=bash disable=SC2034 # the constants are used by services/*.sh
# deploy/stack/lib.sh — shared helpers of the local real-service stack.
#
# Sourced (never executed) by up.sh, down.sh and env.sh. It defines the stack
# layout, the fixed loopback ports, logging, provisioning (apt / maven / go),
# background-process management with pid files, health waiting and the env file.
# Each service lives in deploy/stack/services/<name>.sh and only defines hooks;
# everything generic is here. The hooks of service <name>:
#   <name>_apt        prints CMD:PACKAGE specs for stack_apt_ensure
#   <name>_provision  installs the rest (maven, go install); 0 ok, 2 optional
#                     service unavailable (skipped), other = failure
#   <name>_running    true when the process this stack started is alive
#   <name>_start      starts it in the background (port must be free)
#   <name>_healthy    one quick health probe
#   <name>_wait       waits (stack_wait_healthy) until healthy, log tail on failure
#   <name>_ready      idempotent setup after health (database, bucket)
#   <name>_stop       stops it; a no-op when not running
#   <name>_env        prints its `export ...` line for the env file
#
# All state lives under STACK_DIR (${SLUICE_STACK_DIR:-$HOME/.sluice-stack}):
#   <STACK_DIR>/env                 the source-able env file (see up.sh)
#   <STACK_DIR>/<service>/...       data, config, logs and pid file per service

STACK_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STACK_DIR="${SLUICE_STACK_DIR:-$HOME/.sluice-stack}"
STACK_ENV_FILE="$STACK_DIR/env"
# Order matters: up.sh starts in this order, down.sh stops in reverse.
STACK_SERVICES=(kafka postgres redis minio)

# Loopback ports. 9092 is left free for the embedded demo broker (kfake).
# SLUICE_STACK_PORT_OFFSET shifts them all, for a second, private stack next
# to this one (make chaos runs one under ~/.sluice-chaos at +10000, so that
# restarting its services disturbs nobody).
STACK_PORT_OFFSET=${SLUICE_STACK_PORT_OFFSET:-0}
KAFKA_PORT=$((19092 + STACK_PORT_OFFSET))
KAFKA_CONTROLLER_PORT=$((19093 + STACK_PORT_OFFSET))
PG_PORT=$((15432 + STACK_PORT_OFFSET))
REDIS_PORT=$((16379 + STACK_PORT_OFFSET))
MINIO_PORT=$((19000 + STACK_PORT_OFFSET))
MINIO_CONSOLE_PORT=$((19001 + STACK_PORT_OFFSET))

# Test credentials (loopback only, never used outside this stack).
PG_USER=sluice PG_PASSWORD=sluice PG_DB=sluice
MINIO_USER=sluice MINIO_PASSWORD=sluicesecret MINIO_BUCKET=sluice

# Seconds a service may take to become healthy after its start.
STACK_HEALTH_TIMEOUT="${SLUICE_STACK_HEALTH_TIMEOUT:-90}"

stack_log() { printf '%s [stack] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# stack_fail REASON [LOGFILES]: one-line reason, then the tail of each log file
# (LOGFILES is a ':'-separated list; missing or empty files are skipped), on stderr.
# Returns 1 so callers can `stack_fail ...; return` or `|| exit`.
stack_fail() {
	local reason=$1 logfile logfiles=()
	printf '%s [stack] ERROR: %s\n' "$(date -u +%H:%M:%S)" "$reason" >&2
	IFS=: read -r -a logfiles <<<"${2:-}"
	for logfile in "${logfiles[@]}"; do
		[[ -n $logfile && -s $logfile ]] || continue
		printf -- '----- last 30 lines of %s -----\n' "$logfile" >&2
		tail -n 30 "$logfile" >&2
		printf -- '----- end of %s -----\n' "$logfile" >&2
	done
	return 1
}

stack_have() { command -v "$1" >/dev/null 2>&1; }

# stack_timed LABEL CMD...: runs CMD, logs how long it took (also on failure).
stack_timed() {
	local label=$1 start=$SECONDS rc=0
	shift
	"$@" || rc=$?
	stack_log "$label: $((SECONDS - start))s$([[ $rc -eq 0 ]] || echo " (failed, exit $rc)")"
	return "$rc"
}

# --- provisioning -----------------------------------------------------------

STACK_APT_UPDATED=0
# Seconds apt-get waits for a lock held by another apt (apt-daily, unattended-upgrades).
STACK_APT_LOCK_TIMEOUT="${SLUICE_STACK_APT_LOCK_TIMEOUT:-600}"
STACK_APT_LOCK_POLL=5

# stack_apt LOGFILE APT-GET-ARGS...: runs apt-get (as root, through sudo -n when
# needed) with its output in LOGFILE, retrying transient download errors. A
# lock held by another apt is waited for up to STACK_APT_LOCK_TIMEOUT seconds:
# DPkg::Lock::Timeout covers only the dpkg lock, while `apt-get update` also
# takes /var/lib/apt/lists/lock and downloads take /var/cache/apt/archives/lock,
# and on those apt-get fails at once ("Could not get lock").
stack_apt() {
	local logfile=$1 start=$SECONDS waited=0 sudo=()
	shift
	[[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
	while true; do
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q \
			-o DPkg::Lock::Timeout="$STACK_APT_LOCK_TIMEOUT" -o Acquire::Retries=3 "$@" >"$logfile" 2>&1 && return 0
		grep -q 'Could not get lock' "$logfile" && ((SECONDS - start < STACK_APT_LOCK_TIMEOUT)) || return 1
		((waited)) || stack_log "apt-get $1: $(grep -m1 -o 'Could not get lock.*' "$logfile"); waiting up to ${STACK_APT_LOCK_TIMEOUT}s"
		waited=1
		sleep "$STACK_APT_LOCK_POLL"
	done
}

# stack_apt_ensure CMD:PACKAGE...: installs each PACKAGE whose CMD (a command name
# or an absolute path) is missing. apt-get update runs at most once per up.sh, and
# only when something is missing. Waits for the apt locks held by another apt.
stack_apt_ensure() {
	local spec cmd pkg missing=()
	for spec in "$@"; do
		cmd=${spec%%:*} pkg=${spec#*:}
		if [[ $cmd == /* ]]; then [[ -x $cmd ]] && continue; else stack_have "$cmd" && continue; fi
		missing+=("$pkg")
	done
	((${#missing[@]})) || return 0
	if [[ $(id -u) -ne 0 ]] && ! stack_have sudo; then
		stack_fail "missing packages ${missing[*]} and not root (install them, then rerun)"
		return
	fi
	mkdir -p "$STACK_DIR"
	if ((STACK_APT_UPDATED == 0)); then
		stack_log "apt-get update (missing: ${missing[*]})"
		stack_apt "$STACK_DIR/apt-update.log" update ||
			{ stack_fail "apt-get update failed" "$STACK_DIR/apt-update.log"; return; }
		STACK_APT_UPDATED=1
	fi
	stack_log "apt-get install ${missing[*]}"
	stack_apt "$STACK_DIR/apt-install.log" install -y --no-install-recommends "${missing[@]}" ||
		stack_fail "apt-get install ${missing[*]} failed" "$STACK_DIR/apt-install.log"
}

# --- processes ----------------------------------------------------------------

# stack_alive PID: the process exists and is not a zombie waiting to be reaped.
stack_alive() {
	local state
	kill -0 "$1" 2>/dev/null || return 1
	state=$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ $state != Z && $state != X ]]
}

# stack_pid PIDFILE MARKER: prints the pid recorded in PIDFILE when that process is
# alive and its command line contains MARKER (guards against a recycled pid).
stack_pid() {
	local pidfile=$1 marker=$2 pid
	[[ -s $pidfile ]] || return 1
	read -r pid <"$pidfile" || true
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	stack_alive "$pid" || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$marker" || return 1
	echo "$pid"
}

# stack_rotate_log FILE...: moves each FILE to FILE.prev, so that a failure report
# (stack_fail's log tail) shows only the current start.
stack_rotate_log() {
	local f
	for f in "$@"; do [[ ! -e $f ]] || mv -f "$f" "$f.prev"; done
}

# stack_start_bg PIDFILE LOGFILE CMD...: starts CMD detached (own session, stdin
# closed, nohup) appending stdout+stderr to LOGFILE; the pid of CMD itself lands
# in PIDFILE (written by the child before exec, so it is right even if setsid forks).
stack_start_bg() {
	local pidfile=$1 logfile=$2
	shift 2
	rm -f "$pidfile"
	printf '\n==== %s start: %s\n' "$(date -u +%FT%TZ)" "$*" >>"$logfile"
	# shellcheck disable=SC2016 # $$ and "$@" belong to the child shell
	nohup setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" >>"$logfile" 2>&1 </dev/null &
	local i
	for i in $(seq 50); do [[ -s $pidfile ]] && return 0; sleep 0.1; done
	stack_fail "process did not start: $*" "$logfile"
}

# stack_stop_pid NAME PIDFILE MARKER [TIMEOUT]: SIGTERM, wait, then SIGKILL.
stack_stop_pid() {
	local name=$1 pidfile=$2 marker=$3 timeout=${4:-30} pid i
	if ! pid=$(stack_pid "$pidfile" "$marker"); then
		rm -f "$pidfile"
		stack_log "$name: not running"
		return 0
	fi
	stack_log "$name: stopping pid $pid"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < timeout * 10; i++)); do
		stack_alive "$pid" || break
		sleep 0.1
	done
	if stack_alive "$pid"; then
		stack_log "$name: still alive after ${timeout}s, SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		sleep 0.5
	fi
	rm -f "$pidfile"
}

# stack_port_open PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
# shellcheck disable=SC2016 # $0 belongs to the child shell
stack_port_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null; }

# stack_wait_healthy NAME LOGFILES PIDFILE MARKER CHECK...: polls CHECK (a command)
# until it succeeds. Fails fast when the process (PIDFILE/MARKER; "" to skip) died,
# or after STACK_HEALTH_TIMEOUT seconds; either way with the log tail.
stack_wait_healthy() {
	local name=$1 logfile=$2 pidfile=$3 marker=$4 start=$SECONDS
	shift 4
	while true; do
		if "$@" >/dev/null 2>&1; then
			stack_log "$name: healthy after $((SECONDS - start))s"
			return 0
		fi
		if [[ -n $pidfile ]] && ! stack_pid "$pidfile" "$marker" >/dev/null; then
			stack_fail "$name exited during startup (health check: $*)" "$logfile"
			return
		fi
		if ((SECONDS - start >= STACK_HEALTH_TIMEOUT)); then
			stack_fail "$name not healthy after ${STACK_HEALTH_TIMEOUT}s (health check: $*)" "$logfile"
			return
		fi
		sleep 1
	done
}

# stack_port_free_or_fail NAME PORT...: before a start, refuses ports held by a
# process this stack does not know (e.g. a stack under another SLUICE_STACK_DIR).
stack_port_free_or_fail() {
	local name=$1 port
	shift
	for port in "$@"; do
		if stack_port_open "$port"; then
			stack_fail "$name: port 127.0.0.1:$port is already in use by a process this stack did not start ($(stack_port_owner "$port"))"
			return
		fi
	done
}

stack_port_owner() {
	stack_have ss || { echo "unknown owner"; return; }
	ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'users:(.*)' | head -1 || echo "unknown owner"
}

# --- services -----------------------------------------------------------------

# shellcheck source=/dev/null
for _svc in "${STACK_SERVICES[@]}"; do source "$STACK_SRC/services/$_svc.sh"; done
unset _svc

# stack_check_names NAME...: every NAME must be a known service.
stack_check_names() {
	local n
	for n in "$@"; do
		[[ " ${STACK_SERVICES[*]} " == *" $n "* ]] ||
			{ stack_fail "unknown service '$n' (known: ${STACK_SERVICES[*]})"; return; }
	done
}

# stack_write_env: writes STACK_ENV_FILE from the services that are running now;
# the variables of a service that is not running are exported empty, so sourcing
# the file never points a test at a dead endpoint.
stack_write_env() {
	local tmp="$STACK_ENV_FILE.tmp.$$" svc
	{
		echo "# Written by deploy/stack (up.sh/down.sh) at $(date -u +%FT%TZ). Source it: . \"$STACK_ENV_FILE\""
		echo "export SLUICE_STACK=real"
		echo "export SLUICE_STACK_DIR=$STACK_DIR"
		echo "export SLUICE_STACK_PORT_OFFSET=$STACK_PORT_OFFSET"
		for svc in "${STACK_SERVICES[@]}"; do
			if "${svc}_running" && "${svc}_healthy"; then
				"${svc}_env"
			else
				echo "# $svc: not running"
				"${svc}_env" | sed -E 's/=[^ ]*/=/g'
			fi
		done
	} >"$tmp"
	mv "$tmp" "$STACK_ENV_FILE"
}
