#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang (ASan + UBSan, only the libraries they
# need) into build-fuzz and runs each for SECONDS (default 10) from its corpus and regressions
# (suite 'fuzz'). New inputs go to build-fuzz/tests/fuzz/found/<target>/, crashes to
# build-fuzz/tests/fuzz/artifacts/<target>/: copy one into tests/fuzz/regressions/<target>/
# once fixed. The exit status is meson test's (.ci/test.sh folds its results into its tests line).
# Usage: .ci/fuzz.sh [SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
build=build-fuzz
if [[ ! -f "$build/build.ninja" ]]; then
  log=$(mktemp)
  CC=clang CXX=clang++ meson setup "$build" --buildtype=debugoptimized -Dfuzzing=true \
    -Dfuzz_seconds="$seconds" -Db_sanitize=address,undefined \
    -Ddefault_library=static -Dmpi=disabled -Dgpu=disabled >"$log" 2>&1 || { cat "$log"; exit 1; }
  rm -f "$log"
else
  meson configure "$build" -Dfuzz_seconds="$seconds" || exit 1
fi
ninja -C "$build" -j2 || exit 1
meson test -C "$build" --suite fuzz --print-errorlogs --num-processes 2
