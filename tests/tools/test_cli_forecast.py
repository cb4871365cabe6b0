#!/usr/bin/env python3
"""`gpumemprof forecast`: probes of a synthetic training loop written as PyTorch writes snapshots
(pickle protocols 2 to 5, one gzip-compressed), sizes constant, linear and quadratic in the
parameter, one request only the larger probe makes. The forecast's peaks must equal the replay
of the true target run exactly (`gpumemprof replay`); --capacity says fits or not; --tune replays
the `tune` configs; bad input is one error line and exit 2.

usage: test_cli_forecast.py GPUMEMPROF_BINARY"""
import gzip
import json
import os
import pickle
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_checks  # noqa: E402

BIN = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="gpumemprof-forecast-")
check = cli_checks.check


def run(*args, expect_rc=0):
    return cli_checks.run(BIN, *args, expect_rc=expect_rc, timeout=300)


def program(p, extra=False):
    """The trace of 3 steps at parameter p: constant weights, activations linear in p, attention
    scores quadratic, a small constant workspace per layer; `extra`: a request only this run makes."""
    trace, addr = [], [0x7F0000000000]

    def alloc(size, stream=0):
        addr[0] += 1 << 32
        trace.append({"action": "alloc", "addr": addr[0], "size": size, "stream": stream, "time_us": len(trace),
                      "frames": []})
        return (addr[0], size, stream)

    def free(block):
        a, size, stream = block
        for action in ("free_requested", "free_completed"):
            trace.append({"action": action, "addr": a, "size": size, "stream": stream, "time_us": len(trace),
                          "frames": []})

    weights = [alloc(3 * 2**20 + 512 * k) for k in range(6)]
    for _ in range(3):
        acts = []
        for layer in range(6):
            acts.append(alloc(p * 65536 * (layer + 1)))
            scores = alloc(p * p * 2048)
            ws = alloc(8192)
            if extra and layer == 2:
                free(alloc(5 * 2**20))
            free(ws)
            acts.append(scores)
        for block in reversed(acts):
            grad = alloc(block[1])
            free(block)
            free(grad)
    for w in weights:
        free(w)
    return {"segments": [], "device_traces": [trace]}


def write(name, snap, protocol=4, compress=False):
    path = os.path.join(TMP, name)
    data = pickle.dumps(snap, protocol=protocol)
    with (gzip.open if compress else open)(path, "wb") as f:
        f.write(data)
    return path


a = write("p8.pickle", program(8), protocol=2)
b = write("p16.pickle.gz", program(16, extra=True), protocol=5, compress=True)
c = write("p32.pickle", program(32, extra=True), protocol=3)
truth = write("p128.pickle", program(128, extra=True))

t = json.loads(run("replay", truth, "--json").stdout.strip().splitlines()[-1])["devices"][0]
for probes in ((a, b), (a, b, c)):
    args = ["forecast", "--at", "128", "--json"]
    for path, size in zip(probes, (8, 16, 32)):
        args += ["--run", f"{size}={path}"]
    p = run(*args)
    f = json.loads(p.stdout.strip().splitlines()[-1])
    name = f"{len(probes)} probes"
    check(f["peak_reserved_bytes"] == t["peak_reserved_bytes"],
          f"{name}: peak reserved {f['peak_reserved_bytes']}, the true run's replay {t['peak_reserved_bytes']}")
    check(f["peak_allocated_bytes"] == t["peak_allocated_bytes"], f"{name}: peak allocated differs")
    check(f["peak_requested_bytes"] == t["peak_requested_bytes"], f"{name}: peak requested differs")
    check(f["alignment"]["quadratic"] == 36, f"{name}: expected 36 quadratic requests (scores, their grads): {f['alignment']}")
    check(f["alignment"]["unmatched"] == (3 if len(probes) == 2 else 0), f"{name}: unmatched {f['alignment']}")
    check(f["confident"], f"{name}: not confident: {f['warnings']}")
    check(f["config"] == "", f"{name}: config {f['config']!r}")
    check(f["next_probe"] is None and f["next_probe_shows"] == "", f"{name}: confident, yet a next probe: {f}")
    # What the probes do not determine: the 3 requests only the larger probe made, with their range.
    u = f["uncertain"]
    if len(probes) == 2:
        check(sum(g["requests"] for g in u) == 3 and all(g["unmatched"] for g in u)
              and all(g["size_at_probes"][0] == 0 and g["size_if_kept"] <= g["size_if_grown"] for g in u),
              f"{name}: uncertain {u}")
    else:
        check(u == [], f"{name}: uncertain {u}")

