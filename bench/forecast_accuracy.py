#!/usr/bin/env python3
"""Accuracy of `gpumemprof forecast` against real runs: for each workload folder holding
<size>.pickle snapshots and <size>.json actual peaks (one fresh process per size, the 4 sizes
1x 2x 4x 8x), forecasts the largest size from the two smallest, from the three smallest and from
2x+4x, and prints a markdown table: the actual peak reserved, the forecasts, their errors and
ranges (marked "warned" where the forecast is not confident; "!" where the range misses the
actual), the 4x size forecast from 1x and 2x as a held-out check, the straight line's error, the
alignment, how often a miss over 3% was warned, and how often the range held the actual.

usage: forecast_accuracy.py GPUMEMPROF_BINARY DATA_DIR [FORECAST OPTION ...]
  (DATA_DIR/<workload>/<size>.pickle|json; options such as --reduction-cap 132MiB go to every forecast)"""
import json
import os
import subprocess
import sys


def forecast(binary, folder, sizes, at, extra=()):
    args = [binary, "forecast", "--json", "--at", str(at), *extra]
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
    binary, data, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    print("| workload | sizes | actual 8x GiB | 1x+2x GiB | error | range (warned) | 1x+2x+4x GiB | error | range "
          "(warned) | 2x+4x error | 1x+2x -> 4x, held out | straight line 1x+2x | aligned req. / peak bytes (1x+2x) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    confusion = {}  # (miss, warned) -> count, over the four forecasts of each workload
    misses = {}  # warned forecasts: range holds the actual -> count
    ranges = {}  # every forecast: range holds the actual -> count
    workloads = 0
    for w in sorted(os.listdir(data)):
        folder = os.path.join(data, w)
        if not os.path.isdir(folder):  # a log or job list beside the workload folders
            continue
        sizes = sorted(int(f[:-5]) for f in os.listdir(folder) if f.endswith(".json") and f[:-5].isdigit())
        if len(sizes) < 4:
            continue
        workloads += 1
        actual = {}
        for s in sizes:
            with open(os.path.join(folder, f"{s}.json")) as f:
                actual[s] = json.load(f)["peak_reserved_bytes"]
        target = sizes[3]
        cells = [w, " ".join(map(str, sizes)), gib(actual[target])]
        two = None
        for probes, at, columns in ((sizes[:2], target, 3), (sizes[:3], target, 3), (sizes[1:3], target, 1),
                                    (sizes[:2], sizes[2], 1)):
            r, why = forecast(binary, folder, probes, at, extra)
            if r is None:
                cells += ["refused", why.replace("|", "/")[:80]] + ["-"] * (columns - 2)
                continue
            two = two or r
            e = (r["peak_reserved_bytes"] - actual[at]) / actual[at]
            key = (abs(e) > 0.03, not r["confident"])
            confusion[key] = confusion.get(key, 0) + 1
            mark = "" if r["confident"] else " (warned)"
            held = r["peak_reserved_bytes_low"] <= actual[at] <= r["peak_reserved_bytes_high"]
            misses[held] = misses.get(held, 0) + (1 if mark else 0)
            ranges[held] = ranges.get(held, 0) + 1
            if columns == 1:
                cells += [err(r["peak_reserved_bytes"], actual[at]) + mark + ("" if held or not mark else " !")]
            else:
                rng = f"{gib(r['peak_reserved_bytes_low'])}-{gib(r['peak_reserved_bytes_high'])}"
                cells += [gib(r["peak_reserved_bytes"]), err(r["peak_reserved_bytes"], actual[at]) + mark,
                          rng + (" (warned)" if mark else "") + ("" if held else " !")]
        if two is not None:
            a = two["alignment"]
            cells += [err(two["straight_line_peak_reserved_bytes"], actual[target]),
                      f"{a['aligned_requests'] * 100:.1f}% / {a['aligned_peak_bytes'] * 100:.1f}%"]
        else:
            cells += ["-", "-"]
        print("| " + " | ".join(cells) + " |")
    print()
    print(f"Warnings ({4 * workloads} forecasts: {workloads} workloads x 1x+2x -> 8x, 1x+2x+4x -> 8x, 2x+4x -> 8x, "
          "1x+2x -> 4x): "
          f"miss > 3% warned {confusion.get((True, True), 0)}, miss not warned {confusion.get((True, False), 0)}, "
          f"within 3% warned {confusion.get((False, True), 0)}, within 3% not warned {confusion.get((False, False), 0)}; "
          f"warned ranges holding the actual {misses.get(True, 0)}, missing it {misses.get(False, 0)} (\"!\"); "
          f"all ranges holding it {ranges.get(True, 0)}, missing it {ranges.get(False, 0)}")


if __name__ == "__main__":
    main()
