#!/usr/bin/env bash
# Issue 15 part B (the stats ledger, annotated locks, the allocator split) on the GPU host: runs,
# from a build folder made there (`meson setup B -Dbuildtype=release -Dbenchmarks=false
# -Dexamples=false` + `ninja`), the CUDA allocator tests, the host allocator suites (g++ 13,
# Catch2 v3), the threaded model stress, and replays every trace in tests/data on cuda:0 and on
# sim:0 with the default policy: the two must agree exactly (peak allocated, peak reserved,
# device mallocs), as they do on the base commit. Also the two-stream trace with expandable
# segments on cuda:0 (the crash of issue 15 stays fixed), and bench_allocator of the base commit
# against this tree (built here, release). About 2-3 minutes on 16 cores.
# Each step logs to $OUT/ledger-<step>.log and prints "<step>: ok" or "<step>: FAILED (exit N)"
# with the log's tail; the last line is "gpu_core_ledger: N passed, N failed".
# usage: OUT=dir [BASE=commit] bench/gpu_core_ledger.sh BUILD_DIR   (BASE: the speed comparison's base, 7db3cf2)
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: OUT=dir bench/gpu_core_ledger.sh BUILD_DIR}"
out="${OUT:-gpu-out}"
mkdir -p "$out"
passed=0
failed=0
step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" > "$out/ledger-$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
    echo "$name: ok"
  else
    failed=$((failed + 1))
    echo "$name: FAILED (exit $rc), last lines of $out/ledger-$name.log:"
    tail -15 "$out/ledger-$name.log" | sed 's/^/    /'
  fi
}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  date -u
  echo "cores: $(nproc)"
  g++ --version | head -1
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} | tee "$out/ledger-device.txt"
for bin in tests/gpu/test_gpu tests/allocator/test_allocator tests/allocator/test_allocator_exceptions \
  tests/stress/stress_allocator tools/gpumemprof; do
  [ -x "$build/$bin" ] || echo "missing: $build/$bin (was the folder built with plain ninja?)"
done
export GPUMEMPROF_SOURCE_DIR="$PWD"

step cuda-allocator-tests 150 "$build/tests/gpu/test_gpu"
step host-allocator-tests 150 "$build/tests/allocator/test_allocator"
step exception-safety 150 "$build/tests/allocator/test_allocator_exceptions"
step stress-8-threads 150 "$build/tests/stress/stress_allocator" --ops 200000 --seeds 1,2 --threads 8
tail -2 "$out/ledger-stress-8-threads.log" | sed 's/^/    /'

# Replay parity: cuda:0 and sim:0 must hand out the same memory (the same policy, PyTorch's).
parity() {
  local bad=0 t name cuda sim
  for t in tests/data/*.trace.gz; do
    name=$(basename "$t" .trace.gz)
    cuda=$("$build/tools/gpumemprof" replay "$t" --device cuda:0 --json) || { echo "$name: cuda:0 replay exit $?"; bad=1; continue; }
    sim=$("$build/tools/gpumemprof" replay "$t" --device sim:0 --json) || { echo "$name: sim:0 replay exit $?"; bad=1; continue; }
    echo "$name cuda:0 $cuda"
    echo "$name sim:0  $sim"
    local key
    for key in peak_allocated_bytes peak_reserved_bytes num_device_alloc; do
      local a b
      a=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['$key'])" "$cuda")
      b=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['$key'])" "$sim")
      if [ "$a" != "$b" ]; then
        echo "$name: $key differs: cuda:0 $a, sim:0 $b"
        bad=1
      fi
    done
  done
  return $bad
}
export -f parity
export build
step replay-parity 150 bash -c parity
grep -E "differs|exit" "$out/ledger-replay-parity.log" | sed 's/^/    /'
step two-stream-expandable 120 "$build/tools/gpumemprof" replay tests/data/two_stream_resnet18.trace.gz \
  --device cuda:0 --config expandable_segments:True --json
# Speed before/after on the host side (simulated device, 16 quiet cores): bench_allocator of the
# base commit ($BASE, default 7db3cf2) and of this tree, each built here in release, alternated 3 times; one
# thread (one stream: the ledger's direct mode), 8 threads on their own streams (journals) and 8
# on one stream. Look for: best-of-3 ns within noise of the base's.
bench_pair() {
  local root
  root=$(mktemp -d)
  mkdir -p "$root/base-src"
  git archive "${BASE:-7db3cf2}" | tar -x -C "$root/base-src" || return 1
  local v opts="-Dbuildtype=release -Dbenchmarks=true -Dtests=false -Dexamples=false -Dcuda=disabled -Dmpi=disabled -Dcupti=disabled"
  (cd "$root/base-src" && meson setup "$root/base" $opts) && meson setup "$root/new" $opts || return 1
  ninja -C "$root/base" bench/bench_allocator & local p1=$!
  ninja -C "$root/new" bench/bench_allocator & local p2=$!
  wait $p1 || return 1
  wait $p2 || return 1
  local f='BM_FixedPair/512$|BM_StreamPairs/own_stream:1/real_time/threads:(1|8)$|BM_StreamPairs/own_stream:0/real_time/threads:8$'
  local r
  for r in 1 2 3; do
    for v in base new; do
      echo "== $v round $r (base ${BASE:-7db3cf2})"
      "$root/$v/bench/bench_allocator" --benchmark_filter="$f" --benchmark_min_time=0.2 2>&1 | grep -E "^BM_"
    done
  done
}
export -f bench_pair
step bench-before-after 170 bash -c bench_pair
grep -E "^==|^BM_" "$out/ledger-bench-before-after.log" | sed 's/^/    /'
echo "gpu_core_ledger: $passed passed, $failed failed"
[ $failed -eq 0 ]
