#!/usr/bin/env bash
# Runs the SDK compatibility suites under test/compat/*: each is a Node project
# with its SDK versions pinned in a committed lockfile, run with Node's test
# runner against a live sandboxd (on the daemon's default engine, the
# engine-free runtime; images from the real Docker engine). Each suite runs
# twice: against a single daemon, then against node 1 of a throwaway 3-node
# cluster (scripts/cluster.sh), whose creates are placed on all three nodes
# (cluster mode, docs/cluster.md). SANDBOXD_COMPAT_CLUSTER=0 skips the second.
# SANDBOXD_COMPAT_ENGINE=docker runs every daemon on the Docker engine
# and SANDBOXD_COMPAT_RUNTIME=gvisor makes gVisor their default runtime
# (unset: the daemon's defaults, --engine oci and runc-class), e.g.
#   SANDBOXD_COMPAT_ENGINE=docker SANDBOXD_COMPAT_RUNTIME=gvisor scripts/test-compat.sh
set -euo pipefail
cd "$(dirname "$0")/.."

shopt -s nullglob
suites=(test/compat/*/package.json)
[ ${#suites[@]} -gt 0 ] || exit 0
for pkg in "${suites[@]}"; do
  dir=$(dirname "$pkg")
  echo "== compat: $dir"
  "$dir/run.sh"
done

[ "${SANDBOXD_COMPAT_CLUSTER:-1}" != 0 ] || exit 0

# The cluster: its own data dir, ports 3000 above `make cluster`'s, host
# ports from 30000 and node ids of its own, so it runs beside one (and
# below the kernel's ephemeral ports, from 32768); the suites' sandbox
# budget (as their single daemon has) and a short E2B replay window (as
# run.sh gives the daemon it starts).
export SANDBOXD_CLUSTER_DIR SANDBOXD_CLUSTER_PORTS=${SANDBOXD_COMPAT_CLUSTER_PORTS:-3000}
export SANDBOXD_CLUSTER_HOSTPORTS=${SANDBOXD_COMPAT_CLUSTER_HOSTPORTS:-30000}
export SANDBOXD_CLUSTER_NODE_PREFIX="compat$$n" SANDBOXD_CLUSTER_ARGS="--cpu-budget 64000 --registry-allow 127.0.0.1"
SANDBOXD_CLUSTER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-compat-cluster.XXXXXX")
# The registry the nodes share templates through (--registry): a loopback
# docker-registry of the run's own (test/compat/daemon.sh).
log() { printf 'compat: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# shellcheck source=../test/compat/daemon.sh
source test/compat/daemon.sh
# The engine and default runtime of every node, as of the single daemon
# (SANDBOXD_COMPAT_ENGINE, SANDBOXD_COMPAT_RUNTIME: compat_engine_args).
SANDBOXD_CLUSTER_ARGS+=" $(compat_engine_args)"
SANDBOXD_CLUSTER_OCI_DIR=$(compat_oci_dir cluster)
export SANDBOXD_CLUSTER_OCI_DIR
stop_cluster() {
  local status=$?
  # What the suites left on each node (a node keeps its sandboxes when it
  # stops; under --engine oci no container label finds them afterwards).
  for n in 1 2 3; do
    [ -s "$SANDBOXD_CLUSTER_DIR/n$n/admin.token" ] || continue
    compat_destroy_all "http://127.0.0.1:$((7070 + n + SANDBOXD_CLUSTER_PORTS))" "$(<"$SANDBOXD_CLUSTER_DIR/n$n/admin.token")"
  done
  scripts/cluster.sh --stop >/dev/null || true
  compat_stop_registry
  if [ "$status" -ne 0 ]; then
    for n in 1 2 3; do
      echo "--- node $n log (tail)"; tail -20 "$SANDBOXD_CLUSTER_DIR/n$n/sandboxd.log" 2>/dev/null || true
    done
  fi
  # What a failed run left: this cluster's containers, and the images its
  # nodes made, by their node label.
  for n in 1 2 3; do
    ids=$(docker ps -aq --filter "label=sandboxd.node=$SANDBOXD_CLUSTER_NODE_PREFIX$n")
    [ -z "$ids" ] || docker rm -f $ids >/dev/null || true
    ids=$(docker images -q --filter "label=sandboxd.node=$SANDBOXD_CLUSTER_NODE_PREFIX$n")
    [ -z "$ids" ] || docker rmi -f $ids >/dev/null 2>&1 || true
  done
  compat_remove "$SANDBOXD_CLUSTER_DIR"
  [ -z "$SANDBOXD_CLUSTER_OCI_DIR" ] || compat_remove "$SANDBOXD_CLUSTER_OCI_DIR"
  exit "$status"
}
trap stop_cluster EXIT
compat_start_registry
[ -z "${COMPAT_REGISTRY:-}" ] || SANDBOXD_CLUSTER_ARGS+=" --registry $COMPAT_REGISTRY"
echo "== compat: starting a 3-node cluster (data in $SANDBOXD_CLUSTER_DIR)"
SANDBOXD_E2B_REPLAY_WINDOW=5s scripts/cluster.sh >/dev/null
for pkg in "${suites[@]}"; do
  dir=$(dirname "$pkg")
  echo "== compat: $dir against a 3-node cluster"
  SANDBOXD_URL="http://127.0.0.1:$((7071 + SANDBOXD_CLUSTER_PORTS))" \
    SANDBOXD_TOKEN=$(<"$SANDBOXD_CLUSTER_DIR/n1/admin.token") \
    COMPAT_E2B_REPLAY_WINDOW_MS=5000 COMPAT_CLUSTER=1 "$dir/run.sh"
done
