#!/usr/bin/env bash
# Prints every benchmark beside the baseline it is measured against, all in one
# run (these shared 2-core machines are noisy; only same-run comparisons mean
# anything).
set -euo pipefail
cd "$(dirname "$0")/.."

for dir in bench/*/; do
  [ -f "$dir/main.go" ] || continue
  echo "== $(basename "$dir")"
  go run "./$dir"
  echo
done
