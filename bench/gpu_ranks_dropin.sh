#!/usr/bin/env bash
# The launcher as a drop-in on the two-GPU host (kind nvidia-h200-x2), ~5 minutes:
#  1. memory-api: bench/gpu_bridge.py's memory-API script (each torch.cuda memory function, every
#     device form, compared with gpumemprof_torch.memory_stats()) on both ranks under
#     torchrun --nproc_per_node 2 -m gpumemprof_torch.run: "ok" lines per rank, no FAIL;
#  2. history: a DDP GPT-2-like training under the launcher's --history: the top sites rank 0 prints
#     name the workload's own Python lines (bench/torch_bridge.py), not the bridge, and each rank
#     file holds those Python frames for PyTorch's viewer (torch.cuda._memory_viz trace_plot opens it);
#  3. step time: the same DDP training ($WORKLOADS, default gpt2), ROUNDS interleaved rounds (default
#     3) of four runs each -- PyTorch's allocator and the launcher, default policy and
#     expandable_segments:True (PYTORCH_CUDA_ALLOC_CONF for PyTorch's, --config for the launcher) --
#     then the median over rounds of each run's slower rank's median step, and the peaks.
# PARTS="api history steps" (the default) picks the parts to run.
# usage: OUT=DIR bench/gpu_ranks_dropin.sh BUILD_DIR   (a CUDA build: python/libgpumemprof_torch.so,
#        tools/gpumemprof). Look for "gpu_ranks_dropin: all passed" and the step-time table.
. "$(dirname "$0")/gpu_common.sh"  # B, SRC, OUT, the bridge's environment, fail, say
PARTS=${PARTS:-api history steps}  # which of the three parts to run
ROUNDS=${ROUNDS:-3}
WORKLOADS=${WORKLOADS:-gpt2}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
case $ROUNDS in '' | *[!0-9]* | 0) say "ROUNDS=$ROUNDS is not a positive whole number"; exit 2 ;; esac
[ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ] || { say "needs 2 GPUs; nvidia-smi lists: $(nvidia-smi -L 2>&1 | head -3)"; exit 2; }
say "$(date -u), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x2, commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null)"
timeout 200 ninja -C "$B" python/libgpumemprof_torch.so tools/gpumemprof > "$OUT/build.log" 2>&1 \
  || { say "FAIL: build (tail of $OUT/build.log:)"; tail -20 "$OUT/build.log"; exit 1; }
RANKS=$(mktemp -d)
launch() {  # launch LOG LIMIT ARGS...: torchrun on 2 GPUs, output into LOG; a non-zero exit fails
  local log=$1 limit=$2
  shift 2
  local t0; t0=$(date +%s)
  timeout "$limit" torchrun --standalone --nproc_per_node 2 "$@" >> "$OUT/$log" 2>&1
  local r=$?
  say "$log: exit $r in $(( $(date +%s) - t0 )) s"
  [ $r -eq 0 ] || fail=1
}

part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# 1. The memory API on both ranks.
if part api; then
launch memory-api.log 150 -m gpumemprof_torch.run --out "$RANKS/api" "$SRC/bench/gpu_bridge.py" memory-api
for d in 0 1; do
  grep -q "ok   the launcher installed gpumemprof's allocator (cuda:$d)" "$OUT/memory-api.log" \
    || { say "FAIL: no rank ran the memory-API checks on cuda:$d"; fail=1; }
done
say "memory-api: $(grep -cE '(^|]:)ok ' "$OUT/memory-api.log") ok lines over both ranks"
grep -E '(^|]:)FAIL ' "$OUT/memory-api.log" | head -20
grep -qE '(^|]:)FAIL ' "$OUT/memory-api.log" && fail=1
fi

# 2. --history on a DDP training: the top sites and the rank files name the workload's lines.
if part history; then
launch history.log 200 -m gpumemprof_torch.run --history --out "$RANKS/history" \
  "$SRC/bench/torch_ranks_train.py" gpt2 3 1 "$RANKS/history-result"
grep -A12 -i "top" "$OUT/history.log" | head -30
if grep -q "torch_bridge.py:[0-9]" "$OUT/history.log" && ! grep -q "gpumemprof_malloc at" "$OUT/history.log"; then
  say "history: ok   the top sites name torch_bridge.py's lines"
else
  say "history: FAIL the top sites do not name torch_bridge.py's lines"; fail=1
fi
for r in 0 1; do
  f="$RANKS/history/rank-$r.pickle"
  python3 - "$f" <<'PY' || fail=1
