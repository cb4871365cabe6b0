#!/usr/bin/env bash
# NCCL's share of every rank's device, on the two-GPU host (kind nvidia-h100-x2), < 3 minutes:
#  1. tests/gpu/test_external_memory (lazy and eager module loading) and the per-call cost of
#     tracking, through bench/gpu_device_memory.sh: every allocation kind lands right (cudaMalloc,
#     cudaMallocPitch, cudaMalloc3D, a cudaMallocAsync pool, cuBLAS, cuDNN, NCCL; managed and pinned
#     host memory stay out), unattributed within 2 MiB of zero;
#  2. DDP ResNet-50 under torchrun --nproc_per_node 2 through the launcher with --track-external,
#     then again with GPUMEMPROF_TRACK_EXTERNAL=stacks instead: `gpumemprof summary DIR` shows per rank the
#     device's used bytes beside the allocator's reserved, external bytes and the top owner;
#     checks that libnccl.so holds > 0 bytes on every rank, that unattributed is reported, and
#     that PyTorch's _memory_viz still opens the rank files; with stacks, that each rank file gives
#     libnccl.so's top site a C++ stack (printed).
# usage: OUT=DIR bench/gpu_ddp_external.sh BUILD_DIR   (a CUDA build with CUPTI: python/libgpumemprof_torch.so,
#        tools/gpumemprof, tests/gpu/test_external_memory). Look for "gpu_ddp_external: all passed"
#        and the per-rank table; every FAIL line names its log.
. "$(dirname "$0")/gpu_common.sh"  # B, SRC, OUT, the bridge's environment, fail, say

{ nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  date -u; git -C "$SRC" rev-parse --short HEAD
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
} 2>&1 | tee "$OUT/versions.txt"
timeout 150 ninja -C "$B" python/libgpumemprof_torch.so tools/gpumemprof tests/gpu/test_external_memory \
  tests/gpu/gpu_tracking_overhead > "$OUT/build.log" 2>&1 || { say "FAIL: build (tail of $OUT/build.log:)"; tail -20 "$OUT/build.log"; fail=1; }

say "1. allocation kinds and owners (tests/gpu/test_external_memory, lazy and eager)"
OUT="$OUT" timeout 170 bash "$SRC/bench/gpu_device_memory.sh" "$B" > "$OUT/device_memory.log" 2>&1
grep -E "^test_external_memory|^(FAIL|SKIP)|managed|^\| " "$OUT/device_memory.log"
grep -q "test_external_memory CUDA_MODULE_LOADING=LAZY: exit 0" "$OUT/device_memory.log" &&
  grep -q "test_external_memory CUDA_MODULE_LOADING=EAGER: exit 0" "$OUT/device_memory.log" ||
  { say "FAIL: test_external_memory (see $OUT/device_memory.log and $OUT/device_memory_test_*.txt)"; fail=1; }

