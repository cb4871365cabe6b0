"""gpumemprof's caching allocator inside PyTorch.

    import gpumemprof_torch
    gpumemprof_torch.install()          # before the first CUDA allocation of the process
    ...
    with gpumemprof_torch.profile("train_step") as r:
        step()
    print(r.peak_bytes, r.allocated_bytes, r.allocations, r.seconds)
    print(gpumemprof_torch.memory_stats()["reserved_bytes.all.peak"])
    gpumemprof_torch.dump_snapshot("snapshot.pickle")   # pytorch.org/memory_viz
    gpumemprof_torch.dump_snapshots("mem-dump")         # every rank: rank-<R>.pickle; rank 0: ranks.json
    gpumemprof_torch.collect_rank_index("mem-dump")     # rank 0, when no process group is up any more

Memory by category, as torch.profiler's memory timeline splits it (parameter, optimizer_state,
input, temporary, activation, gradient, autograd_detail; untagged memory is "unknown"):

    gpumemprof_torch.categorize(model, optimizer)   # parameters, gradients, optimizer state, activations
    with gpumemprof_torch.category("input"):
        x = batch.to("cuda")
    print(gpumemprof_torch.category_stats())        # {"parameter": {"current": N, "peak": N, ...}, ...}

Without a code change: `python -m gpumemprof_torch.run [--out DIR] [--history] SCRIPT [ARGS]`, also
as `torchrun --nproc_per_node N -m gpumemprof_torch.run ... SCRIPT` (see gpumemprof_torch/run.py).

The allocator lives in libgpumemprof_torch.so: inside this package after `pip install .` at the
gpumemprof checkout's root, else found through $GPUMEMPROF_TORCH_LIB or in a Meson build folder of
the checkout this package sits in (build*/python/). It takes its options from
$GPUMEMPROF_ALLOC_CONF, else from PyTorch's $PYTORCH_ALLOC_CONF / $PYTORCH_CUDA_ALLOC_CONF.
"""

import contextlib
import ctypes
import glob
import json
import os
import socket
import sys
import time

from . import graphs, memory_api

__all__ = ["library_path", "install", "installed", "memory_stats", "dump_snapshot", "dump_snapshots",
           "collect_rank_index", "dump_on_oom", "rank_summary", "record_memory_history", "empty_cache",
           "track_external_memory", "profile", "ProfileResult", "category", "tag", "categorize", "category_stats",
           "reset_category_peaks", "restore_memory_api", "memory_api", "graphs", "python_stack", "forecast"]

_LIB_NAME = "libgpumemprof_torch.so"
_lib = None
_installed = False


def library_path():
    """The path of libgpumemprof_torch.so; raises FileNotFoundError saying where it looked."""
    tried = []
    env = os.environ.get("GPUMEMPROF_TORCH_LIB")
    if env:
        if os.path.isfile(env):
            return os.path.abspath(env)
        tried.append(env + " ($GPUMEMPROF_TORCH_LIB)")
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, _LIB_NAME), os.path.join(os.path.dirname(here), _LIB_NAME)]
    repo = os.path.dirname(os.path.dirname(here))
    candidates += sorted(glob.glob(os.path.join(repo, "build*", "python", _LIB_NAME)))
    for c in candidates:
        if os.path.isfile(c):
            return c
    tried += candidates or [os.path.join(repo, "build*", "python", _LIB_NAME)]
    raise FileNotFoundError(
        "gpumemprof_torch: %s not found (looked at: %s). Build gpumemprof with CUDA "
        "(meson setup build && ninja -C build python/%s) or set GPUMEMPROF_TORCH_LIB to its path."
        % (_LIB_NAME, ", ".join(tried), _LIB_NAME))


