#!/usr/bin/env bash
# Installs and starts whatever sandboxd needs on this host, and nothing that
# is already there. Safe to run again; fast when everything is in place.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "setup: Go is required (go 1.26+) and not on PATH" >&2; exit 1; }

scripts/setup-docker.sh
scripts/build-images.sh
