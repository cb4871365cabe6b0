#!/usr/bin/env bash
# Everything that needs a GPU, in one go (the figures in bench/RESULTS.md come from this):
# a release build, the whole test suite with the GPU tests, replays of the shared traces on
# cuda:0, the one-process allocator comparison (gpumemprof vs PyTorch c10 vs cudaMallocAsync vs
# cudaMalloc), the demo on the GPU, and the CPU benchmarks on the GPU host. Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
build="${BUILD_DIR:-/tmp/gpumemprof-gpu-build}"
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u; nproc; } | tee "$out/device.txt"
meson setup "$build" -Dbuildtype=release > "$out/build.log" 2>&1 &&
  ninja -C "$build" >> "$out/build.log" 2>&1 || { grep -E -A8 "error|ERROR" "$out/build.log" | head -80; exit 1; }
timeout 420 meson test -C "$build" --print-errorlogs --num-processes 8 > "$out/test.log" 2>&1
grep -E "^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped):" "$out/test.log"
for t in resnet50_train gpt2_train gpt2_generate; do
  "$build/tools/gpumemprof" replay "tests/data/$t.trace.gz" --device cuda:0 --repeat 5 --json
done | tee "$out/replay_cuda.txt"
timeout 300 "$build/bench/gpu_compare" --repeat 5 tests/data/resnet50_train.trace.gz tests/data/gpt2_train.trace.gz \
  tests/data/gpt2_generate.trace.gz | tee "$out/compare.txt"
for t in resnet50_train gpt2_train gpt2_generate; do
  "$build/tools/gpumemprof" replay "tests/data/$t.trace.gz" --device cuda:0 --config expandable_segments:True \
    --repeat 5 --json
done | tee "$out/replay_cuda_expandable.txt"
# c10 reads PYTORCH_CUDA_ALLOC_CONF once per process: its expandable run is a second process.
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 300 "$build/bench/gpu_compare" --c10-only --repeat 5 \
  tests/data/resnet50_train.trace.gz tests/data/gpt2_train.trace.gz tests/data/gpt2_generate.trace.gz |
  tee "$out/compare_c10_expandable.txt"
"$build/tests/allocator/test_allocator" "expandable on held-out*" -s 2>&1 | grep -E "peak live|passed|failed" |
  tee "$out/expandable_workloads.txt"
timeout 120 "$build/tools/gpumemprof" demo --device cuda:0 --output /tmp/gpumemprof-demo > "$out/demo.txt" 2>&1
tail -25 "$out/demo.txt"
GPUMEMPROF_SOURCE_DIR="$PWD" timeout 200 "$build/bench/bench_allocator" --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 > "$out/bench_allocator.txt" 2>&1
grep -E "median" "$out/bench_allocator.txt"
