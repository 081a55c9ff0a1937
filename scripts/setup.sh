#!/usr/bin/env bash
# Installs and starts whatever sandboxd needs on this host, and nothing that
# is already there. Safe to run again; fast when everything is in place.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "setup: Go is required (go 1.26+) and not on PATH" >&2; exit 1; }

# Small tools the scripts and the SDK suites use.
missing=()
command -v curl >/dev/null || missing+=(curl)
command -v node >/dev/null || missing+=(nodejs npm)
# systemd-analyze verifies the unit `make install` puts (test/install).
command -v systemd-analyze >/dev/null || missing+=(systemd)
# The dashboard's browser test (test/e2e/ui_test.go) drives chromium headless.
command -v chromium >/dev/null || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt-get -q update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -y -q --no-install-recommends install "${missing[@]}" >/dev/null
fi

# The distribution registry the pull tests run on loopback (started by
# internal/testenv/registrytest). The package's own service would listen on
# :5000 on every interface: it is stopped and disabled once installed.
if ! command -v docker-registry >/dev/null; then
  echo "setup: installing docker-registry (for the pull tests)"
  apt-get -q update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -y -q --no-install-recommends install docker-registry >/dev/null
  if command -v systemctl >/dev/null; then systemctl disable --now docker-registry >/dev/null 2>&1 || true; fi
fi

scripts/setup-docker.sh
scripts/setup-gvisor.sh
scripts/setup-oci.sh
scripts/build-images.sh
