#!/usr/bin/env bash
# Ranks on the two-GPU host (kind nvidia-h100-x2), < 4 minutes:
#  1. DDP ResNet-50 and a GPT-2 step under torchrun --nproc_per_node 2, on PyTorch's allocator and
#     through the launcher (python -m gpumemprof_torch.run) on gpumemprof's: median step time and
#     per-rank peaks as a markdown table; the launcher's rank files pass torch's _memory_viz and
#     `gpumemprof summary DIR --json`;
#  2. install() after torch.cuda.set_device() fails with the message naming the launcher;
#  3. the MPI C++ program on cuda:0 and cuda:1 through mpirun -np 2 (exact per-rank peaks).
# usage: bench/gpu_ranks.sh BUILD_DIR     (a CUDA build with MPI: python/libgpumemprof_torch.so,
#        tools/gpumemprof, tests/integrations/mpi_ranks); logs and rank files go to $OUT.
set -u
B=$(cd "${1:?usage: bench/gpu_ranks.sh BUILD_DIR}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/gpu-ranks-out}
mkdir -p "$OUT"
export GPUMEMPROF_TORCH_LIB="$B/python/libgpumemprof_torch.so"
export PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}"
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
fail=0
say() { echo "gpu_ranks: $*"; }

for w in resnet50 gpt2; do
  say "$w on PyTorch's allocator"
  timeout 150 torchrun --standalone --nproc_per_node 2 "$SRC/bench/torch_ranks_train.py" "$w" "$STEPS" "$WARMUP" \
    "$OUT/$w-pytorch" > "$OUT/$w-pytorch.log" 2>&1 || { say "FAIL: $w on PyTorch's allocator (see $OUT/$w-pytorch.log)"; fail=1; }
  say "$w through the launcher"
  rm -rf "$OUT/dump-$w"
  timeout 150 torchrun --standalone --nproc_per_node 2 -m gpumemprof_torch.run --out "$OUT/dump-$w" \
    "$SRC/bench/torch_ranks_train.py" "$w" "$STEPS" "$WARMUP" "$OUT/$w-gpumemprof" > "$OUT/$w-gpumemprof.log" 2>&1 \
    || { say "FAIL: $w through the launcher (see $OUT/$w-gpumemprof.log)"; fail=1; }
  grep -q "rank(s) of world size 2" "$OUT/$w-gpumemprof.log" || { say "FAIL: rank 0 printed no cross-rank summary"; fail=1; }
  for r in 0 1; do
    python3 -m torch.cuda._memory_viz stats "$OUT/dump-$w/rank-$r.pickle" > /dev/null 2>&1 \
      || { say "FAIL: torch's _memory_viz cannot read dump-$w/rank-$r.pickle"; fail=1; }
  done
  "$B/tools/gpumemprof" summary "$OUT/dump-$w" --json > "$OUT/summary-$w.json" || { say "FAIL: summary dump-$w"; fail=1; }
done

python3 - "$OUT" <<'PY' || fail=1
import glob, json, os, sys
out = sys.argv[1]
rows = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "*-rank*.json")))]
if not rows:
    sys.exit("gpu_ranks: FAIL: no results")
print("\n| workload | allocator | rank | device | median step (ms) | peak allocated (MiB) | peak reserved (MiB) |")
print("|---|---|---|---|---|---|---|")
for r in sorted(rows, key=lambda r: (r["workload"], r["allocator"], r["rank"])):
    print("| %s | %s | %d | %s | %.1f | %.0f | %.0f |" % (r["workload"], r["allocator"], r["rank"], r["device"],
          r["median_step_ms"], r["peak_allocated_bytes"] / 2**20, r["peak_reserved_bytes"] / 2**20))
for p in sorted(glob.glob(os.path.join(out, "summary-*.json"))):
    s = json.load(open(p))
    peaks = {x["rank"]: x["peak_reserved_bytes"] for x in s["ranks"]}
    mine = {r["rank"]: r["peak_reserved_bytes"] for r in rows
            if r["allocator"] == "gpumemprof" and p.endswith("summary-%s.json" % r["workload"])}
    ok = peaks == mine and not s["problems"]
    print("%s: ranks %s, imbalance %s, summary peaks %s the ranks' own: %s"
          % (os.path.basename(p), sorted(peaks), s["imbalance"], "match" if ok else "DO NOT match", "ok" if ok else "FAIL"))
    if not ok:
        sys.exit(1)
PY

say "install() after torch.cuda.set_device()"
python3 - > "$OUT/late-install.log" 2>&1 <<'PY'
import torch, gpumemprof_torch
torch.cuda.set_device(0)
try:
    gpumemprof_torch.install()
    print("installed after set_device (PyTorch accepted it)")
except RuntimeError as e:
    assert "gpumemprof_torch.run" in str(e) and "set_device" in str(e), e
    print("refused, message names set_device and the launcher: ok")
PY
[ $? -eq 0 ] || { say "FAIL: late install (see $OUT/late-install.log)"; fail=1; }
cat "$OUT/late-install.log"

say "MPI C++ program on cuda:0 and cuda:1"
rm -rf "$OUT/mpi-dump"
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$B/tests/integrations/mpi_ranks" dump "$OUT/mpi-dump" cuda \
  > "$OUT/mpi.log" 2>&1 || { say "FAIL: mpi_ranks on 2 GPUs (see $OUT/mpi.log)"; fail=1; }
grep -h "all MPI checks passed\|FAILED" "$OUT/mpi.log"
"$B/tools/gpumemprof" summary "$OUT/mpi-dump" | tee "$OUT/mpi-summary.txt" | head -8

[ $fail -eq 0 ] && say "all passed" || say "some checks FAILED"
exit $fail
