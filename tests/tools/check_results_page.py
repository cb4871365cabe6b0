"""bench/RESULTS.md is a page of current figures: every section (## heading) names the device,
the date, the commit and the command behind its figures, holds at least one table, and the page
stays short enough to read (the history of the figures is in git).

    check_results_page.py RESULTS.md
"""
import re
import sys

DEVICES = ("dev VM", "H100", "H200")
MAX_LINES = 400


def main():
    text = open(sys.argv[1], encoding="utf-8").read()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    failures = []
    lines = text.count("\n")
    if lines > MAX_LINES:
        failures.append("%d lines: a page of current figures, not a journal (at most %d)" % (lines, MAX_LINES))
    for body in sections:
        title = body.splitlines()[0]
        missing = []
        if not any(d in body for d in DEVICES):
            missing.append("device")
        if not re.search(r"\b20\d\d-\d\d-\d\d\b", body):
            missing.append("date")
        if not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", body):
            missing.append("commit")
        if "`" not in body:
            missing.append("command")
        if not re.search(r"^\|.*\|\s*$", body, flags=re.M):
            missing.append("table")
        if missing:
            failures.append("section '%s' names no %s" % (title, ", ".join(missing)))
    for f in failures:
        print("FAIL " + f)
    print("%d sections, %d lines: %s" % (len(sections), lines, "ok" if not failures else "%d problems" % len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
