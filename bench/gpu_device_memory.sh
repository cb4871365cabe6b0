#!/usr/bin/env bash
# Every byte on the device, on the GPU host (under 3 minutes; two GPUs make the NCCL part a real
# communicator): tests/gpu/test_external_memory with lazy and with eager module loading (a direct
# cudaMalloc, a cuBLAS GEMM, cuDNN if present, NCCL over all visible GPUs, a cudaMallocAsync pool:
# each under the right owner; unattributed within 2 MiB of zero), then the per-call cost of tracking
# (tests/gpu/gpu_tracking_overhead, without and with stacks) as a markdown table.
# Usage: bench/gpu_device_memory.sh [BUILD_DIR]; logs go to $OUT (default gpu-out).
# Each step logs on its own and a failing step does not stop the others.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
build="${1:-${BUILD_DIR:-/tmp/gpumemprof-gpu-build}}"
mkdir -p "$out"
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader; date -u;
  git rev-parse --short HEAD 2>/dev/null; } | tee "$out/device_memory_device.txt"
if [ ! -d "$build" ]; then
  meson setup "$build" -Dbuildtype=release -Dbenchmarks=false -Dexamples=false > "$out/device_memory_build.log" 2>&1
fi
timeout 150 ninja -C "$build" tests/gpu/test_external_memory tests/gpu/gpu_tracking_overhead \
  >> "$out/device_memory_build.log" 2>&1 ||
  { echo "build failed: $out/device_memory_build.log"; grep -E -A8 "error" "$out/device_memory_build.log" | head -40; }
grep -E "CUPTI" "$out/device_memory_build.log" | tail -1

# cuBLAS, cuDNN and NCCL: the toolkit's, else the ones that come with torch (nvidia/*/lib).
libs=/usr/local/cuda/lib64
nv=$(python3 -c 'import nvidia, sys; print(list(nvidia.__path__)[0])' 2>/dev/null)
if [ -n "$nv" ]; then
  for d in "$nv"/*/lib; do libs="$libs:$d"; done
fi
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

for mode in LAZY EAGER; do
  log="$out/device_memory_test_${mode,,}.txt"
  CUDA_MODULE_LOADING=$mode timeout 120 "$build/tests/gpu/test_external_memory" > "$log" 2>&1
  echo "test_external_memory CUDA_MODULE_LOADING=$mode: exit $? ($(grep -c '^PASS' "$log") passed," \
       "$(grep -c '^FAIL' "$log") failed, $(grep -c '^SKIP' "$log") skipped)"
  grep -E "^(FAIL|SKIP)" "$log"
  # Where NCCL's memory appears (used and unattributed around each step), what was charged inside
  # calls that allocate nothing (kernel launches growing local memory, peer access), which callbacks ran.
  grep -E "^  (before|after) |^  growth: |^  callbacks:" "$log"
  # The stack of a direct cudaMalloc with stacks on; tracking beside another CUPTI subscriber.
  grep -E -A3 "^  (stack of |with another CUPTI subscriber)" "$log"
done | tee "$out/device_memory_tests.txt"

{
  echo "| device | calls | untracked ns/pair | tracked ns/pair | tracked with stacks ns/pair | tracking costs | stacks cost |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  timeout 60 "$build/tests/gpu/gpu_tracking_overhead" 2000 || echo "| gpu_tracking_overhead failed: exit $? | | | | | | |"
} | tee "$out/device_memory_overhead.md"
