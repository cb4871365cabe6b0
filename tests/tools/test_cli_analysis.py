#!/usr/bin/env python3
"""End-to-end tests of the snapshot analysis commands: replay SNAPSHOT (PyTorch's reference
snapshot, a truncated copy, a gzip copy), tune (exact output on a constructed snapshot where one
config clearly wins) and diff. Exact numbers throughout.

usage: test_cli_analysis.py GPUMEMPROF_BINARY   (env: GPUMEMPROF_SOURCE_DIR)"""
import gzip
import json
import os
import pickle
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
SRC = os.environ.get("GPUMEMPROF_SOURCE_DIR", ".")
REF = os.path.join(SRC, "tests", "data", "resnet50_train.snapshot.pickle")
TMP = tempfile.mkdtemp(prefix="gpumemprof-analysis-")
MiB = 1 << 20
failures = []


def run(*args, expect_rc=0):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)
    if p.returncode != expect_rc:
        failures.append(f"{' '.join(args)}: exit {p.returncode}, expected {expect_rc}\n{p.stdout}{p.stderr}")
    return p


def check(cond, what):
    if not cond:
        failures.append(what)


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
check("3514.0 MiB; recorded 3514.0 MiB, +0.0%" in p.stdout, f"gzip snapshot replay: {p.stdout}")

# A history ring that dropped the first 3000 events: seeded from the end state, same peak.
trunc = dict(ref)
trunc["device_traces"] = [ref["device_traces"][0][3000:]]
path = write_pickle("truncated.pickle", trunc)
p = run("replay", path)
check("history starts mid-run: seeded with 109 segments (3514.0 MiB) and 701 live blocks" in p.stdout,
      f"truncated replay does not say it was seeded: {p.stdout}")
check("(3514.0 MiB; recorded 3514.0 MiB, +0.0%)" in p.stdout, f"truncated replay peak: {p.stdout}")

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
# roundup_power2_divisions rounds 300 MiB up to 320 (4 or 8 divisions) or 384 MiB (2).
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
want = f"""tune {path}: 12 configs replayed on the simulated device (1 device trace)
device capacity 500.0 MiB (inferred from the recorded OOM); recorded: peak reserved 300.0 MiB, 1 OOM
rank   peak reserved  vs default  OOM                 PYTORCH_CUDA_ALLOC_CONF
   1       400.0 MiB      +33.3%  no                  max_split_size_mb:64
   2       400.0 MiB      +33.3%  no                  max_split_size_mb:128
   3       400.0 MiB      +33.3%  no                  max_split_size_mb:256
   4       432.0 MiB      +44.0%  no                  max_split_size_mb:128,roundup_power2_divisions:4
   5       300.0 MiB       +0.0%  yes, as recorded    <default>
   6       300.0 MiB       +0.0%  yes, as recorded    max_split_size_mb:512
   7       300.0 MiB       +0.0%  yes, as recorded    garbage_collection_threshold:0.6,per_process_memory_fraction:1.0
   8       300.0 MiB       +0.0%  yes, as recorded    garbage_collection_threshold:0.8,per_process_memory_fraction:1.0
   9       320.0 MiB       +6.7%  yes, as recorded    roundup_power2_divisions:4
  10       320.0 MiB       +6.7%  yes, as recorded    roundup_power2_divisions:8
  11       384.0 MiB      +28.0%  yes, as recorded    roundup_power2_divisions:2
   -               -           -  -                   expandable_segments:True  (not supported by this build)
PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64
"""
check_equal(p.stdout, want, "tune output on the constructed OOM snapshot")

# tune on the reference: a table and a config line.
p = run("tune", REF)
check(p.stdout.splitlines()[-1].startswith("PYTORCH_CUDA_ALLOC_CONF="), f"tune's last line: {p.stdout}")
check("3514.0 MiB       +0.0%  no                  <default>" in p.stdout, f"tune's default row: {p.stdout}")

if failures:
    print(f"{len(failures)} failure(s):")
    for f in failures:
        print(" -", f)
    sys.exit(1)
print("all analysis CLI checks passed")
