#!/usr/bin/env bash
# Starts (or stops, with --stop) a 3-node sandboxd cluster on loopback, the
# one `make cluster` leaves running (docs/cluster.md). Data in
# .sandboxd-cluster/n1..n3 of the checkout; each node runs an embedded etcd
# member (TLS with client certificates: n1's init makes the cluster CA, and
# n2, n3 join through n1's API, which signs their etcd certificates).
#   cluster.sh          start the nodes that are not running (init/join the ones never started)
#   cluster.sh --stop   stop them (SIGTERM, then wait)
#
# node  API             TLS             host ports   etcd client/peer
# n1    127.0.0.1:7071  127.0.0.1:7444  41000-41099  23791/23801
# n2    127.0.0.1:7072  127.0.0.1:7445  41100-41199  23792/23802
# n3    127.0.0.1:7073  127.0.0.1:7446  41200-41299  23793/23803
#
# SANDBOXD_CLUSTER_DIR puts the data elsewhere, SANDBOXD_CLUSTER_PORTS adds
# an offset to every listening port above and SANDBOXD_CLUSTER_HOSTPORTS
# moves the host ports' first (scripts/test-compat.sh runs its own cluster
# beside one `make cluster` left running), and
# SANDBOXD_CLUSTER_NODE_PREFIX replaces the "n" of the node ids (n1..n3) so
# that two clusters on one engine never take each other's containers for
# their own. Extra arguments of every node's daemon: SANDBOXD_CLUSTER_ARGS;
# SANDBOXD_CLUSTER_OCI_DIR gives node n `--oci-dir $SANDBOXD_CLUSTER_OCI_DIR/nN`
# (for --engine oci, the default, whose nodes each need their own); unset, it
# is a directory of this cluster's own on the btrfs file system
# scripts/setup-oci.sh mounts (disk limits enforced there), when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."

root=${SANDBOXD_CLUSTER_DIR:-.sandboxd-cluster}
off=${SANDBOXD_CLUSTER_PORTS:-0}
prefix=${SANDBOXD_CLUSTER_NODE_PREFIX:-n}
nodes=(1 2 3)
bin=bin/sandboxd

dir()  { echo "$root/n$1"; }
api()  { echo "127.0.0.1:$((7070 + off + $1))"; }
tls()  { echo "127.0.0.1:$((7443 + off + $1))"; }
hostports() { local lo=$((${SANDBOXD_CLUSTER_HOSTPORTS:-41000} + ($1 - 1) * 100)); echo "$lo-$((lo + 99))"; }
etcd_client() { echo "127.0.0.1:$((23790 + off + $1))"; }
etcd_peer()   { echo "127.0.0.1:$((23800 + off + $1))"; }

