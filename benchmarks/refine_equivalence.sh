#!/usr/bin/env bash
# The refine stage's canonical record and coverage rows, into DIR (compare two DIRs with diff -r):
#   benchmarks/refine_equivalence.sh DIR
set -euo pipefail
out=${1:?usage: refine_equivalence.sh DIR}
mkdir -p "$out"
here=$(dirname "$0")
python "$here/refine_equivalence.py" "$out/studies.json"
for design in grid law; do
  python "$here/coverage.py" --pairs 6 --ratios 1 5 --design "$design" | grep -v '^wall time' \
    > "$out/coverage_$design.txt"
done
