"""Runs a PyTorch script on gpumemprof's allocator, without changing the script.

    python -m gpumemprof_torch.run [--out DIR] [--history [--stacks python|all|cpp]] [--track-external] [--config ALLOC_CONF] SCRIPT [ARGS...]
    torchrun --nproc_per_node N -m gpumemprof_torch.run [--out DIR] ... SCRIPT [ARGS...]

Before the script runs (as __main__, through runpy), the launcher installs gpumemprof's allocator
-- so the script's torch.cuda.set_device(rank) no longer comes too early -- and, with --history,
records allocation history on every GPU the script uses, each allocation with its Python frames
(--stacks all: C++ frames too; cpp: C++ frames only), so the summary's top sites name the script's
own lines; memory that backward allocates on autograd's threads is named by the script's backward()
line (the main thread's frames; --exact-stacks: none, as PyTorch records it). While installed, torch.cuda's memory functions (memory_stats, max_memory_reserved,
memory._dump_snapshot, ...) answer from gpumemprof (docs/pytorch-memory-api.md). Every rank writes
DIR/rank-<R>.pickle when the script ends (also when it raises), and DIR/rank-<R>.pickle with
DIR/rank-<R>.oom.txt at an out-of-memory error, with no collective (the script may have destroyed
its process group, or another rank may have failed). Rank 0 then writes DIR/ranks.json from the
ranks' files and prints the cross-rank summary (`gpumemprof summary DIR` prints it again).
--config takes PYTORCH_CUDA_ALLOC_CONF's syntax. --track-external (or GPUMEMPROF_TRACK_EXTERNAL=1)
tracks device memory outside the allocator from the start -- NCCL's buffers, cuBLAS's workspace, the
CUDA context -- and the summary shows it per rank; GPUMEMPROF_TRACK_EXTERNAL=stacks also records the C++
stack of each of those allocations.

Then the process ends as Python would -- non-daemon threads joined, atexit handlers run, open files
flushed -- but without tearing down the interpreter and the libraries' static objects: torch, CUDA
and NCCL can crash there (rank 0 of a DDP run on two H100s ended with SIGSEGV after its summary),
which would make a finished run fail. PyTorch leaks its own allocator at exit for the same reason.
--full-teardown keeps the normal teardown.
"""
import argparse
import atexit
import faulthandler
import gc
import io
import os
import runpy
import sys
import threading
import traceback

_PROG = "gpumemprof_torch.run"


def _fail(message):
    print("%s: %s" % (_PROG, message), file=sys.stderr)
    sys.exit(2)


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m " + _PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="gpumemprof-ranks", help="folder for the rank files (default: %(default)s)")
    p.add_argument("--history", action="store_true",
                   help="record allocation history with each allocation's stack (every GPU the script uses)")
    p.add_argument("--stacks", choices=("python", "all", "cpp"), default="python",
                   help="with --history: the Python frames (file, line, function: PyTorch's stacks=\"python\"), "
                        "C++ frames then Python frames (\"all\"), or C++ frames only (default: %(default)s)")
    p.add_argument("--exact-stacks", action="store_true",
                   help="with --history: allocations on threads that run no Python code (autograd's, during "
                        "backward) carry no Python frames, as with PyTorch's stacks=\"python\"; by default they "
                        "carry the frames of the thread waiting in backward(), so the script's backward() line "
                        "names them")
    p.add_argument("--track-external", action="store_true",
                   help="track device memory outside the allocator (NCCL, cuBLAS, the CUDA context) on every GPU "
                        "from the start; also GPUMEMPROF_TRACK_EXTERNAL=1 (=stacks: with each allocation's C++ "
                        "stack)")
    p.add_argument("--config", metavar="ALLOC_CONF", help='allocator options, e.g. "expandable_segments:True"')
    p.add_argument("--wait", type=float, default=120.0,
                   help="seconds rank 0 waits for the other ranks' files before summarizing (default: %(default)s)")
    p.add_argument("--full-teardown", action="store_true",
                   help="tear the interpreter and the libraries down at exit as Python normally does")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p.parse_args(argv)


