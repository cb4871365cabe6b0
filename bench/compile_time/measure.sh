#!/usr/bin/env bash
# Compile time of the probes in this folder at -O2, as a user compiles them (the flags
# pkg-config gives), header-only and with the compiled library (-DGPUMEMPROF_COMPILED_LIB, what
# gpumemprof-compiled.pc adds). Usage: bench/compile_time/measure.sh [REPEATS]; the runs of all
# probes and modes are interleaved (a loaded machine slows them alike), and each line gives the
# medians over REPEATS runs: wall seconds, user+sys CPU seconds, the compiler's peak memory (MB).
# INCLUDE_DIR=... measures against another tree's headers; MODES="compiled" measures one mode.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
repeats=${1:-3}
cxx=${CXX:-g++}
flags=(-std=c++20 -O2 -I"${INCLUDE_DIR:-$root/include}" -DGPUMEMPROF_WITH_STACKTRACE=1 -DBOOST_STACKTRACE_LINK)
if [ -f /usr/local/cuda/include/cuda_runtime_api.h ]; then
  flags+=(-DGPUMEMPROF_WITH_CUDA=1 -DGPUMEMPROF_WITH_NVTX=1 -I/usr/local/cuda/include)
fi
read -r -a modes <<< "${MODES:-header-only compiled}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for _ in $(seq "$repeats"); do
  for probe in "$here"/*.cpp; do
    for mode in "${modes[@]}"; do
      extra=()
      [ "$mode" = compiled ] && extra=(-DGPUMEMPROF_COMPILED_LIB=1)
      /usr/bin/time -f "%e %U %S %M" -o "$out/time" "$cxx" "${flags[@]}" "${extra[@]}" -c "$probe" -o "$out/probe.o"
      read -r wall user sys rss < "$out/time"
      echo "$wall $(awk "BEGIN{printf \"%.2f\", $user + $sys}") $((rss / 1024))" >> "$out/$(basename "$probe").$mode"
    done
  done
done
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for probe in "$here"/*.cpp; do
  for mode in "${modes[@]}"; do
    f="$out/$(basename "$probe").$mode"
    printf '%-24s %-12s %6.2f s wall  %6.2f s cpu  %5d MB\n' "$(basename "$probe")" "$mode" \
      "$(cut -d' ' -f1 "$f" | median)" "$(cut -d' ' -f2 "$f" | median)" "$(cut -d' ' -f3 "$f" | median)"
  done
done
