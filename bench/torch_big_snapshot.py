#!/usr/bin/env python3
"""Writes a PyTorch-made memory snapshot with about N trace entries (a loop of CUDA tensor
allocations and frees with Python stacks recorded), for bench/scale_reports.sh: PyTorch's pickle
memoizes every dict, list and string, unlike gpumemprof's own writer.

  torch_big_snapshot.py OUT.pickle N        (needs torch and a CUDA device)"""
import sys
import time

import torch


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    t0 = time.monotonic()
    torch.cuda.memory._record_memory_history(max_entries=n, stacks="python")
    keep = []
    i = 0
    # Each step: one alloc and, for most, one free (free_requested + free_completed); a window of
    # live tensors, so the timeline has shape.
    while i * 3 < n:
        keep.append(torch.empty(256 * (1 + i % 97), dtype=torch.uint8, device="cuda"))
        if len(keep) > 64:
            keep.pop(i % 7)
        i += 1
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(out)
    torch.cuda.memory._record_memory_history(enabled=None)
    print(f"wrote {out}: {i} allocations, {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