# pid of node $1 when it runs, else nothing.
running() {
  local pidfile; pidfile="$(dir "$1")/sandboxd.pid"
  [ -f "$pidfile" ] || return 1
  local pid; pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

stop() {
  local pids=()
  for n in "${nodes[@]}"; do
    local pid
    if pid=$(running "$n"); then
      kill -TERM "$pid"
      pids+=("$n:$pid")
    fi
  done
  for np in "${pids[@]}"; do
    local n=${np%%:*} pid=${np#*:}
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "node n$n (pid $pid) ignored SIGTERM for 30 s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$(dir "$n")/sandboxd.pid"
    echo "node n$n stopped"
  done
  [ ${#pids[@]} -gt 0 ] || echo "no node of the cluster is running"
}

if [ "${1:-}" = "--stop" ]; then stop; exit 0; fi
[ $# -eq 0 ] || { echo "usage: $0 [--stop]" >&2; exit 2; }
read -r -a extra <<<"${SANDBOXD_CLUSTER_ARGS:-}"
if [ -z "${SANDBOXD_CLUSTER_OCI_DIR:-}" ] && [[ " ${SANDBOXD_CLUSTER_ARGS:-} " != *" --engine docker "* ]] &&
  mountpoint -q /var/lib/sandboxd-oci/root 2>/dev/null; then
  SANDBOXD_CLUSTER_OCI_DIR=/var/lib/sandboxd-oci/root/cluster-$(realpath -m "$root" | sha256sum | cut -c1-12)
fi
[ -x "$bin" ] || { echo "$bin is missing: run make build (or make cluster)" >&2; exit 1; }

# ready waits for node $1's /readyz.
ready() {
  local n=$1
  for _ in $(seq 900); do
    if curl -fsS "http://$(api "$n")/readyz" >/dev/null 2>&1; then return 0; fi
    running "$n" >/dev/null || break
    sleep 0.1
  done
  echo "node n$n did not become ready; last log lines:" >&2
  tail -20 "$(dir "$n")/sandboxd.log" >&2
  return 1
}

start() {
  local n=$1 d; d=$(dir "$n")
  local own=()
  [ -z "${SANDBOXD_CLUSTER_OCI_DIR:-}" ] || own=(--oci-dir "$SANDBOXD_CLUSTER_OCI_DIR/n$n")
  nohup "$bin" --data-dir "$d" --listen "$(api "$n")" --tls-listen "$(tls "$n")" \
    --host-ports "$(hostports "$n")" ${extra[@]+"${extra[@]}"} ${own[@]+"${own[@]}"} >>"$d/sandboxd.log" 2>&1 &
  echo $! >"$d/sandboxd.pid"
}

summary() {
  for n in "${nodes[@]}"; do
    local d; d=$(dir "$n")
    echo "n$n  http://$(api "$n")  pid $(running "$n")  admin token: $d/admin.token  log: $d/sandboxd.log"
  done
}

up=0
for n in "${nodes[@]}"; do if running "$n" >/dev/null; then up=$((up + 1)); fi; done
if [ "$up" -eq ${#nodes[@]} ]; then
  echo "the cluster is running already; nothing to do (stop it with make cluster-stop):"
  summary
  exit 0
fi

mkdir -p "$root"
for n in "${nodes[@]}"; do
  d=$(dir "$n")
  if running "$n" >/dev/null; then continue; fi
  if [ ! -f "$d/cluster.json" ]; then
    # A node never started: a node id (a DNS label) first, then init or join.
    mkdir -p "$d"
    [ -f "$d/node-id" ] || echo "$prefix$n" >"$d/node-id"
    if [ "$n" -eq 1 ]; then
      "$bin" cluster init --data-dir "$d" --etcd-client "$(etcd_client 1)" --etcd-peer "$(etcd_peer 1)" >/dev/null
    else
      # etcd refuses a new member for a few seconds after the last joined.
      for try in $(seq 30); do
        if out=$("$bin" cluster join --data-dir "$d" --secret-file "$(dir 1)/cluster.secret" \
            --via-api "http://$(api 1)" --etcd-client "$(etcd_client "$n")" --etcd-peer "$(etcd_peer "$n")" 2>&1); then
          break
        fi
        [ "$try" -lt 30 ] || { echo "node n$n could not join: $out" >&2; exit 1; }
        sleep 1
      done
    fi
    echo "node n$n: $(if [ "$n" -eq 1 ]; then echo "new cluster"; else echo "joined"; fi)"
    start "$n"
    ready "$n"
  else
    start "$n"
  fi
done
# Restarted members need each other for a quorum: wait for all at the end.
for n in "${nodes[@]}"; do ready "$n"; done

summary
cat <<MSG

Any node answers any call, e.g.:
  SBX_API_URL=http://$(api 1) SBX_TOKEN=\$(cat $(dir 1)/admin.token) bin/sbx create --image sandboxd/busybox:latest
  bin/sandboxd cluster members --data-dir $(dir 1)

Stop it with: make cluster-stop (or scripts/cluster.sh --stop)
MSG
