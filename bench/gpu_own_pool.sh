#!/usr/bin/env bash
# Issue 29 item 13 on a GPU host (under a minute of GPU time): tests/gpu/test_external_memory,
# whose own_pool_trimmed_and_destroyed step allocates 200 MiB from a cudaMemPoolCreate pool, frees,
# trims to 0 and destroys it (the pool's line must go and unattributed must not drop by 224 MiB),
# with lazy module loading; plus the CPU model of the same (test_device_memory's pool cases).
# Usage: OUT=DIR bench/gpu_own_pool.sh [BUILD_DIR]; logs go to $OUT (at most 4 files).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
build="${1:-${BUILD_DIR:-/tmp/gpumemprof-own-pool-build}}"
mkdir -p "$out"
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader; date -u;
  git rev-parse --short HEAD 2>/dev/null; } > "$out/own_pool_device.txt" 2>&1
if [ ! -d "$build" ]; then
  meson setup "$build" -Dbuildtype=release -Dbenchmarks=false -Dexamples=false -Dtools=false > "$out/own_pool_build.log" 2>&1
fi
timeout 300 ninja -C "$build" tests/gpu/test_external_memory tests/allocator/test_device_memory \
  >> "$out/own_pool_build.log" 2>&1 ||
  { echo "build failed"; grep -E -A8 "error" "$out/own_pool_build.log" | head -40; }
libs=/usr/local/cuda/lib64
nv=$(python3 -c 'import nvidia, sys; print(list(nvidia.__path__)[0])' 2>/dev/null)
if [ -n "$nv" ]; then for d in "$nv"/*/lib; do libs="$libs:$d"; done; fi
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  CUDA_MODULE_LOADING=LAZY timeout 50 "$build/tests/gpu/test_external_memory"
  echo "test_external_memory: exit $?"
  "$build/tests/allocator/test_device_memory" "*memory pool*","*stack ends at main*"
  echo "test_device_memory (pool and stack cases): exit $?"
} > "$out/own_pool_tests.txt" 2>&1
grep -E "^(FAIL|SKIP)|pool|exit|main" "$out/own_pool_tests.txt"
