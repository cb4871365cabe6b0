#!/usr/bin/env python3
"""One DDP workload under torchrun, for bench/gpu_ranks.sh: on PyTorch's allocator when run
directly, on gpumemprof's when run through the launcher (python -m gpumemprof_torch.run). The
script is written as DDP scripts are -- torch.cuda.set_device(LOCAL_RANK) is its first CUDA call --
and knows nothing of gpumemprof beyond reading the peaks.

    torchrun --standalone --nproc_per_node 2 [-m gpumemprof_torch.run --out DIR] \\
        bench/torch_ranks_train.py WORKLOAD STEPS WARMUP RESULT_PREFIX
Writes RESULT_PREFIX-rank<R>.json: rank, allocator, median step ms, peak allocated/reserved bytes.
Workloads (bench/torch_bridge.py's, random data and weights): resnet50 (batch 32), gpt2 (8 x 512).
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_bridge import WORKLOADS  # noqa: E402


def main():
    workload, steps, warmup, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)  # the usual first line; install() after it used to fail
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.manual_seed(0)
    from torch.nn.parallel import DistributedDataParallel as DDP
    step = WORKLOADS[workload](torch, wrap=lambda model: DDP(model, device_ids=[local_rank]))
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    gt = sys.modules.get("gpumemprof_torch")
    on_gpumemprof = gt is not None and gt.installed()
    stats = gt.memory_stats(local_rank) if on_gpumemprof else torch.cuda.memory_stats(local_rank)
    result = {"workload": workload, "allocator": "gpumemprof" if on_gpumemprof else "pytorch", "rank": rank,
              "device": torch.cuda.get_device_name(local_rank), "median_step_ms": 1000 * statistics.median(times),
              "peak_allocated_bytes": stats["allocated_bytes.all.peak"],
              "peak_reserved_bytes": stats["reserved_bytes.all.peak"]}
    with open("%s-rank%d.json" % (prefix, rank), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
