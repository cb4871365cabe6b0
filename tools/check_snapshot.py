#!/usr/bin/env python3
"""Checks memory snapshot pickles against what PyTorch's memory viewers read and assert.

  python3 tools/check_snapshot.py FILE [FILE ...]

Prints one line per problem and "FILE: ok" or "FILE: FAILED" per file; the exit status is 0 when
every file passes, 1 otherwise, 2 on usage errors. Standard library only (Python 3.8+).

What is checked (docs/pytorch-compat.md, "Snapshots", says why):
  the pickle     protocol 2, 3 or 4, and only the opcodes the browser viewer's own unpickler
                 decodes (dict, list, tuple, str, int of at most 8 bytes, float, bool, None, the
                 memo); no integer above 2**53 (JavaScript numbers lose precision beyond it);
  the top level  a dict with both `segments` and `device_traces` as lists (either may be empty);
                 `allocator_settings` a dict and `external_annotations` a list when present;
  segments       the fields and types the viewer reads, segment_type "large" or "small", blocks
                 that tile the segment exactly (each at the segment's address plus the sizes before
                 it; their sizes sum to total_size), allocated_size / active_size / requested_size
                 equal to what the blocks say, and over all segments
                 allocated + free inside blocks + free blocks = reserved;
  trace entries  a known action, the int fields of that action (oom: device_free and size; every
                 other: addr, size, stream), time_us an int that never goes backwards, frames with
                 filename, line and name, string user_metadata / category when present;
  annotations    name, stage START or END, device and time_us.
"""
import pickle
import pickletools
import sys

# The opcodes the browser viewer's unpickler (MemoryViz.js) implements.
VIEWER_OPS = frozenset("""
PROTO FRAME STOP MARK NONE NEWTRUE NEWFALSE BININT BININT1 BININT2 LONG1 BINFLOAT
SHORT_BINUNICODE BINUNICODE EMPTY_DICT DICT SETITEM SETITEMS EMPTY_LIST LIST APPEND APPENDS
EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 BINPUT LONG_BINPUT MEMOIZE BINGET LONG_BINGET
""".split())
JS_SAFE = 2**53
STATES = ("active_allocated", "active_pending_free", "inactive")
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom")
MAX_PROBLEMS = 50


class Problems(list):
    def add(self, where, what):
        self.append(f"{where}: {what}" if where else what)
        return len(self) >= MAX_PROBLEMS


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_fields(p, where, obj, fields):
    if not isinstance(obj, dict):
        p.add(where, "is not a dict")
        return False
    for key, kind in fields:
        value = obj.get(key)
        ok = is_int(value) if kind is int else isinstance(value, kind)
        if not ok:
            p.add(where, f"'{key}' is missing or not {kind.__name__}")
    return True


def check_opcodes(p, data):
    try:
        ops = list(pickletools.genops(data))
    except Exception as e:  # noqa: BLE001 -- a pickle that does not decode is the finding
        p.add("", f"not a readable pickle ({e})")
        return False
    if not ops or ops[0][0].name != "PROTO" or ops[0][1] not in (2, 3, 4):
        p.add("", "not pickle protocol 2, 3 or 4 (the browser viewer reads only those)")
    unknown = sorted({op.name for op, _, _ in ops} - VIEWER_OPS)
    if unknown:
        p.add("", f"opcodes the browser viewer cannot decode: {', '.join(unknown)}")
    for op, arg, pos in ops:
        if op.name == "LONG1" and (abs(arg) > JS_SAFE or len(data) > pos + 1 and data[pos + 1] > 8):
            p.add("", f"integer {arg} at byte {pos} is wider than the viewer reads (8 bytes, 2**53 exactly)")
            break
    return True


