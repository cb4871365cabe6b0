#!/usr/bin/env python3
"""`gpumemprof slice`: windows of PyTorch's reference snapshot and of a replay-written snapshot.
Each slice holds exactly the window's entries, passes the viewer checker (tools/check_snapshot.py), replays with
`gpumemprof replay`, and its live blocks are the state at the window's end: what the input's end
state gives when the later entries are undone, and what the viewer's backward walk of the slice's
trace needs (every alloc in it finds its block live). Bad bounds: one error line, exit 2.

usage: test_cli_slice.py GPUMEMPROF_BINARY   (env: GPUMEMPROF_SOURCE_DIR)"""
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_checks  # noqa: E402

BIN = sys.argv[1]
SRC = os.environ.get("GPUMEMPROF_SOURCE_DIR", ".")
REFERENCE = os.path.join(SRC, "tests", "data", "resnet50_train.snapshot.pickle")
TRACE = os.path.join(SRC, "tests", "data", "resnet50_train.trace.gz")
CHECKER = os.path.join(SRC, "tools", "check_snapshot.py")
TMP = tempfile.mkdtemp(prefix="gpumemprof-slice-")
check = cli_checks.check


def run(*args, expect_rc=0):
    return cli_checks.run(BIN, *args, expect_rc=expect_rc, timeout=300)


def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def live_blocks(snap):
    """addr -> requested bytes of the active blocks (allocated or pending free)."""
    return {b["address"]: b["requested_size"] for s in snap["segments"] for b in s["blocks"]
            if b["state"] != "inactive"}


def live_at(snap, keep_until):
    """The input's live blocks with the entries after index `keep_until` undone."""
    live = live_blocks(snap)
    for e in reversed(snap["device_traces"][0][keep_until:]):
        if e["action"] == "alloc":
            live.pop(e["addr"], None)
        elif e["action"] == "free_completed":
            live[e["addr"]] = e["size"]
    return live


def check_slice(name, whole, out, first, last):
    """`out` must hold entries [first, last) of device 0's trace and the state at their end."""
    sl = load(out)
    trace = whole["device_traces"][0]
    got = sl["device_traces"][0]
    check(len(got) == last - first, f"{name}: {len(got)} entries, expected {last - first}")
    check(got == trace[first:last], f"{name}: the entries differ from the input's window")
    check(live_blocks(sl) == live_at(whole, last), f"{name}: live blocks are not the state at the window's end")
    for s in sl["segments"]:
        check(sum(b["size"] for b in s["blocks"]) == s["total_size"], f"{name}: blocks do not tile a segment")
        check(s["allocated_size"] == sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated"),
              f"{name}: a segment's allocated_size is not its blocks'")
    # The viewer walks the trace backwards from the blocks: each alloc must find its block live.
    live = set(live_blocks(sl))
    for e in reversed(got):
        if e["action"] == "alloc":
            check(e["addr"] in live, f"{name}: alloc of {e['addr']:#x} at {e['time_us']} has no live block")
            live.discard(e["addr"])
        elif e["action"] == "free_completed":
            live.add(e["addr"])
    p = subprocess.run([sys.executable, CHECKER, out], capture_output=True, text=True)
    check(p.returncode == 0, f"{name}: check_snapshot.py rejects the slice:\n{p.stdout}{p.stderr}")
    r = run("replay", out)
    check("replay of" in r.stdout, f"{name}: replay of the slice printed {r.stdout[:200]!r}")
    return sl


