#!/usr/bin/env python3
"""The PyTorch bridge on a GPU host (torch 2.11): torch.cuda's memory API, Python stacks, step time.

    gpu_bridge.py memory-api            # run under python -m gpumemprof_torch.run: each torch.cuda memory
                                        # function vs gpumemprof_torch.memory_stats(); own history + dump
    gpu_bridge.py history-script        # a small model whose allocations the launcher's --history names
    gpu_bridge.py stacks ALLOC          # ResNet-50 and BERT-base (batch 16 x 256) steps: history off /
                                        # stacks=python / stacks=all (ALLOC: native or gpumemprof),
                                        # interleaved, median ms per mode
    gpu_bridge.py bert ALLOC [CONF]     # BERT-base MLM, variable sequence lengths, bf16 autocast, AdamW:
                                        # median step ms and per-step device mallocs/frees/syncs
    gpu_bridge.py pairs ALLOC           # host ns per CUDA tensor allocated and freed from Python (torch.empty)
    gpu_bridge.py compare LOG...        # the native-vs-bridge table of `bert` and `stacks` lines

Every line a check prints starts with "ok " or "FAIL "; measurements are "RESULT {json}" lines.
bench/gpu_bridge.sh runs them all.
"""
import json
import os
import statistics
import sys
import time

MIB = 1 << 20


