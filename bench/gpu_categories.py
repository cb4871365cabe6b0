#!/usr/bin/env python3
"""Memory by category: gpumemprof's tags (gpumemprof_torch.categorize) against torch.profiler's
memory timeline (export_memory_timeline), on the same training steps.

Workloads (random data and weights; nothing is downloaded):
  resnet50  torchvision ResNet-50, SGD with momentum, batch 16 of 3x224x224
  gpt2      transformers GPT2LMHeadModel(GPT2Config()) (GPT-2 small), AdamW, batch 4 x 256 tokens
Each workload runs twice, each in its own process and with the same seeds: on PyTorch's allocator
under torch.profiler (profile_memory, record_shapes, with_stack), whose export_memory_timeline JSON
gives per-category peaks, and on gpumemprof's allocator through the bridge with categorize(model,
optimizer) and category("input"), whose category_stats() give ours. Both count requested bytes
over the same steps (the model is built first: its parameters exist before the steps).
Checked: our parameter, gradient and optimizer_state peaks equal the bytes of those tensors at the
end (parameters with floating-point buffers, .grad, optimizer.state) and torch.profiler's peaks to
the byte; activation within 5% of torch's. The other categories are printed, not checked.

usage: bench/gpu_categories.py [--out DIR] [--steps N] [--workloads resnet50,gpt2]
Needs a CUDA GPU, torch, torchvision, transformers and libgpumemprof_torch.so (under build*/python/
or $GPUMEMPROF_TORCH_LIB).
"""

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# torch.profiler._memory_profiler's categories in its order; a timeline row holds index + 1.
TORCH_CATEGORIES = ("parameter", "optimizer_state", "input", "temporary", "activation", "gradient",
                    "autograd_detail", "unknown")
EXACT = ("parameter", "gradient", "optimizer_state")
WITHIN_5_PERCENT = ("activation",)


def make_resnet50(torch, gmp):
    import torchvision
    model = torchvision.models.resnet50(weights=None).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator(device="cuda").manual_seed(0)

    def batch():
        return (torch.randn(16, 3, 224, 224, device="cuda", generator=gen),
                torch.randint(0, 1000, (16,), device="cuda", generator=gen))

    def loss_of(inputs):
        x, y = inputs
        return loss_fn(model(x), y)

    return model, opt, batch, loss_of


def make_gpt2(torch, gmp):
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config()
    model = GPT2LMHeadModel(config).cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(0)

    def batch():
        return torch.randint(0, config.vocab_size, (4, 256), device="cuda", generator=gen)

    def loss_of(ids):
        return model(input_ids=ids, labels=ids).loss

    return model, opt, batch, loss_of


WORKLOADS = {"resnet50": make_resnet50, "gpt2": make_gpt2}


def own_bytes(torch, model, opt):
    """The bytes of the tensors themselves at the end of the steps (each CUDA storage once):
    parameters with floating-point buffers, gradients, optimizer state."""
    def total(tensors):
        seen = {}
        for t in tensors:
            if t is not None and t.is_cuda:
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return sum(seen.values())
    params = list(model.parameters())
    return {"parameter": total(params + [b for b in model.buffers() if b.is_floating_point()]),
            "gradient": total(p.grad for p in params),
            "optimizer_state": total(v for st in opt.state.values() for v in st.values() if torch.is_tensor(v))}


