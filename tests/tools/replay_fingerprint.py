#!/usr/bin/env python3
"""Fingerprint of what `gpumemprof replay` computes, for refactorings that must not change it.

Replays every trace (*.trace.gz) and PyTorch snapshot (*.snapshot.pickle) in a data folder through
`gpumemprof replay FILE --json` under a fixed set of allocator configs and writes one text file:
per (file, config), the exit code and the JSON with its timing fields removed (ns_per_pair and the
like differ run to run); traces also write the snapshot of their replay (--snapshot OUT.json),
whose segments and blocks are fingerprinted by a hash, again without wall-clock fields and with
addresses taken relative to the lowest one (the simulated device's base address changes from run
to run; the layout within it does not). A run that
fails is recorded with its exit code and its error output: some snapshot/config pairs fail by
design. Two fingerprints of the same data compare with `diff`.

usage: replay_fingerprint.py GPUMEMPROF_BINARY OUT_FILE [DATA_DIR (default tests/data)]
"""

import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile

CONFIGS = [
    "",
    "expandable_segments:True",
    "compacting_expandable_segments:True",
    "max_split_size_mb:64",
    "garbage_collection_threshold:0.6",
    "roundup_power2_divisions:4",
]

# Fields that measure time, not the allocator's decisions.
TIMING = ("ns_per_pair", "seconds", "time_us", "elapsed", "wall")


def strip_timing(v):
    if isinstance(v, dict):
        return {k: strip_timing(x) for k, x in v.items() if not any(t in k for t in TIMING)}
    if isinstance(v, list):
        return [strip_timing(x) for x in v]
    return v


def addresses(v, acc):
    if isinstance(v, dict):
        for k, x in v.items():
            if k in ("addr", "address") and isinstance(x, int) and x:
                acc.append(x)
            else:
                addresses(x, acc)
    elif isinstance(v, list):
        for x in v:
            addresses(x, acc)
    return acc


def rebase(v, base):
    if isinstance(v, dict):
        return {k: (x - base if k in ("addr", "address") and isinstance(x, int) and x else rebase(x, base))
                for k, x in v.items()}
    if isinstance(v, list):
        return [rebase(x, base) for x in v]
    return v


def run(binary, path, config, snapshot_out=None):
    cmd = [binary, "replay", path, "--json"]
    if config:
        cmd += ["--config", config]
    if snapshot_out:
        cmd += ["--snapshot", snapshot_out, "--repeat", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [f"exit {p.returncode}"]
    if p.returncode == 0:
        try:
            lines.append(json.dumps(strip_timing(json.loads(p.stdout)), sort_keys=True))
        except json.JSONDecodeError:
            lines.append("stdout(not json): " + p.stdout.strip())
    else:
        lines.append("stdout: " + p.stdout.strip())
        lines.append("stderr: " + p.stderr.strip())
    if snapshot_out and p.returncode == 0 and os.path.exists(snapshot_out):
        with open(snapshot_out, encoding="utf-8") as f:
            snap = strip_timing(json.load(f))
        snap = rebase(snap, min(addresses(snap, []), default=0))
        text = json.dumps(snap, sort_keys=True).encode()
        lines.append("snapshot sha256 " + hashlib.sha256(text).hexdigest())
    return lines


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, out = sys.argv[1], sys.argv[2]
    data = sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.path.dirname(__file__), "..", "data")
    files = sorted(glob.glob(os.path.join(data, "*.trace.gz")) + glob.glob(os.path.join(data, "*.snapshot.pickle")))
    if not files:
        sys.exit(f"no *.trace.gz or *.snapshot.pickle in {data}")
    result = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            for config in CONFIGS:
                snap = os.path.join(tmp, "snap.json") if path.endswith(".trace.gz") else None
                if snap and os.path.exists(snap):
                    os.remove(snap)
                result.append(f"== {os.path.basename(path)} [{config or '<default>'}]")
                result += run(binary, path, config, snap)
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(result) + "\n")


if __name__ == "__main__":
    main()
