"""The launcher python -m gpumemprof_torch.run where it cannot run a script: no PyTorch, no GPU, no
script. Each case is one clear line on stderr and exit 2, and the script never runs. A stand-in
`torch` module (a folder put first on PYTHONPATH) plays PyTorch without a GPU, so the test needs no
torch; with a real torch and a GPU visible, that case is left to bench/gpu_ranks.sh.

    test_torch_launcher.py SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile

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


def launch(source, pythonpath, *args, **extra_env):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath + [os.path.join(source, "python")]), **extra_env)
    if "GPUMEMPROF_TRACK_EXTERNAL" not in extra_env:
        env.pop("GPUMEMPROF_TRACK_EXTERNAL", None)  # the caller's own setting would change the checks
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
        # allocate) with --track-external or GPUMEMPROF_TRACK_EXTERNAL=1, and not otherwise.
        log = os.path.join(tmp, "bridge.log")
        for args, env, expected in ((["--track-external"], {}, "track_external_memory\ninstall\n"),
                                    ([], {"GPUMEMPROF_TRACK_EXTERNAL": "1"}, "track_external_memory\ninstall\n"),
                                    ([], {}, "install\n")):
            if os.path.exists(log):
                os.remove(log)
            p = launch(source, [fake], *args, "--out", os.path.join(tmp, "track-out"), script,
                       FAKE_BRIDGE_LOG=log, **env)
            calls = open(log).read() if os.path.exists(log) else ""
            check(p.returncode == 0 and calls == expected,
                  f"tracking {args} {env}: exit {p.returncode}, bridge calls {calls!r}, stderr {p.stderr[-300:]!r}")
    finish("launcher checks")


if __name__ == "__main__":
    main()
