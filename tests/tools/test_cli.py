#!/usr/bin/env python3
"""End-to-end tests of the gpumemprof CLI: replay (text, JSON, --snapshot), summary, html, demo,
and the one-line error / exit 2 contract for bad input.

usage: test_cli.py GPUMEMPROF_BINARY [--with-demo]   (env: GPUMEMPROF_SOURCE_DIR, GPUMEMPROF_SHARED_DIR)"""
import gzip
import json
import os
import pickle
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
WITH_DEMO = "--with-demo" in sys.argv[2:]  # the build has the examples (-Dexamples=true)
SRC = os.environ.get("GPUMEMPROF_SOURCE_DIR", ".")
DATA = os.path.join(SRC, "tests", "data")
SHARED_CHECKER = os.path.join(os.environ.get("GPUMEMPROF_SHARED_DIR", ""), "tools", "check_snapshot.py")
TMP = tempfile.mkdtemp(prefix="gpumemprof-cli-")
failures = []

# PyTorch 2.11's peak reserved MiB replaying the same traces (../shared/traces/README.md).
PYTORCH_RESERVED_MIB = {"resnet50_train": 3514, "gpt2_train": 8462, "gpt2_generate": 584}


def run(*args, expect_rc=0):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=600)
    if p.returncode != expect_rc:
        failures.append(f"{' '.join(args)}: exit {p.returncode}, expected {expect_rc}\n{p.stdout}{p.stderr}")
    return p


def check(cond, what):
    if not cond:
        failures.append(what)


def check_one_error_line(p, *needles):
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    check(len(lines) == 1, f"expected one error line, got {lines!r}")
    for n in needles:
        check(n in p.stderr, f"error line lacks {n!r}: {p.stderr!r}")


def check_snapshot_file(path):
    if os.path.exists(SHARED_CHECKER):
        p = subprocess.run([sys.executable, SHARED_CHECKER, path], capture_output=True, text=True)
        check(p.returncode == 0, f"check_snapshot.py rejects {path}:\n{p.stdout}")
        return "check_snapshot.py"
    # Without the shared checker: the properties the viewer depends on, checked directly.
    with open(path, "rb") as f:
        data = f.read()
    check(data[:1] == b"\x80" and 2 <= data[1] <= 4, f"{path}: pickle protocol must be 2..4")
    snap = pickle.loads(data)
    check(isinstance(snap.get("segments"), list) and isinstance(snap.get("device_traces"), list),
          f"{path}: segments and device_traces must be lists")
    for seg in snap["segments"]:
        check(sum(b["size"] for b in seg["blocks"]) == seg["total_size"], f"{path}: blocks do not tile a segment")
    return "built-in checks (shared check_snapshot.py not found)"


# replay: JSON fields and PyTorch parity on every shared trace; --snapshot passes the checker.
for name, mib in PYTORCH_RESERVED_MIB.items():
    trace = os.path.join(DATA, f"{name}.trace.gz")
    snap = os.path.join(TMP, f"{name}.pickle")
    p = run("replay", trace, "--json", "--repeat", "1", "--snapshot", snap)
    try:
        r = json.loads(p.stdout)
    except json.JSONDecodeError:
        failures.append(f"replay --json printed no JSON object: {p.stdout!r}")
        continue
    for key in ("allocs", "frees", "peak_requested_bytes", "peak_allocated_bytes", "peak_reserved_bytes",
                "num_device_alloc", "ns_per_pair"):
        check(key in r, f"replay --json lacks {key}")
    got = r["peak_reserved_bytes"] / 2**20
    check(abs(got - mib) <= 0.01 * mib, f"{name}: peak reserved {got:.1f} MiB vs PyTorch {mib} MiB")
    check(r["peak_reserved_bytes"] >= r["peak_allocated_bytes"] >= r["peak_requested_bytes"], f"{name}: peaks out of order")
    how = check_snapshot_file(snap)
    s = run("summary", snap)
    check("segments:" in s.stdout and "fragmentation:" in s.stdout, f"summary of {name} lacks its sections")
print(f"snapshots checked with {how}")

# Text output names every figure.
p = run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--repeat", "0")
for key in ("allocs", "peak_reserved_bytes", "ns_per_pair", "3514.0 MiB"):
    check(key in p.stdout, f"replay text output lacks {key!r}")

# A config changes the policy: max_split_size makes resnet's oversize blocks unsplittable.
p = run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--json", "--repeat", "0", "--config",
        "max_split_size_mb:64")
check(json.loads(p.stdout)["peak_reserved_bytes"] != 3684696064, "--config did not change the policy")

