#!/usr/bin/env python3
"""Records what PyTorch itself does, as reference data for gpumemprof's tests and benchmarks.

Needs a GPU and torch 2.11 (torchvision / transformers for the workloads that use them); random
initialisation only, nothing is downloaded. Each command runs in a fresh process (the caching
allocator's state and its settings are per process).

    record_references.py c10-replay TRACE POLICY OUT_PREFIX
        Replays TRACE (tests/data format) through PyTorch's own caching allocator with POLICY
        (default | expandable), as bench/gpu_compare.cpp does: one cold replay (live blocks freed
        at its end), then 3 warm replays on the same allocator. Writes OUT_PREFIX.json (peaks,
        device allocs/frees, segment maps/unmaps of each replay) and OUT_PREFIX.segments.txt
        (every segment_* history entry in order: replay index, action, address, size, stream).
    record_references.py driver OUT
        Raw cudaMalloc/cudaFree address sequences (through CuPy, bypassing every caching
        allocator): how the driver places allocations.
    record_references.py graphs OUT_DIR
        Snapshots (history from the start) of processes that use CUDA graphs and memory pools:
        torch.cuda.graph capture, torch.compile(mode="reduce-overhead"), torch.cuda.MemPool.
    record_references.py forecast WORKLOAD SIZE OUT_PREFIX
        One run of WORKLOAD at SIZE (batch size or sequence length) with history from the start:
        OUT_PREFIX.pickle (PyTorch's snapshot) and OUT_PREFIX.json (memory_stats at the end).
"""
import gzip
import json
import os
import random
import sys
import time


def read_trace(path):
    ops = []
    with gzip.open(path, "rt") as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            p = line.split()
            if p[0] == "a":
                ops.append((True, int(p[1]), int(p[2]), int(p[3])))
            else:
                ops.append((False, int(p[1]), 0, 0))
    return ops


