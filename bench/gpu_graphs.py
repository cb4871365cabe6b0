#!/usr/bin/env python3
"""CUDA graphs through the PyTorch bridge on a GPU host (torch 2.11): issue 26 item 5.

    gpu_graphs.py graph ALLOC          torch.cuda.graph around a 3-layer MLP after the side-stream warm-up:
                                       capture, 100 replays equal to eager; the graph's private pool is
                                       visible in memory_stats' segments / the snapshot (segment_pool_id)
    gpu_graphs.py graphed ALLOC        torch.cuda.make_graphed_callables on a module, forward and backward
                                       equal to eager
    gpu_graphs.py compile ALLOC RUN DIR
                                       torch.compile(tiny transformer, mode="reduce-overhead"): output saved
                                       in DIR for `compare`, median step ms, peak reserved (max_memory_reserved);
                                       ALLOC native-plain: native with inductor's plain CUDA graphs (control)
    gpu_graphs.py record-stream ALLOC  Tensor.record_stream on a busy side stream delays reuse (and without
                                       it the block is reused at once: the check can fail)
    gpu_graphs.py mempool              under the bridge: torch.cuda.MemPool() and the cudagraph-tree
                                       checkpoint bindings give one clear line; inductor uses plain graphs;
                                       torch.accelerator.empty_cache() empties gpumemprof's cache
    gpu_graphs.py compare DIR LOG...   the reduce-overhead outputs native vs bridge; RESULT lines as a table

ALLOC: native or gpumemprof (installs the bridge first). The allocator policy comes from
$PYTORCH_ALLOC_CONF (set by bench/gpu_graphs.sh). Each check prints "gpu_graphs: ok NAME" or
"gpu_graphs: FAILED NAME: why"; measurements are "RESULT {json}" lines.
"""
import json
import os
import statistics
import sys
import time
import traceback

MIB = 1 << 20
CONF = os.environ.get("PYTORCH_ALLOC_CONF", "") or "default"


def check(ok, name, why=""):
    print("gpu_graphs: ok %s" % name if ok else "gpu_graphs: FAILED %s: %s" % (name, why), flush=True)
    return ok


def result(**kv):
    print("RESULT " + json.dumps(kv, sort_keys=True), flush=True)


def setup(alloc):
    import torch
    if alloc == "gpumemprof":
        import gpumemprof_torch
        gpumemprof_torch.install()
    torch.manual_seed(0)
    return torch


def private_pool_segments(torch, alloc):
    """Segments outside the default pool, from the snapshot torch.cuda.memory._snapshot() gives (ours
    under the bridge) and, under the bridge, from gpumemprof_torch.dump_snapshot's file too."""
    segs = torch.cuda.memory._snapshot()["segments"]
    found = [s for s in segs if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0)]
    if alloc == "gpumemprof":
        import pickle
        import tempfile
        import gpumemprof_torch
        path = os.path.join(tempfile.mkdtemp(), "graph.pickle")
        gpumemprof_torch.dump_snapshot(path)
        with open(path, "rb") as f:
            file_segs = pickle.load(f)["segments"]
        file_found = [s for s in file_segs if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0)]
        return found, file_found
    return found, found


