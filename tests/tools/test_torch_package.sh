#!/usr/bin/env bash
# pip install of the PyTorch bridge (pyproject.toml at the root, meson-python) into a fresh
# virtual environment, offline, then the module's checks against the installed package
# (check_torch_package.py --packaged: the library packaged inside the module, PyTorch's
# PYTORCH_CUDA_ALLOC_CONF followed, a clear error from install() without a GPU).
#   test_torch_package.sh SOURCE_DIR WORK_DIR    (WORK_DIR/build is kept: a rerun rebuilds little)
# Exit 77 (skip) when meson-python is missing.
set -euo pipefail
src=$(cd "$1" && pwd)
work=$2
python=${PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import mesonpy' 2> /dev/null; then
  echo "SKIP: $python has no meson-python (Debian: apt-get install python3-mesonpy)"
  exit 77
fi
mkdir -p "$work"
rm -rf "$work/venv"
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --no-build-isolation --no-deps --no-index --quiet \
  --config-settings=builddir="$work/build" "$src"
"$work/venv/bin/python" -m pip show --files gpumemprof-torch | grep -E '^(Name|Version|Location)|libgpumemprof_torch'
"$work/venv/bin/python" "$src/tests/tools/check_torch_package.py" --packaged
