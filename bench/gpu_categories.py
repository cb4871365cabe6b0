#!/usr/bin/env python3
"""Memory by category: gpumemprof's tags (gpumemprof_torch.categorize) against torch.profiler's
memory timeline (export_memory_timeline), on the same training steps.

Workloads (random data and weights; nothing is downloaded):
  resnet50  torchvision ResNet-50, SGD with momentum, batch 16 of 3x224x224
  gpt2      transformers GPT2LMHeadModel(GPT2Config()) (GPT-2 small), AdamW, batch 4 x 256 tokens
  gpt2_position_ids  (not run by default) the same with position_ids (arange(256), made with the
            batch) passed to forward, as GPT2LMHeadModel.forward documents: tried as a way to give
            torch.profiler's ACTIVATION rule an INPUT to start from. It does not: on the H100
            (2026-11-27) torch still labels both embedding outputs PARAMETER and its activation
            peak is 0 (bench/RESULTS.md).
Each workload runs twice, each in its own process and with the same seeds: on PyTorch's allocator
under torch.profiler (profile_memory, record_shapes, with_stack), whose export_memory_timeline JSON
gives per-category peaks, and on gpumemprof's allocator through the bridge with categorize(model,
optimizer) and category("input"), whose category_stats() give ours, over the same steps (the model
is built first: its parameters exist before the steps).
Like with like: torch.profiler sizes a tensor it saw allocated by the caching allocator's block
(allocated bytes: rounded to 512 bytes, or a whole unsplit block) and a pre-existing one (the
parameters) by sizes x strides. So torch's parameter peak is compared with our requested-bytes
peak, its gradient and optimizer_state peaks (tensors made during the steps) with our
allocated-bytes peak, exactly; activation within 5% of our allocated-bytes peak. Also checked: our
requested-bytes peaks of those three equal the tensors' own bytes at the end (parameters with
floating-point buffers, .grad, optimizer.state). The other categories are printed, not checked.

Then, per category, torch.profiler's peak broken down by tensor: its own analysis
(profile._memory_profile()) replayed to the first row of the peak, the keys live in the category
there named (parameters and buffers by qualified name, "grad of NAME", "state KEY of NAME") or
grouped by the op (and module) that allocated them; the bytes torch gives each against the
tensor's own bytes (torch sizes a tensor it saw allocated by the block the caching allocator
reported; pre-existing tensors by sizes x strides); and, tensor by tensor, where torch's bytes
differ from the final gradients' and optimizer state's block bytes (torch.cuda.memory_snapshot()).

usage: bench/gpu_categories.py [--out DIR] [--steps N] [--workloads resnet50,gpt2,gpt2_position_ids]
Needs a CUDA GPU, torch, torchvision, transformers and libgpumemprof_torch.so (under build*/python/
or $GPUMEMPROF_TORCH_LIB).
"""

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# torch.profiler._memory_profiler's categories in its order; a timeline row holds index + 1.
TORCH_CATEGORIES = ("parameter", "optimizer_state", "input", "temporary", "activation", "gradient",
                    "autograd_detail", "unknown")
EXACT = ("parameter", "gradient", "optimizer_state")
WITHIN_5_PERCENT = ("activation",)
# Which of our two measures torch.profiler's figure is made of (see the docstring).
TORCH_MEASURE = {"parameter": "requested"}  # pre-existing: sizes x strides; every other: blocks


def make_resnet50(torch, gmp):
    import torchvision
    model = torchvision.models.resnet50(weights=None).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator(device="cuda").manual_seed(0)

    def batch():
        return (torch.randn(16, 3, 224, 224, device="cuda", generator=gen),
                torch.randint(0, 1000, (16,), device="cuda", generator=gen))

    def loss_of(inputs):
        x, y = inputs
        return loss_fn(model(x), y)

    return model, opt, batch, loss_of


