#!/usr/bin/env python3
"""GPU check of gpumemprof_torch.forecast(..., refine=True), run by bench/gpu_forecast_refine.sh
from bench/ (the probe processes import this file for its step functions, and record_references
for the workloads). Two workloads whose two-probe forecast misses and is warned on the H200
recordings: ConvNeXt-T by batch (8, 16 -> 64) and ResNet-50 by image side (64, 128 -> 512). Each
is forecast with refine=True (the two workloads at once, each probe a fresh process) and compared
with the peak reserved recorded at the target in a fresh process (no run at the target here).

Expected, from the same forecasts over the recorded probes on the dev VM (2026-11-29; the probes
here are new runs, so a few MiB may differ):
  convnext_t   8+16 -> 64: 5465178112 (+15.5%, warned), next_probe 32; refined 8+16+32: 4750049280
               (+0.4%, confident); actual 4731174912 (4.41 GiB: /work/gpu-data/gmp-references/forecast/
               convnext_t/64.json, H200, torch 2.11.0+cu130, 2026-11-28)
  resnet50_res 64+128 -> 512: 4221566976 (-9.0%, warned), next_probe 256; refined 64+128+256:
               4699717632 (+1.3%, warned); actual 4638900224 (4.32 GiB: /work/gpu-data/s13/forecast-res/
               forecast/resnet50_res/512.json, H200, torch 2.11.0+cu130, 2026-11-29)
The probes' own peaks reserved, recorded then: convnext_t 8: 1134559232, 16: 1740636160, 32: 2829058048;
resnet50_res 64: 452984832, 128: 606076928, 256: 1348468736."""
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import record_references

# (step, sizes, target, actual peak reserved at the target, probes' recorded peaks)
CASES = {
    "convnext_t": ("convnext_t", (8, 16), 64, 4731174912, {8: 1134559232, 16: 1740636160, 32: 2829058048}),
    "resnet50_res": ("resnet50_res", (64, 128), 512, 4638900224, {64: 452984832, 128: 606076928, 256: 1348468736}),
}


def _cudnn_as_recorded():
    import torch

    torch.backends.cudnn.benchmark = False  # as record_references.forecast recorded them


def convnext_t(batch):  # the workload runs its 3 training steps itself: forecast(..., steps=1)
    _cudnn_as_recorded()
    record_references.w_convnext_t(batch)


def resnet50_res(side):
    _cudnn_as_recorded()
    record_references.w_resnet50_res(side)


def one(name):
    import gpumemprof_torch

    fn, sizes, at, actual, recorded = CASES[name]
    t0 = time.time()
    f = gpumemprof_torch.forecast(globals()[fn], sizes=sizes, at=at, steps=1, refine=True,
                                  workdir=tempfile.mkdtemp(prefix=name + "-"))
    return name, f, time.time() - t0


def main():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    out = os.environ.get("OUT") or tempfile.mkdtemp()
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, CASES))
    report = {}
    for name, f, seconds in results:
        _, sizes, at, actual, recorded = CASES[name]
        u = f.get("unrefined", f)

        def e(b):
            return f"{(b - actual) * 100.0 / actual:+.1f}%"

        print(f"{name} {'+'.join(map(str, sizes))} -> {at}: {u['peak_reserved_bytes']} ({e(u['peak_reserved_bytes'])}, "
              f"{'confident' if u['confident'] else 'warned'}, range {u['peak_reserved_bytes_low']}-"
              f"{u['peak_reserved_bytes_high']}), next_probe {u['next_probe']}")
        print(f"  {f['refine']}")
        print(f"  final from {'+'.join(map(str, f['probe_sizes']))}: {f['peak_reserved_bytes']} "
              f"({e(f['peak_reserved_bytes'])}, {'confident' if f['confident'] else 'warned'}), refined_with "
              f"{f['refined_with']}; actual {actual}; {seconds:.0f} s")
        for path, peaks in zip(f["probe_snapshots"], f["probe_peaks"]):
            size = int(os.path.basename(path)[len("probe_"):-len(".pickle")])
            print(f"  probe {size}: peak reserved {peaks['reserved_bytes.all.peak']} (recorded then: {recorded.get(size)})")
        report[name] = {"forecast": f, "actual_peak_reserved_bytes": actual, "seconds": seconds}
    with open(os.path.join(out, "forecast_refine.json"), "w") as fh:
        json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
