#!/usr/bin/env bash
# A few-second smoke of every bench in bench/, so that each keeps building and running and, where
# it checks its results (collective_bench, torch_bench.py, meshrt-bench and its raw-Gloo and torch
# sides), stays correct. Not a timing: figures come from docs/performance.md's commands on a
# release build. analyzer_bench is left out: its fixture alone (1024 dumps) takes ~30 s here; the
# analyzer suite covers its code.
#
#   bench/smoke.sh BUILD_DIR SOURCE_DIR   (meson test bench_smoke)
set -uo pipefail
BUILD=$1
SRC=$2
OUT=$(mktemp -d /tmp/meshrt-bench-smoke-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
failed=0

fail() {
  echo "bench_smoke: FAIL: $*" >&2
  failed=1
}

# gbench BINARY FILTER: one Google Benchmark binary, each selected case for a moment.
gbench() {
  local bin=$BUILD/bench/$1
  if [ ! -x "$bin" ]; then
    echo "bench_smoke: $1 not built (no Google Benchmark): skipped"
    return
  fi
  if ! timeout 120 "$bin" --benchmark_filter="$2" --benchmark_min_time=0.01 \
    > "$OUT/$1.out" 2>&1; then
    fail "$1 exited with status $?"
    tail -n 20 "$OUT/$1.out" >&2
    return
  fi
  grep -q '^BM_' "$OUT/$1.out" || fail "$1 ran no benchmark for '$2'"
  echo "bench_smoke: $1 ok ($(grep -c '^BM_' "$OUT/$1.out") cases)"
}

gbench store_bench 'BM_SetGetAdd/64/real_time/threads:1$'
gbench op_overhead_bench 'BM_AllReduce8B/real_time|BM_ValidateOnly|BM_ReduceSumF32_Meshrt/65536'
gbench trace_overhead_bench 'BM_RecordAndComplete/1|BM_AllReduce8B/1/'
gbench c_api_bench 'BM_AllReduce8B_'
gbench flight_recorder_bench 'BM_RenderDump/0'
gbench mesh_bench 'BM_CreateMesh4D|BM_SliceTwoDims'
gbench straggler_bench 'BM_Analyze/ranks:8'
gbench peer_memory_bench 'BM_Memcpy/262144|BM_ReadPeerMemory/262144'

# collective_bench through compare.sh: meshrt and raw Gloo on 2 real processes over loopback, each
# result checked element-wise by the bench ("check": "ok"). PyTorch too where it is installed.
torch_flag=--cpp-only
/usr/bin/python3 -c 'import torch' 2> /dev/null && torch_flag=
if ! timeout 240 bash "$SRC/bench/compare.sh" "$BUILD" -r 1 -w 2 -t 100 $torch_flag -o "$OUT/cmp" \
  -- --ops all_reduce,all_gather,broadcast,reduce_scatter --lat-iters 20 --lat-warmup 2 \
  --big-bytes 65536 --big-iters 3 --big-warmup 1 > "$OUT/compare.out" 2>&1; then
  fail "compare.sh exited with status $?"
  tail -n 20 "$OUT/compare.out" >&2
fi
results=$OUT/cmp/results.jsonl
ok=$(grep -c '"check": "ok"' "$results" 2> /dev/null || true)
bad=$(grep -vc '"check": "ok"' "$results" 2> /dev/null || true)
if [ "${ok:-0}" -lt 8 ] || [ "${bad:-0}" -ne 0 ]; then
  fail "collective_bench: ${ok:-0} checked results, ${bad:-0} wrong or unchecked"
  cat "$results" >&2
else
  echo "bench_smoke: collective_bench ok ($ok results checked${torch_flag:+, torch not installed})"
fi

# meshrt-bench: every collective on 2 real processes over Gloo (meshrun) and on 2 in-process
# ranks with a 1x2 mesh dim; fails on any #wrong, a malformed table or JSON that disagrees.
# check_table OUT JSON [COLLECTIVES]: nccl-tests' 13 columns per row, every #wrong 0, one "Out
# of bounds" and one "Avg bus bandwidth" line per collective (9 unless given), and the JSON
# holding the same rows.
check_table() {
  /usr/bin/python3 - "$1" "$2" "${3:-9}" << 'PY'
import json, re, sys
lines = [re.sub(r"^\[rank\d+\]: ", "", l.rstrip("\n")) for l in open(sys.argv[1])]
rows = [l.split() for l in lines if l.strip() and not l.startswith("#")]
rows = [r for r in rows if not r[0].startswith("meshrun:")]
colls = int(sys.argv[3])
bad = [r for r in rows if len(r) != 13 or not all(re.fullmatch(r"-?[0-9.]+", x)
       for x in r[:2] + r[4:]) or r[8] != "0" or r[12] != "0"]
oob = sum(l == "# Out of bounds values : 0 OK" for l in lines)
avg = sum(l.startswith("# Avg bus bandwidth    : ") for l in lines)
doc = json.load(open(sys.argv[2]))
jbad = [r for r in doc["rows"] if r["wrong"] != 0]
ok = rows and not bad and oob == colls and avg == colls and len(doc["rows"]) == 2 * len(rows) \
  and not jbad
print(f"{len(rows)} rows, {oob} collectives checked, {len(doc['rows'])} JSON rows" if ok else
      f"bad rows {bad[:3]}, {oob} ok collectives of {colls}, {avg} averages, JSON wrong {jbad[:3]}")
sys.exit(0 if ok else 1)
PY
}
mb_args=(--coll all -b 8 -e 64K -f 64 -w 1 -n 3)
if timeout 60 "$BUILD/meshrun" --standalone --nproc-per-node 2 "$BUILD/bench/meshrt-bench" \
  "${mb_args[@]}" --json "$OUT/mb_gloo.json" > "$OUT/mb_gloo.out" 2>&1 &&
  summary=$(check_table "$OUT/mb_gloo.out" "$OUT/mb_gloo.json"); then
  echo "bench_smoke: meshrt-bench gloo ok ($summary)"
else
  fail "meshrt-bench over gloo: ${summary:-exited with an error}"
  tail -n 20 "$OUT/mb_gloo.out" >&2
fi
# The v forms (even blocks: the even forms' results) on 3 processes, shared memory and TCP.
for shm in "" 0; do
  if env ${shm:+MESHRT_GLOO_SHM_SLOT_BYTES=$shm} timeout 60 "$BUILD/meshrun" --standalone \
    --nproc-per-node 3 \
    "$BUILD/bench/meshrt-bench" --coll all_gather_v,reduce_scatter_v -b 8 -e 64K -f 64 -w 1 -n 3 \
    --json "$OUT/mb_v.json" > "$OUT/mb_v.out" 2>&1 &&
    summary=$(check_table "$OUT/mb_v.out" "$OUT/mb_v.json" 2); then
    echo "bench_smoke: meshrt-bench v forms ${shm:+(TCP) }ok ($summary)"
  else
    fail "meshrt-bench v forms ${shm:+(TCP)}: ${summary:-exited with an error}"
    tail -n 20 "$OUT/mb_v.out" >&2
  fi
done
# Uneven all_to_all through the slots and through Gloo's alltoallv (its two sides), results checked.
for algo in "" all_to_all=library; do
  if out=$(MESHRT_ALGO=$algo timeout 60 "$BUILD/meshrun" --standalone --nproc-per-node 2 \
    "$BUILD/bench/uneven_a2a_bench" 4 5 2 2>&1) && grep -q "uneven_a2a ranks 2" <<<"$out"; then
    echo "bench_smoke: uneven_a2a_bench ${algo:-slots} ok"
  else
    fail "uneven_a2a_bench ${algo:-slots}: $(tail -n 5 <<<"$out")"
  fi
done
# The raw-Gloo and PyTorch sides of bench/meshrt_bench_compare.sh, on the four ops they share.
if timeout 60 "$BUILD/meshrun" --standalone --nproc-per-node 2 "$BUILD/bench/meshrt-bench" \
  --impl gloo --coll all_reduce,all_gather,reduce_scatter,broadcast -b 8 -e 64K -f 64 -n 3 \
  --json "$OUT/mb_raw.json" > "$OUT/mb_raw.out" 2>&1 &&
  summary=$(check_table "$OUT/mb_raw.out" "$OUT/mb_raw.json" 4); then
  echo "bench_smoke: meshrt-bench --impl gloo ok ($summary)"
else
  fail "meshrt-bench --impl gloo: ${summary:-exited with an error}"
  tail -n 20 "$OUT/mb_raw.out" >&2
fi
if [ -z "$torch_flag" ]; then
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  pids=()
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GLOO_SOCKET_IFNAME=lo \
      OMP_NUM_THREADS=1 timeout 60 /usr/bin/python3 "$SRC/bench/torch_meshrt_bench.py" --coll all \
      -b 8 -e 64K -f 64 -n 3 --json "$OUT/tm.json" > "$OUT/tm.$r.out" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc -eq 0 ] && [ "$(grep -c '"wrong": 0' "$OUT/tm.0.out")" -eq 24 ]; then
    echo "bench_smoke: torch_meshrt_bench.py ok (24 rows checked)"
  else
    fail "torch_meshrt_bench.py"
    tail -n 20 "$OUT/tm.0.out" "$OUT/tm.1.out" >&2
  fi
