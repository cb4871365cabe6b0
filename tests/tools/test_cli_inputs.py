#!/usr/bin/env python3
"""What every command does with the files it is given (issue 29):

 - gzip: every command that reads a snapshot reads .pickle.gz and .json.gz as the plain files;
 - outputs: an empty path, an existing directory, a missing folder or an unwritable one fails at
   once, before any input is read, with one line naming the output;
 - bad input and --help for tune, diff, timeline, slice and perfetto (missing file, junk file,
   timeline -o INPUT);
 - a snapshot whose only trace is device 1 (a rank on cuda:1): timeline finds it as summary and
   html do, and the HTML page names a simulated device sim:N.

usage: test_cli_inputs.py GPUMEMPROF_BINARY   (env: GPUMEMPROF_SOURCE_DIR)"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_checks  # noqa: E402
from cli_checks import check, check_one_error_line  # noqa: E402

BIN = sys.argv[1]
DATA = os.path.join(os.environ.get("GPUMEMPROF_SOURCE_DIR", "."), "tests", "data")
TMP = tempfile.mkdtemp(prefix="gpumemprof-inputs-")
os.chmod(TMP, 0o755)  # the unwritable-folder check may run as another user


def run(*args, expect_rc=0):
    return cli_checks.run(BIN, *args, expect_rc=expect_rc)


def tmp(name):
    return os.path.join(TMP, name)


# Inputs: a snapshot of our own (.pickle and .json) with a trace on device 0, PyTorch's snapshot,
# and their gzip-compressed copies.
trace = os.path.join(DATA, "gpt2_train.trace.gz")  # small: the whole script takes seconds
run("replay", trace, "--repeat", "0", "--snapshot", tmp("ours.pickle"))
run("replay", trace, "--repeat", "0", "--snapshot", tmp("ours.json"))
shutil.copy(os.path.join(DATA, "resnet50_train.snapshot.pickle"), tmp("torch.pickle"))
for name in ("ours.pickle", "ours.json", "torch.pickle"):
    with open(tmp(name), "rb") as f, gzip.open(tmp(name + ".gz"), "wb") as g:
        g.write(f.read())

# 1. gzip: each reader, each compressed format, the same answer as from the plain file.
for name in ("ours.pickle", "ours.json", "torch.pickle"):
    plain, packed = tmp(name), tmp(name + ".gz")
    # PyTorch's snapshot (larger) through the reader every command shares; tune and replay of it
    # take longest and read it as summary does.
    readers = (["summary"], ["diff", plain], ["reductions"]) if name == "torch.pickle" else (
        ["summary"], ["tune"], ["replay"], ["diff", plain], ["reductions"])
    for cmd in readers:
        a = run(*cmd, plain)
        b = run(*cmd, packed)
        same = a.stdout.replace(plain, "X") == b.stdout.replace(packed, "X").replace(plain, "X")
        check(a.returncode == 0 and b.returncode == 0 and same,
              f"{cmd[0]} {name}.gz: exit {b.returncode}, output differs from the plain file's: {b.stderr[:300]}")
    for cmd, ext in (("html", ".html"), ("perfetto", ".json"), ("timeline", ".json")):
        out = tmp(f"{name}.{cmd}{ext}")
        p = run(cmd, packed, "-o", out)
        check(p.returncode == 0 and os.path.getsize(out) > 0, f"{cmd} {name}.gz: exit {p.returncode}: {p.stderr[:300]}")
    p = run("slice", packed, "--max-entries", "100", "-o", tmp(name + ".slice.pickle"))
    check(p.returncode == 0, f"slice {name}.gz: exit {p.returncode}: {p.stderr[:300]}")

# 2. Outputs checked first: each writer, each bad output, with an input that does not exist --
# the one error line is about the output, so the output was checked before reading anything.
os.makedirs(tmp("existing_dir"))
os.makedirs(tmp("locked"))
os.chmod(tmp("locked"), 0o555)
missing_in = tmp("missing-input.pickle")
writers = {
    "replay --snapshot": lambda out: ["replay", missing_in, "--snapshot", out],
    "html": lambda out: ["html", missing_in, "-o", out],
    "perfetto": lambda out: ["perfetto", missing_in, "-o", out],
    "timeline": lambda out: ["timeline", missing_in, "-o", out],
    "slice": lambda out: ["slice", missing_in, "--max-entries", "5", "-o", out],
}
ext = {"replay --snapshot": ".pickle", "html": ".html", "perfetto": ".json", "timeline": ".json", "slice": ".pickle"}
for name, argv in writers.items():
    cases = {
        "an empty path": ("", "empty path"),
        "an existing directory": (tmp("existing_dir"), "is a directory"),
        "a missing folder": (tmp("no/such/folder/out" + ext[name]), "does not exist"),
    }
    for what, (out, needle) in cases.items():
        p = run(*argv(out), expect_rc=2)
        check_one_error_line(p, needle)
        check("missing-input" not in p.stderr, f"{name} with {what}: the input was read before the output was checked: "
              f"{p.stderr!r}")
    # Unwritable: as another user when running as root (root writes anywhere).
    out = os.path.join(tmp("locked"), "out" + ext[name])
    if os.geteuid() == 0:
        def drop():
            os.setgid(65534)
            os.setuid(65534)
        p = subprocess.run([BIN, *argv(out)], capture_output=True, text=True, preexec_fn=drop, timeout=60)
    else:
        p = subprocess.run([BIN, *argv(out)], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2, f"{name} into an unwritable folder: exit {p.returncode}: {p.stderr!r}")
    check_one_error_line(p, "cannot write into the folder")
    check(not os.listdir(tmp("locked")), f"{name}: something was written into the unwritable folder")

# 3. Bad input and help for the commands an earlier audit found untested.
junk = tmp("junk.pickle")
with open(junk, "wb") as f:
    f.write(b"\x80\x04this is not a pickle at all")
text_junk = tmp("junk.json")
with open(text_junk, "w") as f:
    f.write("{ not json")
for cmd in ("tune", "diff", "timeline", "slice", "perfetto", "reductions"):
    p = run(cmd, "--help")
    check(p.stdout.startswith(f"usage: gpumemprof {cmd} "), f"{cmd} --help: {p.stdout[:200]!r}")
    p = run(cmd, "-h")
    check(p.stdout.startswith(f"usage: gpumemprof {cmd} "), f"{cmd} -h: {p.stdout[:200]!r}")
    p = run(cmd, "--no-such-option", expect_rc=2)
    check_one_error_line(p, "--no-such-option")


def bad_args(cmd, path):
    if cmd == "diff":
        return ["diff", path, tmp("ours.pickle")]
    if cmd == "slice":
        return ["slice", path, "--max-entries", "5", "-o", tmp("slice-out.pickle")]
    if cmd in ("timeline", "perfetto"):
        return [cmd, path, "-o", tmp(f"{cmd}-out.json")]
    return [cmd, path]


for cmd in ("tune", "diff", "timeline", "slice", "perfetto", "reductions"):
    for label, path, needle in (("a missing file", tmp("missing.pickle"), "missing.pickle"),
                                ("a junk pickle", junk, "junk.pickle"),
                                ("a junk JSON file", text_junk, "junk.json")):
        p = run(*bad_args(cmd, path), expect_rc=2)
        check_one_error_line(p, needle)
        check("Traceback" not in p.stderr and "terminate" not in p.stderr, f"{cmd} {label}: {p.stderr!r}")
# timeline -o INPUT: a .json snapshot named as its own output is refused, and left intact.
with open(tmp("ours.json"), "rb") as f:
    before = f.read()
p = run("timeline", tmp("ours.json"), "-o", tmp("ours.json"), expect_rc=2)
check_one_error_line(p, "input file")
with open(tmp("ours.json"), "rb") as f:
    check(f.read() == before, "timeline -o INPUT changed the input")
# diff with one argument, tune with two.
check_one_error_line(run("diff", tmp("ours.pickle"), expect_rc=2))
check_one_error_line(run("tune", tmp("ours.pickle"), tmp("ours.pickle"), expect_rc=2))

# 4. A snapshot whose only trace is device 1 (a rank on its second device): every command finds it.
run("replay", trace, "--repeat", "0", "--device", "sim:1", "--snapshot", tmp("dev1.pickle"))
p = run("timeline", tmp("dev1.pickle"), "-o", tmp("dev1.json"))
check(p.returncode == 0 and os.path.getsize(tmp("dev1.json")) > 0,
      f"timeline of a snapshot traced on device 1 only: {p.stderr!r}")
p = run("timeline", tmp("dev1.pickle"), "--device", "0", "-o", tmp("dev1-0.json"), expect_rc=2)
check_one_error_line(p, "devices with a trace: 1")
p = run("summary", tmp("dev1.pickle"))
check("device 1" in p.stdout or "sim:1" in p.stdout, f"summary of the device-1 snapshot: {p.stdout[:300]!r}")
p = run("reductions", tmp("dev1.pickle"))
check("device 1's trace" in p.stdout, f"reductions of the device-1 snapshot: {p.stdout[:300]!r}")
run("html", tmp("dev1.pickle"), "-o", tmp("dev1.html"))
with open(tmp("dev1.html")) as f:
    page = f.read()
# The page's data names the device as the snapshot does, and the picker shows that name.
check('"name":"sim:1"' in page, "the HTML page's data does not name the simulated device sim:1")
check("'\">cuda:' + d.device" not in page and "d.name" in page,
      "the HTML device picker labels devices cuda:N instead of their name")

shutil.rmtree(TMP, ignore_errors=True)
cli_checks.finish("input and output checks")
