"""Checks gpumemprof_torch.graphs without PyTorch: what install() wires and patches for CUDA graphs,
against a stand-in `torch` package that has the names torch 2.11 has (a GPU host runs the real thing:
bench/gpu_graphs.sh).

    check_torch_graphs.py LIBRARY

- wire_hooks gives CUDAPluggableAllocator's five setters the addresses of the library's hooks, and
  names the setters an older torch lacks in one line;
- patch makes torch.cuda.MemPool() raise one clear line, the cudagraph-tree checkpoint bindings raise
  one naming the way out, and torch._inductor.config's cudagraph_trees False, whether inductor is
  imported after install() (the usual case) or before.
- install() end to end hands that allocator, with every hook, to change_current_allocator.
Each case runs in a child process (imports and patches are per process).
"""
import os
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_PYTHON = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
failures = []
# Each of CUDAPluggableAllocator's setters and the library function whose C++ type it casts to.
HOOKS = {"set_begin_allocate_to_pool": "gpumemprof_begin_allocate_to_pool",
         "set_end_allocate_to_pool_fn": "gpumemprof_end_allocate_to_pool",
         "set_release_pool": "gpumemprof_release_pool",
         "set_record_stream_fn": "gpumemprof_record_stream_any_device",
         "set_reset_fn": "gpumemprof_empty_cache_all"}
SETTERS = tuple(HOOKS)

FAKE_TORCH = {
    "torch/__init__.py": "__version__ = '2.11.0 (stand-in)'\nfrom . import _C, cuda\n",
    "torch/_C.py": textwrap.dedent("""
        def _cuda_getCheckpointState(device, pool):
            return "pytorch's own"
        def _cuda_setCheckpointPoolState(device, state, stale, add):
            return "pytorch's own"
        """),
    "torch/cuda/__init__.py": textwrap.dedent("""
        from . import memory
        from .memory import MemPool
        def is_available():
            return True
        def is_initialized():
            return False
        def current_device():
            return 0
        """),
    "torch/cuda/memory.py": textwrap.dedent("""
        class MemPool:
            def __init__(self, allocator=None, use_on_oom=False, no_split=False):
                self.made = True
        class _Hooks:
            def __init__(self):
                self.set = {}
            def __getattr__(self, name):
                if not name.startswith("set_"):
                    raise AttributeError(name)
                return lambda address: self.set.__setitem__(name, address)
        class CUDAPluggableAllocator:
            def __init__(self, path, alloc_fn_name, free_fn_name):
                self.functions = (path, alloc_fn_name, free_fn_name)
                self._allocator = _Hooks()
        current = None
        def change_current_allocator(allocator):
            global current
            current = allocator
        """),
    "torch/_inductor/__init__.py": "",
    "torch/_inductor/config.py": "class triton:\n    cudagraph_trees = True\n",
}


def check(ok, what, detail=""):
    """One line per check; `detail` (what the child printed) only when it fails."""
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or not detail else ": " + detail))
    if not ok:
        failures.append(what)


def child(root, code):
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + SOURCE_PYTHON)
    code = "HOOKS = %r\n" % HOOKS + textwrap.dedent(code)  # what each setter must get, by name
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True,
                       text=True, timeout=60)
    return r.returncode, (r.stdout + r.stderr).strip()