fi
if timeout 60 "$BUILD/bench/meshrt-bench" --inproc 2 --mesh 1x2 --dim-names dp,tp --dim tp \
  "${mb_args[@]}" -d bfloat16 -o max --json "$OUT/mb_inproc.json" > "$OUT/mb_inproc.out" 2>&1 &&
  summary=$(check_table "$OUT/mb_inproc.out" "$OUT/mb_inproc.json"); then
  echo "bench_smoke: meshrt-bench inproc mesh dim ok ($summary)"
else
  fail "meshrt-bench in-process: ${summary:-exited with an error}"
  tail -n 20 "$OUT/mb_inproc.out" >&2
fi
# meshrt_bench_pair.sh: one round of a Reducer against the built-in sum, results checked.
pair_args="--coll all_reduce,reduce_scatter -b 8 -e 4K -f 8 -w 1 -n 3"
if timeout 120 bash "$SRC/bench/meshrt_bench_pair.sh" "$BUILD" -r 1 "$pair_args -o sum" \
  "$pair_args -o custom" > "$OUT/pair.out" 2>&1 &&
  [ "$(grep -c '^all_reduce\|^reduce_scatter' "$OUT/pair.out")" -eq 8 ]; then
  echo "bench_smoke: meshrt_bench_pair.sh ok (8 ratios)"
