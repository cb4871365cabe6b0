#!/usr/bin/env python3
"""End-to-end tests of the gpumemprof CLI: replay (text, JSON, --snapshot), summary, html, demo,
and the one-line error / exit 2 contract for bad input.

usage: test_cli.py GPUMEMPROF_BINARY [--with-demo]   (env: GPUMEMPROF_SOURCE_DIR)"""
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
WITH_DEMO = "--with-demo" in sys.argv[2:]  # the build has the examples (-Dexamples=true)
SRC = os.environ.get("GPUMEMPROF_SOURCE_DIR", ".")
DATA = os.path.join(SRC, "tests", "data")
CHECKER = os.path.join(SRC, "tools", "check_snapshot.py")
TMP = tempfile.mkdtemp(prefix="gpumemprof-cli-")
failures = cli_checks.failures
check = cli_checks.check

# PyTorch 2.11's peak reserved MiB replaying the same traces (tests/data/README.md).
PYTORCH_RESERVED_MIB = {"resnet50_train": 3514, "gpt2_train": 8462, "gpt2_generate": 584}


def run(*args, expect_rc=0):
    return cli_checks.run(BIN, *args, expect_rc=expect_rc, timeout=600)




def check_one_error_line(p, *needles):
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    check(len(lines) == 1, f"expected one error line, got {lines!r}")
    for n in needles:
        check(n in p.stderr, f"error line lacks {n!r}: {p.stderr!r}")


