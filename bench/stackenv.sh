# shellcheck shell=bash
# bench/stackenv.sh — sourced by the bench scripts (run from the repository
# root). bench_stack_env NAME VAR...: when any VAR is unset, sources the local
# stack's env file (deploy/stack, `make stack-up`); without one, exits 1
# with a message naming NAME.
bench_stack_env() {
	local name=$1 v missing=""
	shift
	for v in "$@"; do [[ -n ${!v:-} ]] || missing+="${missing:+/}$v"; done
	[[ -n $missing ]] || return 0
	local envfile
	envfile=$(bash deploy/stack/env.sh 2>/dev/null || true)
	envfile=${envfile:-$HOME/.sluice-stack/env}
	if [[ ! -f $envfile ]]; then
		echo "$name: no $missing and no stack env file; run: make stack-up" >&2
		exit 1
	fi
	# shellcheck disable=SC1090
	. "$envfile"
}