# Text output names the sizes and the explanation.
p = run("forecast", "--run", f"8={a}", "--run", f"16={b}", "--at", "128")
check("peak_reserved_bytes" in p.stdout and "straight line" in p.stdout and "by size model" in p.stdout,
      f"text output lacks its lines:\n{p.stdout}")

# Capacity: fits in plenty, not in a tenth; --tune replays every config and says which fit.
plenty = str(t["peak_reserved_bytes"] * 2)
small = str(t["peak_reserved_bytes"] // 10)
f = json.loads(run("forecast", "--run", f"8={a}", "--run", f"16={b}", "--at", "128", "--capacity", plenty,
                   "--json").stdout.strip().splitlines()[-1])
check(f["fits"] is True and f["margin_bytes"] > 0, f"expected a fit in {plenty}: {f.get('fits')}")
f = json.loads(run("forecast", "--run", f"8={a}", "--run", f"16={b}", "--at", "128", "--capacity", small, "--tune",
                   "--json").stdout.strip().splitlines()[-1])
check(f["fits"] is False and f["margin_bytes"] < 0, "expected no fit in a tenth of the peak")
check(len(f["tune"]) >= 10 and any("expandable_segments" in r["config"] for r in f["tune"]),
      f"--tune rows: {f.get('tune')}")
check(all(r["fits"] is False for r in f["tune"] if r["supported"]), "a tenth of the peak fits under some config?")
f = json.loads(run("forecast", "--run", f"8={a}", "--run", f"16={b}", "--at", "128", "--config",
                   "expandable_segments:True", "--json").stdout.strip().splitlines()[-1])
check(f["config"] == "expandable_segments:True", "the config used is not reported")

# Bad input: one line, exit 2.
junk = os.path.join(TMP, "junk.pickle")
with open(junk, "wb") as fh:
    fh.write(b"not a snapshot at all")
other = write("other.pickle", {"segments": [], "device_traces": [[
    {"action": "alloc", "addr": 4096 * (k + 1), "size": 1000 + 7 * k, "stream": 9, "time_us": k, "frames": []}
    for k in range(200)]]})
for args, needle in (
        (("--run", f"8={a}", "--at", "64"), "2 or 3 runs"),
        (("--run", f"8={a}", "--run", f"8={b}", "--at", "64"), "different sizes"),
        (("--run", f"8={a}", "--run", f"16={b}", "--at", "12"), "larger than every"),
        (("--run", f"8={a}", "--run", f"16={b}"), "--at"),
        (("--run", f"8={a}", "--run", f"16={junk}", "--at", "64"), "junk.pickle"),
        (("--run", f"8={a}", "--run", f"16={other}", "--at", "64"), "do not look like one program"),
        (("--run", f"x={a}", "--run", f"16={b}", "--at", "64"), "positive number"),
        (("--run", a, "--run", f"16={b}", "--at", "64"), "SIZE=SNAPSHOT"),
        (("--run", f"8={a}", "--run", f"16={b}", "--at", "64", "--tune", "--config", "x:1"), "not both"),
        (("--run", f"8={a}", "--run", f"16={b}", "--at", "64", "--reduction-cap", "lots"), "--reduction-cap"),
        (("--run", f"8={a}", "--run", f"16={os.path.join(TMP, 'missing.pickle')}", "--at", "64"), "missing.pickle")):
    p = run("forecast", *args, expect_rc=2)
    cli_checks.check_one_error_line(p, needle)

# Real probes (PyTorch 2.11 on an H200, tests/data/README.md): from three probes the peak reserved at 8x is
# within 3% of what PyTorch reserved; peak allocated within 1% from two (resnet50) and three.
DATA = os.path.join(os.environ.get("GPUMEMPROF_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                    "tests", "data", "forecast")
for w, reserved, allocated in (("resnet50", 7029653504, 5854787584), ("moe_dyn", 1732247552, 1444742144)):
    for sizes in ((8, 16), (8, 16, 32)):
        args = ["forecast", "--at", "64", "--json"]
        for s in sizes:
            args += ["--run", f"{s}={os.path.join(DATA, f'{w}_{s}.pickle.gz')}"]
        f = json.loads(run(*args).stdout.strip().splitlines()[-1])
        # Sizes that follow the data (moe_dyn): the range cannot bound what a run at the target adds; said.
        check(f["range_bounds_all"] == (w != "moe_dyn") and bool(f["range_excludes"]) == (w == "moe_dyn"),
              f"{w} from {sizes}: range_bounds_all {f['range_bounds_all']}, range_excludes {f['range_excludes']!r}")
        if w == "moe_dyn" and len(sizes) == 2:
            text = run(*[x for x in args if x != "--json"]).stdout
            check("the range does not bound requests only a run at the target makes" in text, text)
        # ResNet-50 from 8+16: cuDNN workspaces paired by position, off every size law, are kept at the
        # batch-16 size; the explanation marks them so, not as fitted.
        if w == "resnet50" and len(sizes) == 2:
            kept = [g for g in f["uncertain"] if g["implausible"]]
            check(kept and all(not g["unmatched"] and g["size_at_target"] == g["size_at_probes"][1] for g in kept),
                  f"{w} from {sizes}: uncertain {f['uncertain']}")
            text = run(*[x for x in args if x != "--json"]).stdout
            check("kept: no size law" in text, text)
        # Not confident: a third probe at twice the largest (32) would narrow it; from three up to 32 only
        # the run at 64 would (the largest is at half the target).
        check(not f["confident"] and f["next_probe"] == (32 if len(sizes) == 2 else None),
              f"{w} from {sizes}: next_probe {f['next_probe']}: {f['next_probe_shows']}")
        text = run(*[x for x in args if x != "--json"]).stdout
        line = "next probe: a probe at 32 would show whether " if len(sizes) == 2 else \
            "next probe: none; only a run at 64 would decide"
        check(line in text and (len(sizes) == 3 or "--run 32=FILE --at 64" in text), f"{w} from {sizes}:\n{text}")
        # moe_dyn's sizes are random draws (warned): +3.4% from this recording (+2.7% while a parabola
        # could put a size below the largest probe's), -1.1% from 2026-11-30's; its range holds the run.
        if len(sizes) == 3:
            err = f["peak_reserved_bytes"] / reserved - 1
            check(abs(err) <= (0.03 if w == "resnet50" else 0.035),
                  f"{w} from {sizes}: peak reserved {err:+.1%} off PyTorch's")
            check(f["peak_reserved_bytes_low"] <= reserved <= f["peak_reserved_bytes_high"] or w == "resnet50",
                  f"{w} from {sizes}: the range misses {reserved}")
        err = f["peak_allocated_bytes"] / allocated - 1
        if w == "resnet50" or len(sizes) == 3:
            check(abs(err) <= 0.01 if w == "resnet50" else abs(err) <= 0.03,
                  f"{w} from {sizes}: peak allocated {err:+.1%} off PyTorch's")

# ConvNeXt-T 8+16 -> 64: its reduction buffers reach 132 MiB at 16 by growing less than 2x; they stop
# there at 64 (PyTorch reserved 4.41 GiB; a line took them to 483 MiB and the forecast to +15.5%).
cx = []
for s in (8, 16):
    cx += ["--run", f"{s}={os.path.join(DATA, f'convnext_t_{s}.pickle.gz')}"]
text = run("forecast", *cx, "--at", "64").stdout
check("reduction buffers: 192 (PyTorch's split reductions), stopped at 132.00 MiB (the probes show it): 45 lowered"
      in text, text)
f = json.loads(run("forecast", *cx, "--at", "64", "--json", "--reduction-cap", "132MiB").stdout.strip().splitlines()[-1])
check(f["reduction_cap_bytes"] == 132 << 20 and not f["reduction_cap_shown"] and f["reduction_buffers_stopped"] == 45,
      f"convnext_t given the cap: {f['reduction_cap_bytes']} {f['reduction_cap_shown']}")
check(abs(f["peak_reserved_bytes"] / 4731174912 - 1) <= 0.05, f"convnext_t 8+16: {f['peak_reserved_bytes']}")
f = json.loads(run("forecast", *cx, "--at", "64", "--json", "--reduction-cap", "132.75MiB").stdout.splitlines()[-1])
check(f["reduction_cap_bytes"] == 139198464, f"--reduction-cap 132.75MiB: {f['reduction_cap_bytes']}")
for bad in ("0.1K", "132.1234567MiB", "1.5"):  # not whole bytes; more than 6 digits
    cli_checks.check_one_error_line(run("forecast", *cx, "--at", "64", "--reduction-cap", bad, expect_rc=2),
                                    "--reduction-cap", bad)

# `gpumemprof reductions`: ConvNeXt-T at 64 makes 249 reduction buffers of 7 sizes, the largest
# 132 MiB (45 of them: where they stop on the H200); ResNet-50 none; the synthetic program none.
text = run("reductions", os.path.join(DATA, "convnext_t_64.pickle.gz")).stdout
check("249 reduction buffer(s) (PyTorch's split reductions) of 7 size(s); the largest 132.00 MiB" in text
      and "132.00 MiB  x45" in text, text)
r = json.loads(run("reductions", "--json", os.path.join(DATA, "convnext_t_64.pickle.gz")).stdout.splitlines()[-1])
check(r["reduction_buffers"] == 249 and r["largest_bytes"] == 132 << 20 and r["sizes"][0] == {"bytes": 132 << 20,
      "count": 45} and sum(x["count"] for x in r["sizes"]) == 249 and len(r["sizes"]) == 7, f"reductions: {r}")
for path in (os.path.join(DATA, "resnet50_8.pickle.gz"), a):
    r = json.loads(run("reductions", "--json", path).stdout.strip().splitlines()[-1])
    check(r["reduction_buffers"] == 0 and r["largest_bytes"] == 0 and r["sizes"] == [], f"no reductions: {r}")
no_history = write("no_history.pickle", {"segments": [], "device_traces": []})
for args, needle in ((("reductions",), "one snapshot"), (("reductions", a, b), "one snapshot"),
                     (("reductions", junk), "junk.pickle"), (("reductions", no_history), "record history"),
                     (("reductions", a, "--device", "3"), "no trace for device 3"),
                     (("reductions", a, "--device", "x"), "--device"),
                     (("reductions", os.path.join(TMP, "missing.pickle")), "missing.pickle")):
    p = run(*args, expect_rc=2)
    cli_checks.check_one_error_line(p, needle)

# gpumemprof_torch.forecast without torch: what it checks before starting a probe.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
os.environ["GPUMEMPROF_BIN"] = BIN
from gpumemprof_torch import forecast as torch_forecast  # noqa: E402
from gpumemprof_torch.forecast import _where, gpumemprof_binary  # noqa: E402

check(gpumemprof_binary() == BIN, "gpumemprof_binary() does not follow $GPUMEMPROF_BIN")
check(_where(cli_checks.check) == ("cli_checks", "check"), f"_where: {_where(cli_checks.check)}")
for bad, kwargs in ((lambda n: n, {}), (cli_checks.check, {"sizes": (8,)}), (cli_checks.check, {"config": "x", "tune": True})):
    try:
        torch_forecast(bad, **kwargs)
        check(False, f"forecast({bad}, {kwargs}) did not refuse")
    except ValueError as e:
        check("gpumemprof_torch.forecast" in str(e), f"unclear refusal: {e}")

cli_checks.finish("forecast checks")
