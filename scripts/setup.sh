#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages gcpressure builds and tests with, when
# they are missing (Debian 12 and 13, Ubuntu 24.04). Extra arguments are more
# package names. CUDA is not installed here: the build uses it whenever
# /usr/local/cuda/bin/nvcc (or nvcc on PATH) exists; see README.md, "Build and
# install", for turning it off.
#
#   bash scripts/setup.sh              install what is missing (sudo when not root)
#   bash scripts/setup.sh --dry-run    print the package names only; changes nothing
set -euo pipefail
dry_run=0
if [ "${1:-}" = --dry-run ]; then dry_run=1; shift; fi

pkgs=(cmake ninja-build g++ pkg-config libgc-dev libgtest-dev libbenchmark-dev
      liblua5.4-dev lua5.4 guile-3.0-dev python3-dev python3-venv python3-setuptools clang
      gnuplot-nox)
# examples/runtimes/node: node and its headers. A node installed otherwise
# (e.g. NodeSource's nodejs, which ships /usr/include/node) is kept.
command -v node >/dev/null 2>&1 || pkgs+=(nodejs libnode-dev)
# examples/runtimes/dotnet: Mono 6.8 (mcs builds, mono runs).
pkgs+=(mono-runtime mono-mcs)

SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
have_candidate() {  # the package exists in this system's package lists
  local c
  c=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')
  [ -n "$c" ] && [ "$c" != "(none)" ]
}

# Note [The clang runtime package]
# libFuzzer (scripts/test.sh's fuzz run) ships in libclang-rt-<N>-dev, whose N
# is the clang version: 14 on Debian 12, 18 on Ubuntu 24.04, 19 on Debian 13.
# An installed clang picks N (its runtime must match it); otherwise the
# distribution's meta-package libclang-rt-dev follows its default clang, and
# failing that N is read from what the clang meta-package depends on.
clang_rt_package() {
  local v=""
  if command -v clang >/dev/null 2>&1; then
    v=$(clang --version | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -n1)
    if [ -n "$v" ] && have_candidate "libclang-rt-$v-dev"; then echo "libclang-rt-$v-dev"; return; fi
  fi
  if have_candidate libclang-rt-dev; then echo libclang-rt-dev; return; fi
  v=$(apt-cache depends clang 2>/dev/null | sed -n 's/.*Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -n1)
  if [ -n "$v" ] && have_candidate "libclang-rt-$v-dev"; then echo "libclang-rt-$v-dev"; return; fi
  return 1
}

# A fresh container has no package lists: apt-cache knows nothing until updated.
updated=0
if ! have_candidate cmake && [ "$dry_run" = 0 ]; then
  $SUDO apt-get update -qq
  updated=1
fi
if rt=$(clang_rt_package); then
  pkgs+=("$rt")
else
  # Only the fuzz run needs it: the demo and the other tests go on without.
  echo "setup: no libclang-rt package found for this system's clang (run apt-get update?);" \
       "the fuzz run of scripts/test.sh needs libFuzzer" >&2
fi
pkgs+=("$@")

missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "$dry_run" = 1 ]; then
  . /etc/os-release 2>/dev/null || true
  echo "setup: system: ${PRETTY_NAME:-unknown}; clang: $(clang --version 2>/dev/null | head -n1 || echo 'not installed')"
  echo "setup: packages: ${pkgs[*]}"
  echo "setup: would install: ${missing[*]:-(nothing)}"
  exit 0
fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  [ "$updated" = 1 ] || $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
