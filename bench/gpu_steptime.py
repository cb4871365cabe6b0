#!/usr/bin/env python3
"""Step time, native PyTorch allocator vs gpumemprof's bridge (issue 30's table), on a GPU host.

    gpu_steptime.py run ALLOC RUN     one process: the four models in sequence (ALLOC native or gpumemprof;
                                      the policy from $PYTORCH_ALLOC_CONF), a RESULT line per model
    gpu_steptime.py table LOG         the markdown table of a log's RESULT lines

Models, from torch.nn only (sizes fit the whole script in about 240 s of GPU time):
    bert     BERT-like encoder MLM (6 layers, d=512), batch 16, sequence lengths 64..512: the warm-up sees
             each of the 8 lengths once, then each step draws one (seeded: the same in every process),
             bf16 autocast, AdamW
    convnext ConvNeXt-like CNN (depthwise 7x7 blocks, 4 stages), batch 32 at 160x160, bf16 autocast, AdamW
    gpt2     GPT-2-like causal LM (6 layers, d=512), batch 8 x 512 tokens, bf16 autocast, AdamW
    llama    Llama-like decoder (6 layers, d=512, RMSNorm, SwiGLU) generating 128 tokens for 8 prompts of 64,
             with a KV cache that grows by torch.cat every token; one step = one whole generation
Median step (ms, torch.cuda.synchronize() around each) of 20 steps after warm-up (llama: 4 after 1). bench/gpu_steptime.sh
interleaves 3 runs of each (allocator, policy).
"""
import json
import os
import statistics
import sys
import time
import traceback

CONF = os.environ.get("PYTORCH_ALLOC_CONF", "") or "default"
MIB = 1 << 20


def result(**kv):
    print("RESULT " + json.dumps(kv, sort_keys=True), flush=True)


# memory_stats counters per measured step (the same keys on both allocators): what the allocator did.
COUNTERS = {"device_mallocs": "num_device_alloc", "device_frees": "num_device_free",
            "sync_all_streams": "num_sync_all_streams", "allocations": "allocation.all.allocated"}


def timed_steps(torch, step, warmup, steps):
    """Times of `steps` steps after `warmup`, and COUNTERS' change per measured step."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    after = torch.cuda.memory_stats()
    per_step = {name: round((after.get(key, 0) - before.get(key, 0)) / steps, 2) for name, key in COUNTERS.items()}
    return times, per_step


def encoder_lm(torch, nn, vocab, max_len, d=512, layers=6):
    """Token and position embeddings, pre-norm transformer layers, a vocabulary head; and AdamW.
    BERT-like as it is; GPT-2-like with a causal mask."""
    layer = nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.1, batch_first=True, norm_first=True,
                                       activation="gelu")
    model = nn.ModuleDict({"emb": nn.Embedding(vocab, d), "pos": nn.Embedding(max_len, d),
                           "enc": nn.TransformerEncoder(layer, layers, enable_nested_tensor=False),
                           "head": nn.Linear(d, vocab)}).cuda()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def lm_loss(torch, nn, model, tokens, labels, vocab, mask=None):
    """encoder_lm's cross-entropy on `tokens` against `labels` (causal with `mask`)."""
    n = tokens.shape[1]
    h = model["emb"](tokens) + model["pos"](torch.arange(n, device="cuda"))
    h = model["enc"](h) if mask is None else model["enc"](h, mask=mask, is_causal=True)
    return nn.functional.cross_entropy(model["head"](h).float().reshape(-1, vocab), labels.reshape(-1))


def train_step(torch, opt, loss):
    """A training step: loss() under bf16 autocast, backward, AdamW's step."""
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            value = loss()
        value.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def bert(torch, nn):
    vocab = 8192
    model, opt = encoder_lm(torch, nn, vocab, 512)
    gen = torch.Generator().manual_seed(1234)
    lengths = [64, 128, 192, 256, 320, 384, 448, 512]

    order = iter(lengths)  # the warm-up sees every length once; then they come at random

    def loss():
        n = next(order, None) or lengths[int(torch.randint(0, len(lengths), (1,), generator=gen))]
        tokens = torch.randint(0, vocab, (16, n), generator=gen).cuda(non_blocking=True)
        labels = torch.randint(0, vocab, (16, n), generator=gen).cuda(non_blocking=True)
        return lm_loss(torch, nn, model, tokens, labels, vocab)

    return train_step(torch, opt, loss), len(lengths), 20


def convnext(torch, nn):
    class CNBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
            self.norm = nn.GroupNorm(1, c)
            self.pw1 = nn.Conv2d(c, 4 * c, 1)
            self.pw2 = nn.Conv2d(4 * c, c, 1)

        def forward(self, x):
            return x + self.pw2(nn.functional.gelu(self.pw1(self.norm(self.dw(x)))))

    dims, depths = [64, 128, 256, 512], [2, 2, 4, 2]
    layers = [nn.Conv2d(3, dims[0], 4, stride=4)]
    for i, (c, n) in enumerate(zip(dims, depths)):
        if i > 0:
            layers += [nn.GroupNorm(1, dims[i - 1]), nn.Conv2d(dims[i - 1], c, 2, stride=2)]
        layers += [CNBlock(c) for _ in range(n)]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(dims[-1], 1000)]
    model = nn.Sequential(*layers).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(32, 3, 160, 160, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (32,), device="cuda")

    return train_step(torch, opt, lambda: nn.functional.cross_entropy(model(x).float(), y)), 4, 20