def c10_replay(trace, policy, out_prefix):
    if policy == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        os.environ.pop("PYTORCH_ALLOC_CONF", None)
    import torch

    torch.cuda.init()
    ops = read_trace(trace)
    streams = {0: 0}
    keep = []
    for is_alloc, _, _, s in ops:
        if is_alloc and s not in streams:
            st = torch.cuda.Stream()
            keep.append(st)
            streams[s] = st.cuda_stream
    raw_alloc = torch._C._cuda_cudaCachingAllocator_raw_alloc
    raw_delete = torch._C._cuda_cudaCachingAllocator_raw_delete
    n_ids = 1 + max(op[1] for op in ops)
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")

    def once():
        ptr = [0] * n_ids
        t0 = time.perf_counter()
        for is_alloc, i, n, s in ops:
            if is_alloc:
                ptr[i] = raw_alloc(n, streams[s])
            else:
                raw_delete(ptr[i])
                ptr[i] = 0
        dt = time.perf_counter() - t0
        for p in ptr:
            if p:
                raw_delete(p)
        torch.cuda.synchronize()
        return dt

    result = {"trace": os.path.basename(trace), "policy": policy, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(0), "replays": []}
    marks = []
    for r in range(4):
        before = torch.cuda.memory_stats()
        once()
        st = torch.cuda.memory_stats()
        snap = torch.cuda.memory._snapshot()
        n_entries = len(snap["device_traces"][0])
        marks.append(n_entries)
        result["replays"].append({
            "kind": "cold" if r == 0 else "warm",
            "peak_allocated_bytes": st["allocated_bytes.all.peak"],
            "peak_reserved_bytes": st["reserved_bytes.all.peak"],
            "peak_requested_bytes": st.get("requested_bytes.all.peak", 0),
            "reserved_bytes_end": st["reserved_bytes.all.current"],
            "num_device_alloc": st["num_device_alloc"] - before.get("num_device_alloc", 0),
            "num_device_free": st["num_device_free"] - before.get("num_device_free", 0),
            "segment_count_end": st["segment.all.current"],
        })
        torch.cuda.reset_peak_memory_stats()
    snap = torch.cuda.memory._snapshot()
    trace_entries = snap["device_traces"][0]
    counts = [dict() for _ in range(4)]
    with open(out_prefix + ".segments.txt", "w") as f:
        f.write("# replay action address size stream  (PyTorch %s, %s, %s, policy %s)\n"
                % (torch.__version__, result["device"], result["trace"], policy))
        r = 0
        for k, e in enumerate(trace_entries):
            while r < 3 and k >= marks[r]:
                r += 1
            a = e["action"]
            if a.startswith("segment_") or a == "oom":
                counts[r][a] = counts[r].get(a, 0) + 1
                f.write("%d %s %d %d %d\n" % (r, a, e.get("addr", 0), e["size"], e["stream"]))
    for r in range(4):
        result["replays"][r]["segment_actions"] = counts[r]
    result["allocator_settings"] = snap.get("allocator_settings", {})
    result["final_stats"] = torch.cuda.memory_stats()
    with open(out_prefix + ".json", "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)


def driver(out):
    import cupy

    rt = cupy.cuda.runtime
    rng = random.Random(11)
    mib = 1 << 20
    sizes = [2 * mib, 20 * mib] + [k * 2 * mib for k in (11, 12, 25, 50, 100, 200, 400, 1000)]
    with open(out, "w") as f:
        free, total = rt.memGetInfo()
        f.write("# cudaMalloc/cudaFree through cupy.cuda.runtime; total %d free %d\n" % (total, free))
        for seq in range(3):
            f.write("# sequence %d\n" % seq)
            live = []
            for _ in range(600):
                if live and (len(live) >= 48 or rng.random() < 0.45):
                    p, n = live.pop(rng.randrange(len(live)))
                    rt.free(p)
                    f.write("f %d %d\n" % (p, n))
                else:
                    n = rng.choice(sizes) if seq != 1 else rng.randrange(1, 300) * 2 * mib
                    p = rt.malloc(n)
                    live.append((p, n))
                    f.write("a %d %d\n" % (p, n))
            for p, n in live:
                rt.free(p)
                f.write("f %d %d\n" % (p, n))
        # the same sizes in one process twice: are addresses reproducible from run to run?
        f.write("# sequence repeat\n")
        rng2 = random.Random(5)
        for rep in range(2):
            live = []
            for _ in range(100):
                n = rng2.choice(sizes)
                p = rt.malloc(n)
                live.append((p, n))
                f.write("a %d %d\n" % (p, n))
            for p, n in live:
                rt.free(p)
                f.write("f %d %d\n" % (p, n))


def graphs(out_dir):
    import torch

    os.makedirs(out_dir, exist_ok=True)
    which = os.environ.get("GRAPH_CASE", "capture")
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096),
                                torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
    x = torch.randn(256, 1024, device="cuda")
    info = {"case": which, "torch": torch.__version__}
    if which == "capture":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                y = model(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        static_x = x.clone()
        with torch.cuda.graph(g):
            static_y = model(static_x)
        outs = []
        for i in range(5):
            static_x.copy_(torch.randn(256, 1024, device="cuda"))
            g.replay()
            outs.append(float((static_y - model(static_x)).abs().max()))
        info["max_abs_diff"] = max(outs)
        # a second graph sharing the first's pool, then a training-ish eager part
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2, pool=g.pool()):
            static_z = model(static_y)
        g2.replay()
        big = [torch.randn(1 << 20, device="cuda") for _ in range(8)]
        del big
    elif which == "compile":
        m = torch.compile(model, mode="reduce-overhead")
        for i in range(6):
            y = m(torch.randn(256, 1024, device="cuda"))
        info["max_abs_diff"] = float((m(x) - model(x)).abs().max())
    elif which == "mempool":
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            a = [torch.randn(1 << 18, device="cuda") for _ in range(6)]
            b = torch.randn(64 << 20 >> 2, device="cuda")
        c = torch.randn(1 << 20, device="cuda")
        del a[1:4]
        info["pool_id"] = list(pool.id)
        info["pool_snapshot_segments"] = len(pool.snapshot())
    torch.cuda.synchronize()
    info["memory_stats"] = torch.cuda.memory_stats()
    torch.cuda.memory._dump_snapshot(os.path.join(out_dir, which + ".pickle"))
    with open(os.path.join(out_dir, which + ".json"), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)


# ---- forecast workloads: (build, step) pairs; SIZE is a batch size or a sequence length ----------

