#!/usr/bin/env bash
# Expandable segments' physical layout on cuda:0 (issue 27 item 1): PyTorch's policy makes one
# physical allocation per page -- 20 MiB in the large pool, 2 MiB in the small one -- as c10's
# ExpandableSegment does; the compacting policy makes 2 MiB ones. One run, about 60-90 s of GPU
# time after the build (torch is not needed):
#   1. test_gpu's expandable cases: data intact through growth, unmaps and OOM; one cuMemCreate and
#      one cuMemMap per page, and the driver's own view (cuMemRetainAllocationHandle: one handle
#      across a 20 MiB page, another on the next page; 2 MiB pages under the compacting policy);
#   2. replays of every tests/data trace with expandable_segments:True and
#      compacting_expandable_segments:True on cuda:0 and on sim:0: every figure but the timings
#      must match (the simulated device refuses an unmap of part of a physical allocation, as the
#      driver does; cuda:0 checks the driver agrees); replays.tsv also has each one's ns per pair
#      (the compacting policy's page moves now release and create physical allocations);
#   3. a random gather over a 2 GiB tensor (64 Mi indices) from cudaMalloc, from our allocator under
#      expandable_segments:True (20 MiB physical allocations) and under the compacting policy
#      (2 MiB): median ms per gather and the ratio to cudaMalloc, rounds interleaved.
# $OUT (default ./gpu-pages-out): summary.log (the verdicts), device.txt, build.log, test_gpu.txt,
# replays.tsv, gather.txt.  usage: [OUT=DIR] bench/gpu_pages.sh [BUILD_DIR]   (run from the
# repository root; without BUILD_DIR a release build goes to /tmp/gpumemprof-pages-build)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-pages-out}
mkdir -p "$OUT"
B=${1:-/tmp/gpumemprof-pages-build}
T0=$(date +%s)
say() { echo "gpu_pages: $*" | tee -a "$OUT/summary.log"; }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u
  git rev-parse --short HEAD 2>/dev/null; } > "$OUT/device.txt" 2>&1
say "device: $(head -1 "$OUT/device.txt"); commit $(tail -1 "$OUT/device.txt")"

# Build: the CLI and test_gpu (meson), the gather program (nvcc for the kernels, g++ for the host).
if [ ! -d "$B" ]; then
  meson setup "$B" -Dbuildtype=release -Dbenchmarks=false -Dexamples=false -Dfuzzers=false \
    -Dtorch_package=false >> "$OUT/build.log" 2>&1
fi
if timeout 300 ninja -C "$B" tools/gpumemprof tests/gpu/test_gpu >> "$OUT/build.log" 2>&1; then
  say "ok: build ($(( $(date +%s) - T0 )) s)"
else
  say "FAILED: build (build.log)"; grep -E -A6 "error" "$OUT/build.log" | head -40
fi
CUDA=${CUDA_HOME:-/usr/local/cuda}
G="$B/gpu_pages_gather"
if { "$CUDA/bin/nvcc" -std=c++17 -O3 -c bench/gpu_pages_gather.cu -o "$G.o" &&
     g++ -std=c++20 -O2 -Iinclude -I"$CUDA/include" -DGPUMEMPROF_WITH_CUDA=1 -DGPUMEMPROF_WITH_STACKTRACE=0 \
       -DGPUMEMPROF_WITH_NVTX=0 -DGPUMEMPROF_WITH_CUPTI=0 bench/gpu_pages_gather.cpp "$G.o" -o "$G" \
       -L"$CUDA/lib64" -lcudart -ldl -lpthread; } >> "$OUT/build.log" 2>&1; then
  say "ok: gather program built"
else
  say "FAILED: gather program (build.log)"
fi

# 1. The GPU tests of expandable segments.
G0=$(date +%s)
timeout 120 "$B/tests/gpu/test_gpu" "expandable GPU*" > "$OUT/test_gpu.txt" 2>&1
rc=$?
if [ $rc = 0 ]; then say "ok: test_gpu [expandable GPU*]: $(tail -2 "$OUT/test_gpu.txt" | tr -s '\n ' ' ')"
else say "FAILED: test_gpu [expandable GPU*] exit $rc: $(tail -3 "$OUT/test_gpu.txt" | tr -s '\n ' ' ')"; fi

# 2. Replays on cuda:0 against sim:0, both expandable policies: equal but for the timings.
# The simulated device gets the GPU's size (the compacting policy's budget reads the device's free
# memory; PyTorch's policy does not depend on it).
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 2>/dev/null | tr -dc 0-9)
[ -n "$total_mib" ] && export GPUMEMPROF_SIM_CAPACITY="${total_mib}MiB"
printf 'trace\tconfig\tdevice\tns_per_pair\tfigures\n' > "$OUT/replays.tsv"
same=0; differ=0
for t in tests/data/*.trace.gz; do
  for conf in expandable_segments:True compacting_expandable_segments:True; do
    figs=()
    for dev in cuda:0 sim:0; do
      j=$(timeout 60 "$B/tools/gpumemprof" replay "$t" --device "$dev" --config "$conf" --repeat 3 --json 2>&1)
      f=$(printf '%s' "$j" | python3 -c 'import json,sys
try:
    d = json.loads(sys.stdin.read())
    print(" ".join("%s=%s" % (k, v) for k, v in sorted(d.items()) if k not in ("device", "trace") and "ns_per" not in k))
except Exception as e:
    print("ERROR", e)' )
      ns=$(printf '%s' "$j" | python3 -c 'import json,sys
try: print(json.loads(sys.stdin.read()).get("ns_per_pair", "-"))
except Exception: print("-")')
      [ "${f#ERROR}" != "$f" ] && f="ERROR: $(printf '%s' "$j" | tail -c 300)"
      figs+=("$f")
      printf '%s\t%s\t%s\t%s\t%s\n' "$(basename "$t" .trace.gz)" "$conf" "$dev" "$ns" "$f" >> "$OUT/replays.tsv"
    done
    if [ "${figs[0]}" = "${figs[1]}" ] && [ "${figs[0]#ERROR}" = "${figs[0]}" ]; then
      same=$((same + 1))
    else
      differ=$((differ + 1))
      say "differs: $(basename "$t") $conf: cuda:0 ${figs[0]} | sim:0 ${figs[1]}"
    fi
  done
done
if [ $differ = 0 ]; then say "ok: replays on cuda:0 equal sim:0's ($same trace x config)"
else say "FAILED: replays: $differ of $((same + differ)) differ between cuda:0 and sim:0 (replays.tsv)"; fi

# 3. The random gather: 20 MiB vs 2 MiB physical allocations vs cudaMalloc.
timeout 120 "$G" 3 20 > "$OUT/gather.txt" 2>&1
rc=$?
if [ $rc = 0 ]; then say "ok: gather: $(grep '^median' "$OUT/gather.txt" | sed 's/  */ /g' | tr '\n' ';')"
else say "FAILED: gather exit $rc: $(tail -3 "$OUT/gather.txt" | tr '\n' ' ')"; fi
say "GPU part $(( $(date +%s) - G0 )) s; total $(( $(date +%s) - T0 )) s"
say "$(grep -c '^gpu_pages: ok' "$OUT/summary.log") ok, $(grep -c '^gpu_pages: FAILED' "$OUT/summary.log") failed"
