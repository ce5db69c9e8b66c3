#!/usr/bin/env bash
# Live metrics (#27) and the status server's token (#29) with real processes: a 4-rank job on a
# 2x2 mesh under meshrun on loopback, scraped while it trains by Debian's real Prometheus server
# (its `authorization` setting sends the job's token as a bearer token, from meshrun's
# status_token file), which must store meshrt_ops_total with the rank and mesh_dim labels; the
# same /metrics fetched directly must pass `promtool check metrics`; without the token every path
# is 403; `meshtrace live` finds the token in meshrun's status_url file.
# Usage: prometheus_test.sh BUILD_DIR
set -uo pipefail
build=$(realpath "$1")
for tool in /usr/bin/prometheus /usr/bin/promtool /usr/bin/python3; do
  [[ -x $tool ]] || { echo "FAIL: no $tool (a declared test dependency, .ci/install-deps.sh)"; exit 1; }
done
tmp=$(mktemp -d /tmp/meshrt_prometheus_test.XXXXXX)
job=
prom=
cleanup() {
  # meshrun ends its ranks on SIGTERM; SIGKILL only if it has not within 15 s.
  for pid in $job $prom; do kill -TERM "$pid" 2>/dev/null; done
  for pid in $job $prom; do
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "--- meshrun stderr (tail)"; tail -20 "$tmp/job.err" 2>/dev/null
  echo "--- prometheus (tail)"; tail -20 "$tmp/prom.log" 2>/dev/null
  exit 1
}
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# GET URL [BEARER]: prints "STATUS\nBODY".
get() {
  /usr/bin/python3 - "$@" <<'EOF'
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2:
    req.add_header("Authorization", "Bearer " + sys.argv[2])
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print(r.status); sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); sys.stdout.write(e.read().decode())
except Exception as e:
    print(0); print(e)
EOF
}

status_port=$(free_port)
# --steps far beyond the test's length: the job is stopped when the test has seen enough.
"$build/meshrun" --standalone --nproc-per-node 4 --status-port "$status_port" \
  --log-dir "$tmp/logs" "$build/examples/tp_mlp_train" --mesh 2x2 --steps 100000 \
  >"$tmp/job.out" 2>"$tmp/job.err" &
job=$!
token_file=$tmp/logs/status_token
for _ in $(seq 300); do [[ -s $token_file ]] && break; sleep 0.1; done
[[ -s $token_file ]] || fail "meshrun wrote no $token_file within 30 s"
token=$(cat "$token_file")
mode=$(stat -c %a "$token_file")
[[ $mode == 600 ]] || fail "status_token has mode $mode, not 600"
mode=$(stat -c %a "$tmp/logs/status_url")
[[ $mode == 600 ]] || fail "status_url has mode $mode, not 600"
grep -q "^http://127.0.0.1:$status_port/?token=$token\$" "$tmp/logs/status_url" ||
  fail "status_url is not the URL with the token: $(cat "$tmp/logs/status_url")"
base=http://127.0.0.1:$status_port
echo "ok   status_url and status_token are the owner's only (0600)"

# Without the token, or with a wrong one, nothing is served.
for path in / /status.json /metrics /ranks/0/stacks; do
  code=$(get "$base$path" | sed -n 1p)
  [[ $code == 403 ]] || fail "GET $path without the token answered $code"
  code=$(get "$base$path" "x$token" | sed -n 1p)
  [[ $code == 403 ]] || fail "GET $path with a wrong bearer token answered $code"
done
code=$(get "$base/status.json?token=$token" | sed -n 1p)
[[ $code == 200 ]] || fail "GET /status.json?token= answered $code"
echo "ok   403 without the token, 200 with it"

# The ranks publish their totals once a second: wait for the first all_reduce counts.
metrics=
for _ in $(seq 60); do
  metrics=$(get "$base/metrics" "$token")
  grep -q '^meshrt_ops_total{rank="3",comm="mesh0/tp",mesh_dim="tp",op="all_reduce"' <<<"$metrics" &&
    break
  sleep 0.5
done
[[ $(sed -n 1p <<<"$metrics") == 200 ]] || fail "GET /metrics with the bearer token: $metrics"
tail -n +2 <<<"$metrics" >"$tmp/metrics.txt"
grep -q '^meshrt_ops_total{rank="3",comm="mesh0/tp",mesh_dim="tp",op="all_reduce"' "$tmp/metrics.txt" ||
  fail "no tp all_reduce counts of rank 3 in /metrics within 30 s: $(head -40 "$tmp/metrics.txt")"
/usr/bin/promtool check metrics <"$tmp/metrics.txt" || fail "promtool check metrics rejected /metrics"
! grep -q 'unknown' "$tmp/metrics.txt" || fail "a label says unknown: $(grep unknown "$tmp/metrics.txt" | head -3)"
for family in meshrt_ops_total meshrt_bytes_total meshrt_op_exec_time_seconds \
  meshrt_bus_bandwidth_bytes_per_second meshrt_rank_state meshrt_stalled; do
  n=$(grep -c "^# TYPE $family " "$tmp/metrics.txt")
  [[ $n == 1 ]] || fail "family $family declared $n times"
done
echo "ok   /metrics passes promtool check metrics; each family once; no 'unknown'"

# meshtrace live takes the URL, and its token, from meshrun's status_url file.
live=$(timeout 20 "$build/meshtrace" live "$tmp/logs/status_url" --once 2>&1) ||
  fail "meshtrace live on the status_url file: $live"
grep -q "4 ranks" <<<"$live" || fail "meshtrace live shows no 4-rank job: $live"
live=$(MESHRT_STATUS_TOKEN=$token timeout 20 "$build/meshtrace" live "127.0.0.1:$status_port" --once 2>&1) ||
  fail "meshtrace live HOST:PORT with MESHRT_STATUS_TOKEN: $live"
echo "ok   meshtrace live with the status_url file and with MESHRT_STATUS_TOKEN"

# A real Prometheus server scrapes every second with the token as its bearer credentials.
prom_port=$(free_port)
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: meshrt
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials_file: $token_file
    static_configs:
      - targets: ['127.0.0.1:$status_port']
EOF
/usr/bin/prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$tmp/prom.log" 2>&1 &
prom=$!
query='meshrt_ops_total{op="all_reduce",mesh_dim="tp"} > 0'
answer=
for _ in $(seq 60); do
  answer=$(/usr/bin/python3 - "$prom_port" "$query" <<'EOF'
import json, sys, urllib.parse, urllib.request
url = "http://127.0.0.1:%s/api/v1/query?query=%s" % (sys.argv[1], urllib.parse.quote(sys.argv[2]))
try:
    with urllib.request.urlopen(url, timeout=5) as r:
        result = json.load(r)["data"]["result"]
except Exception as e:
    print("no answer:", e); sys.exit(1)
ranks = sorted({s["metric"]["rank"] for s in result if s["metric"].get("mesh_dim") == "tp"})
print(" ".join(ranks))
sys.exit(0 if ranks == ["0", "1", "2", "3"] else 1)
EOF
  ) && break
  sleep 1
done
if [[ $answer != "0 1 2 3" ]]; then
  targets=$(/usr/bin/python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$prom_port/api/v1/targets', timeout=5).read().decode())" 2>&1)
  fail "Prometheus did not store meshrt_ops_total > 0 for ranks 0-3 on mesh dim tp within 60 s (last: $answer); targets: $targets"
fi
echo "ok   Prometheus scraped with the bearer token: meshrt_ops_total{mesh_dim=\"tp\"} > 0 for ranks $answer"
exit 0
