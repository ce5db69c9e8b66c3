#!/usr/bin/env bash
# examples/c_dp_train.c (the C API's data-parallel trainer) under meshrun on 2 and 3 local ranks
# must end with the loss and weights of a run on one rank, to 1e-12 relative: only the order of
# the floating-point sums differs. The ops' records name the trainer's own line as their call
# site (the C API's call-site macros), and its scope. Every job is bounded by `timeout`; meshrun
# ends its ranks.
# Usage: c_dp_train_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
out=$(mktemp -d /tmp/meshrt-c-dp-XXXXXX)
trap 'rm -rf "$out"' EXIT
for n in 1 2 3; do
  MASTER_ADDR=127.0.0.1 MESHRT_DUMP_PREFIX="$out/fr_" MESHRT_TRACE_JSONL="$out/ops$n.{rank}.jsonl" \
    timeout 120 "$build/meshrun" --standalone \
    --nproc-per-node "$n" --log-dir "$out/log$n" "$build/examples/c_dp_train" "$out/w$n.txt" \
    > "$out/job$n.out" 2>&1 || { cat "$out/job$n.out" "$out"/log$n/attempt_0/rank_*.log; exit 1; }
done
python3 - "$out" "$src/examples/c_dp_train.c" <<'PY'
import json
import sys
d = sys.argv[1]
one = [float(v) for v in open(f"{d}/w1.txt")]
assert len(one) == 9, one
assert one[0] < 0.45, f"the single-rank run did not learn: loss {one[0]}"
for n in (2, 3):
    many = [float(v) for v in open(f"{d}/w{n}.txt")]
    for i, (a, b) in enumerate(zip(one, many)):
        assert abs(a - b) <= 1e-12 * max(1.0, abs(a)), f"{n} ranks: value {i} is {b}, one rank {a}"
# Every training all_reduce names the trainer's line, through the C API's call-site macro.
line = next(i + 1 for i, text in enumerate(open(sys.argv[2]))
            if "meshrt_all_reduce(world, sums" in text)
ops = [json.loads(l) for l in open(f"{d}/ops2.1.jsonl")]
trained = [o for o in ops if o["op"] == "all_reduce" and o["scope"] == "logistic"]
assert len(trained) == 60, len(trained)
for o in trained:
    assert o["caller_file"].endswith("c_dp_train.c") and o["caller_line"] == line, o
print("c_dp_train: 2 and 3 ranks match 1 rank; loss", one[0], "; call sites c_dp_train.c:", line)
PY
