#!/bin/bash
# meshrt's TcpStore against PyTorch's TCPStore (and the bare loopback round trip), ops per second,
# in paired interleaved rounds.
#
#   bench/store_compare.sh BUILD_DIR [-r ROUNDS] [-c "1 16"] [-k OPS] [-v VALUE_BYTES] [-o OUT_DIR]
#
# Each round runs, for each client count, four processes one after the other in an order rotated
# by the round number: store_ops_bench (meshrt, the server's default 50k requests/s per connection
# cap), store_ops_bench --max-rps 0 (meshrt-nocap), torch_store_bench.py (/usr/bin/python3,
# torch 1.13) and store_ops_bench --echo (tcp-echo: a blocking TCP echo, the floor of any store
# whose ops wait for a reply). Each times K sets, K gets, K adds per client thread (K defaults to
# 2000 for 1 client and 500 per client beyond). Prints per (clients, op) the medians and the
# paired ratios min / median / max, and keeps the JSON lines in OUT_DIR.
set -u -o pipefail
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
BUILD=$1; shift
ROUNDS=7 CLIENTS="1 16" OPS="" VALUE=64 OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    -r) ROUNDS=$2; shift 2 ;;
    -c) CLIENTS=$2; shift 2 ;;
    -k) OPS=$2; shift 2 ;;
    -v) VALUE=$2; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    *) usage ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
SB="$BUILD/bench/store_ops_bench"
[ -x "$SB" ] || { echo "store_compare.sh: $SB not found: build it first" >&2; exit 2; }
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/meshrt-store-compare-XXXXXX)
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
: > "$RESULTS"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/env.txt" >&2
rc=0
for ((r = 0; r < ROUNDS; r++)); do
  for c in $CLIENTS; do
    k=${OPS:-$(( c == 1 ? 2000 : 500 ))}
    common=(--clients "$c" --ops "$k" --value-bytes "$VALUE" --round "$r")
    cmds=("$SB ${common[*]}" "$SB ${common[*]} --max-rps 0" \
      "/usr/bin/python3 $HERE/torch_store_bench.py ${common[*]}" "$SB ${common[*]} --echo")
    for ((j = 0; j < 4; j++)); do
      cmd=${cmds[$(( (j + r) % 4 ))]}
      timeout 120 $cmd >> "$RESULTS" || { echo "store_compare.sh: failed: $cmd" >&2; rc=1; }
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); raw results in $RESULTS" | tee -a "$OUT/env.txt" >&2
/usr/bin/python3 - "$RESULTS" << 'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = collections.defaultdict(dict)  # (round, clients) -> impl -> row
for x in rows:
    by[(x["round"], x["clients"])][x["impl"]] = x
clients = sorted({x["clients"] for x in rows})
impls = ["meshrt", "meshrt-nocap", "torch", "tcp-echo"]
print("| clients | op | " + " | ".join(f"{i} ops/s" for i in impls) + " |")
print("|---|---|" + "---|" * len(impls))
for c in clients:
    for op in ["set", "get", "add"]:
        med = [statistics.median(by[k][i][f"{op}_ops_s"] for k in by if k[1] == c and i in by[k])
               for i in impls]
        print(f"| {c} | {op} | " + " | ".join(f"{m / 1000:.1f}k" for m in med) + " |")
for c in clients:
    for op in ["set", "get", "add"]:
        for a, b in [("meshrt", "torch"), ("meshrt-nocap", "torch"), ("meshrt", "tcp-echo")]:
            rs = sorted(by[k][a][f"{op}_ops_s"] / by[k][b][f"{op}_ops_s"]
                        for k in by if k[1] == c and a in by[k] and b in by[k])
            if rs:
                print(f"ratio {a}/{b} {op} ops/s @{c} client{'s' if c > 1 else ''}: "
                      f"{statistics.median(rs):.2f} (min {rs[0]:.2f}, max {rs[-1]:.2f}, "
                      f"{len(rs)} rounds)")
PY
exit $rc
