"""torch.cuda's memory API under the bridge (python/gpumemprof_torch/memory_api.py), without torch.

A stand-in `torch` plays PyTorch 2.11's side of the contract: torch.cuda.memory's Python wrappers
normalise their arguments and call torch._C's bindings at call time (here written to that contract,
with PyTorch's own bindings raising as the pluggable allocator does). The real gpumemprof_torch
package runs with only its library calls stood in for. Checked: every function of the list in
docs/pytorch-memory-api.md answers from gpumemprof through torch.cuda.X, torch.cuda.memory.X and a
name imported before install; device as int, str, torch.device and None; reset and empty_cache
reach the right devices; history's string and bool forms and PyTorch's refusals; a script's own
_dump_snapshot writes gpumemprof's snapshot at its path; restore() gives PyTorch's bindings back.
The real thing runs on a GPU host (bench/gpu_bridge.py).

    test_torch_memory_api.py SOURCE_DIR
"""
import ctypes
import os
import pickle
import sys
import tempfile
import types
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import check, finish  # noqa: E402

CURRENT_DEVICE = 1


class PluggableError(RuntimeError):
    pass


def make_fake_torch():
    torch = types.ModuleType("torch")
    C = types.ModuleType("torch._C")

    def unsupported(name):
        def f(*args, **kwargs):
            raise PluggableError("CUDAPluggableAllocator does not yet support " + name)
        f.__name__ = name
        return f

    for name in ("_cuda_memoryStats", "_cuda_resetPeakMemoryStats", "_cuda_resetAccumulatedMemoryStats",
                 "_cuda_emptyCache", "_cuda_setMemoryFraction", "_cuda_getMemoryFraction", "_cuda_memorySnapshot",
                 "_cuda_record_memory_history", "_cuda_record_memory_history_legacy", "_accelerator_getDeviceStats",
                 "_accelerator_resetPeakStats", "_accelerator_resetAccumulatedStats", "_accelerator_emptyCache",
                 "_accelerator_isAllocatorInitialized", "_accelerator_allocatorInitialized"):
        setattr(C, name, unsupported(name))
    torch._C = C

    class device:  # noqa: N801 - torch.device's shape
        def __init__(self, spec, index=None):
            if isinstance(spec, device):
                spec, index = spec.type, spec.index
            elif ":" in str(spec):
                spec, index = str(spec).split(":")[0], int(str(spec).split(":")[1])
            self.type, self.index = spec, index

    torch.device = device
    cuda = types.ModuleType("torch.cuda")
    memory = types.ModuleType("torch.cuda.memory")
    cuda.memory = memory
    torch.cuda = cuda
    cuda.current_device = lambda: CURRENT_DEVICE
    cuda.is_initialized = lambda: True
    cuda.is_available = lambda: True

    # torch/cuda/memory.py's wrappers, to the contract of PyTorch 2.11 (arguments normalised here,
    # bindings looked up on torch._C at call time).
    def _get_device_index(d, optional=False):
        if d is None:
            return CURRENT_DEVICE
        if isinstance(d, int):
            return d
        d = device(d)
        return d.index if d.index is not None else CURRENT_DEVICE

    def memory_stats_as_nested_dict(device=None):
        if not cuda.is_initialized():
            return {}
        return torch._C._cuda_memoryStats(_get_device_index(device, optional=True))

    def memory_stats(device=None):
        out = []

        def walk(prefix, obj):
            if isinstance(obj, dict):
                for k, v in obj.items():
                    walk(prefix + "." + k if prefix else k, v)
            else:
                out.append((prefix, obj))
        walk("", memory_stats_as_nested_dict(device=device))
        return dict(sorted(out))

    m = memory
    m.memory_stats_as_nested_dict = memory_stats_as_nested_dict
    m.memory_stats = memory_stats
    m.memory_allocated = lambda device=None: m.memory_stats(device=device).get("allocated_bytes.all.current", 0)
    m.max_memory_allocated = lambda device=None: m.memory_stats(device=device).get("allocated_bytes.all.peak", 0)
    m.memory_reserved = lambda device=None: m.memory_stats(device=device).get("reserved_bytes.all.current", 0)
    m.max_memory_reserved = lambda device=None: m.memory_stats(device=device).get("reserved_bytes.all.peak", 0)
    m.reset_peak_memory_stats = lambda device=None: torch._C._cuda_resetPeakMemoryStats(
        _get_device_index(device, optional=True))
    m.reset_accumulated_memory_stats = lambda device=None: torch._C._cuda_resetAccumulatedMemoryStats(
        _get_device_index(device, optional=True))

    def empty_cache():
        if cuda.is_initialized():
            torch._C._cuda_emptyCache()

    def set_per_process_memory_fraction(fraction, device=None):
        index = _get_device_index(device)
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if fraction < 0 or fraction > 1:
            raise ValueError("Invalid fraction value: %s. Allowed range: 0~1" % fraction)
        torch._C._cuda_setMemoryFraction(fraction, index)

    m.empty_cache = empty_cache
    m.set_per_process_memory_fraction = set_per_process_memory_fraction
    m.get_per_process_memory_fraction = lambda device=None: torch._C._cuda_getMemoryFraction(_get_device_index(device))
    m.memory_snapshot = lambda mempool_id=None, include_traces=True: torch._C._cuda_memorySnapshot(
        (0, 0, include_traces) if mempool_id is None else (mempool_id[0], mempool_id[1], include_traces))["segments"]

    def memory_summary(device=None, abbreviated=False):
        stats = m.memory_stats(device=_get_device_index(device, optional=True))
        return "allocated %d reserved %d" % (stats["allocated_bytes.all.current"], stats["reserved_bytes.all.current"])

    m.memory_summary = memory_summary

    def _record_memory_history(enabled="all", *args, **kwargs):
        if isinstance(enabled, bool):
            names = ("record_context", "trace_alloc_max_entries", "trace_alloc_record_context", "device",
                     "record_context_cpp", "clear_history")
            defaults = dict(record_context=True, trace_alloc_max_entries=1, trace_alloc_record_context=False,
                            device=None, record_context_cpp=False, clear_history=False)
            defaults.update(dict(zip(names, args)), **kwargs)
            return torch._C._cuda_record_memory_history_legacy(
                enabled, defaults["record_context"], defaults["trace_alloc_max_entries"],
                defaults["trace_alloc_record_context"], defaults["record_context_cpp"], defaults["clear_history"],
                False, False, [], False, True)
        names = ("context", "stacks", "max_entries", "device", "clear_history")
        o = dict(context="all", stacks="all", max_entries=sys.maxsize, device=None, clear_history=False)
        o.update(dict(zip(names, args)), **kwargs)
        return torch._C._cuda_record_memory_history(enabled, o["context"], o["stacks"], o["max_entries"],
                                                    o["clear_history"], False, False, [], False, True)

    m._record_memory_history = _record_memory_history
    m._snapshot = lambda device=None, augment_with_fx_traces=False: torch._C._cuda_memorySnapshot(None)

    def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
        s = m._snapshot()
        with open(filename, "wb") as f:
            pickle.dump(s, f)

    m._dump_snapshot = _dump_snapshot
    for name in ("memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                 "reset_peak_memory_stats", "reset_accumulated_memory_stats", "memory_summary", "memory_snapshot",
                 "empty_cache", "set_per_process_memory_fraction", "get_per_process_memory_fraction"):
        setattr(cuda, name, getattr(m, name))
    sys.modules.update({"torch": torch, "torch._C": C, "torch.cuda": cuda, "torch.cuda.memory": memory})
    return torch