def make_gpt2(torch, gmp, position_ids=False):
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config()
    model = GPT2LMHeadModel(config).cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(0)

    def batch():
        ids = torch.randint(0, config.vocab_size, (4, 256), device="cuda", generator=gen)
        if not position_ids:
            return ids, None
        # What GPT-2 makes inside when none is given (its cache positions, unsqueezed): 2048 bytes.
        return ids, torch.arange(ids.shape[1], device="cuda").unsqueeze(0)

    def loss_of(inputs):
        ids, positions = inputs
        if positions is None:
            return model(input_ids=ids, labels=ids).loss
        return model(input_ids=ids, position_ids=positions, labels=ids).loss

    return model, opt, batch, loss_of


WORKLOADS = {"resnet50": make_resnet50, "gpt2": make_gpt2,
             "gpt2_position_ids": lambda torch, gmp: make_gpt2(torch, gmp, position_ids=True)}


def address_names(model):
    """{storage address: qualified name} and {storage address: bytes} of the parameters and
    buffers, which keep their storage through the run (in-place updates)."""
    names, sizes = {}, {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_cuda:
            names.setdefault(t.untyped_storage().data_ptr(), name)
            sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return names, sizes


def final_block_bytes(torch, model, opt):
    """The caching allocator's block bytes ("allocated") of the gradients and optimizer state at the
    end, from torch.cuda.memory_snapshot(): torch.profiler sizes tensors it saw allocated by the
    block the allocator reported, not by the tensor's bytes."""
    blocks = {}
    try:
        for seg in torch.cuda.memory_snapshot():
            addr = seg["address"]
            for b in seg["blocks"]:
                if b["state"] == "active_allocated":
                    blocks[addr] = b["size"]
                addr += b["size"]
    except Exception as e:
        return {"error": repr(e)}

    def total(tensors):
        seen = {}
        for t in tensors:
            if t is not None and t.is_cuda:
                ptr = t.untyped_storage().data_ptr()
                seen[ptr] = blocks.get(ptr)
        if any(v is None for v in seen.values()):
            return None  # a storage that does not start a block: no block size to give
        return sum(seen.values())

    # Per tensor, named as _tensor_names names them: "grad of NAME", "state KEY of NAME".
    by_name = {}
    for name, p in model.named_parameters():
        tensors = [("grad of %s" % name, p.grad)]
        tensors += [("state %s of %s" % (k, name), v) for k, v in opt.state.get(p, {}).items() if torch.is_tensor(v)]
        for label, t in tensors:
            if t is not None and t.is_cuda:
                by_name[label] = [blocks.get(t.untyped_storage().data_ptr()), t.untyped_storage().nbytes()]
    return {"gradient": total(p.grad for p in model.parameters()),
            "optimizer_state": total(v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)),
            "by_name": by_name}


def own_bytes(torch, model, opt):
    """The bytes of the tensors themselves at the end of the steps (each CUDA storage once):
    parameters with floating-point buffers, gradients, optimizer state."""
    def total(tensors):
        seen = {}
        for t in tensors:
            if t is not None and t.is_cuda:
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return sum(seen.values())
    params = list(model.parameters())
    return {"parameter": total(params + [b for b in model.buffers() if b.is_floating_point()]),
            "gradient": total(p.grad for p in params),
            "optimizer_state": total(v for st in opt.state.values() for v in st.values() if torch.is_tensor(v))}


# --- Which tensors make up torch.profiler's per-category peaks --------------------------------
# torch.profiler._memory_profiler (torch 2.x) labels each (TensorKey, version) and sizes each key
# from its allocation event when the profiler saw it allocated (the caching allocator reports the
# block's size, rounded and possibly unsplit), else from the tensor's metadata (sizes x strides x
# element size: pre-existing tensors such as the model's parameters). Labels set "by id" (parameter,
# gradient, optimizer_state) cover every storage a profiler tensor id ever had. The functions below
# replay the same timeline as MemoryProfileTimeline._coalesce_timeline and take, at the first row
# where a category reaches its peak, the keys live in it, named from the python tracer's modules
# and optimizer (parameters, their .grad, optimizer state) or by the op that allocated them.

