#!/usr/bin/env bash
# meshrt's ranks under Debian's real torchrun (PyTorch 1.13), as people run it: the static
# rendezvous, where torchrun's agent already serves its TCPStore on MASTER_PORT and tells its
# workers so (TORCHELASTIC_USE_AGENT_STORE=True: meshrt must join that store, not bind the port
# again), with and without --nnodes/--node_rank, and --standalone (c10d: rank 0 hosts meshrt's
# store). Each runs tp_mlp_train on a 1x2 mesh and must train. Exit 77 (skipped) without torchrun.
# Usage: torchrun_test.sh BUILD_DIR
set -uo pipefail
build=$(realpath "$1")
torchrun=/usr/bin/torchrun
[[ -x $torchrun ]] || { echo "no $torchrun (python3-torch): skipped"; exit 77; }
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export MASTER_ADDR=127.0.0.1 GLOO_SOCKET_IFNAME=lo
# Debian's torchrun 1.13 under Python 3.11 fails on its own default --redirects/--tee (0 and 3:
# Python 3.11's IntFlag no longer iterates them); 1 (stdout) works.
io=(--redirects 1 --tee 1)
program=(--no_python "$build/examples/tp_mlp_train" --mesh 1x2 --steps 10)
status=0
run() {
  local name=$1
  shift
  local out
  out=$(timeout 120 "$torchrun" "$@" "${io[@]}" "${program[@]}" 2>&1)
  local rc=$?
  if [[ $rc -ne 0 ]] || ! grep -q "loss went down" <<<"$out"; then
    echo "FAIL $name (exit $rc):"
    echo "$out" | tail -30
    status=1
  else
    echo "ok   $name"
  fi
}
run "static rendezvous (agent store)" --nproc_per_node=2 --master_port="$(port)"
run "static, --nnodes=1 --node_rank=0" --nnodes=1 --node_rank=0 --nproc_per_node=2 \
  --master_addr=127.0.0.1 --master_port="$(port)"
run "--standalone (c10d)" --standalone --nproc_per_node=2
exit $status
