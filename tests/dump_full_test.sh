#!/usr/bin/env bash
# Disk full where the dumps go (#28): examples/hang on 4 ranks under meshrun, rank 0's extra
# all_reduce timing out. The ranks that cannot write their dump hand it to meshrun through the
# job's store, so the analysis still has every rank's records and names rank 0, not the ranks
# whose files are missing. (a) MESHRT_DUMP_PREFIX on an 8 KiB tmpfs: meshrun writes the handed
# dumps into the attempt directory. (b) The whole log directory on a 16 KiB tmpfs: meshrun puts
# every dump in a temporary directory of its own and says where. Runs in a mount namespace of its
# own; exit 77 (skipped) where one cannot be made (not root).
# Usage: tests/dump_full_test.sh BUILD_DIR
set -uo pipefail
build=$1
if ! unshare --mount true 2>/dev/null; then
  echo "skipped: no mount namespace here (needs root)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work" $(grep -o "/[^ ]*/meshrun-dumps-[A-Za-z0-9]*" "$work"/out* 2>/dev/null)' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# run CASE SIZE: the job's output in $work/out.CASE; its status is meshrun's.
run() {
  timeout 120 unshare --mount bash -c '
    mount --make-rprivate / && mkdir -p "$2/small" && mount -t tmpfs -o size=$3 tmpfs "$2/small" \
      || exit 77
    if [[ $4 == a ]]; then
      export MESHRT_DUMP_PREFIX="$2/small/fr_"
      logs="$2/logs"
    else
      logs="$2/small/logs"
    fi
    MESHRT_MESHTRACE="$1/meshtrace" exec "$1/meshrun" --standalone --nproc-per-node 4 \
      --tee 3 --log-dir "$logs" "$1/examples/hang" --timeout-ms 1500
  ' bash "$build" "$work/$1" "$2" "$1" >"$work/out.$1" 2>&1
}

for c in a:8k b:16k; do
  name=${c%%:*}
  run "$name" "${c#*:}"
  status=$?
  cat "$work/out.$name"
  [[ $status == 77 ]] && exit 77
  [[ $status == 1 ]] || fail "($name) meshrun exited $status, not 1"
  out=$(cat "$work/out.$name")
  grep -q "dump could not be written; handed to the launcher through the job's store" <<<"$out" \
    || fail "($name) no rank said its dump went through the store"
  grep -q "flight recorder: dumps of ranks 0-3 in " <<<"$out" || fail "($name) not every dump"
  roots=$(sed -n '/Root causes:/,/Consequences/p' <<<"$out")
  grep -q "rank 0 issued all_reduce #5 that ranks \[1, 2, 3\] never called" <<<"$roots" \
    || fail "($name) the root cause is not rank 0's extra all_reduce"
  grep -q "culprit rank 0$" <<<"$roots" || fail "($name) rank 0 is not the culprit"
  grep -q "may have crashed" <<<"$out" && fail "($name) a live rank was taken for a dead one"
done
grep -q "the dumps are in /[^ ]*/meshrun-dumps-" "$work/out.b" \
  || fail "(b) meshrun did not say where it put the dumps"
echo "PASS: every dump reached the analysis through the store, which names rank 0"
