#!/usr/bin/env bash
# setup-docker.sh — make sure a Docker engine answers on this machine.
#
# Idempotent and fast when everything is there (one `docker info`). On a fresh
# Debian machine (as root, no systemd needed) it:
#   1. installs Debian's docker.io when dockerd is missing (apt-get update only
#      when the package is not known to apt yet);
#   2. starts dockerd in the background when it is not running (systemctl when
#      systemd is PID 1, otherwise nohup), logging to $SANDBOXD_DOCKERD_LOG;
#      if dockerd dies at start (typically: iptables unusable in a nested
#      sandbox) it retries once without networking setup, which is fine for us
#      because sandboxes run with NetworkMode none unless asked;
#   3. waits until `docker info` answers (bounded by $SANDBOXD_DOCKER_WAIT
#      seconds, default 60) and fails loudly with the log tail otherwise.
#
# Disk limits. Every sandbox has a disk limit enforced by the kernel, which the
# engine can do with the btrfs storage driver (a qgroup per container) or with
# overlay2 on XFS mounted with pquota. This kernel offers neither XFS project
# quotas nor ext4's, so a dockerd this script starts keeps its data root on a
# btrfs file system in a sparse loop file of its own
# ($SANDBOXD_ENGINE_DIR/btrfs.img, mounted on $SANDBOXD_ENGINE_DIR/docker) and
# uses the btrfs driver. An engine that is already running is left as it is:
# the daemon says at start whether it can enforce disk limits there.
#
# Environment:
#   SANDBOXD_DOCKERD_LOG   dockerd log file (default /var/log/sandboxd-dockerd.log)
#   SANDBOXD_DOCKER_WAIT   seconds to wait for the engine (default 60)
#   SANDBOXD_ENGINE_DIR    where the btrfs loop file and its mount live
#                          (default /var/lib/sandboxd-engine)
#   SANDBOXD_ENGINE_GB     size of the loop file in GiB when it is first made
#                          (default: 60% of the free space, between 8 and 64)
#   SANDBOXD_ENGINE_BTRFS  0 starts dockerd on its default data root instead
set -euo pipefail

log() { printf 'setup-docker: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

DOCKERD_LOG=${SANDBOXD_DOCKERD_LOG:-/var/log/sandboxd-dockerd.log}
WAIT_S=${SANDBOXD_DOCKER_WAIT:-60}
start_ts=$(date +%s%N)
elapsed_ms() { echo $(( ($(date +%s%N) - start_ts) / 1000000 )); }

# Debian's docker.io puts its client in /usr/bin; a newer client may already be
# in /usr/local/bin. Either talks to the engine (API version negotiation).
export PATH="$PATH:/usr/sbin:/usr/bin:/sbin"

engine_up() { command -v docker >/dev/null 2>&1 && docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

# Disk limits are the qgroup limits of the containers' subvolumes, counted
# by one of two kinds of btrfs quotas:
#   - simple quotas (kernel 6.7+): an extent counts toward the subvolume
#     that wrote it, once, when it is written and when it is freed; a
#     sandbox's limit is what it writes, its image's shared extents are
#     the image's. Counting never stops, and dropping a removed subvolume
#     costs the kernel nothing more than without quotas.
#   - full qgroups (older kernels): every extent is counted toward every
#     subvolume that references it, by walking its back references. The
#     kernel stops counting (marks the qgroups inconsistent) when the
#     engine removes a container's qgroup before its extents are dropped,
#     until a rescan (the daemon rescans: internal/runtime/docker/qgroup.go),
#     and btrfs-cleaner spends a core for many minutes after a few hundred
#     removals, which made every container start take seconds.
# So the file system this script made for the engine gets simple quotas
# where the kernel has them. Switching from full qgroups drops every
# qgroup and its limit, so it is done only while no qgroup has a limit (no
# sized container exists); otherwise full qgroups stay, with a warning.

# quota_ctl MNT CMD...: BTRFS_IOC_QUOTA_CTL on MNT with each command in
# turn (linux/btrfs.h: 1 enable, 2 disable, 4 enable simple quotas).
# Debian 12's btrfs-progs (6.2) predates simple quotas, so the ioctl is made
# from perl (perl-base is essential in Debian).
quota_ctl() {
	perl -e 'use Fcntl; my $d = shift;
		sysopen(my $fh, $d, O_RDONLY | O_DIRECTORY) or die "open $d: $!\n";
		for my $cmd (@ARGV) { ioctl($fh, 0xC0109428, pack("QQ", $cmd, 0)) or die "btrfs quota ctl $cmd on $d: $!\n" }' "$@"
}

# btrfs_quotas MNT [own]: quotas on MNT. With "own" (the file system this
# script made) simple quotas where the kernel has them; otherwise, and on
# file systems of the operator's, full qgroups, on and consistent (a file
# system whose qgroups are inconsistent enforces no limit until a rescan).
# Idempotent; a failure is logged, not fatal (the driver still tries).
btrfs_quotas() {
	local mnt=$1 own=${2:-} qdir mode limited
	qdir=/sys/fs/btrfs/$(findmnt -n -o UUID --target "$mnt" 2>/dev/null)/qgroups
	mode=$(cat "$qdir/mode" 2>/dev/null || true)
	[[ -z $mode && -d $qdir ]] && mode=qgroup # kernels before 6.7 have no mode file
	if [[ $own == own && -e /sys/fs/btrfs/features/simple_quota ]]; then
		case ${mode:-disabled} in
		squota) return 0 ;;
		disabled)
			quota_ctl "$mnt" 4 && { log "btrfs simple quotas enabled on $mnt"; return 0; }
			;;
		*)
			# A listing that fails counts as limits: never drop them blind.
			# On a running engine, only while it has no container at all.
			local listing
			if listing=$(btrfs qgroup show -r --raw "$mnt" 2>/dev/null); then
				limited=$(awk 'NR > 2 && $4 != "none" { n++ } END { print n + 0 }' <<<"$listing")
			else
				limited="unknown (the qgroup listing failed)"
			fi
			if [[ $limited == 0 ]] && engine_up && [[ -n $(docker ps -aq 2>/dev/null) ]]; then
				limited="unknown (the running engine has containers)"
			fi
			if [[ $limited == 0 ]]; then
				quota_ctl "$mnt" 2 4 && { log "btrfs quotas on $mnt switched to simple quotas"; return 0; }
			else
				log "WARNING: $mnt keeps full btrfs qgroups: limits held: $limited; remove the sized containers and run this again to switch to simple quotas"
			fi
			;;
		esac
	fi
	btrfs quota enable "$mnt" >&2 && btrfs quota rescan -w "$mnt" >&2 ||
		log "WARNING: could not enable and rescan btrfs quotas on $mnt: disk limits may not hold until 'btrfs quota rescan -w $mnt'"
}

