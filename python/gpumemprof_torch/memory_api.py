"""torch.cuda's memory API answering from gpumemprof while its allocator is installed.

PyTorch's pluggable allocator answers none of torch.cuda's memory functions ("CUDAPluggableAllocator
does not yet support getDeviceStats"). Every one of them is Python in torch/cuda/memory.py that
checks and normalises its arguments (device as int, str, torch.device or None; fraction in 0..1;
history modes) and then calls one binding of torch._C at call time. install() puts gpumemprof's
answer in place of those bindings, so torch.cuda.X, torch.cuda.memory.X, and names a script
imported before install() (`from torch.cuda import memory_stats`) all reach gpumemprof, with
PyTorch's own argument handling, keys, units and reset semantics:

    torch._C binding                       what calls it
    _cuda_memoryStats(device)              memory_stats, memory_stats_as_nested_dict, memory_allocated,
                                           max_memory_allocated, memory_reserved, max_memory_reserved,
                                           memory_cached, max_memory_cached, memory_summary
    _cuda_resetPeakMemoryStats(device)     reset_peak_memory_stats, reset_max_memory_allocated/cached
    _cuda_resetAccumulatedMemoryStats(d)   reset_accumulated_memory_stats
    _cuda_emptyCache()                     empty_cache (every device gpumemprof serves)
    _cuda_setMemoryFraction(f, device)     set_per_process_memory_fraction
    _cuda_getMemoryFraction(device)        get_per_process_memory_fraction
    _cuda_memorySnapshot(arg)              memory_snapshot, memory._snapshot, memory._dump_snapshot
    _cuda_record_memory_history(...)       memory._record_memory_history (enabled as a string)
    _cuda_record_memory_history_legacy(.)  memory._record_memory_history (enabled as a bool)
    _accelerator_getDeviceStats(index)     torch.accelerator.memory_stats, memory_allocated, ... (2.9+)
    _accelerator_resetPeakStats(index)     torch.accelerator.reset_peak_memory_stats
    _accelerator_resetAccumulatedStats(i)  torch.accelerator.reset_accumulated_memory_stats
    _accelerator_emptyCache()              torch.accelerator.empty_cache
    _accelerator_isAllocatorInitialized()  each torch.accelerator memory function, first (True)

restore() puts PyTorch's bindings back (PyTorch cannot switch allocators back, so the allocator
stays gpumemprof's; restore() only gives torch.cuda's functions their own answers again).
"""
import os
import pickle
import sys
import tempfile
import warnings

_originals = {}   # binding name -> PyTorch's own object
_fractions = {}   # device -> the fraction set through set_per_process_memory_fraction
_warned = set()


def _gt():
    import gpumemprof_torch
    return gpumemprof_torch


def _nested(flat):
    """memory_stats' flat "a.b.c" keys as PyTorch's binding returns them: nested dicts."""
    out = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn("gpumemprof_torch: " + message, RuntimeWarning, stacklevel=3)


def devices_in_use():
    """The CUDA devices gpumemprof's allocator has served or been asked about, ascending."""
    import ctypes
    lib = _gt()._load()
    n = lib.gpumemprof_devices_in_use(None, 0)
    out = (ctypes.c_int * max(n, 1))()
    n = lib.gpumemprof_devices_in_use(out, n)
    return list(out[:n])


# ---------------------------------------------------------------------------------------------
# The bindings' replacements: PyTorch's Python wrappers have checked and normalised the arguments.

def _memory_stats(device=None):
    return _nested(_gt().memory_stats(device))


def _reset_peak_memory_stats(device=None):
    gt = _gt()
    gt._check(gt._load().gpumemprof_reset_peak_memory_stats(gt._device_index(device)), "reset_peak_memory_stats")


def _reset_accumulated_memory_stats(device=None):
    gt = _gt()
    gt._check(gt._load().gpumemprof_reset_accumulated_memory_stats(gt._device_index(device)),
              "reset_accumulated_memory_stats")


def _empty_cache(*_args):
    gt = _gt()
    for d in devices_in_use():
        gt.empty_cache(d)


def _set_memory_fraction(fraction, device=None):
    gt = _gt()
    index = gt._device_index(device)
    gt._check(gt._load().gpumemprof_set_memory_fraction(index, float(fraction)), "set_per_process_memory_fraction")
    _fractions[index] = float(fraction)


def _get_memory_fraction(device=None):
    index = _gt()._device_index(device)
    if index in _fractions:
        return _fractions[index]
    conf = _gt()._load().gpumemprof_alloc_conf().decode()
    for item in conf.partition("=")[2].replace(" ", "").split(","):
        key, _, value = item.partition(":")
        if key == "per_process_memory_fraction":
            return float(value)
    return 1.0


def snapshot():
    """torch.cuda.memory._snapshot() from gpumemprof: segments of every device gpumemprof serves,
    one device_traces list per device, allocator_settings, external_annotations (a dict)."""
    gt = _gt()
    fd, path = tempfile.mkstemp(prefix="gpumemprof-snapshot-", suffix=".pickle")
    os.close(fd)
    try:
        gt._check(gt._load().gpumemprof_dump_snapshot_devices(os.fsencode(path)), "_snapshot")
        with open(path, "rb") as f:
            return pickle.load(f)
    finally:
        os.remove(path)


