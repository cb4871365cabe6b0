"""Runs a PyTorch script on gpumemprof's allocator, without changing the script.

    python -m gpumemprof_torch.run [--out DIR] [--history] [--track-external] [--config ALLOC_CONF] SCRIPT [ARGS...]
    torchrun --nproc_per_node N -m gpumemprof_torch.run [--out DIR] ... SCRIPT [ARGS...]

Before the script runs (as __main__, through runpy), the launcher installs gpumemprof's allocator
-- so the script's torch.cuda.set_device(rank) no longer comes too early -- and, with --history,
records allocation history (C++ stacks) on this rank's GPU (LOCAL_RANK). Every rank writes
DIR/rank-<R>.pickle when the script ends (also when it raises), and DIR/rank-<R>.pickle with
DIR/rank-<R>.oom.txt at an out-of-memory error. Rank 0 then prints the cross-rank summary
(`gpumemprof summary DIR` prints it again). --config takes PYTORCH_CUDA_ALLOC_CONF's syntax.
--track-external (or GPUMEMPROF_TRACK_EXTERNAL=1) tracks device memory outside the allocator from
the start -- NCCL's buffers, cuBLAS's workspace, the CUDA context -- and the summary shows it per rank.
"""
import argparse
import faulthandler
import os
import runpy
import sys
import time

_PROG = "gpumemprof_torch.run"


def _fail(message):
    print("%s: %s" % (_PROG, message), file=sys.stderr)
    sys.exit(2)


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m " + _PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="gpumemprof-ranks", help="folder for the rank files (default: %(default)s)")
    p.add_argument("--history", action="store_true", help="record allocation history (stacks) on this rank's GPU")
    p.add_argument("--track-external", action="store_true",
                   help="track device memory outside the allocator (NCCL, cuBLAS, the CUDA context) on every GPU "
                        "from the start; also GPUMEMPROF_TRACK_EXTERNAL=1")
    p.add_argument("--config", metavar="ALLOC_CONF", help='allocator options, e.g. "expandable_segments:True"')
    p.add_argument("--wait", type=float, default=120.0,
                   help="seconds rank 0 waits for the other ranks' files before summarizing (default: %(default)s)")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p.parse_args(argv)


def _wait_for_ranks(out, world, seconds):
    """Rank 0: waits until every rank's file is there (they are renamed into place whole)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(out, "rank-%d.pickle" % r)) for r in range(world)):
            return True
        time.sleep(0.2)
    return False


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
        if opts.track_external or os.environ.get("GPUMEMPROF_TRACK_EXTERNAL") == "1":
            gt.track_external_memory()  # before torch and NCCL allocate; when it cannot, one line says why
        gt.install()
    except (RuntimeError, FileNotFoundError, OSError) as e:
        _fail(str(e))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if opts.history:
        gt.record_memory_history("all", device=local_rank)
    gt.dump_on_oom(opts.out, device=local_rank)

    sys.argv = [opts.script] + opts.args
    status = 0
    failed = False
    try:
        runpy.run_path(opts.script, run_name="__main__")
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        failed = status != 0
    except BaseException:
        failed = True
        raise
    finally:
        _finish(gt, opts, local_rank, collective=not failed)
    return status


def _finish(gt, opts, local_rank, collective):
    """Every rank's file at exit; rank 0's summary. A failure here is reported, never masks the script's."""
    rank, world, _ = gt._rank_and_world()
    try:
        device = local_rank
        import torch
        if torch.cuda.is_initialized():
            device = torch.cuda.current_device()
        gt.dump_snapshots(opts.out, device=device, collective=collective)
    except Exception as e:  # noqa: BLE001 - report and go on: the script's own outcome matters more
        print("%s: rank %d could not write its snapshot into %s: %s" % (_PROG, rank, opts.out, e), file=sys.stderr)
        return
    if rank != 0:
        return
    if not _wait_for_ranks(opts.out, world, opts.wait):
        print("%s: not every rank wrote its file within %.0f s; the summary covers those that did"
              % (_PROG, opts.wait), file=sys.stderr)
    try:
        summary = gt.rank_summary(opts.out)
    except RuntimeError as e:
        print("%s: %s" % (_PROG, e), file=sys.stderr)
        return
    # Out now, whole: stdout into a pipe or file is block-buffered, and a crash later in the
    # process's teardown (after this function, outside gpumemprof) would lose what is unflushed.
    sys.stdout.write(summary)
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