def stats_of(device):
    """gpumemprof's flat stats of a device in the stand-in: distinct per device."""
    base = (device + 1) << 20
    out = {}
    for name in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
        for pool in ("all", "large_pool", "small_pool"):
            for metric, k in (("current", 1), ("peak", 2), ("allocated", 3), ("freed", 4)):
                out["%s.%s.%s" % (name, pool, metric)] = base * k + (0 if name == "allocated_bytes" else 512)
    out.update({"num_ooms": 0, "num_alloc_retries": 0, "max_split_size": -1, "oversize_allocations.current": 0})
    return out


class StandInLibrary:
    def __init__(self):
        self.calls = []
        self.devices = [0, 1, 3]

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name,) + args)
            return 0
        return call

    def gpumemprof_devices_in_use(self, out, capacity):
        if out is not None:
            for i, d in enumerate(self.devices[:capacity]):
                out[i] = d
        return len(self.devices)

    def gpumemprof_dump_snapshot_devices(self, path):
        self.calls.append(("gpumemprof_dump_snapshot_devices",))
        snap = {"segments": [{"device": 1, "address": 4096, "total_size": 2 << 20, "segment_pool_id": (0, 0),
                              "blocks": [{"frames": [{"filename": "/home/me/model.py", "line": 42,
                                                      "name": "forward"}]}]},
                             {"device": 1, "address": 1 << 30, "total_size": 2 << 20, "segment_pool_id": (1, 2),
                              "blocks": []}],
                "device_traces": [[], [{"action": "alloc", "addr": 4096, "size": 100}]],
                "allocator_settings": {}, "external_annotations": [], "made_by": "gpumemprof"}
        with open(os.fsdecode(path), "wb") as f:
            pickle.dump(snap, f)
        return 0

    def gpumemprof_alloc_conf(self):
        return b"PYTORCH_ALLOC_CONF=expandable_segments:True,per_process_memory_fraction:0.5"