def _load():
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(library_path())
        lib.gpumemprof_memory_stats_json.restype = ctypes.c_ssize_t
        lib.gpumemprof_memory_stats_json.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        lib.gpumemprof_dump_snapshot.argtypes = [ctypes.c_int, ctypes.c_char_p]
        lib.gpumemprof_record_memory_history.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t]
        lib.gpumemprof_empty_cache.argtypes = [ctypes.c_int]
        lib.gpumemprof_counters.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
        lib.gpumemprof_open_peak_window.restype = ctypes.c_uint64
        lib.gpumemprof_open_peak_window.argtypes = [ctypes.c_int]
        lib.gpumemprof_close_peak_window.restype = ctypes.c_int64
        lib.gpumemprof_close_peak_window.argtypes = [ctypes.c_int, ctypes.c_uint64]
        lib.gpumemprof_dump_rank_snapshot.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.gpumemprof_dump_on_oom.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.gpumemprof_rank_summary.restype = ctypes.c_ssize_t
        lib.gpumemprof_rank_summary.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.gpumemprof_track_external_memory.argtypes = []
        lib.gpumemprof_last_error.restype = ctypes.c_char_p
        lib.gpumemprof_set_category.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.gpumemprof_push_category.argtypes = [ctypes.c_char_p]
        lib.gpumemprof_pop_category.argtypes = []
        lib.gpumemprof_category_stats_json.restype = ctypes.c_ssize_t
        lib.gpumemprof_category_stats_json.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        lib.gpumemprof_reset_category_peaks.argtypes = [ctypes.c_int]
        lib.gpumemprof_history.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                           ctypes.c_int]
        lib.gpumemprof_devices_in_use.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        lib.gpumemprof_dump_snapshot_devices.argtypes = [ctypes.c_char_p]
        lib.gpumemprof_reset_peak_memory_stats.argtypes = [ctypes.c_int]
        lib.gpumemprof_reset_accumulated_memory_stats.argtypes = [ctypes.c_int]
        lib.gpumemprof_set_memory_fraction.argtypes = [ctypes.c_int, ctypes.c_double]
        lib.gpumemprof_alloc_conf.restype = ctypes.c_char_p
        lib.gpumemprof_python_waiting_thread.argtypes = [ctypes.c_int]
        lib.gpumemprof_python_stack_json.restype = ctypes.c_ssize_t
        lib.gpumemprof_python_stack_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        _lib = lib
    return _lib


def _check(result, what):
    if result == -1:
        raise RuntimeError("gpumemprof_torch.%s: %s" % (what, _load().gpumemprof_last_error().decode(errors="replace")))
    return result


def _torch(what):
    """The torch module; without it, one clear RuntimeError naming the entry point (every entry
    point that needs PyTorch says so the same way, never a bare ModuleNotFoundError)."""
    try:
        import torch
    except ImportError as e:
        raise RuntimeError("gpumemprof_torch.%s: PyTorch is not importable here (%s); install torch with CUDA "
                           "support first." % (what, e)) from e
    return torch


def _device_index(device, what="memory_api"):
    if device is None:
        return _torch(what).cuda.current_device()
    if isinstance(device, int):
        return device
    torch = _torch(what)
    d = torch.device(device)
    if d.type != "cuda":
        raise ValueError("gpumemprof_torch: %r is not a CUDA device" % (device,))
    return d.index if d.index is not None else torch.cuda.current_device()


def install():
    """Makes gpumemprof's allocator PyTorch's CUDA allocator for this process. Must run before
    anything initialises CUDA in PyTorch -- the first CUDA tensor, torch.cuda.set_device(),
    torch.cuda.init() -- as PyTorch refuses to swap allocators after that."""
    global _installed
    if _installed:
        return
    torch = _torch("install()")
    if not torch.cuda.is_available():
        raise RuntimeError("gpumemprof_torch.install(): no CUDA GPU is visible to PyTorch (torch %s, built for "
                           "CUDA %s); gpumemprof's allocator serves CUDA devices only."
                           % (torch.__version__, torch.version.cuda))
    path = library_path()
    lib = _load()
    lib.gpumemprof_raise_on_error.argtypes = [ctypes.c_int]
    # A failed allocation raises (RuntimeError "CUDA out of memory ...") instead of handing PyTorch
    # a tensor without memory.
    lib.gpumemprof_raise_on_error(1)
    try:
        allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "gpumemprof_malloc", "gpumemprof_free")
        # CUDA graphs' pools and Tensor.record_stream (graphs.py): before the swap, as PyTorch's own test does.
        missing = graphs.wire_hooks(allocator, lib)
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        # torch.cuda.set_device(), a CUDA tensor or any CUDA call initializes PyTorch's own allocator,
        # which PyTorch then refuses to swap: the usual first line of a DDP script does that.
        when = (" CUDA is already initialized in this process (torch.cuda.set_device(), a CUDA tensor or another "
                "CUDA call came first)." if torch.cuda.is_initialized() else "")
        raise RuntimeError(
            "gpumemprof_torch.install(): PyTorch refused the allocator (%s).%s Call install() before "
            "torch.cuda.set_device() and before anything touches CUDA, or run the script unchanged through the "
            "launcher, which installs first: python -m gpumemprof_torch.run SCRIPT (under torchrun: "
            "torchrun --nproc_per_node N -m gpumemprof_torch.run SCRIPT)." % (e, when)) from e
    _installed = True
    if missing:
        print(graphs.missing_hooks_line(torch, missing), file=sys.stderr)
    memory_api.patch()
    graphs.patch(torch)


