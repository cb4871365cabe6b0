#!/usr/bin/env bash
# The installed library works for a consumer: `meson install` into a scratch root, then build the
# README example against the generated pkg-config file alone, and run it.
set -euo pipefail
build=$1 src=$2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
meson install -C "$build" --destdir "$root" --quiet --no-rebuild --skip-subprojects >/dev/null
pc=$(dirname "$(find "$root" -name gpumemprof.pc | head -n1)")
prefix=$(grep '^prefix=' "$pc/gpumemprof.pc" | cut -d= -f2)
flags=$(PKG_CONFIG_PATH="$pc" pkg-config --define-variable=prefix="$root$prefix" --cflags --libs gpumemprof)
test -f "$root$prefix/include/gpumemprof/gpumemprof.hpp"
c++ -std=c++20 -O1 "$src/examples/quickstart.cpp" -o "$root/quickstart" $flags
(cd "$root" && ./quickstart >/dev/null && test -s snapshot.pickle)
echo "ok: installed headers + pkg-config build and run the README example"
