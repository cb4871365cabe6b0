"""`gpumemprof summary DIR` and `summary A B ...` across ranks, on rank files written here with
Python's pickle (as PyTorch writes snapshots): with rank keys, without them (rank from the file
name), and bad input -- a corrupt file, a duplicate rank, a world size that disagrees, a folder
without rank files. Each problem is one stderr line naming the file (exit 2); the rest is reported.

    test_cli_ranks.py GPUMEMPROF
"""
import json
import os
import pickle
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import check, finish, run  # noqa: E402

MIB = 1 << 20


def frames(name, line):
    return [{"filename": "train.py", "line": line, "name": name}]


def snapshot(rank=None, world=None, weights=16 * MIB, activations=32 * MIB):
    """One segment with two live blocks from two sites; the trace allocates both."""
    base = 0x7F0000000000
    total = weights + activations + 2 * MIB
    blocks = [{"address": base, "size": weights, "requested_size": weights, "state": "active_allocated",
               "frames": frames("load_weights", 10)},
              {"address": base + weights, "size": activations, "requested_size": activations,
               "state": "active_allocated", "frames": frames("forward", 20)},
              {"address": base + weights + activations, "size": 2 * MIB, "requested_size": 0, "state": "inactive",
               "frames": []}]
    seg = {"device": 0, "address": base, "total_size": total, "allocated_size": weights + activations,
           "active_size": weights + activations, "requested_size": weights + activations, "stream": 0,
           "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}

    def entry(action, addr, size, t, fr):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "compile_context": "N/A",
                "user_metadata": "", "frames": fr}
    trace = [entry("segment_alloc", base, total, 1, []), entry("alloc", base, weights, 2, frames("load_weights", 10)),
             entry("alloc", base + weights, activations, 3, frames("forward", 20))]
    snap = {"segments": [seg], "device_traces": [trace], "allocator_settings": {}, "external_annotations": []}
    if rank is not None:
        snap.update({"rank": rank, "world_size": world, "host": "node%d" % (rank // 2), "device": "cuda:%d" % (rank % 2)})
    return snap


def write(path, snap):
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)


def main():
    gmp = sys.argv[1]
    tmp = tempfile.mkdtemp()
    try:
        good = os.path.join(tmp, "good")
        os.makedirs(good)
        for r, act in enumerate([16, 32, 96]):
            write(os.path.join(good, "rank-%d.pickle" % r), snapshot(r, 3, activations=act * MIB))
        with open(os.path.join(good, "ranks.json"), "w") as f:
            f.write("{}")  # not a rank file: ignored
        p = run(gmp, "summary", good, "--json")
        if p.returncode == 0:
            rep = json.loads(p.stdout)
            check([(r["rank"], r["host"], r["device"]) for r in rep["ranks"]] ==
                  [(0, "node0", "cuda:0"), (1, "node0", "cuda:1"), (2, "node1", "cuda:0")], f"ranks: {rep['ranks']}")
            check([r["peak_allocated_bytes"] for r in rep["ranks"]] == [32 * MIB, 48 * MIB, 112 * MIB],
                  f"peaks (the blocks the trace recorded): {rep['ranks']}")
            check([r["peak_reserved_bytes"] for r in rep["ranks"]] == [34 * MIB, 50 * MIB, 114 * MIB],
                  f"reserved (the trace's segments): {rep['ranks']}")
            check(all(r["peaks_from_trace"] for r in rep["ranks"]), "peaks come from the trace")
            check(rep["max_peak_rank"] == 2 and rep["min_peak_rank"] == 0 and rep["imbalance"] == 3.5, f"{rep}")
            check(rep["imbalance_site"] == "forward at train.py:20", f"imbalance site {rep['imbalance_site']}")
            check([(d["site"], d["min_rank"], d["max_rank"]) for d in rep["differing_sites"]] ==
                  [("forward at train.py:20", 0, 2)], f"differing sites {rep['differing_sites']}")
            check(rep["world_size"] == 3 and rep["problems"] == [], f"{rep}")
        p = run(gmp, "summary", good)
        check("largest peak allocated 112.00 MiB on rank 2, smallest 32.00 MiB on rank 0 (3.500x)" in p.stdout,
              f"text imbalance: {p.stdout}")
        check("forward at train.py:20" in p.stdout and "node1" in p.stdout, f"text rows: {p.stdout}")

        # tune and diff answer for the folder's worst rank.
        worst = "%s: rank 2 of 3 has the largest peak allocated (112.00 MiB): %s" % (good, os.path.join(good, "rank-2.pickle"))
        p = run(gmp, "tune", good)
        check(p.stdout.startswith(worst + "\n") and "PYTORCH_CUDA_ALLOC_CONF=" in p.stdout, f"tune DIR: {p.stdout}")
        page = os.path.join(tmp, "worst.html")
        p = run(gmp, "html", good, "-o", page)
        check(p.stdout.startswith(worst + "\n") and os.path.getsize(page) > 0, f"html DIR: {p.stdout}")
        p = run(gmp, "diff", good, os.path.join(good, "rank-0.pickle"))
        check(p.stdout.startswith(worst + "\n") and "forward at train.py:20" in p.stdout, f"diff DIR A: {p.stdout}")

        # Several files, without rank keys: ranks by file name, else by position.
        plain_a = os.path.join(tmp, "a.pickle")
        plain_b = os.path.join(tmp, "b.pickle")
        write(plain_a, snapshot(activations=8 * MIB))
        write(plain_b, snapshot(activations=24 * MIB))
        p = run(gmp, "summary", plain_a, plain_b, "--json")
        if p.returncode == 0:
            rep = json.loads(p.stdout)
            check([(r["rank"], r["peak_allocated_bytes"]) for r in rep["ranks"]] == [(0, 24 * MIB), (1, 40 * MIB)],
                  f"files by position: {rep['ranks']}")

        # Bad input: corrupt, duplicate, another run's world size, missing.
        bad = os.path.join(tmp, "bad")
        shutil.copytree(good, bad)
        with open(os.path.join(bad, "rank-1.pickle"), "wb") as f:
            f.write(b"\x80\x04garbage")
        write(os.path.join(bad, "rank-7.pickle"), snapshot(2, 3))
        write(os.path.join(bad, "rank-3.pickle"), snapshot(3, 5))
        p = run(gmp, "summary", bad, "--json", expect_rc=2)
        lines = p.stderr.strip().split("\n")
        check(len(lines) == 4, f"one line per problem: {p.stderr}")
        check(any(os.path.join(bad, "rank-1.pickle") + ":" in l for l in lines), f"corrupt file named: {p.stderr}")
        check(any("rank-7.pickle: rank 2 again" in l for l in lines), f"duplicate named: {p.stderr}")
        check(any("rank-3.pickle: world size 5, but 2 file(s) say 3" in l for l in lines), f"world size: {p.stderr}")
        check(any("missing rank(s) 1 of world size 3" in l for l in lines), f"missing rank: {p.stderr}")
        rep = json.loads(p.stdout)
        check([r["rank"] for r in rep["ranks"]] == [0, 2, 3] and len(rep["problems"]) == 4, f"the rest: {rep}")
        # tune, html and diff on that folder: the same four lines, then the answer for the readable ranks.
        worst_bad = "%s: rank 2 of 3 has the largest peak allocated" % bad
        for command, args in (("tune", [bad]), ("html", [bad, "-o", os.path.join(tmp, "bad.html")]),
                              ("diff", [bad, os.path.join(good, "rank-0.pickle")])):
            p = run(gmp, command, *args)
            lines = p.stderr.strip().split("\n")
            check(len(lines) == 4 and all(l.startswith("gpumemprof %s: " % command) for l in lines) and
                  any("rank-7.pickle: rank 2 again" in l for l in lines), f"{command} DIR with bad files: {p.stderr}")
            check(p.stdout.startswith(worst_bad), f"{command} DIR with bad files: {p.stdout[:300]}")

        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        p = run(gmp, "summary", empty, expect_rc=2)
        check(p.stderr.count("\n") == 1 and "no rank-<R>.pickle files in this folder" in p.stderr, p.stderr)
        p = run(gmp, "summary", plain_a, "--json")  # one snapshot: its own peaks and steps
        check(set(json.loads(p.stdout)) == {"snapshot", "devices", "steps"}, p.stdout)
    finally:
        shutil.rmtree(tmp)
    finish("cross-rank CLI checks")


if __name__ == "__main__":
    main()
