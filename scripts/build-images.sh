#!/usr/bin/env bash
# build-images.sh — build the local sandbox images; no registry involved.
#
#   sandboxd/base:bookworm   Debian bookworm minbase (debootstrap) + images/base/packages,
#                            customized by images/base/customize.sh (user uid 1000 with
#                            passwordless sudo, as E2B's base template; no docs)
#   sandboxd/busybox:latest  Debian's busybox-static with its applet symlinks; for fast tests
#   sandboxd/code-interpreter:v1
#                            sandboxd/base plus images/code-interpreter/server.py at
#                            /opt/sandboxd/code-interpreter/server.py: the E2B template
#                            code-interpreter-v1 (the E2B facade starts the server)
#
# Usage: scripts/build-images.sh [base] [busybox] [code-interpreter]   (default: all three)
#        scripts/build-images.sh --recipe base|busybox   print the recipe hash this checkout
#                                                        would label the image with (no root)
#
# Cached twice:
#   - each image carries LABEL sandboxd.recipe=<hash of this script + images/<name>/*>;
#     when the local image has the same label, nothing is done;
#   - the raw debootstrap rootfs is kept as a tarball in $SANDBOXD_CACHE_DIR keyed by
#     (suite, arch, mirror, package list), so a change to customize.sh or to this script
#     re-imports in seconds instead of re-running debootstrap.
#
# Environment:
#   SANDBOXD_CACHE_DIR       cache directory (default /var/cache/sandboxd)
#   SANDBOXD_DEBIAN_MIRROR   Debian mirror (default: the one apt uses on this host)
#   SANDBOXD_IMAGES_FORCE=1  rebuild even when the recipe label matches
#
# Needs root (debootstrap, chroot) and a running engine (scripts/setup-docker.sh).
set -euo pipefail

