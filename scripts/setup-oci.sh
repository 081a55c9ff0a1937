#!/usr/bin/env bash
# setup-oci.sh — what the engine-free runtime (sandboxd --engine oci, the default;
# internal/runtime/oci) needs on this host. Idempotent; fast when all is there.
#
#   1. crun, Debian's (the OCI runtime it runs sandboxes with; docs/design.md
#      says why crun and not runc);
#   2. on a cgroup v1 hybrid host (this kind of machine), a v1 hierarchy for
#      the hugetlb controller: crun 1.8 refuses hybrid cgroups ("drop all
#      controllers from cgroupv2") unless hugetlb is mounted on v1;
#   3. a btrfs file system with simple quotas (a sparse loop file) mounted on
#      $SANDBOXD_OCI_DIR/root, for the runtime's images and sandboxes: each
#      sandbox's writable layer is a subvolume whose qgroup limit is its disk
#      limit. Point the daemon at it with --oci-dir (the tests find it there);
#   4. criu, Debian's, and its `criu check`: runc-class hibernate needs it
#      (gVisor's is runsc's own). Where the check fails (this kind of host:
#      "vDSO area bounds") the daemon says so at start and stops such
#      sandboxes instead of hibernating them.
#
# Environment:
#   SANDBOXD_OCI=off   skips all of it (a host whose daemons run --engine docker only)
#   SANDBOXD_OCI_DIR   where the loop file and its mount live (default /var/lib/sandboxd-oci)
#   SANDBOXD_OCI_GB    size of the loop file in GiB when first made (default 16)
set -euo pipefail

log() { printf 'setup-oci: %s\n' "$*" >&2; }

[[ ${SANDBOXD_OCI:-on} == off ]] && { log "skipped (SANDBOXD_OCI=off)"; exit 0; }
export PATH="$PATH:/usr/sbin:/usr/bin:/sbin"
if [[ $(id -u) -ne 0 ]]; then
	log "not root: skipped (the oci runtime needs root)"
	exit 0
fi

if ! command -v crun >/dev/null 2>&1; then
	log "installing crun from Debian"
	export DEBIAN_FRONTEND=noninteractive
	apt-cache show crun >/dev/null 2>&1 || apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null || true
	apt-get -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends install crun >/dev/null ||
		log "WARNING: could not install crun: the oci runtime falls back to runc"
fi

# iproute2: a sandbox with network gets its namespace and veth from `ip`
# (internal/runtime/oci/network.go); minimal Debian images lack it.
if ! command -v ip >/dev/null 2>&1; then
	log "installing iproute2 from Debian"
	apt-cache show iproute2 >/dev/null 2>&1 || apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null || true
	DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends install iproute2 >/dev/null ||
		log "WARNING: could not install iproute2: sandboxes with network cannot be made under --engine oci"
fi

# Hybrid cgroups: v1 controllers beside an empty v2 hierarchy.
if [[ -d /sys/fs/cgroup/memory && -d /sys/fs/cgroup/unified ]] && ! grep -qw hugetlb <(awk '$3 == "cgroup" { print $4 }' /proc/mounts); then
	mkdir -p /sys/fs/cgroup/hugetlb
	if mount -t cgroup -o hugetlb none /sys/fs/cgroup/hugetlb; then
		log "mounted the hugetlb cgroup v1 hierarchy (crun needs it on hybrid hosts)"
	else
		log "WARNING: could not mount the hugetlb cgroup hierarchy: crun will refuse to run here"
	fi
fi

dir=${SANDBOXD_OCI_DIR:-/var/lib/sandboxd-oci}
img=$dir/btrfs.img mnt=$dir/root
if ! mountpoint -q "$mnt"; then
	command -v mkfs.btrfs >/dev/null 2>&1 || { DEBIAN_FRONTEND=noninteractive apt-get -y -q --no-install-recommends install btrfs-progs >/dev/null || true; }
	mkdir -p "$mnt"
	chmod 0700 "$dir"
	if [[ ! -f $img ]]; then
		log "making a ${SANDBOXD_OCI_GB:-16} GiB sparse btrfs file system in $img"
		truncate -s "${SANDBOXD_OCI_GB:-16}G" "$img.tmp"
		mkfs.btrfs -q "$img.tmp" >&2 || { rm -f "$img.tmp"; log "WARNING: no btrfs file system for the oci runtime: its disk limits will not be enforced"; exit 0; }
		mv "$img.tmp" "$img"
	fi
	mount -o loop,noatime "$img" "$mnt" >&2 || { log "WARNING: cannot loop-mount $img: the oci runtime's disk limits will not be enforced"; exit 0; }
	log "mounted $img on $mnt"
fi
chmod 0700 "$mnt"
# Simple quotas (kernel 6.7+; see scripts/setup-docker.sh for why), through
# the ioctl: Debian 12's btrfs-progs predates them. Full qgroups otherwise.
qdir=/sys/fs/btrfs/$(findmnt -n -o UUID --target "$mnt")/qgroups
if [[ ! -d $qdir ]]; then
	if [[ -e /sys/fs/btrfs/features/simple_quota ]]; then
		perl -e 'use Fcntl; sysopen(my $fh, $ARGV[0], O_RDONLY | O_DIRECTORY) or die "open: $!\n";
			my $a = pack("QQ", 4, 0); ioctl($fh, 0xC0109428, $a) or die "btrfs quota ctl: $!\n"' "$mnt" && log "btrfs simple quotas enabled on $mnt"
	else
		btrfs quota enable "$mnt" >&2 && log "btrfs qgroups enabled on $mnt"
	fi
fi
if ! command -v criu >/dev/null 2>&1; then
	log "installing criu from Debian (runc-class checkpoints)"
	apt-cache show criu >/dev/null 2>&1 || apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null || true
	DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends install criu >/dev/null ||
		log "WARNING: could not install criu: runc-class sandboxes stop instead of hibernating"
fi
if command -v criu >/dev/null 2>&1; then
	if out=$(criu check 2>&1); then
		log "criu check: passes"
	else
		log "criu check fails: runc-class sandboxes stop instead of hibernating ($(grep -m1 -i error <<<"$out" || head -n1 <<<"$out"))"
	fi
fi

log "ready: crun $(crun --version | awk 'NR == 1 { print $3 }'), $mnt ($(cat "$qdir/mode" 2>/dev/null || echo "qgroups"))"
