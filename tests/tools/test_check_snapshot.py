#!/usr/bin/env python3
"""tools/check_snapshot.py passes a good snapshot and PyTorch's reference, and names each broken
invariant of a snapshot that breaks one: every check below must fail on its own bad file."""
import copy
import os
import pickle
import subprocess
import sys
import tempfile

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
CHECKER = os.path.join(ROOT, "tools", "check_snapshot.py")
REFERENCE = os.path.join(ROOT, "tests", "data", "resnet50_train.snapshot.pickle")
MB = 1 << 20


def good():
    blocks = [{"address": 0x7F0000000000, "size": 512 * 1024, "requested_size": 500 * 1024,
               "state": "active_allocated", "frames": [{"filename": "a.cpp", "line": 3, "name": "f"}]},
              {"address": 0x7F0000000000 + 512 * 1024, "size": 3 * 512 * 1024, "requested_size": 0,
               "state": "inactive", "frames": []}]
    seg = {"device": 0, "address": 0x7F0000000000, "total_size": 2 * MB, "allocated_size": 512 * 1024,
           "active_size": 512 * 1024, "requested_size": 500 * 1024, "stream": 0, "segment_type": "small",
           "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}
    trace = [{"action": "segment_alloc", "addr": seg["address"], "size": 2 * MB, "stream": 0, "time_us": 10,
              "frames": []},
             {"action": "alloc", "addr": seg["address"], "size": 500 * 1024, "stream": 0, "time_us": 11,
              "frames": [{"filename": "a.cpp", "line": 3, "name": "f"}], "user_metadata": "", "category": "weights"},
             {"action": "oom", "device_free": 0, "size": 1 << 40, "stream": 0, "time_us": 12, "frames": []}]
    return {"segments": [seg], "device_traces": [trace], "allocator_settings": {"max_split_size": -1},
            "external_annotations": [{"name": "step 0", "stage": "START", "device": 0, "time_us": 10}]}


def run(path):
    r = subprocess.run([sys.executable, CHECKER, path], capture_output=True, text=True)
    return r.returncode, r.stdout


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        def check(name, data, expect_ok, needle=""):
            nonlocal failures
            path = os.path.join(tmp, name + ".pickle")
            with open(path, "wb") as f:
                f.write(data if isinstance(data, bytes) else pickle.dumps(data, protocol=4))
            rc, out = run(path)
            ok = (rc == 0) == expect_ok and needle in out
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {rc}" + ("" if ok else f"\n{out}"))

        check("good", good(), True)
        rc, out = run(REFERENCE)
        failures += rc != 0
        print(f"{'ok  ' if rc == 0 else 'FAIL'} PyTorch 2.11's reference snapshot: exit {rc}")

        def broken(name, edit, needle):
            s = copy.deepcopy(good())
            edit(s)
            check(name, s, False, needle)

        broken("no device_traces", lambda s: s.pop("device_traces"), "'device_traces' is missing")
        broken("no segments", lambda s: s.pop("segments"), "'segments' is missing")
        broken("blocks do not tile", lambda s: s["segments"][0]["blocks"].pop(), "must tile the segment")
        broken("block address off", lambda s: s["segments"][0]["blocks"][1].update(address=1), "address")
        broken("allocated_size wrong", lambda s: s["segments"][0].update(allocated_size=1), "allocated_size is 1")
        broken("requested > size", lambda s: s["segments"][0]["blocks"][0].update(requested_size=MB),
               "exceeds size")
        broken("unknown state", lambda s: s["segments"][0]["blocks"][0].update(state="busy"), "state 'busy'")
        broken("segment_type", lambda s: s["segments"][0].update(segment_type="huge"), "segment_type")
        broken("unknown action", lambda s: s["device_traces"][0][1].update(action="malloc"), "action 'malloc'")
        broken("alloc without addr", lambda s: s["device_traces"][0][1].pop("addr"), "'addr' is missing")
        broken("time goes back", lambda s: s["device_traces"][0][2].update(time_us=1), "before the previous")
        broken("bad frame", lambda s: s["device_traces"][0][1]["frames"][0].pop("line"), "frames must be")
        broken("category not str", lambda s: s["device_traces"][0][1].update(category=3), "category is not")
        broken("annotation stage", lambda s: s["external_annotations"][0].update(stage="BEGIN"), "stage 'BEGIN'")
        broken("int above 2**53", lambda s: s["device_traces"][0][1].update(size=2**60), "wider than the viewer")
        broken("9-byte int", lambda s: s["device_traces"][0][1].update(size=2**70), "wider than the viewer")
        # Opcodes the browser viewer does not decode: bytes (SHORT_BINBYTES), protocol 5's frame, a set.
        check("bytes value", pickle.dumps({**good(), "x": b"ab"}, protocol=4), False, "SHORT_BINBYTES")
        check("protocol 5", pickle.dumps(good(), protocol=5), False, "protocol 2, 3 or 4")
        check("a set", pickle.dumps({**good(), "x": {1}}, protocol=4), False, "cannot decode")
        check("not a pickle", b"hello", False, "not a readable pickle")
        check("top level a list", pickle.dumps([1], protocol=4), False, "not a dict")
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