def fake_torch_root(library):
    """A folder holding the stand-in torch package; children load the bridge from `library`."""
    os.environ["GPUMEMPROF_TORCH_LIB"] = os.path.abspath(library)
    root = tempfile.mkdtemp(prefix="fake-torch-")
    for path, text in FAKE_TORCH.items():
        os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text)
    return root


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    root = fake_torch_root(sys.argv[1])

    rc, out = child(root, """
        import ctypes, gpumemprof_torch as g
        from gpumemprof_torch import graphs
        lib = g._load()
        calls = {}
        class Hooks:
            def __getattr__(self, name):
                if not name.startswith("set_"):
                    raise AttributeError(name)
                return lambda address: calls.__setitem__(name, address)
        class Pluggable:
            _allocator = Hooks()
        print("missing", graphs.wire_hooks(Pluggable(), lib))
        for setter, function in HOOKS.items():
            want = ctypes.cast(getattr(lib, function), ctypes.c_void_p).value
            print(setter, "right" if calls.get(setter) == want and want else "WRONG %r" % calls.get(setter))
        class Old:
            class _allocator:
                set_record_stream_fn = staticmethod(lambda address: None)
                set_reset_fn = staticmethod(lambda address: None)
        import torch
        missing = graphs.wire_hooks(Old(), lib)
        print("old", missing)
        print("line", graphs.missing_hooks_line(torch, missing))
        """)
    lines = out.splitlines()
    check(rc == 0 and "missing []" in lines, "wire_hooks sets every hook torch 2.11 has", out[-600:])
    for setter in SETTERS:
        check("%s right" % setter in lines, "%s gets the library's hook address" % setter)
    check("old ['set_begin_allocate_to_pool', 'set_end_allocate_to_pool_fn', 'set_release_pool']" in lines,
          "an older torch's missing setters are named")
    said = [line for line in lines if line.startswith("line ")]
    check(len(said) == 1 and "set_begin_allocate_to_pool" in said[0] and "torch 2.3 or newer" in said[0],
          "the missing-hooks line says what does not work and what to do", repr(said))

    patched = """
        import torch
        from gpumemprof_torch import graphs
        {before}
        graphs.patch(torch)
        graphs.patch(torch)  # twice: no double wrapping
        import torch._inductor.config as config
        print("trees", config.triton.cudagraph_trees)
        for make in (lambda: torch.cuda.MemPool(), lambda: torch.cuda.memory.MemPool(None, True)):
            try:
                make()
                print("mempool made")
            except RuntimeError as e:
                print("mempool:", str(e).count(chr(10)), e)
        for name in ("_cuda_getCheckpointState", "_cuda_setCheckpointPoolState"):
            try:
                getattr(torch._C, name)(0, (1, 0))
                print("checkpoint answered")
            except RuntimeError as e:
                print("checkpoint:", name in str(e), e)
        print("patched", graphs.patched())
        """
    for before, when in (("", "inductor imported after install()"),
                         ("import torch._inductor.config", "inductor imported before install()")):
        rc, out = child(root, patched.format(before=before))
        lines = out.splitlines()
        check(rc == 0 and "trees False" in lines, "%s: inductor uses plain CUDA graphs" % when, out[-600:])
        refusals = [line for line in lines if line.startswith("mempool:")]
        check(len(refusals) == 2 and all(line.startswith("mempool: 0 gpumemprof_torch: torch.cuda.MemPool") and
                                         "graph_pool_handle" in line for line in refusals),
              "%s: MemPool() (both names) raises one line naming gpumemprof and the way out" % when, repr(refusals))
        cps = [line for line in lines if line.startswith("checkpoint")]
        check(len(cps) == 2 and all(line.startswith("checkpoint: True") and "cudagraph_trees = False" in line
                                    for line in cps),
              "%s: the checkpoint bindings refuse in one line naming the way out" % when, repr(cps))
        check(any("_cuda_getCheckpointState" in line and "MemPool.__init__" in line for line in lines
                  if line.startswith("patched")), "%s: patched() lists what was replaced" % when, out[-600:])

    # install() end to end: the allocator PyTorch is given carries every hook, and the refusals are in place.
    rc, out = child(root, """
        import ctypes, gpumemprof_torch as g
        from gpumemprof_torch import graphs
        import torch
        g.install()
        current = torch.cuda.memory.current
        lib = g._load()
        print("functions", current.functions[1:])
        for setter, function in HOOKS.items():
            want = ctypes.cast(getattr(lib, function), ctypes.c_void_p).value
            print(setter, "right" if current._allocator.set.get(setter) == want else "WRONG")
        try:
            torch.cuda.MemPool()
        except RuntimeError as e:
            print("refused", "gpumemprof" in str(e))
        import torch._inductor.config as config
        print("trees", config.triton.cudagraph_trees)
        """)
    lines = out.splitlines()
    check(rc == 0 and "functions ('gpumemprof_malloc', 'gpumemprof_free')" in lines,
          "install() hands PyTorch the bridge's malloc and free", out[-600:])
    check(all("%s right" % setter in lines for setter in SETTERS), "install() sets every hook on that allocator",
          out[-600:])
    check("refused True" in lines and "trees False" in lines,
          "after install(): MemPool() refused, inductor on plain graphs", out[-600:])

    print("%d failed" % len(failures) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
