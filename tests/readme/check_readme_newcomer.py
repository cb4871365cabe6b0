"""What a newcomer needs from README.md: a lean install (no tests, benchmarks or examples built),
a --prefix example with where the .pc lands and PKG_CONFIG_PATH, compiled usage of LeakDetector
and MemoryTracker, the flags C++ stacks need, the Quick start's two commands -- and no word that
means nothing outside the project.

    check_readme_newcomer.py README.md
"""
import re
import sys

INTERNAL = ("the seed's", "shared traces", "anchor figures", "shared/traces", "../shared")


def main():
    text = open(sys.argv[1], encoding="utf-8").read()
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S)
    sh = "\n".join(b for lang, b in blocks if lang == "sh")
    cpp = "\n".join(b for lang, b in blocks if lang == "cpp")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    quick_cmds = [l for b in re.findall(r"^```sh\n(.*?)^```", quick, flags=re.M | re.S) for l in b.splitlines() if l.strip()]
    checks = [
        ("the install builds no tests, benchmarks or examples",
         re.search(r"meson setup .*-Dtests=false -Dbenchmarks=false -Dexamples=false", sh)),
        ("the install shows --prefix", re.search(r"meson setup .*--prefix", sh)),
        ("the install says where the .pc lands", "<libdir>/pkgconfig" in text and "gpumemprof.pc" in text),
        ("the install sets PKG_CONFIG_PATH", "export PKG_CONFIG_PATH=" in sh),
        ("a compiled example uses MemoryTracker", "gmp::MemoryTracker" in cpp),
        ("a compiled example uses LeakDetector", "gmp::LeakDetector" in cpp),
        ("the flags C++ stacks need are named", "-DGPUMEMPROF_WITH_STACKTRACE=1 -DBOOST_STACKTRACE_LINK" in text),
        ("the Quick start is two commands", len(quick_cmds) == 2),
    ]
    failures = 0
    for what, ok in checks:
        print(("ok   " if ok else "FAIL ") + what)
        failures += not ok
    for word in INTERNAL:
        if word in text:
            print("FAIL README.md says %r, which means nothing outside the project" % word)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
