#!/usr/bin/env bash
# GPU check of gpumemprof_torch.forecast() as a user calls it (refine=True, the reduction buffers'
# cap measured on the device; docs/forecast.md): first each workload of bench/record_references.py
# runs at its target size in a fresh process (bench/gpu_record_forecast.sh), then each is forecast
# there from probes at 1x and 2x (bench/forecast_refine_gpu.py: three workloads at once, each probe a
# fresh process) and compared with that run. Writes $OUT/forecast_refine.log, forecast_refine.json
# and forecast.tar.xz (the target runs). BRIDGE=1: the probes and a second run at the target go
# through gpumemprof's allocator (the bridge, built here too), the forecast is checked against that
# run, and the native run's peak is printed beside. KEEP_PROBES=1: every probe's snapshot, in
# $OUT/probes.tar.xz.
# usage: bench/gpu_forecast_refine.sh [BUILD_DIR [WORKLOAD ...]]   (a Meson build folder of this
#        tree: only tools/gpumemprof is built in it; default build-gpu-forecast, set up here, ~1 min)
# Needs torch 2.11 with CUDA, torchvision, transformers, meson, ninja, a C++20 compiler, zlib. GPU
# time: about 1 min of target runs and 3-4 min of probes for the ten workloads.
set -euo pipefail
export OUT=${OUT:-$(mktemp -d)}
cd "$(dirname "$0")/.."
build=${1:-build-gpu-forecast}
shift || true
cuda=-Dcuda=disabled
[ "${BRIDGE:-0}" = 1 ] && cuda=  # the bridge allocates on the device
[ -d "$build" ] || meson setup "$build" -Dtests=false -Dbenchmarks=false -Dexamples=false $cuda >/dev/null
ninja -C "$build" tools/gpumemprof >/dev/null
case $build in /*) export GPUMEMPROF_BIN=$build/tools/gpumemprof ;; *) export GPUMEMPROF_BIN=$PWD/$build/tools/gpumemprof ;; esac
if [ "${BRIDGE:-0}" = 1 ]; then  # probes and the target through gpumemprof's allocator
  ninja -C "$build" python/libgpumemprof_torch.so >/dev/null
  export GPUMEMPROF_TORCH_LIB=${GPUMEMPROF_BIN%/tools/gpumemprof}/python/libgpumemprof_torch.so
fi
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=($(python3 -c 'import sys; sys.path.insert(0, "bench"); import forecast_refine_gpu as f; print(*f.SIZES)'))
targets=$(python3 -c 'import sys; sys.path.insert(0, "bench"); import forecast_refine_gpu as f
print(*(w + ":" + str(f.SIZES[w][1]) for w in sys.argv[1:]))' "${workloads[@]}")
JOBS=${JOBS:-5} bench/gpu_record_forecast.sh $targets > "$OUT/targets.log" 2>&1
actual=$(mktemp -d)
tar -C "$actual" -xJf "$OUT/forecast.tar.xz"
export ACTUAL_DIR=$actual/forecast
export PROBES_DIR=$(mktemp -d)
cd bench
start=$(date +%s)
python3 forecast_refine_gpu.py "${workloads[@]}" 2>&1 | tee "$OUT/forecast_refine.log"
echo "gpu_forecast_refine: $(( $(date +%s) - start )) s (probes and forecasts)" | tee -a "$OUT/forecast_refine.log"
if [ "${KEEP_PROBES:-0}" = 1 ]; then  # every probe's snapshot, for `gpumemprof forecast` elsewhere
  tar -C "$PROBES_DIR" -cf - . | xz -T0 -6 > "$OUT/probes.tar.xz"
fi
