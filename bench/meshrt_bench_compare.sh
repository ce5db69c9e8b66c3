#!/bin/bash
# meshrt-bench against raw libgloo and PyTorch (gloo) on the same sizes and rank counts, in paired
# interleaved rounds, ending with one ratio line per comparison and a PNG of busbw against size.
#
#   bench/meshrt_bench_compare.sh BUILD_DIR [-r ROUNDS] [-w "2 4"] [-o OUT_DIR] [-t SECONDS]
#                                 [-e MAXBYTES] [--plot PNG] [--contended] [--hosts LIST]
#
# BUILD_DIR holds a built bench/meshrt-bench (use a release build for figures: meson setup
# build-release --buildtype=release && ninja -C build-release bench/meshrt-bench). Each round
# runs, per world size, three process groups in an order rotated by the round number:
#   meshrt  bench/meshrt-bench over meshrt's Gloo backend
#   gloo    bench/meshrt-bench --impl gloo: the same loop on libgloo called directly, same binary
#   torch   bench/torch_meshrt_bench.py: the same loop with torch.distributed (/usr/bin/python3)
# each twice: a latency pass (8 B, -w 50 -n 500) and a bandwidth pass (4 KiB .. MAXBYTES, x4,
# -w 1 -n 5; -e 64M by default), over all_reduce, all_gather, reduce_scatter and broadcast,
# results checked (#wrong).
# Ranks start with RANK/WORLD_SIZE/MASTER_ADDR=127.0.0.1/MASTER_PORT (a fresh port per group),
# GLOO_SOCKET_IFNAME=lo and OMP_NUM_THREADS=1 (torchrun's and meshrun's default), each bounded
# by `timeout`. Ratios pair the impls of one round: busbw
# ratios (above 1: meshrt faster) and, at 8 B, time ratios (below 1: meshrt faster), each on the
# placement meshrt runs natively (all_reduce and broadcast in place, the others out of place).
# --plot writes busbw against size (medians over rounds, first world size) with gnuplot.
# --contended keeps a shell loop spinning for the whole run (the other core busy).
# --hosts "a,a,b,b" plays hosts on this machine: rank r gets MESHRT_SIMULATED_HOST=(item r), so
# meshrt shares memory only within a host and goes hierarchical; raw Gloo and PyTorch always use
# TCP between every pair, as they do across real hosts. The list needs one item per rank.
set -u -o pipefail
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
BUILD=$1; shift
ROUNDS=7 WORLDS="2" OUT="" LIMIT=300 PLOT="" CONTENDED=0 MAXBYTES=64M HOSTS=
while [ $# -gt 0 ]; do
  case $1 in
    -r) ROUNDS=$2; shift 2 ;;
    -w) WORLDS=$2; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    -t) LIMIT=$2; shift 2 ;;
    -e) MAXBYTES=$2; shift 2 ;;
    --plot) PLOT=$2; shift 2 ;;
    --contended) CONTENDED=1; shift ;;
    --hosts) HOSTS=$2; shift 2 ;;
    *) usage ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
MB="$BUILD/bench/meshrt-bench"
[ -x "$MB" ] || { echo "meshrt_bench_compare.sh: $MB not found: build it first" >&2; exit 2; }
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/meshrt-bench-compare-XXXXXX)
mkdir -p "$OUT"
COLLS=all_reduce,all_gather,reduce_scatter,broadcast
PASSES=(lat bw)
declare -A PASS_ARGS=([lat]="-b 8 -e 8 -w 50 -n 500" [bw]="-b 4K -e $MAXBYTES -f 4 -w 1 -n 5")
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null)"
  echo "build: $BUILD ($(meson introspect "$BUILD" --buildoptions 2>/dev/null | $PY -c \
    'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="buildtype"))' \
    2>/dev/null || echo unknown))"
  echo "rounds: $ROUNDS, world sizes: $WORLDS, contended: $CONTENDED${HOSTS:+, hosts: $HOSTS}"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/env.txt" >&2

free_port() {
  $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run_group IMPL WORLD ROUND PASS: one process group, its JSON in OUT/IMPL.wWORLD.rROUND.PASS.json.
run_group() {
  local impl=$1 n=$2 round=$3 pass=$4 port r rc=0 pids=()
  local tag="$impl.w$n.r$round.$pass" cmd
  case $impl in
    meshrt) cmd=("$MB") ;;
    gloo) cmd=("$MB" --impl gloo) ;;
    torch) cmd=("$PY" "$HERE/torch_meshrt_bench.py") ;;
  esac
  port=$(free_port)
  IFS=, read -r -a host_of <<< "$HOSTS"
  for ((r = 0; r < n; r++)); do
    MESHRT_SIMULATED_HOST=${host_of[r]:-} RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port GLOO_SOCKET_IFNAME=lo MESHRT_RUN_ID="cmp$round" OMP_NUM_THREADS=1 \
      timeout -k 5 "$LIMIT" "${cmd[@]}" --coll $COLLS ${PASS_ARGS[$pass]} \
      --json "$OUT/$tag.json" > "$OUT/$tag.rank$r.out" 2>&1 &
    pids+=($!)
    STARTED+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  ((rc == 0)) || echo "meshrt_bench_compare.sh: $tag failed (rc $rc); see $OUT/$tag.rank*.out" >&2
  return $rc
}

# Stopped early (Ctrl-C, an outer timeout), the script still ends every process it started:
# `timeout` passes the TERM on to its rank.
SPIN=""
STARTED=()
trap 'kill $SPIN "${STARTED[@]}" 2> /dev/null' EXIT
trap 'exit 143' INT TERM
if ((CONTENDED)); then
  sh -c 'while :; do :; done' &
  SPIN=$!
fi
IMPLS=(meshrt gloo torch)
failed=0
for n in $WORLDS; do
  for ((i = 0; i < ROUNDS; i++)); do
    t0=$(date +%s)
    for ((j = 0; j < 3; j++)); do
      impl=${IMPLS[$(( (i + j) % 3 ))]}
      for pass in "${PASSES[@]}"; do run_group "$impl" "$n" "$i" "$pass" || failed=1; done
    done
    echo "world $n round $i: $(($(date +%s) - t0)) s, load $(cut -d' ' -f1 /proc/loadavg)" >&2
  done
done
[ -n "$SPIN" ] && kill "$SPIN" 2> /dev/null
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt" >&2
$PY "$HERE/meshrt_bench_stats.py" "$OUT" ${PLOT:+--plot "$PLOT"} || failed=1
exit $failed
