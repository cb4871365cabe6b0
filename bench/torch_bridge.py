#!/usr/bin/env python3
"""PyTorch training on gpumemprof's allocator vs PyTorch's own, through the bridge
(python/gpumemprof_torch, libgpumemprof_torch.so).

Workloads (random data, random weights: nothing is downloaded):
  resnet50  torchvision ResNet-50, SGD with momentum, batch 32 of 3x224x224
  gpt2      transformers GPT2LMHeadModel(GPT2Config()), AdamW, batch 8 x 512 tokens
Each workload runs on each allocator in its own subprocess (a pluggable allocator must be set
before the first CUDA allocation): `warmup` steps, then `steps` timed steps (synchronized); the
median step time and the peak reserved/allocated bytes are printed and written as JSON. Both
runs must compute the same losses (the same seeds: the first step's within 1e-4, later ones
within 2%). The gpumemprof run then records history for one more step and writes a snapshot,
which must pass `python3 -m torch.cuda._memory_viz stats` and hold that step's allocations in
segments whose blocks add up.

usage: bench/torch_bridge.py [--out DIR] [--steps N] [--warmup N] [--workloads resnet50,gpt2]
Needs a CUDA GPU, torch, torchvision and transformers, and a CUDA build of gpumemprof
(libgpumemprof_torch.so under build*/python/ or $GPUMEMPROF_TORCH_LIB).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOCATORS = ("native", "gpumemprof")
MIB = 1 << 20


def fail(message):
    print("torch_bridge: FAIL: " + message, flush=True)


# ---------------------------------------------------------------------------------------------
# The child: one workload on one allocator.

def make_resnet50(torch, wrap=lambda model: model):
    """A training step; `wrap` wraps the model (e.g. in DistributedDataParallel)."""
    import torchvision
    model = wrap(torchvision.models.resnet50(weights=None).cuda())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator(device="cuda").manual_seed(0)

    def step():
        x = torch.randn(32, 3, 224, 224, device="cuda", generator=gen)
        y = torch.randint(0, 1000, (32,), device="cuda", generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def make_gpt2(torch, wrap=lambda model: model):
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config()
    model = wrap(GPT2LMHeadModel(config).cuda())
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(0)

    def step():
        ids = torch.randint(0, config.vocab_size, (8, 512), device="cuda", generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    return step


WORKLOADS = {"resnet50": make_resnet50, "gpt2": make_gpt2}


def child(workload, allocator, steps, warmup, result_path, snapshot_path):
    gmp = None
    if allocator == "gpumemprof":
        sys.path.insert(0, os.path.join(REPO, "python"))
        import gpumemprof_torch as gmp
        gmp.install()  # before torch touches CUDA memory
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to torch")
    torch.manual_seed(0)
    step = WORKLOADS[workload](torch)
    losses = []  # every step's loss: the parent compares them with the native allocator's
    for _ in range(warmup):
        losses.append(step())
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss)
    losses = [float(x.item()) for x in losses]  # read after timing: .item() synchronizes
    if not torch.isfinite(loss).item():
        raise RuntimeError("the loss is not finite: %s" % loss.item())
    if gmp is not None:
        stats = gmp.memory_stats()
        reserved_peak = stats["reserved_bytes.all.peak"]
        allocated_peak = stats["allocated_bytes.all.peak"]
        num_alloc_retries = stats["num_alloc_retries"]
    else:
        reserved_peak = torch.cuda.max_memory_reserved()
        allocated_peak = torch.cuda.max_memory_allocated()
        num_alloc_retries = torch.cuda.memory_stats().get("num_alloc_retries", 0)
    result = {
        "workload": workload, "allocator": allocator, "device": torch.cuda.get_device_name(),
        "torch": torch.__version__, "steps": steps, "warmup": warmup,
        "median_step_s": statistics.median(times), "min_step_s": min(times),
        "reserved_peak_bytes": reserved_peak, "allocated_peak_bytes": allocated_peak,
        "num_alloc_retries": num_alloc_retries, "loss": float(loss.item()), "losses": losses,
    }
    if gmp is not None and snapshot_path:
        gmp.record_memory_history("all", max_entries=200000)
        with gmp.profile("train_step") as r:
            step()
        result["profiled_step"] = {"seconds": r.seconds, "peak_bytes": r.peak_bytes,
                                   "allocations": r.allocations, "net_bytes": r.net_bytes}
        gmp.dump_snapshot(snapshot_path)
        result["snapshot"] = snapshot_path
    with open(result_path, "w") as f:
        json.dump(result, f, indent=1)


# ---------------------------------------------------------------------------------------------
# The parent: every workload on every allocator, then the table and the snapshot checks.

def run_child(args, workload, allocator):
    result_path = os.path.join(args.out, "torch_%s_%s.json" % (workload, allocator))
    snapshot_path = os.path.join(args.out, "torch_%s_gpumemprof.pickle" % workload) if allocator == "gpumemprof" else ""
    log_path = os.path.join(args.out, "torch_%s_%s.log" % (workload, allocator))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", workload, allocator, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--result", result_path, "--snapshot", snapshot_path]
    print("== %s on %s allocator (log: %s)" % (workload, allocator, log_path), flush=True)
    with open(log_path, "w") as log:
        try:
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout after %d s" % args.timeout
    if rc != 0 or not os.path.exists(result_path):
        with open(log_path) as log:
            tail = log.read()[-3000:]
        fail("%s on %s exited %s:\n%s" % (workload, allocator, rc, tail))
        return None
    with open(result_path) as f:
        return json.load(f)


def check_same_training(native, ours):
    """The allocator must not change what is computed: the same seeds give the same losses. The
    first step's loss (identical weights and data, before any update) within 1e-4 relative;
    later steps within 2% (cuDNN's and cuBLAS's backward kernels may sum in another order)."""
    a, b = native.get("losses", []), ours.get("losses", [])
    if len(a) != len(b) or not a:
        fail("%s: %d losses on the native allocator, %d on gpumemprof" % (native["workload"], len(a), len(b)))
        return False
    rel = [abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b)]
    ok = rel[0] <= 1e-4 and max(rel) <= 0.02
    print("-- %s: losses on gpumemprof vs native: first step %.3g relative, largest %.3g (step %d)" %
          (native["workload"], rel[0], max(rel), rel.index(max(rel))))
    if not ok:
        fail("%s: gpumemprof's run computed other losses than the native allocator's: %s vs %s" %
             (native["workload"], b[:5], a[:5]))
    if not ours["allocated_peak_bytes"] <= ours["reserved_peak_bytes"]:
        fail("%s: peak allocated above peak reserved on gpumemprof" % native["workload"])
        ok = False
    return ok


def check_snapshot_contents(path, result):
    """What the snapshot holds: segments, the profiled step's history, and blocks within them."""
    import pickle
    try:
        with open(path, "rb") as f:
            snap = pickle.load(f)
    except Exception as e:  # noqa: BLE001 -- reported as the check's failure
        fail("%s does not load as a pickle: %s" % (path, e))
        return False
    segments = snap.get("segments", [])
    traces = [t for t in snap.get("device_traces", []) if t]
    reserved = sum(s["total_size"] for s in segments)
    allocs = sum(1 for t in traces for e in t if e.get("action") == "alloc")
    bad_blocks = [s["address"] for s in segments if sum(b["size"] for b in s["blocks"]) != s["total_size"]]
    ok = segments and traces and allocs >= result["profiled_step"]["allocations"] and not bad_blocks
    print("-- %s: %d segments (%.1f MiB), %d trace entries, %d allocations (the profiled step made %d)" %
          (path, len(segments), reserved / MIB, sum(map(len, traces)), allocs, result["profiled_step"]["allocations"]))
    if not ok:
        fail("%s: the snapshot is incomplete (segments %d, traces %d, allocations %d, segments whose blocks do not "
             "add up %s)" % (path, len(segments), len(traces), allocs, bad_blocks[:3]))
    return bool(ok)