def check_snapshot_file(path):
    p = subprocess.run([sys.executable, CHECKER, path], capture_output=True, text=True)
    check(p.returncode == 0, f"tools/check_snapshot.py rejects {path}:\n{p.stdout}{p.stderr}")
    return "tools/check_snapshot.py"


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
    # One peak: the summary of the replay's snapshot states the replay's own peak allocated bytes.
    check(f"= {r['peak_allocated_bytes']} bytes (the blocks its trace recorded" in s.stdout,
          f"{name}: summary's peak differs from replay's {r['peak_allocated_bytes']}: {s.stdout[-300:]!r}")
    # The whole device: our snapshots carry it, the summary ends with it (a replay holds nothing else).
    check("\ndevice sim:0: " in s.stdout and "\n  external allocations    0 bytes\n" in s.stdout
          and s.stdout.endswith("\n  unattributed            0 bytes\n"), f"{name}: summary lacks the device section")
    # Frames: every alloc/free entry and live block names its line of the trace.
    with open(snap, "rb") as f:
        d = pickle.load(f)
    entries = [e for e in d["device_traces"][0] if e["action"] in ("alloc", "free_requested", "free_completed")]
    blocks = [b for seg in d["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
    check(all(len(e["frames"]) == 1 and e["frames"][0]["filename"] == trace and e["frames"][0]["line"] >= 2
              for e in entries + blocks), f"{name}: a replayed entry or block without its trace frame")
    check(entries and entries[0]["frames"][0]["name"] == "replay alloc", f"{name}: first entry's frame name")
print(f"snapshots checked with {how}")

# --snapshot says what it holds: the cold replay (run 1 of 2 with --repeat 1), all of it or, with
# --max-entries, its newest entries -- in the JSON, the text and an annotation over the trace.
rn = os.path.join(DATA, "resnet50_train.trace.gz")
for extra, events, dropped in (([], 9662, 0), (["--max-entries", "1000"], 1000, 8662)):
    snap = os.path.join(TMP, "notes.pickle")
    r = json.loads(run("replay", rn, "--json", "--repeat", "1", "--snapshot", snap, *extra).stdout)
    check(r.get("snapshot", {}).get("events") == events and r["snapshot"]["dropped_events"] == dropped,
          f"replay --snapshot {extra}: {r.get('snapshot')}")
    with open(snap, "rb") as f:
        data = pickle.load(f)
    check(len(data["device_traces"][0]) == events, f"{extra}: {len(data['device_traces'][0])} entries in the file")
    notes = data["external_annotations"]
    check([a["stage"] for a in notes] == ["START", "END"] and notes[0]["name"] == r["snapshot"]["note"],
          f"{extra}: annotations {notes}")
    want = "all 9662 events" if not dropped else "its newest 1000 of 9662 events (--max-entries)"
    check("the cold replay (run 1 of 2; the warm runs are not recorded)" in r["snapshot"]["note"] and
          want in r["snapshot"]["note"], f"{extra}: note {r['snapshot']['note']!r}")
p = run("replay", rn, "--repeat", "0", "--snapshot", os.path.join(TMP, "notes.pickle"))
check("snapshot: gpumemprof replay of" in p.stdout and "run 1 of 1)" in p.stdout, "replay text names the snapshot")
check_one_error_line(run("replay", rn, "--max-entries", "5", expect_rc=2), "--max-entries applies with --snapshot")

# html: the level of detail's limits (0 = none); the page says when it applies.
report = os.path.join(TMP, "lod.html")
run("html", os.path.join(DATA, "resnet50_train.snapshot.pickle"), "-o", report, "--page-states", "100",
    "--page-allocations", "50")
with open(report, encoding="utf-8") as f:
    page = f.read()
check('"lod":{' in page and '"hidden":' in page, "html --page-states 100: no level of detail in the page")
run("html", os.path.join(DATA, "resnet50_train.snapshot.pickle"), "-o", report, "--page-states", "0",
    "--page-allocations", "0")
with open(report, encoding="utf-8") as f:
    check('"lod":{' not in f.read(), "html --page-states 0: level of detail applied anyway")

# Text output names every figure.
p = run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--repeat", "0")
# Sizes in words by the one rule of every command (summary's too): bytes, KiB, MiB or GiB with
# two decimals, next to the exact bytes.
for key in ("allocs", "peak_reserved_bytes", "ns_per_pair", "3684696064  (3.43 GiB, 1.204x requested)"):
    check(key in p.stdout, f"replay text output lacks {key!r}")
check("not measured" in p.stdout, "--repeat 0 must not print a timing")

# A config changes the policy: max_split_size makes resnet's oversize blocks unsplittable.
p = run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--json", "--repeat", "0", "--config",
        "max_split_size_mb:64")
check(json.loads(p.stdout)["peak_reserved_bytes"] != 3684696064, "--config did not change the policy")

# summary and html on PyTorch's own snapshot.
p = run("summary", os.path.join(DATA, "resnet50_train.snapshot.pickle"))
check("segments: 109" in p.stdout, "summary of PyTorch's snapshot")
check("\ndevice " not in p.stdout, "PyTorch's snapshot has no device section")
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
    # Step lines: no "loss n/a" where nothing is computed, and columns that stay put whatever
    # the time's width ("834.09 us" once pushed the rest one column right).
    steps = [l for l in p.stdout.splitlines() if l.startswith("step ")]
    check(len(steps) == 5 and not any("n/a" in l for l in steps), f"demo step lines: {steps}")
    check(len({l.index("allocated") for l in steps}) == 1 and len({len(l) for l in steps}) == 1,
          f"demo step columns move: {steps}")
    for name in ("profile.json", "results.csv", "samples.csv", "snapshot.pickle", "report.html"):
        check(os.path.exists(os.path.join(demo_dir, name)), f"demo did not write {name}")
    if os.path.exists(os.path.join(demo_dir, "snapshot.pickle")):
        check_snapshot_file(os.path.join(demo_dir, "snapshot.pickle"))
        # One meaning of "step": the demo's profiled train_step scopes are the steps that summary
        # and slice --steps see, numbered from 0 as the demo prints them.
        demo_snap = os.path.join(demo_dir, "snapshot.pickle")
        (demo_steps,) = json.loads(run("summary", demo_snap, "--json").stdout)["steps"]
        check(demo_steps["source"] == "annotations" and
              [x["name"] for x in demo_steps["steps"]] == ["train_step"] * 5, f"demo steps: {demo_steps}")
        check([l.split()[1] for l in steps] == ["0", "1", "2", "3", "4"], f"demo step numbers: {steps}")
        p = run("slice", demo_snap, "--steps", "2:4", "-o", os.path.join(demo_dir, "steps-2-4.pickle"))
        check("trace entries" in p.stdout, f"slice --steps 2:4 of the demo: {p.stdout}")
        # One number: the profile and the snapshot of the same run count the same allocations
        # (nested scopes once).
        def allocations(path):
            out = run("diff", path, path).stdout
            return [l.split()[1] for l in out.splitlines() if l.startswith("allocations ")]
        check(allocations(os.path.join(demo_dir, "profile.json")) == allocations(demo_snap),
              f"demo allocations: profile {allocations(os.path.join(demo_dir, 'profile.json'))}, "
              f"snapshot {allocations(demo_snap)}")
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

# Readers refuse bad input (issue 9): gzip truncation and corruption name the byte offset.
with open(os.path.join(DATA, "resnet50_train.trace.gz"), "rb") as f:
    good_gz = f.read()
truncated = os.path.join(TMP, "truncated.trace.gz")
with open(truncated, "wb") as f:
    f.write(good_gz[:12000])
check_one_error_line(run("replay", truncated, expect_rc=2), "truncated.trace.gz", "truncated gzip", "byte 12000")
corrupt = os.path.join(TMP, "corrupt.trace.gz")
with open(corrupt, "wb") as f:
    f.write(good_gz[:4000] + bytes(b ^ 0x5A for b in good_gz[4000:4100]) + good_gz[4100:])
check_one_error_line(run("replay", corrupt, expect_rc=2), "corrupt.trace.gz", "corrupt gzip", "at byte")
trailing = os.path.join(TMP, "trailing.trace.gz")
with open(trailing, "wb") as f:
    f.write(good_gz + b"garbage")
check_one_error_line(run("replay", trailing, expect_rc=2), "after the gzip stream", f"byte {len(good_gz)}")
# Two gzip members back to back are one stream (as zcat reads them).
two = os.path.join(TMP, "two_members.trace.gz")
with open(two, "wb") as f:
    f.write(gzip.compress(b"a 1 1000 0\n") + gzip.compress(b"f 1\n"))
check('"allocs":1' in run("replay", two, "--json", "--repeat", "0").stdout, "two gzip members read as one trace")


def check_quoted(p, limit=60):
    """The error quotes input escaped (no raw control or non-ASCII bytes) and short."""
    err = p.stderr
    check(all(32 <= ord(c) < 127 for c in err.rstrip("\n")), f"raw bytes in the error line: {err!r}")
    for q in re.findall(r"got '((?:[^'\\]|\\.)*)(?:'|\.\.\.')", err):
        check(len(q) <= limit + 3, f"quoted input longer than {limit} characters: {q!r}")


# Binary files fed to replay: the quote is escaped and cut short.
binary = os.path.join(TMP, "binary.trace")
with open(binary, "wb") as f:
    f.write(b"\x01\xfe\x03" + bytes(range(11, 256)) * 4)
p = run("replay", binary, expect_rc=2)
check_one_error_line(p, "binary.trace:1", "\\x01\\xfe\\x03", "...", "is this an allocation trace?")
check_quoted(p)
# A file that starts like a pickle is read as a snapshot (replay SNAPSHOT): junk gets the reader's line.
p = run("replay", junk, expect_rc=2)
check_one_error_line(p, "junk.pickle", "pickle")
check_quoted(p)
long_line = os.path.join(TMP, "long_line.trace")
with open(long_line, "w") as f:
    f.write("a 1 " + "9" * 100000 + " 0\n")
p = run("replay", long_line, expect_rc=2)
check_one_error_line(p, "long_line.trace:1")
check(len(p.stderr) < 400, f"a 100000-character line is echoed whole: {len(p.stderr)} characters")
p = run("summary", os.path.join(DATA, "gpt2_train.trace.gz"), expect_rc=2)
check_quoted(p)
bad_state = os.path.join(TMP, "bad_state.json")
with open(bad_state, "w") as f:
    json.dump({"segments": [{"address": 0, "total_size": 512, "stream": 0, "segment_type": "small\x1b[31m" * 20,
                             "allocated_size": 0, "active_size": 0, "blocks": []}]}, f)
p = run("summary", bad_state, expect_rc=2)
check_one_error_line(p, "segment_type", "\\x1b")
check_quoted(p)
p = run("replay", os.path.join(DATA, "gpt2_train.trace.gz"), "--device", "\x1b[2J" + "x" * 200, expect_rc=2)
check_one_error_line(p, "\\x1b")
check_quoted(p)
p = run("replay", os.path.join(DATA, "gpt2_train.trace.gz"), "--config", "max_split_size_mb:\x07" + "9" * 200, expect_rc=2)
check_one_error_line(p, "max_split_size_mb", "\\x07")
check_quoted(p)


# Block ids far apart cost no memory (a dense table once took 950 MB for id 100000000 and
# died with bad_alloc for 3000000000).
sparse = os.path.join(TMP, "sparse_ids.trace")
with open(sparse, "w") as f:
    f.write("a 100000000 1 0\na 3000000000 512 0\na 18446744073709551615 2 0\nf 3000000000\n")
dense = os.path.join(TMP, "dense_ids.trace")
with open(dense, "w") as f:
    f.write("a 1 1 0\na 2 512 0\na 3 2 0\nf 2\n")


def peak_rss_kib(*args):
    """(stdout, peak resident KiB) of one CLI run."""
    child = subprocess.Popen([BIN, *args], stdout=subprocess.PIPE, text=True)
    out = child.stdout.read()
    _, _, usage = os.wait4(child.pid, 0)
    return out, usage.ru_maxrss


# Against the same three blocks with small ids: the binary's own footprint (CUDA libraries,
# sanitizers) cancels out.
_, base_kib = peak_rss_kib("replay", dense, "--json", "--repeat", "1")
out, sparse_kib = peak_rss_kib("replay", sparse, "--json", "--repeat", "1")
check(sparse_kib - base_kib < 64 * 1024, f"replay of three sparse ids took {sparse_kib} KiB vs {base_kib} KiB")
check('"allocs":3' in out and '"frees":1' in out, f"sparse ids replay: {out!r}")
check_one_error_line(run("replay", sparse.replace("sparse_ids", "nope"), expect_rc=2), "nope")
with open(sparse, "a") as f:
    f.write("f 7\n")
check_one_error_line(run("replay", sparse, expect_rc=2), "sparse_ids.trace:5", "block id 7", "not live")
with open(sparse, "w") as f:
    f.write("a 1 99999999999999999999 0\n")
check_one_error_line(run("replay", sparse, expect_rc=2), "sparse_ids.trace:1")
with open(sparse, "w") as f:
    f.write("a 1 2000000000000000000 0\n")
check_one_error_line(run("replay", sparse, expect_rc=2), "sparse_ids.trace:1", "2^60")

# An empty trace is an error, not a report of zeros; --repeat 0 says no timing was taken.
empty = os.path.join(TMP, "empty.trace")
open(empty, "w").close()
check_one_error_line(run("replay", empty, expect_rc=2), "empty.trace", "empty trace", "file is empty")
with open(empty, "w") as f:
    f.write("# header only\n\n")
check_one_error_line(run("replay", empty, expect_rc=2), "empty trace", "only comments")
empty_gz = os.path.join(TMP, "empty.trace.gz")
with gzip.open(empty_gz, "wb") as f:
    pass
check_one_error_line(run("replay", empty_gz, expect_rc=2), "empty trace")
p = run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--repeat", "0")
check("not measured (--repeat 0" in p.stdout, f"--repeat 0 must say no timing was taken: {p.stdout!r}")
p = run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--repeat", "0", "--json")
check(json.loads(p.stdout).get("ns_per_pair", 0) is None, "--repeat 0 --json: ns_per_pair must be null")
p = run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--repeat", "2", "--json")
check(json.loads(p.stdout)["ns_per_pair"] > 0, "--repeat 2 --json: ns_per_pair measured")
# Device calls per warm replay: none once the default policy's cache settled.
r = json.loads(p.stdout)
check(r["warm_num_device_alloc"] == 0 and r["warm_num_device_free"] == 0, f"default policy, warm replays: {r}")
# expandable_segments:True is PyTorch's policy: PyTorch's own figures (pytorch_replay_figures.json),
# nothing mapped once warm.
figures = json.load(open(os.path.join(DATA, "pytorch_replay_figures.json")))["traces"]
for name in ("resnet50_train", "gpt2_generate"):
    p = run("replay", os.path.join(DATA, name + ".trace.gz"), "--repeat", "2", "--json", "--config",
            "expandable_segments:True")
    r = json.loads(p.stdout)
    c = figures[name]["expandable"]["cold"]
    check((r["peak_allocated_bytes"], r["peak_reserved_bytes"], r["num_device_alloc"]) ==
          (c["peak_allocated_bytes"], c["peak_reserved_bytes"], c["num_device_alloc"]), f"expandable {name}: {r} vs {c}")
    check(r["warm_num_device_alloc"] == 0 and r["warm_num_device_free"] == 0, f"expandable {name}, warm replays: {r}")
    check(r["warm_peak_reserved_bytes"] == r["peak_reserved_bytes"], f"expandable {name}: reserved crept up: {r}")
# The compacting policy (gpumemprof-only): 2974 MiB on resnet50_train (PyTorch's expandable: 2994),
# and the pages the cold replay mapped serve the warm replays: nothing mapped or unmapped, reserved
# stays. gpt2_generate: 536 MiB cold (574), and the warm replays map nothing either: the small
# pool's first page is its own, as in a warm cache (docs/expandable-segments.md).
p = run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--repeat", "2", "--json", "--config",
        "compacting_expandable_segments:True")