# disk_limits_note: says whether the running engine can enforce a disk limit.
disk_limits_note() {
	local driver fs
	driver=$(docker info --format '{{.Driver}}' 2>/dev/null || true)
	fs=$(docker info --format '{{range .DriverStatus}}{{if eq (index . 0) "Backing Filesystem"}}{{index . 1}}{{end}}{{end}}' 2>/dev/null || true)
	case "$driver/$fs" in
	btrfs/*) log "storage: btrfs, sandboxes' disk limits enforced by qgroups ($(cat "/sys/fs/btrfs/$(findmnt -n -o UUID --target "$(docker info --format '{{.DockerRootDir}}')")/qgroups/mode" 2>/dev/null || echo full))" ;;
	overlay2/xfs) log "storage: overlay2 on xfs, disk limits enforced where it is mounted with pquota" ;;
	*) log "WARNING: storage driver '$driver' on '${fs:-?}' cannot enforce sandboxes' disk limits; the daemon will say so (restart dockerd through this script, with no engine running, to get a btrfs data root)" ;;
	esac
}

if engine_up; then
	log "engine already answering, $(elapsed_ms) ms"
	root=$(docker info --format '{{.DockerRootDir}}' 2>/dev/null || true)
	if [[ -n $root && $(findmnt -n -o FSTYPE --target "$root" 2>/dev/null) == btrfs ]]; then
		own=
		[[ $root == "${SANDBOXD_ENGINE_DIR:-/var/lib/sandboxd-engine}/docker" ]] && own=own
		btrfs_quotas "$root" $own
	fi
	disk_limits_note
	exit 0
fi

[[ $(id -u) -eq 0 ]] || die "docker engine not reachable and not root: cannot install or start it"

# apt_install PKG...: install with a bounded wait on the dpkg lock (another apt
# may be running), refreshing the package lists only when apt does not know a
# package yet (fresh machine) or the first attempt fails (stale lists).
apt_install() {
	local apt=(apt-get -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends)
	export DEBIAN_FRONTEND=noninteractive
	local need_update=0 p
	for p in "$@"; do
		apt-cache show "$p" >/dev/null 2>&1 || need_update=1
	done
	if [[ $need_update -eq 1 ]]; then
		log "apt-get update"
		"${apt[@]}" update >&2
	fi
	if ! "${apt[@]}" install "$@" >&2; then
		log "install failed; refreshing package lists and retrying"
		"${apt[@]}" update >&2
		"${apt[@]}" install "$@" >&2
	fi
}

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
	log "installing docker.io from Debian"
	apt_install docker.io
	command -v dockerd >/dev/null 2>&1 || die "docker.io installed but dockerd not found"
fi

wait_engine() { # wait_engine SECONDS [PID]: 0 when up, 1 on timeout or when PID died
	local deadline=$(( $(date +%s) + $1 )) pid=${2:-}
	while (( $(date +%s) < deadline )); do
		engine_up && return 0
		if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
			return 1
		fi
		sleep 0.25
	done
	return 1
}

# prepare_btrfs_root: make (once) and mount the btrfs file system that holds
# the engine's data root; prints the data root. Idempotent: an existing loop
# file is reused (never reformatted), a mounted one is left mounted.
prepare_btrfs_root() {
	local dir=${SANDBOXD_ENGINE_DIR:-/var/lib/sandboxd-engine}
	local img=$dir/btrfs.img mnt=$dir/docker
	if mountpoint -q "$mnt"; then
		[[ $(findmnt -n -o FSTYPE "$mnt") == btrfs ]] || { log "$mnt is mounted but not btrfs"; return 1; }
		btrfs_quotas "$mnt" own
		echo "$mnt"
		return 0
	fi
	command -v mkfs.btrfs >/dev/null 2>&1 || apt_install btrfs-progs
	mkdir -p "$mnt"
	chmod 0711 "$dir"
	if [[ ! -f $img ]]; then
		local free_gb gb
		free_gb=$(( $(df --output=avail -k "$dir" | tail -1) / 1024 / 1024 ))
		gb=${SANDBOXD_ENGINE_GB:-$(( free_gb * 6 / 10 ))}
		(( gb > 64 )) && [[ -z ${SANDBOXD_ENGINE_GB:-} ]] && gb=64
		if (( gb < 8 )); then
			log "only ${free_gb} GiB free under $dir: too little for a btrfs data root"
			return 1
		fi
		log "making a ${gb} GiB sparse btrfs file system in $img"
		truncate -s "${gb}G" "$img.tmp"
		mkfs.btrfs -q "$img.tmp" >&2 || { rm -f "$img.tmp"; return 1; }
		mv "$img.tmp" "$img"
	fi
	mount -o loop,noatime "$img" "$mnt" >&2 || { log "cannot loop-mount $img"; return 1; }
	btrfs_quotas "$mnt" own
	echo "$mnt"
}

# start_dockerd [FLAGS...]: start dockerd detached; prints its pid.
start_dockerd() {
	mkdir -p "$(dirname "$DOCKERD_LOG")"
	printf '\n=== %s: dockerd %s\n' "$(date -Is)" "$*" >>"$DOCKERD_LOG"
	nohup setsid dockerd "$@" >>"$DOCKERD_LOG" 2>&1 </dev/null &
	echo $!
}

if pgrep -x dockerd >/dev/null 2>&1; then
	log "dockerd is running but not answering yet; waiting up to ${WAIT_S}s"
	wait_engine "$WAIT_S" || die "dockerd running but 'docker info' does not answer; see $DOCKERD_LOG"
elif [[ -d /run/systemd/system ]]; then
	log "starting docker via systemd"
	systemctl start docker
	wait_engine "$WAIT_S" || { journalctl -u docker --no-pager -n 30 >&2 || true; die "docker did not come up under systemd"; }
else
	storage_flags=()
	if [[ ${SANDBOXD_ENGINE_BTRFS:-1} != 0 ]]; then
		if root=$(prepare_btrfs_root); then
			storage_flags=(--data-root "$root" --storage-driver btrfs)
		else
			log "WARNING: no btrfs data root (see above); dockerd starts on its default root and sandboxes' disk limits will not be enforced"
		fi
	fi
	log "starting dockerd ${storage_flags[*]} (log: $DOCKERD_LOG)"
	pid=$(start_dockerd "${storage_flags[@]}")
	if ! wait_engine "$WAIT_S" "$pid"; then
		if kill -0 "$pid" 2>/dev/null; then
			tail -n 30 "$DOCKERD_LOG" >&2
			die "dockerd (pid $pid) did not answer within ${WAIT_S}s; see $DOCKERD_LOG"
		fi
		# Died at start. In nested sandboxes this is almost always iptables or
		# the default bridge; we only need NetworkMode none, so drop both.
		log "dockerd exited at start; retrying without iptables and the default bridge"
		tail -n 10 "$DOCKERD_LOG" >&2
		rm -f /var/run/docker.pid
		pid=$(start_dockerd "${storage_flags[@]}" --iptables=false --ip-masq=false --bridge=none)
		if ! wait_engine "$WAIT_S" "$pid"; then
			tail -n 30 "$DOCKERD_LOG" >&2
			die "dockerd did not come up; see $DOCKERD_LOG"
		fi
	fi
fi

log "engine up: $(docker info --format 'server {{.ServerVersion}}, storage {{.Driver}}, cgroup v{{.CgroupVersion}}' 2>/dev/null), $(elapsed_ms) ms"
disk_limits_note
