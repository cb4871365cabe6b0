#!/usr/bin/env python3
"""Records PyTorch workloads as allocation traces (the format of tests/data/*.trace.gz).

Each workload runs from a fresh allocator state with torch.cuda.memory._record_memory_history on,
then every `alloc` of the history becomes `a <id> <bytes> <stream>` and every `free_requested`
`f <id>` (the request stream PyTorch's caching allocator received; sizes are requested bytes,
streams the raw values PyTorch saw, 0 = the default stream). Random-init models only: nothing is
downloaded. Needs a GPU and torch (torchvision / transformers for the workloads that use them).

    python3 bench/record_traces.py OUT_DIR [WORKLOAD ...]

Workloads: two_stream_resnet18 (ResNet-18 training, steps alternating between two non-default
streams), bert_varlen (BERT-base masked-LM training, bf16 autocast, sequence lengths varying per
step), gpt2_varlen (GPT-2 124M training, bf16 autocast, varying lengths).
"""
import gzip
import os
import random
import sys

import torch


def two_stream_resnet18():
    import torchvision

    model = torchvision.models.resnet18().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for step in range(6):
        s = streams[step % 2]
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            x = torch.randn(32, 3, 224, 224, device="cuda")
            y = torch.randint(0, 1000, (32,), device="cuda")
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()


def _lm_training(model, vocab, lengths, batch):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for n in lengths:
        ids = torch.randint(0, vocab, (batch, n), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def bert_varlen():
    from transformers import BertConfig, BertForMaskedLM

    rng = random.Random(7)
    model = BertForMaskedLM(BertConfig()).cuda()
    _lm_training(model, 30522, [rng.randrange(64, 513) for _ in range(8)], 16)


def gpt2_varlen():
    from transformers import GPT2Config, GPT2LMHeadModel

    rng = random.Random(11)
    model = GPT2LMHeadModel(GPT2Config()).cuda()
    _lm_training(model, 50257, [rng.randrange(128, 1025) for _ in range(8)], 8)


WORKLOADS = {f.__name__: f for f in (two_stream_resnet18, bert_varlen, gpt2_varlen)}


def record(name, out_dir):
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=10_000_000)
    WORKLOADS[name]()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ids, next_id, lines, allocs = {}, 0, [], 0
    for e in snap["device_traces"][torch.cuda.current_device()]:
        if e["action"] == "alloc":
            ids[e["addr"]] = next_id
            lines.append(f"a {next_id} {e['size']} {e['stream']}")
            next_id += 1
            allocs += 1
        elif e["action"] == "free_requested" and e["addr"] in ids:
            lines.append(f"f {ids.pop(e['addr'])}")
    path = os.path.join(out_dir, f"{name}.trace.gz")
    header = f"# workload={name} device={torch.cuda.get_device_name()} torch={torch.__version__}"
    with gzip.open(path, "wt") as f:
        f.write(header + "\n" + "\n".join(lines) + "\n")
    streams = {e["stream"] for e in snap["device_traces"][torch.cuda.current_device()] if e["action"] == "alloc"}
    print(f"{path}: {allocs} allocs, {len(streams)} streams, peak reserved "
          f"{torch.cuda.max_memory_reserved() / 2**20:.0f} MiB", flush=True)
    del snap
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def main():
    if len(sys.argv) < 2 or not torch.cuda.is_available():
        sys.exit(__doc__ if len(sys.argv) < 2 else "record_traces.py: no GPU visible")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name in sys.argv[2:] or list(WORKLOADS):
        if name not in WORKLOADS:
            sys.exit(f"record_traces.py: unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
        record(name, out_dir)


if __name__ == "__main__":
    main()
