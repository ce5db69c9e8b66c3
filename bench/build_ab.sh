#!/bin/bash
# Two builds of meshrt-bench side by side (a change before and after), in paired interleaved
# rounds on 2 local ranks under meshrun, ending with one line per case: each build's median
# in-place time (us) and the after/before ratio per round (min / median / max; below 1: after
# is faster). For a refactor that must not cost anything on the op path.
#
#   bench/build_ab.sh BEFORE_BUILD AFTER_BUILD [ROUNDS]      (both with bench/meshrt-bench built;
#                                                             meshrun from AFTER_BUILD)
# AB_CASES="name|ENV=value or -|meshrt-bench args" runs that one case instead of the four below;
# AB_VERBOSE=1 prints every round's times; AB_CONTENDED=1 keeps a shell loop spinning meanwhile
# (the other core busy).
set -u -o pipefail
[ $# -ge 2 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BEFORE=$(realpath "$1") AFTER=$(realpath "$2") ROUNDS=${3:-7}
MESHRUN=$AFTER/meshrun
# name | env | meshrt-bench arguments (one size: the line of the table to read)
CASES=(
  "shm all_reduce 8 B|-|--coll all_reduce -b 8 -e 8 -w 200 -n 5000"
  "tcp all_reduce 8 B (recursive doubling)|MESHRT_GLOO_SHM_SLOT_BYTES=0|--coll all_reduce -b 8 -e 8 -w 50 -n 1000"
  "tcp reduce_scatter 1 MiB (ring)|MESHRT_GLOO_SHM_SLOT_BYTES=0|--coll reduce_scatter -b 1M -e 1M -w 5 -n 50"
  "shm all_reduce 16 MiB|-|--coll all_reduce -b 16M -e 16M -w 2 -n 20"
)
[ -n "${AB_CASES:-}" ] && CASES=("$AB_CASES")
# The in-place time of the one size line, as meshrt-bench prints it on rank 0.
one() {
  local build=$1 env=$2 args=$3
  [ "$env" = "-" ] && env=MESHRT_NOTHING=1
  (cd /tmp && env "$env" timeout 120 "$MESHRUN" --nproc-per-node 2 "$build/bench/meshrt-bench" \
    $args 2>&1) | awk '/^\[rank0\]: +[0-9]/ {print $(NF-3)}' | tail -1
}
if [ -n "${AB_CONTENDED:-}" ]; then
  (while :; do :; done) &
  spinner=$!
  trap 'kill $spinner 2>/dev/null' EXIT
fi
for c in "${CASES[@]}"; do
  IFS='|' read -r name env args <<<"$c"
  b=() a=()
  for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then b+=("$(one "$BEFORE" "$env" "$args")"); a+=("$(one "$AFTER" "$env" "$args")")
    else a+=("$(one "$AFTER" "$env" "$args")"); b+=("$(one "$BEFORE" "$env" "$args")"); fi
  done
  python3 - "$name" "${b[*]}" "${a[*]}" <<'PY'
import os, statistics, sys
name, b, a = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
r = sorted(y / x for x, y in zip(b, a))
print(f"{name}: before {statistics.median(b):.2f} us, after {statistics.median(a):.2f} us; "
      f"after/before {r[0]:.2f} / {statistics.median(r):.2f} / {r[-1]:.2f} ({len(r)} rounds)")
if os.environ.get("AB_VERBOSE"):
    print("  before", b, "\n  after ", a)
PY
done
