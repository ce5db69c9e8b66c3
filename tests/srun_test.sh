#!/usr/bin/env bash
# meshrt under a real Slurm (issue #13): a private controller and node daemon on loopback, then
#   1. srun without PMI: the ranks read SLURM_* and run over Gloo (OpenMPI could not start);
#   2. srun --mpi=pmix: the same 2x2 mesh over the MPI backend;
#   3. srun --mpi=pmix of the hang example: the watchdog times out, every rank dumps, and
#      meshtrace names the extra all_reduce.
# Usage: srun_test.sh MESH_DEMO HANG_EXAMPLE MESHTRACE. Exit 77 (skipped) unless run as root.
set -uo pipefail
mesh_demo=$1 hang=$2 meshtrace=$3
if [[ $(id -u) != 0 ]]; then
  echo "srun_test: slurmd must run as root; skipped"
  exit 77
fi

dir=$(mktemp -d /tmp/meshrt-srun.XXXXXX)
mkdir -p "$dir/state" "$dir/spool" "$dir/dumps"
# Slurm's step daemons outlive srun briefly; only those started here are ours to stop.
stepds_before=$(pgrep -x slurmstepd | tr '\n' ' ')
daemons=()
cleanup() {
  local deadline=$((SECONDS + 10))
  while [[ -n $(squeue -h 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.2; done
  ((${#daemons[@]})) && kill "${daemons[@]}" 2>/dev/null
  for p in $(pgrep -x slurmstepd); do
    [[ " $stepds_before " == *" $p "* ]] || kill -9 "$p" 2>/dev/null
  done
  pkill -9 -f "$dir" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export SLURM_CONF=$dir/slurm.conf
cat > "$SLURM_CONF" <<EOF
ClusterName=meshrt-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
NodeName=meshrt-node NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=test Nodes=meshrt-node Default=YES MaxTime=10 State=UP OverSubscribe=FORCE
EOF
slurmctld -D -i > "$dir/slurmctld.out" 2>&1 &
daemons+=($!)
slurmd -D -N meshrt-node > "$dir/slurmd.out" 2>&1 &
daemons+=($!)
deadline=$((SECONDS + 30))
until [[ $(sinfo -h -o %t 2>/dev/null) == idle ]]; do
  if ((SECONDS >= deadline)); then
    echo "srun_test: the Slurm node did not come up"
    tail -n 20 "$dir"/*.log "$dir"/*.out
    exit 1
  fi
  sleep 0.2
done

# Everything on loopback: the store (SLURM_LAUNCH_NODE_IPADDR is 127.0.0.1 here), Gloo, and
# OpenMPI's shared memory.
export MASTER_PORT=$(free_port) MESHRT_LOG_LEVEL=info OMPI_MCA_btl=self,vader
# Under .ci/sanitize.sh asan, the options tests/mpi_test.cc gives its ranks: OpenMPI's kept memory
# then has whole stacks and named components, which .ci/sanitizers/lsan.supp recognises.
if [[ -n ${ASAN_OPTIONS:-} ]]; then
  export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"
  export OMPI_MCA_mca_base_component_disable_dlclose=1
fi
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
expected_groups='{"rank":0,"coordinate":[0,0],"groups":{"dim0":[0,2],"dim1":[0,1]}}
{"rank":1,"coordinate":[0,1],"groups":{"dim0":[1,3],"dim1":[0,1]}}
{"rank":2,"coordinate":[1,0],"groups":{"dim0":[0,2],"dim1":[2,3]}}
{"rank":3,"coordinate":[1,1],"groups":{"dim0":[1,3],"dim1":[2,3]}}'

for mpi in none pmix; do
  backend=$([[ $mpi == pmix ]] && echo mpi || echo gloo)
  timeout 120 srun --mpi=$mpi -n 4 --overcommit "$mesh_demo" --mesh 2x2 --print-groups \
    > "$dir/demo_$mpi.out" 2> "$dir/demo_$mpi.err"
  status=$?
  echo "== srun --mpi=$mpi: mesh_demo --mesh 2x2 exited $status"
  [[ $status == 0 ]] || fail "srun --mpi=$mpi mesh_demo exited $status"
  [[ $(sort "$dir/demo_$mpi.out") == "$expected_groups" ]] ||
    fail "srun --mpi=$mpi: groups differ: $(cat "$dir/demo_$mpi.out")"
  for r in 0 1 2 3; do
    grep -q "rank $r of 4 (from srun, backend $backend)" "$dir/demo_$mpi.err" ||
      fail "srun --mpi=$mpi: rank $r did not join from srun over $backend"
  done
  if [[ $mpi == none ]]; then
    grep -q "started by srun without PMIx, so over Gloo" "$dir/demo_$mpi.err" ||
      fail "srun without PMI: no word on why the job runs over Gloo"
  fi
done

timeout 120 srun --mpi=pmix -n 4 --overcommit env MESHRT_DUMP_PREFIX="$dir/dumps/fr_" \
  "$hang" --timeout-ms 1500 > "$dir/hang.out" 2>&1
status=$?
echo "== srun --mpi=pmix: hang exited $status"
[[ $status != 0 && $status != 124 ]] || fail "the hang under srun exited $status"
for r in 0 1 2 3; do
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["entries"][-1]["profiling_name"] == "mpi:all_reduce"' \
    "$dir/dumps/fr_$r" || fail "rank $r left no MPI dump"
done
timeout 60 "$meshtrace" analyze "$dir/dumps" --prefix fr_ > "$dir/verdict.txt"
status=$?
cat "$dir/verdict.txt"
[[ $status == 1 ]] || fail "meshtrace analyze exited $status"
grep -q "rank 0 issued all_reduce #5 that ranks \[1, 2, 3\] never called" "$dir/verdict.txt" ||
  fail "the verdict does not name the extra all_reduce"
sleep 0.5
if pgrep -f "^$hang --timeout-ms" > /dev/null; then
  fail "ranks left behind: $(pgrep -a -f "^$hang --timeout-ms")"
fi

if ((failures)); then
  for f in "$dir"/*.err "$dir/hang.out"; do
    echo "--- $f"
    tail -n 30 "$f"
  done
  exit 1
fi
echo "srun_test: all passed"