def graph(alloc):
    torch = setup(alloc)
    name = "graph[%s,%s]" % (alloc, CONF)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 256)).cuda()
    static_in = torch.randn(64, 512, device="cuda")
    # The documented warm-up: a few iterations on a side stream before capture.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    t0 = time.perf_counter()
    with torch.no_grad(), torch.cuda.graph(g):
        static_out = model(static_in)
    torch.cuda.synchronize()
    capture_ms = (time.perf_counter() - t0) * 1e3
    worst = 0.0
    t0 = time.perf_counter()
    for i in range(100):
        x = torch.randn(64, 512, device="cuda", generator=None)
        static_in.copy_(x)
        g.replay()
        with torch.no_grad():
            eager = model(x)
        worst = max(worst, (static_out - eager).abs().max().item())
    replay_s = time.perf_counter() - t0
    check(worst <= 1e-5, name + " capture + 100 replays equal eager", "max |diff| %g" % worst)
    found, file_found = private_pool_segments(torch, alloc)
    check(len(found) > 0 and len(file_found) > 0, name + " the graph's private pool shows in the snapshot",
          "segments outside (0, 0): _snapshot %d, dump_snapshot %d" % (len(found), len(file_found)))
    if alloc == "gpumemprof":
        import gpumemprof_torch
        stats = gpumemprof_torch.memory_stats()
        check(stats["reserved_bytes.all.current"] == torch.cuda.memory_reserved(),
              name + " memory_reserved() answers from gpumemprof", "%d vs %d" % (
                  stats["reserved_bytes.all.current"], torch.cuda.memory_reserved()))
    pool_ids = sorted({tuple(x["segment_pool_id"]) for x in found})
    peak_mib = round(torch.cuda.max_memory_reserved() / MIB, 1)
    # The graph destroyed (releasePool) and its output freed: the private pool's memory goes back,
    # but for what outlives the graph (cuBLAS's workspace for the capture stream, made during the
    # capture): `compare` checks the bridge keeps no more of it than PyTorch does.
    del g, static_out
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    left, file_left = private_pool_segments(torch, alloc)
    check(len(left) == len(file_left), name + " after the graph: _snapshot and dump_snapshot agree",
          "%d vs %d segments outside (0, 0)" % (len(left), len(file_left)))
    print("gpu_graphs: after the graph's destruction %d segment(s), %d bytes, left outside (0, 0)"
          % (len(left), sum(x["total_size"] for x in left)), flush=True)
    result(check="graph", alloc=alloc, conf=CONF, max_diff=worst, capture_ms=round(capture_ms, 2),
           replays_100_s=round(replay_s, 3), pool_ids=pool_ids, peak_reserved_mib=peak_mib,
           left_segments=len(left), left_bytes=sum(x["total_size"] for x in left))


def graphed(alloc):
    torch = setup(alloc)
    name = "make_graphed_callables[%s,%s]" % (alloc, CONF)
    import copy
    module = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 128)).cuda()
    reference = copy.deepcopy(module)
    sample = torch.randn(32, 256, device="cuda", requires_grad=True)
    graphed_module = torch.cuda.make_graphed_callables(module, (sample,))
    worst_out = worst_grad = 0.0
    for _ in range(10):
        # As a training loop does (zero_grad(set_to_none=True)): autograd then takes the graph's static
        # gradient as p.grad, which the next replay overwrites, so grads are compared step by step.
        module.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        x = torch.randn(32, 256, device="cuda", requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        y = graphed_module(x)
        y.sum().backward()
        y_ref = reference(x_ref)
        y_ref.sum().backward()
        worst_out = max(worst_out, (y - y_ref).abs().max().item())
        worst_grad = max(worst_grad, (x.grad - x_ref.grad).abs().max().item())
        for p, q in zip(module.parameters(), reference.parameters()):
            worst_grad = max(worst_grad, (p.grad - q.grad).abs().max().item())
    check(worst_out <= 1e-5 and worst_grad <= 1e-4, name + " forward and backward equal eager (10 steps)",
          "max |diff| out %g grad %g" % (worst_out, worst_grad))
    result(check="graphed", alloc=alloc, conf=CONF, max_diff_out=worst_out, max_diff_grad=worst_grad)


def tiny_transformer(torch):
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, dropout=0.0,
                                             batch_first=True)
    return torch.nn.Sequential(torch.nn.Embedding(4096, 256), torch.nn.TransformerEncoder(layer, num_layers=2),
                               torch.nn.Linear(256, 4096)).cuda().eval()


