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


# Categories set on live allocations later (set_category, gpumemprof_torch.categorize): our key
# "category_changes" beside the trace moves the bytes from the change on (before entry 2 here),
# in a row at the change's own time.
def tagged_entry(action, addr, size, t, name=""):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "compile_context": "N/A",
            "user_metadata": "category=" + name if name else "", "frames": []}


later = os.path.join(TMP, "tagged-later.pickle")
with open(later, "wb") as f:
    pickle.dump({"segments": [], "allocator_settings": {}, "external_annotations": [],
                 "device_traces": [[tagged_entry("alloc", 0x1000, 4096, 10), tagged_entry("alloc", 0x3000, 1024, 11),
                                    tagged_entry("alloc", 0x5000, 512, 20),
                                    tagged_entry("free_requested", 0x1000, 4096, 30, "parameter")]],
                 "category_changes": [[{"trace_index": 2, "time_us": 15, "addr": 0x1000, "size": 4096,
                                        "category": "parameter", "previous": ""}]]}, f, protocol=2)
out_later = os.path.join(TMP, "later.json")
run("timeline", later, "-o", out_later)
with open(out_later) as f:
    got_later = json.load(f)
unknown = lambda n: [0] * 8 + [n]  # noqa: E731
check(got_later == [[10, 11, 15, 20, 30], [unknown(4096), unknown(5120), [0, 4096] + [0] * 6 + [1024],
                                             [0, 4096] + [0] * 6 + [1536], unknown(1536)]],
      f"category_changes not applied: {got_later}")

# Steps in `summary` (text and --json) and the HTML report: a constructed training loop whose
# steps each allocate a batch and a temporary, free both, and keep 1 MiB in a cache they never
# free (a leak); the first step also creates optimizer state that lives on.
def frame(filename, line, name):
    return [{"filename": filename, "line": line, "name": name}]


def leak_snapshot(steps, annotate):
    trace, notes, t = [], [], 1_000_000
    sites = {"batch": frame("train.py", 10, "load_batch"), "temp": frame("train.py", 20, "forward"),
             "cache": frame("cache.py", 7, "remember"), "state": frame("optim.py", 3, "init_state")}

    def add(action, addr, size, site):
        nonlocal t
        trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
                      "compile_context": "N/A", "user_metadata": "", "frames": sites[site]})
        t += 1
    for k in range(steps):
        if annotate:
            notes.append({"name": "ProfilerStep#%d" % (k + 7), "stage": "START", "device": 0, "time_us": t})
            t += 1
        add("alloc", 0x1000, 4096, "batch")
        add("alloc", 0x200000, 3 << 20, "temp")
        if k == 0:
            add("alloc", 0x900000, 50000, "state")
        add("free_requested", 0x200000, 3 << 20, "temp")
        add("free_completed", 0x200000, 3 << 20, "temp")
        add("alloc", 0x10000000 + (k << 21), 1 << 20, "cache")
        add("free_requested", 0x1000, 4096, "batch")
        add("free_completed", 0x1000, 4096, "batch")
        if annotate:
            notes.append({"name": "ProfilerStep#%d" % (k + 7), "stage": "END", "device": 0, "time_us": t})
            t += 1
    return {"segments": [], "device_traces": [trace], "allocator_settings": {}, "external_annotations": notes}


MIB = 1 << 20
for annotate in (False, True):
    path = os.path.join(TMP, "leak-%s.pickle" % ("annotated" if annotate else "detected"))
    with open(path, "wb") as f:
        pickle.dump(leak_snapshot(5, annotate), f, protocol=2)
    what = "annotated steps" if annotate else "detected steps"
    summary = json.loads(run("summary", path, "--json").stdout)
    (steps,) = summary["steps"]
    check(steps["source"] == ("annotations" if annotate else "detected"), f"{what}: source {steps['source']}")
    check(steps["allocations_per_step"] == (0 if annotate else 3), f"{what}: {steps['allocations_per_step']} allocations per step")
    names = [s["name"] for s in steps["steps"]]
    check(names == (["ProfilerStep#%d" % (k + 7) for k in range(5)] if annotate else ["step %d" % k for k in range(5)]),
          f"{what}: names {names}")
    want = [(4096 + 3 * MIB + 50000, 50000 + MIB, 50000 + MIB)] + \
        [(50000 + k * MIB + 4096 + 3 * MIB, 50000 + (k + 1) * MIB, MIB) for k in range(1, 5)]
    got = [(s["peak_requested_bytes"], s["end_requested_bytes"], s["growth_bytes"]) for s in steps["steps"]]
    check(got == want, f"{what}: (peak, at end, growth) per step {got}, want {want}")
    check(steps["growing_sites"] == [{"site": "remember at cache.py:7", "growth_bytes_per_step": [MIB] * 5,
                                      "total_growth_bytes": 4 * MIB}],
          f"{what}: growing sites {steps['growing_sites']}")
    text = run("summary", path).stdout
    check("steps, device 0: 5 (" in text and "+1.00 MiB per step (+4.00 MiB over steps 1-4)  remember at cache.py:7" in text,
          f"{what}: the text summary lacks the steps or the leak:\n{text}")
    page_path = os.path.join(TMP, "leak.html")
    run("html", path, "-o", page_path)
    with open(page_path) as f:
        page = f.read()
    check('id="steps-card"' in page and "+1.00 MiB per step: remember at cache.py:7" in page,
          f"{what}: the HTML report lacks the steps card")
