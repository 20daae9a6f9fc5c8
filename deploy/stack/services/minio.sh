# shellcheck shell=bash
# MinIO built from source with `go install` (no prebuilt binary can be fetched),
# one drive under <stack>/minio/data, loopback only. Sourced by lib.sh; see lib.sh
# for the hook contract.
#
# MinIO is optional: when it cannot be built, minio_provision returns 2, up.sh
# skips it with a warning and the env file leaves S3_ENDPOINT empty (the code then
# uses the local-directory object store). Layout under <stack>/minio: data/,
# minio.log, minio.pid, build.log.
#
# SLUICE_MINIO_BIN overrides the binary; SLUICE_MINIO_VERSION the module version
# built (default: what @latest resolved to when this was written; "latest" works).

MINIO_HOME="$STACK_DIR/minio"
MINIO_PIDFILE="$MINIO_HOME/minio.pid"
MINIO_LOG="$MINIO_HOME/minio.log"
MINIO_MARKER="minio server"
MINIO_VERSION="${SLUICE_MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"

minio_apt() { echo "curl:curl"; }

minio_bin() {
	if [[ -n ${SLUICE_MINIO_BIN:-} ]]; then echo "$SLUICE_MINIO_BIN"; return; fi
	if stack_have go && [[ -x $(go env GOPATH)/bin/minio ]]; then echo "$(go env GOPATH)/bin/minio"; return; fi
	command -v minio || echo "minio"
}

minio_provision() {
	mkdir -p "$MINIO_HOME/data"
	MINIO_BIN=$(minio_bin)
	[[ -x $MINIO_BIN ]] && return 0
	if ! stack_have go; then
		stack_log "WARNING: minio: no minio binary and no go toolchain to build one; MinIO skipped, S3_ENDPOINT stays empty"
		return 2
	fi
	stack_log "minio: go install github.com/minio/minio@$MINIO_VERSION (several minutes; log: $MINIO_HOME/build.log)"
	# pkg@version builds outside any module, so the repo's go.mod is never touched.
	if ! (cd "$MINIO_HOME" && CGO_ENABLED=0 go install -trimpath "github.com/minio/minio@$MINIO_VERSION") \
		>"$MINIO_HOME/build.log" 2>&1; then
		stack_fail "minio: go install github.com/minio/minio@$MINIO_VERSION failed" "$MINIO_HOME/build.log" || true
		stack_log "WARNING: MinIO skipped, S3_ENDPOINT stays empty"
		return 2
	fi
	MINIO_BIN="$(go env GOPATH)/bin/minio"
}

minio_running() { stack_pid "$MINIO_PIDFILE" "$MINIO_MARKER" >/dev/null; }

minio_start() {
	stack_port_free_or_fail minio "$MINIO_PORT" "$MINIO_CONSOLE_PORT" || return
	stack_rotate_log "$MINIO_LOG"
	# Credentials go through the environment, not the logged command line.
	MINIO_ROOT_USER="$MINIO_USER" MINIO_ROOT_PASSWORD="$MINIO_PASSWORD" MINIO_UPDATE=off \
		stack_start_bg "$MINIO_PIDFILE" "$MINIO_LOG" "$MINIO_BIN" server "$MINIO_HOME/data" --quiet \
		--address "127.0.0.1:$MINIO_PORT" --console-address "127.0.0.1:$MINIO_CONSOLE_PORT"
}

minio_healthy() { curl -sf --max-time 5 "http://127.0.0.1:$MINIO_PORT/minio/health/live" >/dev/null; }

minio_wait() { stack_wait_healthy minio "$MINIO_LOG" "$MINIO_PIDFILE" "$MINIO_MARKER" minio_healthy; }

# minio_ready: creates the bucket when missing (S3 PUT Bucket signed by curl's
# SigV4 support; 409 means it already exists). The liveness probe answers before
# the object layer is initialised, so a 503 (XMinioServerNotInitialized) or no
# answer is retried until STACK_HEALTH_TIMEOUT; any other code fails at once.
minio_ready() {
	local code start=$SECONDS
	while :; do
		code=$(curl -s --max-time 10 -o "$MINIO_HOME/bucket.out" -w '%{http_code}' -X PUT \
			--aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_USER:$MINIO_PASSWORD" \
			"http://127.0.0.1:$MINIO_PORT/$MINIO_BUCKET") || code=000
		[[ $code == 200 || $code == 409 ]] && return 0
		if [[ $code != 503 && $code != 000 ]] || ((SECONDS - start >= STACK_HEALTH_TIMEOUT)); then
			stack_fail "minio: creating bucket $MINIO_BUCKET answered HTTP $code" "$MINIO_HOME/bucket.out"
			return
		fi
		sleep 0.5
	done
}

minio_stop() { stack_stop_pid minio "$MINIO_PIDFILE" "$MINIO_MARKER"; }

minio_env() {
	echo "export S3_ENDPOINT=127.0.0.1:$MINIO_PORT S3_ACCESS_KEY=$MINIO_USER S3_SECRET_KEY=$MINIO_PASSWORD S3_BUCKET=$MINIO_BUCKET S3_SECURE=false"
}
