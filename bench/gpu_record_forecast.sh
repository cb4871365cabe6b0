#!/usr/bin/env bash
# Records forecast workloads only (bench/record_references.py forecast W SIZE), one fresh process
# per (workload, size), JOBS at a time, into $OUT/forecast.tar.xz (W/SIZE.pickle|json|log), the
# layout bench/forecast_accuracy.py reads. The GPU host needs torch 2.11 and torchvision.
# PYTORCH_CUDA_ALLOC_CONF, when set, applies to every run (each W/SIZE.json says it: alloc_conf).
# usage: OUT=DIR bench/gpu_record_forecast.sh WORKLOAD:SIZE[:SIZE...] ...
#   e.g. bench/gpu_record_forecast.sh resnet50_res:64:128:256:512 convnext_t_res:64:128:256:512
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
[ $# -ge 1 ] || { echo "usage: OUT=DIR bench/gpu_record_forecast.sh WORKLOAD:SIZE[:SIZE...] ..." >&2; exit 2; }
out="${OUT:-gpu-out}"
data=$(mktemp -d)/forecast
mkdir -p "$data" "$out"
for w in "$@"; do  # checked before anything runs (the loop below is a pipeline's subshell)
  IFS=: read -r name sizes <<< "$w"
  grep -q "^def w_$name(" bench/record_references.py || { echo "gpu_record_forecast: no workload $name in bench/record_references.py" >&2; exit 2; }
  [[ $sizes =~ ^[1-9][0-9]*(:[1-9][0-9]*)*$ ]] || { echo "gpu_record_forecast: $w: give WORKLOAD:SIZE[:SIZE...], each size a positive whole number" >&2; exit 2; }
done
for w in "$@"; do
  IFS=: read -r name sizes <<< "$w"
  mkdir -p "$data/$name"
  for s in ${sizes//:/ }; do echo "$name $s"; done
done | sort -k2 -n -r > "$data/jobs.txt"  # the largest first
run_job() {  # one line of jobs.txt: WORKLOAD SIZE
  set -- $1
  timeout 300 python3 bench/record_references.py forecast "$1" "$2" "$data/$1/$2" > "$data/$1/$2.log" 2>&1
  echo "$(date -u +%T) rc=$? $1 $2"
}
export -f run_job
export data
start=$(date +%s)
xargs -P "${JOBS:-4}" -I{} bash -c 'run_job "{}"' < "$data/jobs.txt"
echo "gpu_record_forecast: jobs done after $(( $(date +%s) - start )) s"
for f in $(grep -l -E "Error|Traceback" "$data"/*/*.log 2>/dev/null | head -5); do echo "== $f"; tail -4 "$f"; done
tar -C "$(dirname "$data")" -cf - forecast | xz -T0 -6 > "$out/forecast.tar.xz"
ls -la "$out/forecast.tar.xz"