def restore_memory_api():
    """Gives torch.cuda's memory functions PyTorch's own answers again (install() made them answer
    from gpumemprof). PyTorch cannot switch allocators back: gpumemprof's stays installed."""
    memory_api.restore()


def installed():
    """True after install() succeeded."""
    return _installed


def memory_stats(device=None):
    """gpumemprof's memory_stats for a CUDA device, with PyTorch's keys (a dict of ints)."""
    lib = _load()
    index = _device_index(device, "memory_stats()")
    n = _check(lib.gpumemprof_memory_stats_json(index, None, 0), "memory_stats")
    buf = ctypes.create_string_buffer(n + 1)
    _check(lib.gpumemprof_memory_stats_json(index, buf, n + 1), "memory_stats")
    return json.loads(buf.value.decode())


def record_memory_history(enabled="all", max_entries=0, device=None, stacks=None, context="all",
                          backward_frames=False):
    """Records allocation history (enabled: "all", "state" or None = off). Without `stacks`: on
    `device` only, with C++ stacks. With stacks ("python": each allocation's Python frames, as
    PyTorch's stacks="python"; "all": C++ frames, then the Python frames; "cpp"): on every device,
    as torch.cuda.memory._record_memory_history(enabled, context, stacks, max_entries) does.
    backward_frames=True (gpumemprof's own, not PyTorch's): allocations on threads that run no Python
    code -- autograd's, during backward -- carry the Python frames of the calling thread, which waits
    in backward(), so backward's memory is named by the script's backward() line instead of none."""
    levels = {None: 0, "none": 0, "off": 0, "state": 1, "all": 2}
    if enabled not in levels:
        raise ValueError('gpumemprof_torch.record_memory_history: enabled must be "all", "state" or None, not %r'
                         % (enabled,))
    if stacks is not None:
        _load().gpumemprof_python_waiting_thread(1 if backward_frames else 0)
        memory_api.record_history(None if levels[enabled] == 0 else enabled, context, stacks,
                                  max_entries or sys.maxsize)
        return
    index = _device_index(device, "record_memory_history()")
    _check(_load().gpumemprof_record_memory_history(index, levels[enabled], max_entries), "record_memory_history")


def dump_snapshot(path, device=None):
    """Writes the device's snapshot (segments, blocks, history) as a pickle that
    pytorch.org/memory_viz and `python -m torch.cuda._memory_viz` read."""
    index = _device_index(device, "dump_snapshot()")
    _check(_load().gpumemprof_dump_snapshot(index, os.fsencode(path)), "dump_snapshot")


def _rank_and_world():
    """(rank, world size, process group up): torch.distributed's when initialized, else torchrun's
    RANK and WORLD_SIZE, else (0, 1)."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size(), True
    except ImportError:
        pass
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")), False


def dump_snapshots(directory, device=None, collective=True):
    """Every rank writes directory/rank-<R>.pickle (its snapshot, marked with rank, world size, host,
    device and its peaks; pytorch.org/memory_viz opens it). When a torch.distributed process group
    is up this is collective, and rank 0 also writes directory/ranks.json (rank, host, device,
    peaks, file per rank). collective=False, or no process group (after the script's
    destroy_process_group()), writes this rank's file and its line of the index only (after an
    error, other ranks may never join); then collect_rank_index(directory) on rank 0 writes
    ranks.json from them. Returns True where ranks.json was written. Then `gpumemprof summary
    DIRECTORY` reports across ranks."""
    rank, world, group = _rank_and_world()
    group = group and collective
    index = _device_index(device, "dump_snapshots()")
    entry = {"rank": rank, "host": socket.gethostname(), "device": "cuda:%d" % index}
    try:
        _check(_load().gpumemprof_dump_rank_snapshot(index, os.fsencode(directory), rank, world), "dump_snapshots")
    except RuntimeError as e:
        if not group and world > 1:  # rank 0 must not wait for a file that will never come
            entry.update(file=None, error=str(e))
            _write_json(directory, _entry_name(rank), dict(entry, run=_run_id()))
        raise
    stats = memory_stats(index)
    entry.update(peak_allocated_bytes=stats["allocated_bytes.all.peak"],
                 peak_reserved_bytes=stats["reserved_bytes.all.peak"], num_ooms=stats["num_ooms"],
                 file="rank-%d.pickle" % rank)
    entries = [entry]
    if group:
        import torch.distributed as dist
        entries = [None] * world
        dist.all_gather_object(entries, entry)
    elif world > 1:
        _write_json(directory, _entry_name(rank), dict(entry, run=_run_id()))
        return False
    if rank != 0:
        return False
    _write_json(directory, "ranks.json", {"world_size": world, "ranks": entries})
    return True


def _run_id():
    """torchrun's id of this run (the same on every rank), else None."""
    return os.environ.get("TORCHELASTIC_RUN_ID")


