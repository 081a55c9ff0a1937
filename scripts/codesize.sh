#!/bin/sh
# Prints the 15 largest hand-written Go files and functions of the repository (lines, and each
# function's cyclomatic complexity): the before/after figure of a refactor. Arguments go to the
# program (tools/codesize): -n N for another count, -tests to count test files too.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/tools"
exec go run ./codesize "$@" "$root"
