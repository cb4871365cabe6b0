#!/usr/bin/env python3
"""`gpumemprof timeline`: torch.profiler's export_memory_timeline JSON from PyTorch's reference
snapshot, checked against an independent reading of the pickle (torch's _coalesce_timeline rules),
the offline HTML page, and one error line with exit 2 for bad input.

usage: test_cli_timeline.py GPUMEMPROF_BINARY   (env: GPUMEMPROF_SOURCE_DIR)"""
import json
import os
import pickle
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_checks  # noqa: E402

BIN = sys.argv[1]
SRC = os.environ.get("GPUMEMPROF_SOURCE_DIR", ".")
SNAPSHOT = os.path.join(SRC, "tests", "data", "resnet50_train.snapshot.pickle")
TMP = tempfile.mkdtemp(prefix="gpumemprof-timeline-")
check = cli_checks.check

TORCH_ORDER = ["parameter", "optimizer_state", "input", "temporary", "activation", "gradient", "autograd_detail"]


check_one_error_line = cli_checks.check_one_error_line


def run(*args, expect_rc=0):
    return cli_checks.run(BIN, *args, expect_rc=expect_rc, timeout=300)


def category(metadata):
    """The category an entry's user_metadata carries ("" = none)."""
    for i in range(len(metadata) - 1, -1, -1):
        if metadata.startswith("category=", i) and (i == 0 or metadata[i - 2:i] == "; "):
            return metadata[i + len("category="):]
    return ""


def expected_timeline(snap, device=0):
    """[times, sizes] as torch.profiler would coalesce this trace: one row per run of alloc /
    free_requested events sharing a microsecond; memory allocated before the trace first."""
    trace = snap["device_traces"][device]
    counted = [e for e in trace if e["action"] in ("alloc", "free_requested")]
    if not counted:
        return [[], []]
    end_allocated = sum(b["requested_size"] for s in snap["segments"] if s["device"] == device
                        for b in s["blocks"] if b["state"] == "active_allocated")
    net = sum(e["size"] if e["action"] == "alloc" else -e["size"] for e in counted)
    column = lambda name: TORCH_ORDER.index(name) + 1 if name in TORCH_ORDER else 8  # noqa: E731
    live, before = {}, {}  # before: bytes allocated before the trace, by the category their free names
    for e in counted:
        if e["action"] == "alloc":
            live[e["addr"]] = True
        elif e["addr"] in live:
            del live[e["addr"]]
        else:
            name = category(e["user_metadata"])
            before[name] = before.get(name, 0) + e["size"]
    start = [0] * 9
    for name, b in before.items():
        if name:
            start[column(name)] += b
    start[8] += max(0, max(0, end_allocated - net) - sum(b for name, b in before.items() if name))
    times, sizes = [], []
    if any(start):
        times.append(min(e["time_us"] for e in counted))
        sizes.append(list(start))
    row, live = list(start), {}
    for i, e in enumerate(counted):
        if e["action"] == "alloc":
            c = live[e["addr"]] = column(category(e["user_metadata"]))
            row[c] += e["size"]
        else:
            c = live.pop(e["addr"], None) or column(category(e["user_metadata"]))
            row[c] -= e["size"]
        if i + 1 == len(counted) or counted[i + 1]["time_us"] != e["time_us"]:
            times.append(e["time_us"])
            sizes.append(list(row))
    return [times, sizes]


# JSON: torch.profiler's layout, row for row.
out_json = os.path.join(TMP, "timeline.json")
p = run("timeline", SNAPSHOT, "-o", out_json)
check(p.stdout.strip() == f"wrote {out_json}", f"unexpected output {p.stdout!r}")
with open(out_json) as f:
    got = json.load(f)
with open(SNAPSHOT, "rb") as f:
    snap = pickle.load(f)
want = expected_timeline(snap)
check(isinstance(got, list) and len(got) == 2, "the JSON is not [times, sizes]")
check(len(got[0]) == len(got[1]) > 1000, f"{len(got[0])} times for {len(got[1])} rows")
check(all(len(r) == 9 and r[0] == 0 for r in got[1]), "rows must be 9 numbers with column 0 unused")
check(got == want, "the timeline differs from torch's coalescing of the same trace"
      + ("" if len(got[1]) != len(want[1]) else
         f" (first differing row {next((i for i in range(len(want[1])) if got[1][i] != want[1][i] or got[0][i] != want[0][i]), None)})"))
# PyTorch's snapshot has no categories: everything is unknown, and the last row is what the
# snapshot's live blocks asked for.
live = sum(b["requested_size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
check(got[1][-1] == [0] * 8 + [live], f"last row {got[1][-1]}, want {live} unknown bytes")

# HTML: one offline page with the stacked areas.
out_html = os.path.join(TMP, "timeline.html")
run("timeline", SNAPSHOT, "-o", out_html)
with open(out_html) as f:
    page = f.read()
check(page.startswith("<!DOCTYPE html>") and 'class="gmp-timeline"' in page and 'data-category="unknown"' in page,
      "the HTML page lacks the category timeline")
check("<script" not in page, "the page must not need a script")

# Rules name untagged memory: bytes move between columns, row totals stay.
rules = os.path.join(TMP, "torch.rules")
with open(rules, "w") as f:
    f.write("# PyTorch's own frames and ranges\n"
            "optimizer_state scope ^Optimizer\\.step\n"
            "parameter frame ^_apply \n"
            "activation frame ^forward .*resnet\\.py\n")
out_rules = os.path.join(TMP, "rules.json")
run("timeline", SNAPSHOT, "-o", out_rules, "--rules", rules)
with open(out_rules) as f:
    ruled = json.load(f)
check(ruled[0] == got[0], "rules must not change the times")
check(all(sum(a) == sum(b) for a, b in zip(ruled[1], got[1])), "rules must only move bytes between categories")
for column, name in ((1, "parameter"), (2, "optimizer_state"), (5, "activation")):
    check(max(r[column] for r in ruled[1]) > 0, f"no {name} bytes with the rules")
# ResNet-50's 25.6M float parameters and its buffers, moved to the GPU by Module._apply: ~102 MB.
peak_parameter = max(r[1] for r in ruled[1])
check(100_000_000 < peak_parameter < 105_000_000, f"parameter peak {peak_parameter} is not ResNet-50's weights")

# Bad input: one line, exit 2.
bad_rules = os.path.join(TMP, "bad.rules")
with open(bad_rules, "w") as f:
    f.write("parameter frame Linear\n\nactivation frame ([unclosed\n")
check_one_error_line(run("timeline", SNAPSHOT, "-o", out_json, "--rules", bad_rules, expect_rc=2),
                     f"{bad_rules}:3: bad pattern '([unclosed'")
check_one_error_line(run("timeline", SNAPSHOT, "-o", os.path.join(TMP, "t.png"), expect_rc=2), ".json", ".html")
check_one_error_line(run("timeline", SNAPSHOT, "-o", out_json, "--device", "3", expect_rc=2),
                     "no trace for device 3", "devices with a trace: 0")
check_one_error_line(run("timeline", SNAPSHOT, expect_rc=2), "-o")
check_one_error_line(run("timeline", os.path.join(TMP, "missing.pickle"), "-o", out_json, expect_rc=2), "missing.pickle")
check(os.path.exists(out_json), "a failed run must not remove the old output")

cli_checks.finish("timeline CLI checks")