# summary and html on PyTorch's own snapshot.
p = run("summary", os.path.join(DATA, "resnet50_train.snapshot.pickle"))
check("segments: 109" in p.stdout, "summary of PyTorch's snapshot")
report = os.path.join(TMP, "report.html")
run("html", os.path.join(DATA, "resnet50_train.snapshot.pickle"), "-o", report)
with open(report, encoding="utf-8") as f:
    page = f.read()
check(page.lstrip().lower().startswith("<!doctype html") and "http://" not in page and "https://" not in page,
      "html report must be one self-contained page")

# The demo (the README's main command) on the simulated device writes every artefact.
if WITH_DEMO:
    demo_dir = os.path.join(TMP, "demo")
    p = run("demo", "--device", "sim:1", "--output", demo_dir, "--steps", "5")
    check("GPU memory profile" in p.stdout, "demo prints the profile summary")
    for name in ("profile.json", "results.csv", "samples.csv", "snapshot.pickle", "report.html"):
        check(os.path.exists(os.path.join(demo_dir, name)), f"demo did not write {name}")
    if os.path.exists(os.path.join(demo_dir, "snapshot.pickle")):
        check_snapshot_file(os.path.join(demo_dir, "snapshot.pickle"))
    check_one_error_line(run("demo", "--steps", "many", expect_rc=2), "--steps")
else:
    check_one_error_line(run("demo", expect_rc=2), "without the examples")

# perfetto: trace-event JSON with counter tracks.
trace_json = os.path.join(TMP, "trace.json")
run("perfetto", os.path.join(DATA, "resnet50_train.snapshot.pickle"), "-o", trace_json)
with open(trace_json) as f:
    events = json.load(f)["traceEvents"]
check(any(e.get("ph") == "C" for e in events), "perfetto output has no counter events")
check(any(e.get("ph") == "B" for e in events), "perfetto output has no annotation slices")

# Bad input: one clear line on stderr, exit 2, never a crash.
bad_trace = os.path.join(TMP, "bad.trace.gz")
with gzip.open(bad_trace, "wt") as f:
    f.write("# h\na 0 100 0\na 1 oops 0\n")
check_one_error_line(run("replay", bad_trace, expect_rc=2), "bad.trace.gz:3")
check_one_error_line(run("replay", os.path.join(TMP, "missing.gz"), expect_rc=2), "missing.gz")
check_one_error_line(run("replay", os.path.join(DATA, "gpt2_train.trace.gz"), "--device", "sim:99", expect_rc=2),
                     "sim:99", "available")
check_one_error_line(run("replay", os.path.join(DATA, "gpt2_train.trace.gz"), "--config", "max_split_size_mb:5",
                         expect_rc=2), "max_split_size_mb")
junk = os.path.join(TMP, "junk.pickle")
with open(junk, "wb") as f:
    f.write(b"\x80\x04\x95" + os.urandom(200))
check_one_error_line(run("summary", junk, expect_rc=2), "junk.pickle")
check_one_error_line(run("html", os.path.join(DATA, "gpt2_train.trace.gz"), "-o", report, expect_rc=2), "not a snapshot")
check_one_error_line(run("html", junk, expect_rc=2), "-o")
check_one_error_line(run("frobnicate", expect_rc=2), "unknown command")
check_one_error_line(run("replay", expect_rc=2), "TRACE")
check_one_error_line(run("replay", os.path.join(DATA, "gpt2_train.trace.gz"), "--repeat", "3abc", expect_rc=2),
                     "--repeat")
run("--version")

# Help: --help, -h and `help` at the top and on every command; replay's shows the trace format.
check(run("--version").stdout.startswith("gpumemprof "), "--version prints 'gpumemprof <version>'")
for top in (["--help"], ["-h"], ["help"]):
    check("usage: gpumemprof <command>" in run(*top).stdout, f"{top[0]} prints the usage")
for command in ["replay", "summary", "html", "perfetto"] + (["demo"] if WITH_DEMO else []):
    for flag in ("--help", "-h"):
        p = run(command, flag)
        check(p.stdout.strip() != "" and p.stderr == "", f"{command} {flag}: prints help on stdout, nothing on stderr")
    check(run("help", command).stdout == run(command, "--help").stdout, f"help {command} is {command} --help")
replay_help = run("replay", "-h").stdout
check("a <id> <bytes> <stream>" in replay_help and "f <id>" in replay_help, "replay --help shows the trace format")
check_one_error_line(run("help", "frobnicate", expect_rc=2), "unknown command")

if failures:
    print(f"{len(failures)} failure(s):")
    for f in failures:
        print(" -", f)
    sys.exit(1)
print("all CLI checks passed")