def say(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    return ok


def result(**kv):
    print("RESULT " + json.dumps(kv, sort_keys=True), flush=True)


def use_allocator(alloc):
    """Installs gpumemprof's allocator for ALLOC=gpumemprof (before any CUDA use)."""
    import torch
    if alloc == "gpumemprof":
        import gpumemprof_torch
        gpumemprof_torch.install()
    return torch


# ---------------------------------------------------------------------------------------------
# Item 1: a plain script's memory calls under the launcher.

def memory_api():
    import pickle
    import tempfile
    import torch
    from torch.cuda import max_memory_reserved as early_max_reserved  # imported as scripts do
    import gpumemprof_torch as gt
    d = int(os.environ.get("LOCAL_RANK", "0"))  # under torchrun: this rank's GPU, set as DDP scripts do
    torch.cuda.set_device(d)
    say(gt.installed(), "the launcher installed gpumemprof's allocator (cuda:%d)" % d)
    say(sorted(gt.memory_api.patched()) != [], "torch._C bindings answered by gpumemprof: %s" % gt.memory_api.patched())
    torch.cuda.memory._record_memory_history(max_entries=100000)  # PyTorch's defaults: stacks="all"
    x = torch.randn(1024, 1024, device="cuda")     # 4 MiB
    y = torch.randn(3000, device="cuda")           # small pool
    z = (x @ x).relu()
    torch.cuda.synchronize()
    ours = gt.memory_stats()
    for name, key in (("memory_allocated", "allocated_bytes.all.current"),
                      ("max_memory_allocated", "allocated_bytes.all.peak"),
                      ("memory_reserved", "reserved_bytes.all.current"),
                      ("max_memory_reserved", "reserved_bytes.all.peak")):
        for label, fn in (("torch.cuda", getattr(torch.cuda, name)), ("torch.cuda.memory", getattr(torch.cuda.memory, name))):
            for dev in (None, d, "cuda:%d" % d, "cuda", torch.device("cuda", d)):
                got = fn(dev)
                say(got == ours[key], "%s.%s(%r) = %d, gpumemprof %s = %d" % (label, name, dev, got, key, ours[key]))
    say(early_max_reserved() == ours["reserved_bytes.all.peak"], "a name imported before install answers from gpumemprof")
    stats = torch.cuda.memory_stats()
    say(dict(stats) == ours, "memory_stats() equals gpumemprof_torch.memory_stats() (%d keys)" % len(stats))
    say(set(stats) >= {"allocation.all.current", "num_alloc_retries", "num_ooms", "requested_bytes.all.peak",
                       "oversize_allocations.current", "max_split_size", "num_device_alloc"},
        "PyTorch's keys are there")
    summary = torch.cuda.memory_summary()
    say("Allocated memory" in summary and "GPU reserved memory" in summary, "memory_summary() prints PyTorch's table")
    say(isinstance(torch.cuda.memory_snapshot(), list) and len(torch.cuda.memory_snapshot()) >= 2,
        "memory_snapshot(): a list of segments")
    # Reset semantics: peaks fall to current, accumulated counts to 0.
    del z
    torch.cuda.reset_peak_memory_stats()
    s = torch.cuda.memory_stats()
    say(s["allocated_bytes.all.peak"] == s["allocated_bytes.all.current"] == torch.cuda.memory_allocated(),
        "reset_peak_memory_stats(): peak = current (%d)" % s["allocated_bytes.all.peak"])
    torch.cuda.reset_accumulated_memory_stats(d)
    s = torch.cuda.memory_stats(d)
    say(s["allocated_bytes.all.allocated"] == 0 and s["allocation.all.freed"] == 0 and s["num_device_alloc"] == 0,
        "reset_accumulated_memory_stats(%d): allocated/freed counts 0" % d)
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    say(torch.cuda.memory_reserved() <= before, "empty_cache(): reserved %d -> %d" % (before, torch.cuda.memory_reserved()))
    torch.cuda.set_per_process_memory_fraction(0.5)
    say(torch.cuda.get_per_process_memory_fraction() == 0.5, "set/get_per_process_memory_fraction")
    try:
        torch.empty(int(torch.cuda.get_device_properties(d).total_memory * 0.6), dtype=torch.uint8, device="cuda")
        say(False, "an allocation beyond the 0.5 fraction succeeded")
    except RuntimeError as e:  # gpumemprof's OOM reaches Python as a RuntimeError
        say("out of memory" in str(e), "the 0.5 fraction caps allocations: %s" % str(e).splitlines()[0][:160])
    torch.cuda.set_per_process_memory_fraction(1.0)
    path = os.path.join(tempfile.mkdtemp(), "mine.pickle")
    torch.cuda.memory._dump_snapshot(path)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    frames = [f for seg in snap["segments"] for b in seg["blocks"] for f in (b.get("frames") or [])]
    mine = [f for f in frames if f["filename"].endswith("gpu_bridge.py")]
    say(len(mine) > 0, "the script's own _dump_snapshot holds gpumemprof's snapshot with its Python lines: %s"
        % sorted({"%s:%d %s" % (os.path.basename(f["filename"]), f["line"], f["name"]) for f in mine})[:4])
    say(any(not f["filename"].endswith(".py") for f in frames), "stacks='all' (PyTorch's default) adds C++ frames")
    torch.cuda.memory._record_memory_history(None)
    gt.restore_memory_api()
    try:
        torch.cuda.memory_stats()
        say(False, "after restore_memory_api(), memory_stats answered")
    except RuntimeError as e:
        say("getDeviceStats" in str(e) or "not" in str(e), "after restore_memory_api() PyTorch answers again: %s" % e)
    del x, y


def history_script():
    """A small model; run under the launcher with --history, its summary's top sites must name this file."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(1024, 4096)
            self.b = torch.nn.Linear(4096, 1024)

        def forward(self, x):
            h = self.a(x).relu()          # the activation the summary should name
            return self.b(h)

    net = Net().cuda()
    opt = torch.optim.AdamW(net.parameters())
    keep = []
    for _ in range(3):
        x = torch.randn(2048, 1024, device="cuda")
        loss = net(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        keep.append(net(x).detach())   # live at the end: named by the summary
    torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------
# Item 2: the cost of stacks on a ResNet-50 step.

def _time_modes(torch, name, alloc, step):
    """Median step ms with history off, stacks="python" and stacks="all" (context "all"), interleaved."""
    modes = {"off": None, "python": "python", "all": "all"}
    times = {m: [] for m in modes}
    for _ in range(3):
        step()
    for _round in range(3):
        for mode, st in modes.items():
            if st is None:
                torch.cuda.memory._record_memory_history(None)
            else:
                torch.cuda.memory._record_memory_history("all", stacks=st, max_entries=100000)
            step()  # first step in a mode: not timed
            for _ in range(5):
                torch.cuda.synchronize()
                t = time.perf_counter()
                step()
                torch.cuda.synchronize()
                times[mode].append((time.perf_counter() - t) * 1e3)
    torch.cuda.memory._record_memory_history(None)
    for mode in modes:
        result(bench=name, alloc=alloc, mode=mode, median_ms=round(statistics.median(times[mode]), 3),
               steps=len(times[mode]))


def stacks(alloc):
    torch = use_allocator(alloc)
    import torchvision
    model = torchvision.models.resnet50(weights=None).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (32,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    _time_modes(torch, "resnet50_stacks", alloc, step)
    del model, opt, x, y
    try:
        from transformers import BertConfig, BertForMaskedLM
    except ImportError as e:
        print("no transformers (%s): no transformer step" % e)
        return
    cfg = BertConfig()
    bert = BertForMaskedLM(cfg).cuda().train()
    bopt = torch.optim.AdamW(bert.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (16, 256), device="cuda")

    def bert_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = bert(input_ids=ids, labels=ids).loss
        loss.backward()
        bopt.step()
        bopt.zero_grad(set_to_none=True)

    _time_modes(torch, "bert256_stacks", alloc, bert_step)


# ---------------------------------------------------------------------------------------------
# Item 3: BERT-base MLM with variable sequence lengths.

COUNTERS = ("num_device_alloc", "num_device_free", "num_sync_all_streams", "num_alloc_retries", "allocation.all.allocated")


def bert(alloc, conf=""):
    if conf:
        os.environ["PYTORCH_ALLOC_CONF"] = conf
    torch = use_allocator(alloc)
    from transformers import BertConfig, BertForMaskedLM
    import random
    cfg = BertConfig()
    model = BertForMaskedLM(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(0)
    lengths = [rng.choice(range(64, 513, 64)) for _ in range(16)]
    batch = 16

    def step(n):
        ids = torch.randint(0, cfg.vocab_size, (batch, n), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    times, counts = [], {k: [] for k in COUNTERS}
    for i, n in enumerate(lengths):
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()
        t = time.perf_counter()
        step(n)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t) * 1e3
        after = torch.cuda.memory_stats()
        if i >= 4:
            times.append(dt)
            for k in COUNTERS:
                counts[k].append(after.get(k, 0) - before.get(k, 0))
    result(bench="bert_mlm_varlen", alloc=alloc, conf=conf or "default", median_ms=round(statistics.median(times), 3),
           steps_ms=[round(t, 2) for t in times],
           per_step={k: round(sum(v) / len(v), 2) for k, v in counts.items()},
           peak_reserved_mib=round(torch.cuda.max_memory_reserved() / MIB, 1))


def pairs(alloc):
    """Host time of one CUDA tensor's allocation and free from Python (torch.empty + del), through
    PyTorch's whole path: the bridge's extra (pluggable allocator, C ABI) shows against native.
    bench/gpu_pairprobe.py measures it (and splits it further)."""
    torch = use_allocator(alloc)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_pairprobe
    for label, best in gpu_pairprobe.tensor_pairs(torch):
        result(bench="tensor_alloc_free_ns", alloc=alloc, mode=label, median_ms=round(best / 1e6, 6), ns=round(best, 1))


def compare(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            rows += [json.loads(line[7:]) for line in f if line.startswith("RESULT ")]
    by = {}
    for r in rows:
        key = (r["bench"], r.get("conf", ""), r.get("mode", ""), r["alloc"])
        by.setdefault(key, []).append(r["median_ms"])
    print("| bench | conf/mode | native ms (runs) | gpumemprof ms (runs) | bridge/native |")
    print("|---|---|---|---|---|")
    for (bench, conf, mode, alloc) in sorted(by):
        if alloc != "native":
            continue
        nat = by[(bench, conf, mode, "native")]
        ours = by.get((bench, conf, mode, "gpumemprof"), [])
        ratio = statistics.median(ours) / statistics.median(nat) if ours else float("nan")
        runs = lambda vs: "%.4g (%s)" % (statistics.median(vs), " / ".join("%.4g" % v for v in vs))  # noqa: E731
        print("| %s | %s | %s | %s | %.3f |" % (bench, conf or mode, runs(nat), runs(ours) if ours else "-", ratio))


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "memory-api":
        memory_api()
    elif cmd == "history-script":
        history_script()
    elif cmd == "stacks":
        stacks(args[0])
    elif cmd == "bert":
        bert(args[0], args[1] if len(args) > 1 else "")
    elif cmd == "pairs":
        pairs(args[0])
    elif cmd == "compare":
        compare(args)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