def child(workload, mode, steps, result_path, out_dir):
    """One workload in one mode ("torch": PyTorch's allocator under torch.profiler; "gpumemprof":
    the bridge with categories). Writes {category: peak bytes, ...} and context as JSON."""
    started = time.perf_counter()
    gmp = None
    if mode == "gpumemprof":
        sys.path.insert(0, os.path.join(REPO, "python"))
        import gpumemprof_torch as gmp
        gmp.install()  # before torch touches CUDA
    import torch
    torch.manual_seed(0)
    model, opt, batch, loss_of = WORKLOADS[workload](torch, gmp)
    torch.cuda.synchronize()

    def run_steps():
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            if gmp is not None:
                with gmp.category("input"):
                    inputs = batch()
            else:
                inputs = batch()
            loss = loss_of(inputs)
            loss.backward()
            opt.step()
            del inputs, loss
        torch.cuda.synchronize()

    result = {"workload": workload, "mode": mode, "torch": torch.__version__, "steps": steps,
              "device": torch.cuda.get_device_name()}
    if gmp is None:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
                     record_shapes=True, with_stack=True) as prof:
            run_steps()
        timeline_path = os.path.join(out_dir, "%s-torch-memory-timeline.json" % workload)
        t0 = time.perf_counter()
        prof.export_memory_timeline(timeline_path, device="cuda:0")
        result["export_seconds"] = time.perf_counter() - t0
        with open(timeline_path) as f:
            times, sizes = json.load(f)
        if not sizes or any(len(row) != 1 + len(TORCH_CATEGORIES) for row in sizes):
            raise RuntimeError("%s: expected rows of %d numbers, got %s" % (
                timeline_path, 1 + len(TORCH_CATEGORIES), sorted({len(r) for r in sizes})))
        result["rows"] = len(sizes)
        result["peaks"] = {name: max(row[i + 1] for row in sizes) for i, name in enumerate(TORCH_CATEGORIES)}
        result["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    else:
        tags = gmp.categorize(model, opt)
        gmp.reset_category_peaks()  # the steps' peaks, as the profiler sees them
        run_steps()
        stats = gmp.category_stats()
        result["peaks"] = {name: s["peak"] for name, s in stats.items()}
        result["current"] = {name: s["current"] for name, s in stats.items()}
        result["max_memory_allocated"] = gmp.memory_stats()["allocated_bytes.all.peak"]
        tags.remove()
    result["own_bytes"] = own_bytes(torch, model, opt)
    result["seconds"] = time.perf_counter() - started
    with open(result_path, "w") as f:
        json.dump(result, f, indent=1)


def tail(path, n=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return "(no log: %s)" % e


def print_table(workloads, results):
    """The markdown table of both runs of each workload; True when a check failed."""
    failed = False
    print("\nOwn bytes: the tensors' storages at the end (parameters with floating-point buffers, gradients,")
    print("optimizer state). Checked: ours equal to them; torch.profiler's equal to ours (exact) or within 5%.")
    print("\n| workload | category | own bytes | torch.profiler peak (bytes) | gpumemprof peak (bytes) | ours - torch | check |")
    print("|---|---|---:|---:|---:|---:|---|")
    for w in workloads:
        theirs = results.get((w, "torch"))
        ours = results.get((w, "gpumemprof"))
        if theirs is None or ours is None:
            continue
        names = list(TORCH_CATEGORIES) + sorted(set(ours["peaks"]) - set(TORCH_CATEGORIES))
        for name in names:
            t = theirs["peaks"].get(name)
            o = ours["peaks"].get(name, 0)
            own = ours.get("own_bytes", {}).get(name)
            diff = "" if t is None else "%+d (%+.2f%%)" % (o - t, 100.0 * (o - t) / t if t else 0.0)
            if name in EXACT:
                own_ok = own == o and o > 0
                ok = own_ok and t == o
                check = "ours = own: %s; torch exact: %s" % ("ok" if own_ok else "FAIL", "ok" if t == o else "FAIL")
            elif name in WITHIN_5_PERCENT:
                ok = t is not None and t > 0 and abs(o - t) <= 0.05 * t
                check = "within 5%%: %s" % ("ok" if ok else "FAIL")
            else:
                ok, check = True, "(not compared)"
            failed = failed or not ok
            print("| %s | %s | %s | %s | %d | %s | %s |" % (w, name, "" if own is None else "%d" % own,
                                                          "-" if t is None else "%d" % t, o, diff, check))
        print("| %s | (peak allocated, whole run) | | %d | %d | | |" % (
            w, theirs["max_memory_allocated"], ours["max_memory_allocated"]))
        if theirs.get("own_bytes") != ours.get("own_bytes"):
            print("| %s | (own bytes differ between the runs: torch %s) | | | | | FAIL |" % (w, theirs.get("own_bytes")))
            failed = True
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu-categories-out")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--workloads", default="resnet50,gpt2")
    ap.add_argument("--timeout", type=int, default=150)
    ap.add_argument("--child", nargs=3, metavar=("WORKLOAD", "MODE", "RESULT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.child:
        child(args.child[0], args.child[1], args.steps, args.child[2], args.out)
        return 0

    workloads = [w for w in args.workloads.split(",") if w]
    procs = []
    for w in workloads:  # all at once: each process holds a few GiB of the GPU at most
        for mode in ("torch", "gpumemprof"):
            result = os.path.join(args.out, "%s-%s.json" % (w, mode))
            log = os.path.join(args.out, "%s-%s.log" % (w, mode))
            if os.path.exists(result):
                os.remove(result)
            cmd = [sys.executable, os.path.abspath(__file__), "--out", args.out, "--steps", str(args.steps),
                   "--child", w, mode, result]
            procs.append((w, mode, result, log, subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)))
    failed = False
    results = {}
    for w, mode, result, log, p in procs:
        try:
            rc = p.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "timeout after %d s" % args.timeout
        if rc != 0 or not os.path.exists(result):
            print("gpu_categories: FAIL: %s on %s: exit %s; the end of %s:\n%s" % (w, mode, rc, log, tail(log)))
            failed = True
            continue
        with open(result) as f:
            results[(w, mode)] = json.load(f)
        print("gpu_categories: %s on %s: %.1f s, torch %s, %s" % (
            w, mode, results[(w, mode)]["seconds"], results[(w, mode)]["torch"], results[(w, mode)]["device"]))

    failed = print_table(workloads, results) or failed
    print("\ngpu_categories: %s" % ("FAIL" if failed else "all checks passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
