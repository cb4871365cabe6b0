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
measure() {  # name, command...
  local name=$1
  shift
  /usr/bin/time -f "$name: %e s, max RSS %M KiB, exit %x" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
  tail -1 "$OUT/$name.err" | tee -a "$LOG"
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
