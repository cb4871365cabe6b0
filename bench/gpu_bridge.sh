#!/usr/bin/env bash
# The PyTorch bridge on one GPU (torch 2.11, ~3 minutes of GPU time): issue 30's three checks.
#   1. memory-api.log  a plain script under `python -m gpumemprof_torch.run` calls each torch.cuda
#                      memory function (every name and device form) and compares it with
#                      gpumemprof_torch.memory_stats(); its own _record_memory_history +
#                      _dump_snapshot hold gpumemprof's snapshot with its Python lines. "ok"/"FAIL" lines.
#   2. history.log     a small model under the launcher's --history: the summary's top sites must
#                      name gpu_bridge.py's lines, not the bridge; stacks.log: a ResNet-50 and a BERT step with
#                      history off / stacks="python" / stacks="all", PyTorch's own vs gpumemprof's.
#   3. bert.log        BERT-base MLM, sequence lengths 64..512, bf16 autocast, AdamW: native vs
#                      bridge, 3 interleaved runs each, median of 12 steps after 4, and per step the
#                      device mallocs/frees, sync-all-streams and allocations (memory_stats deltas).
#   table.md           the native-vs-bridge tables of 2 and 3.
# Also checks.log (test_torch_bridge and the module's checks with a GPU), build.log, summary.log:
# 8 files in $OUT (the rank files of the launcher runs go to a temporary folder).
# usage: [OUT=DIR] bench/gpu_bridge.sh [BUILD_DIR]   (without BUILD_DIR: builds build-gpu-bridge here)
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/gpu-bridge-out}
mkdir -p "$OUT"
say() { echo "gpu_bridge: $*" | tee -a "$OUT/summary.log"; }
if [ $# -ge 1 ]; then
  B=$(cd "$1" && pwd)
else
  B="$SRC/build-gpu-bridge"
  t0=$(date +%s)
  { [ -d "$B" ] || meson setup "$B" "$SRC" -Dbenchmarks=false -Dexamples=false; } > "$OUT/build.log" 2>&1
  ninja -C "$B" python/libgpumemprof_torch.so tests/gpu/test_torch_bridge >> "$OUT/build.log" 2>&1 \
    || { say "FAIL: build (tail of build.log below)"; tail -30 "$OUT/build.log"; exit 1; }
  say "built in $(( $(date +%s) - t0 )) s"
fi
export GPUMEMPROF_TORCH_LIB="$B/python/libgpumemprof_torch.so"
export PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}"
say "$(date -u), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1), commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null)"
python3 -c 'import torch, sys; print("gpu_bridge: python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tee -a "$OUT/summary.log"
fail=0
P="$SRC/bench/gpu_bridge.py"
run() { # run NAME TIMEOUT CMD...: CMD's output into NAME.log; FAIL lines and a non-zero exit fail.
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  timeout "$limit" "$@" >> "$OUT/$name.log" 2>&1
  local r=$?
  say "$name: $* -> exit $r in $(( $(date +%s) - t0 )) s"
  [ "$r" = 0 ] || fail=1
  return $r
}

# The bridge's C functions (Catch2) and the module's checks, GPU visible.
[ -x "$B/tests/gpu/test_torch_bridge" ] && run checks 60 "$B/tests/gpu/test_torch_bridge"
run checks 120 python3 "$SRC/tests/tools/check_torch_package.py" "$GPUMEMPROF_TORCH_LIB"
grep -v "^ok" "$OUT/checks.log" | tail -8
RANKS=$(mktemp -d)

# 1. torch.cuda's memory API under the launcher.
run memory-api 90 python3 -m gpumemprof_torch.run --out "$RANKS/api" "$P" memory-api
grep -c "^ok" "$OUT/memory-api.log" | sed 's/^/gpu_bridge: memory-api ok lines: /'
grep -E "^FAIL|Error|error" "$OUT/memory-api.log" | head -20
grep -q "^FAIL" "$OUT/memory-api.log" && fail=1

# 2. Python stacks: the summary of a --history run names the script's lines; the cost on ResNet-50.
run history 90 python3 -m gpumemprof_torch.run --history --out "$RANKS/history" "$P" history-script
grep -A12 -i "top" "$OUT/history.log" | head -30
if grep -q "gpu_bridge.py" "$OUT/history.log" && ! grep -q "gpumemprof_malloc at" "$OUT/history.log"; then
  say "history: ok   the summary names gpu_bridge.py's lines"
else
  say "history: FAIL the summary does not name gpu_bridge.py's lines"; fail=1
fi
for a in native gpumemprof; do run stacks 120 python3 "$P" stacks "$a"; done

# 3. BERT with variable sequence lengths: native vs bridge, interleaved, 3 runs each; before it, the
# host cost of one tensor's allocation and free through each path (into stacks.log's table).
for a in native gpumemprof; do run stacks 60 python3 "$P" pairs "$a"; done
# 3. BERT with variable sequence lengths: native vs bridge, interleaved, 3 runs each.
for i in 1 2 3; do
  for a in native gpumemprof; do run bert 120 python3 "$P" bert "$a"; done
done
python3 "$P" compare "$OUT/stacks.log" "$OUT/bert.log" > "$OUT/table.md" 2>&1
cat "$OUT/table.md"
grep "^RESULT" "$OUT/bert.log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line[7:])
    print("gpu_bridge: bert", r["alloc"], r["median_ms"], "ms/step; per step", r["per_step"], "peak reserved", r["peak_reserved_mib"], "MiB")'
say "done: $([ $fail = 0 ] && echo all checks passed || echo SOME CHECKS FAILED)"
[ "$fail" = 0 ]
