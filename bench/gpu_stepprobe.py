#!/usr/bin/env python3
"""Why is a step slower through the bridge? One process per (mode, policy, run) on a GPU host
(bench/gpu_stepprobe.sh drives it; docs/bridge-step-time.md lists the candidate causes).

    gpu_stepprobe.py run MODE RUN    one process: BERT-like (variable lengths) and GPT-2-like training
                                     (bench/gpu_steptime.py's models), then a GPU memory probe; a
                                     RESULT line each. Policy from $PYTORCH_ALLOC_CONF. MODE:
        native     PyTorch's own allocator
        bridge     gpumemprof_torch.install(): gpumemprof's allocator, torch.cuda's memory API patched,
                   CUDA graph hooks and the inductor import hook in place
        bare       gpumemprof's library as a plain CUDAPluggableAllocator: no Python feature of the
                   bridge (no hooks, no patches, no import hook); the C-level path only
        launcher   under `python -m gpumemprof_torch.run` (the script runs as the launcher runs scripts)
    gpu_stepprobe.py table LOG       the markdown tables and the verdicts from a log's RESULT lines
    gpu_stepprobe.py dry             checks what it can without a GPU: the plan, the table code on
                                     made-up rows (exit 0 when consistent)

Per model and process: median over the measured steps of
    total_ms    wall time of a step, torch.cuda.synchronize() after it (what gpu_steptime.py reports)
    enqueue_ms  wall time until step() returned, before the synchronize: the host's share. A step
                whose enqueue is ~ its total is CPU-bound (the GPU waits for launches)
    cpu_ms      process CPU time during the step (all threads: autograd's backward thread too)
    gpu_ms      CUDA-event time from the step's first to its last launch on the stream
and, from torch.profiler over 3 more steps: gpu_busy_ms (kernel and memcpy time per step),
alloc_op_us (host time per step inside the ops that allocate outputs alone: aten::empty,
empty_strided, empty_like, resize_), runtime calls per step by name (cudaGetDeviceCount,
cudaStreamIsCapturing, cudaMalloc, cuMemMap, ...: what the allocator adds per step), and
memory_stats counters per step (device mallocs/frees, syncs, allocations).
The GPU memory probe: a 1 GiB copy and a random gather over 2 GiB (64 Mi indices), best of 5 by
CUDA events, on memory from the allocator under test: page placement (expandable segments map
2 MiB physical pages where PyTorch maps 20 MiB in the large pool) shows here if anywhere. Native
processes also run it on 2040 MiB mapped through the driver API (ctypes, libcuda) as 2 MiB and as
20 MiB physical allocations, outside any allocator: the same question without the allocators.
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONF = os.environ.get("PYTORCH_ALLOC_CONF", "") or "default"
MODES = ("native", "bridge", "bare", "launcher")
MODELS = ("bert", "gpt2")
ALLOC_OPS = ("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::resize_")
COUNTERS = {"device_mallocs": "num_device_alloc", "device_frees": "num_device_free",
            "sync_all_streams": "num_sync_all_streams", "allocations": "allocation.all.allocated"}
STEPS = 12
PROFILED_STEPS = 3


def steptime():
    """bench/gpu_steptime.py as a module: its models, each_model, result_rows, counts."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import gpu_steptime
    return gpu_steptime


def result(**kv):
    print("RESULT " + json.dumps(kv, sort_keys=True), flush=True)


def setup(mode):
    """Puts the allocator of `mode` in place; returns memory_stats(), flat, for this mode."""
    import torch
    if mode == "native":
        return torch.cuda.memory_stats
    import gpumemprof_torch as gt
    if mode == "bridge":
        gt.install()
    elif mode == "bare":
        gt._load().gpumemprof_raise_on_error(1)
        allocator = torch.cuda.memory.CUDAPluggableAllocator(gt.library_path(), "gpumemprof_malloc",
                                                             "gpumemprof_free")
        torch.cuda.memory.change_current_allocator(allocator)
    elif mode == "launcher":
        if not gt.installed():
            raise RuntimeError("mode launcher: run this file under python -m gpumemprof_torch.run")
    return gt.memory_stats


