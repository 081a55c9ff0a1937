#!/usr/bin/env bash
# Daytona SDK compatibility suite: the unmodified @daytonaio/sdk from npm
# (pinned in package-lock.json) drives a live sandboxd through its Daytona
# facade, with Node's test runner (test/*.test.js).
#
#   SANDBOXD_URL=http://127.0.0.1:7070 SANDBOXD_TOKEN=... test/compat/daytona/run.sh [node --test args]
#
# The daemon under test:
#   - SANDBOXD_URL and SANDBOXD_TOKEN set (the harness): that daemon. The SDK
#     gets DAYTONA_API_URL=$SANDBOXD_URL/daytona/api and
#     DAYTONA_API_KEY=$SANDBOXD_TOKEN, nothing else.
#   - SANDBOXD_URL unset: run.sh starts bin/sandboxd from this checkout (`make
#     build`) on a free 127.0.0.1 port with a throwaway data dir, and at exit
#     deletes every sandbox it lists and stops it.
# Either way, sandboxes this run created are swept at exit through the native
# API (sweep.js), in bounded time.
#
# Extra arguments go to `node --test`, e.g. --test-name-pattern='sessions'.
# COMPAT_CONCURRENCY bounds how many test files run at once (default 3).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cd "$here"

log() { printf 'compat/daytona: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v node >/dev/null || die "node is not installed (make setup installs it)"
command -v curl >/dev/null || die "curl is not installed"

# shellcheck source=../daemon.sh
source "$here/../daemon.sh"
compat_install

# Trap: the SDK refuses to start ("endpoint is ambiguous") when DAYTONA_API_URL
# is in the process environment and a dotenv file in the working directory also
# names it. The tests run here, so no such file may exist here.
for f in .env .env.local .env.development .env.development.local .env.production \
	.env.production.local .env.test .env.test.local; do
	if [[ -f $f ]] && grep -Eq '^[[:space:]]*(export[[:space:]]+)?DAYTONA_(API|SERVER)_URL[[:space:]]*[=:]' "$f"; then
		die "$here/$f sets DAYTONA_API_URL or DAYTONA_SERVER_URL; remove it (the SDK would refuse to start)"
	fi
done
# Nothing else may steer the SDK: a dotenv path, the deprecated endpoint
# variable, JWT auth, a target, polling or telemetry switches.
unset DOTENV_CONFIG_PATH DAYTONA_SERVER_URL DAYTONA_JWT_TOKEN DAYTONA_ORGANIZATION_ID DAYTONA_TARGET \
	DAYTONA_USE_DEPRECATED_POLLING DAYTONA_OTEL_ENABLED DAYTONA_EXPERIMENTAL_OTEL_ENABLED

export COMPAT_RUN_ID="${COMPAT_RUN_ID:-run-$(date +%s)-$$}"

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	if [[ -n ${SANDBOXD_URL:-} && -n ${SANDBOXD_TOKEN:-} ]]; then
		export SANDBOXD_URL SANDBOXD_TOKEN
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

compat_start_daemon daytona
[[ ${1:-} == --bench ]] || compat_start_registry

# The SDK's whole configuration: the endpoint and the key, from the process
# environment, exactly as a team switching to sandboxd would set them.
export DAYTONA_API_URL="${SANDBOXD_URL%/}/daytona/api"
export DAYTONA_API_KEY="$SANDBOXD_TOKEN"

log "running against $DAYTONA_API_URL (run $COMPAT_RUN_ID)"
if [[ ${1:-} == --bench ]]; then
	shift
	SANDBOXD_URL="${SANDBOXD_URL%/}" SANDBOXD_TOKEN="$SANDBOXD_TOKEN" node bench.mjs "$@"
	exit
fi
node --test --test-concurrency="${COMPAT_CONCURRENCY:-3}" --test-timeout=600000 "$@" test/*.test.js
