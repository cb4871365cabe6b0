#!/usr/bin/env python3
"""Accuracy of `gpumemprof forecast` against real runs: for each workload folder holding
<size>.pickle snapshots and <size>.json actual peaks (one fresh process per size, the 4 sizes
1x 2x 4x 8x), forecasts the largest size from the two smallest and from the three smallest and
prints a markdown table: the actual peak reserved, both forecasts and their errors, the straight
line's error, and the alignment.

usage: forecast_accuracy.py GPUMEMPROF_BINARY DATA_DIR   (DATA_DIR/<workload>/<size>.pickle|json)"""
import json
import os
import subprocess
import sys


def forecast(binary, folder, sizes, at):
    args = [binary, "forecast", "--json", "--at", str(at)]
    for s in sizes:
        args += ["--run", f"{s}={os.path.join(folder, f'{s}.pickle')}"]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()
    return json.loads(p.stdout.strip().splitlines()[-1]), ""


def gib(b):
    return f"{b / 2**30:.2f}"


def err(f, actual):
    return f"{(f - actual) * 100.0 / actual:+.1f}%"


def main():
    binary, data = sys.argv[1], sys.argv[2]
    print("| workload | sizes | actual peak reserved (GiB) | from 1x+2x (GiB) | error | from 1x+2x+4x (GiB) | error "
          "| straight line 1x+2x | aligned requests / peak bytes (1x+2x) | confident |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for w in sorted(os.listdir(data)):
        folder = os.path.join(data, w)
        sizes = sorted(int(f[:-5]) for f in os.listdir(folder) if f.endswith(".json") and f[:-5].isdigit())
        if len(sizes) < 4:
            continue
        target = sizes[-1]
        with open(os.path.join(folder, f"{target}.json")) as f:
            actual = json.load(f)["peak_reserved_bytes"]
        two, why2 = forecast(binary, folder, sizes[:2], target)
        three, why3 = forecast(binary, folder, sizes[:3], target)
        cells = [w, " ".join(map(str, sizes)), gib(actual)]
        for r, why in ((two, why2), (three, why3)):
            if r is None:
                cells += ["refused", why.replace("|", "/")[:80]]
            else:
                lo = min(r["peak_reserved_bytes"], r["peak_reserved_bytes_if_unmatched_grow"],
                         r["peak_reserved_bytes_if_irregular_kept"])
                hi = max(r["peak_reserved_bytes"], r["peak_reserved_bytes_if_unmatched_grow"],
                         r["peak_reserved_bytes_if_irregular_kept"])
                cells += [gib(r["peak_reserved_bytes"]) + ("" if r["confident"] else
                          f" (range {gib(lo)}-{gib(hi)}: warned)"),
                          err(r["peak_reserved_bytes"], actual)]
        if two is not None:
            a = two["alignment"]
            cells += [err(two["straight_line_peak_reserved_bytes"], actual),
                      f"{a['aligned_requests'] * 100:.1f}% / {a['aligned_peak_bytes'] * 100:.1f}%",
                      "yes" if two["confident"] else "no"]
        else:
            cells += ["-", "-", "-"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
