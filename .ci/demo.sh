#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main demo with meshrun on 4 local CPU ranks
# (Gloo on loopback):
#   1. a tensor-parallel MLP trained on a 2x2 dp x tp DeviceMesh (the loss must go down), then
#      the comm logger's summary by mesh dim and the scope tree;
#   2. a forced hang (rank 0 runs an extra all_reduce): the watchdog times it out, every rank
#      dumps its flight recorder, and meshrun prints the failure summary and meshtrace's verdict.
set -uo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh || exit 1
bash .ci/build.sh build || exit 1

logs=$(mktemp -d /tmp/meshrt-demo-XXXXXX)
trap 'rm -rf "$logs"' EXIT

echo "== 1. tensor-parallel MLP training on a 2x2 (dp x tp) mesh, traced"
MESHRT_COMMS_LOG=1 timeout 120 build/meshrun --standalone --nproc-per-node 4 \
  build/examples/tp_mlp_train --mesh 2x2 --steps 60
train=$?

echo
echo "== 2. a forced hang: rank 0 runs one all_reduce more than the others"
timeout 120 build/meshrun --standalone --nproc-per-node 4 --log-dir "$logs/hang" --tee \
  build/examples/hang --timeout-ms 2000 2>&1 | tee "$logs/hang.txt"
hang=${PIPESTATUS[0]}
# The hang must fail the job (meshrun exits 1) and the verdict must name the all_reduce.
verdict=0
[[ $hang == 1 ]] && grep -q "issued all_reduce #5 that ranks \[1, 2, 3\] never called" "$logs/hang.txt" || verdict=1

status=$((train != 0 || verdict != 0))
echo "demo: training $([[ $train == 0 ]] && echo passed || echo FAILED)," \
  "hang post-mortem $([[ $verdict == 0 ]] && echo passed || echo FAILED)"
exit $status
