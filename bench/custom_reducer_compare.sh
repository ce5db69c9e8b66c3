#!/bin/bash
# A user-defined reduction against the built-in sum, on the same sizes, in paired interleaved
# rounds: what the Reducer path costs beyond the reducer's own work.
#
#   bench/custom_reducer_compare.sh BUILD_DIR [-r ROUNDS] [-n RANKS] [--contended] [-e MAXBYTES]
#
# Each round runs meshrt-bench twice under meshrun (local ranks, Gloo's shared memory), in an
# order rotated by the round: `-o sum`, and `-o custom`, a Reducer that sums f32 with the
# built-in sum's own kernel, so the two differ only in the path. all_reduce and reduce_scatter,
# 8 B .. MAXBYTES (x8; 16M by default), -w 20 -n 200, results checked (#wrong must be 0).
# Prints per op and size the median over rounds of the time ratio custom / sum (in place, as
# meshrt runs them), with its min and max: 1.00 means no cost. --contended keeps a shell loop
# spinning throughout.
set -u -o pipefail
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
BUILD=$1; shift
ROUNDS=7 RANKS=2 CONTENDED=0 MAXBYTES=16M
while [ $# -gt 0 ]; do
  case $1 in
    -r) ROUNDS=$2; shift 2 ;;
    -n) RANKS=$2; shift 2 ;;
    -e) MAXBYTES=$2; shift 2 ;;
    --contended) CONTENDED=1; shift ;;
    *) usage ;;
  esac
done
MB="$BUILD/bench/meshrt-bench"
[ -x "$MB" ] && [ -x "$BUILD/meshrun" ] || { echo "$0: build $MB and meshrun first" >&2; exit 2; }
OUT=$(mktemp -d /tmp/meshrt-custom-reducer-XXXXXX)
SPIN=
cleanup() { [ -n "$SPIN" ] && kill "$SPIN" 2>/dev/null; rm -rf "$OUT"; }
trap cleanup EXIT
if [ "$CONTENDED" = 1 ]; then
  (while :; do :; done) &
  SPIN=$!
fi
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); build: $BUILD; ranks: $RANKS; rounds: $ROUNDS;" \
  "contended: $CONTENDED; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < ROUNDS; r++)); do
  order=(sum custom)
  ((r % 2)) && order=(custom sum)
  for op in "${order[@]}"; do
    timeout 300 "$BUILD/meshrun" --standalone --nproc-per-node "$RANKS" "$MB" \
      --coll all_reduce,reduce_scatter -b 8 -e "$MAXBYTES" -f 8 -w 20 -n 200 -o "$op" \
      --json "$OUT/${op}_$r.json" >"$OUT/${op}_$r.log" 2>&1 ||
      { echo "$0: round $r, -o $op failed:" >&2; tail -5 "$OUT/${op}_$r.log" >&2; exit 1; }
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(op, r):
    with open(f"{out}/{op}_{r}.json") as f:
        for x in json.load(f)["rows"]:
            if x["wrong"]:
                sys.exit(f"-o {op} round {r}: {x['wrong']} wrong elements in {x['op']} {x['bytes']}")
            if x["in_place"]:
                yield (x["op"], x["bytes"]), x["time_us"]
ratios = {}
for r in range(rounds):
    base = dict(rows("sum", r))
    for key, t in rows("custom", r):
        ratios.setdefault(key, []).append(t / base[key])
print(f"{'op':<16}{'bytes':>10}  custom/sum time: median [min, max] over {rounds} rounds")
for (op, size), v in sorted(ratios.items()):
    print(f"{op:<16}{size:>10}  {statistics.median(v):.2f} [{min(v):.2f}, {max(v):.2f}]")
EOF
