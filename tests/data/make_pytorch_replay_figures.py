#!/usr/bin/env python3
"""Builds pytorch_replay_figures.json from PyTorch's own replays of the traces here (the GPU host's
c10/<trace>.<policy>.json and .segments.txt, see README.md): per trace and policy, the figures of
the cold replay and of the warm ones, and the segment events of the cold replay -- for expandable
segments each map/unmap as [reservation, offset, bytes] (reservations numbered in order of first
use, offsets from their first address, which PyTorch maps first), for cudaMalloc segments the
driver's [address, bytes] as recorded (their order is the driver's placement).
usage: make_pytorch_replay_figures.py C10_DIR > pytorch_replay_figures.json"""
import json, os, sys

src = sys.argv[1]
KEYS = ("peak_allocated_bytes", "peak_reserved_bytes", "peak_requested_bytes", "num_device_alloc", "num_device_free")
out = {"recorded": None, "traces": {}}
for trace in ("resnet50_train", "gpt2_train", "gpt2_generate", "two_stream_resnet18", "bert_varlen", "gpt2_varlen"):
    for policy in ("default", "expandable"):
        d = json.load(open(os.path.join(src, f"{trace}.{policy}.json")))
        out["recorded"] = f"{d['device']}, torch {d['torch']}"
        fig = {"cold": {k: d["replays"][0][k] for k in KEYS},
               "warm": [{k: r[k] for k in KEYS} for r in d["replays"][1:]]}
        bases, events = [], []
        for line in open(os.path.join(src, f"{trace}.{policy}.segments.txt")):
            if line.startswith("#"):
                continue
            replay, action, addr, size, _stream = line.split()
            if replay != "0":
                raise SystemExit(f"{trace}.{policy}: segment events in warm replay {replay}")
            addr, size = int(addr), int(size)
            if policy == "default":
                events.append([action, addr, size])
                continue
            # A reservation spans 9/8 of the device (158 GiB on an H200): 128 GiB apart at least.
            base = next((b for b in bases if b <= addr < b + (128 << 30)), None)
            if base is None:
                bases.append(addr)
                base = addr
            events.append([action, bases.index(base), addr - base, size])
        fig["segment_events"] = events
        out["traces"].setdefault(trace, {})[policy] = fig
json.dump(out, sys.stdout, indent=None, separators=(",", ":"))
sys.stdout.write("\n")
