#!/usr/bin/env python3
"""gpumemprof_torch.forecast(..., refine=True) without torch: the probe processes and the device's
free memory are replaced by fakes (recorded H200 probes of ResNet-50 from tests/data/forecast, and
a synthetic training loop), the forecasts are the real `gpumemprof forecast`. A forecast that is not
confident and names a next probe that fits in free memory records it and forecasts again from the
three largest probes; too little free memory, refine=False, a confident forecast, no probe named
or a probe that fails leave the first forecast, with the reason. Where reduction buffers stop (measured
on the device, faked here) is given to every forecast.

usage: test_forecast_refine.py GPUMEMPROF_BINARY"""
import gzip
import json
import os
import pickle
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import cli_checks  # noqa: E402

BIN = sys.argv[1]
os.environ["GPUMEMPROF_BIN"] = BIN
import gpumemprof_torch.forecast  # noqa: E402,F401

fc = sys.modules["gpumemprof_torch.forecast"]  # the module (the package's `forecast` is the function)
check = cli_checks.check
TMP = tempfile.mkdtemp(prefix="gpumemprof-refine-")
DATA = os.path.join(os.environ.get("GPUMEMPROF_SOURCE_DIR", os.path.join(HERE, "..", "..")), "tests", "data", "forecast")
GiB = 1 << 30


def step(size):  # the step function the probes would run (module-level, as forecast() requires)
    raise AssertionError("the fake probe runner never calls it")


def loop(p):
    """A training loop's history at size p: weights, activations in proportion, and a workspace of a
    fixed part and one in proportion (32 MiB + 8 MiB * p) live across the backward: two probes see
    it grow by no exact law (a range), a third puts it on a line."""
    trace, addr = [], [0x7F0000000000]

    def alloc(size):
        addr[0] += 1 << 32
        trace.append({"action": "alloc", "addr": addr[0], "size": size, "stream": 0, "time_us": len(trace),
                      "frames": []})
        return addr[0], size

    def free(block):
        for action in ("free_requested", "free_completed"):
            trace.append({"action": action, "addr": block[0], "size": block[1], "stream": 0, "time_us": len(trace),
                          "frames": []})

    weights = [alloc(3 * 2**20 + 512 * k) for k in range(4)]
    for _ in range(3):
        acts = [alloc(p * 6 * 2**20 * (layer + 1)) for layer in range(4)]
        extra = alloc((32 + 8 * p) * 2**20)
        for a in reversed(acts):
            free(alloc(a[1]))
            free(a)
        free(extra)
    for w in weights:
        free(w)
    return {"segments": [], "device_traces": [trace]}


def synthetic():
    paths = {}
    for p in (8, 16, 32, 64):
        paths[p] = os.path.join(TMP, f"loop_{p}.pickle")
        with open(paths[p], "wb") as f:
            pickle.dump(loop(p), f, protocol=4)
    return paths


RESNET = {s: os.path.join(DATA, f"resnet50_{s}.pickle.gz") for s in (8, 16, 32, 64)}
calls = []  # (size, out) per probe recorded


def fake_runner(snapshots, fail_at=None):
    def run_probe(where, name, size, steps, out, use_bridge, env, timeout):
        check((where, name) == (os.path.abspath(__file__), "step"), f"probe of {where}:{name}")
        calls.append(size)
        if size == fail_at:
            raise RuntimeError(f"gpumemprof_torch.forecast: the probe at size {size} failed (exit 1):\nCUDA out of memory")
        src = snapshots[size]
        with (gzip.open if src.endswith(".gz") else open)(src, "rb") as f, open(out, "wb") as g:
            shutil.copyfileobj(f, g)
        return {"reserved_bytes.all.peak": 0}
    return run_probe


def cli(runs, at):
    return fc._run_forecast(BIN, sorted(runs.items()), at, 300)


measured = []  # the snapshots the cap was measured from (the fake run's)


def run(snapshots, free=80 * GiB, fail_at=None, cap=None, **kw):
    """cap: the snapshot the fake measurement run writes (the real one sums columns on the device;
    None: ResNet-50's, which has no reduction buffers); `gpumemprof reductions` reads the cap from it."""
    cap = cap or RESNET[8]
    calls.clear()
    measured.clear()
    fc._run_probe = fake_runner(snapshots, fail_at)
    fc._device_memory = lambda env, timeout: (free, 141 * GiB)

    def record_reductions(out, env, timeout):
        measured.append(cap)
        shutil.copyfile(cap, out)
    fc._record_reductions = record_reductions
    return fc.forecast(step, workdir=tempfile.mkdtemp(dir=TMP), **kw)


