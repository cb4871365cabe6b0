"""The light entry headers stay light: gpumemprof/allocator.hpp includes nothing of the history,
profiler, analysis or export layers, and gpumemprof/profiler.hpp nothing of the export layer
(snapshot writers and readers, the HTML report and its assets, Perfetto). Asks the compiler
which files each one pulls in (-M).

    check_light_headers.py INCLUDE_DIR COMPILER [FLAGS...]
"""
import os
import subprocess
import sys

FORBIDDEN = {
    "gpumemprof/allocator.hpp": ("history/", "profiler/", "analysis/", "export/"),
    "gpumemprof/profiler.hpp": ("export/",),
}


def included(include_dir, compiler, header):
    r = subprocess.run([*compiler, "-I" + include_dir, "-M", "-x", "c++", "-"], input="#include <%s>\n" % header,
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("cannot compile %s:\n%s" % (header, r.stderr[-3000:]))
    root = os.path.realpath(os.path.join(include_dir, "gpumemprof"))
    files = r.stdout.replace("\\\n", " ").split(":", 1)[1].split()
    return sorted(os.path.relpath(os.path.realpath(f), root) for f in files
                  if os.path.realpath(f).startswith(root + os.sep))


def main():
    include_dir, compiler = sys.argv[1], sys.argv[2:]
    failures = 0
    for header, forbidden in FORBIDDEN.items():
        own = included(include_dir, compiler, header)
        bad = [f for f in own if f.startswith(forbidden)]
        print("%s %s pulls in %d gpumemprof headers%s" % ("FAIL" if bad else "ok  ", header, len(own),
                                                          ": not allowed: " + ", ".join(bad) if bad else ""))
        failures += bool(bad)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
