#!/usr/bin/env bash
# The GPU host as a second platform, in one go: builds everything with Meson there (Ubuntu 24.04,
# g++ 13, Catch2 v3; `ninja -k 0` so every compile error shows at once), runs every suite (host
# and GPU), the GPU test binaries under compute-sanitizer, and the one-process allocator
# comparison over every trace in tests/data. Logs go to $OUT (default gpu-out); the last line is
# "gpu_check: N passed, N failed" (steps).
# usage: bench/gpu_check.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
build="${1:-/tmp/gpumemprof-gpu-check}"
mkdir -p "$out"
passed=0
failed=0
step() {  # step NAME COMMAND...: runs it, counts it
  local name=$1
  shift
  if "$@"; then passed=$((passed + 1)); echo "gpu_check: ok $name"; else failed=$((failed + 1)); echo "gpu_check: FAILED $name"; fi
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u; nproc; g++ --version | head -1; } |
  tee "$out/device.txt"
build_all() {
  { [ -f "$build/build.ninja" ] || meson setup "$build" -Dbuildtype=release; } > "$out/build.log" 2>&1 &&
    ninja -C "$build" -k 0 >> "$out/build.log" 2>&1
  local rc=$?
  grep -E "error:|FAILED:" "$out/build.log" | head -40
  return $rc
}
run_suites() {
  timeout 900 meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 8 > "$out/test.log" 2>&1
  local rc=$?
  grep -E "^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|ERROR)|^(Ok|Fail|Skipped|Timeout):" "$out/test.log"
  return $rc
}
compare() {
  local traces=(tests/data/*.trace.gz)
  timeout 600 "$build/bench/gpu_compare" --repeat 3 --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "${traces[@]}" > "$out/compare.txt" 2>&1
}
step build build_all
step "meson test (every suite)" run_suites
step compute-sanitizer bash bench/gpu_sanitize.sh "$build"
[ -x "$build/bench/gpu_compare" ] && step gpu_compare compare
echo "gpu_check: $passed passed, $failed failed"
[ $failed -eq 0 ]