else
  fail "meshrt_bench_pair.sh"
  tail -n 20 "$OUT/pair.out" >&2
fi

# store_ops_bench and torch_store_bench.py (bench/store_compare.sh's two sides): a moment each.
for side in "$BUILD/bench/store_ops_bench" "$BUILD/bench/store_ops_bench --echo" \
  "/usr/bin/python3 $SRC/bench/torch_store_bench.py"; do
  if [[ $side == *python3* ]] && [ -n "$torch_flag" ]; then continue; fi
  if timeout 60 $side --clients 2 --ops 50 > "$OUT/store.out" 2>&1 &&
    grep -q '"add_ops_s": [1-9]' "$OUT/store.out"; then
    echo "bench_smoke: ${side##*/} ok"
  else
    fail "${side##*/}"
    tail -n 5 "$OUT/store.out" >&2
  fi
done

# mpi_bench: 2 ranks under mpirun over shared memory, where MPI is built in.
if [ -x "$BUILD/bench/mpi_bench" ] && command -v mpirun > /dev/null; then
  if timeout 60 mpirun -np 2 --oversubscribe --allow-run-as-root --mca btl self,vader \
    --mca btl_vader_single_copy_mechanism none "$BUILD/bench/mpi_bench" 1 latency \
    > "$OUT/mpi.out" 2>&1 && grep -q 'latency raw' "$OUT/mpi.out"; then
    echo "bench_smoke: mpi_bench ok"
  else
    fail "mpi_bench"
    tail -n 20 "$OUT/mpi.out" >&2
  fi
fi
# gloo_vs_mpi_bench: meshrt's Gloo backend beside raw MPI in the same 2 processes, sendrecv only.
if [ -x "$BUILD/bench/gloo_vs_mpi_bench" ] && command -v mpirun > /dev/null; then
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if timeout 120 mpirun -np 2 --oversubscribe --allow-run-as-root --mca btl self,vader \
    --mca btl_vader_single_copy_mechanism none -x MESHRT_BACKEND=gloo -x MASTER_ADDR=127.0.0.1 \
    -x MASTER_PORT="$port" "$BUILD/bench/gloo_vs_mpi_bench" 1 sendrecv \
    > "$OUT/gloo_vs_mpi.out" 2>&1 && grep -q '^sendrecv .* 67108864 B .*meshrt/MPI' "$OUT/gloo_vs_mpi.out"; then
    echo "bench_smoke: gloo_vs_mpi_bench ok"
  else
    fail "gloo_vs_mpi_bench"
    tail -n 20 "$OUT/gloo_vs_mpi.out" >&2
  fi
fi

exit $failed
