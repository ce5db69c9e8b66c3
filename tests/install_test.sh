#!/usr/bin/env bash
# Installs meshrt into a temporary root, then builds and runs a program outside the tree against
# it twice: with `pkg-config --cflags --libs meshrt` and with CMake's find_package(meshrt). The
# consumer includes only <meshrt/meshrt.h>: no Gloo, spdlog, fmt, Boost or JSON header may come
# with it, and no header the install tree lacks.
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
g++ -std=c++20 "$src/tests/install/consumer.cc" -o "$tmp/consumer_pc" $flags
LD_LIBRARY_PATH="$libdir" "$tmp/consumer_pc"

echo "--- cmake find_package"
cmake -S "$src/tests/install" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$root" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/cmake" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/cmake/consumer"
echo "install test passed"
