#!/usr/bin/env bash
# setup-gvisor.sh — make gVisor (runsc) available to the Docker engine as the
# runtime "runsc", for sandboxes created with runtime "gvisor".
#
# Idempotent and fast when it is there (one `docker info`). Otherwise, as root:
#   1. installs Debian's runsc when it is missing;
#   2. adds a "runsc" entry to the engine's runtimes in /etc/docker/daemon.json,
#      keeping whatever else the file holds;
#   3. asks dockerd to reload its configuration (SIGHUP; runtimes are
#      reloadable) and waits until the engine lists the runtime.
#
# The runtime's arguments:
#   --platform=ptrace  works without KVM (this kind of machine has none);
#   --network=none     gVisor's own network stack is not set up: a gVisor
#                      sandbox has loopback only (sandboxd refuses network for
#                      it); on a nested host runsc cannot use the engine's
#                      network namespace anyway;
#   --host-uds=create  lets the agent inside create its socket in the
#                      bind-mounted socket directory, where the daemon dials it.
#
# Environment: SANDBOXD_GVISOR=off skips all of it (gVisor is then refused by
# the daemon with a clear error).
set -euo pipefail

log() { printf 'setup-gvisor: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ ${SANDBOXD_GVISOR:-on} == off ]] && { log "skipped (SANDBOXD_GVISOR=off)"; exit 0; }
export PATH="$PATH:/usr/sbin:/usr/bin:/sbin"
DAEMON_JSON=/etc/docker/daemon.json
ARGS='["--platform=ptrace","--network=none","--host-uds=create"]'

registered() {
	[[ $(docker info --format '{{with index .Runtimes "runsc"}}{{json .Args}}{{end}}' 2>/dev/null) == "$ARGS" ]]
}

# Registered and written down (so that it survives an engine restart).
if registered && grep -q '"runsc"' "$DAEMON_JSON" 2>/dev/null; then
	log "runsc already registered with the engine"
	exit 0
fi
[[ $(id -u) -eq 0 ]] || die "runsc is not registered with the engine and not root: cannot set it up"

if ! command -v runsc >/dev/null 2>&1; then
	log "installing runsc from Debian"
	export DEBIAN_FRONTEND=noninteractive
	apt=(apt-get -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends)
	apt-cache show runsc >/dev/null 2>&1 || "${apt[@]}" update >&2
	"${apt[@]}" install runsc >&2
fi
runsc_path=$(command -v runsc)

mkdir -p "$(dirname "$DAEMON_JSON")"
python3 - "$DAEMON_JSON" "$runsc_path" "$ARGS" <<'PY'
import json, os, sys
path, runsc, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
cfg = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        cfg = json.load(f)
cfg.setdefault("runtimes", {})["runsc"] = {"path": runsc, "runtimeArgs": args}
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(cfg, f, indent=2)
    f.write("\n")
os.replace(tmp, path)
PY

pid=$(pgrep -xo dockerd) || die "dockerd is not running (run scripts/setup-docker.sh first)"
kill -HUP "$pid"
for _ in $(seq 1 80); do
	registered && { log "runsc registered ($runsc_path $ARGS)"; exit 0; }
	sleep 0.25
done
die "dockerd did not list runsc after a reload; see its log"
