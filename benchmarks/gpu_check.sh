#!/usr/bin/env bash
# GPU check: MFU of the trainer's step for the paper's shapes (2 heads, seq 128, vocab 2000,
# batch 512 or the largest power-of-two batch that fits) and compile time against depth.
#
#   benchmarks/gpu_check.sh [RESULTS.jsonl]          # default gpu_check_results.jsonl
#
# Each shape runs `dwtune bench --json` in its own process with a fresh inductor cache, so its
# compile time is a cold compile. One JSON line per shape goes to RESULTS.jsonl; a summary table
# and the checks (MFU >= 40% bf16 at width >= 1024; compile time at the deepest depth <= 1.5x
# that at the shallowest, per width) go to stdout and RESULTS.txt. Environment knobs (defaults
# in brackets): DEVICE [cuda], DEPTHS ["6 24 48"], WIDTHS ["256 512 1024 2048"], BATCH [512],
# MIN_BATCH [8], SEQ_LEN [128], VOCAB [2000], HEADS [2], STEPS [10], WARMUP [3],
# RUN_TIMEOUT_S [600], PYTHON [python].
set -euo pipefail

RESULTS=${1:-gpu_check_results.jsonl}
DEVICE=${DEVICE:-cuda}
DEPTHS=${DEPTHS:-"6 24 48"}
WIDTHS=${WIDTHS:-"256 512 1024 2048"}
BATCH=${BATCH:-512}
MIN_BATCH=${MIN_BATCH:-8}
SEQ_LEN=${SEQ_LEN:-128}
VOCAB=${VOCAB:-2000}
HEADS=${HEADS:-2}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-600}
PYTHON=${PYTHON:-python}
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

: >"$RESULTS"
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "| cuda", torch.cuda.is_available(),
"|", torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")'

# bench_one DEPTH WIDTH BATCH: one cold run; its JSON on stdout, its errors in $SCRATCH/err
bench_one() {
  local cache="$SCRATCH/inductor-$1-$2-$3"
  TORCHINDUCTOR_CACHE_DIR="$cache" timeout "$RUN_TIMEOUT_S" "$PYTHON" -m dwtune bench \
    --depth "$1" --width "$2" --heads "$HEADS" --seq-len "$SEQ_LEN" --batch-size "$3" \
    --vocab-size "$VOCAB" --steps "$STEPS" --warmup "$WARMUP" --device "$DEVICE" --json \
    2>"$SCRATCH/err"
  local code=$?
  rm -rf "$cache"
  return $code
}

for width in $WIDTHS; do
  for depth in $DEPTHS; do
    batch=$BATCH
    while true; do
      echo "depth $depth x width $width, batch $batch ..." >&2
      if out=$(bench_one "$depth" "$width" "$batch"); then
        echo "$out" | "$PYTHON" -c 'import json, sys; print(json.dumps(json.load(sys.stdin)))' \
          >>"$RESULTS"
        break
      elif grep -q "out of memory" "$SCRATCH/err" && [ "$batch" -gt "$MIN_BATCH" ]; then
        batch=$((batch / 2))
      else
        reason=$(tail -n 1 "$SCRATCH/err" | tr -d '"\\')
        printf '{"depth": %d, "width": %d, "batch_size": %d, "error": "%s"}\n' \
          "$depth" "$width" "$batch" "${reason:-failed or timed out}" >>"$RESULTS"
        break
      fi
    done
  done
done

# Summary table and checks (stdout and RESULTS.txt)
"$PYTHON" - "$RESULTS" <<'PY' | tee "${RESULTS%.jsonl}.txt"
import json, sys
from collections import defaultdict

MFU_TARGET, MFU_MIN_WIDTH, COMPILE_RATIO = 0.40, 1024, 1.5
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print(f"{'depth':>5} {'width':>5} {'batch':>5} {'tokens/s':>12} {'step ms':>8} {'MFU':>6} "
      f"{'compile s':>9} {'mem GiB':>7}  attention")
for r in rows:
    if "error" in r:
        print(f"{r['depth']:>5} {r['width']:>5} {r['batch_size']:>5}  failed: {r['error']}")
        continue
    compile_s = "off" if r["compile_time_s"] is None else f"{r['compile_time_s']:.1f}"
    print(f"{r['depth']:>5} {r['width']:>5} {r['batch_size']:>5} {r['tokens_per_s']:>12,.0f} "
          f"{1e3 * r['step_time_s']:>8.1f} {100 * r['mfu']:>5.1f}% {compile_s:>9} "
          f"{r['peak_memory_bytes'] / 2**30:>7.1f}  {r['attention_backend']}")
ok = [r for r in rows if "error" not in r]
if ok:
    print(f"precision {ok[0]['precision']}; MFU peak: {ok[0]['peak_source']}")
checks = []
for r in ok:
    if r["width"] >= MFU_MIN_WIDTH:
        checks.append((r["mfu"] >= MFU_TARGET,
                       f"MFU {100 * r['mfu']:.1f}% >= {100 * MFU_TARGET:.0f}% at depth "
                       f"{r['depth']} x width {r['width']}"))
compile_times = defaultdict(dict)
for r in ok:
    if r["compile_time_s"] is not None:
        compile_times[r["width"]][r["depth"]] = r["compile_time_s"]
for width, by_depth in sorted(compile_times.items()):
    if len(by_depth) > 1:
        low, high = min(by_depth), max(by_depth)
        ratio = by_depth[high] / max(by_depth[low], 1e-9)
        checks.append((ratio <= COMPILE_RATIO,
                       f"compile time depth {high} / depth {low} = {ratio:.2f} <= "
                       f"{COMPILE_RATIO} at width {width}"))
for passed, text in checks:
    print(("PASS " if passed else "FAIL ") + text)
if not checks:
    print("no checks apply (no compiled runs or no width >= 1024 in these results)")
PY
