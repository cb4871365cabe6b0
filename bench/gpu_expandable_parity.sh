#!/usr/bin/env bash
# Issue 27 on the GPU host (torch 2.11, nvcc, meson, ninja), under 2 minutes: builds only
# gpu_compare and the gpumemprof CLI (release), then
#  1. gpu_compare --repeat 1 over tests/data's traces: the "default parity" and "expandable parity"
#     lines (peak allocated, peak reserved, device maps of the cold replay, gmp against c10 in one
#     process) must all say "equal";
#  2. every trace replayed by the CLI on cuda:0 with expandable_segments:True (must equal PyTorch's
#     figures in tests/data/pytorch_replay_figures.json) and compacting_expandable_segments:True
#     (3 warm replays each): warm maps/unmaps and ns/pair printed.
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

replays() {  # cuda:0; expandable_segments:True must give PyTorch's recorded figures exactly
  local t conf
  for conf in expandable_segments:True compacting_expandable_segments:True; do
    for t in tests/data/*.trace.gz; do
      timeout 60 "$build/tools/gpumemprof" replay "$t" --device cuda:0 --config "$conf" --repeat 3 --json ||
        echo "{\"trace\":\"$t\",\"error\":true}"
    done
  done > "$out/parity_replays.jsonl" 2> "$out/parity_replays_stderr.txt"
  python3 - "$out/parity_replays.jsonl" tests/data/pytorch_replay_figures.json <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
want = json.load(open(sys.argv[2]))["traces"]
bad = 0
for i, r in enumerate(rows):
    conf = "expandable" if i < len(rows) // 2 else "compacting"
    name = r["trace"].split("/")[-1].replace(".trace.gz", "")
    if "error" in r:
        print(conf, name, "ERROR"); bad += 1; continue
    got = (r["peak_allocated_bytes"], r["peak_reserved_bytes"], r["num_device_alloc"])
    note = ""
    if conf == "expandable":
        c = want[name]["expandable"]["cold"]
        exp = (c["peak_allocated_bytes"], c["peak_reserved_bytes"], c["num_device_alloc"])
        note = "= PyTorch" if got == exp else "DIFFERS from PyTorch %s" % (exp,)
        bad += got != exp
    print("%-11s %-20s %s %s warm maps/unmaps %.1f/%.1f ns/pair %.1f" % (conf, name, got, note,
          r["warm_num_device_alloc"], r["warm_num_device_free"], r["ns_per_pair"]))
sys.exit(1 if bad else 0)
PY
}
step replays replays | tee "$out/parity_replays.txt"
echo "gpu_expandable_parity: $passed passed, $failed failed"