def _forget_rank_entry(directory, rank):
    """Removes this rank's line of the index left by an earlier run into the same folder."""
    with contextlib.suppress(OSError):
        os.remove(os.path.join(directory, _entry_name(rank)))


def _entry_name(rank):
    # Hidden and not rank-<R>.*: `gpumemprof summary DIR` reads rank-<R>.pickle and rank-<R>.json.
    return ".rank-%d.index.json" % rank


def _write_json(directory, name, value):
    """Writes directory/name whole (a temporary file renamed into place): a reader never sees half."""
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, ".%s.%d.tmp" % (name, os.getpid()))
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1)
    os.replace(tmp, os.path.join(directory, name))


def collect_rank_index(directory, world_size=None, timeout=120.0):
    """Rank 0, after dump_snapshots without a process group: waits up to `timeout` seconds for every
    rank's line of the index (each rank writes it right after its rank-<R>.pickle), then writes
    directory/ranks.json. Lines of an earlier run into the same folder (another torchrun
    TORCHELASTIC_RUN_ID) are not taken. A rank that never wrote one is listed with "file": null and an "error"
    saying so. Needs no process group. Returns the ranks that are missing."""
    world = _rank_and_world()[1] if world_size is None else world_size
    run = _run_id()
    deadline = time.monotonic() + timeout
    entries = {}
    while True:
        for r in range(world):
            path = os.path.join(directory, _entry_name(r))
            if r not in entries and os.path.exists(path):
                with open(path) as f:
                    entry = json.load(f)
                if entry.pop("run", None) == run:  # else an earlier run's, not yet replaced
                    entries[r] = entry
        if len(entries) == world or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    missing = [r for r in range(world) if r not in entries]
    for r in missing:
        entries[r] = {"rank": r, "file": None,
                      "error": "rank %d wrote nothing into %s within %.0f s" % (r, directory, timeout)}
    _write_json(directory, "ranks.json", {"world_size": world, "ranks": [entries[r] for r in range(world)]})
    for r in range(world):
        if r not in missing:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, _entry_name(r)))
    return missing


def dump_on_oom(directory, device=None):
    """From now on, an out-of-memory error on the device writes this rank's directory/rank-<R>.pickle
    and rank-<R>.oom.txt (the OOM report: cause, largest free block, top allocation sites) before
    PyTorch sees the failure. No collective: the other ranks may be waiting in one."""
    rank, world, _ = _rank_and_world()
    index = _device_index(device, "dump_on_oom()")
    _check(_load().gpumemprof_dump_on_oom(index, os.fsencode(directory), rank, world), "dump_on_oom")


def rank_summary(directory):
    """The cross-rank report of the rank files in `directory` (what `gpumemprof summary DIR` prints)."""
    lib = _load()
    path = os.fsencode(directory)
    n = _check(lib.gpumemprof_rank_summary(path, None, 0), "rank_summary")
    buf = ctypes.create_string_buffer(n + 1)
    _check(lib.gpumemprof_rank_summary(path, buf, n + 1), "rank_summary")
    return buf.value.decode(errors="replace")


def track_external_memory():
    """Starts tracking device memory outside the allocator on every GPU -- NCCL's buffers, cuBLAS's
    workspace, the CUDA context, module code -- each under its owner ("libnccl.so"); every snapshot
    and rank file then carries it, and `gpumemprof summary DIR` shows it per rank. Call it before
    torch or NCCL allocate (the launcher does, with --track-external or GPUMEMPROF_TRACK_EXTERNAL=1).
    True when tracking is on; False when it cannot be (no CUPTI, another profiler attached), the
    reason printed once on stderr -- everything else works as before."""
    return _load().gpumemprof_track_external_memory() == 1


