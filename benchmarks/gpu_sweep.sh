#!/usr/bin/env bash
# GPU sweep (optional, long: about 57 cold processes, 1-2 hours on one GPU). The ten-minute
# go/no-go is benchmarks/gpu_check.sh; this is the measurement sweep it replaced, kept for a
# machine lent for longer. It always exits 0: read its PASS/FAIL lines.
#
# tokens/s and MFU of the trainer's step for the paper's shapes (2 heads, seq 128,
# vocab 2000, bf16, batch 512 or the largest power-of-two batch that fits) with compile off,
# default and max-autotune; compile time against depth (6, 24, 48); and throughput with 1, 2
# and 4 trials packed on one GPU at widths 256 and 512; a sharded trial (TWIN_WORKERS processes,
# sharing the one GPU where only one is lent) and a micro-batched trial, each against its plain
# twin's loss curve; and the smallest and largest cells of search_spaces/gpu_pilot.yaml timed
# for a few steps (the least and the most planned memory), their peak memory against the plan.
#
#   benchmarks/gpu_sweep.sh [RESULTS.jsonl]          # default gpu_sweep_results.jsonl
#
# Parts: COMPILES, PACK_WIDTHS, TWIN_CHECKS or PILOT_SPEC set empty skips that part.
# Twins (benchmarks/twin_check.py; RESULTS_twins.jsonl): TWIN_CHECKS ["sharded micro"] at
# depth TWIN_DEPTH [2] x width TWIN_WIDTH [256], batch TWIN_BATCH [16] of TWIN_SEQ_LEN [128]
# tokens, TWIN_STEPS [40] steps; micro-batches of TWIN_MICRO [4]; a line per check with the
# largest relative difference of the two curves and its tolerance. Pilot cells
# (RESULTS_pilot.jsonl): PILOT_SPEC [search_spaces/gpu_pilot.yaml] planned on PILOT_DEVICE
# [h200]; each cell's `dwtune bench` of PILOT_STEPS [20] steps at its batch (PILOT_BATCH
# overrides it), with the trial's hours at that speed.
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

RESULTS=${1:-gpu_sweep_results.jsonl}
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
COMPILES=${COMPILES-$DEFAULT_COMPILES}  # set empty to skip a part
PACK_WIDTHS=${PACK_WIDTHS-$DEFAULT_PACK}
PACK_COUNTS=${PACK_COUNTS:-"1 2 4"}
PACK_DEPTH=${PACK_DEPTH:-6}
PACK_BATCH=${PACK_BATCH:-$BATCH}
PACK_STEPS=${PACK_STEPS:-50}
PACKED="${RESULTS%.jsonl}_packed.jsonl"
HERE=$(cd "$(dirname "$0")" && pwd)
TWINS="${RESULTS%.jsonl}_twins.jsonl"
TWIN_CHECKS=${TWIN_CHECKS-"sharded micro"}
TWIN_WORKERS=${TWIN_WORKERS:-2}
TWIN_DEPTH=${TWIN_DEPTH:-2}
TWIN_WIDTH=${TWIN_WIDTH:-256}
TWIN_BATCH=${TWIN_BATCH:-16}
TWIN_SEQ_LEN=${TWIN_SEQ_LEN:-128}
TWIN_MICRO=${TWIN_MICRO:-4}
TWIN_STEPS=${TWIN_STEPS:-40}
PILOT="${RESULTS%.jsonl}_pilot.jsonl"
PILOT_SPEC=${PILOT_SPEC-$HERE/../search_spaces/gpu_pilot.yaml}
PILOT_DEVICE=${PILOT_DEVICE:-h200}
PILOT_STEPS=${PILOT_STEPS:-20}
PILOT_BATCH=${PILOT_BATCH:-}
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

: >"$RESULTS"
: >"$PACKED"
: >"$TWINS"
: >"$PILOT"
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

# Twins: a sharded and a micro-batched trial against one plain run (one JSON line each)
if [ -n "$TWIN_CHECKS" ]; then
  echo "twin checks: $TWIN_CHECKS (depth $TWIN_DEPTH x width $TWIN_WIDTH, batch $TWIN_BATCH) ..." >&2
  # shellcheck disable=SC2086  # one word per check
  timeout "$RUN_TIMEOUT_S" "$PYTHON" "$HERE/twin_check.py" $TWIN_CHECKS --device "$DEVICE" \
    --depth "$TWIN_DEPTH" --width "$TWIN_WIDTH" --heads "$HEADS" --seq-len "$TWIN_SEQ_LEN" \
    --batch-size "$TWIN_BATCH" --micro-batch "$TWIN_MICRO" --workers "$TWIN_WORKERS" \
    --steps "$TWIN_STEPS" >>"$TWINS" 2>"$SCRATCH/err-twin" ||
    true  # exit 1: a check ran outside its tolerance (its line says so)
  for check in $TWIN_CHECKS; do
    if ! grep -q "\"check\": \"$check\"" "$TWINS"; then
      reason=$(tail -n 1 "$SCRATCH/err-twin" | tr -d '"\\')
      printf '{"check": "%s", "error": "%s"}\n' "$check" "${reason:-failed or timed out}" >>"$TWINS"
    fi
  done
