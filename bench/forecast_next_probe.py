#!/usr/bin/env python3
"""Checks the forecast's `next_probe` on recorded runs: for each two-probe forecast of
bench/forecast_accuracy.py's table (1x+2x -> 8x, 2x+4x -> 8x, 1x+2x -> 4x) that is not confident,
the probe it names; where that size was recorded, the forecast again with it added (the three
largest probes: the CLI takes three), and whether that one is within 3% of the actual and/or
confident. Prints one row per warned forecast and the counts.

usage: forecast_next_probe.py GPUMEMPROF_BINARY DATA_DIR   (DATA_DIR/<workload>/<size>.pickle|json)"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forecast_accuracy import err, forecast  # noqa: E402


def main():
    binary, data = sys.argv[1], sys.argv[2]
    print("| workload | probes -> target | error | next_probe | with it: probes | error | confident |")
    print("|---|---|---|---|---|---|---|")
    counts = {"warned": 0, "named": 0, "recorded": 0, "within": 0, "confident": 0, "both": 0, "null": 0,
              "miss_named": 0, "miss_fixed": 0}
    for w in sorted(os.listdir(data)):
        folder = os.path.join(data, w)
        if not os.path.isdir(folder):
            continue
        sizes = sorted(int(f[:-5]) for f in os.listdir(folder) if f.endswith(".json") and f[:-5].isdigit())
        if len(sizes) < 4:
            continue
        actual = {}
        for s in sizes:
            with open(os.path.join(folder, f"{s}.json")) as f:
                actual[s] = json.load(f)["peak_reserved_bytes"]
        for probes, at in ((sizes[:2], sizes[3]), (sizes[1:3], sizes[3]), (sizes[:2], sizes[2])):
            r, _ = forecast(binary, folder, probes, at)
            if r is None or r["confident"]:
                continue
            counts["warned"] += 1
            e = (r["peak_reserved_bytes"] - actual[at]) / actual[at]
            name = f"{'+'.join(map(str, probes))} -> {at}"
            nxt = r["next_probe"]
            if nxt is None:
                counts["null"] += 1
                print(f"| {w} | {name} | {err(r['peak_reserved_bytes'], actual[at])} | null | - | - | - |")
                continue
            counts["named"] += 1
            counts["miss_named"] += abs(e) > 0.03
            nxt = int(nxt) if float(nxt).is_integer() else nxt
            if nxt not in actual:
                print(f"| {w} | {name} | {err(r['peak_reserved_bytes'], actual[at])} | {nxt} (not recorded) | - | - | - |")
                continue
            counts["recorded"] += 1
            three = sorted(probes + [nxt])[-3:]
            r3, why = forecast(binary, folder, three, at)
            if r3 is None:
                print(f"| {w} | {name} | {err(r['peak_reserved_bytes'], actual[at])} | {nxt} | refused: {why[:60]} | - | - |")
                continue
            e3 = (r3["peak_reserved_bytes"] - actual[at]) / actual[at]
            within, conf = abs(e3) <= 0.03, r3["confident"]
            counts["within"] += within
            counts["confident"] += conf
            counts["both"] += within and conf
            counts["miss_fixed"] += abs(e) > 0.03 and within
            print(f"| {w} | {name} | {err(r['peak_reserved_bytes'], actual[at])} | {nxt} | {'+'.join(map(str, three))} "
                  f"| {err(r3['peak_reserved_bytes'], actual[at])} | {'yes' if conf else 'no'} |")
    print()
    print(f"Warned two-probe forecasts: {counts['warned']}; next_probe named {counts['named']} (recorded "
          f"{counts['recorded']}), null {counts['null']}. With the named probe added: within 3% {counts['within']}, "
          f"confident {counts['confident']}, both {counts['both']}; misses over 3% among those named "
          f"{counts['miss_named']}, brought within 3% {counts['miss_fixed']}")


if __name__ == "__main__":
    main()