def check_snapshot(path):
    """`python3 -m torch.cuda._memory_viz stats FILE` must read the snapshot."""
    try:
        r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", path], capture_output=True,
                           text=True, timeout=600)
    except subprocess.TimeoutExpired:
        fail("torch.cuda._memory_viz stats %s took over 600 s" % path)
        return False
    print("-- torch.cuda._memory_viz stats %s (exit %d):\n%s%s" % (path, r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
    ok = r.returncode == 0
    if not ok:
        fail("torch.cuda._memory_viz stats could not read %s" % path)
    checker = os.path.join(REPO, "tools", "check_snapshot.py")
    c = subprocess.run([sys.executable, checker, path], capture_output=True, text=True)
    print("-- tools/check_snapshot.py (exit %d): %s%s" % (c.returncode, c.stdout[-1500:], c.stderr[-1500:]))
    return ok and c.returncode == 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "torch-bridge-out"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--workloads", default="resnet50,gpt2")
    p.add_argument("--timeout", type=int, default=900, help="seconds per run")
    p.add_argument("--child", nargs=2, metavar=("WORKLOAD", "ALLOCATOR"), help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--snapshot", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be at least 1 and --warmup at least 0")
    if args.child:
        child(args.child[0], args.child[1], args.steps, args.warmup, args.result, args.snapshot)
        return 0

    os.makedirs(args.out, exist_ok=True)
    workloads = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        fail("unknown workload(s) %s; choose from %s" % (", ".join(unknown), ", ".join(WORKLOADS)))
        return 2
    import importlib.util
    needed = {"torch": "torch", "resnet50": "torchvision", "gpt2": "transformers"}
    for module in ["torch"] + [needed[w] for w in workloads]:
        if importlib.util.find_spec(module) is None:
            fail("python module %r is not installed (needed for %s)" % (module, ", ".join(workloads)))
            return 1
    try:
        sys.path.insert(0, os.path.join(REPO, "python"))
        import gpumemprof_torch
        print("bridge library: " + gpumemprof_torch.library_path())
    except Exception as e:  # noqa: BLE001 -- report and stop: nothing below can run
        fail(str(e))
        return 1

    ok = True
    results = []
    for w in workloads:
        for a in ALLOCATORS:
            r = run_child(args, w, a)
            ok = ok and r is not None
            if r is not None:
                results.append(r)
                if a == "gpumemprof" and r.get("snapshot"):
                    ok = check_snapshot(r["snapshot"]) and ok
                    ok = check_snapshot_contents(r["snapshot"], r) and ok
        native = [r for r in results if r["workload"] == w and r["allocator"] == "native"]
        ours = [r for r in results if r["workload"] == w and r["allocator"] == "gpumemprof"]
        if native and ours:
            ok = check_same_training(native[0], ours[0]) and ok
    with open(os.path.join(args.out, "torch_bridge.json"), "w") as f:
        json.dump(results, f, indent=1)

    print("\n%-9s %-11s %14s %14s %16s %16s  %s" % ("workload", "allocator", "median step", "best step",
                                                    "peak reserved", "peak allocated", "device"))
    for r in results:
        print("%-9s %-11s %11.2f ms %11.2f ms %12.1f MiB %12.1f MiB  %s" % (
            r["workload"], r["allocator"], r["median_step_s"] * 1e3, r["min_step_s"] * 1e3,
            r["reserved_peak_bytes"] / MIB, r["allocated_peak_bytes"] / MIB, r["device"]))
    print("\ntorch_bridge: %s" % ("all runs passed" if ok else "FAILED (see above)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