def _memory_snapshot(arg=None, *_rest):
    # arg: None (memory._snapshot) or (pool id, pool id[, include_traces]) (memory_snapshot).
    s = snapshot()
    if isinstance(arg, tuple) and len(arg) >= 2:
        pool = (arg[0], arg[1])
        if pool != (0, 0):
            s["segments"] = [seg for seg in s["segments"] if tuple(seg.get("segment_pool_id", (0, 0))) == pool]
        if len(arg) >= 3 and not arg[2]:
            s["device_traces"] = [[] for _ in s.get("device_traces", [])]
    return s


_ENABLED = (None, "state", "all")
_CONTEXT = (None, "state", "alloc", "all")
_STACKS = ("python", "all")


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, clear_history=False,
                           compile_context=False, global_record_annotations=False, skip_actions=None,
                           record_pinned_host_memory=False, record_cuda=True, *_rest):
    # PyTorch's checks (torch/csrc/cuda/Module.cpp), with its messages' meaning.
    if enabled not in _ENABLED:
        raise RuntimeError("expected enabled to be 'state', 'all', or None, got %r" % (enabled,))
    if context not in _CONTEXT:
        raise RuntimeError("expected context to be 'state', 'alloc', 'all', or None, got %r" % (context,))
    if stacks not in _STACKS:
        raise RuntimeError("expected stacks to be 'python', or 'all', got %r" % (stacks,))
    if skip_actions:
        _warn_once("skip_actions", "_record_memory_history(skip_actions=%r) is ignored: gpumemprof records every "
                   "action" % (list(skip_actions),))
    if compile_context:
        _warn_once("compile_context", "_record_memory_history(compile_context=True) is ignored: gpumemprof's "
                   "trace entries carry no torch.compile context")
    if record_pinned_host_memory:
        _warn_once("pinned", "_record_memory_history(record_pinned_host_memory=True) is ignored: pinned host "
                   "memory stays with PyTorch's host allocator, whose history gpumemprof does not record")
    if not record_cuda:
        enabled = None
    record_history(enabled, context, stacks, max_entries, clear_history)


def _record_memory_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1,
                                  trace_alloc_record_context=False, record_context_cpp=False, clear_history=False,
                                  compile_context=False, global_record_annotations=False, skip_actions=None,
                                  record_pinned_host_memory=False, record_cuda=True, *_rest):
    # PyTorch's legacy form: enabled a bool; history with trace_alloc_max_entries events; stacks of
    # live blocks (record_context), also on events (trace_alloc_record_context); C++ frames too
    # (record_context_cpp).
    context = None if not record_context else ("alloc" if trace_alloc_record_context else "state")
    _record_memory_history("all" if enabled else None, context, "all" if record_context_cpp else "python",
                           max(int(trace_alloc_max_entries), 1), clear_history, compile_context,
                           global_record_annotations, skip_actions, record_pinned_host_memory, record_cuda)


def record_history(enabled="all", context="all", stacks="python", max_entries=sys.maxsize, clear_history=False):
    """Allocation history on every device gpumemprof serves (and each device it serves later), in
    PyTorch's words: enabled "all"/"state"/None, context "all"/"alloc"/"state"/None, stacks "python"
    (each allocation's Python frames), "all" (C++ frames, then Python frames) or "cpp"."""
    gt = _gt()
    word = lambda v: b"" if v is None else str(v).encode()  # noqa: E731
    gt._check(gt._load().gpumemprof_history(word(enabled), word(context), word(stacks),
                                           min(int(max_entries), (1 << 64) - 1), 1 if clear_history else 0),
              "_record_memory_history")


_REPLACEMENTS = {
    "_cuda_memoryStats": _memory_stats,
    "_cuda_resetPeakMemoryStats": _reset_peak_memory_stats,
    "_cuda_resetAccumulatedMemoryStats": _reset_accumulated_memory_stats,
    "_cuda_emptyCache": _empty_cache,
    "_cuda_setMemoryFraction": _set_memory_fraction,
    "_cuda_getMemoryFraction": _get_memory_fraction,
    "_cuda_memorySnapshot": _memory_snapshot,
    "_cuda_record_memory_history": _record_memory_history,
    "_cuda_record_memory_history_legacy": _record_memory_history_legacy,
    # torch.accelerator's memory functions (torch 2.9+) ask the allocator registered for the device
    # type, which stays PyTorch's own under a pluggable allocator: without these, its stats read
    # PyTorch's empty allocator and empty_cache() empties nothing. Their Python wrappers pass a
    # device index.
    "_accelerator_getDeviceStats": _memory_stats,
    "_accelerator_resetPeakStats": _reset_peak_memory_stats,
    "_accelerator_resetAccumulatedStats": _reset_accumulated_memory_stats,
    "_accelerator_emptyCache": _empty_cache,
    # Each of those wrappers first asks whether that registered allocator was initialized, and it
    # never is under a pluggable allocator (they would return {} / 0 / nothing): gpumemprof's is.
    "_accelerator_isAllocatorInitialized": lambda *_args: True,
    "_accelerator_allocatorInitialized": lambda *_args: True,
}


def patch():
    """Puts gpumemprof's answers in place of torch._C's memory bindings (those this torch has).
    Returns the names replaced."""
    import torch
    C = torch._C
    for name, fn in _REPLACEMENTS.items():
        if name in _originals or not hasattr(C, name):
            continue
        _originals[name] = getattr(C, name)
        setattr(C, name, fn)
    return sorted(_originals)


def restore():
    """Gives torch._C its own memory bindings back (see the module's doc: the allocator stays)."""
    import torch
    for name, original in list(_originals.items()):
        setattr(torch._C, name, original)
        del _originals[name]


def patched():
    """The torch._C bindings gpumemprof answers now."""
    return sorted(_originals)
