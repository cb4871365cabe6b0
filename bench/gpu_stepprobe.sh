#!/usr/bin/env bash
# Which candidate cause of the bridge's slower steps is real (issue 30 item 3; docs/bridge-step-time.md)?
# One GPU, torch 2.11, about 150 s of GPU time (ROUNDS=1: about 90 s): bench/gpu_stepprobe.py in fresh processes, interleaved,
# BERT-like (variable lengths) and GPT-2-like training, then a GPU memory probe, per process:
#   round 1: native and bridge (install()) x default and expandable_segments:True, the bridge as a bare
#            CUDAPluggableAllocator (C-level path only: no hooks, no patches; expandable) and under the
#            launcher (default)
#   round 2..ROUNDS (default 2): native and bridge x both policies again
# Each step is split into host enqueue time, process CPU time, GPU time and (torch.profiler) GPU busy
# time, host time in the allocating ops and CUDA runtime calls by name; the table's verdict lines say
# per model and policy whether the gap is noise, host work (in or outside the allocating ops) or GPU
# work (then the memory probe says whether placement is why; each native process also maps 2040 MiB
# through the driver API as 2 MiB and as 20 MiB physical allocations, outside any allocator, and
# times the same gather and copy on both). Before that, bench/bench_bridge (when
# its build succeeds: Google Benchmark) times the bridge's entry points and what each call paid
# before 0daa8db (BM_DeviceCheck: Device::cuda(0), a cudaGetDeviceCount, twice per pair).
# $OUT: summary.log, stepprobe.log (everything printed), stepprobe.md (tables and verdicts),
# bench_bridge.txt, build.log.
# usage: [OUT=DIR] [ROUNDS=N] bench/gpu_stepprobe.sh [BUILD_DIR]   (without BUILD_DIR: build-gpu-graphs here)
# On a host without a GPU: STEPPROBE_DRY=1 bench/gpu_stepprobe.sh checks the script's Python parts only.
if [ "${STEPPROBE_DRY:-0}" = 1 ]; then
  exec python3 "$(dirname "$0")/gpu_stepprobe.py" dry
fi
# shellcheck disable=SC2034  # read by gpu_torch_setup.sh
ROUNDS_DEFAULT=2
. "$(dirname "$0")/gpu_torch_setup.sh" "$@"
P="$SRC/bench/gpu_stepprobe.py"

# The entry points' CPU cost on this host's CPU (simulated devices; DeviceCheck on the real GPU).
if { meson configure "$B" -Dbenchmarks=true && timeout 120 ninja -C "$B" bench/bench_bridge; } >> "$OUT/build.log" 2>&1; then
  timeout 30 "$B/bench/bench_bridge" --benchmark_min_time=0.2 \
    --benchmark_filter='DeviceCheck|Pair/(direct|bridge|pluggable)/expandable:[01]/real_time/threads:1$' \
    > "$OUT/bench_bridge.txt" 2>&1
  say "bench_bridge (ns per pair): $(grep -E '^BM_' "$OUT/bench_bridge.txt" | awk '{printf "%s %s %s; ", $1, $2, $3}')"
else
  say "bench_bridge not built (see build.log); going on without it"
fi

G0=$(date +%s)
probe() {  # probe MODE POLICY RUN
  local launcher=()
  [ "$1" = launcher ] && launcher=(-m gpumemprof_torch.run --out "$OUT/launcher-ranks")
  run_logged "run $3 $1 ${2:-default}" "$OUT/stepprobe.log" \
    env PYTORCH_ALLOC_CONF="$2" timeout 60 python3 "${launcher[@]}" "$P" run "$1" "$3"
}
for i in $(seq 1 "$ROUNDS"); do
  for conf in "" "expandable_segments:True"; do
    for mode in native bridge; do probe $mode "$conf" "$i"; done
  done
  if [ "$i" = 1 ]; then
    probe bare "expandable_segments:True" 1
    probe launcher "" 1
  fi
done
python3 "$P" table "$OUT/stepprobe.log" > "$OUT/stepprobe.md" 2>&1
cat "$OUT/stepprobe.md"
say "GPU part: $(( $(date +%s) - G0 )) s; total $(( $(date +%s) - T0 )) s"
say "$(grep -c "^gpu_stepprobe: ok" "$OUT/summary.log") ok, $(grep -c "^gpu_stepprobe: FAILED" "$OUT/summary.log") failed"
