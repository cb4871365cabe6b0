#!/usr/bin/env bash
# Records PyTorch's own reference data on a GPU host (torch 2.11, torchvision, transformers, cupy),
# each run in a fresh process, several at a time (bench/record_references.py says what each is):
# c10's replays of every trace in tests/data under both policies, raw cudaMalloc placement, snapshots
# of processes with CUDA graphs and memory pools, and the forecast workloads at 1x, 2x, 4x and 8x.
# Everything lands in one archive, split into parts under $OUT (default gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
data=/tmp/gmp-references
jobs="${JOBS:-5}"
budget="${BUDGET_S:-430}"
rm -rf "$data" && mkdir -p "$data/c10" "$data/driver" "$data/graphs" "$data/forecast" "$out"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u; nproc
  python3 -c 'import torch, torchvision, transformers; print(torch.__version__, torchvision.__version__, transformers.__version__)'
} > "$data/device.txt" 2>&1
cat "$data/device.txt"
py="python3 bench/record_references.py"
{
  # the largest runs first, so the slow ones do not finish last
  for w in gpt2_eager:1024 bert:512 vit_b16:64 convnext_t:64 resnet50:64 llama_generate:32 moe_dyn:64 resnet18_res:512; do
    echo "forecast ${w%%:*} ${w##*:}"
  done
  for t in tests/data/*.trace.gz; do
    for p in default expandable; do echo "c10-replay $t $p"; done
  done
  echo "graphs capture"; echo "graphs compile"; echo "graphs mempool"; echo "driver"
  for w in gpt2_eager:128:256:512 bert:64:128:256 vit_b16:8:16:32 convnext_t:8:16:32 resnet50:8:16:32 \
           llama_generate:4:8:16 moe_dyn:8:16:32 resnet18_res:64:128:256; do
    IFS=: read -r name a b c <<< "$w"
    for s in $a $b $c; do echo "forecast $name $s"; done
  done
} > "$data/jobs.txt"
run_job() {  # one line of jobs.txt
  set -- $1
  local log
  case $1 in
    forecast) mkdir -p "$data/forecast/$2"; log="$data/forecast/$2/$3.log"
              timeout 300 $py forecast "$2" "$3" "$data/forecast/$2/$3" > "$log" 2>&1 ;;
    c10-replay) local n; n=$(basename "$2" .trace.gz); log="$data/c10/$n.$3.log"
              timeout 300 $py c10-replay "$2" "$3" "$data/c10/$n.$3" > "$log" 2>&1 ;;
    graphs) log="$data/graphs/$2.log"; GRAPH_CASE=$2 timeout 300 $py graphs "$data/graphs" > "$log" 2>&1 ;;
    driver) log="$data/driver/driver.log"; timeout 120 $py driver "$data/driver/cudamalloc.txt" > "$log" 2>&1 ;;
  esac
  echo "$(date -u +%T) rc=$? $*" | tee -a "$data/jobs.log"
}
export -f run_job
export py data
start=$(date +%s)
timeout "$budget" xargs -P "$jobs" -I{} bash -c 'run_job "{}"' < "$data/jobs.txt"
echo "jobs done after $(( $(date +%s) - start )) s"
grep -l -E "Error|Traceback" "$data"/*/*.log "$data"/forecast/*/*.log 2>/dev/null | head -20
for f in $(grep -l -E "Error|Traceback" "$data"/*/*.log "$data"/forecast/*/*.log 2>/dev/null | head -5); do echo "== $f"; tail -4 "$f"; done
cp "$data/jobs.log" "$out/jobs.log" 2>/dev/null
tar -C /tmp -cf - gmp-references | xz -T0 -6 > /tmp/references.tar.xz
ls -la /tmp/references.tar.xz
split -b 15M -d /tmp/references.tar.xz "$out/references.tar.xz.part-"
ls -la "$out"
