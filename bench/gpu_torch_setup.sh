# shellcheck shell=bash
# Sourced by the bridge's one-GPU scripts (bench/gpu_graphs.sh, bench/gpu_steptime.sh), first thing:
#   . "$(dirname "$0")/gpu_torch_setup.sh" "$@"
# Sets SRC (the source tree), OUT ($OUT, else ./gpu-<script>-out), T0 (the start), B (the build folder:
# $1, else build-gpu-graphs here), builds there only the bridge's library and $GPU_TARGETS, points
# Python at the bridge in B, gives say() (a line prefixed with the script's name, also into
# $OUT/summary.log) and says the host, GPU, commit and torch.
set -u
GPU_SCRIPT=$(basename "$0" .sh)
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/${GPU_SCRIPT//_/-}-out}
mkdir -p "$OUT"
T0=$(date +%s)
say() { echo "$GPU_SCRIPT: $*" | tee -a "$OUT/summary.log"; }
# ROUNDS, for the scripts that set ROUNDS_DEFAULT before sourcing this: interleaved rounds, a
# whole number from 1 (checked before the build).
if [ -n "${ROUNDS_DEFAULT:-}" ]; then
  ROUNDS=${ROUNDS:-$ROUNDS_DEFAULT}
  case $ROUNDS in
    '' | *[!0-9]*) ROUNDS=0 ;;
  esac
  if [ "$((10#$ROUNDS))" -lt 1 ]; then
    echo "$GPU_SCRIPT: ROUNDS must be a whole number of rounds, 1 or more (default $ROUNDS_DEFAULT)" >&2
    exit 2
  fi
fi
B=${1:-$SRC/build-gpu-graphs}
{ [ -d "$B" ] || meson setup "$B" "$SRC" -Dbenchmarks=false -Dexamples=false -Dtools=false; } > "$OUT/build.log" 2>&1
B=$(cd "$B" && pwd)
# shellcheck disable=SC2086  # GPU_TARGETS: a list of ninja targets
ninja -C "$B" python/libgpumemprof_torch.so ${GPU_TARGETS:-} >> "$OUT/build.log" 2>&1 \
  || { say "FAILED build: tail of build.log below"; tail -30 "$OUT/build.log"; exit 1; }
say "built in $(( $(date +%s) - T0 )) s"
export GPUMEMPROF_TORCH_LIB="$B/python/libgpumemprof_torch.so"
export PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}"
say "$(date -u), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1), commit $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null)"
python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 \
  | sed "s/^/$GPU_SCRIPT: /" | tee -a "$OUT/summary.log"
# run_logged LABEL LOG COMMAND...: runs COMMAND, appends what it printed to LOG under "=== LABEL",
# copies its "<script>: ok|FAILED" lines to summary.log, says a failure's exit status and tail, and
# how long it took (with the GPU part so far, from G0 when the caller set it).
run_logged() {
  local label=$1 log=$2 t0 r
  shift 2
  t0=$(date +%s)
  echo "=== $label" >> "$log"
  "$@" > "$OUT/.run.log" 2>&1
  r=$?
  cat "$OUT/.run.log" >> "$log"
  grep -E "^$GPU_SCRIPT: (ok|FAILED)" "$OUT/.run.log" | tee -a "$OUT/summary.log"
  [ $r = 0 ] || { say "FAILED $label: exit $r (tail below)"; tail -5 "$OUT/.run.log"; }
  say "$label: $(( $(date +%s) - t0 )) s (GPU part so far $(( $(date +%s) - ${G0:-$t0} )) s)"
  rm -f "$OUT/.run.log"
}
