#!/usr/bin/env bash
# The launcher's end of a DDP run on two GPUs (kind nvidia-h100-x2), < 3 minutes:
#  1. DDP ResNet-50 through `torchrun --nproc_per_node 2 -m gpumemprof_torch.run` with a script
#     that calls destroy_process_group() before it ends (bench/torch_ranks_train.py): exit 0 on
#     every rank, ranks.json with both ranks, the cross-rank summary printed by rank 0;
#  2. a small DDP script that never destroys its process group and leaves tensors alive, with
#     --history: the same checks;
#  3. case 1 again with --full-teardown (the interpreter's normal teardown): a diagnostic only --
#     if a rank still dies at exit there, the native frames of the crash are printed (a SIGSEGV
#     handler preloaded into each rank), which names the library whose teardown crashes.
# usage: OUT=DIR bench/gpu_ranks_teardown.sh BUILD_DIR   (a CUDA build: python/libgpumemprof_torch.so,
#        tools/gpumemprof). Look for "gpu_ranks_teardown: all passed"; every FAIL line says why.
. "$(dirname "$0")/gpu_common.sh"  # B, SRC, OUT, the bridge's environment, fail, say

say "commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null), $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count())' 2>&1 | tail -1)"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>&1 | sed 's/^/  /'

# Native frames of a crash: faulthandler (enabled by the launcher) prints Python's, then hands
# the signal on to this handler, which prints the C/C++ frames as "lib.so(+0xoffset)".
cat > "$OUT/segv_frames.c" <<'C'
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
static void on_fatal(int sig) {
  static const char head[] = "segv_frames: native frames of the fatal signal:\n";
  void* frames[64];
  int n = backtrace(frames, 64);
  (void)!write(2, head, sizeof head - 1);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void install(void) {
  void* warm[1];
  (void)backtrace(warm, 1); /* loads libgcc's unwinder now, not inside the handler */
  signal(SIGSEGV, on_fatal);
  signal(SIGABRT, on_fatal);
  signal(SIGBUS, on_fatal);
}
C
PRELOAD=""
if cc -shared -fPIC -O1 -o "$OUT/segv_frames.so" "$OUT/segv_frames.c" 2> "$OUT/segv_frames.build.log"; then
  PRELOAD="$OUT/segv_frames.so"
else
  say "note: no native frames on a crash (cc failed: $(tail -1 "$OUT/segv_frames.build.log"))"
fi

# Offsets into libgpumemprof_torch.so named in a crash log, as functions and lines.
name_frames() {
  grep -h 'libgpumemprof_torch\.so' "$1" | sort -u | head -20 | sed 's/^/  /'
  grep -o 'libgpumemprof_torch\.so(+0x[0-9a-f]*)' "$1" | grep -o '0x[0-9a-f]*' | sort -u | head -20 |
    while read -r off; do echo "  $off: $(addr2line -f -C -e "$GPUMEMPROF_TORCH_LIB" "$off" 2>&1 | paste -sd ' ')"; done
}

# check NAME EXPECT_DESTROY LOG DUMP: exit status, ranks.json, the summary.
check_run() {
  local name=$1 rc=$2 log=$3 dump=$4
  say "$name: torchrun exit $rc"
  if [ "$rc" -ne 0 ]; then
    say "FAIL: $name: torchrun exit $rc (a rank failed); the log's failure lines and tail:"
    grep -n "exitcode\|Signal\|signal\|Fatal\|Error\|error:" "$log" | head -20 | sed 's/^/  /'
    tail -40 "$log" | sed 's/^/  | /'
    grep -q "segv_frames" "$log" && { say "$name: our library's frames in the crash:"; name_frames "$log"; }
    fail=1
  fi
  if python3 - "$dump/ranks.json" <<'PY'
import json, sys
index = json.load(open(sys.argv[1]))
ranks = index["ranks"]
ok = index["world_size"] == 2 and [r["rank"] for r in ranks] == [0, 1] and \
     all(r.get("file") == "rank-%d.pickle" % r["rank"] and r.get("peak_reserved_bytes", 0) > 0 for r in ranks)
for r in ranks:
    print("  rank %s: %s, peak allocated %s, peak reserved %s, file %s%s" % (r["rank"], r.get("device"),
          r.get("peak_allocated_bytes"), r.get("peak_reserved_bytes"), r.get("file"),
          "" if "error" not in r else ", error: " + r["error"]))
sys.exit(0 if ok else 1)
PY
  then say "$name: ranks.json lists both ranks with their files: ok"
  else say "FAIL: $name: ranks.json missing or incomplete ($(ls -A "$dump" 2>&1 | paste -sd ' '))"; fail=1; fi
  if grep -q "rank(s) of world size 2" "$log"; then say "$name: rank 0 printed the cross-rank summary: ok"
  else say "FAIL: $name: no cross-rank summary in $log"; fail=1; fi
  for r in 0 1; do
    python3 -m torch.cuda._memory_viz stats "$dump/rank-$r.pickle" > /dev/null 2>> "$OUT/memory_viz.log" ||
      { say "FAIL: $name: torch's _memory_viz cannot read rank-$r.pickle (see $OUT/memory_viz.log)"; fail=1; }
  done
}

launch() {  # launch LOG DUMP [LAUNCHER OPTIONS] SCRIPT ARGS: torchrun through the launcher; returns its status
  local log=$1 dump=$2
  shift 2
  rm -rf "$dump"
  LD_PRELOAD="$PRELOAD" timeout 150 torchrun --standalone --nproc_per_node 2 -m gpumemprof_torch.run \
    --out "$dump" --wait 30 "$@" > "$log" 2>&1
}

say "1. DDP ResNet-50, the script destroys its process group"
launch "$OUT/destroy.log" "$OUT/dump-destroy" "$SRC/bench/torch_ranks_train.py" resnet50 3 1 "$OUT/destroy"
check_run "destroy_process_group" $? "$OUT/destroy.log" "$OUT/dump-destroy"

say "2. a DDP script that never destroys its process group, with --history"
cat > "$OUT/keep_group.py" <<'PY'
import os
import torch
import torch.distributed as dist
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4096, 4096).cuda(), device_ids=[local_rank])
for _ in range(3):
    model(torch.randn(256, 4096, device="cuda")).sum().backward()
