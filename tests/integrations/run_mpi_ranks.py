"""Runs tests/integrations/mpi_ranks under mpirun -np 4 (simulated devices, one sim:0 per rank) and
checks what it leaves behind: the rank files (PyTorch's schema, via check_snapshot.py), ranks.json,
`gpumemprof summary DIR --json`, and the dump of an OOM on one rank while the others wait in a
barrier (bounded by a timeout: the job must end, not hang).

    run_mpi_ranks.py MPI_RANKS_BINARY [GPUMEMPROF_CLI]
Exit 77 (skipped) when mpirun is not installed.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from cli_checks import check, failures, finish  # noqa: E402

MIB = 1 << 20
EXPECTED_PEAK = {r: (r + 1) * 16 * MIB + (64 * MIB if r == 3 else 0) for r in range(4)}


def mpirun(binary, *args, env_extra=None, timeout=180):
    cmd = ["mpirun", "-np", "4", "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    env = dict(os.environ, GPUMEMPROF_DEVICE="sim:0", OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1")
    env.update(env_extra or {})
    for key, value in (env_extra or {}).items():
        cmd += ["-x", key]
    try:
        return subprocess.run(cmd + [binary, *args], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        failures.append(f"mpirun {' '.join(args)} did not finish in {timeout} s (a rank hangs?)\n{e.stdout}{e.stderr}")
        return None


def check_snapshot_schema(path):
    source = os.environ.get("GPUMEMPROF_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    tool = os.path.join(source, "tools", "check_snapshot.py")
    p = subprocess.run([sys.executable, tool, path], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"check_snapshot.py {path}: {p.stdout}{p.stderr}")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    if shutil.which("mpirun") is None:
        print("mpirun not found: skipped")
        return 77
    binary = sys.argv[1]
    cli = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "dump")
        p = mpirun(binary, "dump", dump)
        if p is not None:
            check(p.returncode == 0 and "all MPI checks passed" in p.stdout,
                  f"mpi_ranks dump: exit {p.returncode}\n{p.stdout}{p.stderr}")
            for r in range(4):
                check_snapshot_schema(os.path.join(dump, f"rank-{r}.pickle"))
            with open(os.path.join(dump, "ranks.json")) as f:
                index = json.load(f)
            check([e["peak_allocated_bytes"] for e in index["ranks"]] == [EXPECTED_PEAK[r] for r in range(4)],
                  f"ranks.json peaks: {index}")
            if cli:
                s = subprocess.run([cli, "summary", dump, "--json"], capture_output=True, text=True, timeout=120)
                check(s.returncode == 0, f"summary DIR --json: exit {s.returncode}\n{s.stdout}{s.stderr}")
                if s.returncode == 0:
                    report = json.loads(s.stdout)
                    check([r["rank"] for r in report["ranks"]] == [0, 1, 2, 3], f"summary ranks: {report['ranks']}")
                    check([r["peak_allocated_bytes"] for r in report["ranks"]] == [EXPECTED_PEAK[r] for r in range(4)],
                          f"summary peaks: {report['ranks']}")
                    check([r["peak_reserved_bytes"] for r in report["ranks"]] ==
                          [EXPECTED_PEAK[r] + 2 * MIB for r in range(4)], f"summary reserved: {report['ranks']}")
                    check(report["max_peak_rank"] == 3 and report["min_peak_rank"] == 0 and report["imbalance"] == 8.0,
                          f"summary imbalance: {report}")
                    check("extra_buffer" in report["imbalance_site"], f"imbalance site: {report['imbalance_site']}")
                    check(report["world_size"] == 4 and report["problems"] == [], f"summary problems: {report}")
                    check(all(r["device"] == "sim:0" and r["host"] and r["num_ooms"] == 0 for r in report["ranks"]),
                          f"summary hosts/devices: {report['ranks']}")

        oom = os.path.join(tmp, "oom")
        p = mpirun(binary, "oom", oom, env_extra={"GPUMEMPROF_SIM_CAPACITY": "1GiB"}, timeout=120)
        if p is not None:
            check(p.returncode != 0, "the OOM job should end with the abort's non-zero status")
            check("rank 2: out of memory, dump written" in p.stdout and "FAILED" not in p.stdout,
                  f"mpi_ranks oom: {p.stdout}{p.stderr}")
            files = sorted(os.listdir(oom)) if os.path.isdir(oom) else []
            check(files == ["rank-2.oom.txt", "rank-2.pickle"], f"OOM dump folder holds {files}")
            if "rank-2.oom.txt" in files:
                with open(os.path.join(oom, "rank-2.oom.txt")) as f:
                    text = f.read()
                check(text.startswith("rank 2 of 4 on ") and "Out of memory on sim:0" in text, f"OOM report: {text}")
            if "rank-2.pickle" in files:
                check_snapshot_schema(os.path.join(oom, "rank-2.pickle"))
                if cli:
                    s = subprocess.run([cli, "summary", oom, "--json"], capture_output=True, text=True, timeout=120)
                    check(s.returncode == 2, f"summary of a dump missing ranks: exit {s.returncode}")
                    report = json.loads(s.stdout)
                    check([(r["rank"], r["num_ooms"]) for r in report["ranks"]] == [(2, 1)], f"OOM rank: {report}")
                    check(any("missing rank(s) 0-1, 3 of world size 4" in x for x in report["problems"]),
                          f"missing ranks named: {report['problems']}")
                    check(s.stderr.count("\n") == 1 and "missing rank(s) 0-1, 3" in s.stderr,
                          f"one stderr line naming the missing ranks: {s.stderr}")
    finish("MPI rank checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