# ResNet-50 8+16 -> 64 (recorded on an H200): not confident, names 32; refined with it, the result is
# the forecast from 8, 16 and 32, and the first one's figures are kept beside.
two = cli({8: RESNET[8], 16: RESNET[16]}, 64)
three = cli({s: RESNET[s] for s in (8, 16, 32)}, 64)
check(not two["confident"] and two["next_probe"] == 32, f"resnet50 8+16: {two['confident']} {two['next_probe']}")
f = run(RESNET, sizes=(8, 16), at=64)
check(calls == [8, 16, 32], f"probes recorded: {calls}")
check(f["refined_with"] == 32 and f["probe_sizes"] == [8, 16, 32], f"refined_with {f['refined_with']} {f['probe_sizes']}")
check(f["peak_reserved_bytes"] == three["peak_reserved_bytes"], "the refined forecast is not the three probes' forecast")
check(f["unrefined"]["peak_reserved_bytes"] == two["peak_reserved_bytes"] and f["unrefined"]["probe_sizes"] == [8, 16],
      f"unrefined: {f['unrefined']}")
check(f["refine"].startswith("refined with a probe at 32: whether "), f["refine"])
check(len(f["probe_snapshots"]) == 3 and len(f["probe_peaks"]) == 3, "every probe's snapshot and peaks are returned")

# Not enough free memory for the probe at 32 (its forecast's high end, a tenth more and 1 GiB): not recorded.
at32 = cli({8: RESNET[8], 16: RESNET[16]}, 32)
need = int(max(at32["peak_reserved_bytes"], at32["peak_reserved_bytes_high"]) * (1 + fc.REFINE_MARGIN)
           + fc.REFINE_RESERVE)
f = run(RESNET, free=need - 1, sizes=(8, 16), at=64)
check(calls == [8, 16] and f["refined_with"] is None, f"refined without the memory: {calls}")
check("more than the %d the device has free" % (need - 1) in f["refine"], f["refine"])
check(f["peak_reserved_bytes"] == two["peak_reserved_bytes"], "not refined, yet not the first forecast")
f = run(RESNET, free=need, sizes=(8, 16), at=64)
check(f["refined_with"] == 32, f"exactly enough free memory: {f['refine']}")

# refine=False; no probe named (the largest at half the target); a probe that fails.
f = run(RESNET, sizes=(8, 16), at=64, refine=False)
check(calls == [8, 16] and f["refined_with"] is None and f["refine"] == "not refined: refine=False", f["refine"])
f = run(RESNET, sizes=(8, 16), at=32)
check(calls == [8, 16] and f["refined_with"] is None and "only a run at 32 would decide" in f["refine"], f["refine"])
f = run(RESNET, fail_at=32, sizes=(8, 16), at=64)
check(calls == [8, 16, 32] and f["refined_with"] is None, f"a failed probe: {f['refined_with']}")
check(f["refine"] == "not refined: CUDA out of memory", f["refine"])
check(f["peak_reserved_bytes"] == two["peak_reserved_bytes"] and f["probe_sizes"] == [8, 16], "after a failed probe")

# The workspace of a fixed part and one in proportion: from 8 and 16 a range; the probe at 32 puts it
# on a line, and the forecast is the true run's replay, confident.
loop = synthetic()
truth = json.loads(cli_checks.run(BIN, "replay", loop[64], "--json").stdout.strip().splitlines()[-1])["devices"][0]
f = run(loop, sizes=(8, 16), at=64)
check(f.get("unrefined", {}).get("confident") is False, f"loop 8+16: {f['refine']}")
check(f["refined_with"] == 32 and f["confident"], f"loop: refined_with {f['refined_with']}, confident {f['confident']}")
check(f["peak_reserved_bytes"] == truth["peak_reserved_bytes"], "refined: not the true run's replay")
# Confident from the start (8, 16, 32): nothing added.
f = run(loop, sizes=(8, 16, 32), at=64)
check(calls == [8, 16, 32] and f["confident"] and f["refined_with"] is None and "confident" in f["refine"], f["refine"])
# Three probes given (ResNet-50 8, 16, 32 -> 128): the probe at 64 is added and the smallest dropped.
f = run(RESNET, sizes=(8, 16, 32), at=128)
check(calls == [8, 16, 32, 64] and f["probe_sizes"] == [16, 32, 64], f"three given: {calls} -> {f['probe_sizes']}")
check(f["refined_with"] == 64 and f["peak_reserved_bytes"] == cli({s: RESNET[s] for s in (16, 32, 64)}, 128)[
    "peak_reserved_bytes"], f"three given: {f['refine']}")

