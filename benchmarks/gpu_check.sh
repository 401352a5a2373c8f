#!/usr/bin/env bash
# GPU check: tokens/s and MFU of the trainer's step for the paper's shapes (2 heads, seq 128,
# vocab 2000, bf16, batch 512 or the largest power-of-two batch that fits) with compile off,
# default and max-autotune; compile time against depth (6, 24, 48); and throughput with 1, 2
# and 4 trials packed on one GPU at widths 256 and 512.
#
#   benchmarks/gpu_check.sh [RESULTS.jsonl]          # default gpu_check_results.jsonl
#
# Packing: PACK_COUNTS concurrent `dwtune bench` processes of depth PACK_DEPTH share the GPU,
# each timing PACK_STEPS steps (long enough that their timed windows overlap); their summed
# tokens/s go to RESULTS_packed.jsonl and the table. Compile modes (COMPILES): off = eager,
# default = torch.compile of the block, max-autotune = the same with
# TORCHINDUCTOR_MAX_AUTOTUNE=1 (on CPU only the device default runs).
#
# Each shape runs `dwtune bench --json` in its own process with a fresh inductor cache, so its
# compile time is a cold compile. One JSON line per shape goes to RESULTS.jsonl; a summary table
# and the checks (MFU >= 40% bf16 at width >= 1024; compile time at the deepest depth <= 1.5x
# that at the shallowest, per width) go to stdout and RESULTS.txt. Environment knobs (defaults
# in brackets): DEVICE [cuda], DEPTHS ["6 24 48"], WIDTHS ["256 512 1024 2048"], BATCH [512],
# MIN_BATCH [8], SEQ_LEN [128], VOCAB [2000], HEADS [2], STEPS [10], WARMUP [3],
# RUN_TIMEOUT_S [600], PYTHON [python], COMPILES ["off default max-autotune"; cpu: default],
# PACK_WIDTHS ["256 512"; cpu: $WIDTHS], PACK_COUNTS ["1 2 4"], PACK_DEPTH [6],
# PACK_BATCH [$BATCH], PACK_STEPS [50].
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
if [ "$DEVICE" = cpu ]; then DEFAULT_COMPILES=default; DEFAULT_PACK=$WIDTHS; else
  DEFAULT_COMPILES="off default max-autotune"; DEFAULT_PACK="256 512"; fi
COMPILES=${COMPILES:-$DEFAULT_COMPILES}
PACK_WIDTHS=${PACK_WIDTHS:-$DEFAULT_PACK}
PACK_COUNTS=${PACK_COUNTS:-"1 2 4"}
PACK_DEPTH=${PACK_DEPTH:-6}
PACK_BATCH=${PACK_BATCH:-$BATCH}
PACK_STEPS=${PACK_STEPS:-50}
PACKED="${RESULTS%.jsonl}_packed.jsonl"
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

: >"$RESULTS"
: >"$PACKED"
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "| cuda", torch.cuda.is_available(),
"|", torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")'

# compile_flags MODE: the bench flags and environment of a compile mode
compile_flags() {
  case "$1" in
    off) echo "--no-compile" ;;
    default) echo "" ;;
    max-autotune) echo "--compile" ;;
    *) echo "unknown compile mode $1" >&2; return 1 ;;
  esac
}

# bench_one DEPTH WIDTH BATCH MODE [STEPS]: one cold run; JSON on stdout, errors in $SCRATCH/err
bench_one() {
  local cache="$SCRATCH/inductor-$1-$2-$3-$4-$RANDOM" autotune=0 flags
  flags=$(compile_flags "$4")
  [ "$4" = max-autotune ] && autotune=1
  # shellcheck disable=SC2086  # flags is zero or one word
  TORCHINDUCTOR_MAX_AUTOTUNE=$autotune TORCHINDUCTOR_CACHE_DIR="$cache" \
    timeout "$RUN_TIMEOUT_S" "$PYTHON" -m dwtune bench \
    --depth "$1" --width "$2" --heads "$HEADS" --seq-len "$SEQ_LEN" --batch-size "$3" \
    --vocab-size "$VOCAB" --steps "${5:-$STEPS}" --warmup "$WARMUP" --device "$DEVICE" \
    --results none --json $flags 2>"$SCRATCH/err${6:-}"
  local code=$?
  rm -rf "$cache"
  return $code
}

# tag JSON KEY=VALUE...: the result line with the compile mode / packing fields added
tag() {
  "$PYTHON" -c 'import json, sys
row = json.loads(sys.argv[1])
for a in sys.argv[2:]:
    k, v = a.split("=", 1); row[k] = json.loads(v)
print(json.dumps(row))' "$@"
}