fi

# Pilot cells: the cells of PILOT_SPEC with the least and the most planned memory
: >"$SCRATCH/pilot-cells"
[ -z "$PILOT_SPEC" ] || "$PYTHON" - "$PILOT_SPEC" "$PILOT_DEVICE" "$PILOT_BATCH" \
  >"$SCRATCH/pilot-cells" <<'PY'
import sys
from dwtune.core.spec import load_spec
from dwtune.study.planning import plan_rows
spec = load_spec(sys.argv[1])
rows = sorted(plan_rows(spec, sys.argv[2]), key=lambda r: r["memory_bytes"])  # planned peak
batch = int(sys.argv[3]) if sys.argv[3] else spec.train.batch_size
steps = spec.train.total_steps(spec.data.seq_len)
for r in (rows[0], rows[-1]):
    print(r["depth"], r["width"], r["heads"], spec.data.seq_len, spec.data.vocab_size, batch,
          r["memory_bytes"], steps)
PY
while read -r depth width heads seq vocab batch planned steps; do
  echo "pilot cell depth $depth x width $width, batch $batch ..." >&2
  if out=$(TORCHINDUCTOR_CACHE_DIR="$SCRATCH/inductor-pilot-$depth-$width" \
    timeout "$RUN_TIMEOUT_S" "$PYTHON" -m dwtune bench --depth "$depth" --width "$width" \
    --heads "$heads" --seq-len "$seq" --vocab-size "$vocab" --batch-size "$batch" \
    --steps "$PILOT_STEPS" --warmup "$WARMUP" --device "$DEVICE" --results none --json \
    2>"$SCRATCH/err-pilot"); then
    "$PYTHON" -c 'import json, sys
row = json.loads(sys.argv[1])
row.update(plan_memory_bytes=int(sys.argv[2]), trial_steps=int(sys.argv[3]),
           trial_hours=int(sys.argv[3]) * row["step_time_s"] / 3600)
print(json.dumps(row))' "$out" "$planned" "$steps" >>"$PILOT"
  else
    reason=$(tail -n 1 "$SCRATCH/err-pilot" | tr -d '"\\')
    printf '{"depth": %d, "width": %d, "error": "%s"}\n' "$depth" "$width" \
      "${reason:-failed or timed out}" >>"$PILOT"
  fi
done <"$SCRATCH/pilot-cells"

# Summary table and checks (stdout and RESULTS.txt)
"$PYTHON" - "$RESULTS" "$PACKED" "$TWINS" "$PILOT" <<'PY' | tee "${RESULTS%.jsonl}.txt"
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
twins = [json.loads(line) for line in open(sys.argv[3]) if line.strip()]
if twins:
    print(f"{'twin':>8} {'workers':>7} {'mbatch':>6} {'steps':>5} {'max rel diff':>12} "
          f"{'rtol':>7} {'plain s':>8} {'twin s':>8}")
    for t in twins:
        if "error" in t:
            print(f"{t['check']:>8}  failed: {t['error']}")
            continue
        print(f"{t['check']:>8} {t['workers']:>7} {t['micro_batch'] or '':>6} {t['steps']:>5} "
              f"{t['max_rel_diff']:>12.2e} {t['rtol']:>7.0e} {t['plain_seconds']:>8.1f} "
              f"{t['twin_seconds']:>8.1f}")
        print(("PASS " if t["passed"] else "FAIL ") + f"{t['check']} trial follows its plain "
              f"twin's loss curve within {t['rtol']:.0e} relative")
pilot = [json.loads(line) for line in open(sys.argv[4]) if line.strip()]
if pilot:
    print(f"{'pilot':>5} {'depth':>5} {'width':>5} {'batch':>5} {'tokens/s':>12} {'MFU':>6} "
          f"{'compile s':>9} {'mem GiB':>7} {'plan GiB':>8} {'trial h':>8}")
    for p in pilot:
        if "error" in p:
            print(f"{'':>5} {p['depth']:>5} {p['width']:>5}  failed: {p['error']}")
            continue
        compile_s = "off" if p["compile_time_s"] is None else f"{p['compile_time_s']:.1f}"
        print(f"{'':>5} {p['depth']:>5} {p['width']:>5} {p['batch_size']:>5} "
              f"{p['tokens_per_s']:>12,.0f} {100 * p['mfu']:>5.1f}% {compile_s:>9} "
              f"{p['peak_memory_bytes'] / 2**30:>7.2f} {p['plan_memory_bytes'] / 2**30:>8.2f} "
              f"{p['trial_hours']:>8.2f}")
PY
