#!/usr/bin/env bash
# GPU go/no-go: at most 9 minutes on one GPU (an H100 or H200), one JSON summary on stdout and
# in SUMMARY.json, exit 0 only when every check passes (benchmarks/gpu_check.py, whose
# docstring lists the checks: compiled bf16 MFU at widths 1024 and 2048, peak memory against
# the plan, micro-batched = whole batch, FSDP2 over NCCL, a DCP checkpoint killed and resumed,
# one Ray Tune trial on the GPU).
#
#   bash benchmarks/gpu_check.sh [SUMMARY.json]      # default gpu_check.json
#
# Exit codes: 0 all passed; 1 a check failed (the summary's "failed"); 2 no CUDA device (one
# line on stderr, within seconds); 124/137 the 540 s hard limit killed it (a last-resort line
# on stdout; the script's own 510 s budget normally reports first). PYTHON [python] runs it;
# HARD_LIMIT_S [540] is that limit; extra arguments go to gpu_check.py (`--device cpu` runs
# its dev mode on CPU).
#
# The long measurement sweep (compile modes, depths 6-48, packing, gpu_pilot's cells; 1-2
# hours) is benchmarks/gpu_sweep.sh.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python}
HARD_LIMIT_S=${HARD_LIMIT_S:-540}

# --foreground: Ctrl-C reaches gpu_check.py (it ends its own children, each in its own session)
timeout --foreground -k 10 "$HARD_LIMIT_S" "$PYTHON" "$HERE/gpu_check.py" "$@"
code=$?
if [ "$code" = 124 ] || [ "$code" = 137 ]; then
  echo "{\"ok\": false, \"error\": \"gpu_check.py killed at the ${HARD_LIMIT_S} s hard limit\"}"
fi
exit "$code"
