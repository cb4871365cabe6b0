#!/usr/bin/env python3
"""End-to-end tests of the snapshot analysis commands: replay SNAPSHOT (PyTorch's reference
snapshot, a truncated copy, a gzip copy), tune (exact output on a constructed snapshot where one
config clearly wins) and diff. Exact numbers throughout.

usage: test_cli_analysis.py GPUMEMPROF_BINARY   (env: GPUMEMPROF_SOURCE_DIR)"""
import gzip
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_checks  # noqa: E402

BIN = sys.argv[1]
SRC = os.environ.get("GPUMEMPROF_SOURCE_DIR", ".")
REF = os.path.join(SRC, "tests", "data", "resnet50_train.snapshot.pickle")
TMP = tempfile.mkdtemp(prefix="gpumemprof-analysis-")
MiB = 1 << 20
failures = cli_checks.failures
check = cli_checks.check


def run(*args, expect_rc=0):
    return cli_checks.run(BIN, *args, expect_rc=expect_rc, timeout=300)




def check_equal(got, want, what):
    if got != want:
        failures.append(f"{what}:\n--- got ---\n{got}--- want ---\n{want}")


def write_pickle(name, snap):
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    return path


def ev(action, addr, size, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 0, "frames": []}
    e.update(extra)
    return e


with open(REF, "rb") as f:
    ref = pickle.load(f)

# replay SNAPSHOT: PyTorch's reference snapshot reproduces PyTorch's 3514 MiB exactly.
p = run("replay", REF, "--json")
r = json.loads(p.stdout)["devices"][0]
check(r["peak_reserved_bytes"] == 3514 * MiB, f"reference replay: {r['peak_reserved_bytes']} bytes, want 3514 MiB")
check(r["recorded_peak_reserved_bytes"] == 3514 * MiB, "recorded peak of the reference")
check((r["allocs"], r["frees"], r["num_device_alloc"]) == (3186, 3183, 109), f"reference counts: {r}")
check(r["seed"]["segments"] == 0, "the reference history is complete: nothing to seed")

# Recognised by content: the same snapshot gzip-compressed, under a name that says nothing.
gz = os.path.join(TMP, "snapshot.data")
with open(REF, "rb") as src, gzip.open(gz, "wb") as dst:
    dst.write(src.read())
p = run("replay", gz)
check("3684696064  (3.43 GiB; recorded 3.43 GiB, +0.0%)" in p.stdout, f"gzip snapshot replay: {p.stdout}")

# A history ring that dropped the first 3000 events: seeded from the end state, same peak.
trunc = dict(ref)
trunc["device_traces"] = [ref["device_traces"][0][3000:]]
path = write_pickle("truncated.pickle", trunc)
p = run("replay", path)
check("history starts mid-run: seeded with 109 segments (3.43 GiB) and 701 live blocks" in p.stdout,
      f"truncated replay does not say it was seeded: {p.stdout}")
check("3684696064  (3.43 GiB; recorded 3.43 GiB, +0.0%)" in p.stdout, f"truncated replay peak: {p.stdout}")

# --config tries any ALLOC_CONF; bad ones and hardware devices are one-line errors.
p = run("replay", REF, "--json", "--config", "max_split_size_mb:100")
check(json.loads(p.stdout)["devices"][0]["peak_reserved_bytes"] == 4226 * MiB, f"max_split_size_mb:100: {p.stdout}")
p = run("replay", REF, "--config", "max_split_size_mb:5", expect_rc=2)
check("max_split_size_mb" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr)
p = run("replay", REF, "--device", "cuda:0", expect_rc=2)
check("simulated device" in p.stderr, p.stderr)
empty = write_pickle("empty.pickle", {"segments": [], "device_traces": []})
p = run("replay", empty, expect_rc=2)
check("no trace events" in p.stderr, p.stderr)