def main():
    source = sys.argv[1]
    sys.path.insert(0, os.path.join(source, "python"))
    torch = make_fake_torch()
    from torch.cuda import memory_stats as early_memory_stats  # imported before install, as scripts do
    import gpumemprof_torch as gt
    lib = StandInLibrary()
    gt._load = lambda: lib
    gt.memory_stats = lambda device=None: stats_of(gt._device_index(device))
    originals = {n: getattr(torch._C, n) for n in gt.memory_api._REPLACEMENTS}

    try:
        torch.cuda.memory_stats()
        check(False, "the stand-in PyTorch bindings should raise as the pluggable allocator does")
    except PluggableError:
        pass

    replaced = gt.memory_api.patch()
    check(replaced == sorted(gt.memory_api._REPLACEMENTS), "every binding replaced: %r" % replaced)
    cuda, mem = torch.cuda, torch.cuda.memory

    # Values: gpumemprof's, same keys, every name and device form.
    for form, index in ((None, CURRENT_DEVICE), (0, 0), (3, 3), ("cuda:3", 3), ("cuda", CURRENT_DEVICE),
                        (torch.device("cuda", 0), 0), (torch.device("cuda:3"), 3)):
        want = stats_of(index)
        for fn in (cuda.memory_stats, mem.memory_stats, early_memory_stats):
            got = fn(form)
            check(got == want, "memory_stats(%r) through %s: %r" % (form, fn.__qualname__, sorted(got)[:3]))
        check(cuda.memory_allocated(form) == want["allocated_bytes.all.current"], "memory_allocated(%r)" % (form,))
        check(mem.max_memory_allocated(form) == want["allocated_bytes.all.peak"], "max_memory_allocated(%r)" % (form,))
        check(cuda.memory_reserved(form) == want["reserved_bytes.all.current"], "memory_reserved(%r)" % (form,))
        check(cuda.max_memory_reserved(form) == want["reserved_bytes.all.peak"], "max_memory_reserved(%r)" % (form,))
        check(cuda.memory_summary(form) == "allocated %d reserved %d" % (
            want["allocated_bytes.all.current"], want["reserved_bytes.all.current"]), "memory_summary(%r)" % (form,))
    nested = mem.memory_stats_as_nested_dict(0)
    check(nested["allocated_bytes"]["all"]["peak"] == stats_of(0)["allocated_bytes.all.peak"]
          and nested["num_ooms"] == 0 and nested["oversize_allocations"]["current"] == 0,
          "the binding returns PyTorch's nested form: %r" % sorted(nested))

    # Resets and empty_cache reach gpumemprof, per device; empty_cache every device it serves.
    lib.calls.clear()
    cuda.reset_peak_memory_stats()
    mem.reset_peak_memory_stats("cuda:3")
    cuda.reset_accumulated_memory_stats(torch.device("cuda", 0))
    cuda.empty_cache()
    check(lib.calls == [("gpumemprof_reset_peak_memory_stats", CURRENT_DEVICE), ("gpumemprof_reset_peak_memory_stats", 3),
                        ("gpumemprof_reset_accumulated_memory_stats", 0), ("gpumemprof_empty_cache", 0),
                        ("gpumemprof_empty_cache", 1), ("gpumemprof_empty_cache", 3)],
          "resets and empty_cache: %r" % lib.calls)

    # torch.accelerator's bindings (its Python wrappers pass a device index) answer from gpumemprof too.
    check(torch._C._accelerator_isAllocatorInitialized() is True,
          "torch.accelerator's wrappers see an initialized allocator (they return nothing otherwise)")
    acc = torch._C._accelerator_getDeviceStats(3)
    check(acc["allocated_bytes"]["all"]["peak"] == stats_of(3)["allocated_bytes.all.peak"],
          "torch.accelerator's stats binding returns gpumemprof's, nested: %r" % sorted(acc)[:3])
    lib.calls.clear()
    torch._C._accelerator_resetPeakStats(3)
    torch._C._accelerator_resetAccumulatedStats(0)
    torch._C._accelerator_emptyCache()
    check(lib.calls == [("gpumemprof_reset_peak_memory_stats", 3), ("gpumemprof_reset_accumulated_memory_stats", 0),
                        ("gpumemprof_empty_cache", 0), ("gpumemprof_empty_cache", 1), ("gpumemprof_empty_cache", 3)],
          "torch.accelerator's resets and empty_cache: %r" % lib.calls)

    # The memory fraction: PyTorch's checks first, then gpumemprof's cap.
    check(cuda.get_per_process_memory_fraction(0) == 0.5, "the fraction from the allocator configuration")
    lib.calls.clear()
    cuda.set_per_process_memory_fraction(0.25, "cuda:3")
    check(lib.calls == [("gpumemprof_set_memory_fraction", 3, 0.25)], "set fraction: %r" % lib.calls)
    check(cuda.get_per_process_memory_fraction(3) == 0.25, "the fraction set is read back")
    for bad, error in ((2, TypeError), (1.5, ValueError)):
        try:
            cuda.set_per_process_memory_fraction(bad)
            check(False, "fraction %r accepted" % bad)
        except error:
            pass

    # History: the string form, the bool (legacy) form, and PyTorch's refusals.
    lib.calls.clear()
    mem._record_memory_history()
    mem._record_memory_history("state", stacks="python", max_entries=1000)
    mem._record_memory_history(None)
    mem._record_memory_history(True, trace_alloc_max_entries=500, trace_alloc_record_context=True,
                               record_context_cpp=True)
    mem._record_memory_history(False)
    want = [("gpumemprof_history", b"all", b"all", b"all", sys.maxsize, 0),
            ("gpumemprof_history", b"state", b"all", b"python", 1000, 0),
            ("gpumemprof_history", b"", b"all", b"all", sys.maxsize, 0),
            ("gpumemprof_history", b"all", b"alloc", b"all", 500, 0),
            ("gpumemprof_history", b"", b"state", b"python", 1, 0)]
    check(lib.calls == want, "history calls: %r" % lib.calls)
    for kwargs in ({"enabled": "everything"}, {"context": "some"}, {"stacks": "cpp"}):
        try:
            mem._record_memory_history(**kwargs)
            check(False, "accepted %r" % kwargs)
        except RuntimeError as e:
            check("expected" in str(e), "refusal names what was expected: %s" % e)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch._C._cuda_record_memory_history("all", "all", "all", 10, False, False, False, ["free_requested"], True)
    check(len(caught) == 2 and "skip_actions" in str(caught[0].message) and "pinned" in str(caught[1].message),
          "ignored options each say so once: %r" % [str(w.message) for w in caught])

    # Snapshots: the script's own _dump_snapshot writes gpumemprof's at its path.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mine.pickle")
        mem._dump_snapshot(path)
        with open(path, "rb") as f:
            dumped = pickle.load(f)
        check(dumped.get("made_by") == "gpumemprof" and dumped["segments"][0]["blocks"][0]["frames"][0]["line"] == 42,
              "_dump_snapshot wrote gpumemprof's snapshot: %r" % sorted(dumped))
    check(len(cuda.memory_snapshot()) == 2, "memory_snapshot: every segment")
    check([s["address"] for s in cuda.memory_snapshot(mempool_id=(1, 2))] == [1 << 30], "memory_snapshot of a pool")
    check(mem._snapshot()["device_traces"][1][0]["size"] == 100, "_snapshot keeps the traces")
    check(torch._C._cuda_memorySnapshot((0, 0, False))["device_traces"] == [[], []], "include_traces=False")
    check(not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("gpumemprof-snapshot-")],
          "no temporary snapshot file left behind")

    # Restored: PyTorch's own bindings again.
    gt.restore_memory_api()
    check(all(getattr(torch._C, n) is originals[n] for n in originals), "restore() puts PyTorch's bindings back")
    check(gt.memory_api.patched() == [], "nothing patched after restore()")
    try:
        early_memory_stats()
        check(False, "after restore() PyTorch answers (and its pluggable allocator refuses)")
    except PluggableError:
        pass
    check(gt.memory_api.patch() == sorted(originals), "patch() again after restore()")
    gt.memory_api.restore()
    finish("torch memory API")


if __name__ == "__main__":
    _ = ctypes  # the package's devices_in_use builds ctypes arrays
    main()
