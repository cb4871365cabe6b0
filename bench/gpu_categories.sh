#!/usr/bin/env bash
# Memory by category on one GPU (< 3 minutes): bench/gpu_categories.py runs ResNet-50 and GPT-2
# small, each on PyTorch's allocator under torch.profiler and on gpumemprof's through the bridge
# with gpumemprof_torch.categorize(), and prints a markdown table of per-category peaks.
# Look for, on parameter, gradient and optimizer_state: "ours = own: ok" (our requested-bytes peak
# is the bytes of the tensors themselves) and "torch (MEASURE): exact: ok" -- torch.profiler's peak
# against ours in the measure it uses (requested bytes for the pre-existing parameters, allocated =
# block bytes for gradients and optimizer state) -- or "named tensors exact: ok; torch adds N bytes
# of other tensors" (its data-flow guess puts more tensors there: listed below the table), or FAIL.
# "within 5% (allocated): ok" on activation. Below the table, torch's peaks by tensor (named
# tensors whose torch bytes are not their final block; "other tensors in torch's CATEGORY" grouped
# by the op and module that made them), then how torch's activation rule met the first forward
# ops (why a tensor is or is not ACTIVATION there). The last line "gpu_categories: all checks
# passed". A failed run prints its log's end.
# usage: bench/gpu_categories.sh BUILD_DIR   (a CUDA build: python/libgpumemprof_torch.so);
#        logs, results and torch's timelines go to $OUT.
set -u
B=$(cd "${1:?usage: bench/gpu_categories.sh BUILD_DIR}" && pwd)
shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/gpu-categories-out}
mkdir -p "$OUT"
export GPUMEMPROF_TORCH_LIB="$B/python/libgpumemprof_torch.so"
export PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}"
echo "gpu_categories: $(date -u), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2 | tr '\n' ' ')"
python3 -c 'import torch, torchvision, transformers; print("gpu_categories: torch", torch.__version__, "torchvision", torchvision.__version__, "transformers", transformers.__version__, "cuda", torch.version.cuda)' 2>&1
ls -l "$GPUMEMPROF_TORCH_LIB" || { echo "gpu_categories: FAIL: no $GPUMEMPROF_TORCH_LIB (build python/libgpumemprof_torch.so)"; exit 1; }
fail=0
# The bridge's C functions for categories (a Catch2 test on the GPU) and the module's checks.
if [ -x "$B/tests/gpu/test_torch_bridge" ]; then
  timeout 60 "$B/tests/gpu/test_torch_bridge" "the bridge tags*" > "$OUT/test_torch_bridge.log" 2>&1
  r=$?; echo "gpu_categories: test_torch_bridge (categories): exit $r"; tail -4 "$OUT/test_torch_bridge.log"
  [ "$r" = 0 ] || fail=1
else
  echo "gpu_categories: no $B/tests/gpu/test_torch_bridge (skipped)"
fi
# The category ledger's cost per allocate+free pair (CPU only; mode:2 - mode:0 = counting requested
# and allocated bytes; not a check): the RESULTS section "Memory categories: cost on the allocation path".
if [ -x "$B/bench/bench_allocator" ]; then
  GPUMEMPROF_SOURCE_DIR="$SRC" timeout 60 "$B/bench/bench_allocator" --benchmark_filter='BM_FixedPair/512$|BM_CategoryPair' \
    --benchmark_min_time=0.3 --benchmark_repetitions=5 --benchmark_report_aggregates_only=true > "$OUT/bench_category_cost.log" 2>&1
  echo "gpu_categories: bench_allocator (category cost): exit $?"; grep -E "median|min" "$OUT/bench_category_cost.log" | head -8
fi
timeout 120 python3 "$SRC/tests/tools/check_torch_package.py" "$GPUMEMPROF_TORCH_LIB" > "$OUT/check_torch_package.log" 2>&1
r=$?; echo "gpu_categories: check_torch_package.py: exit $r"; grep -v "^ok" "$OUT/check_torch_package.log" | tail -20
[ "$r" = 0 ] || fail=1
timeout 170 python3 "$SRC/bench/gpu_categories.py" --out "$OUT" "$@" 2>&1 | tee "$OUT/table.md"
rc=${PIPESTATUS[0]}
echo "gpu_categories: bench exit $rc, earlier checks $([ $fail = 0 ] && echo passed || echo FAILED)"
[ "$rc" = 0 ] && [ "$fail" = 0 ]
