#!/usr/bin/env bash
# Configures (once) and builds meshrt into build/ with warnings as errors.
# Usage: .ci/build.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [[ ! -f "$build/build.ninja" ]]; then
  meson setup "$build" --buildtype=debugoptimized -Dwerror=true
fi
ninja -C "$build"