def compile_mode(alloc, run, save_dir):
    """alloc: native, gpumemprof, or native-plain: PyTorch's allocator with inductor's plain CUDA graphs
    (cudagraph_trees off, what the bridge makes it use), the control that tells inductor's mode apart
    from the allocator."""
    torch = setup("native" if alloc == "native-plain" else alloc)
    if alloc == "native-plain":
        import torch._inductor.config as inductor_config
        inductor_config.triton.cudagraph_trees = False
    name = "reduce-overhead[%s,%s]" % (alloc, CONF)
    model = tiny_transformer(torch)
    tokens = torch.randint(0, 4096, (16, 128), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    with torch.no_grad():
        eager = model(tokens).float()
    compiled = torch.compile(model, mode="reduce-overhead")
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(3):  # warm-up, record, first replay
            out = compiled(tokens)
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    times = []
    with torch.no_grad():
        for _ in range(50):
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = compiled(tokens)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e3)
        out = compiled(tokens).float().clone()
    diff = (out - eager).abs().max().item()
    check(diff <= 2e-3, name + " output equals eager", "max |diff| %g" % diff)
    pooled, _ = private_pool_segments(torch, "native" if alloc == "native-plain" else alloc)
    check(len(pooled) > 0, name + " the compiled model runs as CUDA graphs (a private pool holds memory)",
          "no segment outside the default pool: inductor skipped cudagraphs (see graphs.log)")
    torch.save(out.cpu(), os.path.join(save_dir, "compile-%s-%s-%s.pt" % (alloc, CONF.replace(":", "_"), run)))
    result(check="compile", alloc=alloc, conf=CONF, run=run, median_ms=round(statistics.median(times), 4),
           warmup_s=round(warm_s, 2), diff_vs_eager=diff,
           peak_reserved_mib=round(torch.cuda.max_memory_reserved() / MIB, 2), private_segments=len(pooled),
           peak_allocated_mib=round(torch.cuda.max_memory_allocated() / MIB, 2))


def record_stream(alloc):
    torch = setup(alloc)
    name = "record_stream[%s,%s]" % (alloc, CONF)
    side = torch.cuda.Stream()
    nbytes = 8 * MIB
    # Load the kernels first (lazy module loading makes a first launch slow on the host: the side
    # stream's work could then be over before the reuse is tried).
    warm = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    torch.cuda._sleep(1000)
    warm.sum(dtype=torch.int64)
    torch.cuda.synchronize()
    del warm

    def trial(record):
        x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")  # on the current stream
        x.fill_(1)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(1_000_000_000)  # ~0.5 s of the side stream's time
            y = x.sum(dtype=torch.int64)
        if record:
            x.record_stream(side)
        ptr = x.data_ptr()
        del x
        z = torch.empty(nbytes, dtype=torch.uint8, device="cuda")  # right away, same size, same stream
        busy = not side.query()
        same = z.data_ptr() == ptr
        torch.cuda.synchronize()
        del y, z
        return same, busy

    same_without, busy1 = trial(False)
    same_with, busy2 = trial(True)
    check(busy1 and busy2, name + " the side stream was still busy at the reuse", "busy %s %s" % (busy1, busy2))
    check(same_without, name + " without record_stream the block is reused at once (control)",
          "a different pointer came back")
    check(not same_with, name + " record_stream(side) delays reuse while the side stream works",
          "the same pointer came back while the side stream still used it")
    result(check="record_stream", alloc=alloc, conf=CONF, reused_without=same_without, reused_with=same_with)


def mempool():
    torch = setup("gpumemprof")
    try:
        torch.cuda.MemPool()
        check(False, "mempool: torch.cuda.MemPool() under the bridge says why it cannot", "no error")
    except RuntimeError as e:
        text = str(e)
        check("gpumemprof" in text and "graph_pool_handle" in text and "\n" not in text,
              "mempool: torch.cuda.MemPool() under the bridge gives one clear line", text)
        print("gpu_graphs: the line: " + text)
    import torch._inductor.config as config
    check(config.triton.cudagraph_trees is False, "mempool: inductor uses plain CUDA graphs under the bridge",
          "cudagraph_trees = %r" % (config.triton.cudagraph_trees,))
    if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "empty_cache"):
        torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")  # made and freed: 64 MiB cached
        before = torch.cuda.memory_reserved()
        torch.accelerator.empty_cache()  # libtorch's emptyCache: the set_reset_fn hook
        after = torch.cuda.memory_reserved()
        check(before >= 64 * MIB and after < before, "mempool: torch.accelerator.empty_cache() reaches gpumemprof",
              "memory_reserved %d -> %d" % (before, after))
    try:
        torch._C._cuda_getCheckpointState(0, (1, 0))
        check(False, "mempool: the checkpoint binding refuses clearly", "no error")
    except RuntimeError as e:
        check("cudagraph_trees" in str(e), "mempool: the checkpoint binding refuses clearly", str(e))


