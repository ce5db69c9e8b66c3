#!/usr/bin/env bash
# /dev/shm too small for the ranks' segment (as in a container with a 64 KiB /dev/shm): the ranks
# fall back to TCP with right results, and say why once, at warning level, with the room needed.
# Runs in a mount namespace of its own (nothing outlives it); exit 77 (skipped) where one cannot
# be made (not root).
# Usage: tests/shm_full_test.sh BUILD_DIR
set -uo pipefail
build=$1
if ! unshare --mount true 2>/dev/null; then
  echo "skipped: no mount namespace here (needs root)"
  exit 77
fi
out=$(timeout 120 unshare --mount bash -c '
  mount --make-rprivate / && mount -t tmpfs -o size=64k tmpfs /dev/shm || exit 77
  exec "$1/meshrun" --standalone --nproc-per-node 2 --tee 3 "$1/tests/launcher_child" world
' bash "$build" 2>&1)
status=$?
echo "$out"
[[ $status == 77 ]] && exit 77
fail() { echo "FAIL: $*"; exit 1; }
[[ $status == 0 ]] || fail "the job exited $status"
for rank in 0 1; do
  grep -q "world ok rank=$rank size=2 sum=3" <<<"$out" || fail "rank $rank's all_reduce result"
done
warning="shared memory between this host's ranks is unavailable (reserving "
n=$(grep -c "$warning" <<<"$out")
[[ $n == 1 ]] || fail "expected the /dev/shm warning once, saw it $n times"
grep -q "bytes is needed; /dev/shm has [0-9]* bytes free; the ranks use TCP instead" <<<"$out" \
  || fail "the warning does not give the room needed and free"
echo "PASS: TCP fallback with right results and one warning naming the room"
