"""Checks the gpumemprof_torch module without needing a GPU (and uses one when PyTorch sees one).

    check_torch_package.py [--packaged] [LIBRARY]

--packaged: the module was installed with pip and must find libgpumemprof_torch.so inside
itself. LIBRARY: the library to use otherwise ($GPUMEMPROF_TORCH_LIB). The module is imported
from the installed environment when --packaged, else from python/ of this checkout. Runs
itself in child processes to try each configuration variable.
"""
import ctypes
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_PYTHON = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
CONF_VARIABLES = ("GPUMEMPROF_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def child(packaged, env_update, code):
    env = {k: v for k, v in os.environ.items() if k not in CONF_VARIABLES}
    env.update(env_update)
    if not packaged:
        env["PYTHONPATH"] = SOURCE_PYTHON
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, timeout=120)
    return r.returncode, (r.stdout + r.stderr).strip()


def main():
    args = sys.argv[1:]
    packaged = "--packaged" in args
    args = [a for a in args if a != "--packaged"]
    if args:
        os.environ["GPUMEMPROF_TORCH_LIB"] = os.path.abspath(args[0])

    where = ("import gpumemprof_torch as g, os; p = g.library_path(); "
             "print(p); print(os.path.dirname(os.path.abspath(g.__file__)))")
    rc, out = child(packaged, {}, where)
    check(rc == 0, "the module imports and finds its library: " + out.replace("\n", " | "))
    if packaged and rc == 0:
        lib, pkg = out.splitlines()[-2:]
        check(os.path.dirname(lib) == pkg, "the pip-installed module uses the library packaged inside it")

    conf = ("import ctypes, gpumemprof_torch as g; lib = g._load(); "
            "lib.gpumemprof_alloc_conf.restype = ctypes.c_char_p; print(lib.gpumemprof_alloc_conf().decode())")
    rc, out = child(packaged, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, conf)
    check(rc == 0 and out.endswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
          "PYTORCH_CUDA_ALLOC_CONF configures the bridge when GPUMEMPROF_ALLOC_CONF is unset: " + out)
    rc, out = child(packaged, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                               "GPUMEMPROF_ALLOC_CONF": "max_split_size_mb:64"}, conf)
    check(rc == 0 and out.endswith("GPUMEMPROF_ALLOC_CONF=max_split_size_mb:64"), "GPUMEMPROF_ALLOC_CONF wins: " + out)
    rc, out = child(packaged, {}, conf)
    check(rc == 0 and out == "", "no variable, no configuration: %r" % out)

    stats = ("import gpumemprof_torch as g\ntry:\n    g.memory_stats(0)\n    print('no error')\n"
             "except RuntimeError as e:\n    print(e)")
    rc, out = child(packaged, {"PYTORCH_CUDA_ALLOC_CONF": "bogus_key:1"}, stats)
    check("$PYTORCH_CUDA_ALLOC_CONF='bogus_key:1'" in out and "bogus_key" in out.split("):", 1)[-1],
          "a bad PYTORCH_CUDA_ALLOC_CONF is named in the error: " + out)

    # Memory outside the allocator: True where CUPTI can track it (a GPU), else False with one line
    # saying why, said once however often asked.
    track = "import gpumemprof_torch as g\nprint(g.track_external_memory(), g.track_external_memory())"
    rc, out = child(packaged, {}, track)
    lines = out.splitlines()
    said = [line for line in lines if line.startswith("gpumemprof: memory outside the allocator is not tracked: ")]
    check(rc == 0 and (lines == ["True True"] or (len(lines) == 2 and "False False" in lines and len(said) == 1)),
          "track_external_memory() is on, or says once why not: %r" % out)

    install = """
import gpumemprof_torch as g
try:
    import torch
    gpu = torch.cuda.is_available()
except ImportError:
    gpu = False
if gpu:
    g.install()
    x = torch.empty(1 << 20, device="cuda")
    s = g.memory_stats()
    print("GPU", s["allocated_bytes.all.current"], g.installed())
else:
    try:
        g.install()
        print("installed without a GPU")
    except RuntimeError as e:
        print("NO-GPU", e)
"""
    rc, out = child(packaged, {}, install)
    if out.startswith("GPU"):
        check(rc == 0 and out.split()[1] == str(4 << 20) and out.split()[2] == "True",
              "install() makes gpumemprof PyTorch's allocator: " + out)
    else:
        check(rc == 0 and out.startswith("NO-GPU gpumemprof_torch.install(): ") and
              ("PyTorch is not importable" in out or "no CUDA GPU is visible" in out),
              "without a GPU, install() says why: " + out)

    # Without PyTorch, every entry point that needs it says so in one line naming itself (issue 29:
    # memory_stats() raised a bare ModuleNotFoundError where install() explained).
    no_torch = """
import sys
sys.modules["torch"] = None  # as where PyTorch is not installed
import gpumemprof_torch as g
calls = [("install()", lambda: g.install()), ("memory_stats()", lambda: g.memory_stats()),
         ("record_memory_history()", lambda: g.record_memory_history()),
         ("dump_snapshot()", lambda: g.dump_snapshot("/nonexistent/x.pickle")),
         ("dump_snapshots()", lambda: g.dump_snapshots("/nonexistent")),
         ("dump_on_oom()", lambda: g.dump_on_oom("/nonexistent")),
         ("category_stats()", lambda: g.category_stats()), ("reset_category_peaks()", lambda: g.reset_category_peaks()),
         ("empty_cache()", lambda: g.empty_cache()), ("profile()", lambda: g.profile("x").__enter__()),
         ("categorize()", lambda: g.categorize(object()))]
for name, call in calls:
    try:
        call()
        print(name, "no error")
    except RuntimeError as e:
        text = str(e)
        ok = text.startswith("gpumemprof_torch.%s: PyTorch is not importable here" % name) and "\\n" not in text
        print(name, "ok" if ok else "bad: " + text)
    except BaseException as e:  # noqa: BLE001 - what the check is about
        print(name, "bad: %s: %s" % (type(e).__name__, e))
"""
    rc, out = child(packaged, {}, no_torch)
    bad = [line for line in out.splitlines() if not line.endswith(" ok")]
    check(rc == 0 and len(out.splitlines()) == 11 and not bad,
          "without PyTorch every entry point raises one clear RuntimeError naming itself: %r" % (bad or out))

    # Categories: a thread's scopes nest and unwind on errors without a GPU; with one, categorize()
    # tags parameters, gradients, optimizer state and activations exactly (a two-layer MLP).
    scopes = """
import gpumemprof_torch as g
with g.category("input"):
    with g.category("kv_cache"):
        pass
try:
    with g.category("temporary"):
        raise KeyError("inner")
except KeyError:
    pass
lib = g._load()
print(lib.gpumemprof_pop_category(), lib.gpumemprof_last_error().decode())
"""
    rc, out = child(packaged, {}, scopes)
    check(rc == 0 and out == "-1 gpumemprof_pop_category: no category was pushed on this thread",
          "category() scopes push and pop in pairs, also when the block raises: " + out)
    categories = """
import gpumemprof_torch as g
try:
    import torch
except ImportError:
    torch = None
if torch is None or not torch.cuda.is_available():
    print("NO-GPU")
    raise SystemExit(0)
g.install()
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.Adam(m.parameters())
h = g.categorize(m, opt)
g.reset_category_peaks()
with g.category("input"):
    x = torch.randn(64, 256, device="cuda")
m(x).sum().backward()
opt.step()
s = g.category_stats()
params = sum(p.numel() * 4 for p in m.parameters())
steps = sum(4 for st in opt.state.values() for v in st.values() if torch.is_tensor(v) and v.is_cuda and v.dim() == 0)
blocks = sum((p.numel() * 4 + 511) // 512 * 512 for p in m.parameters())  # small-pool blocks: 512-byte multiples
print(s["parameter"]["current"] - params, s["parameter"]["allocated_current"] - blocks, s["gradient"]["current"] - params,
      s["optimizer_state"]["current"] - 2 * params - steps, s["input"]["peak"] - 64 * 256 * 4,
      s["activation"]["peak"] - 64 * 512 * 4, s["activation"]["current"])
h.remove()
"""
    rc, out = child(packaged, {}, categories)
    check(rc == 0 and out.splitlines()[-1:] in (["NO-GPU"], ["0 0 0 0 0 0 0"]),
          "categorize(): parameters (requested and block bytes), gradients, optimizer state, input and the ReLU's saved output exact "
          "(differences printed; activations freed by backward): " + out)

    # The Python frames an allocation carries with stacks="python": captured through the interpreter
    # this library is loaded into (ctypes releases the GIL; the capture takes it again), resolved to
    # file, line and function, innermost first; a thread of its own has its own frames.
    frames = """import threading, gpumemprof_torch as g
def forward():
    return g.python_stack()
def model():
    return forward()
out = []
t = threading.Thread(target=lambda: out.append(forward()))
t.start(); t.join()
for f in model()[2:5] + out[0][2:3]:
    print(f["filename"], f["line"], f["name"])
"""
    rc, out = child(packaged, {}, frames)
    check(rc == 0 and out.splitlines()[-4:] == ["<string> 3 forward", "<string> 5 model", "<string> 9 <module>",
                                                 "<string> 3 forward"],
          "python_stack(): the caller's Python frames with their lines, on the main thread and another: " + out)

    # A thread that runs no Python code (as autograd's): its allocations carry no Python frames, or,
    # with the waiting thread set (the launcher's --history), the frames of that thread, blocked
    # meanwhile. The frameless thread runs the library's function directly as its target.
    frameless = """import _thread, ctypes, json, time, gpumemprof_torch as g
lib = g._load()
def run_frameless():
    buf = ctypes.create_string_buffer(1 << 16)
    _thread.start_new_thread(lib.gpumemprof_python_stack_json, (buf, len(buf)))
    while not buf.value:
        time.sleep(0.01)
    return [(f["filename"], f["line"], f["name"]) for f in json.loads(buf.value)]
def waiting_in_backward():
    return run_frameless()
print(waiting_in_backward())
lib.gpumemprof_python_waiting_thread(1)
print([f[2] for f in waiting_in_backward()[:3]], waiting_in_backward()[1:3])
lib.gpumemprof_python_waiting_thread(0)
print(waiting_in_backward())
"""
    rc, out = child(packaged, {}, frameless)
    check(rc == 0 and out.splitlines()[-3:] == [
        "[]", "['run_frameless', 'waiting_in_backward', '<module>'] [('<string>', 10, 'waiting_in_backward'), "
        "('<string>', 13, '<module>')]", "[]"],
        "a thread without Python frames gets none, or the waiting thread's with gpumemprof_python_waiting_thread(1): " + out)

    print("%d checks failed" % len(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
