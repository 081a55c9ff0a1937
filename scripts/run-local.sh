#!/usr/bin/env bash
# Starts (or stops, with --stop) the local daemon that `make run` leaves running.
#   run-local.sh DATA_DIR LISTEN
#   run-local.sh --stop DATA_DIR
set -euo pipefail
cd "$(dirname "$0")/.."

stop() {
  local pidfile="$1/sandboxd.pid"
  [ -f "$pidfile" ] || return 0
  local pid; pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$pidfile"
}

if [ "${1:-}" = "--stop" ]; then stop "$2"; echo "sandboxd stopped"; exit 0; fi

data_dir=$1 listen=$2
# Sandbox network is on: the policy is fail-closed (a sandbox has none
# unless its create asks, and then only what its policy allows: never the
# host, link-local addresses or other sandboxes). SANDBOXD_SANDBOX_NETWORK=false
# turns it off.
network=${SANDBOXD_SANDBOX_NETWORK:-true}
case $network in true | false) ;; *) echo "run-local: SANDBOXD_SANDBOX_NETWORK=$network: want true or false" >&2; exit 2 ;; esac
mkdir -p "$data_dir"
# The engine-free runtime (the default engine) keeps its images and
# sandboxes on the btrfs file system scripts/setup-oci.sh mounts, where
# their disk limits are enforced: a directory of this data dir's own
# there. Not when SANDBOXD_OCI_DIR (the daemon's --oci-dir) or
# SANDBOXD_ENGINE=docker says otherwise, or there is no such mount (the
# daemon's default then, <data-dir>/oci, says at start that disk limits
# are not enforced).
oci=()
oci_root=/var/lib/sandboxd-oci/root
if [ -z "${SANDBOXD_OCI_DIR:-}" ] && [ "${SANDBOXD_ENGINE:-oci}" = oci ] && mountpoint -q "$oci_root" 2>/dev/null; then
  oci=(--oci-dir "$oci_root/local-$(cd "$data_dir" && pwd | sha256sum | cut -c1-12)")
fi
stop "$data_dir"
nohup bin/sandboxd --data-dir "$data_dir" --listen "$listen" --sandbox-network="$network" ${oci[@]+"${oci[@]}"} >>"$data_dir/sandboxd.log" 2>&1 &
echo $! >"$data_dir/sandboxd.pid"

# The E2B hint names the data dir only when it is not the checkout's.
e2b_key="bin/sbx token e2b-key"
[ "$(cd "$data_dir" && pwd)" = "$PWD/.sandboxd" ] || e2b_key="SBX_DATA_DIR=$data_dir $e2b_key"

if [ "$network" = true ]; then
  net_line="Sandbox network: on. A sandbox has outbound network only when its create asks
(sbx create --network or --allow CIDR/host; an E2B create asks unless allowInternetAccess
is false), and never reaches the host, link-local addresses or other sandboxes.
SANDBOXD_SANDBOX_NETWORK=false make run starts the daemon with none."
else
  net_line="Sandbox network: off. No sandbox has network, whatever its create asks."
fi

for _ in $(seq 100); do
  if curl -fsS "http://$listen/healthz" >/dev/null 2>&1; then
    cat <<MSG
sandboxd is running on http://$listen (pid $(cat "$data_dir/sandboxd.pid"), log: $data_dir/sandboxd.log)
$net_line
Native creates expire after 1h unless they say otherwise (sbx create --timeout 0: never).

Try next:
  bin/sbx create --image sandboxd/base:bookworm --name hello
  bin/sbx exec hello -- uname -a
  bin/sbx shell hello

From the E2B SDKs (any version; the key is the admin token in its e2b_ form):
  export E2B_API_URL=http://$listen E2B_SANDBOX_URL=http://$listen
  export E2B_API_KEY=\$($e2b_key)

Stop it with: make stop
MSG
    exit 0
  fi
  kill -0 "$(cat "$data_dir/sandboxd.pid")" 2>/dev/null || break
  sleep 0.1
done
echo "sandboxd did not become healthy; last log lines:" >&2
tail -20 "$data_dir/sandboxd.log" >&2
[ "$network" = false ] || echo "(if it could not set up the sandbox network's firewall on this host, SANDBOXD_SANDBOX_NETWORK=false make run starts it without)" >&2
exit 1
