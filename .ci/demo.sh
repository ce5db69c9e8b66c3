#!/usr/bin/env bash
# Installs what is missing, builds what the demo runs (meshrun, meshtrace and two examples), and
# runs the demo (examples/demo.sh): meshrun on 4 local CPU ranks trains a tensor-parallel MLP on
# a 2x2 mesh with the comm logger, scope tree and job report, then forces a hang that every rank
# dumps and meshtrace explains. Logs, dumps and the report stay in build/demo/.
set -uo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh || exit 1
bash .ci/build.sh build meshrun meshtrace examples/tp_mlp_train examples/hang || exit 1
exec bash examples/demo.sh build