def compare(save_dir, logs):
    import torch
    rows = []
    for log in logs:
        if not os.path.exists(log):
            continue
        with open(log) as f:
            rows += [json.loads(line[7:]) for line in f if line.startswith("RESULT ")]
    ok = True
    for conf in sorted({r["conf"] for r in rows if r["check"] == "compile"}):
        c = conf.replace(":", "_")
        outs = {a: [torch.load(os.path.join(save_dir, p)) for p in sorted(os.listdir(save_dir))
                    if p.startswith("compile-%s-%s-" % (a, c))] for a in ("native", "gpumemprof")}
        if outs["native"] and outs["gpumemprof"]:
            diff = max((x - y).abs().max().item() for x in outs["native"] for y in outs["gpumemprof"])
            ok &= check(diff <= 2e-3, "reduce-overhead[%s] output native vs bridge" % conf, "max |diff| %g" % diff)
    for conf in sorted({r["conf"] for r in rows if r["check"] == "graph"}):
        left = {r["alloc"]: r["left_bytes"] for r in rows if r["check"] == "graph" and r["conf"] == conf}
        if "native" in left and "gpumemprof" in left:
            ok &= check(left["gpumemprof"] <= left["native"],
                        "graph[%s] the bridge keeps no more of a destroyed graph's pool than PyTorch" % conf,
                        "bytes left: gpumemprof %d, native %d" % (left["gpumemprof"], left["native"]))
    print("\n## torch.compile(mode=\"reduce-overhead\"), tiny transformer (2 layers, d=256, 16x128 tokens), "
          "median of 50 steps\n")
    print("(native-plain: PyTorch's allocator with inductor's plain CUDA graphs, cudagraph_trees=False, as under "
          "the bridge)\n")
    print("| policy | allocator | median step ms (runs) | peak reserved MiB | peak allocated MiB |")
    print("|---|---|---|---|---|")
    for conf in sorted({r["conf"] for r in rows if r["check"] == "compile"}):
        for alloc in ("native", "gpumemprof", "native-plain"):
            rs = [r for r in rows if r["check"] == "compile" and r["conf"] == conf and r["alloc"] == alloc]
            if rs:
                print("| %s | %s | %.3f (%s) | %s | %s |" % (
                    conf, alloc, statistics.median(r["median_ms"] for r in rs),
                    " / ".join("%.3f" % r["median_ms"] for r in rs),
                    " / ".join(str(r["peak_reserved_mib"]) for r in rs),
                    " / ".join(str(r["peak_allocated_mib"]) for r in rs)))
    print("\n## torch.cuda.graph, 3-layer MLP: capture and 100 replays\n")
    print("| policy | allocator | max diff vs eager | capture ms | 100 replays s | private pools | peak reserved MiB "
          "| left after destruction |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["check"] == "graph":
            print("| %s | %s | %g | %s | %s | %s | %s | %d B |" % (
                r["conf"], r["alloc"], r["max_diff"], r["capture_ms"], r["replays_100_s"], r["pool_ids"],
                r["peak_reserved_mib"], r["left_bytes"]))
    return ok


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    mode, args = sys.argv[1], sys.argv[2:]
    try:
        if mode == "graph":
            graph(args[0])
        elif mode == "graphed":
            graphed(args[0])
        elif mode == "compile":
            compile_mode(args[0], args[1], args[2])
        elif mode == "record-stream":
            record_stream(args[0])
        elif mode == "mempool":
            mempool()
        elif mode == "compare":
            return 0 if compare(args[0], args[1:]) else 1
        else:
            print(__doc__)
            return 2
    except Exception as e:  # one line for the summary; the traceback for the log
        traceback.print_exc()
        check(False, "%s %s" % (mode, " ".join(args[:1])), "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
