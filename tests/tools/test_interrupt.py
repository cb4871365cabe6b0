#!/usr/bin/env python3
"""Interrupting the CLI while it writes a file (Ctrl-C, kill) leaves no temporary file behind and
never a partial target: the old file stays, or the complete new one is there.

Each try starts a long write, waits until its temporary file appears, sleeps a varied delay and
sends SIGINT or SIGTERM.

usage: test_interrupt.py GPUMEMPROF_BINARY   (env: GPUMEMPROF_SOURCE_DIR)"""
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_checks  # noqa: E402

BIN = sys.argv[1]
DATA = os.path.join(os.environ.get("GPUMEMPROF_SOURCE_DIR", "."), "tests", "data")
TMP = tempfile.mkdtemp(prefix="gpumemprof-interrupt-")
TRIES = 12
failures = cli_checks.failures


def complete(path):
    """Whether `path` holds a whole output of its kind (not a cut-off one)."""
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".pickle"):
        try:
            return isinstance(pickle.loads(data), dict)
        except Exception:
            return False
    if path.endswith(".html"):
        return data.rstrip().endswith(b"</html>")
    return data.rstrip().endswith(b"}")  # JSON object


def interrupt_writes(name, args, target, step=0.004):
    """Runs `args` TRIES times, interrupting each while its temporary exists."""
    out_dir = os.path.dirname(target)
    subprocess.run([BIN, *args], check=True, capture_output=True)  # a complete old file
    with open(target, "rb") as f:
        old = f.read()
    interrupted = 0
    for i in range(TRIES):
        sig = signal.SIGINT if i % 3 != 2 else signal.SIGTERM
        p = subprocess.Popen([BIN, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while p.poll() is None and time.monotonic() < deadline:
            if any(".tmp-" in n for n in os.listdir(out_dir)):
                break
            time.sleep(0.0005)
        time.sleep(i * step)  # 0 .. 11 steps into the write
        if p.poll() is None:
            p.send_signal(sig)
        _, err = p.communicate(timeout=60)
        if p.returncode == -sig:
            interrupted += 1
        elif p.returncode != 0:
            failures.append(f"{name}: exit {p.returncode} after {sig.name}: {err.decode(errors='replace')}")
        left = [n for n in os.listdir(out_dir) if ".tmp-" in n]
        if left:
            failures.append(f"{name} try {i} ({sig.name}): temporary files left: {left}")
            for n in left:
                os.unlink(os.path.join(out_dir, n))
        with open(target, "rb") as f:
            now = f.read()
        if now != old and not complete(target):
            failures.append(f"{name} try {i}: {target} is neither the old file nor a complete new one")
    print(f"{name}: {interrupted} of {TRIES} tries interrupted mid-write")
    return interrupted


trace = os.path.join(DATA, "gpt2_generate.trace.gz")
snap = os.path.join(TMP, "snap", "out.pickle")
os.makedirs(os.path.dirname(snap))
total = interrupt_writes("replay --snapshot .pickle", ["replay", trace, "--repeat", "0", "--snapshot", snap], snap)
snap_json = os.path.join(TMP, "json", "out.json")
os.makedirs(os.path.dirname(snap_json))
total += interrupt_writes("replay --snapshot .json", ["replay", trace, "--repeat", "0", "--snapshot", snap_json], snap_json)
report = os.path.join(TMP, "html", "report.html")
os.makedirs(os.path.dirname(report))
total += interrupt_writes("html", ["html", snap, "-o", report], report, step=0.001)  # one quick write of a ready page
perfetto = os.path.join(TMP, "perfetto", "trace.json")
os.makedirs(os.path.dirname(perfetto))
total += interrupt_writes("perfetto", ["perfetto", snap, "-o", perfetto], perfetto)
# The test means something only if writes were interrupted (a fast disk may finish the small
# html page first; the 13 MB snapshots are interrupted nearly every time).
if total < TRIES:
    failures.append(f"only {total} of {4 * TRIES} tries were interrupted mid-write; nothing was tested")

cli_checks.finish("interrupt checks")
