"""Will it fit? Forecast the peak memory of a training step at a larger batch or sequence length.

    import gpumemprof_torch

    def step(batch):                 # a module-level function: each probe imports it anew
        ...                          # build (or reuse) the model, run one step at this size

    if __name__ == "__main__":
        f = gpumemprof_torch.forecast(step, sizes=(8, 16), at=64, capacity="79GiB")
        print(f["peak_reserved_bytes"], f["fits"], f["warnings"])

Each probe runs in its own Python process (a fresh CUDA context and allocator: a second probe in
the same process would start from the first one's cached segments), records PyTorch's history from
the start (torch.cuda.memory._record_memory_history, with Python stacks), calls the step `steps`
times at that size, and dumps a snapshot. `step_fn(size)` is called once per step; when it returns
a callable, that callable is the step instead (so the first call can build the model). Then the
`gpumemprof forecast` command (found through $GPUMEMPROF_BIN, PATH, or a Meson build folder of
this checkout) forecasts the target from the snapshots; the result is its JSON document as a dict,
with "probe_snapshots" (the files) and "probe_peaks" (what PyTorch reported in each probe).
With use_bridge=True each probe installs gpumemprof's allocator first and records with it.
"""
import glob
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

__all__ = ["forecast", "gpumemprof_binary"]


def gpumemprof_binary():
    """The gpumemprof command: $GPUMEMPROF_BIN, else on PATH, else build*/tools/gpumemprof here."""
    env = os.environ.get("GPUMEMPROF_BIN")
    if env and os.path.isfile(env):
        return env
    found = shutil.which("gpumemprof")
    if found:
        return found
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for c in sorted(glob.glob(os.path.join(repo, "build*", "tools", "gpumemprof"))):
        if os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("gpumemprof_torch.forecast: the gpumemprof command was not found ($GPUMEMPROF_BIN, PATH, "
                            "build*/tools/gpumemprof); build it (ninja -C build tools/gpumemprof) or set GPUMEMPROF_BIN")


def _where(step_fn):
    """How a probe process finds step_fn again: (module name or script path, qualified name)."""
    name = getattr(step_fn, "__qualname__", "")
    module = getattr(step_fn, "__module__", None)
    if not name or "<locals>" in name or "<lambda>" in name or module is None:
        raise ValueError("gpumemprof_torch.forecast: step_fn must be a module-level function (each probe runs in "
                         "a fresh process that imports it), got %r" % (step_fn,))
    if module == "__main__":
        path = getattr(sys.modules["__main__"], "__file__", None)
        if not path:
            raise ValueError("gpumemprof_torch.forecast: step_fn is defined in an interactive session; put it in a "
                             "module or script so each probe's process can import it")
        return os.path.abspath(path), name
    return module, name


def _load(where, name):
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location("gpumemprof_forecast_probe", where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # the script's `if __name__ == "__main__":` part does not run
    else:
        module = importlib.import_module(where)
    obj = module
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _probe_main(argv):
    """In a probe's process: record, run the steps, dump the snapshot and the peaks."""
    where, name, size, steps, out, bridge = argv[0], argv[1], argv[2], int(argv[3]), argv[4], argv[5] == "1"
    sys.path.insert(0, os.getcwd())
    import torch
    size = int(size) if size.lstrip("-").isdigit() else float(size)
    if bridge:
        import gpumemprof_torch
        gpumemprof_torch.install()
        gpumemprof_torch.record_memory_history()
    else:
        torch.cuda.memory._record_memory_history(max_entries=10_000_000, stacks="python")
    step_fn = _load(where, name)
    step = None
    for _ in range(steps):
        r = step() if step is not None else step_fn(size)
        if step is None and callable(r):
            step = r
            step()
    torch.cuda.synchronize()
    peaks = {}
    if bridge:
        import gpumemprof_torch
        gpumemprof_torch.dump_snapshot(out)
        stats = gpumemprof_torch.memory_stats()
    else:
        torch.cuda.memory._dump_snapshot(out)
        stats = torch.cuda.memory_stats()
    for key in ("reserved_bytes.all.peak", "allocated_bytes.all.peak", "requested_bytes.all.peak"):
        peaks[key] = stats.get(key)
    with open(out + ".json", "w") as f:
        json.dump(peaks, f)


def forecast(step_fn, sizes=(8, 16), at=64, capacity=None, steps=3, config=None, tune=False, use_bridge=False,
             workdir=None, timeout=1800):
    """Records a probe per size in `sizes` (2 or 3, each in a fresh process), then forecasts the
    peaks at `at` (see the module's doc). `capacity`: bytes or "79GiB" (what the allocator may use);
    `config`: a PYTORCH_CUDA_ALLOC_CONF to replay the target under; `tune`: replay the configs
    `gpumemprof tune` tries. Returns the forecast as a dict; raises RuntimeError with the command's
    one-line message when the probes cannot support a forecast."""
    sizes = list(sizes)
    if len(sizes) not in (2, 3):
        raise ValueError("gpumemprof_torch.forecast: sizes takes 2 or 3 probe sizes, got %r" % (sizes,))
    if config is not None and tune:
        raise ValueError("gpumemprof_torch.forecast: give config or tune, not both")
    binary = gpumemprof_binary()
    where, name = _where(step_fn)
    folder = workdir or tempfile.mkdtemp(prefix="gpumemprof-forecast-")
    os.makedirs(folder, exist_ok=True)
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    paths, peaks = [], []
    for s in sizes:
        out = os.path.join(folder, "probe_%s.pickle" % s)
        code = "import sys; from gpumemprof_torch.forecast import _probe_main; _probe_main(sys.argv[1:])"
        p = subprocess.run([sys.executable, "-c", code, where, name, str(s), str(steps), out, "1" if use_bridge else "0"],
                           env=env, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("gpumemprof_torch.forecast: the probe at size %s failed (exit %d):\n%s"
                               % (s, p.returncode, p.stderr[-4000:]))
        paths.append(out)
        with open(out + ".json") as f:
            peaks.append(json.load(f))
    args = [binary, "forecast", "--json", "--at", str(at)]
    for s, path in zip(sizes, paths):
        args += ["--run", "%s=%s" % (s, path)]
    if capacity is not None:
        args += ["--capacity", str(capacity)]
    if config is not None:
        args += ["--config", config]
    if tune:
        args.append("--tune")
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip() or "gpumemprof forecast failed (exit %d)" % p.returncode)
    result = json.loads(p.stdout.strip().splitlines()[-1])
    result["probe_snapshots"] = paths
    result["probe_peaks"] = peaks
    return result