def _train(model, make_batch, loss_fn, opt, steps, autocast):
    for step in range(steps):
        x, y = make_batch(step)
        if autocast:
            with torch_mod().autocast("cuda", dtype=torch_mod().bfloat16):
                loss = loss_fn(model, x, y)
        else:
            loss = loss_fn(model, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def torch_mod():
    import torch

    return torch


def _vision(name, size, autocast, adamw, res=224, batch=None):
    import torch
    import torchvision

    model = getattr(torchvision.models, name)().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if adamw else torch.optim.SGD(
        model.parameters(), lr=0.01, momentum=0.9)
    b = batch if batch is not None else size

    def make_batch(step):
        g = torch.Generator(device="cuda").manual_seed(step)
        return (torch.randn(b, 3, res, res, device="cuda", generator=g),
                torch.randint(0, 1000, (b,), device="cuda", generator=g))

    _train(model, make_batch, lambda m, x, y: torch.nn.functional.cross_entropy(m(x), y), opt, 3, autocast)


def _lm(model, vocab, batch, seq):
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def make_batch(step):
        g = torch.Generator(device="cuda").manual_seed(step)
        ids = torch.randint(0, vocab, (batch, seq), device="cuda", generator=g)
        return ids, ids

    _train(model, make_batch, lambda m, x, y: m(input_ids=x, labels=y).loss, opt, 3, True)


def w_resnet50(size):
    _vision("resnet50", size, autocast=False, adamw=False)


def w_convnext_t(size):
    _vision("convnext_tiny", size, autocast=True, adamw=True)


def w_vit_b16(size):
    _vision("vit_b_16", size, autocast=True, adamw=True)


def w_resnet18_res(size):  # image side length: activations grow with its square
    _vision("resnet18", size, autocast=True, adamw=True, res=size, batch=16)


def w_resnet50_res(size):  # image side length, ResNet-50 in fp32 with SGD (as resnet50's batch runs)
    _vision("resnet50", size, autocast=False, adamw=False, res=size, batch=8)


def w_convnext_t_res(size):  # image side length, ConvNeXt-T with bf16 autocast and AdamW
    _vision("convnext_tiny", size, autocast=True, adamw=True, res=size, batch=8)


def w_gpt2_eager(size):  # sequence length; eager attention keeps batch x heads x seq^2 scores
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(attn_implementation="eager")).cuda()
    print("attention:", model.config._attn_implementation)
    _lm(model, 50257, 8, size)


def w_bert(size):  # sequence length, SDPA attention
    from transformers import BertConfig, BertForMaskedLM

    model = BertForMaskedLM(BertConfig()).cuda()
    _lm(model, 30522, 16, size)


def w_llama_generate(size):  # batch size; greedy decoding with a growing KV cache
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                      num_key_value_heads=16, vocab_size=32000, max_position_embeddings=1024)
    model = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
    with torch.no_grad():
        for rnd in range(2):
            g = torch.Generator(device="cuda").manual_seed(rnd)
            ids = torch.randint(0, 32000, (size, 64), device="cuda", generator=g)
            out = model(input_ids=ids, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
            for _ in range(96):
                out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
            del out, past, nxt


def w_moe_dyn(size):  # batch of size*128 tokens routed to 8 experts: data-dependent shapes
    import torch

    class MoE(torch.nn.Module):
        def __init__(self, d=1024, h=4096, experts=8):
            super().__init__()
            self.router = torch.nn.Linear(d, experts)
            self.experts = torch.nn.ModuleList(torch.nn.Sequential(
                torch.nn.Linear(d, h), torch.nn.GELU(), torch.nn.Linear(h, d)) for _ in range(experts))

        def forward(self, x):
            choice = self.router(x).argmax(-1)
            out = torch.zeros_like(x)
            for e, expert in enumerate(self.experts):
                idx = (choice == e).nonzero().squeeze(-1)  # how many: decided by the data
                if idx.numel():
                    out.index_add_(0, idx, expert(x[idx]).to(out.dtype))
            return out

    model = MoE().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def make_batch(step):
        g = torch.Generator(device="cuda").manual_seed(step)
        return torch.randn(size * 128, 1024, device="cuda", generator=g), None

    _train(model, make_batch, lambda m, x, y: m(x).float().pow(2).mean(), opt, 3, True)


def forecast(workload, size, out_prefix):
    import torch

    torch.backends.cudnn.benchmark = False
    ctx = None if workload in ("llama_generate", "moe_dyn") else "alloc"
    torch.cuda.memory._record_memory_history(enabled="all", context=ctx, stacks="python")
    t0 = time.time()
    globals()["w_" + workload](int(size))
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    torch.cuda.memory._dump_snapshot(out_prefix + ".pickle")
    with open(out_prefix + ".json", "w") as f:
        json.dump({"workload": workload, "size": int(size), "seconds": time.time() - t0,
                   "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                   "peak_reserved_bytes": st["reserved_bytes.all.peak"],
                   "peak_allocated_bytes": st["allocated_bytes.all.peak"],
                   "peak_requested_bytes": st.get("requested_bytes.all.peak", 0),
                   "num_alloc_requests": st["allocation.all.allocated"],
                   "num_device_alloc": st["num_device_alloc"], "memory_stats": st,
                   "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_ALLOC_CONF", ""))},
                  f, indent=1, sort_keys=True)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"c10-replay": c10_replay, "driver": driver, "graphs": graphs, "forecast": forecast}[cmd](*args)