def per_step_counters(before, after, steps):
    return {name: round((after.get(key, 0) - before.get(key, 0)) / steps, 2) for name, key in COUNTERS.items()}


def timed(torch, step, steps):
    """Per step: total, enqueue, cpu, gpu (ms)."""
    rows = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0, c0 = time.perf_counter(), time.process_time()
        start.record()
        step()
        end.record()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2, c2 = time.perf_counter(), time.process_time()
        rows.append(((t2 - t0) * 1e3, (t1 - t0) * 1e3, (c2 - c0) * 1e3, start.elapsed_time(end)))
    return [statistics.median(col) for col in zip(*rows)]


def profiled(torch, step, steps):
    """torch.profiler over `steps` steps: GPU busy ms, host us in the allocating ops, runtime calls, per step."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    busy_us, alloc_us, calls = 0.0, 0.0, {}
    for e in prof.events():
        device_type = str(getattr(e, "device_type", ""))
        if device_type.endswith("CUDA"):
            busy_us += e.device_time if hasattr(e, "device_time") else e.cuda_time
        elif e.name in ALLOC_OPS:
            alloc_us += e.self_cpu_time_total
        if e.name.startswith(("cuda", "cu")) and not device_type.endswith("CUDA"):
            calls[e.name] = calls.get(e.name, 0) + 1
    per = float(steps)
    return (round(busy_us / 1e3 / per, 3), round(alloc_us / per, 1),
            {k: round(v / per, 1) for k, v in sorted(calls.items())})


def best_ms(torch, fn):
    """fn()'s best time of 5 (after one unmeasured run) by CUDA events, in ms."""
    times = []
    for _ in range(6):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return round(min(times[1:]), 3)


def gather_and_copy(torch, table):
    """(copy ms of the table's first half into its second, gather ms of 64 Mi random floats of it)."""
    half = table.numel() // 2
    copy_ms = best_ms(torch, lambda: table[half:2 * half].copy_(table[:half]))
    idx = torch.randint(0, table.numel(), (1 << 26,), device="cuda")
    gather_ms = best_ms(torch, lambda: table[idx])
    return copy_ms, gather_ms


def memory_probe(torch):
    """gather_and_copy on 2 GiB from the allocator under test."""
    table = torch.empty(1 << 29, device="cuda")
    try:
        return gather_and_copy(torch, table)
    finally:
        del table


