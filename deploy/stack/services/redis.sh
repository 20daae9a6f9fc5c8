# shellcheck shell=bash
# Redis from the distribution packages (Debian: redis-server, 7.0 on bookworm),
# loopback only, no persistence. Sourced by lib.sh; see lib.sh for the hook contract.
#
# Layout under <stack>/redis: redis.log (stdout/stderr), redis.pid. The server runs
# in the foreground under stack_start_bg (which detaches it and writes the pid
# file) rather than with --daemonize, so every service is started the same way.

REDIS_HOME="$STACK_DIR/redis"
REDIS_PIDFILE="$REDIS_HOME/redis.pid"
REDIS_LOG="$REDIS_HOME/redis.log"
REDIS_MARKER="redis-server"

redis_apt() { echo "redis-server:redis-server" "redis-cli:redis-tools"; }

redis_provision() { mkdir -p "$REDIS_HOME"; }

redis_running() { stack_pid "$REDIS_PIDFILE" "$REDIS_MARKER" >/dev/null; }

redis_start() {
	stack_port_free_or_fail redis "$REDIS_PORT" || return
	stack_rotate_log "$REDIS_LOG"
	stack_start_bg "$REDIS_PIDFILE" "$REDIS_LOG" \
		redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize no \
		--dir "$REDIS_HOME" --save '' --appendonly yes --appendfsync everysec --databases 16
}

redis_healthy() { [[ $(timeout 5 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; }

redis_wait() { stack_wait_healthy redis "$REDIS_LOG" "$REDIS_PIDFILE" "$REDIS_MARKER" redis_healthy; }

redis_ready() { :; }

redis_stop() { stack_stop_pid redis "$REDIS_PIDFILE" "$REDIS_MARKER"; }

redis_env() { echo "export REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0"; }
