#!/bin/bash
# Launcher startup: meshrun vs torchrun, 8 local ranks of a trivial job on one machine.
#
#   bench/launcher_startup.sh BUILD_DIR [-r ROUNDS] [-n NPROC] [-o OUT_DIR]
#
# Per round, in rotated order (meshrun first in rounds 0,1,4,5,...; torchrun in 2,3,6,...):
#   meshrun   BUILD_DIR/meshrun --standalone --nproc-per-node N bench/launcher_startup_rank
#   torchrun  /usr/bin/python3 bench/torchrun_patched.py --standalone --nproc_per_node N
#             --monitor_interval 0.1 bench/launcher_startup_rank.py   (gloo, GLOO_SOCKET_IFNAME=lo)
# Each rank prints the wall-clock time at which its world init returned (meshrt::init() /
# init_process_group), then passes a barrier. Figures per run: "init", from the launcher's start
# to the last rank's init returning; "exit", from the launcher's start to its exit. Prints the
# medians and the paired ratios meshrun/torchrun (min / median / max over rounds).
# torchrun_patched.py is Debian's torchrun 1.13 with Std.from_str fixed for Python 3.11.
set -u -o pipefail

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

[ $# -ge 1 ] || usage
BUILD=$1; shift
ROUNDS=7
NPROC=8
OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    -r) ROUNDS=$2; shift 2 ;;
    -n) NPROC=$2; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "launcher_startup.sh: unknown argument $1" >&2; usage ;;
  esac
done

HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
MESHRUN="$BUILD/meshrun"
RANK_BIN="$BUILD/bench/launcher_startup_rank"
for f in "$MESHRUN" "$RANK_BIN"; do
  [ -x "$f" ] || { echo "launcher_startup.sh: $f not found: build it first" >&2; exit 2; }
done
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/meshrt-launcher-startup-XXXXXX)
mkdir -p "$OUT"
RESULTS="$OUT/results.txt"
: > "$RESULTS"
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(uname -srm), $(nproc) cores"
  echo "build: $BUILD ($(meson introspect "$BUILD" --buildoptions 2>/dev/null |
    $PY -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="buildtype"))' \
    2>/dev/null || echo unknown))"
  echo "torch: $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "rounds: $ROUNDS, ranks: $NPROC, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/env.txt" >&2

# run NAME ROUND CMD...: one launch; appends "NAME ROUND init_s exit_s" to RESULTS.
run() {
  local name=$1 round=$2; shift 2
  local log="$OUT/$name.r$round.log"
  local t0 t1
  t0=$(date +%s%N)
  GLOO_SOCKET_IFNAME=lo timeout -k 5 300 "$@" > "$log" 2>&1
  local rc=$?
  t1=$(date +%s%N)
  local n last
  n=$(grep -o 'init_done_ns=[0-9]*' "$log" | wc -l)
  last=$(grep -o 'init_done_ns=[0-9]*' "$log" | cut -d= -f2 | sort -n | tail -1)
  if [ $rc -ne 0 ] || [ "$n" -ne "$NPROC" ]; then
    echo "launcher_startup.sh: $name round $round failed (rc $rc, $n of $NPROC ranks); see $log" >&2
    return 1
  fi
  echo "$name $round $(( (last - t0) / 1000 )) $(( (t1 - t0) / 1000 ))" >> "$RESULTS"
}

for ((i = 0; i < ROUNDS; i++)); do
  m=(run meshrun "$i" "$MESHRUN" --standalone --nproc-per-node "$NPROC" "$RANK_BIN")
  t=(run torchrun "$i" "$PY" "$HERE/torchrun_patched.py" --standalone --nproc_per_node "$NPROC"
     --monitor_interval 0.1 "$HERE/launcher_startup_rank.py")
  if (( (i / 2) % 2 == 0 )); then "${m[@]}"; "${t[@]}"; else "${t[@]}"; "${m[@]}"; fi
  echo "round $i: $(grep " $i " "$RESULTS" | tr '\n' ';')" >&2
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); raw results in $RESULTS" | tee -a "$OUT/env.txt" >&2

$PY - "$RESULTS" <<'PYEOF'
import collections, statistics, sys
runs = collections.defaultdict(dict)  # round -> name -> (init_us, exit_us)
for line in open(sys.argv[1]):
    name, rnd, init_us, exit_us = line.split()
    runs[int(rnd)][name] = (int(init_us), int(exit_us))
paired = [r for r in runs.values() if "meshrun" in r and "torchrun" in r]
print(f"| figure ({len(paired)} paired rounds) | meshrun | torchrun | meshrun/torchrun min / median / max |")
print("|---|---|---|---|")
for i, label in ((0, "start -> last rank's init returned"), (1, "start -> launcher exit")):
    m = statistics.median(r["meshrun"][i] for r in paired) / 1e3
    t = statistics.median(r["torchrun"][i] for r in paired) / 1e3
    ratios = [r["meshrun"][i] / r["torchrun"][i] for r in paired]
    print(f"| {label} | {m:.0f} ms | {t:.0f} ms | {min(ratios):.3f} / **{statistics.median(ratios):.3f}** / {max(ratios):.3f} |")
PYEOF
