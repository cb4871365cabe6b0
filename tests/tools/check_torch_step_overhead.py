"""What install() leaves running in Python while a training step runs, without PyTorch (the stand-in
`torch` of check_torch_graphs.py; a GPU host measures the real thing: bench/gpu_stepprobe.sh).

    check_torch_step_overhead.py LIBRARY

A step under the bridge must pay nothing in Python that a step on PyTorch's own allocator does not
(docs/bridge-step-time.md). After install(), checked in a child process:
- no trace or profile function (sys.settrace / sys.setprofile), no new thread, no gc callback, no
  atexit work, no signal handler changed;
- torch.cuda's memory functions are patched only at torch._C's memory bindings, which a step does
  not call;
- the one import hook (torch._inductor.config's, graphs.py) is the only finder added to
  sys.meta_path, returns None for any other name, and once inductor's config was imported it leaves
  sys.meta_path;
- what the hook's answer costs, against an import that misses (the one case a finder is asked
  during a step: a module that is not installed): under 5% of it (each the best of 5 rounds).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_torch_graphs import check, child, failures, fake_torch_root  # noqa: E402

STEP_STATE = """
    import atexit, gc, signal, sys, threading, time
    def state():
        return {"trace": sys.gettrace(), "profile": sys.getprofile(), "threads": threading.active_count(),
                "gc_callbacks": len(gc.callbacks), "atexit": atexit._ncallbacks(),
                "sigint": signal.getsignal(signal.SIGINT), "meta_path": list(sys.meta_path)}
    def missed_import_ns(rounds=2000):
        best = None
        for _ in range(5):
            t = time.perf_counter_ns()
            for _ in range(rounds):
                try:
                    import gpumemprof_no_such_module  # noqa: F401
                except ImportError:
                    pass
            ns = (time.perf_counter_ns() - t) / rounds
            best = ns if best is None else min(best, ns)
        return best
    import torch
    before = state()
    bare_ns = missed_import_ns()
    import gpumemprof_torch as g
    g.install()
    after = state()
    added = [f for f in after["meta_path"] if f not in before["meta_path"]]
    for key in ("trace", "profile", "threads", "gc_callbacks", "atexit", "sigint"):
        print(key, "same" if before[key] == after[key] else "CHANGED %r -> %r" % (before[key], after[key]))
    print("finders added", [type(f).__name__ for f in added])
    print("other names", [f.find_spec(name) for f in added for name in ("json", "torch.nn", "numpy")])
    def hook_ns(rounds=2000):
        best = None
        for _ in range(5):
            t = time.perf_counter_ns()
            for _ in range(rounds):
                for f in added:
                    f.find_spec("gpumemprof_no_such_module")
            ns = (time.perf_counter_ns() - t) / rounds
            best = ns if best is None else min(best, ns)
        return best
    asked_ns = hook_ns()
    print("missed import ns %.0f; the hook's answer ns %.0f" % (bare_ns, asked_ns))
    print("ratio %.4f" % (asked_ns / bare_ns))
    print("patched", sorted(set(g.memory_api.patched()) | set(g.graphs.patched())))
    import torch._inductor.config
    print("after inductor", [type(f).__name__ for f in sys.meta_path if f not in before["meta_path"]])
"""


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    rc, out = child(fake_torch_root(sys.argv[1]), STEP_STATE)
    lines = out.splitlines()
    check(rc == 0, "install() runs against the stand-in torch", out[-800:])
    for key in ("trace", "profile", "threads", "gc_callbacks", "atexit", "sigint"):
        check("%s same" % key in lines, "install() leaves %s as it was" % key, out[-800:])
    check("finders added ['_AfterImport']" in lines, "install() adds one import hook, inductor's", out[-800:])
    check("other names [None, None, None]" in lines, "the hook answers None for every other module", out[-800:])
    ratio = [float(line.split()[1]) for line in lines if line.startswith("ratio ")]
    check(len(ratio) == 1 and ratio[0] < 0.05, "the hook adds under 5% to an import that misses",
          "; ".join(line for line in lines if line.startswith(("missed", "ratio"))))
    patched = [line for line in lines if line.startswith("patched ")]
    check(len(patched) == 1 and all(("_cuda_" in n or "_accelerator_" in n or "MemPool" in n)
                                    for n in eval(patched[0][len("patched "):])),
          "only torch._C's memory bindings and MemPool are replaced (nothing a step calls)", repr(patched))
    check("after inductor []" in lines, "the hook leaves sys.meta_path once inductor's config is imported",
          out[-800:])
    for line in lines:
        if line.startswith("missed import"):
            print("     " + line)
    print("%d failed" % len(failures) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
