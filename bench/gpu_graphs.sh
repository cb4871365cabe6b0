#!/usr/bin/env bash
# CUDA graphs through the PyTorch bridge on one GPU (torch 2.11; about 100 s of GPU time), issue 26
# item 5. First the bridge's hooks in C++ around a real capture (test_torch_bridge "[graphs]", each policy,
# and once under compute-sanitizer memcheck), then every check in a fresh process (bench/gpu_graphs.py):
#   graph          torch.cuda.graph around an MLP, 100 replays equal eager, the private pool visible
#                  -- native and bridge, default and expandable_segments:True
#   graphed        make_graphed_callables with backward, native and bridge
#   record-stream  Tensor.record_stream delays reuse, native and bridge
#   mempool        the bridge's one line for torch.cuda.MemPool and for cudagraph trees' checkpoints
#   compile        torch.compile(tiny transformer, mode="reduce-overhead"): 3 interleaved native/bridge
#                  pairs, outputs compared across allocators, median step and peak reserved; and once
#                  native-plain (PyTorch's allocator, inductor's plain graphs as under the bridge)
# $OUT: summary.log (one line per check, then "N passed, N failed"), graphs.log (everything the
# checks printed), graphs.md (the tables for bench/RESULTS.md), build.log.
# usage: [OUT=DIR] bench/gpu_graphs.sh [BUILD_DIR]   (without BUILD_DIR: builds build-gpu-graphs here)
# shellcheck disable=SC2034  # read by gpu_torch_setup.sh
GPU_TARGETS=tests/gpu/test_torch_bridge
. "$(dirname "$0")/gpu_torch_setup.sh" "$@"
P="$SRC/bench/gpu_graphs.py"
SAVE=$(mktemp -d)
G0=$(date +%s)
run() { # run LIMIT CONF ARGS...: one fresh process; its check lines into summary.log, all into graphs.log
  local limit=$1 conf=$2; shift 2
  local t0; t0=$(date +%s)
  echo "=== $* (PYTORCH_ALLOC_CONF=$conf)" >> "$OUT/graphs.log"
  PYTORCH_ALLOC_CONF=$conf timeout "$limit" python3 "$P" "$@" > "$SAVE/run.log" 2>&1
  local r=$?
  cat "$SAVE/run.log" >> "$OUT/graphs.log"
  grep -E "^gpu_graphs: (ok|FAILED|the line)" "$SAVE/run.log" | tee -a "$OUT/summary.log"
  # The hooks never raise into libtorch: their failures are printed lines, each a failed check here.
  grep -E "^gpumemprof_torch: (beginAllocateToPool|endAllocateToPool|releasePool|record_stream|gpumemprof_malloc|gpumemprof_free)" \
    "$SAVE/run.log" | head -3 | sed "s/^/gpu_graphs: FAILED $1 ${2:-} ($conf): the bridge printed: /" | tee -a "$OUT/summary.log"
  if [ $r != 0 ] && ! grep -q "^gpu_graphs: FAILED" "$SAVE/run.log"; then
    say "FAILED $* ($conf): exit $r (tail of graphs.log below)"; tail -8 "$SAVE/run.log"
  fi
  echo "=== exit $r in $(( $(date +%s) - t0 )) s" >> "$OUT/graphs.log"
}
# The hooks in C++ around a real capture on two streams (tests/gpu/test_torch_bridge.cpp [graphs]),
# each policy.
for conf in "" "expandable_segments:True"; do
  echo "=== test_torch_bridge [graphs] (GPUMEMPROF_ALLOC_CONF=$conf)" >> "$OUT/graphs.log"
  if GPUMEMPROF_ALLOC_CONF=$conf timeout 60 "$B/tests/gpu/test_torch_bridge" "[graphs]" >> "$OUT/graphs.log" 2>&1; then
    say "ok C++ capture through the hooks, two streams, 100 replays (${conf:-default})"
  else
    say "FAILED C++ capture through the hooks (${conf:-default}): see graphs.log"
  fi
done
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$sanitizer" ]; then
  echo "=== compute-sanitizer memcheck test_torch_bridge [graphs]" >> "$OUT/graphs.log"
  if timeout 120 "$sanitizer" --tool memcheck --error-exitcode 99 "$B/tests/gpu/test_torch_bridge" "[graphs]" \
      >> "$OUT/graphs.log" 2>&1; then
    say "ok C++ capture through the hooks: compute-sanitizer memcheck clean"
  else
    say "FAILED C++ capture through the hooks under compute-sanitizer memcheck: see graphs.log"
  fi
fi
for conf in "" "expandable_segments:True"; do
  for a in native gpumemprof; do run 60 "$conf" graph "$a"; done
done
for a in native gpumemprof; do run 60 "" graphed "$a"; done
for a in native gpumemprof; do run 60 "" record-stream "$a"; done
run 90 "" mempool
# Inductor compiles in this process (no pool of compile workers to start and stop in each of the 7
# processes: the first compiles, the others find its kernels in inductor's caches).
export TORCHINDUCTOR_COMPILE_THREADS=1
for i in 1 2 3; do
  for a in native gpumemprof; do run 150 "" compile "$a" "$i" "$SAVE"; done
done
run 150 "" compile native-plain 1 "$SAVE"  # the control: inductor's plain graphs on PyTorch's allocator
python3 "$P" compare "$SAVE" "$OUT/graphs.log" > "$OUT/graphs.md" 2>&1
grep -E "^gpu_graphs: (ok|FAILED)" "$OUT/graphs.md" | tee -a "$OUT/summary.log"
cat "$OUT/graphs.md"
rm -rf "$SAVE"
passed=$(grep -c "^gpu_graphs: ok" "$OUT/summary.log")
failed=$(grep -c "^gpu_graphs: FAILED" "$OUT/summary.log")
say "GPU part: $(( $(date +%s) - G0 )) s; total $(( $(date +%s) - T0 )) s"
say "$passed passed, $failed failed"
[ "$failed" = 0 ]
