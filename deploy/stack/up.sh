#!/usr/bin/env bash
# deploy/stack/up.sh — start the local stack of real services on loopback.
#
#   bash deploy/stack/up.sh [kafka|postgres|redis|minio ...]     (default: all)
#
# Services and endpoints (state under ${SLUICE_STACK_DIR:-$HOME/.sluice-stack}):
#   kafka     Apache Kafka (KRaft, 1 node) from Maven Central  127.0.0.1:19092 (controller 19093)
#   postgres  PostgreSQL (distribution package)                127.0.0.1:15432 db/user/password sluice
#   redis     Redis (distribution package)                     127.0.0.1:16379
#   minio     MinIO (built with go install; optional)          127.0.0.1:19000 (console 19001)
# With no service named it also installs chromium (apt), for the console's browser tests.
#
# What it does, for each requested service: installs what is missing (apt-get,
# once, only when a package is missing; the Kafka classpath with maven; MinIO with
# go install), starts it unless it already runs, waits until it is healthy, and
# runs its idempotent setup (database and role, bucket). Running it again is a
# no-op that re-checks health. Then it writes the env file and prints its path as
# the only line on stdout (progress goes to stderr).
#
# Using the env file (the one convention): source the path that env.sh prints,
#   . "$(bash deploy/stack/env.sh)"
# which exports SLUICE_STACK=real, KAFKA_BROKERS, DATABASE_URL, REDIS_URL and
# S3_ENDPOINT/S3_ACCESS_KEY/S3_SECRET_KEY/S3_BUCKET/S3_SECURE. Variables of a
# service that is not running are exported empty (S3_ENDPOINT empty means: use
# the local-directory object store).
#
# Exit status: non-zero, with a one-line reason and the service's log tail on
# stderr, when a requested service fails to provision, start or become healthy.
# MinIO that cannot be built is a warning, not a failure.
# Stop everything with: bash deploy/stack/down.sh
set -euo pipefail

# shellcheck source=deploy/stack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

services=("$@")
((${#services[@]})) || services=("${STACK_SERVICES[@]}")
stack_check_names "${services[@]}" || exit 2
mkdir -p "$STACK_DIR"
total_start=$SECONDS
stack_log "stack dir $STACK_DIR; services: ${services[*]}"

# One apt-get for everything that is missing.
apt_specs=()
for svc in "${services[@]}"; do
	read -r -a specs <<<"$("${svc}_apt")"
	apt_specs+=("${specs[@]}")
done
# The console's browser tests (internal/console) drive Debian's chromium
# headless: the whole stack (no service named, as CI runs it) installs it too.
(($#)) || apt_specs+=("chromium:chromium")
((${#apt_specs[@]} == 0)) || stack_timed "provision apt packages" stack_apt_ensure "${apt_specs[@]}" || {
	stack_log "FAILED: could not install the packages the stack needs"
	exit 1
}

# stack_up_service SVC: provision, start unless running, wait healthy, set up.
# Returns 0 (up), 2 (optional service unavailable) or 1 (failed).
stack_up_service() {
	local svc=$1 rc=0 t
	stack_timed "$svc: provision" "${svc}_provision" || rc=$?
	((rc == 0)) || return "$rc"
	t=$SECONDS
	if "${svc}_running"; then
		if "${svc}_healthy"; then
			stack_log "$svc: already running and healthy"
		else
			stack_log "$svc: running but not healthy yet, waiting"
			"${svc}_wait" || return 1
		fi
	else
		stack_log "$svc: starting"
		"${svc}_start" || return 1
		"${svc}_wait" || return 1
		stack_log "$svc: started in $((SECONDS - t))s"
	fi
	"${svc}_ready" || return 1
}

failed=()
for svc in "${services[@]}"; do
	rc=0
	stack_up_service "$svc" || rc=$?
	case $rc in
	0) ;;
	2) stack_log "$svc: skipped (not available on this machine)" ;;
	*) failed+=("$svc") ;;
	esac
done

stack_write_env
stack_log "env file written: $STACK_ENV_FILE (total $((SECONDS - total_start))s)"
if ((${#failed[@]})); then
	stack_log "FAILED: ${failed[*]} did not come up healthy (see the errors above; logs under $STACK_DIR)"
	exit 1
fi
echo "$STACK_ENV_FILE"
