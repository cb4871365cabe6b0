#!/usr/bin/env bash
# GPU check of gpumemprof_torch.forecast(..., refine=True) (docs/forecast.md, "Refine"): ConvNeXt-T
# by batch (8, 16 -> 64) and ResNet-50 by image side (64, 128 -> 512), the workloads of
# bench/record_references.py, each probe a fresh process, both workloads at once; prints each
# forecast before and after the added probe against the peak reserved recorded at the target
# (bench/forecast_refine_gpu.py holds the expected output and its sources). Writes
# $OUT/forecast_refine.log and $OUT/forecast_refine.json.
# usage: bench/gpu_forecast_refine.sh [BUILD_DIR]   (a Meson build folder of this tree: only
#        tools/gpumemprof is built in it; default build-gpu-forecast, set up here, ~1 min)
# Needs torch 2.11 with CUDA, torchvision, meson, ninja, a C++20 compiler, zlib. GPU time: about
# 60 s (6 probes of 5-16 s each plus process starts, two at a time; the forecasts run on the CPU).
set -euo pipefail
export OUT=${OUT:-$(mktemp -d)}
cd "$(dirname "$0")/.."
build=${1:-build-gpu-forecast}
[ -d "$build" ] || meson setup "$build" -Dtests=false -Dbenchmarks=false -Dexamples=false -Dcuda=disabled >/dev/null
ninja -C "$build" tools/gpumemprof >/dev/null
case $build in /*) export GPUMEMPROF_BIN=$build/tools/gpumemprof ;; *) export GPUMEMPROF_BIN=$PWD/$build/tools/gpumemprof ;; esac
cd bench
start=$(date +%s)
python3 forecast_refine_gpu.py 2>&1 | tee "$OUT/forecast_refine.log"
echo "gpu_forecast_refine: $(( $(date +%s) - start )) s (probes and forecasts)" | tee -a "$OUT/forecast_refine.log"
