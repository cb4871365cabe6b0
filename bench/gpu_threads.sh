#!/usr/bin/env bash
# Threads on their own streams, and the trace table, on the GPU host (issue 27 items 2 and 5), in
# about two minutes (under 120 s of it on the GPU):
#  1. builds bench/gpu_compare and bench/bench_allocator only, release, in build-gpu-threads/ (with
#     git and the base commit BASE at hand, also gpu_compare and callgrind_pairs of BASE's headers,
#     header-only, for a before/after in the same run);
#  2. gpu_compare --runs threads,traces --contenders gmp,c10: per-thread ns/pair at 1..16 threads
#     (own streams, one stream) for gmp default / expandable / compacting and c10 default /
#     expandable, and ns/pair + peak reserved of every trace in tests/data plus the two random ones;
#  3. the same thread benchmark on sim:0 (bench_allocator BM_StreamPairs, and the ceiling:
#     BM_StreamPairsSeparateAllocators, each thread an allocator of its own): whether the CUDA
#     backend or the allocator limits scaling; callgrind_pairs (1 MiB pairs) before/after on sim:0;
#     BM_LedgerFold: the stats fold's ns per record on this CPU (the serial part);
#  4. perf stat / perf record / perf c2c of 8 threads on sim:0 when perf exists.
# usage: OUT=dir bench/gpu_threads.sh [BASE (default 2f45f70)]
# Every figure and failure goes to $OUT (6 files); the last line of stdout and of
# $OUT/threads_summary.txt: "gpu_threads: N passed, N failed" (steps).
set -uo pipefail
base_commit="${1:-2f45f70}"
out="${OUT:-gpu-threads-out}"
mkdir -p "$out" && out="$(cd "$out" && pwd)" || exit 2
cd "$(dirname "$0")/.." || exit 2
src="$PWD"
summary="$out/threads_summary.txt"
: > "$summary"
passed=0
failed=0
say() { echo "gpu_threads: $*" | tee -a "$summary"; }
step() {  # step NAME COMMAND...: runs it, counts it, says its exit code
  local name=$1
  shift
  local t0=$SECONDS
  "$@"
  local rc=$?
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); say "ok $name ($((SECONDS - t0)) s)"; else
    failed=$((failed + 1)); say "FAILED $name (exit $rc, $((SECONDS - t0)) s)"; fi
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u;
  git rev-parse --short HEAD 2>/dev/null || echo "no git"; g++ --version | head -1; nproc; lscpu 2>/dev/null |
  grep -E "Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\)|L3";
  cat /sys/devices/system/clocksource/clocksource0/current_clocksource; command -v perf || echo "no perf"; } \
  > "$out/threads_device.txt" 2>&1
cat "$out/threads_device.txt"
b="$src/build-gpu-threads"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
torch_dir="$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null)"

build() {
  [ -f "$b/build.ninja" ] || meson setup "$b" -Dbuildtype=release -Dtests=false -Dexamples=false -Dbenchmarks=true \
    -Dtools=true -Dmpi=disabled -Dcupti=disabled || return 1
  ninja -C "$b" bench/gpu_compare bench/bench_allocator || return 1
}
# BASE's headers with this tree's harness (its options), header-only: the "before" column.
build_base() {
  git -C "$src" cat-file -e "$base_commit^{commit}" 2>/dev/null || { echo "no commit $base_commit here: no before column"; return 1; }
  rm -rf "$bb" && mkdir -p "$bb" && git -C "$src" archive "$base_commit" include | tar -x -C "$bb" || return 1
  local flags=(-std=c++20 -O3 -DNDEBUG -pthread -DGPUMEMPROF_WITH_NVTX=0 -DGPUMEMPROF_WITH_CUPTI=0
    -DGPUMEMPROF_WITH_STACKTRACE=0)
  local torch=()
  # shellcheck disable=SC2054  # -Wl,-rpath,DIR is one argument
  [ -n "$torch_dir" ] && torch=(-DGPUMEMPROF_HAVE_TORCH=1 -isystem "$torch_dir/include" -L"$torch_dir/lib" -lc10_cuda
    -lc10 -Wl,-rpath,"$torch_dir/lib")
  c++ "${flags[@]}" -I"$bb/include" -DGPUMEMPROF_WITH_CUDA=1 -I"$src/tools" -I"$cuda_home/include" \
    bench/gpu_compare.cpp -o "$bb/gpu_compare" -L"$cuda_home/lib64" -lcudart -lz "${torch[@]}" -ldl &
  local p1=$!
  c++ "${flags[@]}" -I"$bb/include" -DGPUMEMPROF_WITH_CUDA=0 bench/callgrind_pairs.cpp -o "$bb/callgrind_pairs_base" -ldl &
  local p2=$!
  c++ "${flags[@]}" -I"$src/include" -DGPUMEMPROF_WITH_CUDA=0 bench/callgrind_pairs.cpp -o "$bb/callgrind_pairs_now" -ldl &
  local p3=$!
  local rc=0
  wait $p1 || rc=1
  wait $p2 || rc=1
  wait $p3 || rc=1
  return $rc
}
# Both builds at once (16 cores): the before binaries need nothing from the meson build.
bb="$src/build-gpu-threads-base"
build_base > "$out/threads_build_base.log" 2>&1 &
base_pid=$!
base_done() { wait $base_pid; }
{ step "build (release: gpu_compare, bench_allocator)" build; } > "$out/threads_build.txt" 2>&1
{ step "build before/after binaries of $base_commit (header-only)" base_done; } >> "$out/threads_build_base.log" 2>&1
cat "$out/threads_build_base.log" >> "$out/threads_build.txt" && rm -f "$out/threads_build_base.log"
grep "gpu_threads:" "$out/threads_build.txt" | tail -2
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

