#!/usr/bin/env bash
# The GPU test binaries under compute-sanitizer: memcheck (out-of-bounds and misaligned device
# accesses, bad API calls) and racecheck (shared-memory races in our kernels). Each run logs to
# $OUT/sanitize-<tool>-<binary>.log; a failing run does not stop the others. The last line is
# "sanitize: N clean, N failed". Leak checking stays off: the default allocators cache device
# memory until exit by design.
# usage: bench/gpu_sanitize.sh BUILD_DIR [binary ...]   (default: every GPU test binary)
set -uo pipefail
build=${1:?usage: gpu_sanitize.sh BUILD_DIR [binary ...]}
shift
out="${OUT:-gpu-out}"
mkdir -p "$out"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$sanitizer" ]; then
  echo "sanitize: compute-sanitizer not found (CUDA toolkit bin/ not on PATH)"
  echo "sanitize: 0 clean, 1 failed"
  exit 1
fi
binaries=("$@")
if [ ${#binaries[@]} -eq 0 ]; then
  for b in tests/gpu/test_gpu tests/profiler/test_profiler_gpu; do
    [ -x "$build/$b" ] && binaries+=("$build/$b")
  done
fi
clean=0
failed=0
for bin in "${binaries[@]}"; do
  for tool in memcheck racecheck; do
    log="$out/sanitize-$tool-$(basename "$bin").log"
    # Tests named "a real OOM" provoke cudaMalloc failures on purpose (memcheck counts each as an
    # error: test_gpu's OOM case, the bridge's error-value case);
    # racecheck also skips the multi-stream control, whose early reuse is deliberate.
    filter=("~*a real OOM*")
    [ "$tool" = racecheck ] && filter=("~*a real OOM*,~*control*")
    GPUMEMPROF_SOURCE_DIR="$PWD" timeout 900 "$sanitizer" --tool "$tool" --error-exitcode 99 \
      "$bin" "${filter[@]}" > "$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    result=$(grep -E "^(All tests passed|test cases:)" "$log" | tail -1)
    if [ $rc -eq 0 ]; then
      clean=$((clean + 1))
      echo "sanitize: $tool $(basename "$bin"): clean (${summary:-no summary}; $result)"
    else
      failed=$((failed + 1))
      echo "sanitize: $tool $(basename "$bin"): FAILED rc=$rc (${summary:-no summary}; $result); see $log"
      grep -E "^=+ (Invalid|Race|Error|Program hit)" "$log" | sort | uniq -c | head -10
    fi
  done
done
echo "sanitize: $clean clean, $failed failed"
[ $failed -eq 0 ]
