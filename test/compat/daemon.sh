# Sourced by test/compat/*/run.sh: what every SDK suite needs around its
# tests — the pinned SDKs installed, and a daemon under test (the caller's,
# or one started here from bin/ and stopped at exit). Expects log, die and
# $repo from the caller.

# compat_install installs the pinned SDKs when node_modules is missing or
# older than the lockfile.
compat_install() {
	if [[ ! -d node_modules || package-lock.json -nt node_modules || package.json -nt node_modules ]]; then
		log "installing the pinned SDKs (npm ci)"
		npm ci --no-audit --no-fund --loglevel=error
		touch node_modules
	fi
}

daemon_pid="" data_dir="" oci_dir=""

# compat_oci_root is where the runtime of --engine oci keeps its images and
# sandboxes in a compat run: the btrfs file system scripts/setup-oci.sh
# mounts, where disk limits are enforced (SANDBOXD_COMPAT_OCI_ROOT names
# another); nothing when it is missing (the daemon's default, in its data
# dir) or the engine is not oci (unset: the daemon's default, oci).
compat_oci_root() {
	[[ ${SANDBOXD_COMPAT_ENGINE:-oci} == oci ]] || return 0
	local root=${SANDBOXD_COMPAT_OCI_ROOT:-/var/lib/sandboxd-oci/root}
	[[ ! -d $root ]] || echo "$root"
}

# compat_oci_dir NAME makes a fresh directory for one daemon's --oci-dir
# under compat_oci_root and prints it (nothing when there is no root).
compat_oci_dir() {
	local root
	root=$(compat_oci_root)
	[[ -z $root ]] || mktemp -d "$root/compat-$1.XXXXXX"
}

# compat_engine_args prints the daemon flags that choose what runs the
# sandboxes, from the environment: SANDBOXD_COMPAT_ENGINE (--engine:
# docker or oci) and SANDBOXD_COMPAT_RUNTIME (--default-runtime: docker or
# gvisor). Unset, nothing: the daemon's own defaults (the engine-free
# runtime, --engine oci, and runc-class sandboxes). The single daemon and the cluster's nodes (scripts/test-compat.sh)
# both take them.
compat_engine_args() {
	[[ -z ${SANDBOXD_COMPAT_ENGINE:-} ]] || printf -- '--engine %s ' "$SANDBOXD_COMPAT_ENGINE"
	[[ -z ${SANDBOXD_COMPAT_RUNTIME:-} ]] || printf -- '--default-runtime %s ' "$SANDBOXD_COMPAT_RUNTIME"
}

