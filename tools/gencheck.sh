#!/bin/sh
# Fail when internal/gen/ is not what tools/gen.sh produces from spec/:
# regenerate into a scratch tree and diff it against the committed code.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$root/tools/gen.sh" "$tmp"
if ! diff -ru "$root/internal/gen/envd" "$tmp/internal/gen/envd"; then
	echo "gencheck: internal/gen is stale; run tools/gen.sh" >&2
	exit 1
fi
echo "gencheck: internal/gen is up to date"
