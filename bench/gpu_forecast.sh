#!/usr/bin/env bash
# GPU check of gpumemprof_torch.forecast(): builds the gpumemprof command, forecasts a small conv
# net's peak at batch 64 from probes at 8 and 16 (each probe a fresh process), and records the
# actual peak at 64 in a fresh process for comparison. Writes $OUT/forecast_gpu.log and .json.
# Needs torch with CUDA, meson, ninja, a C++20 compiler, zlib. About a minute of build, ~30 s of GPU.
set -euo pipefail
export OUT=${OUT:-$(mktemp -d)}
cd "$(dirname "$0")/.."
meson setup build-gpu-forecast -Dtests=false -Dbenchmarks=false -Dexamples=false -Dcuda=disabled >/dev/null
ninja -C build-gpu-forecast tools/gpumemprof >/dev/null
export GPUMEMPROF_BIN=$PWD/build-gpu-forecast/tools/gpumemprof
cd bench
python3 - <<'PY' 2>&1 | tee "$OUT/forecast_gpu.log"
import json, os, subprocess, sys, tempfile
sys.path.insert(0, os.path.join(os.getcwd(), "..", "python"))
import gpumemprof_torch
import forecast_probe_step
out = os.environ.get("OUT", tempfile.mkdtemp())
f = gpumemprof_torch.forecast(forecast_probe_step.step, sizes=(8, 16), at=64, capacity="1GiB", workdir=tempfile.mkdtemp(),
                            refine=False)  # the two probes as given (refine: bench/gpu_forecast_refine.sh)
f3 = gpumemprof_torch.forecast(forecast_probe_step.step, sizes=(8, 16, 32), at=64, workdir=tempfile.mkdtemp())
# The actual run at 64, in a fresh process, the same way a probe runs.
actual_path = os.path.join(tempfile.mkdtemp(), "actual.pickle")
code = "import sys; from gpumemprof_torch.forecast import _probe_main; _probe_main(sys.argv[1:])"
env = dict(os.environ, PYTHONPATH=os.path.join(os.getcwd(), "..", "python") + os.pathsep + os.getcwd())
subprocess.run([sys.executable, "-c", code, "forecast_probe_step", "step", "64", "3", actual_path, "0"], env=env, check=True)
actual = json.load(open(actual_path + ".json"))["reserved_bytes.all.peak"]
for name, r in (("8+16", f), ("8+16+32", f3)):
    err = (r["peak_reserved_bytes"] - actual) * 100.0 / actual
    print(f"forecast from {name}: peak reserved {r['peak_reserved_bytes']} vs actual {actual} ({err:+.2f}%), "
          f"confident {r['confident']}, fits 1GiB {r.get('fits')}, aligned {r['alignment']}")
json.dump({"two": f, "three": f3, "actual_peak_reserved": actual}, open(os.path.join(out, "forecast_gpu.json"), "w"), indent=1)
PY
