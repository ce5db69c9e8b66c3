#!/usr/bin/env bash
# The prepared GPU run of issue 26, end to end on a machine without a GPU: .ci/gpu_carry.sh packs
# the build (its self-check must pass), then the carry's run.sh runs every step here. It must exit
# 0 with a summary that lists every step, each GPU step skipped with "no CUDA device" (PyTorch's
# may say instead that torch is absent), and the log archive.
# Usage: gpu_carry_test.sh BUILD_DIR SOURCE_DIR   (meson test gpu_carry)
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d /tmp/meshrt-gpu-carry-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "gpu_carry_test: FAIL: $*" >&2
  exit 1
}

"$src/.ci/gpu_carry.sh" "$build" "$tmp/carry" >"$tmp/carry.log" 2>&1
rc=$?
cat "$tmp/carry.log"
[ $rc -eq 0 ] || fail "gpu_carry.sh exited with $rc"
grep -q 'self-check passed' "$tmp/carry.log" || fail "no 'self-check passed' from gpu_carry.sh"
for f in run.sh info.txt bin/gpu_test bin/meshrun bin/meshtrace bin/meshrt-monitor lib/libmeshrt.so.0; do
  [ -e "$tmp/carry/$f" ] || fail "the carry lacks $f"
done
for f in "$tmp"/carry/lib/{libnccl,libcuda,libc,libstdc++}.so*; do
  [ -e "$f" ] && fail "a system library was carried: $f"
done

OUT=$tmp/out GPU_RUN_BUDGET_S=150 bash "$tmp/carry/run.sh"
rc=$?
[ $rc -eq 0 ] || fail "run.sh exited with $rc"
summary=$tmp/out/summary.txt
[ -s "$summary" ] || fail "no summary.txt"
[ -s "$tmp/out/logs.tar.gz" ] || fail "no logs.tar.gz"
tar -tzf "$tmp/out/logs.tar.gz" >"$tmp/list" || fail "logs.tar.gz does not read"
grep -q '^logs/gpu_test.log$' "$tmp/list" || fail "logs.tar.gz has no gpu_test.log"

for step in nccl_unit_test cuda_cost_bench nccl_bench nccl_bench_no_ptr_check nccl_bench_caller_stream \
  nccl_bench_timing torch_nccl_bench gpu_test hang_stream hang_graph tp_mlp_train; do
  line=$(grep "^$step " "$summary") || fail "the summary has no step $step"
  if [ "$step" = nccl_unit_test ]; then
    [[ $line == *" passed "* ]] || fail "nccl_unit_test did not pass here: $line"
  elif [[ $line != *" skipped "* ]]; then
    fail "GPU step $step not skipped here: $line"
  elif [[ $line != *"no CUDA device"* && $line != *torch* ]]; then
    fail "GPU step $step skipped for another reason than no device: $line"
  fi
done
grep -q ' 0 failed,' "$summary" || fail "a step failed"
echo "gpu_carry_test: passed"