compare() {
  timeout 150 "$b/bench/gpu_compare" --runs threads,traces --contenders gmp,c10 --thread-repeat 2 --repeat 3 \
    --commit "$commit" tests/data/*.trace.gz > "$out/threads_compare.txt" 2>&1
  local rc=$?
  grep -E "^\| |^device|parity:|did not take|no CUDA|^###" "$out/threads_compare.txt" | head -60
  [ $rc -ne 0 ] && tail -5 "$out/threads_compare.txt"
  return $rc
}
compare_before() {  # the thread table only, gpumemprof only, with BASE's allocator
  local bin="$bb/gpu_compare"
  [ -x "$bin" ] || { echo "no before binary"; return 1; }
  echo "### before: $base_commit headers, same harness" >> "$out/threads_compare.txt"
  timeout 60 "$bin" --runs threads --contenders gmp --thread-repeat 2 --commit "$base_commit" \
    >> "$out/threads_compare.txt" 2>&1
  local rc=$?
  tail -14 "$out/threads_compare.txt"
  return $rc
}
# Google Benchmark 1.8 wants "0.3s", 1.7 plain seconds.
sec() { "$b/bench/bench_allocator" --benchmark_filter=BM_FixedPair/512 --benchmark_min_time=0.01s > /dev/null 2>&1 &&
  echo "$1s" || echo "$1"; }
sim() {  # sim:0 threads: the allocator alone (no CUDA call on the pair path)
  local mt
  mt="$(sec 0.3)"
  timeout 60 "$b/bench/bench_allocator" --benchmark_filter='BM_StreamPairs(/own_stream:1/|SeparateAllocators)' \
    --benchmark_min_time="$mt" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    --benchmark_counters_tabular=true > "$out/threads_sim.txt" 2>&1
  local rc=$?
  # The fold alone (the serial part): ns per record, by how many streams interleave.
  timeout 30 "$b/bench/bench_allocator" --benchmark_filter='BM_LedgerFold' --benchmark_min_time="$(sec 0.2)" \
    --benchmark_counters_tabular=true >> "$out/threads_sim.txt" 2>&1 || rc=1
  grep -E "median|Benchmark|LedgerFold" "$out/threads_sim.txt"
  local t bin
  for bin in "$bb/callgrind_pairs_base" "$bb/callgrind_pairs_now"; do
    [ -x "$bin" ] || continue
    for t in 1 2 4 8; do
      echo "$(basename "$bin"): $(timeout 20 "$bin" off 200000 $t 1048576)"
    done
  done | tee -a "$out/threads_sim.txt"
  return $rc
}
perf_sim() {  # what 8 threads on their own streams spend their time on (sim:0)
  command -v perf > /dev/null || { echo "no perf on this host"; return 0; }
  local filter='BM_StreamPairs/own_stream:1/.*threads:8$' f="$out/threads_perf.txt" mt
  mt="$(sec 0.5)"
  {
    echo "## perf stat, 8 threads own streams (sim:0)"
    timeout 30 perf stat -e task-clock,cycles,instructions,cache-misses,LLC-load-misses,context-switches \
      "$b/bench/bench_allocator" --benchmark_filter="$filter" --benchmark_min_time="$mt" 2>&1 | tail -25
    echo "## perf record -g: top symbols"
    timeout 30 perf record -g -o "$b/perf.data" "$b/bench/bench_allocator" --benchmark_filter="$filter" \
      --benchmark_min_time="$mt" > /dev/null 2>&1 &&
      timeout 40 perf report -i "$b/perf.data" --stdio --no-children --percent-limit 1.5 2>/dev/null | head -150
    echo "## perf c2c (false sharing: HITM lines)"
    timeout 30 perf c2c record -o "$b/c2c.data" "$b/bench/bench_allocator" --benchmark_filter="$filter" \
      --benchmark_min_time="$mt" > /dev/null 2>&1 &&
      timeout 40 perf c2c report -i "$b/c2c.data" --stdio 2>/dev/null | head -120
  } > "$f" 2>&1
  grep -E "instructions|cycles|cache-misses|task-clock" "$f" | head -8
  return 0
}
step "gpu_compare threads + traces (cuda:0)" compare
step "gpu_compare threads before ($base_commit, cuda:0)" compare_before
step "threads on sim:0 (bench_allocator, callgrind_pairs)" sim
step "perf (sim:0, 8 threads)" perf_sim
say "$passed passed, $failed failed"
[ $failed -eq 0 ]
