#!/bin/bash
# Uneven all_to_all through the shared-memory slots against Gloo's alltoallv over TCP (forced with
# MESHRT_ALGO=all_to_all=library), the same build, in paired interleaved rounds under meshrun:
# each side's median per-op time and the slots/library ratio per round (min / median / max).
#
#   bench/uneven_a2a_compare.sh BUILD_DIR [-r ROUNDS] [-n RANKS] [-u "16 4096"] [--contended]
#   (-u: UNITs: rank r sends (r + j + 1) x UNIT f32 elements to rank j)
set -u -o pipefail
[ $# -ge 1 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BUILD=$(realpath "$1"); shift
ROUNDS=7 RANKS=2 UNITS="16 4096" CONTENDED=0
while [ $# -gt 0 ]; do
  case $1 in
    -r) ROUNDS=$2; shift 2 ;;
    -n) RANKS=$2; shift 2 ;;
    -u) UNITS=$2; shift 2 ;;
    --contended) CONTENDED=1; shift ;;
    *) exit 2 ;;
  esac
done
if [ "$CONTENDED" = 1 ]; then
  (while :; do :; done) &
  spinner=$!
  trap 'kill $spinner 2>/dev/null' EXIT
fi
one() {  # MESHRT_ALGO value, unit: the median per-op time in us
  (cd /tmp && MESHRT_ALGO=$1 timeout 120 "$BUILD/meshrun" --standalone --nproc-per-node "$RANKS" \
    "$BUILD/bench/uneven_a2a_bench" "$2" 200 5 2>&1) | sed -n 's/.*median_us \([0-9.]*\).*/\1/p'
}
for unit in $UNITS; do
  s=() l=()
  for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then s+=("$(one "" "$unit")"); l+=("$(one all_to_all=library "$unit")")
    else l+=("$(one all_to_all=library "$unit")"); s+=("$(one "" "$unit")"); fi
  done
  python3 - "$RANKS" "$unit" "${s[*]}" "${l[*]}" <<'PY'
import statistics, sys
ranks, unit, s, l = sys.argv[1], sys.argv[2], [float(x) for x in sys.argv[3].split()], [float(x) for x in sys.argv[4].split()]
r = sorted(a / b for a, b in zip(s, l))
print(f"{ranks} ranks, unit {unit}: slots {statistics.median(s):.2f} us, library (TCP) "
      f"{statistics.median(l):.2f} us; slots/library {r[0]:.3f} / {statistics.median(r):.3f} / "
      f"{r[-1]:.3f} ({len(r)} rounds)")
PY
done
