#!/usr/bin/env python3
"""Interrupting the CLI while it writes a file (Ctrl-C, kill) leaves no temporary file behind and
never a partial target: the old file stays, or the complete new one is there.

Each try starts a long write, waits until its temporary file appears, sleeps a varied delay and
sends SIGINT or SIGTERM.

usage: test_interrupt.py GPUMEMPROF_BINARY   (env: GPUMEMPROF_SOURCE_DIR)"""
import os
import pickle
import random
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


def default_signals():
    """In the child: SIGINT and SIGTERM at their default actions, as in a shell's foreground job
    (a background job of a script starts with SIGINT ignored, which would test nothing)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


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
        p = subprocess.Popen([BIN, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             preexec_fn=default_signals)
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
# Signals at random moments of a whole run (issue 18: SIGINT 50-250 ms into a replay once left a
# temporary behind, from the window between creating it and registering it). Each try sends one
# SIGINT or SIGTERM at a uniformly random time within a full run's duration; none may leave a
# temporary or a partial target. GPUMEMPROF_INTERRUPT_TRIES sets the count (default 20; the C++
# test of atomic files sends hundreds more, cheaply, to a forked writer).
RANDOM_TRIES = int(os.environ.get("GPUMEMPROF_INTERRUPT_TRIES", "20"))
rand_dir = os.path.join(TMP, "random")
os.makedirs(rand_dir)
rand_target = os.path.join(rand_dir, "out.pickle")
# GPUMEMPROF_INTERRUPT_DEVICE=cuda:0 replays on a GPU, whose runtime has threads of its own.
rand_args = [BIN, "replay", os.path.join(DATA, "gpt2_train.trace.gz"), "--repeat", "0", "--snapshot", rand_target,
             "--device", os.environ.get("GPUMEMPROF_INTERRUPT_DEVICE", "sim:0")]
started = time.monotonic()
subprocess.run(rand_args, check=True, capture_output=True)
full_run = time.monotonic() - started
rng = random.Random(18)
random_left = 0
random_killed = 0
for i in range(RANDOM_TRIES):
    sig = signal.SIGINT if i % 4 != 3 else signal.SIGTERM
    p = subprocess.Popen(rand_args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=default_signals)
    time.sleep(rng.uniform(0, full_run))
    if p.poll() is None:
        p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    random_killed += 1 if p.returncode == -sig else 0
    if p.returncode not in (0, -sig):
        failures.append(f"random try {i}: exit {p.returncode} after {sig.name}: {err.decode(errors='replace')}")
    left = [n for n in os.listdir(rand_dir) if ".tmp-" in n]
    if left:
        random_left += 1
        failures.append(f"random try {i} ({sig.name}): temporary files left: {left}")
        for n in left:
            os.unlink(os.path.join(rand_dir, n))
    if os.path.exists(rand_target) and not complete(rand_target):
        failures.append(f"random try {i}: {rand_target} is not a complete snapshot")
print(f"random times: {RANDOM_TRIES} signals within a {full_run:.2f} s run, {random_killed} ended the run, "
      f"{random_left} left a temporary")
if RANDOM_TRIES >= 10 and random_killed < RANDOM_TRIES // 4:
    failures.append(f"only {random_killed} of {RANDOM_TRIES} random signals ended the run: nothing was tested")

# The test means something only if writes were interrupted (a fast disk may finish the small
# html page first; the 13 MB snapshots are interrupted nearly every time).
if total < TRIES:
    failures.append(f"only {total} of {4 * TRIES} tries were interrupted mid-write; nothing was tested")

cli_checks.finish("interrupt checks")
