#!/usr/bin/env bash
# Prints every benchmark beside the baseline it is measured against, all in one
# run (these shared 2-core machines are noisy; only same-run comparisons mean
# anything). `make bench` builds bin/ first.
set -euo pipefail
cd "$(dirname "$0")/.."

# createbench measures each engine in BENCH_ENGINES (its daemon gets
# --engine), each beside docker run -d of the same run: by default docker,
# and oci too where crun is installed (scripts/setup-oci.sh).
engines=${BENCH_ENGINES:-docker}
if [ -z "${BENCH_ENGINES:-}" ] && command -v crun >/dev/null 2>&1; then
  engines="docker oci"
fi

for dir in bench/*/; do
  [ -f "$dir/main.go" ] || continue
  if [ "$(basename "$dir")" = createbench ]; then
    for engine in $engines; do
      echo "== createbench (--engine $engine)"
      go run "./$dir" -engine "$engine"
      echo
    done
    continue
  fi
  echo "== $(basename "$dir")"
  go run "./$dir"
  echo
done

# The SDK flows: each suite's run.sh starts a daemon of its own.
for suite in test/compat/*/; do
  [ -f "$suite/bench.mjs" ] || continue
  echo "== sdk: $(basename "$suite")"
  "$suite/run.sh" --bench "${SDK_BENCH_N:-10}"
  echo
done
