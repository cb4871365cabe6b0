#!/usr/bin/env bash
# gpumemprof as a Meson subproject: a tiny consumer project with subprojects/gpumemprof pointing
# at this source tree configures without building gpumemprof's tests, benchmarks, examples or
# CLI, then builds and runs against dependency gpumemprof_dep.
set -euo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src/tests/tools/consumer/meson.build" "$src/tests/tools/consumer/consumer.cpp" "$work/"
mkdir "$work/subprojects"
ln -s "$(cd "$src" && pwd)" "$work/subprojects/gpumemprof"
meson setup "$work/build" "$work" >"$work/setup.log" 2>&1 || { cat "$work/setup.log"; exit 1; }
targets=$(meson introspect --targets "$work/build" | python3 -c 'import json,sys; print(" ".join(t["name"] for t in json.load(sys.stdin)))')
case " $targets " in
  *" consumer "*) ;;
  *) echo "FAIL: no consumer target: $targets"; exit 1 ;;
esac
for t in $targets; do
  [ "$t" = consumer ] || { echo "FAIL: the subproject builds its own target '$t' by default"; exit 1; }
done
ninja -C "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/build/consumer"
echo "ok: as a subproject only the consumer builds (targets: $targets)"
