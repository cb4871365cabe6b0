#!/usr/bin/env bash
# Issue 18 item 1 on the GPU host (~2-3 minutes): interrupted writes where the CUDA runtime runs
# threads of its own. A signal the writer blocks while it creates its temporary goes to such a
# thread, whose handler must still remove the temporary. Builds gpumemprof and test_export in
# $1 (release; default /tmp/gpumemprof-interrupt-build), then
#   1. test_export's atomic-file tests, with 1000 signals to a forked writer
#      (GPUMEMPROF_INTERRUPT_SIGNALS);
#   2. N (default 50, $TRIES) runs of `gpumemprof replay gpt2_train.trace.gz --device cuda:0
#      --snapshot x.pickle`, each sent SIGINT or SIGTERM at a random moment of a full run
#      (tests/tools/test_interrupt.py with GPUMEMPROF_INTERRUPT_TRIES; it also runs the
#      mid-write tries on the simulated device).
# Look for "atomic: ok", "cli: ok" and, in $OUT/interrupt-cli.log, "random times: N signals ..., 0 left a
# temporary". Each step prints "<step>: ok" or "<step>: FAILED".
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
build="${1:-/tmp/gpumemprof-interrupt-build}"
mkdir -p "$out"
step() {  # step NAME COMMAND...: runs it (170 s at most) into $out/interrupt-NAME.log, says how it went
  timeout 170 "${@:2}" > "$out/interrupt-$1.log" 2>&1 && echo "$1: ok" || echo "$1: FAILED (exit $?), see $out/interrupt-$1.log"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/interrupt-device.txt"
echo "$(date -u) $(nproc) cores, commit $(git rev-parse --short HEAD)" | tee -a "$out/interrupt-device.txt"
step build bash -c "meson setup '$build' -Dbuildtype=release -Dexamples=false -Dbenchmarks=false >/dev/null && \
  ninja -C '$build' tools/gpumemprof tests/export/test_export"
export GPUMEMPROF_SOURCE_DIR="$PWD"
step atomic env GPUMEMPROF_INTERRUPT_SIGNALS=1000 "$build/tests/export/test_export" "atomic file*"
# The CLI tries on the GPU: the random-time phase replays on cuda:0 when GPUMEMPROF_INTERRUPT_DEVICE says so.
step cli env GPUMEMPROF_INTERRUPT_TRIES="${TRIES:-50}" GPUMEMPROF_INTERRUPT_DEVICE=cuda:0 \
  python3 tests/tools/test_interrupt.py "$build/tools/gpumemprof"
grep "random times" "$out/interrupt-cli.log"
