#!/usr/bin/env python3
"""Time of `gpumemprof forecast` on two probes of about 1M trace entries each (a synthetic training
loop written as PyTorch's snapshot pickles; a few requests differ between the probes).

usage: forecast_speed.py GPUMEMPROF_BINARY [ENTRIES [FORECAST OPTION ...]]
  (options such as --config roundup_power2_divisions:4 go to the forecast: under a config the range
  is replayed under PyTorch's defaults too)"""
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time


def program(p, entries):
    trace, addr = [], [0x7F0000000000]

    def ev(action, a, size):
        trace.append({"action": action, "addr": a, "size": size, "stream": 0, "time_us": len(trace), "frames": []})

    def alloc(size):
        addr[0] += 1 << 32
        ev("alloc", addr[0], size)
        return addr[0], size

    def free(b):
        ev("free_requested", *b)
        ev("free_completed", *b)

    weights = [alloc(3 * 2**20 + 512 * k) for k in range(50)]
    step = 0
    while len(trace) < entries:
        acts = []
        for layer in range(12):
            acts.append(alloc(p * 65536 * (layer % 4 + 1)))
            acts.append(alloc(p * p * 2048))
            ws = alloc(8192 if (step + layer) % 17 else 8192 * p)
            if p > 8 and layer == 5 and step % 3 == 0:
                free(alloc(5 * 2**20))  # only the larger probe
            free(ws)
        for b in reversed(acts):
            g = alloc(b[1])
            free(b)
            free(g)
        step += 1
    for w in weights:
        free(w)
    return {"segments": [], "device_traces": [trace]}


def main():
    binary = sys.argv[1]
    entries = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    extra = sys.argv[3:]
    tmp = tempfile.mkdtemp(prefix="gpumemprof-forecast-speed-")
    paths = []
    for p in (8, 16):
        path = os.path.join(tmp, f"{p}.pickle")
        with open(path, "wb") as f:
            pickle.dump(program(p, entries), f, protocol=4)
        paths.append(path)
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([binary, "forecast", "--run", f"8={paths[0]}", "--run", f"16={paths[1]}", "--at", "64", *extra],
                       capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(r.stdout[:600] + r.stderr)
    # CPU time is the figure on a shared machine (the forecast is single-threaded: CPU time is the
    # time it takes on one free core); wall time is given beside.
    print(f"forecast of two {entries}-entry probes: {cpu:.2f} s CPU, {seconds:.2f} s wall "
          f"(reading, aligning, 4-6 replays{', 4 more under a config' if '--config' in extra else ''})")


if __name__ == "__main__":
    main()
