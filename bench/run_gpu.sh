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
# gpu_compare ends in markdown tables (device, date, commit, command) for bench/RESULTS.md: single
# thread (fixed sizes, traces on the streams they record) and the thread runs (1-16 threads).
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
traces=(tests/data/*.trace.gz)  # PyTorch's recorded workloads, held-out kinds (two streams, variable lengths) too
timeout 400 "$build/bench/gpu_compare" --repeat 5 --commit "$commit" "${traces[@]}" | tee "$out/compare.txt"
for t in "${traces[@]}"; do
  "$build/tools/gpumemprof" replay "$t" --device cuda:0 --config expandable_segments:True \
    --repeat 5 --json
done | tee "$out/replay_cuda_expandable.txt"
# gpu_compare switches c10 to expandable segments in-process; a second process configured by
# PYTORCH_CUDA_ALLOC_CONF cross-checks that figure.
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 300 "$build/bench/gpu_compare" --c10-only --repeat 5 \
  --commit "$commit" "${traces[@]}" | tee "$out/compare_c10_expandable.txt"
"$build/tests/allocator/test_allocator" "expandable on held-out*" -s 2>&1 | grep -E "peak live|passed|failed" |
  tee "$out/expandable_workloads.txt"
timeout 120 "$build/tools/gpumemprof" demo --device cuda:0 --output /tmp/gpumemprof-demo > "$out/demo.txt" 2>&1
tail -25 "$out/demo.txt"
GPUMEMPROF_SOURCE_DIR="$PWD" timeout 200 "$build/bench/bench_allocator" --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 > "$out/bench_allocator.txt" 2>&1
grep -E "median" "$out/bench_allocator.txt"

# --- Reliability (issue 9): compute-sanitizer over the GPU tests (incl. the multi-stream
# stress), and the 100M-operation model-checked allocator stress spread over every core.
# Each step logs to $out and a failure does not stop the others.
bench/gpu_sanitize.sh "$build" 2>&1 | tee "$out/sanitize.txt"
"$build/tests/gpu/test_gpu" "multi-stream*" > "$out/multistream.txt" 2>&1
tail -3 "$out/multistream.txt"
if [ -x "$build/tests/stress/stress_allocator" ]; then
  jobs=$(nproc)
  per_seed=$((100000000 / jobs + 1))
  start_s=$(date +%s)
  for j in $(seq 1 "$jobs"); do
    "$build/tests/stress/stress_allocator" --ops "$per_seed" --seeds "$j" --threads 4 --quiet > "$out/stress-$j.txt" 2>&1 &
  done
  wait
  echo "stress: $jobs processes x $per_seed operations, $(( $(date +%s) - start_s )) s" | tee "$out/stress.txt"
  cat "$out"/stress-*.txt | tee -a "$out/stress.txt" | grep -c "all checks held" | sed 's/^/stress: seeds passed: /'
fi
# --- issue 8: the PyTorch bridge and C++ stacks on this host --------------------------------------
# The bridge's C functions (also in the test log above as torch-bridge), then ResNet-50 and GPT-2
# training on gpumemprof's allocator vs PyTorch's, with the snapshot checked by PyTorch's own
# _memory_viz. Which stack mode Meson picked here (Ubuntu 24.04: header-backtrace) and the
# stacks test that asserts a frame names its own source file.
grep -E "C\+\+ stack traces" "$out/build.log" | tail -1 | tee "$out/stacks_mode.txt"
timeout 120 "$build/tests/history/test_history" "A captured frame names its own source file*" \
  > "$out/stacks_test.txt" 2>&1
echo "stacks test exit $?: $(tail -2 "$out/stacks_test.txt" | tr '\n' ' ')"
timeout 120 "$build/tests/gpu/test_torch_bridge" > "$out/torch_bridge_capi.txt" 2>&1
echo "torch bridge C API test exit $?: $(tail -2 "$out/torch_bridge_capi.txt" | tr '\n' ' ')"
GPUMEMPROF_TORCH_LIB="$build/python/libgpumemprof_torch.so" timeout 1200 python3 bench/torch_bridge.py \
  --out "$out/torch_bridge" > "$out/torch_bridge.txt" 2>&1
echo "torch_bridge.py exit $?"
tail -12 "$out/torch_bridge.txt"
# --- issue 10 step 4: snapshot reports at scale, on this host's CPU --------------------------------
# summary / html / perfetto / replay SNAPSHOT on synthetic snapshots of 1M and 10M entries, and on
# a PyTorch-made snapshot of ~2M entries (PyTorch's pickle memoizes every dict and list): wall,
# CPU and peak RSS per command as a markdown table (goal: < 1 GB and < 30 s at 10M).
mkdir -p "$out/scale"
timeout 300 python3 bench/torch_big_snapshot.py "$out/scale/torch_2M.pickle" 2000000 > "$out/torch_big_snapshot.txt" 2>&1
tail -2 "$out/torch_big_snapshot.txt"
scale_args=(1000000 10000000)
[ -s "$out/scale/torch_2M.pickle" ] && scale_args+=("$out/scale/torch_2M.pickle")
STEP_LIMIT=280 timeout 1500 bench/scale_reports.sh "$build/tools/gpumemprof" "$build/bench/make_big_snapshot" \
  "$out/scale" "${scale_args[@]}" > "$out/scale_reports.txt" 2>&1
tail -6 "$out/scale_reports.txt"
rm -f "$out/scale/torch_2M.pickle" "$out"/scale/*.out
