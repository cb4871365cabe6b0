"""The launcher python -m gpumemprof_torch.run where it cannot run a script: no PyTorch, no GPU, no
script. Each case is one clear line on stderr and exit 2, and the script never runs. A stand-in
`torch` module (a folder put first on PYTHONPATH) plays PyTorch without a GPU, so the test needs no
torch; with a real torch and a GPU visible, that case is left to bench/gpu_ranks.sh.

Then the launcher's end of a run, with the real package's Python and only the library calls stood
in for: two ranks without a process group (ranks.json from the ranks' files), a rank that never
comes, a script that raises, and a crash in the interpreter's teardown (which the launcher skips;
bench/gpu_ranks_teardown.sh runs the real thing under torchrun on two GPUs).

    test_torch_launcher.py SOURCE_DIR
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import check, finish  # noqa: E402

FAKE_TORCH_NO_GPU = """
class _Cuda:
    @staticmethod
    def is_available():
        return False
cuda = _Cuda()
"""

FAKE_TORCH_GPU = """
class _Cuda:
    @staticmethod
    def is_available():
        return True
    @staticmethod
    def is_initialized():
        return False
cuda = _Cuda()
"""

# gpumemprof_torch as the launcher uses it, without the bridge library or a GPU: rank 0 of 1.
FAKE_BRIDGE = """
import os
def _log(what):
    if os.environ.get("FAKE_BRIDGE_LOG"):
        with open(os.environ["FAKE_BRIDGE_LOG"], "a") as f:
            f.write(what + "\\n")
def install(): _log("install")
def track_external_memory(): _log("track_external_memory"); return True
def record_memory_history(*args, **kwargs): pass
def dump_on_oom(*args, **kwargs): pass
def _forget_rank_entry(directory, rank): pass
def _rank_and_world(): return 0, 1, False
def dump_snapshots(directory, device=None, collective=True):
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, "rank-0.pickle"), "w").close()
def rank_summary(directory): return "1 rank(s) of world size 1 (stand-in summary)\\n"
"""

# A script whose process dies at exit (as a library's teardown can), after the launcher's summary.
CRASH_AT_EXIT = """
import atexit, os, signal
atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))
"""


# The real gpumemprof_torch package with its library calls stood in for (appended to its source):
# the rank file is an empty file, the peaks are (rank + 1) MiB allocated and 2 MiB more reserved.
STAND_IN_LIBRARY = """
def install(): pass
def record_memory_history(*args, **kwargs): pass
def dump_on_oom(*args, **kwargs): pass
def _device_index(device, what=None): return 0
class _StandInLibrary:
    def gpumemprof_dump_rank_snapshot(self, index, directory, rank, world):
        os.makedirs(directory, exist_ok=True)
        open(os.path.join(os.fsdecode(directory), "rank-%d.pickle" % rank), "w").close()
        return 0
def _load(): return _StandInLibrary()
def memory_stats(index):
    mib = (_rank_and_world()[0] + 1) << 20
    return {"allocated_bytes.all.peak": mib, "reserved_bytes.all.peak": mib + (2 << 20), "num_ooms": 0}
def rank_summary(directory):
    with open(os.path.join(directory, "ranks.json")) as f:
        return "stand-in summary of ranks.json: " + f.read().replace(chr(10), " ") + chr(10)
