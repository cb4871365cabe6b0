#!/usr/bin/env bash
# Expandable segments on the H100 against c10's expandable segments, in one go (< 3 minutes):
#  1. every trace in tests/data replayed with expandable_segments:True on cuda:0
#     and on sim:0: page moves per warm replay (maps / unmaps and the bytes they moved), peak
#     reserved against peak requested, ns/pair; cuda:0 and sim:0 must give the same figures;
#  2. the GPU expandable tests (test_gpu "expandable GPU*");
#  3. gpu_compare --repeat 3 over tests/data's traces (gmp and c10, default and expandable).
# usage: OUT=dir bench/gpu_expandable.sh BUILD_DIR   (a build made with plain `ninja`)
# Last line: "gpu_expandable: N passed, N failed" (steps). Logs: $OUT/expandable_*.
set -uo pipefail
build="$(cd "${1:?usage: bench/gpu_expandable.sh BUILD_DIR}" && pwd)" || exit 2
out="${OUT:-gpu-out}"
mkdir -p "$out" && out="$(cd "$out" && pwd)" || exit 2
cd "$(dirname "$0")/.."
passed=0
failed=0
step() {  # step NAME COMMAND...: runs it, counts it, says its exit code
  local name=$1
  shift
  "$@"
  local rc=$?
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); echo "gpu_expandable: ok $name"; else
    failed=$((failed + 1)); echo "gpu_expandable: FAILED $name (exit $rc)"; fi
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u;
  git rev-parse --short HEAD 2>/dev/null; g++ --version | head -1; nproc; } 2>&1 | tee "$out/expandable_device.txt"
cli="$build/tools/gpumemprof"
for f in "$cli" "$build/bench/gpu_compare" "$build/tests/gpu/test_gpu"; do
  [ -x "$f" ] || echo "gpu_expandable: missing $f (was the build folder built with plain ninja?)"
done
traces=(tests/data/*.trace.gz)

replays() {  # one JSON line per trace and device; an error line when the CLI fails
  local t dev rc
  for t in "${traces[@]}"; do
    for dev in cuda:0 sim:0; do
      timeout 60 "$cli" replay "$t" --device "$dev" --config expandable_segments:True --repeat 5 --json \
        2> "$out/expandable_stderr.txt"
      rc=$?
      if [ $rc -ne 0 ]; then
        echo "{\"trace\":\"$t\",\"device\":\"$dev\",\"error\":\"exit $rc\"}"
        tail -3 "$out/expandable_stderr.txt" >&2
      fi
    done
  done > "$out/expandable_replays.jsonl"
  python3 - "$out/expandable_replays.jsonl" <<'EOF'
import json, sys
M = 2 ** 20
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bad = 0
print("%-22s %-6s %9s %8s %7s %11s %13s %8s" % ("trace", "device", "req MiB", "res MiB", "ratio",
                                                "maps/unmaps", "MiB moved", "ns/pair"))
by = {}
for r in rows:
    name = r["trace"].split("/")[-1].replace(".trace.gz", "")
    if "error" in r:
        print("%-22s %-6s ERROR %s" % (name, r["device"], r["error"])); bad += 1; continue
    by.setdefault(name, {})[r["device"]] = r
    print("%-22s %-6s %9.1f %8.0f %7.4f %5.1f/%-5.1f %6.0f/%-6.0f %8.1f" % (
        name, r["device"], r["peak_requested_bytes"] / M, r["peak_reserved_bytes"] / M,
        r["peak_reserved_bytes"] / r["peak_requested_bytes"], r["warm_num_device_alloc"],
        r["warm_num_device_free"], r.get("warm_reserved_bytes_allocated", -M) / M,
        r.get("warm_reserved_bytes_freed", -M) / M, r["ns_per_pair"]))
keys = ["peak_reserved_bytes", "num_device_alloc", "warm_num_device_alloc", "warm_num_device_free",
        "warm_peak_reserved_bytes"]
for name, d in by.items():
    if "cuda:0" in d and "sim:0" in d:
        diff = [k for k in keys if d["cuda:0"].get(k) != d["sim:0"].get(k)]
        if diff:
            print("MISMATCH cuda:0 vs sim:0 on %s: %s" % (name, diff)); bad += 1
print("look for: cuda:0 figures == sim:0 figures (else MISMATCH above); sim:0 on the dev VM gave maps/unmaps"
      " 0/0 on resnet50_train, bert_varlen, gpt2_generate; 3/26.6 gpt2_train, 3/4 gpt2_varlen,"
      " 200/211.2 two_stream_resnet18; ratio <= 1.03 on all; ns/pair of cuda:0 is the cost of those moves")
sys.exit(1 if bad else 0)
EOF
}
gpu_tests() {
  timeout 120 "$build/tests/gpu/test_gpu" "expandable GPU*" > "$out/expandable_gpu_tests.txt" 2>&1
  local rc=$?
  tail -4 "$out/expandable_gpu_tests.txt"
  return $rc
}
compare() {  # c10 expandable is the yardstick: look at the "gmp expandable" and "c10 expandable" columns
  timeout 110 "$build/bench/gpu_compare" --repeat 3 --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    tests/data/*.trace.gz > "$out/expandable_compare.txt" 2>&1
  local rc=$?
  grep -E "^\| |^device|did not take|no CUDA" "$out/expandable_compare.txt" | head -40
  [ $rc -ne 0 ] && tail -5 "$out/expandable_compare.txt"
  return $rc
}
step "replays cuda:0 and sim:0" replays
step "test_gpu expandable" gpu_tests
step "gpu_compare" compare
echo "gpu_expandable: $passed passed, $failed failed"
[ $failed -eq 0 ]