import collections, pickle, sys
snap = pickle.load(open(sys.argv[1], "rb"))
files = collections.Counter(f["filename"].rsplit("/", 1)[-1] for t in snap.get("device_traces", [])
                            for e in t for f in e.get("frames") or [])
ok = files["torch_bridge.py"] > 0
print("gpu_ranks_dropin: %s %s: Python frames from torch_bridge.py %d; files %s"
      % ("ok  " if ok else "FAIL", sys.argv[1].rsplit("/", 1)[-1], files["torch_bridge.py"], files.most_common(4)))
sys.exit(0 if ok else 1)
PY
  # trace_plot embeds the pickle itself (encoded): the page opens what the check above read.
  timeout 120 python3 -m torch.cuda._memory_viz trace_plot "$f" -o "$RANKS/rank-$r.html" >> "$OUT/history.log" 2>&1 \
    && [ -s "$RANKS/rank-$r.html" ] || { say "FAIL: PyTorch's trace_plot cannot read rank-$r.pickle (see $OUT/history.log)"; fail=1; }
done
fi

# 3. Step time, interleaved: PyTorch's allocator vs the launcher, default and expandable segments.
if part steps; then
for i in $(seq "$ROUNDS"); do
  for w in $WORKLOADS; do
    launch steps.log 150 "$SRC/bench/torch_ranks_train.py" "$w" "$STEPS" "$WARMUP" "$OUT/r$i-$w-native-default"
    launch steps.log 150 -m gpumemprof_torch.run --out "$RANKS/d$i" \
      "$SRC/bench/torch_ranks_train.py" "$w" "$STEPS" "$WARMUP" "$OUT/r$i-$w-launcher-default"
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True launch steps.log 150 \
      "$SRC/bench/torch_ranks_train.py" "$w" "$STEPS" "$WARMUP" "$OUT/r$i-$w-native-expandable"
    launch steps.log 150 -m gpumemprof_torch.run --config expandable_segments:True --out "$RANKS/e$i" \
      "$SRC/bench/torch_ranks_train.py" "$w" "$STEPS" "$WARMUP" "$OUT/r$i-$w-launcher-expandable"
  done
done
python3 - "$OUT" $WORKLOADS <<'PY' || fail=1
import glob, json, os, re, statistics, sys
out, workloads = sys.argv[1], sys.argv[2:]
runs = {}  # (workload, allocator, policy) -> round -> [rank results]
for p in glob.glob(os.path.join(out, "r*-*-rank*.json")):
    m = re.match(r"r(\d+)-(\w+)-(native|launcher)-(default|expandable)-rank\d+\.json$", os.path.basename(p))
    if m:
        runs.setdefault(m.group(2, 3, 4), {}).setdefault(int(m.group(1)), []).append(json.load(open(p)))
bad = 0
print("\n| workload | policy | allocator | rounds | median step (ms) | each round (ms) | peak allocated (MiB) | peak reserved (MiB) |")
print("|---|---|---|---:|---:|---|---:|---:|")
for w in workloads:
    for policy in ("default", "expandable"):
        med = {}
        for alloc in ("native", "launcher"):
            rounds = runs.get((w, alloc, policy), {})
            whole = [r for _, r in sorted(rounds.items()) if len(r) == 2]  # both ranks wrote their result
            if not whole:
                print("gpu_ranks_dropin: FAIL: no complete run of %s %s %s" % (w, alloc, policy))
                bad = 1
                continue
            steps = [max(x["median_step_ms"] for x in r) for r in whole]
            med[alloc] = statistics.median(steps)
            print("| %s | %s | %s | %d | %.2f | %s | %.0f | %.0f |" % (
                w, policy, "PyTorch's" if alloc == "native" else "launcher", len(whole), med[alloc],
                " ".join("%.2f" % s for s in steps),
                max(x["peak_allocated_bytes"] for r in whole for x in r) / 2**20,
                max(x["peak_reserved_bytes"] for r in whole for x in r) / 2**20))
        if len(med) == 2:
            print("gpu_ranks_dropin: step time %s %s: launcher %.2f ms vs PyTorch's %.2f (%+.1f%%): %s" % (
                w, policy, med["launcher"], med["native"], 100 * (med["launcher"] / med["native"] - 1),
                "no slower" if med["launcher"] <= med["native"] else "SLOWER"))
sys.exit(bad)
PY
fi
rm -rf "$RANKS"
[ $fail -eq 0 ] && say "all passed" || say "some checks FAILED"
exit $fail