def gpt2(torch, nn):
    vocab, n = 8192, 512
    model, opt = encoder_lm(torch, nn, vocab, n)
    tokens = torch.randint(0, vocab, (8, n + 1), device="cuda")
    mask = nn.Transformer.generate_square_subsequent_mask(n, device="cuda")

    return train_step(torch, opt, lambda: lm_loss(torch, nn, model, tokens[:, :-1], tokens[:, 1:], vocab, mask)), 4, 20


def llama(torch, nn):
    vocab, d, heads, n_layers = 8192, 512, 8, 6
    hd = d // heads
    F = nn.functional

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return self.w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = RMSNorm(), RMSNorm()
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.gate = nn.Linear(d, 1536, bias=False)
            self.up = nn.Linear(d, 1536, bias=False)
            self.down = nn.Linear(1536, d, bias=False)

        def forward(self, x, cache):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, t, 3, heads, hd).permute(2, 0, 3, 1, 4)
            if cache:
                k = torch.cat([cache[0], k], dim=2)  # the cache grows: a new, larger tensor each token
                v = torch.cat([cache[1], v], dim=2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=not cache)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            x = x + self.down(F.silu(self.gate(self.n2(x))) * self.up(self.n2(x)))
            return x, (k, v)

    emb = nn.Embedding(vocab, d).cuda().to(torch.bfloat16)
    layers = nn.ModuleList(Layer() for _ in range(n_layers)).cuda().to(torch.bfloat16)
    head = nn.Linear(d, vocab, bias=False).cuda().to(torch.bfloat16)
    prompt = torch.randint(0, vocab, (8, 64), device="cuda")

    @torch.no_grad()
    def step():
        caches = [None] * n_layers
        tok = prompt
        for _ in range(128):
            x = emb(tok)
            for i, layer in enumerate(layers):
                x, caches[i] = layer(x, caches[i])
            tok = head(x[:, -1:]).argmax(-1)

    return step, 1, 4


MODELS = {"bert": bert, "convnext": convnext, "gpt2": gpt2, "llama": llama}


def each_model(torch, names, measure, prefix, label):
    """measure(name) for each model name, seeded alike; an exception prints a traceback and the line
    "PREFIX: FAILED name label: ..." and the next model still runs; the memory it left is freed after each."""
    import gc
    for name in names:
        try:
            torch.manual_seed(0)
            measure(name)
        except Exception as e:  # noqa: BLE001 - one line per failure, the others still run
            traceback.print_exc()
            print("%s: FAILED %s %s: %s: %s" % (prefix, name, label, type(e).__name__, (str(e).splitlines() or [""])[0]),
                  flush=True)
        finally:
            gc.collect()
            torch.cuda.empty_cache()


def run(alloc, run_id):
    import torch
    if alloc == "gpumemprof":
        import gpumemprof_torch
        gpumemprof_torch.install()
    import torch.nn as nn

    def measure(name):
        t0 = time.perf_counter()
        torch.cuda.reset_peak_memory_stats()
        step, warmup, steps = MODELS[name](torch, nn)
        times, per_step = timed_steps(torch, step, warmup, steps)
        result(model=name, alloc=alloc, conf=CONF, run=run_id, median_ms=round(statistics.median(times), 3),
               steps=steps, warmup=warmup, peak_reserved_mib=round(torch.cuda.max_memory_reserved() / MIB, 1),
               seconds=round(time.perf_counter() - t0, 1), per_step=per_step)
        print("gpu_steptime: ok %s %s %s run %s: median %.3f ms; per step %s" % (
            name, alloc, CONF, run_id, statistics.median(times), per_step), flush=True)

    each_model(torch, MODELS, measure, "gpu_steptime", "%s %s run %s" % (alloc, CONF, run_id))


def result_rows(log):
    """The RESULT lines of a log, as dicts."""
    with open(log) as f:
        return [json.loads(line[7:]) for line in f if line.startswith("RESULT ")]


def counts(rs):
    """"mallocs, frees, syncs": the median per-step device mallocs, frees and syncs of result rows."""
    per = [r.get("per_step", {}) for r in rs]
    return ", ".join("%g" % statistics.median(p.get(k, 0) for p in per)
                     for k in ("device_mallocs", "device_frees", "sync_all_streams"))


def table(log):
    rows = result_rows(log)
    print("| model | policy | native ms (runs) | gpumemprof ms (runs) | bridge / native | peak reserved MiB native / gpumemprof "
          "| device mallocs, frees, syncs per step native / gpumemprof |")
    print("|---|---|---|---|---|---|---|")

    for model in MODELS:
        for conf in sorted({r["conf"] for r in rows}):
            got = {a: [r for r in rows if r["model"] == model and r["conf"] == conf and r["alloc"] == a]
                   for a in ("native", "gpumemprof")}
            if not got["native"] or not got["gpumemprof"]:
                continue
            med = {a: statistics.median(r["median_ms"] for r in rs) for a, rs in got.items()}
            print("| %s | %s | %.2f (%s) | %.2f (%s) | %+.1f%% | %s / %s | %s / %s |" % (
                model, conf, med["native"], " / ".join("%.2f" % r["median_ms"] for r in got["native"]),
                med["gpumemprof"], " / ".join("%.2f" % r["median_ms"] for r in got["gpumemprof"]),
                (med["gpumemprof"] / med["native"] - 1) * 100,
                max(r["peak_reserved_mib"] for r in got["native"]),
                max(r["peak_reserved_mib"] for r in got["gpumemprof"]), counts(got["native"]), counts(got["gpumemprof"])))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
