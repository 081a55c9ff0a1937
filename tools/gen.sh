#!/bin/sh
# Regenerate Go code from spec/ into internal/gen/ with the generators pinned
# in tools/go.mod. Usage: tools/gen.sh [output-root]  (default: the repo root)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root}
cd "$root"
if [ "$out" = "$root" ]; then
	go tool -modfile=tools/go.mod buf generate spec --template spec/buf.gen.yaml
else
	# buf.gen.yaml names output paths relative to the working directory, so
	# generate from a scratch tree that links back to the sources.
	mkdir -p "$out/tools" "$out/internal/gen"
	# -modfile still needs a go.mod to mark the module root.
	cp go.mod go.sum "$out/"
	cp -R spec "$out/spec"
	cp tools/go.mod tools/go.sum "$out/tools/"
	cd "$out"
	go tool -modfile=tools/go.mod buf generate spec --template spec/buf.gen.yaml
fi
