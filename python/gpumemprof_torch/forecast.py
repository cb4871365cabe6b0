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
With use_bridge=True each probe installs gpumemprof's allocator first and records with it (Python
stacks, as the native probe does).
With refine=True (the default), a forecast that is not confident and names a next probe that fits
in the device's free memory records that probe too and forecasts again ("refined_with"). Where
PyTorch's reduction buffers stop growing on this device is measured once, in a fresh process, and
given to the forecast (reduction_cap).
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


PROBE_HISTORY = 10_000_000  # entries a probe's history keeps


def _probe_main(argv):
    """In a probe's process: record, run the steps, dump the snapshot and the peaks."""
    where, name, size, steps, out, bridge = argv[0], argv[1], argv[2], int(argv[3]), argv[4], argv[5] == "1"
    sys.path.insert(0, os.getcwd())
    import torch
    size = int(size) if size.lstrip("-").isdigit() else float(size)
    # The same history either way: Python stacks, as PyTorch records them (the sites the probes'
    # requests are aligned by; with the bridge's default of C++ stacks every request had one site).
    if bridge:
        import gpumemprof_torch
        gpumemprof_torch.install()
        gpumemprof_torch.record_memory_history(max_entries=PROBE_HISTORY, stacks="python")
    else:
        torch.cuda.memory._record_memory_history(max_entries=PROBE_HISTORY, stacks="python")
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


# refine=True: the probe it adds must fit in the device's free memory (torch.cuda.mem_get_info in a
# fresh process, whose CUDA context is there as the probe's will be) with this margin over the high
# end of the forecast's range at that size: a tenth (the two-probe forecasts at twice the largest
# probe were within 2.6% on the H200 recordings, their ranges' high ends at most 2.0% under the
# actual) and 1 GiB for what CUDA libraries take outside the caching allocator (cuDNN, cuBLASLt,
# NCCL handles). docs/forecast.md, "Refine".
REFINE_MARGIN = 0.10
REFINE_RESERVE = 1 << 30


