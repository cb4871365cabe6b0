#!/usr/bin/env bash
# Issue 27 on the GPU host (torch 2.11, nvcc, meson, ninja), under 2 minutes: builds only
# gpu_compare and the gpumemprof CLI (release), then
#  1. gpu_compare --repeat 1 over tests/data's traces: the "default parity" and "expandable parity"
#     lines (peak allocated, peak reserved, device maps of the cold replay, gmp against c10 in one
#     process) must all say "equal";
#  2. every trace replayed with expandable_segments:True and compacting_expandable_segments:True on
#     cuda:0 and sim:0 (3 warm replays): the two devices must agree; warm maps/unmaps are printed.
# usage: OUT=dir bench/gpu_expandable_parity.sh [BUILD_DIR]   (default: build-gpu-expandable)
# Logs: $OUT/parity_*.txt; last line "gpu_expandable_parity: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
mkdir -p "$out"
build="${1:-build-gpu-expandable}"
passed=0
failed=0
step() {  # step NAME COMMAND...
  local name=$1
  shift
  "$@"
  local rc=$?
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); echo "gpu_expandable_parity: ok $name"; else
    failed=$((failed + 1)); echo "gpu_expandable_parity: FAILED $name (exit $rc)"; fi
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u;
  git rev-parse --short HEAD 2>/dev/null; python3 -c 'import torch; print(torch.__version__)'; } 2>&1 |
  tee "$out/parity_device.txt"
build_it() {
  [ -d "$build" ] || meson setup "$build" -Dbuildtype=release -Dtests=false -Dexamples=false -Dbenchmarks=true \
    > "$out/parity_build.txt" 2>&1 || return 1
  ninja -C "$build" bench/gpu_compare tools/gpumemprof >> "$out/parity_build.txt" 2>&1
}
step build build_it || { tail -30 "$out/parity_build.txt"; echo "gpu_expandable_parity: $passed passed, $failed failed"; exit 1; }

compare() {
  timeout 300 "$build/bench/gpu_compare" --repeat 1 tests/data/*.trace.gz > "$out/parity_gpu_compare.txt" 2>&1
  local rc=$?
  grep -E "parity" "$out/parity_gpu_compare.txt"
  return $rc
}
step gpu-compare compare

replays() {
  local t dev conf bad=0
  for conf in expandable_segments:True compacting_expandable_segments:True; do
    for t in tests/data/*.trace.gz; do
      for dev in cuda:0 sim:0; do
        timeout 60 "$build/tools/gpumemprof" replay "$t" --device "$dev" --config "$conf" --repeat 3 --json ||
          echo "{\"trace\":\"$t\",\"device\":\"$dev\",\"config\":\"$conf\",\"error\":true}"
      done
    done
  done > "$out/parity_replays.jsonl" 2> "$out/parity_replays_stderr.txt"
  python3 - "$out/parity_replays.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bad = 0
for i in range(0, len(rows) - 1, 2):
    c, s = rows[i], rows[i + 1]
    if "error" in c or "error" in s:
        print("ERROR", c.get("trace"), c.get("config")); bad += 1; continue
    keys = ("peak_allocated_bytes", "peak_reserved_bytes", "num_device_alloc")
    same = all(c[k] == s[k] for k in keys)
    bad += not same
    print("%-40s cuda:0 %s sim:0 %s %s warm maps/unmaps %.1f/%.1f ns/pair %.1f" % (
        c["trace"].split("/")[-1], [c[k] for k in keys], [s[k] for k in keys], "same" if same else "DIFFER",
        c["warm_num_device_alloc"], c["warm_num_device_free"], c["ns_per_pair"]))
sys.exit(1 if bad else 0)
PY
}
step replays replays | tee "$out/parity_replays.txt"
echo "gpu_expandable_parity: $passed passed, $failed failed"
