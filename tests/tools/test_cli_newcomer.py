"""What a newcomer meets first. The CLI loads only what a command needs: `gpumemprof --version`
and `help` start without cuBLAS (which the demo loads when it runs on a GPU) -- checked with the
dynamic loader's own report (LD_DEBUG=libs), so a library linked but never called still counts.
Every command's help starts with a usage line and uses no word that means nothing outside the
project.

    test_cli_newcomer.py GPUMEMPROF
"""
import os
import subprocess
import sys


def loaded_libraries(exe, *args):
    env = dict(os.environ, LD_DEBUG="libs")
    r = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=60)
    libs = set()
    for line in r.stderr.splitlines():
        if "calling init:" in line:
            libs.add(os.path.basename(line.split("calling init:", 1)[1].strip()))
    return r.returncode, libs


def main():
    exe = sys.argv[1]
    failures = 0
    for args in (["--version"], ["help"]):
        rc, libs = loaded_libraries(exe, *args)
        heavy = sorted(lib for lib in libs if lib.startswith(("libcublas", "libcudnn", "libcufft", "libcusparse")))
        ok = rc == 0 and libs and not heavy
        print("%s gpumemprof %s loads %d libraries%s" % ("ok  " if ok else "FAIL", " ".join(args), len(libs),
                                                       (": " + ", ".join(heavy)) if heavy else ""))
        failures += not ok

    internal = ("seed's", "shared traces", "shared/traces", "anchor figures", "../shared")
    for cmd in ("replay", "tune", "diff", "summary", "html", "perfetto", "demo"):
        r = subprocess.run([exe, "help", cmd], capture_output=True, text=True, timeout=60)
        if cmd == "demo" and r.returncode == 2 and "without the examples" in r.stderr:
            print("skip gpumemprof help demo: built without the examples")
            continue
        words = [w for w in internal if w in r.stdout]
        ok = r.returncode == 0 and r.stdout.startswith("usage: gpumemprof " + cmd) and not words
        print("%s gpumemprof help %s: %s%s" % ("ok  " if ok else "FAIL", cmd, r.stdout.splitlines()[0] if r.stdout else
                                              "(no output) " + r.stderr.strip(), "; says " + ", ".join(words) if words else ""))
        failures += not ok
    # `help` lists the demo exactly where `demo` runs (a CLI built without the examples has none).
    listed = any(line.startswith("  demo ") for line in
                 subprocess.run([exe, "help"], capture_output=True, text=True, timeout=60).stdout.splitlines())
    built = subprocess.run([exe, "demo", "--help"], capture_output=True, text=True, timeout=60).returncode == 0
    ok = listed == built
    print("%s gpumemprof help %s the demo, which this build %s" % ("ok  " if ok else "FAIL", "lists" if listed else
                                                                   "does not list", "has" if built else "lacks"))
    failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