def _run_probe(where, name, size, steps, out, use_bridge, env, timeout):
    """Records one probe in a fresh process (see _probe_main); returns the peaks PyTorch reported."""
    code = "import sys; from gpumemprof_torch.forecast import _probe_main; _probe_main(sys.argv[1:])"
    p = subprocess.run([sys.executable, "-c", code, where, name, str(size), str(steps), out, "1" if use_bridge else "0"],
                       env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("gpumemprof_torch.forecast: the probe at size %s failed (exit %d):\n%s"
                           % (size, p.returncode, p.stderr[-4000:]))
    with open(out + ".json") as f:
        return json.load(f)


def _device_memory(env, timeout):
    """(free, total) bytes of the current CUDA device as a fresh process sees them."""
    code = "import json, torch; print(json.dumps(list(torch.cuda.mem_get_info())))"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("torch.cuda.mem_get_info failed (exit %d): %s" % (p.returncode, p.stderr.strip()[-400:]))
    free, total = json.loads(p.stdout.strip().splitlines()[-1])
    return free, total


# PyTorch's split reductions (a bias's gradient summed over batch x tokens) take a buffer that stops
# growing where their thread blocks fill the device, and the forecast needs that size
# (`gpumemprof forecast --reduction-cap`; docs/forecast.md, "Reduction buffers"). Measured in a fresh
# process: column sums of 16384 rows, long enough to reach it (on an H200 the buffers of 3072 and 2304
# columns stop between 3152 and 6304 rows, and grow again only at 16 times that), recorded as a
# snapshot; `gpumemprof reductions` finds the buffers in it, and the largest is the cap.
_REDUCTION_RUN_CODE = r"""
import sys, torch
torch.cuda.memory._record_memory_history(max_entries=100000)
for cols in (3072, 2304):
    x = torch.ones(16384, cols, device="cuda", dtype=torch.bfloat16)
    y = x.sum(0)
    del x, y
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(sys.argv[1])
"""


def _record_reductions(out, env, timeout):
    """Runs _REDUCTION_RUN_CODE in a fresh process, its snapshot written to `out`."""
    p = subprocess.run([sys.executable, "-c", _REDUCTION_RUN_CODE, out], env=env, capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("measuring the reduction buffers' cap failed (exit %d): %s"
                           % (p.returncode, p.stderr.strip()[-400:]))


def _reduction_cap(binary, folder, env, timeout):
    """Where PyTorch's reduction buffers stop growing on the current device: the largest that
    `gpumemprof reductions` finds in a fresh process's column sums (see _REDUCTION_RUN_CODE); None
    when it finds none."""
    out = os.path.join(folder, "reductions.pickle")
    _record_reductions(out, env, timeout)
    p = subprocess.run([binary, "reductions", "--json", out], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip() or "gpumemprof reductions failed (exit %d)" % p.returncode)
    return json.loads(p.stdout.strip().splitlines()[-1])["largest_bytes"] or None


def _run_forecast(binary, runs, at, timeout, capacity=None, config=None, tune=False, reduction_cap=None):
    """`gpumemprof forecast --json` over runs [(size, snapshot path)]: its JSON document as a dict."""
    args = [binary, "forecast", "--json", "--at", str(at)]
    for s, path in runs:
        args += ["--run", "%s=%s" % (s, path)]
    if capacity is not None:
        args += ["--capacity", str(capacity)]
    if reduction_cap is not None:
        args += ["--reduction-cap", str(reduction_cap)]
    if config is not None:
        args += ["--config", config]
    if tune:
        args.append("--tune")
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip() or "gpumemprof forecast failed (exit %d)" % p.returncode)
    return json.loads(p.stdout.strip().splitlines()[-1])


def _size(v):
    """A probe size from JSON (32.0) as the step function was given its others (32)."""
    return int(v) if float(v).is_integer() else v


def forecast(step_fn, sizes=(8, 16), at=64, capacity=None, steps=3, config=None, tune=False, use_bridge=False,
             workdir=None, timeout=1800, refine=True, reduction_cap="measure"):
    """Records a probe per size in `sizes` (2 or 3, each in a fresh process), then forecasts the
    peaks at `at` (see the module's doc). `capacity`: bytes or "79GiB" (what the allocator may use);
    `config`: a PYTORCH_CUDA_ALLOC_CONF to replay the target under; `tune`: replay the configs
    `gpumemprof tune` tries. Returns the forecast as a dict; raises RuntimeError with the command's
    one-line message when the probes cannot support a forecast.

    refine (default True): when the forecast is not confident and names a `next_probe` (twice the
    largest probe, below the target), and the forecast at that size (the high end of its range, plus
    REFINE_MARGIN and REFINE_RESERVE) fits in the device's free memory, that probe is recorded too
    (a fresh process, as the others) and the forecast is made again from the three largest probes
    (the command takes three). The result's "refined_with" is the size added (None when not), and
    "refine" says why it refined or not; "unrefined" holds the first forecast's figures. A probe
    that fails leaves the first forecast, with the reason.

    reduction_cap: where PyTorch's reduction buffers stop growing on the target device ("measure",
    the default: on this device, in a fresh process; bytes or "132.75MiB"; None: only where the probes
    show it). The result's "reduction_cap_bytes" says which was used."""
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
    runs, peaks = [], []

    def record(s):
        out = os.path.join(folder, "probe_%s.pickle" % s)
        peaks.append(_run_probe(where, name, s, steps, out, use_bridge, env, timeout))
        runs.append((s, out))

    for s in sizes:
        record(s)
    if reduction_cap == "measure":
        reduction_cap = _reduction_cap(binary, folder, env, timeout)
    options = dict(capacity=capacity, config=config, tune=tune, reduction_cap=reduction_cap)
    result = _run_forecast(binary, runs, at, timeout, **options)
    used = list(runs)
    result["refined_with"] = None
    if not refine:
        result["refine"] = "not refined: refine=False"
    elif result["confident"]:
        result["refine"] = "not refined: the forecast is confident"
    elif result.get("next_probe") is None:
        result["refine"] = "not refined: " + result.get("next_probe_shows", "no probe named")
    else:
        nxt = _size(result["next_probe"])
        why = None
        try:
            there = _run_forecast(binary, runs, nxt, timeout, reduction_cap=reduction_cap)
            need = int(max(there["peak_reserved_bytes"], there["peak_reserved_bytes_high"]) * (1 + REFINE_MARGIN)
                       + REFINE_RESERVE)
            free, _ = _device_memory(env, timeout)
            if need > free:
                why = ("not refined: a probe at %s would need about %d bytes (the forecast there, up to %d, a tenth "
                       "more and 1 GiB), more than the %d the device has free"
                       % (nxt, need, there["peak_reserved_bytes_high"], free))
            else:
                record(nxt)
                used = sorted(runs, key=lambda r: float(r[0]))[-3:]  # the three largest: nearest the target
                refined = _run_forecast(binary, used, at, timeout, **options)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            why = "not refined: %s" % (str(e).strip().splitlines() or ["failed"])[-1]
            used = list(runs[:len(sizes)])
        if why is None:
            first = {k: result[k] for k in ("peak_reserved_bytes", "peak_reserved_bytes_low", "peak_reserved_bytes_high",
                                            "confident", "next_probe", "next_probe_shows")}
            first["probe_sizes"] = [r[0] for r in runs[:len(sizes)]]
            result = refined
            result["refined_with"] = nxt
            result["unrefined"] = first
            result["refine"] = "refined with a probe at %s: %s" % (nxt, first["next_probe_shows"])
        else:
            result["refine"] = why
    result["probe_sizes"] = [r[0] for r in used]
    result["probe_snapshots"] = [r[1] for r in runs]
    result["probe_peaks"] = peaks
    return result
