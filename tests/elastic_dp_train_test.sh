#!/usr/bin/env bash
# Repair in place, end to end: examples/elastic_dp_train under meshrun --on-rank-failure=continue
# on 4 local processes, over Gloo's shared memory and over TCP, on a 4x1 and a 2x2 mesh. One rank
# SIGKILLs itself at step 10; the survivors must shrink around its dp replica, go on to the target
# loss on the same loss curve as a run where nobody dies, and print their first step after the
# kill within 5 s under the default 10-minute op timeout (nothing is waited out). The job exits
# 0, its summary names the dead rank, no process or /dev/shm segment is left, and the survivors'
# dumps hold both epochs: epoch 0 with every rank, epoch 1 ('world@1', 'mesh0/dp@1') without
# the dead replica, which meshtrace reads as one story: the dead rank is epoch 0's culprit, and
# nothing is wrong in epoch 1. Every job is bounded by `timeout`; meshrun ends its ranks.
# Usage: elastic_dp_train_test.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
out=$(mktemp -d /tmp/meshrt-elastic-XXXXXX)
trap 'rm -rf "$out"; pkill -9 -f "$build/examples/elastic_dp_train" 2>/dev/null || true' EXIT
shm_before=$(ls /dev/shm | sort)

run() {  # NAME TRANSPORT MESH KILL_RANK [extra meshrun flags]
  local name=$1 transport=$2 mesh=$3 kill=$4
  local slot=262144
  [[ $transport == tcp ]] && slot=0
  mkdir -p "$out/$name"
  MASTER_ADDR=127.0.0.1 MESHRT_GLOO_SHM_SLOT_BYTES=$slot MESHRT_DUMP_PREFIX="$out/$name/fr_" \
    timeout 120 "$build/meshrun" --standalone --nproc-per-node 4 --on-rank-failure=continue \
    "$build/examples/elastic_dp_train" --mesh "$mesh" --kill-rank "$kill" --kill-step 10 --dump \
    > "$out/$name/job.out" 2>&1 || { echo "$name: meshrun failed"; cat "$out/$name/job.out"; exit 1; }
}

# The curve to match: nobody dies.
MASTER_ADDR=127.0.0.1 timeout 120 "$build/meshrun" --standalone --nproc-per-node 4 \
  "$build/examples/elastic_dp_train" --mesh 4x1 > "$out/whole.out" 2>&1 ||
  { cat "$out/whole.out"; exit 1; }
run shm_4x1 shm 4x1 2
run tcp_4x1 tcp 4x1 2
run shm_2x2 shm 2x2 3
run tcp_2x2 tcp 2x2 0

python3 - "$out" "$build" <<'PY'
import glob, json, os, re, subprocess, sys
d, build = sys.argv[1], sys.argv[2]
def losses(path):
    return [(int(m[1]), float(m[2]), int(m[3]))
            for m in re.finditer(r"step (\d+) loss (\S+) dp (\d+)", open(path).read())]
whole = losses(f"{d}/whole.out")
assert whole and whole[-1][1] < 1e-4, whole[-5:]
for name, dead, dp_after, gone in (("shm_4x1", 2, 3, [2]), ("tcp_4x1", 2, 3, [2]),
                                   ("shm_2x2", 3, 1, [2, 3]), ("tcp_2x2", 0, 1, [0, 1])):
    text = open(f"{d}/{name}/job.out").read()
    steps = losses(f"{d}/{name}/job.out")
    # The same global batch over fewer replicas: the same curve, to rounding.
    byste = {s: l for s, l, _ in whole}
    for s, l, dp in steps:
        assert abs(l - byste[s]) <= 1e-9 * max(1.0, byste[s]), (name, s, l, byste[s])
    assert steps[-1][1] < 1e-4 and steps[-1][0] == whole[-1][0], (name, steps[-1])
    assert steps[-1][2] == dp_after, (name, steps[-1])
    assert f"reached loss" in text, name
    m = re.search(r"first step of the shrunk job (\S+) s after the kill", text)
    assert m and float(m[1]) <= 5.0, (name, m and m[1])
    assert re.search(rf"rank {dead} \(pid \d+, node 0\) died of SIGKILL", text), name
    assert "the job went on with 3 of 4 ranks and finished: exit status 0" in text, name
    for leaver in set(gone) - {dead}:
        assert f"rank {leaver}: leaving with the replica of dead rank(s) [{dead}]" in text, name
    # The survivors' dumps: both epochs, the second without the dead replica.
    dumps = sorted(glob.glob(f"{d}/{name}/fr_*"))
    survivors = sorted(set(range(4)) - set(gone))
    assert [int(p.rsplit("_", 1)[1]) for p in dumps] == survivors, (name, dumps)
    for p in dumps:
        doc = json.load(open(p))
        epochs = {e["epoch"]: e for e in doc["epochs"]}
        assert sorted(epochs) == [0, 1], (name, p, doc["epochs"])
        assert epochs[1]["ranks"] == survivors, (name, epochs[1])
        assert set(epochs[0]["ranks"]) >= set(gone), (name, epochs[0])
        assert "world@1" in epochs[1]["groups"], (name, epochs[1])
        after = [e for e in doc["entries"] if e["epoch"] == 1]
        assert after and all(e["process_group"][0].endswith("@1") for e in after), name
    # meshtrace reads both epochs: the dead rank is the culprit of epoch 0, epoch 1 is clean.
    verdict = subprocess.run([f"{build}/meshtrace", "analyze", f"{d}/{name}", "--prefix", "fr_",
                              "--allow-incomplete-ranks"], capture_output=True, text=True,
                             timeout=60).stdout
    after = ", ".join(map(str, survivors))
    assert f"epoch 1: ranks [{after}] in " in verdict and "world@1" in verdict, (name, verdict)
    assert re.search(rf"no dump from ranks? \[?[0-9, ]*\b{dead}\b", verdict), (name, verdict)
    assert "@1" not in verdict.split("Root causes:")[1], (name, verdict)
    print(f"{name}: rank {dead} killed at step 10, dp -> {dp_after}, first step after "
          f"{m[1]} s, {steps[-1][0]} steps")
PY
sleep 0.5
if pgrep -f "$build/examples/elastic_dp_train" > /dev/null; then
  echo "elastic_dp_train processes left behind:"; pgrep -af "$build/examples/elastic_dp_train"
  exit 1
fi
shm_after=$(ls /dev/shm | sort)
leaked=$(comm -13 <(echo "$shm_before") <(echo "$shm_after") | grep -i meshrt || true)
[[ -z $leaked ]] || { echo "left in /dev/shm: $leaked"; exit 1; }
echo "elastic_dp_train: repaired in place on shm and TCP, 4x1 and 2x2"
