#!/usr/bin/env bash
# The GPU verification of issue 26 in one call, from a carry made by .ci/gpu_carry.sh (this file
# is its run.sh): NCCL unit tests, per-call CUDA costs, nccl_bench four ways, PyTorch's
# ProcessGroupNCCL for comparison, gpu_test, two hangs made on purpose (stream, graph replay) and
# tp_mlp_train under meshrun. Each step has its own timeout under a total budget; the summary
# (step, status, exit code, seconds, one line) goes to $OUT/summary.txt and ends the output, every
# log and dump goes to $OUT/logs.tar.gz. A GPU step that exits 77 or says "no CUDA device" is
# skipped (a failure where nvidia-smi lists a GPU); a step the budget leaves out fails. Exit
# status: 1 if a step failed, else 0.
#
#   OUT=<dir> GPU_RUN_BUDGET_S=420 bash build-gpu-carry/run.sh     (OUT default: <carry>/out)
#   MESHRT_NCCL_LIB_DIR=<dir> picks the NCCL; else ldconfig's, PyTorch's wheel, /usr/local/cuda's.
set -u
shopt -s nullglob
export LC_ALL=C NCCL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo MASTER_ADDR=127.0.0.1 MASTER_PORT=29517
CARRY=$(cd "$(dirname "$0")" && pwd)
BIN=$CARRY/bin
OUT=${OUT:-$CARRY/out}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/meshrt-gpu-run-XXXXXX")/logs
SUMMARY=$LOGS/summary.txt
mkdir -p "$OUT" "$LOGS"
DEADLINE=$((SECONDS + ${GPU_RUN_BUDGET_S:-420}))
failed=0 passed=0 skipped=0 result='' failed_logs=()

nccl_dir=${MESHRT_NCCL_LIB_DIR:-}
p=$(ldconfig -p 2>/dev/null | awk '$1 == "libnccl.so.2" { print $NF; exit }')
[ -z "$nccl_dir" ] && [ -n "$p" ] && nccl_dir=$(dirname "$p")
for d in "$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0] + "/lib")' 2>/dev/null)" \
  /opt/*/.venv/lib/python3*/site-packages/nvidia/nccl/lib /usr/local/cuda/lib64 /usr/local/cuda*/lib*; do
  [ -z "$nccl_dir" ] && [ -f "$d/libnccl.so.2" ] && nccl_dir=$d
done
LIBPATH=$CARRY/lib${nccl_dir:+:$nccl_dir}
MRT=(env "LD_LIBRARY_PATH=$LIBPATH")  # For meshrt's binaries only: python3 keeps its libraries.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
{
  echo "gpu_run $(date -u +%FT%TZ) on $(hostname); carry $(head -1 "$CARRY/info.txt")"
  echo "GPUs: $gpus $(nvidia-smi -L 2>/dev/null | head -1)"
  nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | sed 's/^/driver: /;q'
  echo "NCCL dir: ${nccl_dir:-none found}; nccl_bench loads:" \
    "$("${MRT[@]}" ldd "$BIN/nccl_bench" 2>&1 | awk '/libnccl|libcudart/ { printf "%s ", $3 }')"
  [ -n "$nccl_dir" ] && python3 -c 'import ctypes, sys; v = ctypes.c_int()
ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(v)); v = v.value
print("NCCL version: %d.%d.%d" % (v // 10000, v // 100 % 100, v % 100))' \
    "$nccl_dir/libnccl.so.2" 2>/dev/null
  echo "budget: $((DEADLINE - SECONDS)) s"
  printf '%-24s %-7s %4s %6s  %s\n' step status rc secs result
} >"$SUMMARY"
cat "$SUMMARY"

# record STEP STATUS RC SECS RESULT: one summary line.
record() {
  printf '%-24s %-7s %4s %6s  %s\n' "$1" "$2" "$3" "$4" "${5:0:300}" >>"$SUMMARY"
  echo "gpu_run: $1: $2 (rc $3, $4 s)"
  case $2 in passed) ((passed++)) ;; failed) ((failed++)); failed_logs+=("$LOGS/$1.log") ;;
  *) ((skipped++)) ;; esac
}

# run STEP LIMIT_S CMD...: CMD, output in $LOGS/STEP.log, bounded by LIMIT_S and the budget; its
# process group is killed after (timeout leads one). Sets rc (124: timed out; -1: no budget left),
# secs and log.
run() {
  local step=$1 limit=$2 left=$((DEADLINE - SECONDS)) t0=${EPOCHREALTIME:-$SECONDS} pid
  shift 2
  log=$LOGS/$step.log rc=-1 secs=0
  echo "+ $*" >"$log"
  [ "$left" -lt "$limit" ] && limit=$left
  [ "$limit" -lt 5 ] && return
  echo "gpu_run: $step (at most $limit s)"
  timeout -k 5 "$limit" "$@" >>"$log" 2>&1 </dev/null &
  pid=$!
  wait $pid
  rc=$?
  kill -KILL -- -$pid 2>/dev/null
  secs=$(awk -v a="$t0" -v b="${EPOCHREALTIME:-$SECONDS}" 'BEGIN { printf "%.1f", b - a }')
}