def check_segments(p, segments):
    reserved = used = slack = free = 0
    for i, seg in enumerate(segments):
        where = f"segments[{i}]"
        if not check_fields(p, where, seg, [("device", int), ("address", int), ("total_size", int),
                                            ("allocated_size", int), ("active_size", int),
                                            ("requested_size", int), ("stream", int),
                                            ("segment_type", str), ("blocks", list)]):
            continue
        if seg.get("segment_type") not in ("large", "small"):
            p.add(where, f"segment_type {seg.get('segment_type')!r} is not 'large' or 'small'")
        base = seg.get("address") if is_int(seg.get("address")) else 0
        offset = allocated = active = requested = 0
        for j, block in enumerate(seg.get("blocks") or []):
            bw = f"{where}.blocks[{j}]"
            if not check_fields(p, bw, block, [("size", int), ("requested_size", int), ("state", str),
                                               ("frames", list)]):
                continue
            size = block["size"] if is_int(block.get("size")) else 0
            req = block["requested_size"] if is_int(block.get("requested_size")) else 0
            state = block.get("state")
            if state not in STATES:
                p.add(bw, f"state {state!r} is not one of {', '.join(STATES)}")
            if "address" in block and block["address"] != base + offset:
                p.add(bw, f"address {block['address']:#x} is not where the blocks before it end "
                          f"({base + offset:#x})")
            if state == "active_allocated":
                if req > size:
                    p.add(bw, f"requested_size {req} exceeds size {size}")
                allocated += size
                used += req
                slack += size - req
            else:
                free += size
            if state in ("active_allocated", "active_pending_free"):
                active += size
                requested += req
            offset += size
        total = seg.get("total_size")
        if offset != total:
            p.add(where, f"blocks sum to {offset} bytes, total_size is {total} (blocks must tile the segment)")
        for key, value in (("allocated_size", allocated), ("active_size", active)):
            if is_int(seg.get(key)) and seg[key] != value:
                p.add(where, f"{key} is {seg[key]}, its blocks say {value}")
        reserved += total if is_int(total) else 0
        if len(p) >= MAX_PROBLEMS:
            return
    if used + slack + free != reserved:
        p.add("", f"allocated {used} + free inside blocks {slack} + free blocks {free} != reserved {reserved}")


def check_traces(p, traces):
    for d, trace in enumerate(traces):
        if not isinstance(trace, list):
            p.add(f"device_traces[{d}]", "is not a list")
            continue
        last = None
        for k, entry in enumerate(trace):
            where = f"device_traces[{d}][{k}]"
            if not isinstance(entry, dict):
                p.add(where, "is not a dict")
                continue
            action = entry.get("action")
            if action not in ACTIONS:
                if p.add(where, f"action {action!r} is not one of PyTorch's"):
                    return
                continue
            needs = ("device_free", "size") if action == "oom" else ("addr", "size", "stream")
            check_fields(p, where, entry, [(key, int) for key in needs])
            t = entry.get("time_us")
            if t is not None:
                if not is_int(t):
                    p.add(where, "time_us is not an int")
                elif last is not None and t < last:
                    p.add(where, f"time_us {t} is before the previous entry's {last}")
                else:
                    last = t
            frames = entry.get("frames", [])
            if not isinstance(frames, list) or not all(
                    isinstance(f, dict) and isinstance(f.get("filename"), str) and is_int(f.get("line"))
                    and isinstance(f.get("name"), str) for f in frames):
                p.add(where, "frames must be a list of {filename: str, line: int, name: str}")
            for key in ("user_metadata", "category"):
                if key in entry and not isinstance(entry[key], str):
                    p.add(where, f"{key} is not a string")
            if len(p) >= MAX_PROBLEMS:
                return


def check_annotations(p, annotations):
    for i, a in enumerate(annotations):
        where = f"external_annotations[{i}]"
        if check_fields(p, where, a, [("name", str), ("stage", str), ("device", int), ("time_us", int)]):
            if a.get("stage") not in ("START", "END"):
                p.add(where, f"stage {a.get('stage')!r} is not START or END")


def check(path):
    """The problems of one file (empty when it passes)."""
    p = Problems()
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return [f"cannot read it ({e.strerror})"]
    if not check_opcodes(p, data):
        return p
    try:
        snap = pickle.loads(data)
    except Exception as e:  # noqa: BLE001
        return p + [f"does not unpickle ({e})"]
    if not isinstance(snap, dict):
        return p + ["the top level is not a dict"]
    for key in ("segments", "device_traces"):
        if not isinstance(snap.get(key), list):
            p.add("", f"top-level '{key}' is missing or not a list (the viewer needs both)")
    if "allocator_settings" in snap and not isinstance(snap["allocator_settings"], dict):
        p.add("", "allocator_settings is not a dict")
    if isinstance(snap.get("segments"), list):
        check_segments(p, snap["segments"])
    if isinstance(snap.get("device_traces"), list) and len(p) < MAX_PROBLEMS:
        check_traces(p, snap["device_traces"])
    annotations = snap.get("external_annotations", [])
    if not isinstance(annotations, list):
        p.add("", "external_annotations is not a list")
    elif len(p) < MAX_PROBLEMS:
        check_annotations(p, annotations)
    if len(p) >= MAX_PROBLEMS:
        p.append(f"(stopped after {MAX_PROBLEMS} problems)")
    return p


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    failed = 0
    for path in argv:
        problems = check(path)
        for line in problems:
            print(f"{path}: {line}")
        print(f"{path}: {'FAILED' if problems else 'ok'}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
