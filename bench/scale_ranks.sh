#!/usr/bin/env bash
# How `gpumemprof summary DIR` scales across ranks: writes RANKS synthetic rank files of about
# EVENTS trace entries each (make_big_snapshot OUT EVENTS RANK WORLD: rank keys without recorded
# peaks, so every rank's trace is also replayed -- the heavier case), then measures wall time, CPU
# time and peak RSS of the text report and of --json.
#   bench/scale_ranks.sh GPUMEMPROF MAKE_BIG_SNAPSHOT OUTDIR [RANKS [EVENTS]]   (default 64 1000000)
# Existing rank files in OUTDIR/ranks are reused (generating 64 x 1M takes minutes).
set -u
BIN=$1 MAKER=$2 OUT=$3
RANKS=${4:-64} EVENTS=${5:-1000000}
DIR=$OUT/ranks
mkdir -p "$DIR"
for ((r = 0; r < RANKS; r++)); do
  [ -f "$DIR/rank-$r.pickle" ] || "$MAKER" "$DIR/rank-$r.pickle" "$EVENTS" "$r" "$RANKS" > /dev/null || exit 1
done
echo "$RANKS rank files, $(du -sh "$DIR" | cut -f1) in all"
for mode in text json; do
  args=(summary "$DIR")
  [ $mode = json ] && args+=(--json)
  /usr/bin/time -v "$BIN" "${args[@]}" > "$OUT/summary-$mode.out" 2> "$OUT/summary-$mode.time"
  rc=$?
  wall=$(grep "Elapsed (wall clock)" "$OUT/summary-$mode.time" | awk '{print $NF}')
  user=$(grep "User time" "$OUT/summary-$mode.time" | awk '{print $NF}')
  rss=$(grep "Maximum resident" "$OUT/summary-$mode.time" | awk '{print $NF}')
  echo "summary DIR ($mode): exit $rc, wall $wall, user ${user}s, peak RSS $((rss / 1024)) MiB"
done
head -4 "$OUT/summary-text.out"
grep "imbalance" "$OUT/summary-text.out"
