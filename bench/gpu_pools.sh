#!/usr/bin/env bash
# CUDA graphs and private pools on cuda:0 (about a minute of GPU time after the build): the GPU
# capture test (allocations and frees inside a capture on two streams, 100 replays, default and
# expandable segments) plain and under compute-sanitizer (memcheck; racecheck is too slow for the
# budget). Usage: bench/gpu_pools.sh [BUILD_DIR]; logs go to $OUT (default gpu-out).
# Look for "pools: capture test: exit 0" and "pools: compute-sanitizer: exit 0" with
# "ERROR SUMMARY: 0 errors".
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${BUILD_DIR:-/tmp/gpumemprof-gpu-build}}
out=${OUT:-gpu-out}
mkdir -p "$out"
echo "pools: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(date -u), $(git -C "$src" rev-parse --short HEAD)" |
  tee "$out/pools_device.txt"
[ -d "$build" ] || meson setup "$build" "$src" -Dbuildtype=release -Dbenchmarks=false -Dexamples=false > "$out/pools_build.log" 2>&1
timeout 240 ninja -C "$build" tests/gpu/test_gpu >> "$out/pools_build.log" 2>&1 ||
  { echo "pools: build failed: $out/pools_build.log"; grep -E -A8 "error" "$out/pools_build.log" | head -40; exit 1; }
timeout 60 "$build/tests/gpu/test_gpu" "[graph]" > "$out/pools_capture.log" 2>&1
echo "pools: capture test: exit $?"; tail -4 "$out/pools_capture.log"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 120 "$sanitizer" --tool memcheck --error-exitcode 1 "$build/tests/gpu/test_gpu" "[graph]" \
  > "$out/pools_sanitizer.log" 2>&1
echo "pools: compute-sanitizer: exit $?"; grep -E "ERROR SUMMARY|passed|failed" "$out/pools_sanitizer.log" | tail -3
