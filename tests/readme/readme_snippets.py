#!/usr/bin/env python3
"""The C++ blocks of README.md and of every docs/*.md page, for building each as written.

  readme_snippets.py --pages ROOT              the pages: README.md, then docs/*.md (sorted)
  readme_snippets.py --list PAGE...            one line per ```cpp block: "<name>\t<page>\t<index>\t<kind>";
                                               name is unique per page (README, docs_<stem>); kind
                                               catch2 (a Catch2 test file), benchmark (Google
                                               Benchmark) or program (has main)
  readme_snippets.py --write N PAGE OUT        writes block N of PAGE to OUT
  readme_snippets.py --check-pages ROOT PAGE...  fails when the pages under ROOT are not the ones
                                               given (a docs page added since meson's configure step)

A block that is none of these (a fragment) is an error: every C++ block must compile as written.
"""
import glob
import os
import re
import sys


def pages(root):
    return [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))


def blocks(page):
    with open(page, encoding="utf-8") as f:
        return re.findall(r"^```cpp\n(.*?)^```", f.read(), re.S | re.M)


def kind(code):
    if "TEST_CASE(" in code:
        return "catch2"
    if "BENCHMARK_MAIN()" in code:
        return "benchmark"
    if re.search(r"\bint main\s*\(", code):
        return "program"
    return None


def page_name(page):
    stem = os.path.splitext(os.path.basename(page))[0]
    in_docs = os.path.basename(os.path.dirname(os.path.abspath(page))) == "docs"
    return ("docs_" if in_docs else "") + re.sub(r"[^A-Za-z0-9_]", "_", stem)


def main():
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--pages":
        print("\n".join(pages(args[1])))
    elif len(args) >= 2 and args[0] == "--list":
        for page in args[1:]:
            for i, code in enumerate(blocks(page)):
                k = kind(code)
                if k is None:
                    sys.exit("%s: C++ block %d is a fragment (no main, TEST_CASE or BENCHMARK_MAIN): "
                             "make it a whole program so it can be built as written" % (page, i))
                print("\t".join([page_name(page), page, str(i), k]))
    elif len(args) == 4 and args[0] == "--write":
        n = int(args[1])
        all_blocks = blocks(args[2])
        if n >= len(all_blocks):
            sys.exit("%s has %d C++ blocks, not %d: reconfigure (meson setup --reconfigure)" %
                     (args[2], len(all_blocks), n + 1))
        with open(args[3], "w", encoding="utf-8") as f:
            f.write("// Block %d of %s, as written (tests/readme/readme_snippets.py).\n" % (n, os.path.basename(args[2])))
            f.write(all_blocks[n])
    elif len(args) >= 2 and args[0] == "--check-pages":
        now = set(map(os.path.abspath, pages(args[1])))
        configured = set(map(os.path.abspath, args[2:]))
        for p in sorted(now - configured):
            print("%s is new since meson's configure step: its C++ blocks are not built yet; "
                  "run meson setup --reconfigure" % p)
        for p in sorted(configured - now):
            print("%s is gone since meson's configure step: run meson setup --reconfigure" % p)
        if now != configured:
            sys.exit(1)
        print("ok: %d pages, every C++ block built" % len(now))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