kept = torch.empty((dist.get_rank() + 1) << 26, dtype=torch.uint8, device="cuda")  # alive at exit, unequal
torch.cuda.synchronize()
print("rank %d done" % dist.get_rank(), flush=True)
PY
launch "$OUT/keep.log" "$OUT/dump-keep" --history "$OUT/keep_group.py"
check_run "group kept alive" $? "$OUT/keep.log" "$OUT/dump-keep"
"$B/tools/gpumemprof" summary "$OUT/dump-keep" --json > "$OUT/summary-keep.json" 2> "$OUT/summary-keep.err" &&
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print("  summary --json: max_peak_rank", s["max_peak_rank"], "problems", s["problems"])' "$OUT/summary-keep.json" ||
  { say "FAIL: gpumemprof summary dump-keep --json: $(cat "$OUT/summary-keep.err")"; fail=1; }

say "3. diagnostic: case 1 with --full-teardown (Python's normal teardown; not a pass/fail check)"
launch "$OUT/full-teardown.log" "$OUT/dump-full" --full-teardown "$SRC/bench/torch_ranks_train.py" resnet50 3 1 "$OUT/full"
rc=$?
say "full teardown: torchrun exit $rc ($([ $rc -eq 0 ] && echo "the teardown no longer crashes" || echo "a rank still dies in the teardown"))"
if [ $rc -ne 0 ]; then
  grep -n "exitcode\|Fatal Python\|Segmentation\|segv_frames" "$OUT/full-teardown.log" | head -10 | sed 's/^/  /'
  grep -A40 "segv_frames:" "$OUT/full-teardown.log" | head -45 | sed 's/^/  | /'
  say "our library's frames in that crash (none: the crash is in another library):"
  name_frames "$OUT/full-teardown.log"
fi

[ $fail -eq 0 ] && say "all passed" || say "some checks FAILED"
exit $fail
