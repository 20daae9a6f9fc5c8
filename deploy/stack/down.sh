#!/usr/bin/env bash
# deploy/stack/down.sh — stop the local stack started by up.sh.
#
#   bash deploy/stack/down.sh [kafka|postgres|redis|minio ...]   (default: all)
#
# Stops only processes this stack started (pid files under the stack dir,
# pg_ctl for PostgreSQL), in reverse start order. Idempotent: stopping a stopped
# service is a no-op. Data stays under the stack dir, so the next up.sh is fast;
# remove ${SLUICE_STACK_DIR:-$HOME/.sluice-stack} for a clean slate.
set -euo pipefail

# shellcheck source=deploy/stack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

services=("$@")
((${#services[@]})) || services=("${STACK_SERVICES[@]}")
stack_check_names "${services[@]}" || exit 2
[[ -d $STACK_DIR ]] || { stack_log "no stack dir $STACK_DIR: nothing to stop"; exit 0; }

rc=0
for ((i = ${#STACK_SERVICES[@]} - 1; i >= 0; i--)); do
	svc=${STACK_SERVICES[i]}
	[[ " ${services[*]} " == *" $svc "* ]] || continue
	"${svc}_stop" || { stack_log "ERROR: $svc: stop failed"; rc=1; }
done
# Keep the env file truthful: stopped services get empty variables.
[[ ! -f $STACK_ENV_FILE ]] || stack_write_env
exit "$rc"