"""

# Dies in the interpreter's teardown (a module's object freed at finalization), as torch, CUDA or
# NCCL can; leaves a file open with unflushed text, which the end of the process must still write.
CRASH_AT_TEARDOWN = """
import builtins, os, signal, sys
class _Boom:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGSEGV)
builtins._gpumemprof_test_boom = _Boom()
builtins._gpumemprof_test_file = open(sys.argv[1], "w")
builtins._gpumemprof_test_file.write("written before exit")
"""

RAISES = """
raise ValueError("the script's own error")
"""


def launch(source, pythonpath, *args, env_extra=None, popen=False):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath + [os.path.join(source, "python")]))
    env.update(env_extra or {})
    if "GPUMEMPROF_TRACK_EXTERNAL" not in (env_extra or {}):
        env.pop("GPUMEMPROF_TRACK_EXTERNAL", None)  # the caller's own setting would change the checks
    if popen:
        return subprocess.Popen([sys.executable, "-m", "gpumemprof_torch.run", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
    env.pop("PYTHONUNBUFFERED", None)  # stdout block-buffered, as under torchrun into a log file
    return subprocess.run([sys.executable, "-m", "gpumemprof_torch.run", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def main():
    source = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "train.py")
        marker = os.path.join(tmp, "ran")
        with open(script, "w") as f:
            f.write("open(%r, 'w').close()\n" % marker)

        p = launch(source, [], "--out", os.path.join(tmp, "out"), os.path.join(tmp, "missing.py"))
        check(p.returncode == 2 and p.stderr.strip() == "gpumemprof_torch.run: %s: no such script"
              % os.path.join(tmp, "missing.py"), f"missing script: {p.returncode} {p.stderr!r}")

        try:
            import torch  # noqa: F401
            has_torch = True
        except ImportError:
            has_torch = False
        if not has_torch:
            p = launch(source, [], "--out", os.path.join(tmp, "out"), script)
            check(p.returncode == 2, f"without torch: exit {p.returncode}")
            check(p.stderr.count("\n") == 1 and "PyTorch is not installed" in p.stderr,
                  f"without torch: one line naming the problem, got {p.stderr!r}")

        fake = os.path.join(tmp, "fake")
        os.makedirs(os.path.join(fake, "torch"))
        with open(os.path.join(fake, "torch", "__init__.py"), "w") as f:
            f.write(FAKE_TORCH_NO_GPU)
        p = launch(source, [fake], "--history", "--out", os.path.join(tmp, "out"), script, "--epochs", "1")
        check(p.returncode == 2, f"without a GPU: exit {p.returncode}")
        check(p.stderr.count("\n") == 1 and "no CUDA GPU is visible" in p.stderr,
              f"without a GPU: one line naming the problem, got {p.stderr!r}")
        check(not os.path.exists(marker), "the script ran although the launcher refused")
        check(not os.path.exists(os.path.join(tmp, "out")), "the launcher wrote a dump folder without running")

        # The summary reaches a pipe even when the process crashes in its teardown afterwards
        # (stdout into a pipe is block-buffered), and the crash says where it happened.
        fake = os.path.join(tmp, "fake-gpu")
        for package in ("torch", "gpumemprof_torch"):
            os.makedirs(os.path.join(fake, package))
        with open(os.path.join(fake, "torch", "__init__.py"), "w") as f:
            f.write(FAKE_TORCH_GPU)
        with open(os.path.join(fake, "gpumemprof_torch", "__init__.py"), "w") as f:
            f.write(FAKE_BRIDGE)
        with open(os.path.join(source, "python", "gpumemprof_torch", "run.py")) as f:
            launcher = f.read()
        with open(os.path.join(fake, "gpumemprof_torch", "run.py"), "w") as f:
            f.write(launcher)
        crash = os.path.join(tmp, "crash_at_exit.py")
        with open(crash, "w") as f:
            f.write(CRASH_AT_EXIT)
        p = launch(source, [fake], "--out", os.path.join(tmp, "crash-out"), crash)
        check(p.returncode == -11, f"crash at exit: exit {p.returncode}")
        check("1 rank(s) of world size 1 (stand-in summary)" in p.stdout,
              f"crash at exit: the summary was lost, stdout {p.stdout!r}")
        check("Segmentation fault" in p.stderr, f"crash at exit: no report of where, stderr {p.stderr!r}")

        # Tracking of memory outside the allocator starts before install() (before torch or NCCL
        # allocate) with --track-external or GPUMEMPROF_TRACK_EXTERNAL=1 (or =stacks), and not otherwise.
        log = os.path.join(tmp, "bridge.log")
        for args, env, expected in ((["--track-external"], {}, "track_external_memory\ninstall\n"),
                                    ([], {"GPUMEMPROF_TRACK_EXTERNAL": "1"}, "track_external_memory\ninstall\n"),
                                    # with stacks: read again where the allocator is made
                                    ([], {"GPUMEMPROF_TRACK_EXTERNAL": "stacks"}, "track_external_memory\ninstall\n"),
                                    ([], {}, "install\n")):
            if os.path.exists(log):
                os.remove(log)
            p = launch(source, [fake], *args, "--out", os.path.join(tmp, "track-out"), script,
                       env_extra=dict(FAKE_BRIDGE_LOG=log, **env))
            calls = open(log).read() if os.path.exists(log) else ""
            check(p.returncode == 0 and calls == expected,
                  f"tracking {args} {env}: exit {p.returncode}, bridge calls {calls!r}, stderr {p.stderr[-300:]!r}")
        check_end_of_run(source, tmp)
    finish("launcher checks")


def check_end_of_run(source, tmp):
    fake = os.path.join(tmp, "stand-in")
    for package in ("torch", "gpumemprof_torch"):
        os.makedirs(os.path.join(fake, package))
    with open(os.path.join(fake, "torch", "__init__.py"), "w") as f:
        f.write(FAKE_TORCH_GPU)
    package = os.path.join(source, "python", "gpumemprof_torch")
    for name in sorted(n for n in os.listdir(package) if n.endswith(".py")):
        with open(os.path.join(package, name)) as f:
            text = f.read()
        with open(os.path.join(fake, "gpumemprof_torch", name), "w") as f:
            f.write(text + (STAND_IN_LIBRARY if name == "__init__.py" else ""))
    slow = os.path.join(tmp, "slow.py")
    with open(slow, "w") as f:
        f.write("import time\ntime.sleep(0.5)\n")
    quick = os.path.join(tmp, "quick.py")
    with open(quick, "w") as f:
        f.write("pass\n")

    def rank_env(rank, world=2):
        return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0"}

    # Two ranks, no process group: rank 0 finishes first and waits for rank 1's file.
    out = os.path.join(tmp, "two-ranks")
    os.makedirs(out)
    with open(os.path.join(out, ".rank-1.index.json"), "w") as f:
        f.write('{"rank": 1, "stale": true}')  # an earlier run's: rank 0 must wait for this run's
    ranks = [launch(source, [fake], "--out", out, quick if r == 0 else slow,
                    env_extra=dict(rank_env(r), TORCHELASTIC_RUN_ID="run-2"), popen=True) for r in (0, 1)]
    results = [p.communicate(timeout=60) + (p.returncode,) for p in ranks]
    for r, (stdout, stderr, rc) in enumerate(results):
        check(rc == 0, f"two ranks: rank {r} exit {rc}, stderr {stderr!r}")
    index = read_json(os.path.join(out, "ranks.json"))
    want = [{"rank": r, "host": socket.gethostname(), "device": "cuda:0", "peak_allocated_bytes": (r + 1) << 20,
             "peak_reserved_bytes": (r + 3) << 20, "num_ooms": 0, "file": "rank-%d.pickle" % r} for r in (0, 1)]
    check(index == {"world_size": 2, "ranks": want}, f"two ranks: ranks.json {index!r}")
    check(sorted(os.listdir(out)) == ["rank-0.pickle", "rank-1.pickle", "ranks.json"],
          f"two ranks: files left in the folder {sorted(os.listdir(out))}")
    check(results[0][0].startswith("stand-in summary of ranks.json") and '"rank-1.pickle"' in results[0][0],
          f"two ranks: rank 0 printed no summary over both ranks: {results[0][0]!r}")
    check(results[1][0] == "", f"two ranks: rank 1 printed {results[1][0]!r}")

    # Rank 1 never comes: rank 0 waits --wait seconds, says so in one line, and still indexes.
    out = os.path.join(tmp, "rank-missing")
    p = launch(source, [fake], "--out", out, "--wait", "0.5", quick, env_extra=rank_env(0))
    check(p.returncode == 0, f"missing rank: exit {p.returncode} {p.stderr!r}")
    check(p.stderr.strip() == "gpumemprof_torch.run: rank(s) 1 wrote no file into %s within 0 s; the summary "
          "covers the others" % out, f"missing rank: stderr {p.stderr!r}")
    index = read_json(os.path.join(out, "ranks.json"))
    check([e.get("file") for e in index["ranks"]] == ["rank-0.pickle", None] and "error" in index["ranks"][1],
          f"missing rank: ranks.json {index!r}")

    # The script raises: its traceback and exit 1, and its rank file is still written.
    raises = os.path.join(tmp, "raises.py")
    with open(raises, "w") as f:
        f.write(RAISES)
    out = os.path.join(tmp, "raises-out")
    p = launch(source, [fake], "--out", out, raises, env_extra=rank_env(0, 1))
    check(p.returncode == 1 and "ValueError: the script's own error" in p.stderr,
          f"script raises: exit {p.returncode}, stderr {p.stderr!r}")
    check(os.path.exists(os.path.join(out, "rank-0.pickle")) and os.path.exists(os.path.join(out, "ranks.json")),
          f"script raises: no rank file or index in {out}")

    # Ctrl-C during the script (issue 29: this path was untested): the script's KeyboardInterrupt
    # is reported, the exit status is 130 (as a shell reports SIGINT), and the rank file and the
    # index are still written, at once rather than after the script's remaining work.
    waits = os.path.join(tmp, "waits.py")
    with open(waits, "w") as f:
        f.write("import sys, time\nopen(sys.argv[1], 'w').close()\ntime.sleep(60)\n")
    ready = os.path.join(tmp, "waits.ready")
    out = os.path.join(tmp, "ctrl-c-out")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([fake, os.path.join(source, "python")]), **rank_env(0, 1))
    env.pop("GPUMEMPROF_TRACK_EXTERNAL", None)
    started = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "gpumemprof_torch.run", "--out", out, waits, ready],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while not os.path.exists(ready) and p.poll() is None and time.monotonic() - started < 60:
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    check(p.returncode == 130 and "KeyboardInterrupt" in stderr,
          f"Ctrl-C: exit {p.returncode} (expected 130), stderr {stderr[-500:]!r}")
    check(os.path.exists(os.path.join(out, "rank-0.pickle")) and os.path.exists(os.path.join(out, "ranks.json")),
          f"Ctrl-C: the rank file and the index were not written into {out}: {os.listdir(out) if os.path.isdir(out) else 'none'}")
    check(stdout.startswith("stand-in summary"), f"Ctrl-C: no summary printed: {stdout!r}")
    check(time.monotonic() - started < 30, "Ctrl-C: the launcher waited for the script's sleep to end")

    # A crash in the interpreter's teardown does not reach the exit status; open files are flushed.
    crash = os.path.join(tmp, "crash_at_teardown.py")
    with open(crash, "w") as f:
        f.write(CRASH_AT_TEARDOWN)
    for full in (False, True):
        left = os.path.join(tmp, "left-open-%d.txt" % full)
        p = launch(source, [fake], "--out", os.path.join(tmp, "teardown-%d" % full),
                   *(["--full-teardown"] if full else []), crash, left, env_extra=rank_env(0, 1))
        check(p.returncode == (-11 if full else 0), f"teardown crash, full teardown {full}: exit {p.returncode}")
        check(full or (os.path.exists(left) and open(left).read() == "written before exit"),
              "teardown crash: the script's open file was not flushed")
        check(p.stdout.startswith("stand-in summary"), f"teardown crash, full teardown {full}: stdout {p.stdout!r}")


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return repr(e)


if __name__ == "__main__":
    main()
