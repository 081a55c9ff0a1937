#!/usr/bin/env bash
# Runs the SDK compatibility suites under test/compat/*: each is a Node project
# with its SDK versions pinned in a committed lockfile, run with Node's test
# runner against a live sandboxd on the real Docker engine.
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