def chunk_probe(torch, chunk_mib):
    """gather_and_copy on 2040 MiB that the driver API maps as physical allocations of `chunk_mib` MiB
    each (2: as gpumemprof's expandable segments; 20: as PyTorch's large pool), outside any
    allocator: whether the GPU runs the same kernels slower on smaller physical allocations."""
    import ctypes
    c = ctypes
    cu = c.CDLL("libcuda.so.1")

    class Location(c.Structure):
        _fields_ = [("type", c.c_int), ("id", c.c_int)]

    class Flags(c.Structure):
        _fields_ = [("compressionType", c.c_ubyte), ("gpuDirectRDMACapable", c.c_ubyte), ("usage", c.c_ushort),
                    ("reserved", c.c_ubyte * 4)]

    class Prop(c.Structure):  # CUmemAllocationProp
        _fields_ = [("type", c.c_int), ("requestedHandleTypes", c.c_int), ("location", Location),
                    ("win32HandleMetaData", c.c_void_p), ("allocFlags", Flags)]

    class Access(c.Structure):  # CUmemAccessDesc
        _fields_ = [("location", Location), ("flags", c.c_int)]

    u64, size_t = c.c_uint64, c.c_size_t
    for name, args in (("cuMemAddressReserve", [c.POINTER(u64), size_t, size_t, u64, c.c_ulonglong]),
                       ("cuMemCreate", [c.POINTER(u64), size_t, c.POINTER(Prop), c.c_ulonglong]),
                       ("cuMemMap", [u64, size_t, size_t, u64, c.c_ulonglong]),
                       ("cuMemSetAccess", [u64, size_t, c.POINTER(Access), size_t]),
                       ("cuMemUnmap", [u64, size_t]), ("cuMemRelease", [u64]), ("cuMemAddressFree", [u64, size_t])):
        getattr(cu, name).argtypes = args

    def check(result, what):
        if result != 0:
            raise RuntimeError("%s failed: CUresult %d" % (what, result))

    device = torch.cuda.current_device()
    prop = Prop(type=1, requestedHandleTypes=0, location=Location(1, device))  # pinned, on this device
    access = Access(location=Location(1, device), flags=3)  # read and write
    chunk, size = chunk_mib << 20, 2040 << 20
    base, handles = u64(0), []
    check(cu.cuMemAddressReserve(c.byref(base), size, 0, 0, 0), "cuMemAddressReserve")
    try:
        for offset in range(0, size, chunk):
            h = u64(0)
            check(cu.cuMemCreate(c.byref(h), chunk, c.byref(prop), 0), "cuMemCreate")
            handles.append(h.value)
            check(cu.cuMemMap(base.value + offset, chunk, 0, h.value, 0), "cuMemMap")
        check(cu.cuMemSetAccess(base.value, size, c.byref(access), 1), "cuMemSetAccess")

        class Mapped:
            __cuda_array_interface__ = {"shape": (size // 4,), "typestr": "<f4", "data": (base.value, False),
                                        "version": 3}

        table = torch.as_tensor(Mapped(), device="cuda")
        table.fill_(1.0)
        try:
            return gather_and_copy(torch, table)
        finally:
            del table
            torch.cuda.synchronize()
    finally:
        for i, h in enumerate(handles):
            cu.cuMemUnmap(base.value + i * chunk, chunk)
            cu.cuMemRelease(h)
        cu.cuMemAddressFree(base.value, size)


def run(mode, run_id):
    import torch
    import torch.nn as nn
    memory_stats = setup(mode)
    st = steptime()

    def measure(name):
        t0 = time.perf_counter()
        step, warmup, _ = getattr(st, name)(torch, nn)
        for _ in range(warmup):
            step()
        torch.cuda.synchronize()
        before = memory_stats()
        total, enqueue, cpu, gpu = timed(torch, step, STEPS)
        after = memory_stats()
        busy, alloc_us, calls = profiled(torch, step, PROFILED_STEPS)
        result(model=name, mode=mode, conf=CONF, run=run_id, total_ms=round(total, 3), enqueue_ms=round(enqueue, 3),
               cpu_ms=round(cpu, 3), gpu_ms=round(gpu, 3), gpu_busy_ms=busy, alloc_op_us=alloc_us, calls=calls,
               per_step=per_step_counters(before, after, STEPS), seconds=round(time.perf_counter() - t0, 1))
        print("gpu_stepprobe: ok %s %s %s run %s: total %.2f ms, enqueue %.2f, cpu %.2f, gpu %.2f, busy %.2f" % (
            name, mode, CONF, run_id, total, enqueue, cpu, gpu, busy), flush=True)

    def probe_memory(_name):
        copy_ms, gather_ms = memory_probe(torch)
        result(model="memory", mode=mode, conf=CONF, run=run_id, copy_ms=copy_ms, gather_ms=gather_ms)
        print("gpu_stepprobe: ok memory %s %s run %s: copy 1 GiB %.3f ms, gather %.3f ms" % (
            mode, CONF, run_id, copy_ms, gather_ms), flush=True)

    def probe_chunks(_name):
        (copy2, gather2), (copy20, gather20) = chunk_probe(torch, 2), chunk_probe(torch, 20)
        result(model="chunks", mode=mode, conf=CONF, run=run_id, copy_ms_2mib=copy2, gather_ms_2mib=gather2,
               copy_ms_20mib=copy20, gather_ms_20mib=gather20)
        print("gpu_stepprobe: ok chunks run %s: gather %.3f ms on 2 MiB physical allocations, %.3f on 20 MiB; "
              "copy %.3f / %.3f" % (run_id, gather2, gather20, copy2, copy20), flush=True)

    label = "%s %s run %s" % (mode, CONF, run_id)
    st.each_model(torch, MODELS, measure, "gpu_stepprobe", label)
    st.each_model(torch, ["memory"], probe_memory, "gpu_stepprobe", label)
    if mode == "native":  # the driver's own answer, the same under any allocator: once per native process
        st.each_model(torch, ["chunks"], probe_chunks, "gpu_stepprobe", label)


def med(rows, key):
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else float("nan")


def verdicts(rows):
    """Lines saying, per model and policy, which candidate cause the figures support."""
    out = []
    for model in MODELS:
        for conf in sorted({r["conf"] for r in rows}):
            cell = {m: [r for r in rows if r["model"] == model and r["conf"] == conf and r["mode"] == m] for m in MODES}
            if not cell["native"] or not cell["bridge"]:
                continue
            n, b = cell["native"], cell["bridge"]
            d_total = med(b, "total_ms") - med(n, "total_ms")
            d_cpu = med(b, "cpu_ms") - med(n, "cpu_ms")
            d_busy = med(b, "gpu_busy_ms") - med(n, "gpu_busy_ms")
            d_alloc = (med(b, "alloc_op_us") - med(n, "alloc_op_us")) / 1e3
            bound = "CPU-bound" if med(n, "enqueue_ms") > 0.9 * med(n, "total_ms") else "GPU-bound"
            line = ("%s %s: bridge - native = %+.2f ms per step (native %s: enqueue %.2f of %.2f ms); CPU time %+.2f ms, "
                    "GPU busy %+.2f ms, host time in allocating ops %+.2f ms" % (
                        model, conf, d_total, bound, med(n, "enqueue_ms"), med(n, "total_ms"), d_cpu, d_busy, d_alloc))
            spread = max(r["total_ms"] for r in n) - min(r["total_ms"] for r in n)
            if abs(d_total) <= spread:
                line += "; within native's own spread (%.2f ms): noise" % spread
            elif d_busy > 0.5 * d_total:
                line += "; the GPU works longer: memory placement (see the memory probe)"
            elif d_cpu > 0.5 * d_total:
                line += "; the host works longer" + ("; inside the allocating ops" if d_alloc > 0.5 * d_cpu else
                                                     "; outside the allocating ops")
            for mode in ("bare", "launcher"):
                if cell[mode]:
                    line += "; %s - bridge %+.2f ms" % (mode, med(cell[mode], "total_ms") - med(b, "total_ms"))
            calls_n, calls_b = {}, {}
            for rs, calls in ((n, calls_n), (b, calls_b)):
                for r in rs:
                    for k, v in r.get("calls", {}).items():
                        calls[k] = calls.get(k, 0) + v / len(rs)
            extra = {k: round(calls_b.get(k, 0) - calls_n.get(k, 0), 1) for k in set(calls_n) | set(calls_b)}
            extra = {k: v for k, v in extra.items() if abs(v) >= 1}
            if extra:
                line += "; runtime calls per step, bridge - native: %s" % json.dumps(extra, sort_keys=True)
            out.append(line)
    mem = [r for r in rows if r["model"] == "memory"]
    for conf in sorted({r["conf"] for r in mem}):
        by = {m: [r for r in mem if r["conf"] == conf and r["mode"] == m] for m in MODES}
        if by["native"] and by["bridge"]:
            out.append("memory %s: gather %.3f ms native, %.3f bridge (%+.1f%%); copy %.3f / %.3f ms" % (
                conf, med(by["native"], "gather_ms"), med(by["bridge"], "gather_ms"),
                (med(by["bridge"], "gather_ms") / med(by["native"], "gather_ms") - 1) * 100,
                med(by["native"], "copy_ms"), med(by["bridge"], "copy_ms")))
    chunks = [r for r in rows if r["model"] == "chunks"]
    if chunks:
        g2, g20 = med(chunks, "gather_ms_2mib"), med(chunks, "gather_ms_20mib")
        out.append("physical allocations (driver API, no allocator; %d runs): gather %.3f ms on 2 MiB ones, %.3f on "
                   "20 MiB (%+.1f%%); copy %.3f / %.3f ms%s" % (
                       len(chunks), g2, g20, (g2 / g20 - 1) * 100, med(chunks, "copy_ms_2mib"),
                       med(chunks, "copy_ms_20mib"),
                       "; smaller physical allocations are slower: map the large pool in 20 MiB ones, as PyTorch"
                       if g2 > 1.05 * g20 else "; no difference beyond 5%: placement is not the cause"))
    return out


def table(log):
    rows = steptime().result_rows(log)
    print("| model | policy | mode | runs | total ms | enqueue ms | CPU ms | GPU ms | GPU busy ms | alloc ops us "
          "| device mallocs, frees, syncs per step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model in MODELS:
        for conf in sorted({r["conf"] for r in rows}):
            for mode in MODES:
                rs = [r for r in rows if r["model"] == model and r["conf"] == conf and r["mode"] == mode]
                if not rs:
                    continue
                print("| %s | %s | %s | %d | %s | %.2f | %.2f | %.2f | %.2f | %.0f | %s |" % (
                    model, conf, mode, len(rs), " / ".join("%.2f" % r["total_ms"] for r in rs), med(rs, "enqueue_ms"),
                    med(rs, "cpu_ms"), med(rs, "gpu_ms"), med(rs, "gpu_busy_ms"), med(rs, "alloc_op_us"),
                    steptime().counts(rs)))
    print()
    for line in verdicts(rows):
        print("- " + line)
    return rows


def dry():
    """No GPU: the table and verdict code on made-up rows; the models' module imports."""
    st = steptime()
    missing = [m for m in MODELS if not callable(getattr(st, m, None))]
    import tempfile
    rows = []
    for run_id in (1, 2):
        for conf in ("default", "expandable_segments:True"):
            for mode in MODES:
                slow = 1.0 if mode == "native" else 1.2
                for model in MODELS:
                    rows.append(dict(model=model, mode=mode, conf=conf, run=run_id, total_ms=20.0 * slow + run_id * 0.1,
                                     enqueue_ms=19.5 * slow, cpu_ms=21.0 * slow, gpu_ms=19.0 * slow, gpu_busy_ms=6.0,
                                     alloc_op_us=900.0 if mode == "native" else 4400.0, calls={"cudaLaunchKernel": 600,
                                                                      "cudaGetDeviceCount": 0 if mode == "native" else 1300},
                                     per_step={"device_mallocs": 0, "device_frees": 0, "sync_all_streams": 0}))
                rows.append(dict(model="memory", mode=mode, conf=conf, run=run_id, copy_ms=0.5, gather_ms=1.0 * slow))
            rows.append(dict(model="chunks", mode="native", conf=conf, run=run_id, copy_ms_2mib=0.5, copy_ms_20mib=0.5,
                             gather_ms_2mib=1.2, gather_ms_20mib=1.0))
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        for r in rows:
            f.write("RESULT " + json.dumps(r) + "\n")
    back = table(f.name)
    os.remove(f.name)
    lines = verdicts(back)
    ok = (not missing and len(back) == len(rows) and len(lines) == 7 and "(+20.0%)" in lines[6] and "smaller physical allocations are slower" in lines[6]
          and all("the host works longer; inside the allocating ops" in line for line in lines[:4])
          and all('"cudaGetDeviceCount": 1300' in line for line in lines[:4]) and "+20.0%" in lines[4])
    print("gpu_stepprobe: dry run %s%s" % ("ok" if ok else "FAILED", "; missing models %s" % missing if missing else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "run" and sys.argv[2] in MODES:
        run(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "dry":
        sys.exit(dry())
    else:
        print(__doc__)
        sys.exit(2)