# Where reduction buffers stop: measured once (the fake run's snapshot is ConvNeXt-T at 64, whose
# largest reduction buffer is 132 MiB, as on the H200; `gpumemprof reductions` finds it) and given to
# every forecast; or given; or None: only where the probes show it (ConvNeXt-T 8+16 shows 132 MiB).
CONVNEXT = {s: os.path.join(DATA, f"convnext_t_{s}.pickle.gz") for s in (8, 16, 32, 64)}
f = run(CONVNEXT, cap=CONVNEXT[64], sizes=(8, 16), at=64, refine=False)
check(measured == [CONVNEXT[64]], f"measured: {measured}")
check(f["reduction_cap_bytes"] == 132 << 20 and not f["reduction_cap_shown"] and f["reduction_buffers_stopped"] == 45,
      f"measured cap: {f['reduction_cap_bytes']} shown {f['reduction_cap_shown']} {f['reduction_buffers_stopped']}")
f = run(CONVNEXT, cap=CONVNEXT[64], sizes=(8, 16), at=64, refine=False, reduction_cap="100MiB")
check(measured == [] and f["reduction_cap_bytes"] == 100 << 20, f"given cap: {f['reduction_cap_bytes']}")
f = run(CONVNEXT, sizes=(8, 16), at=64, refine=False, reduction_cap=None)
check(measured == [] and f["reduction_cap_bytes"] == 132 << 20 and f["reduction_cap_shown"],
      f"no cap given: {f['reduction_cap_bytes']} shown {f['reduction_cap_shown']}")
# Refined: the probe's forecast at the next size and the refined one get the measured cap too.
f = run(RESNET, cap=CONVNEXT[64], sizes=(8, 16), at=64)
check(measured == [CONVNEXT[64]] and f["refined_with"] == 32, f"refined with a measured cap: {f['refine']}")

# A probe's process records the same history natively and through the bridge: Python stacks, as
# PyTorch records them (the bridge's own default, C++ stacks, gave every request of a probe one site,
# and the forecasts from its snapshots differed from those from PyTorch's). Fakes for torch and the bridge.
import types  # noqa: E402

history, sizes_run = [], []
fake_torch = types.ModuleType("torch")
fake_torch.cuda = types.SimpleNamespace(
    memory=types.SimpleNamespace(_record_memory_history=lambda **kw: history.append(("torch", kw)),
                                 _dump_snapshot=lambda path: open(path, "wb").close()),
    synchronize=lambda: None, memory_stats=lambda: {"reserved_bytes.all.peak": 7})
bridge = sys.modules["gpumemprof_torch"]
saved = {k: getattr(bridge, k) for k in ("install", "record_memory_history", "dump_snapshot", "memory_stats")}
bridge.install = lambda: history.append(("install", {}))
bridge.record_memory_history = lambda **kw: history.append(("bridge", kw))
bridge.dump_snapshot = lambda path: open(path, "wb").close()
bridge.memory_stats = lambda: {"reserved_bytes.all.peak": 9}
step_file = os.path.join(TMP, "probe_step.py")
with open(step_file, "w") as fh:
    fh.write("ran = []\ndef step(size):\n    ran.append(size)\n")
sys.modules["torch"] = fake_torch
try:
    for use_bridge in ("0", "1"):
        history.clear()
        out = os.path.join(TMP, f"probe_{use_bridge}.pickle")
        fc._probe_main([step_file, "step", "8", "2", out, use_bridge])
        recorded = [kw for who, kw in history if who in ("torch", "bridge")]
        check(recorded == [{"max_entries": fc.PROBE_HISTORY, "stacks": "python"}] and
              [who for who, _ in history] == (["torch"] if use_bridge == "0" else ["install", "bridge"]),
              f"bridge={use_bridge}: history recorded as {history}")
        with open(out + ".json") as fh:
            peak = json.load(fh)["reserved_bytes.all.peak"]
        check(peak == (7 if use_bridge == "0" else 9), f"bridge={use_bridge}: peaks from the wrong allocator: {peak}")
finally:
    del sys.modules["torch"]
    for k, v in saved.items():
        setattr(bridge, k, v)

cli_checks.finish("forecast refine checks")
