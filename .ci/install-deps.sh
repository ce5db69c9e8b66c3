#!/usr/bin/env bash
# Installs what meshrt needs on Debian 12 (as root), skipping apt when everything is present.
# Usage: .ci/install-deps.sh [--bench]   (--bench adds gnuplot-nox for
# bench/meshrt_bench_compare.sh's busbw plot)
set -euo pipefail

packages=(
  g++ meson ninja-build pkg-config cmake python3
  libgloo-dev libboost-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libunwind-dev  # per-op call stacks (trace/op_stack.cc)
  libssl-dev openssl  # the store's TLS; tests/store_test makes its certificates with openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  slurmctld slurmd slurm-client  # tests/srun_test.sh runs a private Slurm on loopback
  chromium    # tests/viewer_test loads the scope-tree viewer in headless Chromium
  prometheus  # promtool lints the exports and /metrics; tests/prometheus_test.sh scrapes a job
  clang libclang-rt-14-dev  # .ci/fuzz.sh: libFuzzer, ASan and UBSan (tests/fuzz/)
  python3-torch  # tests/torchrun_test.sh (Debian's torchrun) and TorchStore against PyTorch's TCPStore
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(gnuplot-nox)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
