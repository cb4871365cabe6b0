#!/usr/bin/env bash
# Issue 7 step 2, locks across cudaMalloc (7r), on the GPU host in one batch (~2-3 minutes):
# builds test_gpu, test_allocator and stress_allocator (release), then runs the CUDA allocator
# tests and the multi-stream stress on cuda:0 (its config list includes
# release_lock_on_cudamalloc:True), the lock tests and the malloc-wait figure on the simulated
# device (16 quiet cores: a cleaner figure than the dev VM's), and the threaded model stress with
# 8 threads. Each step logs to $OUT/release-lock-<step>.log and prints "<step>: ok" or
# "<step>: FAILED"; a failing step does not stop the others.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
build="${BUILD_DIR:-/tmp/gpumemprof-7r-build}"
mkdir -p "$out"
step() {
  local name=$1
  shift
  if timeout 150 "$@" > "$out/release-lock-$name.log" 2>&1; then
    echo "$name: ok"
  else
    echo "$name: FAILED (exit $?), see $out/release-lock-$name.log"
  fi
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u; nproc; git rev-parse --short HEAD; } |
  tee "$out/release-lock-device.txt"
step build bash -c "meson setup '$build' -Dbuildtype=release -Dexamples=false -Dbenchmarks=false && \
  ninja -C '$build' tests/gpu/test_gpu tests/allocator/test_allocator tests/stress/stress_allocator"
export GPUMEMPROF_SOURCE_DIR="$PWD"
step gpu-tests "$build/tests/gpu/test_gpu"
step lock-tests "$build/tests/allocator/test_allocator" "[release_lock]"
step measure "$build/tests/allocator/test_allocator" "[.measure]" -s
grep "^config" "$out/release-lock-measure.log"
step stress "$build/tests/stress/stress_allocator" --ops 350000 --seeds 1,2,3 --threads 8
tail -1 "$out/release-lock-stress.log"