def _tensor_names(mp, torch_profiler_types, ptr_names):
    """{tensor id: name} from the python tracer's nn.Module and Optimizer records (a parameter's
    qualified name from `ptr_names`, {storage address: name}, when its address is there), and
    {tensor id: metadata bytes} for the same tensors."""
    _EventType = torch_profiler_types["_EventType"]
    TensorKey = torch_profiler_types["TensorKey"]
    names, meta_bytes = {}, {}

    def note(t, name):
        key = TensorKey.from_tensor(t)
        if key is None:
            return None
        names.setdefault(key.id, name)
        try:
            n = max(a * b for a, b in zip(t.sizes or [1], t.strides or [1]))
            meta_bytes[key.id] = max(meta_bytes.get(key.id, 0), n * torch_profiler_types["element_size"](t.dtype))
        except Exception:  # metadata without sizes: the name is enough
            pass
        return key

    param_names = {}
    for event in mp._op_tree.dfs():
        if event.typed[0] != _EventType.PyCall:
            continue
        fields = event.typed[1]
        if fields.module is not None:
            prefix = getattr(fields.module, "cls_name", "module")
            for name, p, grad in fields.module.parameters:
                pname = ptr_names.get(getattr(p, "storage_data_ptr", None), "%s.%s" % (prefix, name))
                key = note(p, pname)
                if key is not None:
                    param_names.setdefault(key.id, pname)
                    if grad is not None:
                        note(grad, "grad of %s" % param_names[key.id])
    for event in mp._op_tree.dfs():
        if event.typed[0] != _EventType.PyCall or event.typed[1].optimizer is None:
            continue
        for i, (p, grad, state) in enumerate(event.typed[1].optimizer.parameters):
            key = TensorKey.from_tensor(p)
            pname = ptr_names.get(getattr(p, "storage_data_ptr", None)) or (
                param_names.get(key.id, "param #%d" % i) if key is not None else "param #%d" % i)
            note(p, pname)
            if grad is not None:
                note(grad, "grad of %s" % pname)
            for sname, t in state:
                note(t, "state %s of %s" % (sname, pname))
    return names, meta_bytes


def _op_name(event):
    """"op (in module)" of a profiler event."""
    parent = event.parent
    while parent is not None:
        if parent.name.startswith("nn.Module:"):
            return event.name + " in " + parent.name[len("nn.Module: "):]
        parent = parent.parent
    return event.name


def _allocating_ops(mp):
    """{TensorKey: "op (in module)"} for the keys the profiler saw allocated by an op."""
    ops = {}
    for node in mp._data_flow_graph.flow_nodes:
        for key, edge in node._edges.items():
            if edge.is_allocation:
                ops.setdefault(key, _op_name(node._event))
    return ops


