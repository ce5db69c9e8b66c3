#!/bin/bash
# Compares meshrt, raw libgloo and PyTorch (gloo backend) collectives on one machine over loopback.
#
#   bench/compare.sh BUILD_DIR [-r ROUNDS] [-w "2 4"] [-o OUT_DIR] [-t SECONDS] [--cpp-only]
#                    [--contended] [-- BENCH_ARGS...]
#
# BUILD_DIR holds an already built bench/collective_bench (this script builds nothing; use a
# release build dir for figures: meson setup build-release --buildtype=release && ninja -C
# build-release). For each world size, ROUNDS rounds (default 7) each run
#   [collective_bench x N ranks]  meshrt and raw Gloo back to back in one process per rank
#   [torch_bench.py   x N ranks]  PyTorch 1.13 with /usr/bin/python3, GLOO_SOCKET_IFNAME=lo
# with the order of the two process groups rotated over rounds (and, inside collective_bench,
# the order of meshrt and raw Gloo rotated by round number). Every process group gets a fresh free
# port on 127.0.0.1 and is bounded by `timeout`. BENCH_ARGS go to both benchmarks (same iteration
# counts), e.g. -- --lat-iters 2000. --cpp-only skips torch (for collective_bench-only args such
# as --handoff-experiment). World sizes default to 2 (about 75 s for 7 rounds); -w "2 4" adds 4
# ranks (about 4 more minutes). --contended keeps a shell loop spinning for the whole run (the
# other core busy, as in a training job, whose CPUs are never idle).
#
# Prints a markdown table (compare_stats.py) and keeps the raw JSON lines in OUT_DIR.
set -u -o pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

[ $# -ge 1 ] || usage
BUILD=$1; shift
ROUNDS=7
WORLDS="2"
OUT=""
LIMIT=120
TORCH=1
CONTENDED=0
while [ $# -gt 0 ]; do
  case $1 in
    -r) ROUNDS=$2; shift 2 ;;
    -w) WORLDS=$2; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    -t) LIMIT=$2; shift 2 ;;
    --cpp-only) TORCH=0; shift ;;
    --contended) CONTENDED=1; shift ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "compare.sh: unknown argument $1" >&2; usage ;;
  esac
done
EXTRA=("$@")

HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
CB="$BUILD/bench/collective_bench"
TB="$HERE/torch_bench.py"
[ -x "$CB" ] || { echo "compare.sh: $CB not found: build it first (ninja -C $BUILD)" >&2; exit 2; }
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/meshrt-compare-XXXXXX)
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"

BUILDTYPE=$(meson introspect "$BUILD" --buildoptions 2>/dev/null |
  $PY -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="buildtype"))' \
  2>/dev/null || echo unknown)
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(uname -srm), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "build: $BUILD (buildtype $BUILDTYPE)"
  (( TORCH )) && echo "torch: $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "rounds: $ROUNDS, world sizes: $WORLDS, contended: $CONTENDED, extra args: ${EXTRA[*]:-none}"
  # Shared machine: a load above ~1 before we start means someone else is using the cores.
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/env.txt" >&2

free_port() {
  $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run_group NAME WORLD ROUND CMD...: starts WORLD ranks of CMD, waits, appends rank 0's JSON.
run_group() {
  local name=$1 n=$2 round=$3; shift 3
  local port; port=$(free_port)
  local pids=() r rc=0
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port GLOO_SOCKET_IFNAME=lo MESHRT_RUN_ID="bench$round" \
      timeout -k 5 "$LIMIT" "$@" > "$OUT/$name.w$n.r$round.rank$r.out" \
      2> "$OUT/$name.w$n.r$round.rank$r.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  if [ $rc -ne 0 ]; then
    echo "compare.sh: $name world $n round $round failed (rc $rc); see $OUT/$name.w$n.r$round.rank*.err" >&2
  fi
  grep -h '^{' "$OUT/$name.w$n.r$round.rank0.out" >> "$RESULTS" || true
  return $rc
}

SPIN=""
if (( CONTENDED )); then
  sh -c 'while :; do :; done' &
  SPIN=$!
  trap 'kill $SPIN 2>/dev/null' EXIT
fi
START=$(date +%s)
for n in $WORLDS; do
  for ((i = 0; i < ROUNDS; i++)); do
    t0=$(date +%s)
    cpp=(run_group cpp "$n" "$i" "$CB" --first-round "$i" "${EXTRA[@]}")
    tor=(run_group torch "$n" "$i" "$PY" "$TB" --first-round "$i" "${EXTRA[@]}")
    # Rotate which process group goes first: C++ first in rounds 0,1,4,5; torch in 2,3,6, ...
    if (( TORCH == 0 )); then "${cpp[@]}";
    elif (( (i / 2) % 2 == 0 )); then "${cpp[@]}"; "${tor[@]}"; else "${tor[@]}"; "${cpp[@]}"; fi
    echo "world $n round $i: $(( $(date +%s) - t0 )) s" >&2
  done
done
[ -n "$SPIN" ] && kill "$SPIN" 2>/dev/null
echo "total: $(( $(date +%s) - START )) s; load after: $(cut -d' ' -f1-3 /proc/loadavg); raw results in $RESULTS" | tee -a "$OUT/env.txt" >&2

$PY "$HERE/compare_stats.py" "$RESULTS"