# tune: a 300 MiB block, freed; a 100 MiB request splits it; a 300 MiB request then OOMs on a
# device with 200 MiB free (capacity 500 MiB). max_split_size_mb <= 256 keeps the 300 MiB block
# whole for the second 300 MiB request: no OOM, 400 MiB peak (432 MiB with roundup 4: 320 + 112).
# roundup_power2_divisions rounds 300 MiB up to 320 (4 or 8 divisions) or 384 MiB (2). Expandable
# segments grow the one segment by the 100 MiB the second request lacks: 400 MiB, no OOM.
S = 0x7F0000000000
oom_snap = {
    "segments": [{"device": 0, "address": S, "total_size": 300 * MiB, "stream": 0, "segment_type": "large",
                  "blocks": [{"address": S, "size": 100 * MiB, "requested_size": 100 * MiB, "state": "active_allocated"},
                             {"address": S + 100 * MiB, "size": 200 * MiB, "requested_size": 0, "state": "inactive"}]}],
    "device_traces": [[
        ev("segment_alloc", S, 300 * MiB), ev("alloc", S, 300 * MiB), ev("free_requested", S, 300 * MiB),
        ev("free_completed", S, 300 * MiB), ev("alloc", S, 100 * MiB),
        {"action": "oom", "device_free": 200 * MiB, "size": 300 * MiB, "stream": 0, "time_us": 0},
    ]],
}
path = write_pickle("oom.pickle", oom_snap)
p = run("tune", path)
want = f"""tune {path}: 13 configs replayed on the simulated device (1 device trace)
device capacity 500.00 MiB (inferred from the recorded OOM); recorded: peak reserved 300.00 MiB, 1 OOM
rank   peak reserved  vs default  OOM                 PYTORCH_CUDA_ALLOC_CONF
   1      400.00 MiB      +33.3%  no                  max_split_size_mb:64
   2      400.00 MiB      +33.3%  no                  max_split_size_mb:128
   3      400.00 MiB      +33.3%  no                  max_split_size_mb:256
   4      400.00 MiB      +33.3%  no                  expandable_segments:True
   5      400.00 MiB      +33.3%  no                  compacting_expandable_segments:True  (gpumemprof-only)
   6      432.00 MiB      +44.0%  no                  max_split_size_mb:128,roundup_power2_divisions:4
   7      300.00 MiB       +0.0%  yes, as recorded    <default>
   8      300.00 MiB       +0.0%  yes, as recorded    max_split_size_mb:512
   9      300.00 MiB       +0.0%  yes, as recorded    garbage_collection_threshold:0.6,per_process_memory_fraction:1.0
  10      300.00 MiB       +0.0%  yes, as recorded    garbage_collection_threshold:0.8,per_process_memory_fraction:1.0
  11      320.00 MiB       +6.7%  yes, as recorded    roundup_power2_divisions:4
  12      320.00 MiB       +6.7%  yes, as recorded    roundup_power2_divisions:8
  13      384.00 MiB      +28.0%  yes, as recorded    roundup_power2_divisions:2
PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64
"""
check_equal(p.stdout, want, "tune output on the constructed OOM snapshot")

