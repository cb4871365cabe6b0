#!/usr/bin/env bash
# scripts/install-deps as a user without root (fake id, dpkg-query, apt-get and sudo on PATH):
#  1. every package there: exit 0, nothing run as root, nothing printed;
#  2. a package missing, no root, no usable sudo: exit 1 and one line naming the package;
#  3. `install-deps demo` (what scripts/demo runs) asks for the demo's packages only: no test
#     frameworks, MPI, CMake, browser or node.
#   test_install_deps.sh SOURCE_DIR
set -uo pipefail
src=$1
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
fails=0
cat > "$fake/id" <<'SH'
#!/bin/sh
echo 1000
SH
# dpkg-query: every package installed except those in $MISSING; records what it was asked.
cat > "$fake/dpkg-query" <<'SH'
#!/bin/sh
for p; do last=$p; done
echo "$last" >> "$ASKED"
case " $MISSING " in *" $last "*) exit 1 ;; esac
printf 'install ok installed'
SH
for tool in apt-get sudo; do
  printf '#!/bin/sh\necho "%s $*" >> "$RAN"\nexit 1\n' "$tool" > "$fake/$tool"
done
chmod +x "$fake"/*
run() {  # run PROFILE MISSING -> sets out, rc; files asked/ran
  : > "$fake/asked"; : > "$fake/ran"
  out=$(PATH="$fake:$PATH" ASKED="$fake/asked" RAN="$fake/ran" MISSING="$2" "$src/scripts/install-deps" $1 2>&1 < /dev/null)
  rc=$?
}
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1 (exit $rc, output: $out, ran: $(cat "$fake/ran"))"; fails=$((fails + 1)); fi; }

run "" ""
check "all there: exit 0, silent, no root asked" '[ $rc -eq 0 ] && [ -z "$out" ] && [ ! -s "$fake/ran" ]'
run demo ""
check "demo, all there: exit 0" '[ $rc -eq 0 ] && [ ! -s "$fake/ran" ]'
run demo "zlib1g-dev"
check "demo, zlib missing, no root: one line naming it, exit 1" \
  '[ $rc -eq 1 ] && [ "$(printf "%s\n" "$out" | grep -c .)" -eq 1 ] && [[ "$out" == *"zlib1g-dev"* ]] && [[ "$out" == *"apt-get install"* ]]'
check "demo, zlib missing: apt-get never run" '! grep -q "^apt-get" "$fake/ran"'
run demo ""
for p in catch2 libbenchmark-dev openmpi-bin libopenmpi-dev cmake chromium nodejs; do
  check "demo does not need $p" '! grep -qx "$p" "$fake/asked"'
done
check "demo needs meson, g++ and zlib" 'grep -qx meson "$fake/asked" && grep -qx g++ "$fake/asked" && grep -qx zlib1g-dev "$fake/asked"'
run "" ""
check "the full set has catch2, MPI and nodejs" 'grep -qx catch2 "$fake/asked" && grep -qx openmpi-bin "$fake/asked" && grep -qx nodejs "$fake/asked"'
echo "$fails failed"
[ $fails -eq 0 ]
