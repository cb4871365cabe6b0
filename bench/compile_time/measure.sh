#!/usr/bin/env bash
# Compile time of the probes in this folder at -O2, as a user compiles them (the flags
# pkg-config gives). Usage: bench/compile_time/measure.sh [REPEATS]; prints one line a probe:
# best wall seconds, its user+sys CPU seconds and the compiler's peak memory (MB).
# INCLUDE_DIR=... measures against another tree's headers; COMPILED=1 compiles as a user of the
# compiled library does (-DGPUMEMPROF_COMPILED_LIB, what gpumemprof-compiled.pc adds).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
repeats=${1:-3}
cxx=${CXX:-g++}
flags=(-std=c++20 -O2 -I"${INCLUDE_DIR:-$root/include}" -DGPUMEMPROF_WITH_STACKTRACE=1 -DBOOST_STACKTRACE_LINK)
if [ -f /usr/local/cuda/include/cuda_runtime_api.h ]; then
  flags+=(-DGPUMEMPROF_WITH_CUDA=1 -DGPUMEMPROF_WITH_NVTX=1 -I/usr/local/cuda/include)
fi
if [ "${COMPILED:-0}" = 1 ]; then
  flags+=(-DGPUMEMPROF_COMPILED_LIB=1)
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for probe in "$here"/*.cpp; do
  best=""
  for _ in $(seq "$repeats"); do
    /usr/bin/time -f "%e %U %S %M" -o "$out/time" "$cxx" "${flags[@]}" -c "$probe" -o "$out/probe.o"
    read -r wall user sys rss < "$out/time"
    if [ -z "$best" ] || awk "BEGIN{exit !($wall < ${best%% *})}"; then
      best="$wall $(awk "BEGIN{printf \"%.2f\", $user + $sys}") $((rss / 1024))"
    fi
  done
  read -r wall cpu mb <<< "$best"
  printf '%-24s %6.2f s wall  %6.2f s cpu  %5d MB\n' "$(basename "$probe")" "$wall" "$cpu" "$mb"
done