# tune on the reference: a table and a config line.
p = run("tune", REF)
check(p.stdout.splitlines()[-1].startswith("PYTORCH_CUDA_ALLOC_CONF="), f"tune's last line: {p.stdout}")
check("3.43 GiB       +0.0%  no                  <default>" in p.stdout, f"tune's default row: {p.stdout}")
# Expandable segments (where the allocator supports them) save the fragmentation: PyTorch's policy
# 2994 MiB; the compacting one (gpumemprof-only) 2974 MiB, ranked first but never on the
# PYTORCH_CUDA_ALLOC_CONF line.
if "not supported by this build" not in p.stdout:
    check("   1        2.90 GiB      -15.4%  no                  compacting_expandable_segments:True  (gpumemprof-only)"
          in p.stdout, p.stdout)
    check("   2        2.92 GiB      -14.8%  no                  expandable_segments:True" in p.stdout, p.stdout)
    check("gpumemprof only (not a PyTorch option): GPUMEMPROF_ALLOC_CONF=compacting_expandable_segments:True" in p.stdout,
          p.stdout)
    check(p.stdout.splitlines()[-1] == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", p.stdout)

# diff: two constructed snapshots (requests in whole 512-byte blocks: allocated = requested here). A: train.py:10 allocates 1 MiB twice (one freed), load.py:5
# allocates 4 MiB and frees it. B: train.py:10 allocates 1 MiB three times (all live), eval.py:7
# (new) allocates 2 MiB and keeps it; load.py:5 vanished.
def frames(file, line, name):
    return [{"filename": "site-packages/torch/nn/modules/module.py", "line": 1, "name": "forward"},
            {"filename": file, "line": line, "name": name}]


def seg_with(blocks):
    total = sum(b["size"] for b in blocks)
    return {"device": 0, "address": S, "total_size": 20 * MiB, "stream": 0, "segment_type": "large",
            "blocks": blocks + [{"address": S + total, "size": 20 * MiB - total, "requested_size": 0, "state": "inactive"}]}


def live_block(addr, size, fr):
    return {"address": addr, "size": size, "requested_size": size, "state": "active_allocated", "frames": fr}


T = frames("train.py", 10, "step")
L = frames("load.py", 5, "load")
E = frames("eval.py", 7, "evaluate")
snap_a = {"segments": [seg_with([live_block(S, MiB, T)])],
          "device_traces": [[ev("alloc", S, MiB, frames=T), ev("alloc", S + MiB, MiB, frames=T),
                             ev("alloc", S + 2 * MiB, 4 * MiB, frames=L), ev("free_completed", S + MiB, MiB),
                             ev("free_completed", S + 2 * MiB, 4 * MiB)]]}
snap_b = {"segments": [seg_with([live_block(S, MiB, T), live_block(S + MiB, MiB, T), live_block(S + 2 * MiB, MiB, T),
                                 live_block(S + 3 * MiB, 2 * MiB, E)])],
          "device_traces": [[ev("alloc", S, MiB, frames=T), ev("alloc", S + MiB, MiB, frames=T),
                             ev("alloc", S + 2 * MiB, MiB, frames=T), ev("alloc", S + 3 * MiB, 2 * MiB, frames=E)]]}
pa, pb = write_pickle("a.pickle", snap_a), write_pickle("b.pickle", snap_b)
p = run("diff", pa, pb)
want = f"""A: {pa}
B: {pb}
                                A              B  change
peak allocated           6.00 MiB       5.00 MiB  -1.00 MiB (-16.7%)
peak requested           6.00 MiB       5.00 MiB  -1.00 MiB (-16.7%)
requested at end         1.00 MiB       5.00 MiB  +4.00 MiB (+400.0%)
allocations                     3              4  +1
sites: 2 in A, 2 in B; 1 new, 1 vanished, 1 changed (largest peak change first)
  requested bytes: peak = most live at once during the trace, at end = live at the end
                  peak A       peak B       change     at end A     at end B  allocs A  allocs B  site
  vanished      4.00 MiB      0 bytes    -4.00 MiB      0 bytes      0 bytes         1         0  load at load.py:5
  new            0 bytes     2.00 MiB    +2.00 MiB      0 bytes     2.00 MiB         0         1  evaluate at eval.py:7
                2.00 MiB     3.00 MiB    +1.00 MiB     1.00 MiB     3.00 MiB         2         3  step at train.py:10
"""
check_equal(p.stdout, want, "diff of two constructed snapshots")
# --budget: B's peak is lower than A's (within any budget); A against B grows by 1 MiB.
p = run("diff", pb, pa, "--budget", "512KiB", expect_rc=1)
check(p.stdout.splitlines()[-1] == "over budget: B's peak allocated exceeds A's by +1.00 MiB, more than 512.00 KiB",
      f"diff --budget bytes: {p.stdout}")
p = run("diff", pb, pa, "--budget", "20%")
check(p.stdout.splitlines()[-1] == "within budget: peak allocated change +1.00 MiB, budget 1.00 MiB (20% of A's)",
      f"diff --budget percent: {p.stdout}")
p = run("diff", pb, pa, "--budget", "19%", expect_rc=1)
check("over budget" in p.stdout, f"diff --budget 19%: {p.stdout}")
p = run("diff", pa, pb, "--budget", "lots", expect_rc=2)
check("--budget" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr)

# diff of two profile JSONs (export_profile's shape): by scope.
def profile(peak, current, scopes):
    return {"summary": {"peak_memory_usage": peak, "current_memory_usage": current,
                        "total_function_calls": sum(c for _, c, _, _ in scopes.values()),
                        "function_summaries": {n: {"peak_memory": p, "call_count": c, "net_memory_change": net}
                                               for n, (p, c, net, _) in scopes.items()}},
            "results": [{"name": n, "tensors_created": t // c} for n, (p, c, net, t) in scopes.items() for _ in range(c)],
            "snapshots": []}


prof_a = os.path.join(TMP, "a.json")
prof_b = os.path.join(TMP, "b.json")
with open(prof_a, "w") as f:
    json.dump(profile(100 * MiB, 10 * MiB, {"forward": (80 * MiB, 2, 0, 20), "backward": (100 * MiB, 2, 10 * MiB, 40)}), f)
with open(prof_b, "w") as f:
    json.dump(profile(164 * MiB, 10 * MiB, {"forward": (80 * MiB, 2, 0, 20), "optimizer": (164 * MiB, 1, 0, 8)}), f)
p = run("diff", prof_a, prof_b, "--budget", "64MiB")
# Each column is what it says: peak allocated (the highest of a call), net change summed over the
# calls (not "live"), calls, allocations.
want = f"""A: {prof_a}
B: {prof_b}
                                A              B  change
peak allocated         100.00 MiB     164.00 MiB  +64.00 MiB (+64.0%)
allocated at end        10.00 MiB      10.00 MiB  0 bytes (+0.0%)
calls                           4              3  -1
allocations                    60             28  -32
scopes: 2 in A, 2 in B; 1 new, 1 vanished, 0 changed (largest peak change first)
  peak = the highest allocated bytes during a call (absolute); net = allocated minus freed bytes, summed over the calls
                  peak A       peak B       change        net A        net B  calls A  calls B  allocs A  allocs B  scope
  new            0 bytes   164.00 MiB  +164.00 MiB      0 bytes      0 bytes        0        1         0         8  optimizer
  vanished    100.00 MiB      0 bytes  -100.00 MiB   +10.00 MiB      0 bytes        2        0        40         0  backward
               80.00 MiB    80.00 MiB      0 bytes      0 bytes      0 bytes        2        2        20        20  forward
within budget: peak allocated change +64.00 MiB, budget 64.00 MiB
"""
check_equal(p.stdout, want, "diff of two profile JSONs")

# Nested scopes count once in the run's allocations (a nested call's allocations are its outer
# call's too), as a snapshot of the same run counts them: 10 in "step", 4 of them in "forward".
prof_n = os.path.join(TMP, "nested.json")
nested = profile(10 * MiB, 0, {"step": (10 * MiB, 1, 0, 10), "forward": (4 * MiB, 1, 0, 4)})
for r in nested["results"]:
    r["depth"] = 1 if r["name"] == "forward" else 0
with open(prof_n, "w") as f:
    json.dump(nested, f)
p = run("diff", prof_n, prof_n)
check(any(line.split()[:2] == ["allocations", "10"] for line in p.stdout.splitlines()),
      f"diff counts nested scopes' allocations twice: {p.stdout}")

# One peak allocated (issue 18): block bytes, PyTorch's meaning, the same in summary, the HTML
# report and diff for PyTorch's reference snapshot -- PyTorch's own allocated_bytes.all.peak for
# that run (tests/data/pytorch_stats.json) -- requested bytes are labelled requested.
PEAK_ALLOCATED = 3077896704
p = run("summary", REF)
check(f"peak allocated, device 0: 2.87 GiB = {PEAK_ALLOCATED} bytes" in p.stdout, f"summary's peak: {p.stdout}")
html = os.path.join(TMP, "ref.html")
run("html", REF, "-o", html)
with open(html) as f:
    page = f.read()
check(f'"peakAllocated":{PEAK_ALLOCATED}' in page and '"peakRequested":3061272480' in page,
      "the HTML report's peak allocated is not the summary's")
p = run("diff", REF, REF)
check("peak allocated           2.87 GiB       2.87 GiB" in p.stdout and
      "peak requested           2.85 GiB       2.85 GiB" in p.stdout, f"diff's peaks: {p.stdout}")

# Peak requested (requested bytes until the free completes, PyTorch's requested_bytes) is one
# number in the HTML report, diff and Perfetto; requested bytes until the free is requested (the
# timeline's, as torch.profiler's memory timeline) is the HTML report's other card and the top of
# `gpumemprof timeline`'s JSON rows. Both from the one timeline module.
def page_number(name):
    m = re.search('"%s":([0-9]+)' % name, page)
    return int(m.group(1)) if m else None


PEAK_REQUESTED = page_number("peakRequested")
check(PEAK_REQUESTED == 3061272480, f"the HTML report's peak requested: {PEAK_REQUESTED}")
check(f"{PEAK_REQUESTED / 2**30:.2f} GiB" == "2.85 GiB", "diff's peak requested is the HTML report's")
perfetto_path = os.path.join(TMP, "ref-perfetto.json")
run("perfetto", REF, "-o", perfetto_path)
with open(perfetto_path) as f:
    counters = [e["args"]["bytes"] for e in json.load(f)["traceEvents"] if e.get("ph") == "C" and e["name"] == "requested"]
check(counters and max(counters) == PEAK_REQUESTED, f"Perfetto's peak requested {max(counters or [0])} against {PEAK_REQUESTED}")
timeline_path = os.path.join(TMP, "ref-timeline.json")
run("timeline", REF, "-o", timeline_path)
with open(timeline_path) as f:
    _, rows = json.load(f)
check(max(sum(r[1:]) for r in rows) == page_number("peakRequestedInUse"),
      f"timeline's top {max(sum(r[1:]) for r in rows)} against the HTML report's {page_number('peakRequestedInUse')}")

# A gzipped snapshot is read by every command (summary, html, perfetto, diff), not called
# "neither a pickle nor JSON".
p = run("summary", gz)
check(f"= {PEAK_ALLOCATED} bytes" in p.stdout, f"summary of a gzipped pickle: {p.stdout}{p.stderr}")
run("perfetto", gz, "-o", os.path.join(TMP, "gz.json"))
check("peak allocated           2.87 GiB       2.87 GiB" in run("diff", gz, REF).stdout, "diff of a gzipped pickle")

# diff compares like with like: a snapshot against a profile is one clear line, exit 2.
p = run("diff", REF, prof_a, expect_rc=2)
check(len(p.stderr.strip().splitlines()) == 1 and "profile JSON" in p.stderr and "snapshot" in p.stderr, p.stderr)

# Plurals and units: "1 block", never "1 blocks"; "1.00 MiB", never "1024.00 KiB".
one = write_pickle("one.pickle", {"segments": [seg_with([live_block(S, MiB, T)])], "device_traces": []})
p = run("summary", one)
check("in      1 block " in p.stdout and "1 blocks" not in p.stdout and "1024.00 KiB" not in p.stdout,
      f"summary plurals and units: {p.stdout}")

cli_checks.finish("analysis CLI checks")
