#!/usr/bin/env bash
# Configures (once) and builds meshrt into BUILD_DIR with warnings as errors: every target, or
# only the TARGETs given (the demo builds just what it runs).
# Usage: .ci/build.sh [BUILD_DIR [TARGET ...]]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
if [[ ! -f "$build/build.ninja" ]]; then
  meson setup "$build" --buildtype=debugoptimized -Dwerror=true
fi
ninja -C "$build" "$@"
