#!/usr/bin/env bash
# deploy/stack/env.sh — print the path of the stack's env file written by up.sh.
#
#   . "$(bash deploy/stack/env.sh)"
#
# Exits 1 (with a message on stderr) when up.sh has not written it yet.
set -euo pipefail

# shellcheck source=deploy/stack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ -f $STACK_ENV_FILE ]] || {
	stack_log "ERROR: $STACK_ENV_FILE does not exist; run: bash deploy/stack/up.sh"
	exit 1
}
echo "$STACK_ENV_FILE"
