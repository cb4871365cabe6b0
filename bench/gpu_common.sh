# Sourced by the two-GPU scripts that drive the PyTorch bridge (bench/gpu_ddp_external.sh,
# bench/gpu_ranks_teardown.sh), first thing:  . "$(dirname "$0")/gpu_common.sh"
# Sets B (the build folder, from $1, absolute), SRC (the source tree), OUT (the log folder: $OUT,
# else ./gpu-<script>-out), points Python at the bridge in B, and gives fail=0 and say(), which
# prefixes a line with the script's name.
set -u
GPU_SCRIPT=$(basename "$0" .sh)
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
  echo "$GPU_SCRIPT: ${1:+no build folder $1; }usage: OUT=DIR bench/$GPU_SCRIPT.sh BUILD_DIR (a CUDA build of this tree)" >&2
  exit 2
fi
B=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/${GPU_SCRIPT//_/-}-out}
mkdir -p "$OUT"
export GPUMEMPROF_TORCH_LIB="$B/python/libgpumemprof_torch.so"
export PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}"
fail=0
say() { echo "$GPU_SCRIPT: $*"; }