r = json.loads(p.stdout)
check(r["peak_reserved_bytes"] == 2974 << 20, f"compacting resnet50_train, peak reserved: {r}")
check(r["warm_num_device_alloc"] == 0 and r["warm_num_device_free"] == 0, f"compacting resnet50_train, warm: {r}")
check(r["warm_peak_reserved_bytes"] == r["peak_reserved_bytes"], f"compacting resnet50_train: reserved crept up: {r}")
p = run("replay", os.path.join(DATA, "gpt2_generate.trace.gz"), "--repeat", "2", "--json", "--config",
        "compacting_expandable_segments:True")
r = json.loads(p.stdout)
check(r["peak_reserved_bytes"] == 536 << 20 and r["warm_peak_reserved_bytes"] == 536 << 20,
      f"compacting gpt2_generate, peak reserved: {r}")
check(r["warm_num_device_alloc"] == 0 and r["warm_num_device_free"] == 0, f"compacting gpt2_generate, warm: {r}")
# --segment-addresses: the default policy with the driver's addresses gives PyTorch's figures.
d = figures["resnet50_train"]["default"]
addresses = os.path.join(TMP, "resnet50_train.segments.txt")
with open(addresses, "w") as f:
    for action, addr, size in d["segment_events"]:
        f.write(f"0 {action} {addr} {size} 0\n")