none = os.path.join(TMP, "no-steps.pickle")
with open(none, "wb") as f:
    pickle.dump(leak_snapshot(2, False), f, protocol=2)
check("steps, device 0: none (" in run("summary", none).stdout, "two repetitions are not called steps")

# One reading (issue 17, item 7): summary, diff, the HTML report and Perfetto state the same peaks
# of one snapshot -- here with a free that waits on another stream, so "requested in use" (down at
# free_requested) and "requested" (down at free_completed, PyTorch's requested_bytes) part.
def entry(action, addr, size, t):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 2_000_000 + t,
            "compile_context": "N/A", "user_metadata": "", "frames": []}


pending = {"segments": [], "allocator_settings": {}, "external_annotations": [], "device_traces": [[
    entry("segment_alloc", 0, 20 * MIB, 0), entry("alloc", 0, 5 * MIB, 1), entry("alloc", 5 * MIB, 3 * MIB, 2),
    entry("free_requested", 0, 5 * MIB, 3), entry("alloc", 10 * MIB, 4 * MIB, 4), entry("free_completed", 0, 5 * MIB, 5),
    entry("free_requested", 5 * MIB, 3 * MIB, 6), entry("free_completed", 5 * MIB, 3 * MIB, 6),
    entry("free_requested", 10 * MIB, 4 * MIB, 7), entry("free_completed", 10 * MIB, 4 * MIB, 7),
    entry("segment_free", 0, 20 * MIB, 8)]]}
pending_path = os.path.join(TMP, "pending.pickle")
with open(pending_path, "wb") as f:
    pickle.dump(pending, f, protocol=2)
(peaks,) = json.loads(run("summary", pending_path, "--json").stdout)["devices"]
# Allocated: 5 + 3, then 3 + 4 once the 5 MiB block's free is requested (PyTorch's allocated_bytes).
check(peaks == {"device": 0, "peak_allocated_bytes": 8 * MIB, "peak_requested_bytes": 12 * MIB,
                "peak_reserved_bytes": 20 * MIB}, f"summary --json peaks {peaks}")
check("peak requested, device 0: 12.00 MiB = %d bytes; peak reserved: 20.00 MiB = %d bytes" % (12 * MIB, 20 * MIB)
      in run("summary", pending_path).stdout, "the text summary's requested and reserved peaks")
perfetto_path = os.path.join(TMP, "pending.perfetto.json")
run("perfetto", pending_path, "-o", perfetto_path)
with open(perfetto_path) as f:
    counters = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "C"]
for name, want in (("requested", 12 * MIB), ("reserved", 20 * MIB)):
    got = max((e["args"]["bytes"] for e in counters if e["name"] == name), default=None)
    check(got == want, f"Perfetto's {name} peak {got}, summary's {want}")
run("html", pending_path, "-o", page_path)
with open(page_path) as f:
    page = f.read()
for field, want in (("peakRequested", 12 * MIB), ("peakAllocated", 8 * MIB), ("peakReserved", 20 * MIB)):
    check(f'"{field}":{want}' in page, f"the HTML report's {field} is not the summary's {want}")
diff_text = run("diff", pending_path, pending_path).stdout
check(any(line.split()[:6] == ["peak", "requested", "12.00", "MiB", "12.00", "MiB"] for line in diff_text.splitlines()) and
      any(line.split()[:6] == ["peak", "allocated", "8.00", "MiB", "8.00", "MiB"] for line in diff_text.splitlines()),
      f"diff's peaks differ from the summary's:\n{diff_text}")

cli_checks.finish("timeline CLI checks")
