#!/usr/bin/env python3
"""A test this build cannot run, registered anyway so it shows as skipped with its reason:
prints "skipped: REASON" and exits 77 (Meson's skip status).

usage: skipped.py REASON..."""
import sys

print("skipped: " + " ".join(sys.argv[1:]))
sys.exit(77)
