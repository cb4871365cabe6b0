#!/usr/bin/env bash
# The installed library works for consumers: one `meson install` into a scratch root, then
#  1. the README example built with the generated pkg-config file alone, and run;
#  2. a CMake project with find_package(gpumemprof) -> gpumemprof::gpumemprof and
#     gpumemprof::compiled, built and run (when cmake is installed);
#  3. a compile below C++20 stops with the one clear #error;
#  4. the compiled library: the compile-time probe built with gpumemprof-compiled.pc, and run as
#     installed (no LD_LIBRARY_PATH);
#  5. the same for the other kind of library (static by default, shared by choice): pkg-config
#     and CMake, run as installed (GPUMEMPROF_INSTALL_BOTH_KINDS=1: a second build of the library,
#     ~2 minutes of CI's 2 cores, so by hand: GPUMEMPROF_INSTALL_BOTH_KINDS=1 meson test install).
set -euo pipefail
build=$1 src=$2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
meson install -C "$build" --destdir "$root" --quiet --no-rebuild --skip-subprojects >/dev/null
pc=$(dirname "$(find "$root" -name gpumemprof.pc | head -n1)")
prefix=$(grep '^prefix=' "$pc/gpumemprof.pc" | cut -d= -f2)
test -f "$root$prefix/include/gpumemprof/gpumemprof.hpp"

# 1. pkg-config: the command line the README gives (it brings -std=c++20 itself).
flags=$(PKG_CONFIG_PATH="$pc" pkg-config --define-variable=prefix="$root$prefix" --cflags --libs gpumemprof)
case " $flags " in *" -std=c++20 "*) ;; *) echo "FAIL: pkg-config flags lack -std=c++20: $flags"; exit 1 ;; esac
case " $flags " in *"libcudart.so"*) echo "FAIL: pkg-config names libcudart.so by path: $flags"; exit 1 ;; esac
python3 "$src/tests/readme/readme_snippets.py" --write 0 "$src/README.md" "$root/quickstart.cpp"
c++ -O1 "$root/quickstart.cpp" -o "$root/quickstart" $flags
(cd "$root" && ./quickstart >/dev/null && test -s snapshot.pickle)
echo "ok: installed headers + pkg-config build and run the README example"

# 2. CMake package.
if command -v cmake >/dev/null; then
  config=$(find "$root" -name gpumemprofConfig.cmake | head -n1)
  test -n "$config" || { echo "FAIL: meson install wrote no gpumemprofConfig.cmake"; exit 1; }
  cmake -S "$src/tests/tools/consumer" -B "$root/cmake-build" -DCMAKE_PREFIX_PATH="$root$prefix" \
    -DCMAKE_BUILD_TYPE=Release >"$root/cmake.log" 2>&1 || { cat "$root/cmake.log"; exit 1; }
  cmake --build "$root/cmake-build" >>"$root/cmake.log" 2>&1 || { cat "$root/cmake.log"; exit 1; }
  "$root/cmake-build/consumer"
  echo "ok: find_package(gpumemprof) + gpumemprof::gpumemprof build and run a consumer"
  # As installed: no LD_LIBRARY_PATH (issue 29: "libgpumemprof.so.0: cannot open shared object file").
  env -u LD_LIBRARY_PATH "$root/cmake-build/consumer_compiled" >/dev/null
  echo "ok: gpumemprof::compiled (the compiled library) builds and runs the compile-time probe as installed"
else
  echo "skip: cmake not installed (scripts/install-deps installs it)"
fi

# 3. Below C++20: one clear message.
echo '#include <gpumemprof/config.hpp>' >"$root/old.cpp"
if c++ -std=c++17 -I"$root$prefix/include" -c "$root/old.cpp" -o "$root/old.o" 2>"$root/old.log"; then
  echo "FAIL: a C++17 compile of the headers succeeded"; exit 1
fi
grep -q 'gpumemprof needs C++20' "$root/old.log" || { cat "$root/old.log"; exit 1; }
echo "ok: below C++20 the headers stop with one #error"

# 4. The compiled library (gpumemprof-compiled.pc: -DGPUMEMPROF_COMPILED_LIB and -lgpumemprof).
flags=$(PKG_CONFIG_PATH="$pc" pkg-config --define-variable=prefix="$root$prefix" --cflags --libs gpumemprof-compiled)
case " $flags " in *" -DGPUMEMPROF_COMPILED_LIB=1 "*) ;; *) echo "FAIL: gpumemprof-compiled.pc lacks -DGPUMEMPROF_COMPILED_LIB=1: $flags"; exit 1 ;; esac
c++ -O1 "$src/bench/compile_time/allocator_profiler.cpp" -o "$root/compiled" $flags
env -u LD_LIBRARY_PATH "$root/compiled" >/dev/null
echo "ok: the compiled library (gpumemprof-compiled.pc) builds and runs the compile-time probe as installed"

# 5. The other kind of library (static by default; shared with -Ddefault_library=shared): a
#    second build of the library alone, installed, and the same probe through pkg-config and CMake,
#    run without LD_LIBRARY_PATH (a shared library through the rpath the .pc and the CMake target carry).
kind=$(meson introspect --buildoptions "$build" | python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "default_library"][0])')
other=$([ "$kind" = static ] && echo shared || echo static)
if [ "${GPUMEMPROF_INSTALL_BOTH_KINDS:-0}" = 1 ]; then
  meson setup "$root/other" "$src" -Ddefault_library="$other" -Dtests=false -Dtools=false -Dexamples=false \
    -Dbenchmarks=false --prefix="$prefix" >"$root/other.log" 2>&1 || { tail -20 "$root/other.log"; exit 1; }
  ninja -C "$root/other" >>"$root/other.log" 2>&1 || { tail -20 "$root/other.log"; exit 1; }
  root2="$root/root2"
  meson install -C "$root/other" --destdir "$root2" --quiet --no-rebuild >/dev/null
  pc2=$(dirname "$(find "$root2" -name gpumemprof-compiled.pc | head -n1)")
  flags=$(PKG_CONFIG_PATH="$pc2" pkg-config --define-variable=prefix="$root2$prefix" --cflags --libs gpumemprof-compiled)
  c++ -O1 "$src/bench/compile_time/allocator_profiler.cpp" -o "$root/compiled2" $flags
  env -u LD_LIBRARY_PATH "$root/compiled2" >/dev/null
  echo "ok: a $other libgpumemprof: the probe built with gpumemprof-compiled.pc runs as installed"
  if command -v cmake >/dev/null; then
    cmake -S "$src/tests/tools/consumer" -B "$root/cmake-build2" -DCMAKE_PREFIX_PATH="$root2$prefix" \
      -DCMAKE_BUILD_TYPE=Release >"$root/cmake2.log" 2>&1 || { cat "$root/cmake2.log"; exit 1; }
    cmake --build "$root/cmake-build2" --target consumer_compiled >>"$root/cmake2.log" 2>&1 || { cat "$root/cmake2.log"; exit 1; }
    env -u LD_LIBRARY_PATH "$root/cmake-build2/consumer_compiled" >/dev/null
    echo "ok: a $other libgpumemprof: gpumemprof::compiled builds and runs the probe as installed"
  fi
else
  echo "skip: the $other library (GPUMEMPROF_INSTALL_BOTH_KINDS=1 builds and checks it too)"
fi