def _json_call(function, what, *args):
    n = _check(function(*args, None, 0), what)
    buf = ctypes.create_string_buffer(n + 1)
    _check(function(*args, buf, n + 1), what)
    return json.loads(buf.value.decode())


def python_stack():
    """The calling thread's Python frames as the bridge captures them for an allocation made here
    with stacks="python": [{"filename", "line", "name"}, ...], innermost first (this function's own
    frames of gpumemprof_torch included)."""
    return _json_call(_load().gpumemprof_python_stack_json, "python_stack")


# ---------------------------------------------------------------------------------------------
# Memory categories

PARAMETER, OPTIMIZER_STATE, INPUT, TEMPORARY = "parameter", "optimizer_state", "input", "temporary"
ACTIVATION, GRADIENT, AUTOGRAD_DETAIL = "activation", "gradient", "autograd_detail"


@contextlib.contextmanager
def category(name):
    """Allocations this thread makes inside the block are in category `name` (any string; the
    innermost block wins): `with gpumemprof_torch.category("input"): x = batch.to("cuda")`.
    Backward runs on PyTorch's own threads: tag what it makes with tag() or categorize()."""
    lib = _load()
    _check(lib.gpumemprof_push_category(str(name).encode()), "category")
    try:
        yield
    finally:
        _check(lib.gpumemprof_pop_category(), "category")


def tag(tensor, name, only_untagged=False):
    """Moves the memory of `tensor` (its whole storage) into category `name`; returns True when it
    moved. With only_untagged, memory that already has a category keeps it. Tensors that are not
    on a CUDA device, or whose memory gpumemprof did not allocate, are left alone (False)."""
    if tensor is None or not getattr(tensor, "is_cuda", False):
        return False
    storage = tensor.untyped_storage()
    if storage.nbytes() == 0:
        return False
    moved = _check(_load().gpumemprof_set_category(ctypes.c_void_p(storage.data_ptr()), tensor.device.index,
                                                   str(name).encode(), 1 if only_untagged else 0), "tag")
    return moved == 1


def _tag_all(tensors, name):
    for t in tensors:
        tag(t, name)


def _state_tensors(optimizer):
    torch = _torch("categorize()")
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                yield value


class _Categorized:
    """What categorize() installed; remove() takes it out again."""

    def __init__(self):
        self.handles = []
        self.hooks = None  # saved-tensor hooks open during the model's forward

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def categorize(model, optimizer=None):
    """Tags the memory of a training loop by what it is for, as torch.profiler's memory timeline:
    the model's parameters and floating-point buffers ("parameter", now and after every optimizer
    step), each gradient when autograd has accumulated it ("gradient"), the optimizer's state after
    every step ("optimizer_state"), and the tensors autograd saves for backward during the model's forward
    that have no category yet ("activation"; inputs tagged with category("input") and parameters
    keep theirs). category_stats() counts these moves, and a snapshot keeps them beside its history
    (its "category_changes" key), so `gpumemprof timeline` and the HTML report count them too.
    Returns a handle whose remove() undoes the hooks."""
    torch = _torch("categorize()")
    _load()
    handle = _Categorized()
    # Floating-point buffers (BatchNorm's running statistics) count as parameters, as torch.profiler
    # counts them (measured on ResNet-50); integer counters (num_batches_tracked) do not.
    params = [p for p in model.parameters()]
    weights = params + [b for b in model.buffers() if b.is_floating_point()]
    _tag_all(weights, PARAMETER)

    def on_grad(param):
        tag(param.grad, GRADIENT)

    for p in params:
        if p.requires_grad and hasattr(p, "register_post_accumulate_grad_hook"):
            handle.handles.append(p.register_post_accumulate_grad_hook(on_grad))
        tag(p.grad, GRADIENT)

    def pack(t):
        tag(t, ACTIVATION, only_untagged=True)
        # Detached: keeping a graph output with its grad_fn would make a reference cycle through
        # the node that saves it; autograd restores the grad_fn at unpack.
        return t.detach()

    def unpack(t):
        return t

    def before_forward(module, args):
        if handle.hooks is None:  # the outermost forward only (a module may call itself)
            handle.hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
            handle.hooks.__enter__()

    def after_forward(module, args, output):
        if handle.hooks is not None:
            hooks, handle.hooks = handle.hooks, None
            hooks.__exit__(None, None, None)

    handle.handles.append(model.register_forward_pre_hook(before_forward))
    try:
        handle.handles.append(model.register_forward_hook(after_forward, always_call=True))
    except TypeError:  # torch before 2.0: no always_call
        handle.handles.append(model.register_forward_hook(after_forward))

    if optimizer is not None:
        def after_step(opt, args, kwargs):
            _tag_all(_state_tensors(opt), OPTIMIZER_STATE)
            _tag_all(weights, PARAMETER)
            for p in params:
                tag(p.grad, GRADIENT)

        _tag_all(_state_tensors(optimizer), OPTIMIZER_STATE)
        handle.handles.append(optimizer.register_step_post_hook(after_step))
    return handle