log() { printf 'build-images: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_DIR=${SANDBOXD_CACHE_DIR:-/var/cache/sandboxd}
SUITE=bookworm
BASE_IMAGE=sandboxd/base:bookworm
BUSYBOX_IMAGE=sandboxd/busybox:latest
CODE_INTERPRETER_IMAGE=sandboxd/code-interpreter:v1
CODE_INTERPRETER_DIR=/opt/sandboxd/code-interpreter
LABEL=sandboxd.recipe
export PATH="$PATH:/usr/sbin:/sbin"

# recipe_hash NAME: hash of this script and every file under images/NAME.
recipe_hash() {
	(
		cd "$ROOT"
		{ echo scripts/build-images.sh; find "images/$1" -type f | LC_ALL=C sort; } |
			while read -r f; do printf '%s\n' "$f"; sha256sum <"$f"; done
	) | sha256sum | cut -c1-16
}

if [[ ${1:-} == --recipe ]]; then
	[[ ${2:-} == base || ${2:-} == busybox ]] || die "--recipe wants base or busybox"
	recipe_hash "$2"
	exit 0
fi

[[ $(id -u) -eq 0 ]] || die "must run as root (debootstrap and chroot)"
docker info --format '{{.ServerVersion}}' >/dev/null 2>&1 || die "docker engine not reachable; run scripts/setup-docker.sh first"
mkdir -p "$CACHE_DIR"

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# Scratch directories, removed on exit however the script ends. Anything
# debootstrap left mounted inside is unmounted first, and rm stays on one
# file system, so an interrupted build can never delete through a mount.
WORKDIRS=()
cleanup() {
	local w m
	for w in "${WORKDIRS[@]}"; do
		awk -v w="$w/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r |
			while read -r m; do umount -l "$m" 2>/dev/null || true; done
		rm -rf --one-file-system "$w"
	done
}
trap cleanup EXIT
new_workdir() { # new_workdir VAR: make a scratch dir and store its path in VAR
	local d
	d=$(mktemp -d "$CACHE_DIR/work.XXXXXX")
	WORKDIRS+=("$d")
	printf -v "$1" '%s' "$d"
}

image_label() { docker image inspect --format "{{index .Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null || true; }

# up_to_date IMAGE HASH: true when IMAGE exists with the same recipe label.
up_to_date() {
	[[ ${SANDBOXD_IMAGES_FORCE:-0} != 1 ]] && [[ $(image_label "$1") == "$2" ]]
}

# import_rootfs DIR IMAGE HASH CHANGE...: tar DIR into `docker import`, then
# remove the image the tag pointed at before (if nothing uses it).
import_rootfs() {
	local dir=$1 image=$2 hash=$3
	shift 3
	local old changes=() c
	old=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
	for c in "$@" "LABEL $LABEL=$hash"; do changes+=(--change "$c"); done
	tar --numeric-owner --xattrs -C "$dir" -c . |
		docker import "${changes[@]}" --message "sandboxd recipe $hash" - "$image" >/dev/null
	local new
	new=$(docker image inspect --format '{{.Id}}' "$image")
	if [[ -n $old && $old != "$new" ]]; then
		docker image rm "$old" >/dev/null 2>&1 || log "kept previous $image ($old): still in use"
	fi
}

# apt_fetch PKG DESTDIR: download PKG's .deb with the host's apt (refreshing
# package lists only when apt does not know the package yet).
apt_fetch() {
	local pkg=$1 dest=$2
	apt-cache show "$pkg" >/dev/null 2>&1 || apt-get -q -o DPkg::Lock::Timeout=600 update >&2
	(cd "$dest" && apt-get -q -o APT::Sandbox::User=root download "$pkg" >&2)
}

ensure_host_tool() { # ensure_host_tool COMMAND PACKAGE
	command -v "$1" >/dev/null 2>&1 && return 0
	log "installing $2"
	export DEBIAN_FRONTEND=noninteractive
	apt-cache show "$2" >/dev/null 2>&1 || apt-get -q -o DPkg::Lock::Timeout=600 update >&2
	apt-get -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends install "$2" >&2
}

# debian_mirror: the mirror apt uses for $SUITE here (deb822 or one-line format).
debian_mirror() {
	if [[ -n ${SANDBOXD_DEBIAN_MIRROR:-} ]]; then echo "$SANDBOXD_DEBIAN_MIRROR"; return; fi
	local m
	m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
		awk -v suite="$SUITE" '
			function flush() { if (uri != "" && (" " suites " ") ~ (" " suite " ") && types ~ /(^| )deb( |$)/) { print uri; found = 1; exit } uri = ""; suites = ""; types = "" }
			/^[[:space:]]*$/ { flush(); next }
			/^[[:space:]]*#/ { next }
			/^deb[[:space:]]/ {
				i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
				if ($(i+1) == suite) { print $i; found = 1; exit }
				next
			}
			/^Types:/ { types = $0; sub(/^Types:[[:space:]]*/, "", types) }
			/^URIs:/ { uri = $2 }
			/^Suites:/ { suites = $0; sub(/^Suites:[[:space:]]*/, "", suites) }
			END { if (!found) flush() }')
	echo "${m:-http://deb.debian.org/debian}"
}

build_base() {
	local t0 hash
	t0=$(now_ms)
	hash=$(recipe_hash base)
	if up_to_date "$BASE_IMAGE" "$hash"; then
		log "$BASE_IMAGE up to date (recipe $hash), $(( $(now_ms) - t0 )) ms"
		return
	fi
	ensure_host_tool debootstrap debootstrap

	local mirror arch pkgs stage_key stage work
	mirror=$(debian_mirror)
	arch=$(dpkg --print-architecture)
	pkgs=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$ROOT/images/base/packages" | tr -s ' \n' ',' | sed 's/,$//')
	stage_key=$(printf '%s\n' "$SUITE" "$arch" "$mirror" minbase "$pkgs" | sha256sum | cut -c1-16)
	stage="$CACHE_DIR/debootstrap-$SUITE-$arch-$stage_key.tar"
	new_workdir work
	mkdir "$work/rootfs"

	if [[ -f $stage ]]; then
		log "reusing debootstrap rootfs $stage"
		tar --numeric-owner --xattrs -C "$work/rootfs" -xf "$stage"
	else
		log "debootstrap $SUITE ($arch) from $mirror with: $pkgs"
		local d0
		d0=$(now_ms)
		debootstrap --variant=minbase --arch="$arch" --components=main --include="$pkgs" \
			"$SUITE" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
			tail -n 40 "$work/debootstrap.log" >&2
			[[ -f $work/rootfs/debootstrap/debootstrap.log ]] && tail -n 40 "$work/rootfs/debootstrap/debootstrap.log" >&2
			die "debootstrap failed"
		}
		tar --numeric-owner --xattrs -C "$work/rootfs" -cf "$stage.tmp" . && mv "$stage.tmp" "$stage"
		log "debootstrap done in $(( $(now_ms) - d0 )) ms; cached as $stage"
	fi

	cp "$ROOT/images/base/customize.sh" "$work/rootfs/tmp/customize.sh"
	chroot "$work/rootfs" /bin/sh /tmp/customize.sh >&2
	rm -f "$work/rootfs/tmp/customize.sh"

	import_rootfs "$work/rootfs" "$BASE_IMAGE" "$hash" \
		'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		'ENV LANG=C.UTF-8' \
		'WORKDIR /home/user' \
		'CMD ["/bin/bash"]'
	log "built $BASE_IMAGE (recipe $hash, $(docker image inspect --format '{{.Size}}' "$BASE_IMAGE" | numfmt --to=iec)) in $(( $(now_ms) - t0 )) ms"
}

build_busybox() {
	local t0 hash work deb
	t0=$(now_ms)
	hash=$(recipe_hash busybox)
	if up_to_date "$BUSYBOX_IMAGE" "$hash"; then
		log "$BUSYBOX_IMAGE up to date (recipe $hash), $(( $(now_ms) - t0 )) ms"
		return
	fi
	mkdir -p "$CACHE_DIR/debs"
	local debs=("$CACHE_DIR"/debs/busybox-static_*.deb)
	if [[ ! -f ${debs[0]} ]]; then
		log "downloading busybox-static"
		apt_fetch busybox-static "$CACHE_DIR/debs"
		debs=("$CACHE_DIR"/debs/busybox-static_*.deb)
	fi
	deb=${debs[0]}
	new_workdir work
	dpkg-deb -x "$deb" "$work/deb"
	local r="$work/rootfs"
	mkdir -p "$r"/{bin,sbin,usr/bin,usr/sbin,etc,root,tmp,home/user,dev,proc,sys,run}
	chmod 1777 "$r/tmp"
	chmod 0700 "$r/root"
	install -m 0755 "$work/deb/bin/busybox" "$r/bin/busybox"
	chroot "$r" /bin/busybox --install -s
	install -m 0644 "$ROOT/images/busybox/passwd" "$ROOT/images/busybox/group" "$r/etc/"
	chown 1000:1000 "$r/home/user"
	import_rootfs "$r" "$BUSYBOX_IMAGE" "$hash" \
		'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin' \
		'WORKDIR /' \
		'CMD ["/bin/sh"]'
	log "built $BUSYBOX_IMAGE (recipe $hash, from $(basename "$deb")) in $(( $(now_ms) - t0 )) ms"
}

# build_code_interpreter layers server.py onto the base image without a
# builder or a registry (the engine here has no BuildKit): create a container
# from the base image, copy the file in, commit it. The container never runs.
# The recipe hash covers this script, server.py and the base image's id, so a
# rebuilt base image rebuilds this one too.
build_code_interpreter() {
	local t0 base_id hash work cid old new
	t0=$(now_ms)
	base_id=$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE" 2>/dev/null) ||
		die "$BASE_IMAGE is missing; build it first (scripts/build-images.sh base code-interpreter)"
	hash=$(
		{
			sha256sum <"$ROOT/scripts/build-images.sh"
			sha256sum <"$ROOT/images/code-interpreter/server.py"
			echo "$base_id"
		} | sha256sum | cut -c1-16
	)
	if up_to_date "$CODE_INTERPRETER_IMAGE" "$hash"; then
		log "$CODE_INTERPRETER_IMAGE up to date (recipe $hash), $(( $(now_ms) - t0 )) ms"
		return
	fi
	new_workdir work
	install -D -m 0644 "$ROOT/images/code-interpreter/server.py" "$work/root$CODE_INTERPRETER_DIR/server.py"
	old=$(docker image inspect --format '{{.Id}}' "$CODE_INTERPRETER_IMAGE" 2>/dev/null || true)
	cid=$(docker create "$BASE_IMAGE")
	if ! docker cp "$work/root/." "$cid:/" ||
		! docker commit --change "LABEL $LABEL=$hash" --message "sandboxd recipe $hash" "$cid" "$CODE_INTERPRETER_IMAGE" >/dev/null; then
		docker rm -f "$cid" >/dev/null 2>&1 || true
		die "building $CODE_INTERPRETER_IMAGE failed"
	fi
	docker rm -f "$cid" >/dev/null
	new=$(docker image inspect --format '{{.Id}}' "$CODE_INTERPRETER_IMAGE")
	if [[ -n $old && $old != "$new" ]]; then
		docker image rm "$old" >/dev/null 2>&1 || log "kept previous $CODE_INTERPRETER_IMAGE ($old): still in use"
	fi
	log "built $CODE_INTERPRETER_IMAGE (recipe $hash) in $(( $(now_ms) - t0 )) ms"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(busybox base code-interpreter)
for t in "${targets[@]}"; do
	case $t in
	base) build_base ;;
	busybox) build_busybox ;;
	code-interpreter) build_code_interpreter ;;
	*) die "unknown image '$t' (want: base, busybox, code-interpreter)" ;;
	esac
done