def activation_flood(mp, limit=30):
    """How torch.profiler's activation rule (_set_activations) meets the first forward ops: a
    forward op's outputs are ACTIVATION when its inputs include an INPUT or ACTIVATION and all are
    INPUT, ACTIVATION, PARAMETER or TEMPORARY. Lines "op: inputs [CATEGORY#id ...] -> outputs [...]"
    of the first `limit` ops outside backward that have inputs; and the bytes torch's forward ops
    produced per output category (each key once)."""
    from torch.profiler import _memory_profiler as m
    cats = mp._categories

    def label(key, version):
        c = cats.get(key, version) if isinstance(key, m.TensorKey) else None
        return "%s#%s" % ("unknown" if c is None else c.name, getattr(key, "id", "?"))

    lines, stopped, produced, seen = [], [], {}, set()
    for node in mp._data_flow_graph.flow_nodes:
        if m.RecordScope.BACKWARD_FUNCTION in m.get_scopes(node._event):
            continue
        ins = [label(k, v) for k, (_, v) in node.inputs.items()]
        outs = [label(k, v) for k, v in node.outputs.items()]
        activation = False
        for k, v in node.outputs.items():
            if not isinstance(k, m.TensorKey):
                continue
            activation = activation or cats.get(k, v) == m.Category.ACTIVATION
            if (k, v) in seen:
                continue
            seen.add((k, v))
            c = cats.get(k, v)
            name = "unknown" if c is None else c.name.lower()
            produced[name] = produced.get(name, 0) + int(mp._size_map[k])
        op = _op_name(node._event)
        line = "%s: inputs [%s] -> outputs [%s]" % (op, " ".join(ins), " ".join(outs))
        if ins and len(lines) < limit:
            lines.append(line)
        # Inside a model's module (not the optimizer), with inputs, and no ACTIVATION made.
        if ins and outs and not activation and " in " in op and len(stopped) < limit // 2:
            stopped.append(line)
    return {"first_forward_ops": lines, "first_module_ops_without_activation": stopped,
            "forward_output_bytes": produced}


def torch_peak_breakdown(mp, timeline, device, categories, ptr_names, ptr_bytes, limit=12):
    """For each of `categories`: torch's peak and the keys live in it at its first peak row,
    grouped by name: {"name", "keys", "bytes": torch's sizes, "tensor_bytes": metadata bytes or
    None}. `ptr_names` and `ptr_bytes`: {storage address: name or bytes} of the parameters and
    buffers, which live at the same address through the whole run."""
    import torch
    from torch._utils import _element_size
    from torch._C._profiler import _EventType
    from torch.profiler import _memory_profiler as m
    types = {"_EventType": _EventType, "TensorKey": m.TensorKey, "element_size": _element_size}
    cats = mp._categories  # timeline: MemoryProfileTimeline(mp).timeline (mp.timeline computes it anew)
    dev = torch.device(device)
    wanted = {c: name for c, name in ((c, c.name.lower() if c is not None else "unknown")
                                      for c in m._CATEGORY_TO_INDEX) if name in categories}

    def category_of(key, version):
        return cats.get(key, version) if isinstance(key, m.TensorKey) else None

    # Pass 1: the rows, as _coalesce_timeline makes them, and each wanted category's first peak row.
    totals = {c: 0 for c in wanted}
    peak = {c: (-1, -1) for c in wanted}  # (bytes, row)
    row, last_t = -1, None

    def close_row():
        for c in wanted:
            if totals[c] > peak[c][0]:
                peak[c] = (totals[c], row)

    def apply(key, version, delta, live):
        c = category_of(key, version)
        if c in wanted:
            totals[c] += delta
            if live is not None:
                k = (key, version)
                live[c][k] = live[c].get(k, 0) + delta
                if live[c][k] == 0:
                    del live[c][k]

    def replay(live, stop_rows):
        nonlocal row, last_t
        row, last_t = -1, None
        for c in wanted:
            totals[c] = 0
        snapshots = {}

        def end_of_row():  # pass 1: note the peaks; pass 2: keep the live keys of a peak row
            if live is None:
                close_row()
            for c, r in stop_rows.items():
                if r == row:
                    snapshots[c] = dict(live[c])

        for t, action, (key, version), numbytes in timeline:
            if key.device != dev:
                continue
            t = t if t == -1 else int(t / 1000)
            if row == -1 or t != last_t:
                if row >= 0:
                    end_of_row()
                row, last_t = row + 1, t
            if action in (m.Action.PREEXISTING, m.Action.CREATE):
                apply(key, version, numbytes, live)
            elif action == m.Action.INCREMENT_VERSION:
                apply(key, version, -numbytes, live)
                apply(key, version + 1, numbytes, live)
            elif action == m.Action.DESTROY:
                apply(key, version, -numbytes, live)
        end_of_row()
        return snapshots

    replay(None, {})
    snapshots = replay({c: {} for c in wanted}, {c: peak[c][1] for c in wanted})
    names, meta_bytes = _tensor_names(mp, types, ptr_names)
    ops = _allocating_ops(mp)
    out = {}
    for c, cname in wanted.items():
        groups = {}
        for (key, version), nbytes in snapshots.get(c, {}).items():
            if not isinstance(key, m.TensorKey):
                label, tb = "(no tensor id)", None
            else:
                label = names.get(key.id)
                tb = meta_bytes.get(key.id)
                if label is None and key.storage.ptr in ptr_names:
                    label, tb = ptr_names[key.storage.ptr], ptr_bytes.get(key.storage.ptr)
                if label is None:
                    label = "made by %s" % ops.get(key, "no op the profiler saw (before profiling?)")
            g = groups.setdefault(label, {"name": label, "keys": 0, "bytes": 0, "tensor_bytes": 0})
            g["keys"] += 1
            g["bytes"] += nbytes
            g["tensor_bytes"] = None if (tb is None or g["tensor_bytes"] is None) else g["tensor_bytes"] + tb
        rows = sorted(groups.values(), key=lambda g: -g["bytes"])
        named = [g for g in rows if not g["name"].startswith("made by ") and g["name"] != "(no tensor id)"]
        unnamed = [g for g in rows if g not in named]
        out[cname] = {
            "peak": peak[c][0], "row": peak[c][1],
            "named_keys": sum(g["keys"] for g in named),
            "named_bytes": sum(g["bytes"] for g in named),
            "named_tensor_bytes": (None if any(g["tensor_bytes"] is None for g in named)
                                   else sum(g["tensor_bytes"] for g in named)),
            "named_names": sorted({g["name"] for g in named}),
            "named_all": named,
            "unnamed_bytes": sum(g["bytes"] for g in unnamed),
            "unnamed": unnamed[:limit], "unnamed_count": len(unnamed),
        }
    return out

