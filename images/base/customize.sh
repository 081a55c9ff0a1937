#!/bin/sh
# customize.sh runs inside the debootstrapped rootfs (chroot, as root) when
# scripts/build-images.sh builds sandboxd/base. It must be idempotent only in
# the sense that it always starts from a fresh copy of the cached rootfs.
set -eu

# The unprivileged account processes run as by default (uid/gid 1000).
if ! id -u user >/dev/null 2>&1; then
	groupadd --gid 1000 user
	useradd --uid 1000 --gid 1000 --create-home --home-dir /home/user --shell /bin/bash user
fi

# Passwordless sudo for user, as in E2B's base template. The file is
# checked before it is installed: a broken sudoers file would lock sudo.
cat >/tmp/sudoers-user <<'SUDOERS'
user ALL=(ALL:ALL) NOPASSWD: ALL
SUDOERS
visudo -cqf /tmp/sudoers-user
install -m 0440 /tmp/sudoers-user /etc/sudoers.d/user
rm -f /tmp/sudoers-user
usermod -aG sudo user
# The hostname resolves through myhostname (its package adds it; make sure).
grep -q '^hosts:.*myhostname' /etc/nsswitch.conf ||
	sed -i 's/^hosts:[[:space:]]*files/& myhostname/' /etc/nsswitch.conf

# E2B's SDK starts an MCP gateway with `mcp-gateway --config <json>` (as
# root) after creating a sandbox with the mcp option, and reports its
# stderr when it exits non-zero. sandboxd has no gateway: say so clearly.
cat >/usr/local/bin/mcp-gateway <<'STUB'
#!/bin/sh
echo "sandboxd: the MCP gateway is not available: sandboxd ships no mcp-gateway (E2B's runs in its hosted mcp-gateway template). Create the sandbox without the mcp option, or name a template image that provides an mcp-gateway command." >&2
exit 1
STUB
chmod 0755 /usr/local/bin/mcp-gateway

# Daytona's account: sandboxes the Daytona facade creates run as daytona
# (home /home/daytona), as on Daytona, with passwordless sudo (effective
# wherever sudo is installed).
if ! id -u daytona >/dev/null 2>&1; then
	groupadd --gid 1001 daytona
	useradd --uid 1001 --gid 1001 --create-home --home-dir /home/daytona --shell /bin/bash daytona
fi
mkdir -p /etc/sudoers.d
echo 'daytona ALL=(ALL) NOPASSWD:ALL' >/etc/sudoers.d/daytona
chmod 0440 /etc/sudoers.d/daytona

# Future apt installs inside a sandbox skip docs too.
cat >/etc/dpkg/dpkg.cfg.d/01-sandboxd-nodoc <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG

# Size: drop what the docs policy above would have excluded, keep licenses.
find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find /usr/share/doc -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf /usr/share/man/* /usr/share/info/* /usr/share/groff/* /usr/share/lintian/*
find /usr/share/locale -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} + 2>/dev/null || true
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/lib/dpkg/*-old /var/log/* /tmp/* /var/tmp/*
find / -xdev -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null || true

# Docker provides these per container.
rm -f /etc/hostname /etc/resolv.conf
: >/etc/machine-id
