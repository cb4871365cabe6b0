#!/usr/bin/env python3
"""Where does a CUDA tensor's allocate + free cost more through the bridge? (bench/gpu_pairprobe.sh)

    gpu_pairprobe.py run MODE LIB    one fresh process; RESULT lines. LIB: the built pairprobe_alloc.so
        native    PyTorch's own allocator
        trivial   PyTorch's CUDAPluggableAllocator around pairprobe_alloc.c's minimal allocator (a
                  stack per size): the cost of PyTorch's pluggable path itself
        bare      the same wrapper around gpumemprof's library, nothing else of the bridge
        bridge    gpumemprof_torch.install() (hooks, patched memory API)
    gpu_pairprobe.py table LOG       the table of a log's RESULT lines (medians over rounds)

Per process, best of 5 rounds: torch.empty + del of six sizes (512 B .. 12 MiB) one by one and 64 at a
time; torch.cuda.caching_allocator_alloc + caching_allocator_delete (the allocator's raw entry, no
tensor); and, where the allocator has C entry points, the entry points called from a C loop
(pairprobe_time: no Python between calls) on the default stream and on a stream of its own."""
import ctypes
import json
import statistics
import sys
import time

SIZES = [512, 4096, 65536, 1 << 20, 3 << 20, 12 << 20]
MODES = ("native", "trivial", "bare", "bridge")


def result(**kv):
    print("RESULT " + json.dumps(kv, sort_keys=True), flush=True)


def best_ns(fn, per_round, rounds=5):
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, (time.perf_counter() - t) / per_round * 1e9)
    return best


def tensor_pairs(torch):
    """ns per torch.empty + del of SIZES in turn, one by one and 64 live at a time, best of 5
    rounds of 400: [(label, ns)]. bench/gpu_bridge.py's `pairs` reports the same."""
    keep = [torch.empty(s, dtype=torch.uint8, device="cuda") for s in SIZES]  # segments exist
    del keep
    out = []
    for label, batch in (("one_by_one", 1), ("batch_of_64", 64)):
        def tensors(batch=batch):
            n = 0
            for _ in range(400):
                live = [torch.empty(SIZES[(n + k) % 6], dtype=torch.uint8, device="cuda") for k in range(batch)]
                n += batch
                del live
        out.append((label, best_ns(tensors, 400 * batch)))
    return out


def run(mode, probe_lib):
    import torch
    probe = ctypes.CDLL(probe_lib)
    entry = None  # (malloc, free) C functions of the allocator under test
    if mode == "trivial":
        allocator = torch.cuda.memory.CUDAPluggableAllocator(probe_lib, "pairprobe_malloc", "pairprobe_free")
        torch.cuda.memory.change_current_allocator(allocator)
        entry = (probe.pairprobe_malloc, probe.pairprobe_free)
    elif mode in ("bare", "bridge"):
        import gpumemprof_torch as gt
        lib = gt._load()
        if mode == "bridge":
            gt.install()
        else:
            lib.gpumemprof_raise_on_error(1)
            allocator = torch.cuda.memory.CUDAPluggableAllocator(gt.library_path(), "gpumemprof_malloc",
                                                                 "gpumemprof_free")
            torch.cuda.memory.change_current_allocator(allocator)
        entry = (lib.gpumemprof_malloc, lib.gpumemprof_free)
    for label, ns in tensor_pairs(torch):
        result(mode=mode, bench="tensor " + label, ns=round(ns, 1))

    def raw():
        for i in range(3000):
            torch.cuda.caching_allocator_delete(torch.cuda.caching_allocator_alloc(SIZES[i % 6]))
    result(mode=mode, bench="caching_allocator_alloc+delete", ns=round(best_ns(raw, 3000), 1))

    if entry is not None:
        fn = ctypes.c_void_p
        probe.pairprobe_time.restype = ctypes.c_double
        probe.pairprobe_time.argtypes = [fn, fn, fn, ctypes.c_int]
        m, f = (ctypes.cast(e, fn) for e in entry)
        side = torch.cuda.Stream()
        for label, stream in (("default stream", None), ("own stream", side.cuda_stream)):
            ns = min(probe.pairprobe_time(m, f, stream, 200000) for _ in range(5))
            result(mode=mode, bench="C loop, " + label, ns=round(ns, 1))
        torch.cuda.synchronize()


def table(log):
    cells = {}
    try:
        fh = open(log, errors="replace")  # a binary or cut-off log: its lines are skipped below
    except OSError as e:
        sys.exit("gpu_pairprobe.py: cannot read the log %s: %s" % (log, e.strerror))
    with fh:
        for number, line in enumerate(fh, 1):
            if not line.startswith("RESULT "):
                continue
            try:
                r = json.loads(line[7:])
                bench, mode, ns = r["bench"], r["mode"], float(r["ns"])
            except (ValueError, KeyError, TypeError):
                print("gpu_pairprobe.py: %s:%d: not a RESULT line of this script (a run cut off?); skipped"
                      % (log, number), file=sys.stderr)
                continue
            cells.setdefault(bench, {}).setdefault(mode, []).append(ns)
    if not cells:
        sys.exit("gpu_pairprobe.py: the log %s holds no RESULT line of this script (run it with `run` first)" % log)
    print("| ns per allocate + free | " + " | ".join(MODES) + " |")
    print("|---|" + "---:|" * len(MODES))
    for bench, by_mode in cells.items():
        row = ["%.0f (%d)" % (statistics.median(by_mode[m]), len(by_mode[m])) if m in by_mode else "-" for m in MODES]
        print("| %s | %s |" % (bench, " | ".join(row)))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "run" and sys.argv[2] in MODES:
        run(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    else:
        sys.exit("usage: gpu_pairprobe.py run {%s} PAIRPROBE_LIB | table LOG" % ",".join(MODES))
