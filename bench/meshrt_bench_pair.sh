#!/bin/bash
# Two meshrt-bench runs that differ in their arguments, in paired interleaved rounds: what one
# path costs beside another on the same sizes (a Reducer against the built-in sum, all_gather_v
# against all_gather, ...).
#
#   bench/meshrt_bench_pair.sh BUILD_DIR [-r ROUNDS] [-n RANKS] [--contended]
#                              [--env-a VAR=VALUE]... [--env-b VAR=VALUE]... 'ARGS_A' 'ARGS_B'
#
# Each round runs `meshrun --standalone --nproc-per-node RANKS meshrt-bench ARGS` for A and for B
# (local ranks: Gloo's shared memory unless the environment says otherwise), in an order rotated
# by the round; every result is checked (#wrong must be 0). Rows pair by position, so A and B
# must give the same sizes in the same order. Prints per row (A's op and size; in place, but out
# of place for the ops meshrt runs only so) the median over rounds of the time ratio B / A, with
# its min and max: 1.00 means B costs nothing more. --contended keeps a shell loop spinning throughout.
# --env-a/--env-b set a variable for one side's ranks only (the same arguments under another
# MESHRT_ALGO: p2p through the mailboxes against TCP).
#
#   bench/meshrt_bench_pair.sh build-release -r 9 \
#     '--coll all_reduce,reduce_scatter -b 8 -e 16M -f 8 -w 20 -n 200 -o sum' \
#     '--coll all_reduce,reduce_scatter -b 8 -e 16M -f 8 -w 20 -n 200 -o custom'
set -u -o pipefail
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 3 ] || usage
BUILD=$1; shift
ROUNDS=7 RANKS=2 CONTENDED=0
declare -A ENVS=([a]= [b]=)
while [ $# -gt 2 ]; do
  case $1 in
    -r) ROUNDS=$2; shift 2 ;;
    -n) RANKS=$2; shift 2 ;;
    --contended) CONTENDED=1; shift ;;
    --env-a) ENVS[a]+=" $2"; shift 2 ;;
    --env-b) ENVS[b]+=" $2"; shift 2 ;;
    *) usage ;;
  esac
done
[ $# -eq 2 ] || usage
declare -A ARGS=([a]=$1 [b]=$2)
MB="$BUILD/bench/meshrt-bench"
[ -x "$MB" ] && [ -x "$BUILD/meshrun" ] || { echo "$0: build $MB and meshrun first" >&2; exit 2; }
OUT=$(mktemp -d /tmp/meshrt-bench-pair-XXXXXX)
SPIN=
cleanup() { [ -n "$SPIN" ] && kill "$SPIN" 2>/dev/null; rm -rf "$OUT"; }
trap cleanup EXIT
if [ "$CONTENDED" = 1 ]; then
  (while :; do :; done) &
  SPIN=$!
fi
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); build: $BUILD; ranks: $RANKS; rounds: $ROUNDS;" \
  "contended: $CONTENDED; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "A:${ENVS[a]} ${ARGS[a]}"
echo "B:${ENVS[b]} ${ARGS[b]}"
for ((r = 0; r < ROUNDS; r++)); do
  order=(a b)
  ((r % 2)) && order=(b a)
  for side in "${order[@]}"; do
    # shellcheck disable=SC2086  # Each side's arguments split as a shell splits words.
    env ${ENVS[$side]} timeout 300 "$BUILD/meshrun" --standalone --nproc-per-node "$RANKS" "$MB" ${ARGS[$side]} \
      --json "$OUT/${side}_$r.json" >"$OUT/${side}_$r.log" 2>&1 ||
      { echo "$0: round $r, side $side failed:" >&2; tail -n 5 "$OUT/${side}_$r.log" >&2; exit 1; }
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(side, r):
    with open(f"{out}/{side}_{r}.json") as f:
        rows = json.load(f)["rows"]
    for x in rows:
        if x["wrong"]:
            sys.exit(f"side {side} round {r}: {x['wrong']} wrong elements in {x['op']} {x['bytes']}")
    # The placement meshrt runs natively: in place, but for the ops it has out of place only.
    out_of_place_only = ("all_to_all", "gather", "scatter", "sendrecv")
    return [x for x in rows if x["in_place"] != (x["op"] in out_of_place_only)]
ratios, labels = {}, {}
for r in range(rounds):
    a, b = rows("a", r), rows("b", r)
    if [x["bytes"] for x in a] != [x["bytes"] for x in b]:
        sys.exit("A and B give different sizes: rows pair by position")
    for i, (x, y) in enumerate(zip(a, b)):
        labels[i] = (x["op"] if x["op"] == y["op"] else f"{y['op']}/{x['op']}", x["bytes"])
        ratios.setdefault(i, []).append(y["time_us"] / x["time_us"])
print(f"{'op (B/A)':<34}{'bytes':>10}  B/A time: median [min, max] over {rounds} rounds")
for i, v in sorted(ratios.items()):
    op, size = labels[i]
    print(f"{op:<34}{size:>10}  {statistics.median(v):.2f} [{min(v):.2f}, {max(v):.2f}]")
EOF
