#!/usr/bin/env bash
# Fuzzes one target for SECONDS, starting from its committed seed corpus (never written to: new
# inputs go to a temporary directory). Any crash, leak, timeout or sanitizer report fails.
# usage: fuzz_smoke.sh FUZZER SEED_DIR SECONDS
set -euo pipefail
fuzzer=$1 seeds=$2 seconds=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
"$fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$work/" "$work/corpus" "$seeds" 2>&1 | grep -E "^#[0-9]+ +DONE|^stat::number_of_executed_units|ERROR|SUMMARY|runtime error" || true
status=${PIPESTATUS[0]}
if ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* >/dev/null 2>&1; then
  for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [ -e "$f" ] && echo "artifact $(basename "$f"): $(base64 -w0 "$f" | head -c 400)"
  done
  exit 1
fi
exit "$status"
