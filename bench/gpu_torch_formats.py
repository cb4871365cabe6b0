"""Keeps gpumemprof up with PyTorch's snapshot formats and memory_stats keys (run on a GPU host
with torch; under two minutes).

    python3 bench/gpu_torch_formats.py BUILD_DIR [OUT_DIR]

BUILD_DIR: a gpumemprof build with CUDA (tools/gpumemprof, python/libgpumemprof_torch.so).
OUT_DIR (default $OUT, else ./gpu-out/torch_formats): the snapshots and logs.

1. Records a small workload once per torch.cuda.memory._record_memory_history option (enabled
   state/all, context None/state/alloc/all, stacks python/all (torch 2.11 refuses "cpp": "expected stacks to be 'python', or 'all'"), a small max_entries,
   compile_context with torch.compile, skip_actions, clear_history) and dumps each snapshot.
2. Reads each back with `gpumemprof summary`, `gpumemprof replay --json` (peak reserved against
   the recorded one: parity) and `gpumemprof diff` against the first snapshot.
3. Compares torch.cuda.memory_stats() keys with gpumemprof's (gpumemprof_torch.memory_stats()),
   and the schema of torch's snapshot (top-level, segment, block, trace entry, frame keys) with
   the one gpumemprof writes through the bridge.
Every step's failure is reported and the rest goes on; the last line says how many failed.
"""
import inspect
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
results = []  # (step, ok, detail)


def step(name, fn, *args, **kwargs):
    t0 = time.time()
    try:
        detail = fn(*args, **kwargs)
        results.append((name, True, detail or ""))
        print("ok    %-48s %5.1f s  %s" % (name, time.time() - t0, detail or ""), flush=True)
        return True
    except Exception as e:  # noqa: BLE001 -- every failure is reported, the rest goes on
        msg = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
        results.append((name, False, msg))
        print("FAIL  %-48s %5.1f s  %s" % (name, time.time() - t0, msg), flush=True)
        with open(os.path.join(OUT, "errors.log"), "a") as f:
            f.write("== %s\n%s\n" % (name, traceback.format_exc()))
        return False


def run(cmd, timeout=60):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode not in (0, 1):  # diff exits 1 over budget; anything else is a failure
        raise RuntimeError("%s exited %d: %s" % (" ".join(cmd[:3]), r.returncode, (r.stderr or r.stdout).strip()[-400:]))
    return r