# 2. DDP through the launcher, tracking by flag and by environment variable.
run_ddp() {  # NAME EXTRA_LAUNCHER_ARGS...
  local name=$1
  shift
  rm -rf "$OUT/dump-$name"
  say "2. DDP ResNet-50 on 2 GPUs through the launcher ($name)"
  timeout 150 torchrun --standalone --nproc_per_node 2 -m gpumemprof_torch.run --out "$OUT/dump-$name" "$@" \
    "$SRC/bench/torch_ranks_train.py" resnet50 5 2 "$OUT/$name" > "$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { say "FAIL: torchrun exit $rc (tail of $OUT/$name.log:)"; tail -25 "$OUT/$name.log"; fail=1; }
  grep -h "not tracked\|gpumemprof" "$OUT/$name.log" | grep -v "^ " | head -5
  grep -q "device memory at the dump" "$OUT/$name.log" ||
    { say "FAIL: rank 0's summary at exit shows no device memory ($OUT/$name.log)"; fail=1; }
  "$B/tools/gpumemprof" summary "$OUT/dump-$name" > "$OUT/summary-$name.txt" 2>&1 ||
    { say "FAIL: gpumemprof summary exit $? ($OUT/summary-$name.txt)"; fail=1; }
  sed -n '/device memory at the dump/,$p' "$OUT/summary-$name.txt"
  "$B/tools/gpumemprof" summary "$OUT/dump-$name" --json > "$OUT/summary-$name.json" 2> "$OUT/summary-$name.err" ||
    { say "FAIL: gpumemprof summary --json exit $? ($(tail -2 "$OUT/summary-$name.err"))"; fail=1; }
  for r in 0 1; do
    python3 -m torch.cuda._memory_viz stats "$OUT/dump-$name/rank-$r.pickle" > /dev/null 2> "$OUT/viz-$name-$r.err" ||
      { say "FAIL: torch's _memory_viz cannot read dump-$name/rank-$r.pickle: $(tail -1 "$OUT/viz-$name-$r.err")"; fail=1; }
  done
  python3 - "$OUT/summary-$name.json" <<'PY' || fail=1
import json, sys
s = json.load(open(sys.argv[1]))
mib = lambda b: "?" if b is None else "%.1f" % (b / 2**20)
print("| rank | device | used MiB | reserved MiB | external MiB | libnccl.so MiB (top site) | context MiB | code MiB | unattributed MiB |")
print("|---|---|---:|---:|---:|---|---:|---:|---:|")
bad = []
if len(s["ranks"]) != 2:
    bad.append("%d rank(s) in the summary, not 2" % len(s["ranks"]))
for r in s["ranks"]:
    owners = r.get("external_by_owner") or []
    nccl = [o for o in owners if o["owner"].startswith("libnccl.so")]
    print("| %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        r["rank"], r["device"], mib(r.get("device_used_bytes")), mib(r.get("device_reserved_bytes")),
        mib(r.get("external_bytes")), (mib(nccl[0]["bytes"]) + " (" + nccl[0]["top_site"] + ")") if nccl else "none",
        mib(r.get("context_bytes")), mib(r.get("code_bytes")), mib(r.get("unattributed_bytes"))))
    print("    owners: " + ", ".join("%s %s MiB x%d (%s)" % (o["owner"], mib(o["bytes"]), o["count"], o["top_site"])
                                      for o in owners))
    if not r.get("external_tracked"):
        bad.append("rank %d: external memory not tracked" % r["rank"])
    if not nccl or nccl[0]["bytes"] <= 0:
        bad.append("rank %d: no libnccl.so bytes" % r["rank"])
    if r.get("unattributed_bytes") is None or r.get("device_used_bytes") is None:
        bad.append("rank %d: unattributed or used bytes missing" % r["rank"])
for b in bad:
    print("gpu_ddp_external: FAIL: " + b)
print("gpu_ddp_external: per-rank ledger checks %s" % ("FAILED" if bad or s["problems"] else "passed"))
for p in s["problems"]:
    print("  problem: " + p)
sys.exit(1 if bad else 0)
PY
}
run_ddp flag --track-external
export GPUMEMPROF_TRACK_EXTERNAL=stacks  # as =1, and each allocation's C++ stack
run_ddp env
unset GPUMEMPROF_TRACK_EXTERNAL
# With stacks, every rank file names where NCCL's memory came from.
python3 - "$OUT/dump-env" <<'PY' || { say "FAIL: no stack for libnccl.so's top site in the rank files (dump-env)"; fail=1; }
import pickle, sys
ok = True
for r in (0, 1):
    s = pickle.load(open("%s/rank-%d.pickle" % (sys.argv[1], r), "rb"))
    nccl = [o for d in s.get("device_memory", []) for o in d["external_by_owner"] if o["owner"].startswith("libnccl.so")]
    stack = nccl[0].get("top_stack", []) if nccl else []
    print("gpu_ddp_external: rank %d: libnccl.so's top site %s, its stack:" % (r, nccl[0]["top_site"] if nccl else "(none)"))
    for f in stack[:8]:
        print("    " + f)
    ok = ok and len(stack) > 0
sys.exit(0 if ok else 1)
PY

[ $fail -eq 0 ] && say "all passed" || say "some checks FAILED"
exit $fail
