#!/usr/bin/env bash
# Prints every benchmark beside the baseline it is measured against, all in one
# run (these shared 2-core machines are noisy; only same-run comparisons mean
# anything). `make bench` builds bin/ first.
set -euo pipefail
cd "$(dirname "$0")/.."

for dir in bench/*/; do
  [ -f "$dir/main.go" ] || continue
  args=()
  # createbench passes --engine through to the daemon it measures.
  if [ "$(basename "$dir")" = createbench ] && [ -n "${BENCH_ENGINE:-}" ]; then
    args+=(-engine "$BENCH_ENGINE")
  fi
  echo "== $(basename "$dir")"
  go run "./$dir" "${args[@]}"
  echo
done

# The SDK flows: each suite's run.sh starts a daemon of its own.
for suite in test/compat/*/; do
  [ -f "$suite/bench.mjs" ] || continue
  echo "== sdk: $(basename "$suite")"
  "$suite/run.sh" --bench "${SDK_BENCH_N:-10}"
  echo
done
