#!/usr/bin/env python3
"""What a newcomer needs from the front page (README.md) and the pages behind it (docs/*.md):

README.md  at most 200 lines; the Quick start is exactly two commands, scripts/demo and
           scripts/test; a lean install (no tests, benchmarks or examples built) with --prefix,
           where the .pc files land and PKG_CONFIG_PATH; headline results with numbers and a link
           to bench/RESULTS.md; a link to every docs page;
docs/      a compiled example of MemoryTracker and of LeakDetector, the flags C++ stacks need, the
           offline pip install of the PyTorch bridge;
all pages  every relative link resolves, and no word that means nothing outside the project.

    check_readme_newcomer.py REPOSITORY_ROOT
"""
import glob
import os
import re
import sys

INTERNAL = ("the seed's", "shared traces", "anchor figures", "shared/traces", "../shared", "PYTORCH-COMPAT",
            "/work/")
MAX_README_LINES = 200


def code_blocks(text, lang):
    return "\n".join(b for l, b in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S) if l == lang)


def section(text, title):
    parts = text.split("\n## " + title, 1)
    return parts[1].split("\n## ", 1)[0] if len(parts) == 2 else ""


def main():
    root = sys.argv[1]
    readme_path = os.path.join(root, "README.md")
    readme = open(readme_path, encoding="utf-8").read()
    docs = {p: open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(root, "docs", "*.md")))}
    all_docs = "\n".join(docs.values())
    sh = code_blocks(readme, "sh")
    quick = section(readme, "Quick start")
    quick_cmds = [l.split("#")[0].strip() for l in code_blocks(quick, "sh").splitlines() if l.strip()]
    results = section(readme, "Results")
    checks = [
        ("README.md is at most %d lines (%d)" % (MAX_README_LINES, readme.count("\n")),
         readme.count("\n") <= MAX_README_LINES),
        ("the Quick start is two commands, scripts/demo and scripts/test",
         quick_cmds == ["scripts/demo", "scripts/test"]),
        ("the install builds no tests, benchmarks or examples",
         re.search(r"meson setup .*-Dtests=false -Dbenchmarks=false -Dexamples=false", sh)),
        ("the install shows --prefix", re.search(r"meson setup .*--prefix", sh)),
        ("the install says where the .pc lands", "<libdir>/pkgconfig" in readme and "gpumemprof.pc" in readme),
        ("the install sets PKG_CONFIG_PATH", "export PKG_CONFIG_PATH=" in sh),
        ("the results give numbers and link bench/RESULTS.md",
         len(re.findall(r"\d+(?:\.\d+)? ?(?:MiB|ns|ms|µs|s)\b", results)) >= 5 and "(bench/RESULTS.md)" in results),
        ("a docs example uses MemoryTracker", "gmp::MemoryTracker" in code_blocks(all_docs, "cpp")),
        ("a docs example uses LeakDetector", "gmp::LeakDetector" in code_blocks(all_docs, "cpp")),
        ("the flags C++ stacks need are named", "-DGPUMEMPROF_WITH_STACKTRACE=1 -DBOOST_STACKTRACE_LINK" in all_docs),
        ("the offline pip install is explained",
         "--system-site-packages" in all_docs and "python3-mesonpy" in all_docs and "--no-build-isolation" in all_docs),
    ]
    for p in docs:
        rel = "docs/" + os.path.basename(p)
        checks.append(("README.md links %s" % rel, "(%s)" % rel in readme))
    failures = 0
    for what, ok in checks:
        print(("ok   " if ok else "FAIL ") + what)
        failures += not ok
    for path, text in [(readme_path, readme)] + list(docs.items()):
        name = os.path.relpath(path, root)
        for word in INTERNAL:
            if word in text:
                print("FAIL %s says %r, which means nothing outside the project" % (name, word))
                failures += 1
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            if not os.path.exists(os.path.join(os.path.dirname(path), target)):
                print("FAIL %s links %s, which does not exist" % (name, target))
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