def workload(torch, compiled=False):
    """A small training loop: an MLP with backward and an optimizer step, some frees, a cache flush."""
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fn = torch.compile(model, backend="eager") if compiled else model
    for i in range(4):
        x = torch.randn(256, 512, device="cuda")
        loss = fn(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        big = torch.empty(12 << 20, dtype=torch.uint8, device="cuda")  # a large-pool block
        del big
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = torch.ones(1 << 20, device="cuda")
    y.record_stream(torch.cuda.current_stream())
    del y
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    keep = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # live at the dump
    return model, opt, keep


def record(torch, name, options, compiled=False, clear_midway=False):
    memory = torch.cuda.memory
    supported = inspect.signature(memory._record_memory_history).parameters
    unknown = [k for k in options if k not in supported]
    if unknown:
        raise RuntimeError("this torch's _record_memory_history has no %s" % ", ".join(unknown))
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    memory._record_memory_history(**options)
    try:
        kept = workload(torch, compiled)
        if clear_midway:
            memory._record_memory_history(**dict(options, clear_history=True))
            kept = workload(torch, compiled)
        path = os.path.join(OUT, name + ".pickle")
        memory._dump_snapshot(path)
        del kept
    finally:
        memory._record_memory_history(enabled=None)
    snapshots.append((name, path))
    return "%d bytes" % os.path.getsize(path)


def check_summary(path):
    r = run([GPUMEMPROF, "summary", path])
    lines = r.stdout.strip().splitlines()
    return lines[-1][:100] if lines else "(no output)"


def check_replay(path):
    r = run([GPUMEMPROF, "replay", path, "--json"])
    report = json.loads(r.stdout)
    notes = []
    for d in report["devices"]:
        ours, recorded = d["peak_reserved_bytes"], d["recorded_peak_reserved_bytes"]
        notes.append("device %s: replayed peak reserved %d, recorded %d%s" % (
            d["device"], ours, recorded, "" if ours == recorded else " (DIFFERS by %d)" % (ours - recorded)))
        if d.get("unknown_frees"):
            notes.append("%d unknown frees" % d["unknown_frees"])
    with open(path + ".replay.json", "w") as f:
        f.write(r.stdout)
    if any("DIFFERS" in n for n in notes):
        raise RuntimeError("; ".join(notes))
    return "; ".join(notes)


def check_diff(base, path):
    r = run([GPUMEMPROF, "diff", base, path])
    with open(path + ".diff.txt", "w") as f:
        f.write(r.stdout)
    return "%d lines" % len(r.stdout.splitlines())


def schema(snapshot):
    """The key sets of a snapshot dict, by level."""
    keys = {"top": set(snapshot)}
    segs = snapshot.get("segments", [])
    keys["segment"] = set().union(*(set(s) for s in segs)) if segs else set()
    blocks = [b for s in segs for b in s.get("blocks", [])]
    keys["block"] = set().union(*(set(b) for b in blocks)) if blocks else set()
    entries = [e for t in snapshot.get("device_traces", []) for e in t]
    keys["trace entry"] = set().union(*(set(e) for e in entries)) if entries else set()
    frames = [f for e in entries for f in e.get("frames", [])] + [f for b in blocks for f in b.get("frames", [])]
    keys["frame"] = set().union(*(set(f) for f in frames)) if frames else set()
    keys["actions"] = {e.get("action") for e in entries}
    keys["allocator_settings"] = set(snapshot.get("allocator_settings", {}))
    return keys


OURS_SCRIPT = r"""
import json, pickle, sys
import gpumemprof_torch
gpumemprof_torch.install()
import torch
sys.path.insert(0, sys.argv[2])
from gpu_torch_formats import workload
gpumemprof_torch.record_memory_history("all")
kept = workload(torch)
gpumemprof_torch.dump_snapshot(sys.argv[1])
print(json.dumps(sorted(gpumemprof_torch.memory_stats())))
"""


def compare_with_ours(torch):
    env = dict(os.environ, GPUMEMPROF_TORCH_LIB=os.path.join(BUILD, "python", "libgpumemprof_torch.so"),
               PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH", "")]))
    ours_path = os.path.join(OUT, "gpumemprof_bridge.pickle")
    r = subprocess.run([sys.executable, "-c", OURS_SCRIPT, ours_path, HERE], env=env, capture_output=True,
                       text=True, timeout=90)
    if r.returncode != 0:
        raise RuntimeError("the bridge run failed: " + r.stderr.strip()[-400:])
    ours_keys = set(json.loads(r.stdout.strip().splitlines()[-1]))
    torch_keys = set(torch.cuda.memory_stats())
    lines = ["memory_stats: torch %d keys, gpumemprof %d" % (len(torch_keys), len(ours_keys)),
             "  only in torch: " + (", ".join(sorted(torch_keys - ours_keys)) or "none"),
             "  only in gpumemprof: " + (", ".join(sorted(ours_keys - torch_keys)) or "none")]
    import pickle
    with open(dict(snapshots)["default"], "rb") as f:
        theirs = schema(pickle.load(f))
    with open(ours_path, "rb") as f:
        ours = schema(pickle.load(f))
    for level in theirs:
        missing, extra = theirs[level] - ours[level], ours[level] - theirs[level]
        lines.append("snapshot %-18s only in torch: %-40s only in gpumemprof: %s" % (
            level, ", ".join(sorted(map(str, missing))) or "none", ", ".join(sorted(map(str, extra))) or "none"))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(OUT, "keys.txt"), "w") as f:
        f.write(text + "\n")
    snapshots.append(("gpumemprof_bridge", ours_path))
    return "differences in keys.txt" if torch_keys != ours_keys else "memory_stats keys identical"


def main():
    global OUT, BUILD, GPUMEMPROF
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    BUILD = os.path.abspath(sys.argv[1])
    OUT = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("OUT") or "gpu-out/torch_formats")
    os.makedirs(OUT, exist_ok=True)
    GPUMEMPROF = os.path.join(BUILD, "tools", "gpumemprof")
    import torch
    print("torch %s, CUDA %s, %s" % (torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0)), flush=True)

    variants = [
        ("default", {"enabled": "all"}, {}),
        ("enabled_state", {"enabled": "state"}, {}),
        ("context_none", {"enabled": "all", "context": None}, {}),
        ("context_state", {"enabled": "all", "context": "state"}, {}),
        ("context_alloc", {"enabled": "all", "context": "alloc"}, {}),
        ("context_all", {"enabled": "all", "context": "all"}, {}),
        ("stacks_python", {"enabled": "all", "stacks": "python"}, {}),
        ("stacks_all", {"enabled": "all", "stacks": "all"}, {}),
        ("max_entries_50", {"enabled": "all", "max_entries": 50}, {}),
        ("compile_context", {"enabled": "all", "compile_context": True}, {"compiled": True}),
        ("skip_free_requested", {"enabled": "all", "skip_actions": ["free_requested"]}, {}),
        ("clear_history", {"enabled": "all"}, {"clear_midway": True}),
    ]
    for name, options, extra in variants:
        step("record " + name, record, torch, name, options, **extra)
    step("compare keys and schema with gpumemprof", compare_with_ours, torch)
    base = snapshots[0][1] if snapshots else None
    for name, path in snapshots:
        step("summary " + name, check_summary, path)
        step("replay " + name, check_replay, path)
        if base and path != base:
            step("diff default " + name, check_diff, base, path)
    failed = [r for r in results if not r[1]]
    print("%d steps, %d failed%s" % (len(results), len(failed), (": " + ", ".join(r[0] for r in failed)) if failed else ""))
    return 1 if failed else 0


snapshots = []
OUT = BUILD = GPUMEMPROF = None
if __name__ == "__main__":
    sys.exit(main())
