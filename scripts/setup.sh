#!/usr/bin/env bash
# Installs the Debian packages gcpressure builds with, when they are missing.
# CUDA is optional: it is used when /usr/local/cuda/bin/nvcc exists.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libgc-dev libgtest-dev libbenchmark-dev liblua5.4-dev lua5.4 guile-3.0-dev python3-dev
      clang libclang-rt-14-dev)  # clang + libFuzzer: the fuzz run of scripts/test.sh
pkgs+=("$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
