#!/usr/bin/env bash
# How the snapshot reports scale: generates synthetic snapshots of N trace entries and measures
# wall time and peak RSS of `gpumemprof summary`, `html`, `perfetto` and `replay` on each.
#   bench/scale_reports.sh GPUMEMPROF MAKE_BIG_SNAPSHOT OUTDIR [N ...]   (default N: 1000000 10000000)
# Each step logs to OUTDIR/scale.log; a failing step does not stop the others.
set -u
BIN=$1 MAKER=$2 OUT=$3
shift 3
SIZES=("$@")
[ ${#SIZES[@]} -eq 0 ] && SIZES=(1000000 10000000)
mkdir -p "$OUT"
LOG=$OUT/scale.log
STEP_LIMIT=${STEP_LIMIT:-280}  # seconds per step
measure() {  # name, command...: wall time and the child's peak RSS (python's getrusage: no /usr/bin/time needed)
  local name=$1
  shift
  python3 - "$name" "$STEP_LIMIT" "$OUT/$name.out" "$@" <<'PY' 2>&1 | tee -a "$LOG"
import resource, subprocess, sys, time
name, limit, out, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:]
t = time.monotonic()
try:
    with open(out, "wb") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=limit).returncode
except subprocess.TimeoutExpired:
    rc = "timeout"
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"{name}: {time.monotonic() - t:.2f} s, max RSS {rss / 1024:.0f} MiB, exit {rc}")
PY
}
echo "# $(date -u +%FT%TZ) on $(hostname), $(nproc) cores" | tee -a "$LOG"
for n in "${SIZES[@]}"; do
  snap=$OUT/snap_$n.pickle
  measure "generate_$n" "$MAKER" "$snap" "$n"
  ls -l "$snap" | tee -a "$LOG"
  measure "summary_$n" "$BIN" summary "$snap"
  measure "html_$n" "$BIN" html "$snap" -o "$OUT/report_$n.html"
  measure "perfetto_$n" "$BIN" perfetto "$snap" -o "$OUT/perfetto_$n.json"
  measure "replay_$n" "$BIN" replay "$snap" --json
  rm -f "$snap" "$OUT/report_$n.html" "$OUT/perfetto_$n.json"
done
