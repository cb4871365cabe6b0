#!/usr/bin/env bash
# Expandable segments on cuda:0, in one go (under 3 minutes on the H100 host): pages moved per
# warm replay (warm_num_device_alloc / warm_num_device_free), peak reserved and ns/pair of the
# shared traces with expandable segments and with the default policy (the same session), 12 warm
# replays of gpt2_train on one allocator (reserved must not creep up), and the GPU expandable
# tests. Usage: bench/gpu_expandable_check.sh [BUILD_DIR]; logs go to $OUT (default gpu-out).
# Each step logs on its own and a failing step does not stop the others.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
build="${1:-${BUILD_DIR:-/tmp/gpumemprof-gpu-build}}"
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u;
  git rev-parse --short HEAD 2>/dev/null; } | tee "$out/expandable_device.txt"
if [ ! -d "$build" ]; then
  meson setup "$build" -Dbuildtype=release > "$out/expandable_build.log" 2>&1
fi
timeout 150 ninja -C "$build" tools/gpumemprof tests/gpu/test_gpu >> "$out/expandable_build.log" 2>&1 ||
  { echo "build failed: $out/expandable_build.log"; grep -E -A8 "error" "$out/expandable_build.log" | head -40; }
cli="$build/tools/gpumemprof"
for t in resnet50_train gpt2_train gpt2_generate; do
  for conf in expandable_segments:True ""; do
    timeout 60 "$cli" replay "tests/data/$t.trace.gz" --device cuda:0 ${conf:+--config "$conf"} --repeat 5 --json ||
      echo "{\"trace\":\"$t\",\"config\":\"$conf\",\"error\":\"exit $?\"}"
  done
done | tee "$out/expandable_replays.jsonl"
# Reserved must not creep up over many warm replays: warm_peak_reserved_bytes (the most reserved
# over the cold and all 12 warm replays) must equal peak_reserved_bytes (the cold replay's).
timeout 90 "$cli" replay tests/data/gpt2_train.trace.gz --device cuda:0 --config expandable_segments:True \
  --repeat 12 --json | tee "$out/expandable_gpt2_train_12.json"
timeout 120 "$build/tests/gpu/test_gpu" "expandable GPU*" > "$out/expandable_gpu_tests.txt" 2>&1
echo "test_gpu [expandable GPU*] exit $?: $(tail -1 "$out/expandable_gpu_tests.txt")" | tee -a "$out/expandable_gpu_tests.txt"
