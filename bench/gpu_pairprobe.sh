#!/usr/bin/env bash
# Where a CUDA tensor's allocate + free costs more through the bridge than on PyTorch's allocator
# (issue 30 item 3; docs/bridge-step-time.md): bench/gpu_pairprobe.py in fresh processes, ROUNDS
# (default 2) interleaved rounds of native, trivial (PyTorch's pluggable path around an allocator
# that does nothing), bare (the same around gpumemprof) and bridge (install()). About 60 s of GPU.
# $OUT: summary.log, pairprobe.log, pairprobe.md (the table).
# usage: [OUT=DIR] [ROUNDS=N] bench/gpu_pairprobe.sh [BUILD_DIR]   (without BUILD_DIR: build-gpu-graphs here)
# shellcheck disable=SC2034  # read by gpu_torch_setup.sh
ROUNDS_DEFAULT=2
. "$(dirname "$0")/gpu_torch_setup.sh" "$@"
CUDA=${CUDA_HOME:-/usr/local/cuda}
LIB="$B/pairprobe_alloc.so"
gcc -std=c11 -O2 -shared -fPIC "$SRC/bench/pairprobe_alloc.c" -o "$LIB" -L"$CUDA/lib64" -lcudart >> "$OUT/build.log" 2>&1 \
  || { say "FAILED build of pairprobe_alloc.so (build.log)"; exit 1; }
G0=$(date +%s)
for i in $(seq 1 "$ROUNDS"); do
  for mode in native trivial bare bridge; do
    run_logged "round $i $mode" "$OUT/pairprobe.log" timeout 60 python3 "$SRC/bench/gpu_pairprobe.py" run "$mode" "$LIB"
  done
done
python3 "$SRC/bench/gpu_pairprobe.py" table "$OUT/pairprobe.log" | tee "$OUT/pairprobe.md"
say "GPU part: $(( $(date +%s) - G0 )) s; total $(( $(date +%s) - T0 )) s"
