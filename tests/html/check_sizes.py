#!/usr/bin/env python3
"""The report page prints sizes as every other report does: web/format.js's fmtBytes, run by node,
must equal format_size (allocator/format_size.hpp: "%llu bytes" below 1 KiB, then "%.2f" KiB, MiB
or GiB, each unit from 1.00 of it up) for sizes around every boundary and for the ties that
printf rounds to even. Skips (77) without node.

    check_sizes.py WEB_DIR
"""
import json
import shutil
import subprocess
import sys


def format_size(n):
    """format_size() of allocator/format_size.hpp (Python's %-formatting rounds as printf does)."""
    if n < 1024:
        return "%d bytes" % n
    if n < 1 << 20:
        return "%.2f KiB" % (n / 1024)
    if n < 1 << 30:
        return "%.2f MiB" % (n / (1 << 20))
    return "%.2f GiB" % (n / (1 << 30))


def main():
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        print("skip: no node")
        return 77
    sizes = [0, 1, 512, 1023, 1024, 1152, 1536, 10 * 1024 + 5, (1 << 20) - 1, 1 << 20, 22806528, 148897792,
             (1 << 30) - 1, 1 << 30, 3077896704, 5 << 40]
    sizes += [k * 1024 + 5 * 1024 // 1000 for k in range(1, 40)]  # near x.xx5 KiB
    sizes += [k * (1 << 20) // 8 for k in range(1, 64)]           # exact eighths: the ties
    with open(sys.argv[1] + "/format.js") as f:
        script = f.read()
    script += "\nconsole.log(JSON.stringify(%s.map((n) => [fmtBytes(n), fmtBytes(-n)])));\n" % json.dumps(sizes)
    out = json.loads(subprocess.run([node, "-e", script], capture_output=True, text=True, check=True).stdout)
    bad = []
    for n, (pos, neg) in zip(sizes, out):
        want = format_size(n)
        if pos != want or (n and neg != "-" + want):
            bad.append(f"{n}: page {pos!r} / {neg!r}, reports {want!r}")
    print("\n".join(bad) or f"{len(sizes)} sizes print alike on the page and in the reports")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
