#!/usr/bin/env bash
# How the snapshot reports scale: generates synthetic snapshots of N trace entries and measures
# wall time, CPU time and peak RSS of `gpumemprof summary`, `html`, `perfetto` and `replay` on
# each, then prints the figures as a markdown table (also in OUTDIR/scale.md).
#   bench/scale_reports.sh GPUMEMPROF MAKE_BIG_SNAPSHOT OUTDIR [N | FILE.pickle ...]
# (default N: 1000000 10000000; a FILE.pickle, e.g. one PyTorch wrote, is measured as it is).
# Peak RSS comes from /usr/bin/time -v where installed, else from python's getrusage (the same
# kernel figure). Each step logs to OUTDIR/scale.log; a failing step does not stop the others.
set -u
BIN=$1 MAKER=$2 OUT=$3
shift 3
SIZES=("$@")
[ ${#SIZES[@]} -eq 0 ] && SIZES=(1000000 10000000)
mkdir -p "$OUT"
LOG=$OUT/scale.log
TABLE=$OUT/scale.md
STEP_LIMIT=${STEP_LIMIT:-280}  # seconds per step
declare -A CELL
measure() {  # key, command...: sets CELL[key] to "wall s (cpu s), RSS MiB" and logs a line
  local key=$1
  shift
  local line
  line=$(python3 - "$key" "$STEP_LIMIT" "$OUT/$key.out" "$@" <<'PY' 2>&1
import os, re, resource, subprocess, sys, time
key, limit, out, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:]
argv = (["/usr/bin/time", "-v"] if os.access("/usr/bin/time", os.X_OK) else []) + cmd
t = time.monotonic()
try:
    with open(out, "wb") as f:
        p = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, timeout=limit)
    rc, err = p.returncode, p.stderr.decode(errors="replace")
except subprocess.TimeoutExpired:
    rc, err = "timeout", ""
wall = time.monotonic() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
rss_kb, cpu, how = ru.ru_maxrss, ru.ru_utime + ru.ru_stime, "getrusage"
m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
if m:
    rss_kb, how = int(m.group(1)), "time -v"
    u = re.search(r"User time \(seconds\): ([\d.]+)", err)
    s = re.search(r"System time \(seconds\): ([\d.]+)", err)
    if u and s:
        cpu = float(u.group(1)) + float(s.group(1))
with open(out, "ab") as f:
    f.write(err.encode())
cell = f"{wall:.1f} s ({cpu:.1f} s CPU), {rss_kb / 1024:.0f} MiB" + ("" if rc == 0 else f", exit {rc}")
print(f"{key}: {cell} [{how}]")
PY
)
  echo "$line" | tee -a "$LOG"
  CELL[$key]=$(echo "$line" | sed -e 's/^[^:]*: //' -e 's/ \[.*\]$//')
}
echo "# $(date -u +%FT%TZ) on $(hostname), $(nproc) cores, $BIN" | tee -a "$LOG"
for arg in "${SIZES[@]}"; do
  if [[ $arg == *.pickle ]]; then  # an existing snapshot: measured, kept
    n=$(basename "$arg" .pickle)
    snap=$arg
    CELL[entries_$n]=$n
  else
    n=$arg
    snap=$OUT/snap_$n.pickle
    measure "generate_$n" "$MAKER" "$snap" "$n"
    CELL[entries_$n]=$(sed -n 's/.*: \([0-9]*\) trace entries.*/\1/p' "$OUT/generate_$n.out")
  fi
  ls -l "$snap" | tee -a "$LOG"
  CELL[bytes_$n]=$(stat -c %s "$snap" 2>/dev/null || echo 0)
  measure "summary_$n" "$BIN" summary "$snap"
  measure "html_$n" "$BIN" html "$snap" -o "$OUT/report_$n.html"
  CELL[page_$n]=$(stat -c %s "$OUT/report_$n.html" 2>/dev/null || echo 0)
  measure "perfetto_$n" "$BIN" perfetto "$snap" -o "$OUT/perfetto_$n.json"
  measure "replay_$n" "$BIN" replay "$snap" --json
  rm -f "$OUT/report_$n.html" "$OUT/perfetto_$n.json"
  [[ $arg == *.pickle ]] || rm -f "$snap"
done
{
  echo "| trace entries | pickle | summary | html (page size) | perfetto | replay SNAPSHOT |"
  echo "|---:|---:|---|---|---|---|"
  for arg in "${SIZES[@]}"; do
    n=$arg
    [[ $arg == *.pickle ]] && n=$(basename "$arg" .pickle)
    mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }
    printf '| %s | %s MB | %s | %s (%s MB) | %s | %s |\n' "${CELL[entries_$n]:-$n}" "$(mb "${CELL[bytes_$n]}")" \
      "${CELL[summary_$n]}" "${CELL[html_$n]}" "$(mb "${CELL[page_$n]}")" "${CELL[perfetto_$n]}" "${CELL[replay_$n]}"
  done
} | tee "$TABLE" | tee -a "$LOG"
