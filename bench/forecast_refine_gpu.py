#!/usr/bin/env python3
"""GPU check of gpumemprof_torch.forecast() as a user calls it (refine=True, the reduction buffers'
cap measured on the device), run by bench/gpu_forecast_refine.sh from bench/ (the probe processes
import this file for its step functions, and record_references for the workloads). Each workload of
bench/record_references.py is forecast at 8x its first probe from probes at 1x and 2x (each probe
a fresh process, three workloads at once) and compared with the peak reserved that the same
workload recorded at the target in a fresh process (ACTUAL_DIR/<workload>/<target>.json, written by
bench/gpu_record_forecast.sh in the same job).

usage: ACTUAL_DIR=DIR [BRIDGE=1] python3 forecast_refine_gpu.py [WORKLOAD ...]   (default: all of SIZES)
Prints one line per workload (the two-probe forecast, the final one, what refinement did, the cap
used) and a markdown table; writes $OUT/forecast_refine.json. BRIDGE=1: every probe, and a run at
the target in a fresh process (the actual), go through gpumemprof's allocator
(gpumemprof_torch.install(); $GPUMEMPROF_TORCH_LIB), and the native run's peak is printed beside."""
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import record_references

# probes at 1x and 2x, the target at 8x: the sizes bench/gpu_record_references.sh recorded
SIZES = {
    "resnet50": ((8, 16), 64), "convnext_t": ((8, 16), 64), "vit_b16": ((8, 16), 64),
    "resnet18_res": ((64, 128), 512), "resnet50_res": ((64, 128), 512), "convnext_t_res": ((64, 128), 512),
    "gpt2_eager": ((128, 256), 1024), "bert": ((64, 128), 512), "llama_generate": ((4, 8), 32),
    "moe_dyn": ((8, 16), 64),
}


def _step(name):
    def step(size):  # the workload runs its own steps: forecast(..., steps=1)
        import torch

        torch.backends.cudnn.benchmark = False  # as record_references.forecast records
        getattr(record_references, "w_" + name)(size)
    step.__name__ = step.__qualname__ = name
    return step


for _name in SIZES:  # module-level functions, as a probe's process finds them again
    globals()[_name] = _step(_name)


BRIDGE = os.environ.get("BRIDGE") == "1"


def one(name):
    import gpumemprof_torch
    from gpumemprof_torch.forecast import _run_probe

    sizes, at = SIZES[name]
    t0 = time.time()
    work = tempfile.mkdtemp(prefix=name + "-", dir=os.environ.get("PROBES_DIR"))  # the probes' snapshots
    f = gpumemprof_torch.forecast(globals()[name], sizes=sizes, at=at, steps=1, refine=True, use_bridge=BRIDGE,
                                  workdir=work)
    bridged = None
    if BRIDGE:  # the target through the bridge, a fresh process as a probe is
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
        env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
        peaks = _run_probe(os.path.abspath(__file__), name, at, 1, os.path.join(work, "target.pickle"), True, env, 1800)
        bridged = peaks["reserved_bytes.all.peak"]
    return name, f, time.time() - t0, bridged


def cap_text(f):
    """Where the forecast stopped the reduction buffers, and why."""
    if f["reduction_buffers"] == 0:
        return "no reduction buffers"
    how = "shown by the probes" if f["reduction_cap_shown"] else "measured" if f["reduction_cap_bytes"] else "unknown"
    return f"{f['reduction_buffers']} reduction buffers, cap {f['reduction_cap_bytes']} ({how})"


def main():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    out = os.environ.get("OUT") or tempfile.mkdtemp()
    actual_dir = os.environ["ACTUAL_DIR"]
    names = sys.argv[1:] or list(SIZES)
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(one, names))
    report, rows = {}, []
    for name, f, seconds, bridged in results:
        sizes, at = SIZES[name]
        with open(os.path.join(actual_dir, name, f"{at}.json")) as fh:
            actual = json.load(fh)["peak_reserved_bytes"]
        if bridged is not None:
            print(f"{name}: through the bridge the run at {at} reserved {bridged}, natively {actual} "
                  f"({(bridged - actual) * 100.0 / actual:+.2f}%)")
            actual = bridged
        u = f.get("unrefined", f)

        def e(b):
            return f"{(b - actual) * 100.0 / actual:+.1f}%"

        def how(r):
            return "confident" if r["confident"] else "warned"

        print(f"{name} {'+'.join(map(str, sizes))} -> {at}: {u['peak_reserved_bytes']} ({e(u['peak_reserved_bytes'])}, "
              f"{how(u)}); final from {'+'.join(map(str, f['probe_sizes']))}: {f['peak_reserved_bytes']} "
              f"({e(f['peak_reserved_bytes'])}, {how(f)}); actual {actual}; {cap_text(f)}; {seconds:.0f} s")
        print(f"  {f['refine']}")
        rows.append(f"| {name} | {'+'.join(map(str, sizes))} -> {at} | {actual / 2**30:.2f} | "
                    f"{e(u['peak_reserved_bytes'])}{'' if u['confident'] else ' (warned)'} | "
                    f"{f['refined_with'] or '-'} | {e(f['peak_reserved_bytes'])}{'' if f['confident'] else ' (warned)'} |")
        report[name] = {"forecast": f, "actual_peak_reserved_bytes": actual, "seconds": seconds, "bridge": BRIDGE}
    print("| workload | probes -> target | actual GiB | two probes | probe added | final |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    with open(os.path.join(out, "forecast_refine.json"), "w") as fh:
        json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