p = run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--repeat", "1", "--json", "--segment-addresses",
        addresses)
r = json.loads(p.stdout)
c = d["cold"]
check((r["peak_allocated_bytes"], r["peak_reserved_bytes"], r["num_device_alloc"]) ==
      (c["peak_allocated_bytes"], c["peak_reserved_bytes"], c["num_device_alloc"]), f"--segment-addresses: {r} vs {c}")
p = run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--segment-addresses", os.path.join(TMP, "none.txt"),
        expect_rc=2)
check(len(p.stderr.strip().splitlines()) == 1, f"--segment-addresses of a missing file: one line: {p.stderr}")
# Data loss (issue 18): no command writes over one of its inputs -- the same file by any path,
# hard link or symbolic link; the input stays as it was, and the refusal is one line, exit 2.
ref_pickle = os.path.join(DATA, "resnet50_train.snapshot.pickle")
victim = os.path.join(TMP, "victim.pickle")
with open(ref_pickle, "rb") as f:
    victim_bytes = f.read()
with open(victim, "wb") as f:
    f.write(victim_bytes)
os.link(victim, os.path.join(TMP, "victim-hardlink.pickle"))
os.symlink(victim, os.path.join(TMP, "victim-symlink.pickle"))
os.makedirs(os.path.join(TMP, "sub"), exist_ok=True)
for out in (victim, os.path.join(TMP, "sub", "..", "victim.pickle"), os.path.join(TMP, "victim-hardlink.pickle"),
            os.path.join(TMP, "victim-symlink.pickle")):
    for command in (["html", victim, "-o", out], ["perfetto", victim, "--output", out],
                    ["html", os.path.join(TMP, "victim-symlink.pickle"), "-o", out]):
        check_one_error_line(run(*command, expect_rc=2), "is the input file", "name another output file")
