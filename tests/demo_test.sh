#!/usr/bin/env bash
# The README's demo as a user runs it: examples/demo.sh against the build tree, with no MESHRT_*
# or torchrun variable inherited, so meshrun must find meshtrace by itself and every output path
# is the demo's own. Exit status: the demo's.
# Usage: demo_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
for v in $(compgen -e); do
  case "$v" in MESHRT_* | TORCH* | RANK | WORLD_SIZE | MASTER_ADDR | MASTER_PORT) unset "$v" ;; esac
done
out=$(mktemp -d /tmp/meshrt-demo-test-XXXXXX)
trap 'rm -rf "$out"' EXIT
bash "$1/examples/demo.sh" "$2" "$out/demo"
status=$?
# The job report of the training step exists and holds its charts.
grep -q '<svg' "$out/demo/report/report.html" || { echo "demo_test: no report charts"; status=1; }
exit $status
