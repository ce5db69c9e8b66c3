#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main demo: 4 local CPU ranks over Gloo on
# loopback, collectives on a 2x2 dp x tp DeviceMesh, every result checked, and the comm logger's
# summary by mesh dim.
# (meshrun replaces the launch loop below once the launcher lands.)
set -uo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh || exit 1
bash .ci/build.sh build || exit 1

world=${WORLD_SIZE:-4}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for ((rank = 0; rank < world; rank++)); do
  (
    set -o pipefail
    RANK=$rank WORLD_SIZE=$world LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$world \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port MESHRT_TIMEOUT_MS=30000 MESHRT_COMMS_LOG=1 \
      timeout 60 build/examples/collectives_demo 2>&1 | sed -u "s/^/[rank$rank]: /"
  ) &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
echo "demo: $world ranks $([[ $status == 0 ]] && echo passed || echo FAILED)"
exit $status
