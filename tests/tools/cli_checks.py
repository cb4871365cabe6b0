"""What the CLI test scripts share: running the binary, recording failures, and the verdict."""
import subprocess
import sys

failures = []


def run(binary, *args, expect_rc=0, timeout=600):
    """Runs `binary args`; an exit status other than expect_rc (None: any) is a failure (output kept)."""
    p = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)
    if expect_rc is not None and p.returncode != expect_rc:
        failures.append(f"{' '.join(args)}: exit {p.returncode}, expected {expect_rc}\n{p.stdout}{p.stderr}")
    return p


def check(cond, what):
    if not cond:
        failures.append(what)


def check_one_error_line(p, *needles):
    """Bad input: exactly one line on stderr, holding each of `needles`."""
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    check(len(lines) == 1, f"expected one error line, got {lines!r}")
    for n in needles:
        check(n in p.stderr, f"error line lacks {n!r}: {p.stderr!r}")


def finish(what):
    """Prints the failures and exits 1, or says `what` passed."""
    if failures:
        print(f"{len(failures)} failure(s):")
        for f in failures:
            print(" -", f)
        sys.exit(1)
    print(f"all {what} passed")