# compat_start_daemon SUITE starts bin/sandboxd (or $SANDBOXD_BIN) on a free
# 127.0.0.1 port with a throwaway data dir when SANDBOXD_URL is unset, waits
# up to 30 s for it, and sets SANDBOXD_URL and SANDBOXD_TOKEN.
compat_start_daemon() {
	if [[ -n ${SANDBOXD_URL:-} ]]; then
		[[ -n ${SANDBOXD_TOKEN:-} ]] || die "SANDBOXD_URL is set but SANDBOXD_TOKEN is not"
		return
	fi
	local daemon="${SANDBOXD_BIN:-$repo/bin/sandboxd}" port
	[[ -x $daemon ]] || die "SANDBOXD_URL is unset and $daemon does not exist; run \`make build\` first"
	port=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close() })')
	data_dir=$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-compat-$1.XXXXXX")
	log "starting $daemon on 127.0.0.1:$port (data in $data_dir)"
	# SANDBOXD_COMPAT_POOL sets the daemon's --pool; unset, the daemon's
	# own default (two idle sandboxes of the default image, as `make run`
	# has), so the SDKs run against pooled and cold creates alike (E2B's
	# dedupe abort case empties the pool for itself). The CPU
	# budget is raised past the default (4 × the host's cores, 1 core a
	# sandbox): the suites run files in parallel, one of them eight creates
	# at once, and their sandboxes sit idle.
	# SANDBOXD_COMPAT_HOSTPORTS (lo-hi) moves its TCP exposures' host ports
	# off the daemon's default range, for runs beside another daemon.
	local -a extra
	read -r -a extra <<<"$(compat_engine_args)"
	[[ -z ${SANDBOXD_COMPAT_HOSTPORTS:-} ]] || extra+=(--host-ports "$SANDBOXD_COMPAT_HOSTPORTS")
	oci_dir=$(compat_oci_dir "$1")
	[[ -z $oci_dir ]] || extra+=(--oci-dir "$oci_dir")
	log "daemon flags: ${extra[*]:-(defaults)}"
	"$daemon" --data-dir "$data_dir" --listen "127.0.0.1:$port" --tls-listen 127.0.0.1:0 \
		--pool "${SANDBOXD_COMPAT_POOL:-}" --cpu-budget 64000 --registry-allow 127.0.0.1 ${extra[@]+"${extra[@]}"} >"$data_dir/sandboxd.log" 2>&1 &
	daemon_pid=$!
	SANDBOXD_URL="http://127.0.0.1:$port"
	for _ in $(seq 300); do # 30 s
		if [[ -s $data_dir/admin.token ]] && curl -fsS --max-time 2 "$SANDBOXD_URL/healthz" >/dev/null 2>&1; then
			break
		fi
		kill -0 "$daemon_pid" 2>/dev/null || die "sandboxd exited during startup"
		sleep 0.1
	done
	curl -fsS --max-time 2 "$SANDBOXD_URL/healthz" >/dev/null 2>&1 || die "sandboxd did not become healthy within 30 s"
	[[ -s $data_dir/admin.token ]] || die "sandboxd is healthy but wrote no $data_dir/admin.token"
	SANDBOXD_TOKEN=$(<"$data_dir/admin.token")
	export SANDBOXD_URL SANDBOXD_TOKEN
}

# compat_destroy_all URL TOKEN destroys, through the native API, every
# sandbox the daemon at URL lists (all owners and states: TOKEN is its
# admin token). Best effort and bounded (90 s). A daemon keeps its
# sandboxes when it stops; under --engine oci they are processes, mounts
# and namespaces of this host, which no container label finds afterwards.
compat_destroy_all() {
	# The token in the environment, not on a command line others can read.
	COMPAT_DESTROY_TOKEN=$2 timeout 90 node --input-type=module - "$1" <<-'JS' || true
		const url = process.argv[2], token = process.env.COMPAT_DESTROY_TOKEN
		const h = { Authorization: `Bearer ${token}` }
		const sig = () => AbortSignal.timeout(30_000)
		const ids = []
		let page = ''
		do {
		  const r = await fetch(`${url}/v1/sandboxes?limit=1000${page ? `&page_token=${page}` : ''}`, { headers: h, signal: sig() })
		  if (!r.ok) throw new Error(`list: ${r.status} ${await r.text()}`)
		  const b = await r.json()
		  ids.push(...b.items.map((s) => s.id))
		  page = b.next_page_token || ''
		} while (page)
		const done = await Promise.allSettled(ids.map(async (id) => {
		  const r = await fetch(`${url}/v1/sandboxes/${id}`, { method: 'DELETE', headers: h, signal: sig() })
		  if (!r.ok && r.status !== 404) throw new Error(`${id}: ${r.status}`)
		}))
		const failed = done.filter((d) => d.status === 'rejected')
		if (ids.length) console.error(`compat: destroyed ${ids.length - failed.length} leftover sandbox(es) at ${url}${failed.length ? `; ${failed.length} failed: ${failed[0].reason}` : ''}`)
	JS
}