def main(argv=None):
    opts = _parse(sys.argv[1:] if argv is None else argv)
    # A crash in the script's own teardown (CUDA, NCCL, PyTorch's static objects at exit) then
    # names where it happened on stderr instead of a bare exit -11.
    faulthandler.enable(all_threads=True)
    if not os.path.isfile(opts.script):
        _fail("%s: no such script" % opts.script)
    try:
        import torch
    except ImportError as e:
        _fail("PyTorch is not installed in this Python (%s); the launcher runs PyTorch scripts on gpumemprof's "
              "allocator. Install torch with CUDA, or use this Python's torch." % e)
    if not torch.cuda.is_available():
        _fail("no CUDA GPU is visible (torch.cuda.is_available() is False), so there is no CUDA allocator to "
              "replace; run on a machine with a GPU (or check CUDA_VISIBLE_DEVICES and the driver).")
    if opts.config:
        os.environ["GPUMEMPROF_ALLOC_CONF"] = opts.config  # read when the allocator is created
    import gpumemprof_torch as gt
    try:
        if opts.track_external or os.environ.get("GPUMEMPROF_TRACK_EXTERNAL") in ("1", "stacks"):
            gt.track_external_memory()  # before torch and NCCL allocate; when it cannot, one line says why
        gt.install()
    except (RuntimeError, FileNotFoundError, OSError) as e:
        _fail(str(e))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    gt._forget_rank_entry(opts.out, gt._rank_and_world()[0])
    if opts.history:
        gt.record_memory_history("all", stacks=opts.stacks, backward_frames=not opts.exact_stacks)
    gt.dump_on_oom(opts.out, device=local_rank)

    sys.argv = [opts.script] + opts.args
    status = 0
    try:
        runpy.run_path(opts.script, run_name="__main__")
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt:
        traceback.print_exc()
        status = 130
    except BaseException:  # noqa: BLE001 - reported as Python would, then the files are still written
        traceback.print_exc()
        status = 1
    _finish(gt, opts, local_rank)
    if opts.full_teardown:
        return status
    _exit_without_teardown(status)


def _finish(gt, opts, local_rank):
    """Every rank's file at exit; rank 0's index and summary. A failure here is reported, never
    masks the script's. No collective: ranks.json comes from the files."""
    rank, world, _ = gt._rank_and_world()
    try:
        device = local_rank
        import torch
        if torch.cuda.is_initialized():
            device = torch.cuda.current_device()
        gt.dump_snapshots(opts.out, device=device, collective=False)
    except Exception as e:  # noqa: BLE001 - report and go on: the script's own outcome matters more
        print("%s: rank %d could not write its snapshot into %s: %s" % (_PROG, rank, opts.out, e), file=sys.stderr)
    if rank != 0:
        return
    if world > 1:
        missing = gt.collect_rank_index(opts.out, world, opts.wait)
        if missing:
            print("%s: rank(s) %s wrote no file into %s within %.0f s; the summary covers the others"
                  % (_PROG, ", ".join(map(str, missing)), opts.out, opts.wait), file=sys.stderr)
    try:
        summary = gt.rank_summary(opts.out)
    except RuntimeError as e:
        print("%s: %s" % (_PROG, e), file=sys.stderr)
        return
    # Out now, whole: stdout into a pipe or file is block-buffered, and a crash later in the
    # process's teardown (after this function, outside gpumemprof) would lose what is unflushed.
    sys.stdout.write(summary)
    sys.stdout.flush()


def _exit_without_teardown(status):
    """Ends the process as Python's exit does up to the interpreter's teardown, then leaves."""
    main_thread = threading.main_thread()
    for t in threading.enumerate():
        if t is not main_thread and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for obj in gc.get_objects():  # what finalization would flush: files the script left open
        if isinstance(obj, io.IOBase):
            try:
                if not obj.closed:
                    obj.flush()
            except (OSError, ValueError):
                pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status if isinstance(status, int) and 0 <= status <= 255 else 1)


if __name__ == "__main__":
    sys.exit(main())