for mode in $COMPILES; do
  for width in $WIDTHS; do
    for depth in $DEPTHS; do
      batch=$BATCH
      while true; do
        echo "depth $depth x width $width, batch $batch, compile $mode ..." >&2
        if out=$(bench_one "$depth" "$width" "$batch" "$mode"); then
          tag "$out" "compile_mode=\"$mode\"" >>"$RESULTS"
          break
        elif grep -q "out of memory" "$SCRATCH/err" && [ "$batch" -gt "$MIN_BATCH" ]; then
          batch=$((batch / 2))
        else
          reason=$(tail -n 1 "$SCRATCH/err" | tr -d '"\\')
          printf '{"depth": %d, "width": %d, "batch_size": %d, "compile_mode": "%s", "error": "%s"}\n' \
            "$depth" "$width" "$batch" "$mode" "${reason:-failed or timed out}" >>"$RESULTS"
          break
        fi
      done
    done
  done
done

# Packing: K concurrent trials of one shape on one device; summed tokens/s
for width in $PACK_WIDTHS; do
  for count in $PACK_COUNTS; do
    echo "packing $count x (depth $PACK_DEPTH x width $width, batch $PACK_BATCH) ..." >&2
    pids=()
    for i in $(seq "$count"); do
      bench_one "$PACK_DEPTH" "$width" "$PACK_BATCH" default "$PACK_STEPS" "-$i" \
        >"$SCRATCH/pack-$i.json" &
      pids+=($!)
    done
    ok=1
    for pid in "${pids[@]}"; do wait "$pid" || ok=0; done
    if [ $ok = 1 ]; then
      "$PYTHON" - "$count" "$width" "$SCRATCH" >>"$PACKED" <<'PY'
import json, sys
count, width, scratch = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
runs = [json.load(open(f"{scratch}/pack-{i}.json")) for i in range(1, count + 1)]
print(json.dumps({"packed": count, "width": width, "depth": runs[0]["depth"],
                  "batch_size": runs[0]["batch_size"],
                  "tokens_per_s": sum(r["tokens_per_s"] for r in runs),
                  "mfu": sum(r["mfu"] for r in runs),
                  "peak_memory_bytes_each": max(r["peak_memory_bytes"] for r in runs)}))
PY
    else
      printf '{"packed": %d, "width": %d, "error": "a packed run failed: %s"}\n' "$count" \
        "$width" "$(tail -n 1 "$SCRATCH"/err-* 2>/dev/null | tr -d '"\\' | tail -n 1)" >>"$PACKED"
    fi
  done
done

# Summary table and checks (stdout and RESULTS.txt)
"$PYTHON" - "$RESULTS" "$PACKED" <<'PY' | tee "${RESULTS%.jsonl}.txt"
import json, sys
from collections import defaultdict

MFU_TARGET, MFU_MIN_WIDTH, COMPILE_RATIO = 0.40, 1024, 1.5
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print(f"{'compile':>12} {'depth':>5} {'width':>5} {'batch':>5} {'tokens/s':>12} {'step ms':>8} "
      f"{'MFU':>6} {'compile s':>9} {'mem GiB':>7}  attention")
for r in rows:
    mode = r.get("compile_mode", "default")
    if "error" in r:
        print(f"{mode:>12} {r['depth']:>5} {r['width']:>5} {r['batch_size']:>5}  failed: "
              f"{r['error']}")
        continue
    compile_s = "off" if r["compile_time_s"] is None else f"{r['compile_time_s']:.1f}"
    print(f"{mode:>12} {r['depth']:>5} {r['width']:>5} {r['batch_size']:>5} "
          f"{r['tokens_per_s']:>12,.0f} "
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
    if r["compile_time_s"] is not None and r.get("compile_mode", "default") == "default":
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
packed = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
if packed:
    print(f"{'packed':>6} {'depth':>5} {'width':>5} {'batch':>5} {'tokens/s (sum)':>15} "
          f"{'x one':>6} {'MFU (sum)':>9}")
    alone = {p["width"]: p["tokens_per_s"] for p in packed if p.get("packed") == 1
             and "error" not in p}
    for p in packed:
        if "error" in p:
            print(f"{p['packed']:>6} {'':>5} {p['width']:>5}  failed: {p['error']}")
            continue
        speedup = p["tokens_per_s"] / alone[p["width"]] if p["width"] in alone else float("nan")
        print(f"{p['packed']:>6} {p['depth']:>5} {p['width']:>5} {p['batch_size']:>5} "
              f"{p['tokens_per_s']:>15,.0f} {speedup:>6.2f} {100 * p['mfu']:>8.1f}%")
PY
