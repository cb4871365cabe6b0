#!/usr/bin/env python3
"""The C++ blocks of README.md, for building each as written.

  readme_snippets.py --list README.md          one line per ```cpp block: "<index> <kind>", kind
                                               catch2 (a Catch2 test file), benchmark (Google
                                               Benchmark) or program (has main)
  readme_snippets.py --write N README.md OUT   writes block N to OUT

A block that is none of these (a fragment) is an error: every C++ block must compile as written.
"""
import re
import sys


def blocks(readme):
    with open(readme, encoding="utf-8") as f:
        return re.findall(r"^```cpp\n(.*?)^```", f.read(), re.S | re.M)


def kind(code):
    if "TEST_CASE(" in code:
        return "catch2"
    if "BENCHMARK_MAIN()" in code:
        return "benchmark"
    if re.search(r"\bint main\s*\(", code):
        return "program"
    return None


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--list":
        for i, code in enumerate(blocks(sys.argv[2])):
            k = kind(code)
            if k is None:
                sys.exit("%s: C++ block %d is a fragment (no main, TEST_CASE or BENCHMARK_MAIN): "
                         "make it a whole program so it can be built as written" % (sys.argv[2], i))
            print(i, k)
    elif len(sys.argv) == 5 and sys.argv[1] == "--write":
        n = int(sys.argv[2])
        all_blocks = blocks(sys.argv[3])
        if n >= len(all_blocks):
            sys.exit("%s has %d C++ blocks, not %d: reconfigure (meson setup --reconfigure)" %
                     (sys.argv[3], len(all_blocks), n + 1))
        with open(sys.argv[4], "w", encoding="utf-8") as f:
            f.write("// Block %d of README.md, as written (tests/readme/readme_snippets.py).\n" % n)
            f.write(all_blocks[n])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