# compat_stop_daemon STATUS stops a daemon compat_start_daemon started
# (SIGTERM, then SIGKILL after 10 s), shows its log's tail when STATUS is
# not 0, and removes its data dir.
compat_stop_daemon() {
	[[ -n $daemon_pid ]] || return 0
	compat_destroy_all "$SANDBOXD_URL" "$SANDBOXD_TOKEN"
	kill -TERM "$daemon_pid" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$daemon_pid" 2>/dev/null; then
		log "sandboxd (pid $daemon_pid) did not stop within 10 s; killing it"
		kill -KILL "$daemon_pid" 2>/dev/null || true
	fi
	wait "$daemon_pid" 2>/dev/null || true
	if [[ $1 -ne 0 ]]; then
		log "last lines of the daemon's log:"
		tail -n 30 "$data_dir/sandboxd.log" >&2 || true
	fi
	# The images it made (snapshots, builds) carry its node label.
	local node ids
	node=$(cat "$data_dir/node-id" 2>/dev/null || true)
	if [[ -n $node ]]; then
		ids=$(docker images -q --filter "label=sandboxd.node=$node" 2>/dev/null || true)
		[[ -z $ids ]] || docker rmi -f $ids >/dev/null 2>&1 || true
	fi
	compat_remove "$data_dir"
	[[ -z $oci_dir ]] || compat_remove "$oci_dir"
}

# compat_remove DIR removes a stopped daemon's directory: first the file
# systems it left mounted under it (its volumes, kept mounted across its
# restarts; the overlay of a sandbox that outlived its destroy), innermost
# first, so that rm never deletes through a mount (nor stops at the btrfs
# subvolumes of --engine oci, as rm --one-file-system would).
compat_remove() {
	local m
	while read -r m; do
		umount -l "$m" 2>/dev/null || log "WARNING: could not unmount $m"
	done < <(awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
	rm -rf "$1"
}

registry_pid="" registry_dir=""

# compat_start_registry starts Debian's docker-registry (make setup installs
# it) on a free 127.0.0.1 port with a throwaway storage dir, pushes
# sandboxd/base:bookworm to it under a fresh tag and removes that tag from
# the engine, so a test that names it makes the daemon pull it. It sets
# COMPAT_REGISTRY (host:port) and COMPAT_REGISTRY_IMAGE (the reference);
# without docker-registry it sets neither and the tests that need them skip.
compat_start_registry() {
	command -v docker-registry >/dev/null || { log "docker-registry is not installed: the registry tests skip"; return 0; }
	local port tag
	port=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close() })')
	registry_dir=$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-compat-registry.XXXXXX")
	printf 'version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s/storage\nhttp:\n  addr: 127.0.0.1:%s\n' \
		"$registry_dir" "$port" >"$registry_dir/config.yml"
	docker-registry serve "$registry_dir/config.yml" >"$registry_dir/registry.log" 2>&1 &
	registry_pid=$!
	for _ in $(seq 100); do # 10 s
		curl -fsS --max-time 2 "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && break
		kill -0 "$registry_pid" 2>/dev/null || die "docker-registry exited: $(cat "$registry_dir/registry.log")"
		sleep 0.1
	done
	tag="t$(date +%s)$$"
	COMPAT_REGISTRY="127.0.0.1:$port"
	COMPAT_REGISTRY_IMAGE="$COMPAT_REGISTRY/compat/base:$tag"
	docker tag sandboxd/base:bookworm "$COMPAT_REGISTRY_IMAGE" >/dev/null
	docker push "$COMPAT_REGISTRY_IMAGE" >/dev/null || die "push $COMPAT_REGISTRY_IMAGE to the loopback registry failed"
	docker rmi "$COMPAT_REGISTRY_IMAGE" >/dev/null
	export COMPAT_REGISTRY COMPAT_REGISTRY_IMAGE
	log "loopback registry on $COMPAT_REGISTRY with $COMPAT_REGISTRY_IMAGE"
}

# compat_stop_registry stops the registry compat_start_registry started and
# removes what the daemon pulled from it.
compat_stop_registry() {
	[[ -n $registry_pid ]] || return 0
	kill -TERM "$registry_pid" 2>/dev/null || true
	wait "$registry_pid" 2>/dev/null || true
	docker rmi "$COMPAT_REGISTRY_IMAGE" >/dev/null 2>&1 || true
	rm -rf "$registry_dir"
}