# verdict STEP KIND: records the last run; KIND gpu: exit 77 or "no CUDA device" is a skip. The
# result line is $result if set, else the log's last line.
verdict() {
  local status=failed line cuda
  [ "$rc" = -1 ] && { record "$1" failed - 0 "not run: the budget (GPU_RUN_BUDGET_S) is spent"; return; }
  line=${result:-$(grep -v '^\s*$\|^+ ' "$log" | tail -1)}
  result=''
  cuda=$(grep -o 'no CUDA device.*' "$log" | head -1)
  if [ "$2" = gpu ] && { [ "$rc" = 77 ] || [ -n "$cuda" ]; } && ! grep -q '^\[       OK \]' "$log"; then
    line=${cuda:-no CUDA device (exit 77)}
    if [ "$gpus" -gt 0 ]; then line="yet nvidia-smi lists $gpus GPU: $line"; else status=skipped; fi
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    line="timed out: $line"
  elif [ "$rc" = 0 ]; then
    status=passed
  fi
  record "$1" "$status" "$rc" "$secs" "$line"
}

# gtest_line: "N passed, N failed, N skipped" and the first failures, from a gtest log.
gtest_line() {
  local n w
  for w in PASSED FAILED SKIPPED; do
    n=$(sed -n "s/^\[ *$w *\] \([0-9]*\) tests\?.*/\1/p" "$log" | tail -1)
    printf '%s %s' "${n:-0}" "${w,,}"; [ $w = SKIPPED ] || printf ', '
  done
  grep '^\[  FAILED  \] [A-Za-z]' "$log" | cut -c14- | sed 's/ (.*//' | awk '!s[$0]++' |
    head -3 | tr '\n' ' ' | sed 's/^/: /'
}

# have BINARY [STEP]: records STEP (default BINARY) as skipped if the carry lacks BINARY.
have() {
  [ -x "$BIN/$1" ] && return 0
  record "${2:-$1}" skipped - 0 "$1 is not in the carry"
  return 1
}

# fields LABEL KEY...: "KEY value; ..." from the log's lines "LABEL KEY value ...".
fields() {
  awk -v l="$1" -v keys=" ${*:2} " '$1 == l && index(keys, " " $2 " ") { printf "%s %s; ", $2, $3 }' "$log"
}

# (1) NCCL unit tests; (2) per-call CUDA costs; (3) nccl_bench four ways.
if have nccl_unit_test; then
  run nccl_unit_test 60 "${MRT[@]}" "$BIN/nccl_unit_test"
  result=$(gtest_line); verdict nccl_unit_test host
fi
if have cuda_cost_bench; then
  run cuda_cost_bench 60 "${MRT[@]}" "$BIN/cuda_cost_bench"
  result=$(awk '$1 == "cost" { n++; s = s $2 " " $3 "; " } END { if (n) print n " costs (ns): " s }' "$log")
  verdict cuda_cost_bench gpu
fi
for way in nccl_bench "nccl_bench_no_ptr_check MESHRT_NCCL_CHECK_POINTERS=0" \
  "nccl_bench_caller_stream MESHRT_NCCL_USE_CALLER_STREAM=1" "nccl_bench_timing MESHRT_ENABLE_TIMING=1"; do
  read -r step var <<<"$way"
  have nccl_bench "$step" || continue
  run "$step" 45 "${MRT[@]}" ${var:+"$var"} "$BIN/nccl_bench"
  result=$(fields nccl_bench overhead_ns overhead_avg_ns overhead_streams_ns overhead_launch_only_ns raw_ns raw_streams_ns meshrt_ns cold_pool_ns results)
  verdict "$step" gpu
done

# (4) PyTorch's ProcessGroupNCCL, world size 1.
if [ ! -f "$CARRY/torch_nccl_bench.py" ]; then
  record torch_nccl_bench skipped - 0 "torch_nccl_bench.py is not in the carry"
elif ! python3 -c 'import torch' 2>/dev/null; then
  record torch_nccl_bench skipped - 0 "no python3 with torch"
else
  run torch_nccl_bench 90 python3 "$CARRY/torch_nccl_bench.py"
  result=$(fields torch_nccl_bench all_reduce_8B_ns all_reduce_avg_8B_ns cold_ns results)
  verdict torch_nccl_bench gpu
fi