def child(workload, mode, steps, result_path, out_dir):
    """One workload in one mode ("torch": PyTorch's allocator under torch.profiler; "gpumemprof":
    the bridge with categories). Writes {category: peak bytes, ...} and context as JSON."""
    started = time.perf_counter()
    gmp = None
    if mode == "gpumemprof":
        sys.path.insert(0, os.path.join(REPO, "python"))
        import gpumemprof_torch as gmp
        gmp.install()  # before torch touches CUDA
    import torch
    torch.manual_seed(0)
    model, opt, batch, loss_of = WORKLOADS[workload](torch, gmp)
    torch.cuda.synchronize()

    def run_steps():
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            if gmp is not None:
                with gmp.category("input"):
                    inputs = batch()
            else:
                inputs = batch()
            loss = loss_of(inputs)
            loss.backward()
            opt.step()
            del inputs, loss
        torch.cuda.synchronize()

    result = {"workload": workload, "mode": mode, "torch": torch.__version__, "steps": steps,
              "device": torch.cuda.get_device_name()}
    if gmp is None:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
                     record_shapes=True, with_stack=True) as prof:
            run_steps()
        timeline_path = os.path.join(out_dir, "%s-torch-memory-timeline.json" % workload)
        t0 = time.perf_counter()
        mp = None
        try:  # what profile.export_memory_timeline does for .json, keeping the analysis for the breakdown
            from torch.profiler._memory_profiler import MemoryProfileTimeline
            mp = prof._memory_profile()
            prof.mem_tl = MemoryProfileTimeline(mp)
            prof.mem_tl.export_memory_timeline(timeline_path, "cuda:0")
        except Exception as e:  # internals moved: the public call, no breakdown
            result["breakdown_error"] = "torch.profiler internals: %r" % (e,)
            mp = None
            prof.export_memory_timeline(timeline_path, device="cuda:0")
        result["export_seconds"] = time.perf_counter() - t0
        if mp is not None:
            t0 = time.perf_counter()
            try:
                result["breakdown"] = torch_peak_breakdown(mp, prof.mem_tl.timeline, "cuda:0",
                                                           TORCH_CATEGORIES, *address_names(model))
            except Exception as e:
                import traceback
                result["breakdown_error"] = "breakdown: %s" % traceback.format_exc(limit=4)
            result["breakdown_seconds"] = time.perf_counter() - t0
            try:
                result["flood"] = activation_flood(mp)
            except Exception:
                import traceback
                result["flood_error"] = traceback.format_exc(limit=4)
        with open(timeline_path) as f:
            times, sizes = json.load(f)
        if not sizes or any(len(row) != 1 + len(TORCH_CATEGORIES) for row in sizes):
            raise RuntimeError("%s: expected rows of %d numbers, got %s" % (
                timeline_path, 1 + len(TORCH_CATEGORIES), sorted({len(r) for r in sizes})))
        result["rows"] = len(sizes)
        result["peaks"] = {name: max(row[i + 1] for row in sizes) for i, name in enumerate(TORCH_CATEGORIES)}
        result["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    else:
        tags = gmp.categorize(model, opt)
        gmp.reset_category_peaks()  # the steps' peaks, as the profiler sees them
        run_steps()
        stats = gmp.category_stats()
        result["peaks"] = {name: s["peak"] for name, s in stats.items()}  # requested bytes
        result["current"] = {name: s["current"] for name, s in stats.items()}
        result["allocated_peaks"] = {name: s["allocated_peak"] for name, s in stats.items()}  # block bytes
        result["max_memory_allocated"] = gmp.memory_stats()["allocated_bytes.all.peak"]
        tags.remove()
    result["own_bytes"] = own_bytes(torch, model, opt)
    result["block_bytes"] = final_block_bytes(torch, model, opt)
    result["seconds"] = time.perf_counter() - started
    with open(result_path, "w") as f:
        json.dump(result, f, indent=1)


def tail(path, n=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return "(no log: %s)" % e


def ours_for(name, ours):
    """Our peak of `name` in the measure torch.profiler uses for it, and that measure's name."""
    measure = TORCH_MEASURE.get(name, "allocated")
    peaks = ours["peaks"] if measure == "requested" else ours.get("allocated_peaks", {})
    return peaks.get(name, 0), measure


def exact_verdict(name, t, o, theirs):
    """(ok, text) for an exactly compared category: equal; or torch's peak holds exactly our bytes
    in the tensors named there (parameters, .grad, optimizer state) plus other tensors that torch's
    data-flow guess adds to the category (listed in the breakdown); else FAIL."""
    if t == o:
        return True, "exact: ok"
    b = (theirs.get("breakdown") or {}).get(name)
    if b and b["peak"] == t and b["named_bytes"] == o and b["unnamed_bytes"] == t - o:
        return True, "named tensors exact: ok; torch adds %d bytes of other tensors (below)" % (t - o)
    return False, "exact: FAIL (see below)"


def print_table(workloads, results):
    """The markdown table of both runs of each workload; True when a check failed."""
    failed = False
    print("\nOwn bytes: the tensors' storages at the end (parameters with floating-point buffers, gradients,")
    print("optimizer state). Ours: requested bytes (the tensors') and allocated bytes (their blocks). torch is")
    print("compared with the measure it uses: requested for parameters (pre-existing), allocated for the rest.")
    print("\n| workload | category | own bytes | torch.profiler peak | ours requested | ours allocated | ours - torch | check |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for w in workloads:
        theirs = results.get((w, "torch"))
        ours = results.get((w, "gpumemprof"))
        if theirs is None or ours is None:
            continue
        names = list(TORCH_CATEGORIES) + sorted(set(ours["peaks"]) - set(TORCH_CATEGORIES))
        for name in names:
            t = theirs["peaks"].get(name)
            requested = ours["peaks"].get(name, 0)
            allocated = ours.get("allocated_peaks", {}).get(name, 0)
            o, measure = ours_for(name, ours)
            own = ours.get("own_bytes", {}).get(name)
            diff = "" if t is None else "%+d (%+.2f%%, %s)" % (o - t, 100.0 * (o - t) / t if t else 0.0, measure)
            if name in EXACT:
                own_ok = own == requested and requested > 0
                torch_ok, torch_text = exact_verdict(name, t, o, theirs)
                ok = own_ok and torch_ok
                check = "ours = own: %s; torch (%s): %s" % ("ok" if own_ok else "FAIL", measure, torch_text)
            elif name in WITHIN_5_PERCENT:
                ok = t is not None and t > 0 and abs(o - t) <= 0.05 * t
                check = "within 5%% (%s): %s" % (measure, "ok" if ok else "FAIL (see below)")
            else:
                ok, check = True, "(not compared)"
            failed = failed or not ok
            print("| %s | %s | %s | %s | %d | %d | %s | %s |" % (w, name, "" if own is None else "%d" % own,
                                                             "-" if t is None else "%d" % t, requested, allocated,
                                                             diff, check))
        print("| %s | (peak allocated, whole run) | | %d | | %d | | |" % (
            w, theirs["max_memory_allocated"], ours["max_memory_allocated"]))
        if theirs.get("own_bytes") != ours.get("own_bytes"):
            print("| %s | (own bytes differ between the runs: torch %s) | | | | | | FAIL |" % (w, theirs.get("own_bytes")))
            failed = True
    return failed


def print_breakdown(workloads, results):
    """Which tensors make torch.profiler's peak of each category, against ours: per tensor, torch's
    bytes against the tensor's own bytes and (gradients, optimizer state) its final block bytes."""
    for w in workloads:
        theirs, ours = results.get((w, "torch")), results.get((w, "gpumemprof"))
        if theirs is None or ours is None:
            continue
        if theirs.get("breakdown_error"):
            print("\n%s: no breakdown of torch's peaks: %s" % (w, theirs["breakdown_error"]))
        breakdown = theirs.get("breakdown") or {}
        if breakdown:
            print("\n%s: torch.profiler's peaks by tensor (its analysis replayed in %.1f s; at the first row of each peak)"
                  % (w, theirs.get("breakdown_seconds", 0.0)))
        final_blocks = (theirs.get("block_bytes") or {}).get("by_name") or {}
        for name in TORCH_CATEGORIES:  # all: where torch puts what we count elsewhere
            b = breakdown.get(name)
            if b is None:
                continue
            t = theirs["peaks"].get(name)
            o, measure = ours_for(name, ours)
            print("- %s %s: torch %d (replay: %d%s), ours %d (%s bytes), torch - ours %+d" % (
                w, name, t, b["peak"], "" if b["peak"] == t else " MISMATCH", o, measure, t - o))
            ntb = b["named_tensor_bytes"] if b["named_keys"] else None
            if b["named_keys"]:
                print("  named tensors (parameters, buffers, .grad, optimizer state): %d keys, %d bytes as torch sizes "
                      "them, %s bytes of the tensors themselves%s" % (
                          b["named_keys"], b["named_bytes"], "?" if ntb is None else ntb,
                          "" if ntb is None else " (torch - tensors %+d)" % (b["named_bytes"] - ntb)))
            named_blocks = [final_blocks.get(n, [None])[0] for n in b["named_names"]]
            if b["named_keys"] and named_blocks and all(v is not None for v in named_blocks):
                print("    their final block bytes (torch.cuda.memory_snapshot at the end): %d (torch - blocks %+d)" % (
                    sum(named_blocks), b["named_bytes"] - sum(named_blocks)))
            # Tensors whose torch bytes are neither their final block's nor (no block known) their own.
            odd = [g for g in b["named_all"]
                   if g["bytes"] != final_blocks.get(g["name"], [None])[0] and
                   (g["name"] in final_blocks or g["bytes"] != g["tensor_bytes"])]
            if odd:
                print("    %d named tensors where torch's bytes are not the tensor's final block%s:" % (
                    len(odd), " (the first 12)" if len(odd) > 12 else ""))
            for g in odd[:12]:
                print("    %s: torch %d, tensor %s, final block %s (%d keys)" % (
                    g["name"], g["bytes"], g["tensor_bytes"], final_blocks.get(g["name"], [None])[0], g["keys"]))
            print("  other tensors in torch's %s: %d bytes in %d groups%s" % (
                name, b["unnamed_bytes"], b["unnamed_count"], "" if b["unnamed_count"] <= len(b["unnamed"]) else
                " (the %d largest below)" % len(b["unnamed"])))
            for g in b["unnamed"]:
                print("    %s: %d bytes, %d keys" % (g["name"], g["bytes"], g["keys"]))


def print_flood(workloads, results):
    """Where torch.profiler's activation rule starts and stops (see activation_flood)."""
    for w in workloads:
        theirs = results.get((w, "torch"))
        if theirs is None:
            continue
        if theirs.get("flood_error"):
            print("\n%s: no trace of torch's activation rule: %s" % (w, theirs["flood_error"]))
            continue
        flood = theirs.get("flood")
        if not flood:
            continue
        print("\n%s: torch.profiler's activation rule on the forward ops (outputs become ACTIVATION when an input is "
              "INPUT or ACTIVATION and none is outside INPUT, ACTIVATION, PARAMETER, TEMPORARY)" % w)
        print("  bytes made by forward ops, by torch's category: %s" % ", ".join(
            "%s %d" % kv for kv in sorted(flood["forward_output_bytes"].items(), key=lambda kv: -kv[1])))
        print("  the first forward ops with inputs:")
        for line in flood["first_forward_ops"]:
            print("    " + line)
        print("  the first ops in the model's modules whose outputs are not ACTIVATION:")
        for line in flood.get("first_module_ops_without_activation", []):
            print("    " + line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu-categories-out")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--workloads", default="resnet50,gpt2")
    ap.add_argument("--timeout", type=int, default=150)
    ap.add_argument("--child", nargs=3, metavar=("WORKLOAD", "MODE", "RESULT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.child:
        child(args.child[0], args.child[1], args.steps, args.child[2], args.out)
        return 0

    workloads = [w for w in args.workloads.split(",") if w]
    procs = []
    for w in workloads:  # all at once: each process holds a few GiB of the GPU at most
        for mode in ("torch", "gpumemprof"):
            result = os.path.join(args.out, "%s-%s.json" % (w, mode))
            log = os.path.join(args.out, "%s-%s.log" % (w, mode))
            if os.path.exists(result):
                os.remove(result)
            cmd = [sys.executable, os.path.abspath(__file__), "--out", args.out, "--steps", str(args.steps),
                   "--child", w, mode, result]
            procs.append((w, mode, result, log, subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)))
    failed = False
    results = {}
    for w, mode, result, log, p in procs:
        try:
            rc = p.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "timeout after %d s" % args.timeout
        if rc != 0 or not os.path.exists(result):
            print("gpu_categories: FAIL: %s on %s: exit %s; the end of %s:\n%s" % (w, mode, rc, log, tail(log)))
            failed = True
            continue
        with open(result) as f:
            results[(w, mode)] = json.load(f)
        print("gpu_categories: %s on %s: %.1f s, torch %s, %s" % (
            w, mode, results[(w, mode)]["seconds"], results[(w, mode)]["torch"], results[(w, mode)]["device"]))

    failed = print_table(workloads, results) or failed
    print_breakdown(workloads, results)
    print_flood(workloads, results)
    print("\ngpu_categories: %s" % ("FAIL" if failed else "all checks passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
