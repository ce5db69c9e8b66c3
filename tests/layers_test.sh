#!/usr/bin/env bash
# The layer check refuses an include that points the wrong way (the build runs it on every
# source: .ci/check_layers.py), and accepts the allowed directions, relative includes included.
# Usage: layers_test.sh SOURCE_DIR
set -euo pipefail
check="$1/.ci/check_layers.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"/{trace/analyze,runtime/store,mesh,launcher,bench,tests}
touch "$tmp"/trace/op_record.h "$tmp"/runtime/communicator.h "$tmp"/mesh/device_mesh.h \
  "$tmp"/trace/analyze/analyzer.h "$tmp"/runtime/store/store.h

expect_refused() {  # FILE INCLUDE
  printf '#include "%s"\n' "$2" >"$tmp/$1"
  if out=$(python3 "$check" --root "$tmp" "$1" 2>&1); then
    echo "FAIL: $1 including $2 was accepted" >&2
    exit 1
  fi
  grep -q "may not include \"$2\"" <<<"$out" || { echo "FAIL: unclear message: $out" >&2; exit 1; }
  echo "refused: $1 -> $2"
}
expect_allowed() {  # FILE INCLUDE
  printf '#include "%s"\n' "$2" >"$tmp/$1"
  python3 "$check" --root "$tmp" "$1" || { echo "FAIL: $1 including $2 was refused" >&2; exit 1; }
  echo "allowed: $1 -> $2"
}

expect_refused trace/tracer.cc runtime/communicator.h
expect_refused trace/tracer.cc ../runtime/communicator.h
expect_refused trace/tracer.cc trace/analyze/analyzer.h
expect_refused runtime/store/tcp_store.cc runtime/communicator.h
expect_refused runtime/communicator.cc mesh/device_mesh.h
expect_refused trace/analyze/analyzer.cc runtime/communicator.h
expect_refused launcher/agent.cc runtime/communicator.h
expect_refused bench/x.cc tests/fixtures.h
expect_allowed runtime/communicator.cc trace/op_record.h
expect_allowed runtime/work.h ../trace/op_record.h
expect_allowed mesh/device_mesh.cc runtime/communicator.h
expect_allowed trace/analyze/analyzer.cc trace/op_record.h
expect_allowed launcher/agent.cc runtime/store/store.h
echo "layers test passed"
