#!/usr/bin/env bash
# E2B SDK compatibility suite: the unmodified e2b and @e2b/code-interpreter
# packages from npm (pinned in package-lock.json) drive a live sandboxd through
# its E2B facade, with Node's test runner (test/*.test.js).
#
#   SANDBOXD_URL=http://127.0.0.1:7070 SANDBOXD_TOKEN=... test/compat/e2b/run.sh [node --test args]
#
# The daemon under test:
#   - SANDBOXD_URL and SANDBOXD_TOKEN set (the harness): that daemon. Its token
#     goes to the SDK as E2B_API_KEY in its e2b_<hex> form (sent as X-API-KEY);
#     the URL serves as both E2B_API_URL and E2B_SANDBOX_URL.
#   - SANDBOXD_URL unset: run.sh starts bin/sandboxd from this checkout (`make
#     build`; SANDBOXD_BIN names another binary) on a free 127.0.0.1 port
#     with a throwaway data dir, and at exit kills every sandbox it lists and
#     stops it.
# Either way, sandboxes this run created are swept at exit (sweep.js).
#
# Extra arguments go to `node --test`, e.g. --test-name-pattern='PTY'.
# COMPAT_CONCURRENCY bounds how many test files run at once (default 3).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cd "$here"

log() { printf 'compat/e2b: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v node >/dev/null || die "node is not installed (make setup installs it)"

# shellcheck source=../daemon.sh
source "$here/../daemon.sh"
compat_install

export COMPAT_RUN_ID="${COMPAT_RUN_ID:-run-$(date +%s)-$$}"

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	if [[ -n ${E2B_API_URL:-} ]]; then
		if [[ -n $daemon_pid ]]; then
			timeout 90 node sweep.js --all || true
		else
			timeout 90 node sweep.js || true
		fi
	fi
	compat_stop_registry
	compat_stop_daemon "$status"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A daemon started here gets a short create replay window, so that the
# dedupe tests see an unadopted create destroyed soon (an external daemon
# keeps its own; COMPAT_E2B_REPLAY_WINDOW_MS tells the tests which).
if [[ -z ${SANDBOXD_URL:-} ]]; then
	export SANDBOXD_E2B_REPLAY_WINDOW="${SANDBOXD_E2B_REPLAY_WINDOW:-5s}"
	export COMPAT_E2B_REPLAY_WINDOW_MS="${COMPAT_E2B_REPLAY_WINDOW_MS:-5000}"
fi
compat_start_daemon e2b
[[ ${1:-} == --bench ]] || compat_start_registry

# The SDK's configuration. No E2B_DEBUG (it skips the API), no E2B_DOMAIN
# (E2B_SANDBOX_URL decides where envd traffic goes).
unset E2B_DEBUG E2B_DOMAIN E2B_ACCESS_TOKEN
export E2B_API_URL="${SANDBOXD_URL%/}"
export E2B_SANDBOX_URL="${SANDBOXD_URL%/}"
# The key in its e2b_<hex> form (what `sbx token e2b-key` prints), which
# every SDK version accepts; the daemon maps it back to the token.
E2B_API_KEY=e2b_$(printf %s "$SANDBOXD_TOKEN" | od -An -v -tx1 | tr -d ' \n')
export E2B_API_KEY

if [[ ${1:-} == --bench ]]; then
	shift
	log "benchmarking against $E2B_API_URL"
	node bench.mjs "$@"
	exit
fi

log "running against $E2B_API_URL (run $COMPAT_RUN_ID)"
node --test --test-concurrency="${COMPAT_CONCURRENCY:-3}" --test-timeout=600000 "$@" test/*.test.js
