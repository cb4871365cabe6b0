"""`gpumemprof summary DIR` and `summary A B ...` across ranks, on rank files written here with
Python's pickle (as PyTorch writes snapshots): with rank keys, without them (rank from the file
name), and bad input -- a corrupt file, a duplicate rank, a world size that disagrees, a folder
without rank files. Each problem is one stderr line naming the file (exit 2); the rest is reported.
And `html DIR`: every rank on one axis (aligned by annotated steps, else by time), the table's
numbers those of `summary DIR --json`, and each rank's full view embedded.

    test_cli_ranks.py GPUMEMPROF
"""
import json
import os
import pickle
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import check, check_one_error_line, finish, run  # noqa: E402

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


def stepped_snapshot(rank, world, steps=True, lead_in=500, ledger=False):
    """Rank `rank` runs 3 annotated steps of 1000 * (rank + 1) us each (the ranks run at different
    speeds); each step holds (rank + 1) * 8 MiB of activations from 1/4 to 1/2 of it. Without
    `steps` the ranges are named "phase k" (not steps)."""
    base, t0, unit = 0x7F0000000000, 1_700_000_000_000_000, 1000 * (rank + 1)
    weights, act = 4 * MIB, (rank + 1) * 8 * MIB
    total = 64 * MIB
    blocks = [{"address": base, "size": weights, "requested_size": weights, "state": "active_allocated",
               "frames": frames("load_weights", 10)},
              {"address": base + weights, "size": total - weights, "requested_size": 0, "state": "inactive",
               "frames": []}]
    seg = {"device": 0, "address": base, "total_size": total, "allocated_size": weights, "active_size": weights,
           "requested_size": weights, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
           "is_expandable": False, "frames": [], "blocks": blocks}

    def entry(action, addr, size, t, fr=()):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "compile_context": "N/A",
                "user_metadata": "", "frames": list(fr)}
    trace = [entry("segment_alloc", base, total, t0), entry("alloc", base, weights, t0 + 1, frames("load_weights", 10))]
    notes = []
    for k in range(3):
        start = t0 + lead_in + k * unit
        name = ("step %d" if steps else "phase %d") % k
        notes.append({"name": name, "stage": "START", "device": 0, "time_us": start})
        trace += [entry("alloc", base + weights, act, start + unit // 4, frames("forward", 20)),
                  entry("free_requested", base + weights, act, start + unit // 2, frames("forward", 20)),
                  entry("free_completed", base + weights, act, start + unit // 2, frames("forward", 20))]
        notes.append({"name": name, "stage": "END", "device": 0, "time_us": start + unit * 9 // 10})
    snap = {"segments": [seg], "device_traces": [trace], "allocator_settings": {}, "external_annotations": notes,
            "rank": rank, "world_size": world, "host": "node0", "device": "cuda:%d" % rank}
    if ledger:  # the device ledger our rank dumps carry (NCCL, cuBLAS, context, module code)
        owners = [{"owner": "libnccl.so", "bytes": 260 * MIB, "count": 3, "top_site": "ncclCommInitRank"},
                  {"owner": "libcublas.so.13", "bytes": 128 * MIB, "count": 1, "top_site": "cublasCreate_v2"}]
        snap["device_memory"] = [{"device": "cuda:%d" % rank, "total": 80 << 30, "used": total + 1139 * MIB + 1000,
                                  "allocated": weights, "reserved": total, "external": 388 * MIB,
                                  "external_by_owner": owners, "code": 210 * MIB, "code_by_owner": [],
                                  "context": 541 * MIB, "unattributed": 1000, "tracking": True}]
    return snap


def page_data(path):
    """The cross-rank page's data and its embedded full views (rank -> HTML)."""
    text = open(path, encoding="utf-8").read()
    data = json.loads(re.search(r'<script type="application/json" id="gmp-ranks-data">(.*?)</script>', text, re.S).group(1))
    views = {int(r): json.loads(v) for r, v in
             re.findall(r'<script type="application/json" id="gmp-rank-page-(\d+)">(.*?)</script>', text, re.S)}
    return data, views


def check_html_across_ranks(gmp, tmp):
    ranks = os.path.join(tmp, "stepped")
    os.makedirs(ranks)
    for r in range(4):
        write(os.path.join(ranks, "rank-%d.pickle" % r), stepped_snapshot(r, 4))
    page = os.path.join(tmp, "ranks.html")
    p = run(gmp, "html", ranks, "-o", page)
    check("rank 3 of 4 has the largest peak allocated" in p.stdout and "aligned by steps" in p.stdout and
          "full views embedded for rank(s) 0, 1, 2, 3" in p.stdout, f"html DIR: {p.stdout}")
    data, views = page_data(page)
    check(data["align"] == "steps" and data["maxRank"] == 3 and data["minRank"] == 0, f"page: {data['alignNote']}")
    # Step k starts at x = k on every rank, though rank r's steps take (r + 1) ms.
    for r in data["ranks"]:
        check(r["stepsFrom"] == "annotations" and r["steps"]["name"] == ["step 0", "step 1", "step 2"] and
              r["steps"]["x0"] == [0, 1, 2] and r["steps"]["x1"] == [0.9, 1.9, 3], f"rank {r['rank']} steps {r['steps']}")
        check(r["steps"]["us"] == [900 * (r["rank"] + 1)] * 3, f"rank {r['rank']} step lengths {r['steps']['us']}")
        act = (r["rank"] + 1) * 8 * MIB
        held = [x for x, b in zip(r["x"], r["requestedInUse"]) if b == 4 * MIB + act]
        # A step runs to the next one's start; the last one to its end (0.9 of the others).
        check(held == [0.25, 1.25, 2.277778], f"rank {r['rank']}: activations held at x {held} (steps aligned)")
        check(r["peakRequestedInUse"] == 4 * MIB + act and max(r["reserved"]) == 64 * MIB, f"rank {r['rank']} levels")
    # The table: the numbers of summary DIR --json.
    rep = json.loads(run(gmp, "summary", ranks, "--json").stdout)
    check(rep["ranks"] == [r["facts"] for r in data["ranks"]], f"table differs from summary: {data['ranks'][0]['facts']}")
    check(rep["imbalance"] == data["imbalance"] and rep["imbalance_site"] == data["imbalanceSite"], "imbalance differs")
    # Issue 29: the steps own the axis -- a lead-in as long as 140 steps (a DDP run's start-up) is a
    # sliver before step 0, not 140 units; memory outside the allocator per rank is on the page, as
    # summary DIR prints it; no "ext. frag." jargon.
    long_lead = os.path.join(tmp, "long-lead-in")
    os.makedirs(long_lead)
    for r in range(2):
        write(os.path.join(long_lead, "rank-%d.pickle" % r),
              stepped_snapshot(r, 2, lead_in=140 * 1000 * (r + 1), ledger=True))
    lead_page = os.path.join(tmp, "long-lead-in.html")
    run(gmp, "html", long_lead, "-o", lead_page)
    lead_data, _ = page_data(lead_page)
    for r in lead_data["ranks"]:
        check(r["steps"]["x0"] == [0, 1, 2] and -0.5 < min(r["x"]) < 0,
              f"rank {r['rank']}: the lead-in takes {-min(r['x']):.2f} steps of the axis (at most half a step)")
        f = r["facts"]
        check(f["context_bytes"] == 541 * MIB and f["code_bytes"] == 210 * MIB and f["external_bytes"] == 388 * MIB and
              [o["owner"] for o in f["external_by_owner"]] == ["libnccl.so", "libcublas.so.13"],
              f"rank {r['rank']}: the device ledger is in the page's data: {f}")
    text = open(lead_page, encoding="utf-8").read()
    check('id="dm-card"' in text and "showDeviceMemory" in text and "CUDA context" in text and "module code" in text,
          "the page has no section for memory outside the allocator (context, module code, owners)")
    check("ext. frag." not in text, "the ranks table still says 'ext. frag.'")
    # Each rank's full view: the single-rank report of its file.
    check(sorted(views) == [0, 1, 2, 3] and all(r["page"] for r in data["ranks"]), f"views of ranks {sorted(views)}")
    for r, html in views.items():
        check(html.startswith("<!DOCTYPE html>") and "<title>rank %d on node0 (cuda:%d): " % (r, r) in html and
              'id="gmp-data"' in html, f"rank {r}'s view: {html[:300]}")

    # One rank without steps: the axis is time (seconds from the first event of any rank).
    write(os.path.join(ranks, "rank-2.pickle"), stepped_snapshot(2, 4, steps=False))
    p = run(gmp, "html", ranks, "-o", page, "--drill-ranks", "2")
    data, views = page_data(page)
    check(data["align"] == "time" and "no steps found on rank(s) 2" in data["alignNote"], data["alignNote"])
    r1 = data["ranks"][1]
    check(r1["steps"]["x0"] == [0.0005, 0.0025, 0.0045], f"steps in seconds: {r1['steps']}")
    # --drill-ranks 2: the largest peak and the smallest.
    check(sorted(views) == [0, 3] and [r["page"] for r in data["ranks"]] == [True, False, False, True],
          f"--drill-ranks 2 embeds {sorted(views)}")

    # A corrupt rank: named on stderr, in the page's problems; the other ranks are still drawn.
    with open(os.path.join(ranks, "rank-1.pickle"), "wb") as f:
        f.write(b"\x80\x04garbage")
    p = run(gmp, "html", ranks, "-o", page)
    check(p.stderr.count("\n") == 2 and "rank-1.pickle" in p.stderr and "missing rank(s) 1" in p.stderr,
          f"corrupt rank: {p.stderr}")
    data, views = page_data(page)
    check([r["rank"] for r in data["ranks"]] == [0, 2, 3] and len(data["problems"]) == 2 and sorted(views) == [0, 2, 3],
          f"the rest: {[r['rank'] for r in data['ranks']]}, {data['problems']}")
    p = run(gmp, "html", ranks, "-o", page, "--points", "x", expect_rc=2)
    check_one_error_line(p, "--points")
    # The report written over one of the folder's rank files: refused, the file untouched.
    rank0 = os.path.join(ranks, "rank-0.pickle")
    with open(rank0, "rb") as f:
        before = f.read()
    p = run(gmp, "html", ranks, "-o", rank0, expect_rc=2)
    check_one_error_line(p, "rank-0.pickle")
    with open(rank0, "rb") as f:
        check(f.read() == before, "html DIR -o DIR/rank-0.pickle changed the rank file")


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

        # Two ranks of a world of 4: "of 4" is the world size, and the line says how many were read.
        partial = os.path.join(tmp, "partial")
        os.makedirs(partial)
        write(os.path.join(partial, "rank-0.pickle"), snapshot(0, 4))
        write(os.path.join(partial, "rank-3.pickle"), snapshot(3, 4, activations=64 * MIB))
        p = run(gmp, "tune", partial)
        check(p.stdout.startswith("%s: rank 3 of 4 has the largest peak allocated of the 2 rank file(s) read (80.00 MiB)"
                                  % partial) and "missing rank(s) 1-2 of world size 4" in p.stderr,
              f"tune DIR with missing ranks: {p.stdout[:300]} / {p.stderr}")

        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        p = run(gmp, "summary", empty, expect_rc=2)
        check(p.stderr.count("\n") == 1 and "no rank-<R>.pickle files in this folder" in p.stderr, p.stderr)
        p = run(gmp, "summary", plain_a, "--json")  # one snapshot: its own peaks and steps
        check(set(json.loads(p.stdout)) == {"snapshot", "devices", "steps"}, p.stdout)
        check_html_across_ranks(gmp, tmp)
    finally:
        shutil.rmtree(tmp)
    finish("cross-rank CLI checks")


if __name__ == "__main__":
    main()