# (5) gpu_test with the throw policy, so that one failure does not hide the rest (its hang tests
# exec the gpu_hang_worker beside it).
if have gpu_test; then
  run gpu_test 200 "${MRT[@]}" MESHRT_ON_TIMEOUT=throw MESHRT_DUMP_PREFIX="$LOGS/gpu_test_dumps/fr_" \
    "$BIN/gpu_test" --gtest_output=xml:"$LOGS/gpu_test.xml"
  result=$(gtest_line); verdict gpu_test gpu
fi

# (6) Hangs made on purpose (a spinning kernel ahead of an all_gather, 1 s op timeout), each in
# its own process: exit 70 (abort policy), fr_0 dumped with the all_gather within 3 s of the
# hang's launch (DIR/armed and the dump's clock.steady_ns: both CLOCK_MONOTONIC ns), and
# meshtrace's verdict on the dump.
dump_facts() {  # DIR: "<s from hang to dump>|reason ..., trigger ..., all_gather <state> ..."
  python3 - "$1" <<'PY' 2>/dev/null
import json, sys
j = json.load(open(sys.argv[1] + "/fr_0"))
e = [x for x in j.get("entries", []) if "all_gather" in str(x.get("profiling_name"))]
print("%.2f|reason %s, trigger %s, all_gather %s, cuda_graph_id %s" % (
    (j["clock"]["steady_ns"] - int(open(sys.argv[1] + "/armed").read())) / 1e9, j.get("dump_reason"),
    (j.get("trigger") or {}).get("op"), e[-1].get("state") if e else "absent",
    e[-1].get("cuda_graph_id") if e else None))
PY
}
for mode in stream graph; do
  have gpu_hang_worker "hang_$mode" || continue
  dir=$LOGS/hang_$mode
  mkdir -p "$dir"
  run "hang_$mode" 45 "${MRT[@]}" MESHRT_ON_TIMEOUT=abort MESHRT_DUMP_PREFIX="$dir/fr_" \
    "$BIN/gpu_hang_worker" "$mode" "$dir"
  if [ "$rc" != 70 ]; then  # Not ended by the watchdog: a failure (0 too), unless no device.
    [ "$rc" = 0 ] && rc="0!"
    verdict "hang_$mode" gpu
    continue
  fi
  secs_hang=$secs facts=$(dump_facts "$dir")
  run "hang_${mode}_analyze" 30 "${MRT[@]}" "$BIN/meshtrace" analyze "$dir" --prefix fr_
  said="dump ${facts%%|*} s after the hang: ${facts#*|}; meshtrace (rc $rc): $(
    grep -v '^\s*$\|^+ ' "$log" | head -3 | tr -s ' \n' '  ')"
  if ! grep -aq all_gather "$dir/fr_0" 2>/dev/null; then
    record "hang_$mode" failed 70 "$secs_hang" "no fr_0 naming the all_gather; $said"
  elif [ -n "$facts" ] && awk -v g="${facts%%|*}" 'BEGIN { exit !(g > 3) }'; then
    record "hang_$mode" failed 70 "$secs_hang" "too slow (> 1 s timeout + 2 s): $said"
  else
    record "hang_$mode" passed 70 "$secs_hang" "$said"
  fi
done

# (7) tp_mlp_train over NCCL under meshrun, one rank (NCCL refuses two ranks on one GPU).
if have meshrun tp_mlp_train && have tp_mlp_train; then
  run tp_mlp_train 90 "${MRT[@]}" "$BIN/meshrun" --standalone --nproc-per-node 1 \
    --log-dir "$LOGS/meshrun" --tee 3 "$BIN/tp_mlp_train" --mesh 1x1 --backend nccl
  result=$(grep -o 'loss went down\|loss did NOT go down' "$log" | tail -1); verdict tp_mlp_train gpu
fi

echo "gpu_run: $passed passed, $failed failed, $skipped skipped (GPUs: $gpus)" >>"$SUMMARY"
cp "$SUMMARY" "$OUT/summary.txt"
# The archive under 16 MiB: a log over 2 MiB keeps its first and last MiB.
find "$LOGS" -type f -size +2M | while read -r f; do
  { head -c 1M "$f"; printf '\n[... cut ...]\n'; tail -c 1M "$f"; } >"$f.cut" && mv "$f.cut" "$f"
done
for f in "${failed_logs[@]}"; do echo "=== ${f##*/} (last 20 lines)"; tail -20 "$f"; done
tar -czf "$OUT/logs.tar.gz" -C "$(dirname "$LOGS")" logs && rm -rf "$(dirname "$LOGS")"
echo "=== $OUT/summary.txt (logs: $OUT/logs.tar.gz, $(du -k "$OUT/logs.tar.gz" | cut -f1) KiB)"
cat "$OUT/summary.txt"
[ "$failed" -eq 0 ]
