#!/usr/bin/env bash
# examples/c_collective_hooks.c (a learner's reduce-scatter and all-gather hooks over byte buffers,
# on meshrt_reduce_scatter_v_custom and meshrt_all_gather_v) under meshrun on 2 and 3 local ranks,
# over shared memory and over TCP, must find the split and histogram checksum of a run on one
# rank (to 1e-9: only the order of the floating-point sums differs). The records name the
# learner's reducer and the ops' blocks. Every job is bounded by `timeout`; meshrun ends its ranks.
# Usage: c_collective_hooks_test.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
out=$(mktemp -d /tmp/meshrt-c-hooks-XXXXXX)
trap 'rm -rf "$out"' EXIT
run() {  # name ranks [env...]
  local name=$1 n=$2
  shift 2
  env "$@" MASTER_ADDR=127.0.0.1 MESHRT_DUMP_PREFIX="$out/fr_" \
    MESHRT_TRACE_JSONL="$out/ops_$name.{rank}.jsonl" timeout 120 "$build/meshrun" --standalone \
    --nproc-per-node "$n" --log-dir "$out/log_$name" "$build/examples/c_collective_hooks" \
    "$out/$name.txt" > "$out/$name.out" 2>&1 ||
    { cat "$out/$name.out" "$out"/log_"$name"/attempt_0/rank_*.log; exit 1; }
}
run one 1
run shm2 2
run shm3 3
run tcp3 3 MESHRT_GLOO_SHM_SLOT_BYTES=0
python3 - "$out" <<'PY'
import json
import sys
d = sys.argv[1]
def result(name):
    f, b, gain, checksum = open(f"{d}/{name}.txt").read().split()
    return int(f), int(b), float(gain), float(checksum)
one = result("one")
assert one[:2] == (3, 18), f"one rank found feature {one[0]} bin {one[1]}, not feature 3 bin 18"
for name in ("shm2", "shm3", "tcp3"):
    got = result(name)
    assert got[:2] == one[:2], f"{name}: split {got[:2]}, one rank {one[:2]}"
    for a, b in zip(got[2:], one[2:]):
        assert abs(a - b) <= 1e-9 * max(1.0, abs(b)), f"{name}: {got} vs one rank {one}"
ops = [json.loads(l) for l in open(f"{d}/ops_shm3.1.jsonl")]
rs = [o for o in ops if o["op"] == "reduce_scatter_v"]
ag = [o for o in ops if o["op"] == "all_gather_v"]
assert len(rs) == 1 and rs[0]["reduce_op"] == "learner_reducer" and rs[0]["dtype"] == "opaque", rs
assert rs[0]["scope"] == "histograms", rs[0]
assert len(ag) == 1 and ag[0]["scope"] == "candidates", ag
print("c_collective_hooks: 2 and 3 ranks (shm, tcp) find one rank's split", one)
PY
