#!/usr/bin/env python3
"""The benchmarks' quick run in CI, with guards on the speed claims of bench/RESULTS.md.

Wall clocks on a shared CI machine are noisy and differ from one machine to the next, so each
guard is a ratio of two benchmarks measured in the same process a moment apart (medians of a few
repetitions; a guard that fails is run twice more and judged by its best run): what is claimed to cost nothing must stay close to its baseline, and what is
claimed to be cheap must stay within a bound of the operation it is measured against. A guard's
bound is loose enough for a busy 2-core machine and tight enough to catch a real regression
(a lock or an allocation on the hot path doubles these ratios).

usage: bench_guard.py [--quick] NAME=BINARY ...   (NAME: allocator, history, profiler)
--quick (CI): 3 repetitions of 0.01 s each; without it, 5 of 0.2 s (by hand, steadier)."""
import json
import subprocess
import sys

# name -> [(benchmark, baseline, at most this many times the baseline, the claim)]
GUARDS = {
    "allocator": [
        ("BM_CategoryPair/mode:0", "BM_FixedPair/512", 1.35,
         "the thread's category read costs nothing on an untagged pair (RESULTS: 1232 vs 1231 instructions)"),
        ("BM_CategoryPair/mode:1", "BM_CategoryPair/mode:0", 1.35,
         "a memory_category scope without a ledger costs nothing (RESULTS: 1232 = 1232 instructions)"),
    ],
    "history": [
        ("BM_pair/all_no_stacks:1", "BM_pair/off:0", 3.0,
         "recording history without stacks adds about one pair's cost at most (RESULTS: 77.7 -> 132 ns)"),
    ],
    "profiler": [
        ("BM_ProfileContext", "BM_TwoClockReads", 25.0,
         "profile_context enter+exit stays a few clock reads (RESULTS: 202 ns vs 33.4 ns)"),
    ],
}


def medians(binary, names, quick):
    pattern = "^(" + "|".join(names) + ")$"  # the names hold no regular-expression characters
    args = [binary, "--benchmark_filter=" + pattern, "--benchmark_format=json",
            "--benchmark_repetitions=%d" % (3 if quick else 5), "--benchmark_report_aggregates_only=true",
            "--benchmark_min_time=%s" % ("0.01" if quick else "0.2")]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit("%s failed (exit %d): %s" % (binary, p.returncode, p.stderr[-2000:]))
    out = {}
    for b in json.loads(p.stdout)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            out[b["run_name"]] = b["cpu_time"]
    return out


def main():
    argv = sys.argv[1:]
    quick = "--quick" in argv
    binaries = dict(a.split("=", 1) for a in argv if a != "--quick")
    failed = 0
    for name, binary in binaries.items():
        guards = GUARDS[name]
        names = sorted({g[0] for g in guards} | {g[1] for g in guards})
        # Up to three runs, each guard judged by its best: noise (another process, a frequency
        # change) only ever inflates a ratio, a regression inflates it every time.
        runs = []
        for _ in range(3):
            runs.append(medians(binary, names, quick))
            if all(g[0] in runs[-1] and g[1] in runs[-1] and runs[-1][g[0]] / runs[-1][g[1]] <= g[2] for g in guards):
                break
        for bench, base, bound, claim in guards:
            ran = [t for t in runs if bench in t and base in t]
            if not ran:
                print("FAIL %s: %s or %s did not run (ran: %s)" % (name, bench, base, ", ".join(sorted(runs[0]))))
                failed += 1
                continue
            times = min(ran, key=lambda t: t[bench] / t[base])
            ratio = times[bench] / times[base]
            ok = ratio <= bound
            failed += 0 if ok else 1
            print("%s %s: %s / %s = %.1f / %.1f ns = %.2fx (at most %.2fx): %s" %
                  ("ok  " if ok else "FAIL", name, bench, base, times[bench], times[base], ratio, bound, claim))
    print("%d guard(s) failed" % failed if failed else "all guards passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
