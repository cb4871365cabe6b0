"""CUDA graphs through the bridge: PyTorch's pool hooks wired to gpumemprof, and one clear line
where PyTorch offers no hook.

What calls the allocator around a capture (torch 2.11) and how each is served under the bridge:

    torch.cuda.graph / CUDAGraph.capture_begin   beginAllocateToPool(device, pool, capture filter)
    CUDAGraph.capture_end                        endAllocateToPool(device, pool)
    CUDAGraph.reset / its destructor             releasePool(device, pool)
    make_graphed_callables                       the same, the graphs sharing graph_pool_handle()'s pool
    Tensor.record_stream, NCCL's recordStream    recordStream(ptr, stream)
    torch.accelerator.empty_cache, C++ callers    emptyCache()
        -> CUDAPluggableAllocator's set_begin_allocate_to_pool, set_end_allocate_to_pool_fn,
           set_release_pool, set_record_stream_fn, set_reset_fn: gpumemprof's pools, capture rules
           and cache serve them.
    torch.compile(mode="reduce-overhead")        cudagraph trees also need getCheckpointState /
                                                 setCheckpointPoolState, which the pluggable allocator
                                                 does not offer: install() makes inductor use its plain
                                                 CUDA graphs (torch._inductor.config.triton.
                                                 cudagraph_trees = False; each compiled graph then has
                                                 its own pool), and the two checkpoint bindings raise
                                                 one clear line if trees are turned back on.
    torch.cuda.MemPool / use_mem_pool            createOrIncrefPool, not offered: MemPool() raises one
                                                 clear line saying what to do instead.
"""
import ctypes
import importlib.abc
import importlib.util
import sys

_HOOKS = (
    ("set_begin_allocate_to_pool", "gpumemprof_begin_allocate_to_pool"),
    ("set_end_allocate_to_pool_fn", "gpumemprof_end_allocate_to_pool"),
    ("set_release_pool", "gpumemprof_release_pool"),
    ("set_record_stream_fn", "gpumemprof_record_stream_any_device"),
    # Not graphs' own: libtorch's emptyCache (torch.accelerator.empty_cache, C++ callers) reaches
    # gpumemprof through it; torch.cuda.empty_cache does through memory_api.
    ("set_reset_fn", "gpumemprof_empty_cache_all"),
)

MEMPOOL_MESSAGE = (
    "gpumemprof_torch: torch.cuda.MemPool cannot be created while gpumemprof's allocator is installed: PyTorch's "
    "pluggable allocator has no hook to create a pool (createOrIncrefPool). For a CUDA graph's memory use "
    "torch.cuda.graph(g, pool=torch.cuda.graph_pool_handle()) (gpumemprof serves graph pools); for a MemPool, run "
    "without gpumemprof_torch.install() / the launcher.")

CHECKPOINT_MESSAGE = (
    "gpumemprof_torch: torch.compile(mode=\"reduce-overhead\") with CUDA graph trees needs PyTorch's allocator "
    "checkpoints (%s), which PyTorch's pluggable allocator does not offer; under gpumemprof keep "
    "torch._inductor.config.triton.cudagraph_trees = False (what install() sets: inductor then uses plain CUDA "
    "graphs), or run without gpumemprof_torch.install() / the launcher.")

_patched = {}  # (owner, name) -> PyTorch's own object


def wire_hooks(pluggable, lib):
    """Gives the CUDAPluggableAllocator `pluggable` gpumemprof's pool and record_stream hooks.
    Returns the setters this torch lacks (torch before 2.3: no CUDA graphs through the bridge)."""
    hooks = pluggable._allocator
    missing = []
    for setter, function in _HOOKS:
        if not hasattr(hooks, setter):
            missing.append(setter)
            continue
        getattr(hooks, setter)(ctypes.cast(getattr(lib, function), ctypes.c_void_p).value)
    return missing


def missing_hooks_line(torch, missing):
    return ("gpumemprof_torch: torch %s has no CUDAPluggableAllocator.%s: CUDA graphs (torch.cuda.graph, "
            "torch.compile mode=\"reduce-overhead\") and Tensor.record_stream are not served by gpumemprof; use "
            "torch 2.3 or newer for them." % (torch.__version__, ", ".join(missing)))


def _replace(owner, name, value):
    if (owner, name) not in _patched and hasattr(owner, name):
        _patched[(owner, name)] = getattr(owner, name)
        setattr(owner, name, value)


def _refuse_mempool(*_args, **_kwargs):
    raise RuntimeError(MEMPOOL_MESSAGE)


def _refuse_checkpoint(binding):
    def refuse(*_args, **_kwargs):
        raise RuntimeError(CHECKPOINT_MESSAGE % ("torch._C." + binding))
    refuse.__name__ = binding
    return refuse


def plain_cudagraphs(config):
    """Makes inductor's reduce-overhead use plain CUDA graphs (no trees) in `config`
    (torch._inductor.config)."""
    config.triton.cudagraph_trees = False


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then(module)` right after module `name` is first imported (it is not yet: importing
    torch._inductor at install() would cost every script its start-up time)."""

    def __init__(self, name, then):
        self.name, self.then, self.done = name, then, False

    def find_spec(self, fullname, path=None, target=None):
        # Inert once used; it leaves sys.meta_path when the module has run (not here: the import
        # system is iterating that list now).
        if self.done or fullname != self.name:
            return None
        self.done = True
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            self.leave()
            return spec
        loader, then, leave = spec.loader, self.then, self.leave

        class Loader(importlib.abc.Loader):
            def __getattr__(self, attribute):  # get_source, get_filename, ...: the real loader's
                return getattr(loader, attribute)

            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                try:
                    loader.exec_module(module)
                    then(sys.modules.get(module.__name__, module))
                finally:
                    leave()

        spec.loader = Loader()
        return spec

    def leave(self):
        """Takes this finder out of sys.meta_path: every import a step makes of a module that is not
        installed asks each finder. A new list, not a removal: an import running now may be iterating
        the old one, and a removal would make it skip the finder after this one."""
        sys.meta_path = [f for f in sys.meta_path if f is not self]


def patch(torch):
    """What install() changes in torch besides the allocator (see the module's doc)."""
    memory = getattr(torch.cuda, "memory", None)
    pool_class = getattr(memory, "MemPool", None) or getattr(torch.cuda, "MemPool", None)
    if isinstance(pool_class, type):
        _replace(pool_class, "__init__", _refuse_mempool)
    for binding in ("_cuda_getCheckpointState", "_cuda_setCheckpointPoolState"):
        _replace(torch._C, binding, _refuse_checkpoint(binding))
    name = "torch._inductor.config"
    if name in sys.modules:
        plain_cudagraphs(sys.modules[name])
    elif not any(isinstance(f, _AfterImport) and not f.done for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, plain_cudagraphs))


def patched():
    """The names patch() replaced, as "owner.name"."""
    return sorted("%s.%s" % (getattr(owner, "__name__", owner), name) for owner, name in _patched)
