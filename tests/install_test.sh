#!/usr/bin/env bash
# Installs meshrt into a temporary root, then builds and runs a program outside the tree against
# it twice: with `pkg-config --cflags --libs meshrt` and with CMake's find_package(meshrt); and a
# C program with `pkg-config --cflags --libs meshrt-c`, compiled and linked by gcc. The
# consumer includes only <meshrt/meshrt.h>: no Gloo, spdlog, fmt, Boost or JSON header may come
# with it, and no header the install tree lacks. Nothing runs with LD_LIBRARY_PATH: the installed
# binaries and libraries carry an $ORIGIN-relative RUNPATH, so a staged install in any prefix runs
# as it lies (meshrun, meshtrace, meshrt-monitor, a 2-rank job under the installed meshrun, and
# meshrun doctor with its self-tests).
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet
prefix=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
root="$tmp/root$prefix"
pc=$(dirname "$(find "$root" -name meshrt.pc | head -1)")
libdir=$(dirname "$(find "$root" -name 'libmeshrt.so' | head -1)")
test -n "$pc" && test -n "$libdir"

echo "--- pkg-config"
flags=$(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs meshrt)
echo "flags: $flags"
cflags=$(PKG_CONFIG_PATH="$pc" pkg-config --cflags meshrt)
if [[ "$cflags" == *"$src"* ]]; then
  echo "pkg-config points into the source tree: $cflags" >&2
  exit 1
fi
# Every header the umbrella pulls in, resolved against the install tree only.
g++ -std=c++20 -M $cflags "$src/tests/install/consumer.cc" >"$tmp/deps"
if grep -Eo '/[^ ]*(gloo|spdlog|fmt|boost|nlohmann)/[^ ]*' "$tmp/deps"; then
  echo "the public headers pull in a third-party header (above)" >&2
  exit 1
fi
if grep -Eo "$src/[^ ]*" "$tmp/deps" | grep -v "^$src/tests/install/"; then
  echo "the consumer compiled against a source-tree header (above)" >&2
  exit 1
fi
# The consumer names the install's lib dir in its own RUNPATH, as a user of a non-default prefix
# does; libmeshrt must find its own dependencies from there (no LD_LIBRARY_PATH anywhere below).
g++ -std=c++20 "$src/tests/install/consumer.cc" -o "$tmp/consumer_pc" $flags -Wl,-rpath,"$libdir"
env -u LD_LIBRARY_PATH "$tmp/consumer_pc"

echo "--- pkg-config meshrt-c: a C program, compiled and linked by gcc"
cflags_c=$(PKG_CONFIG_PATH="$pc" pkg-config --cflags meshrt-c)
if [[ "$cflags_c" == *"c++"* ]]; then
  echo "meshrt-c's flags are C++'s: $cflags_c" >&2
  exit 1
fi
gcc -std=c11 -Wall -Wextra -Werror -pedantic "$src/tests/install/consumer.c" -o "$tmp/consumer_c" \
  $(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs meshrt-c) -Wl,-rpath,"$libdir"
env -u LD_LIBRARY_PATH "$tmp/consumer_c"

echo "--- the installed tools run from the staged tree"
for tool in meshrun meshtrace meshrt-monitor; do
  env -u LD_LIBRARY_PATH "$root/bin/$tool" --help >/dev/null
done
# A whole job: the installed meshrun starts two ranks of the consumer (each a 1-rank Gloo world
# and in-process worlds), which must find libmeshrt and the installed meshrt-monitor.
env -u LD_LIBRARY_PATH MASTER_ADDR=127.0.0.1 timeout 120 "$root/bin/meshrun" --standalone \
  --nproc-per-node 2 --log-dir "$tmp/job" "$tmp/consumer_pc" >"$tmp/job.out" 2>&1 ||
  { cat "$tmp/job.out"; exit 1; }
test "$(cat "$tmp"/job/attempt_0/rank_*.log | grep -c 'consumer ok')" -eq 2 ||
  { cat "$tmp/job.out" "$tmp"/job/attempt_0/rank_*.log; exit 1; }
if grep -q 'no meshrt-monitor' "$tmp/job.out" "$tmp"/job/attempt_0/rank_*.log; then
  echo "the installed meshrt-monitor was not found" >&2
  exit 1
fi

# meshrun doctor finds meshrt-selftest beside itself in bin/, which finds libmeshrt: every check
# and both CPU self-tests pass from the staged tree.
env -u LD_LIBRARY_PATH timeout 200 "$root/bin/meshrun" doctor >"$tmp/doctor.out" 2>&1 ||
  { cat "$tmp/doctor.out"; exit 1; }
grep -q '^  OK    meshrt-selftest ' "$tmp/doctor.out" || { cat "$tmp/doctor.out"; exit 1; }

echo "--- cmake find_package"
cmake -S "$src/tests/install" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$root" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/cmake" >/dev/null
env -u LD_LIBRARY_PATH "$tmp/cmake/consumer"
env -u LD_LIBRARY_PATH "$tmp/cmake/consumer_c"
echo "install test passed"
