#!/usr/bin/env bash
# The README's demo, against a build tree: meshrun on 4 local CPU ranks (Gloo on loopback).
#   1. a tensor-parallel MLP trained on a 2x2 dp x tp DeviceMesh (the loss must go down), then
#      the comm logger's summary by mesh dim and the scope tree, and the job report page;
#   2. a forced hang (rank 0 runs an extra all_reduce): its watchdog sees the others have left the
#      job, every rank dumps, and meshrun prints the failure summary and meshtrace's verdict.
# .ci/demo.sh installs and builds, then runs this; `meson test demo` runs it as it is, with no
# MESHRT_* variable set, so that what a user types is what is tested.
# Usage: examples/demo.sh BUILD_DIR [OUT_DIR]   (OUT_DIR keeps the logs, dumps and report)
set -uo pipefail
build=$(realpath "${1:?usage: demo.sh BUILD_DIR [OUT_DIR]}")
out=${2:-$build/demo}
rm -rf "$out"
mkdir -p "$out"

echo "== 1. tensor-parallel MLP training on a 2x2 (dp x tp) mesh, traced"
MESHRT_COMMS_LOG=1 timeout 120 "$build/meshrun" --standalone --nproc-per-node 4 \
  --report "$out/report" "$build/examples/tp_mlp_train" --mesh 2x2 --steps 60 \
  2>&1 | tee "$out/train.txt"
train=${PIPESTATUS[0]}
grep -q "loss went down" "$out/train.txt" || train=1

echo
echo "== 2. a forced hang: rank 0 runs one all_reduce more than the others"
timeout 120 "$build/meshrun" --standalone --nproc-per-node 4 --log-dir "$out/hang" --tee 3 \
  "$build/examples/hang" --timeout-ms 2000 2>&1 | tee "$out/hang.txt"
hang=${PIPESTATUS[0]}
# The hang must fail the job (meshrun exits 1) and the verdict must name the all_reduce, the
# culprit and where the ranks parted.
verdict=0
[[ $hang == 1 ]] || verdict=1
for expected in "issued all_reduce #5 that ranks \[1, 2, 3\] never called" "culprit rank 0" \
  "diverged: rank 0 ran all_reduce #5 at hang.cc:"; do
  grep -q "$expected" "$out/hang.txt" || { echo "demo: missing in the verdict: $expected"; verdict=1; }
done

echo
echo "demo: training $([[ $train == 0 ]] && echo passed || echo FAILED)," \
  "hang post-mortem $([[ $verdict == 0 ]] && echo passed || echo FAILED);" \
  "report: $out/report/report.html"
exit $((train != 0 || verdict != 0))