def slices_of(tag, path):
    whole = load(path)
    trace = whole["device_traces"][0]
    n = len(trace)
    times = [e["time_us"] for e in trace]
    t0, t1 = times[n // 4], times[n // 2]
    first = times.index(t0)
    last = max(i for i, t in enumerate(times) if t <= t1) + 1
    cases = [
        ("--max-entries 1000", ["--max-entries", "1000"], n - 1000, n),
        (f"--time {t0}:{t1}", ["--time", f"{t0}:{t1}"], first, last),
        (f"--time {t0}:", ["--time", f"{t0}:"], first, n),
        (f"--time :{t1}", ["--time", f":{t1}"], 0, last),
        (f"--time {t0}:{t1} --max-entries 100", ["--time", f"{t0}:{t1}", "--max-entries", "100"], last - 100, last),
    ]
    for label, opts, a, b in cases:
        out = os.path.join(TMP, f"{tag}-slice.pickle")
        p = run("slice", path, *opts, "-o", out)
        check(f"{b - a} trace entries" in p.stdout, f"{tag} {label}: summary line {p.stdout!r}")
        sl = check_slice(f"{tag} {label}", whole, out, a, b)
        if b == n:  # the window reaches the end: the segments are the input's own
            check(sl["segments"] == whole["segments"], f"{tag} {label}: segments differ from the input's")
    return whole, times


whole, times = slices_of("reference", REFERENCE)
replayed = os.path.join(TMP, "replayed.pickle")
run("replay", TRACE, "--repeat", "1", "--snapshot", replayed)
slices_of("replay-written", replayed)

# --steps: four annotated steps over the reference trace, steps 1 to 2 kept.
stepped = dict(whole)
n = len(times)
bounds = [(times[i * n // 4], times[(i + 1) * n // 4 - 1]) for i in range(4)]
stepped["external_annotations"] = [
    {"stage": stage, "name": f"step {i}", "device": 0, "time_us": t}
    for i, (a, b) in enumerate(bounds) for stage, t in (("START", a), ("END", b))]
stepped_path = os.path.join(TMP, "stepped.pickle")
with open(stepped_path, "wb") as f:
    pickle.dump(stepped, f, protocol=4)
out = os.path.join(TMP, "steps-slice.pickle")
run("slice", stepped_path, "--steps", "1:2", "-o", out)
first = times.index(bounds[1][0])
# A step holds the entries from its START up to its END, not those at the END's time (as summary
# and html count them): the slice ends before the first entry at or after step 2's END.
last = next(i for i, t in enumerate(times) if t >= bounds[2][1])
sl = check_slice("--steps 1:2", whole, out, first, last)
check([a["name"] for a in sl["external_annotations"] if a["stage"] == "START"] == ["step 1", "step 2"],
      f"--steps 1:2: annotations {sl['external_annotations']!r}")
run("slice", stepped_path, "--steps", "3:", "-o", out)
check_slice("--steps 3:", whole, out, times.index(bounds[3][0]), n)
cli_checks.check_one_error_line(run("slice", stepped_path, "--steps", "0:9", "-o", out, expect_rc=2), "steps 0 to 3")
# Without annotated steps, the steps summary and html detect (PyTorch's reference: a repeating
# allocation pattern), numbered from 0: slice --steps takes the same steps.
want = json.loads(run("summary", REFERENCE, "--json").stdout)["steps"][0]
check(want["source"] == "detected", f"reference steps: {want['source']}")
p = run("slice", REFERENCE, "--steps", "1:1", "-o", out)
check(f"{want['steps'][1]['entries']} trace entries" in p.stdout,
      f"--steps 1:1 of detected steps: {p.stdout!r}, step 1 has {want['steps'][1]['entries']} entries")
# Neither: ten entries repeat nothing.
few = os.path.join(TMP, "few.pickle")
run("slice", REFERENCE, "--max-entries", "10", "-o", few)
cli_checks.check_one_error_line(run("slice", few, "--steps", "0:1", "-o", out, expect_rc=2), "no steps found")

# Bad input: one line, exit 2.
out = os.path.join(TMP, "bad.pickle")  # never written
after = times[-1] + 1_000_000
cli_checks.check_one_error_line(run("slice", REFERENCE, "--time", f"{after}:", "-o", out, expect_rc=2),
                                "outside the snapshot's trace")
cli_checks.check_one_error_line(run("slice", REFERENCE, "--time", f":{times[0] - 1}", "-o", out, expect_rc=2),
                                "outside the snapshot's trace")
cli_checks.check_one_error_line(run("slice", REFERENCE, "--time", "5:1", "-o", out, expect_rc=2), "after the end")
cli_checks.check_one_error_line(run("slice", REFERENCE, "--time", "abc", "-o", out, expect_rc=2), "T0:T1")
cli_checks.check_one_error_line(run("slice", REFERENCE, "-o", out, expect_rc=2), "--max-entries")
cli_checks.check_one_error_line(run("slice", REFERENCE, "--max-entries", "0", "-o", out, expect_rc=2),
                                "--max-entries")
copy = os.path.join(TMP, "input.pickle")
shutil.copyfile(REFERENCE, copy)
size = os.path.getsize(copy)
cli_checks.check_one_error_line(run("slice", copy, "--max-entries", "10", "-o", copy, expect_rc=2), "input file")
check(os.path.getsize(copy) == size, "slice -o INPUT changed the input")
check(not os.path.exists(os.path.join(TMP, "bad.pickle")), "a refused slice wrote its output")
help_text = run("help").stdout
check("slice SNAPSHOT" in help_text, "gpumemprof help does not list slice")

shutil.rmtree(TMP, ignore_errors=True)
print("slices checked with tools/check_snapshot.py")
cli_checks.finish("slice checks")
