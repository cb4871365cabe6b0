#!/usr/bin/env bash
# Issue 30's step-time table on one GPU (torch 2.11; about 200 s of GPU time): BERT-like with variable
# sequence lengths, ConvNeXt-like, GPT-2-like training and a Llama-like generator with a growing KV
# cache (bench/gpu_steptime.py), native PyTorch vs gpumemprof's bridge, default policy and
# expandable_segments:True, ROUNDS (default 3) interleaved runs; each run is a fresh process per (allocator, policy)
# running the four models in sequence.
# $OUT: summary.log (one line per model and run, elapsed time), steptime.log (everything printed),
# steptime.md (the table for bench/RESULTS.md), build.log.
# usage: [OUT=DIR] [ROUNDS=N] bench/gpu_steptime.sh [BUILD_DIR]   (without BUILD_DIR: builds build-gpu-graphs here)
# shellcheck disable=SC2034  # read by gpu_torch_setup.sh
ROUNDS_DEFAULT=3
. "$(dirname "$0")/gpu_torch_setup.sh" "$@"
P="$SRC/bench/gpu_steptime.py"
G0=$(date +%s)
for i in $(seq 1 "$ROUNDS"); do
  for conf in "" "expandable_segments:True"; do
    for a in native gpumemprof; do
      run_logged "run $i $a ${conf:-default}" "$OUT/steptime.log" \
        env PYTORCH_ALLOC_CONF="$conf" timeout 90 python3 "$P" run "$a" "$i"
    done
  done
done
python3 "$P" table "$OUT/steptime.log" > "$OUT/steptime.md" 2>&1
cat "$OUT/steptime.md"
say "GPU part: $(( $(date +%s) - G0 )) s; total $(( $(date +%s) - T0 )) s"
say "$(grep -c "^gpu_steptime: ok" "$OUT/summary.log") ok, $(grep -c "^gpu_steptime: FAILED" "$OUT/summary.log") failed"
