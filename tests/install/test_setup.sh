#!/usr/bin/env bash
# scripts/setup.sh's choice of the clang runtime package (Note [The clang
# runtime package]) on Debian 12, Debian 13 and Ubuntu 24.04, with fake
# clang / apt-cache / dpkg on a PATH that holds nothing else, in --dry-run
# mode (nothing is installed). Exits nonzero on the first wrong choice.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
sandbox=$(mktemp -d "${TMPDIR:-/tmp}/gcp-test-setup.XXXXXX")
trap 'rm -rf "$sandbox"' EXIT
mkdir -p "$sandbox/tools"
for t in bash sh sed awk head cat id env dirname; do ln -s "$(command -v "$t")" "$sandbox/tools/$t"; done

# scenario NAME CLANG_VERSION("" = not installed) DEFAULT_CLANG CANDIDATES... -> prints setup's package list
scenario() {
  local name=$1 installed=$2 default=$3
  shift 3
  local bin=$sandbox/$name
  mkdir -p "$bin"
  if [ -n "$installed" ]; then
    printf '#!/bin/sh\necho "Debian clang version %s.0.6"\n' "$installed" >"$bin/clang"
  fi
  {
    echo '#!/bin/sh'
    echo 'case "$1" in'
    echo "  depends) echo clang; echo '  Depends: clang-$default' ;;"
    echo '  policy) case "$2" in'
    echo "    cmake$(printf '|%s' "$@")) printf '%s:\n  Installed: (none)\n  Candidate: 1.0\n' \"\$2\" ;;"
    echo "    *) printf '%s:\n  Installed: (none)\n  Candidate: (none)\n' \"\$2\" ;;"
    echo '  esac ;;'
    echo 'esac'
  } >"$bin/apt-cache"
  printf '#!/bin/sh\nexit 1\n' >"$bin/dpkg"  # nothing installed: every package is listed
  chmod +x "$bin"/*
  PATH="$bin:$sandbox/tools" bash "$root/scripts/setup.sh" --dry-run 2>&1
}

expect() {  # expect NAME PACKAGE OUTPUT
  if ! grep -q "^setup: packages: .* $2\( \|$\)" <<<"$3"; then
    echo "test_setup: $1: expected $2 in the package list, got:" >&2
    echo "$3" >&2
    exit 1
  fi
  echo "test_setup: $1: $2"
}

expect debian12 libclang-rt-14-dev "$(scenario debian12 14 14 libclang-rt-14-dev libclang-rt-dev)"
expect debian13 libclang-rt-dev "$(scenario debian13 "" 19 libclang-rt-19-dev libclang-rt-dev)"
expect ubuntu2404 libclang-rt-18-dev "$(scenario ubuntu2404 "" 18 libclang-rt-18-dev)"
expect newer-clang libclang-rt-dev "$(scenario newer-clang 20 19 libclang-rt-19-dev libclang-rt-dev)"
out=$(scenario none "" 18 || true)
grep -q "no libclang-rt package found" <<<"$out" || { echo "test_setup: none: no warning: $out" >&2; exit 1; }
echo "test_setup: none: warned"
echo "test_setup: OK"