def category_stats(device=None):
    """Bytes per category on the device: {"parameter": {"current": N, "peak": N, "allocated_current": N,
    "allocated_peak": N}, ...}. current/peak are requested bytes (the tensors' own), allocated_* the
    caching allocator's blocks (rounded to 512 bytes or more; torch.profiler sizes the tensors it saw
    allocated so). Untagged memory is "unknown". Peaks count from the first category call or
    reset_category_peaks()."""
    lib = _load()
    index = _device_index(device, "category_stats()")
    return _json_call(lib.gpumemprof_category_stats_json, "category_stats", index)


def reset_category_peaks(device=None):
    """Sets every category's peak to its current bytes."""
    index = _device_index(device, "reset_category_peaks()")
    _check(_load().gpumemprof_reset_category_peaks(index), "reset_category_peaks")


def empty_cache(device=None):
    """Returns cached, unused blocks of the device to CUDA."""
    _check(_load().gpumemprof_empty_cache(_device_index(device, "empty_cache()")), "empty_cache")


class ProfileResult:
    """What a profile() block did on the device: bytes in PyTorch's rounded block sizes."""

    def __init__(self, name):
        self.name = name
        self.seconds = 0.0          # wall time, after torch.cuda.synchronize() at both ends
        self.allocated_bytes = 0    # bytes allocated during the block (gross)
        self.freed_bytes = 0        # bytes freed during the block (gross)
        self.allocations = 0
        self.frees = 0
        self.peak_bytes = 0         # the highest allocated bytes during the block (absolute)
        self.memory_before = 0      # allocated bytes at entry
        self.memory_after = 0       # allocated bytes at exit
        self.reserved_after = 0

    @property
    def net_bytes(self):
        return self.allocated_bytes - self.freed_bytes

    def __repr__(self):
        return ("ProfileResult(%r, seconds=%.6f, peak_bytes=%d, net_bytes=%d, allocations=%d, frees=%d)"
                % (self.name, self.seconds, self.peak_bytes, self.net_bytes, self.allocations, self.frees))


def _counters(index):
    out = (ctypes.c_int64 * 6)()
    _check(_load().gpumemprof_counters(index, out), "profile")
    return list(out)


@contextlib.contextmanager
def profile(name, device=None, synchronize=True):
    """Profiles the block: `with profile("step") as r: ...`; r is filled in when the block ends
    (also when it raises). Nested and concurrent blocks each get their own peak."""
    torch = _torch("profile()")
    lib = _load()
    index = _device_index(device, "profile()")
    result = ProfileResult(name)
    if synchronize:
        torch.cuda.synchronize(index)
    before = _counters(index)
    window = lib.gpumemprof_open_peak_window(index)
    if window == 0:
        _check(-1, "profile")
    start = time.perf_counter()
    try:
        yield result
    finally:
        if synchronize:
            torch.cuda.synchronize(index)
        result.seconds = time.perf_counter() - start
        result.peak_bytes = _check(lib.gpumemprof_close_peak_window(index, window), "profile")
        after = _counters(index)
        result.memory_before, result.memory_after, result.reserved_after = before[0], after[0], after[1]
        result.allocations = after[2] - before[2]
        result.frees = after[3] - before[3]
        result.allocated_bytes = after[4] - before[4]
        result.freed_bytes = after[5] - before[5]


from .forecast import forecast  # noqa: E402  (gpumemprof_torch/forecast.py: will it fit at a larger size?)