with open(victim, "rb") as f:
    check(f.read() == victim_bytes, "a refused write changed the input")
victim_trace = os.path.join(TMP, "victim.trace.pickle")  # a trace under a name --snapshot accepts
with open(os.path.join(DATA, "gpt2_train.trace.gz"), "rb") as src, open(victim_trace, "wb") as dst:
    trace_bytes = src.read()
    dst.write(trace_bytes)
check_one_error_line(run("replay", victim_trace, "--snapshot", victim_trace, expect_rc=2), "is the input file")
with open(victim_trace, "rb") as f:
    check(f.read() == trace_bytes, "replay --snapshot over its trace changed the trace")
# An output that does not exist yet, or another file, is fine.
run("html", victim, "-o", os.path.join(TMP, "victim.html"))
# --snapshot names a format it writes.
check_one_error_line(run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--snapshot",
                         os.path.join(TMP, "out.bogus"), expect_rc=2), "out.bogus", ".pickle", ".json")
check(not os.path.exists(os.path.join(TMP, "out.bogus")), "--snapshot out.bogus wrote a file")

# A replay that runs out of memory names the trace line that asked (issue 18).
oom_trace = os.path.join(TMP, "oom.trace")
with open(oom_trace, "w") as f:
    f.write("# workload=oom\na 0 1048576 0\na 1 104857600 0\nf 0\n")
p = subprocess.run([BIN, "replay", oom_trace, "--repeat", "0"], capture_output=True, text=True,
                   env=dict(os.environ, GPUMEMPROF_SIM_CAPACITY="64MiB"))
check(p.returncode == 2, f"replay OOM: exit {p.returncode}")
check_one_error_line(p, "oom.trace:3:", "104857600 bytes", "out of memory")

# --device cuda:0 where there is no GPU says so (not "CUDA driver version is insufficient").
p = run("replay", os.path.join(DATA, "resnet50_train.trace.gz"), "--repeat", "0", "--device", "cuda:0",
        expect_rc=None)
if p.returncode != 0 and "built without CUDA" not in p.stderr:
    check_one_error_line(p, "cuda:0", "no GPU")
    check("insufficient" not in p.stderr, f"--device cuda:0 without a GPU: {p.stderr}")

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

cli_checks.finish("CLI checks")
