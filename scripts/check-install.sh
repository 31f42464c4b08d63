#!/usr/bin/env bash
# The install, as a new user meets it (issue 12): setup.sh's package choice
# (tests/install/test_setup.sh), then a clean host-only Release
# build installed into a temporary prefix, then, against that prefix only:
#   - every C/C++ block of README.md compiled and run (no "leaked" warning allowed),
#   - a C++ consumer and a C consumer through find_package(gcpressure),
#   - a C consumer through pkg-config (gcpressure.pc),
#   - the Lua module through Lua's cpath under the prefix,
#   - the Guile module through Guile's site directories under the prefix.
# Any failure stops the script with a message and a nonzero status; so does
# a missing Lua or Guile (scripts/setup.sh installs both), and fewer checks
# made than the floor of the "install" group in scripts/test-groups.txt.
# CHECK_INSTALL_KEEP=1 keeps the temporary folder for inspection;
# CHECK_INSTALL_CUDA=ON builds the installed tree with CUDA (on a GPU machine
# the README's program then runs on cuda_async).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=$(nproc)
work=$(mktemp -d "${TMPDIR:-/tmp}/gcp-check-install.XXXXXX")
if [ "${CHECK_INSTALL_KEEP:-0}" = 1 ]; then echo "check-install: keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
prefix=$work/prefix
fail() { echo "check-install: FAILED: $*" >&2; exit 1; }
checks=0
step() { checks=$((checks + 1)); echo "--- check-install: $*"; }

# A run must succeed. run_clean: and must not report leaked blocks either (the
# README's programs end with the documented clean teardown). The consumers are
# run with run_ok: a handle that bdwgc still finds in a stale stack slot is
# reachable, so a leak report there depends on the compiler's stack layout
# (seen with tests/install/c_consumer.c at -O3, gone with two more calls
# before the collection) and is shown, not failed on.
run_ok() {
  local name=$1; shift
  local err=$work/$name.stderr
  timeout 300 "$@" 2>"$err" || { cat "$err" >&2; fail "$name exited with status $?"; }
  cat "$err" >&2
}
run_clean() {
  run_ok "$@"
  if grep -qi "leak" "$work/$1.stderr"; then fail "$1 reported a leak on stderr"; fi
}

step "scripts/setup.sh's package choice on Debian 12, Debian 13, Ubuntu 24.04 (fake apt-cache)"
bash tests/install/test_setup.sh || fail "scripts/setup.sh picks the wrong clang runtime package"

cuda=${CHECK_INSTALL_CUDA:-OFF}
step "configure, build and install into $prefix (CUDA $cuda, Release, no tests or benchmarks)"
cmake -S . -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGCPRESSURE_WITH_CUDA="$cuda" \
  -DGCPRESSURE_BUILD_TESTS=OFF -DGCPRESSURE_BUILD_BENCH=OFF -DGCPRESSURE_BUILD_EXAMPLES=ON \
  -DCMAKE_INSTALL_PREFIX="$prefix" >"$work/configure.log" || { cat "$work/configure.log"; fail "configure"; }
# Only what is installed is built (the forward loop and the PyTorch plug-in
# are not); should an install rule name another target, everything is built.
targets=(gcpressure_c)
for t in gcpressure_lua guile_gcpressure; do
  if cmake --build "$work/build" --target help | grep -q "^$t:"; then targets+=("$t"); fi
done
cmake --build "$work/build" -j"$jobs" --target "${targets[@]}" >"$work/build.log" \
  || { tail -50 "$work/build.log"; fail "build"; }
if ! cmake --install "$work/build" >"$work/install.log" 2>&1; then
  echo "check-install: an install rule needs more than ${targets[*]}: building everything"
  cmake --build "$work/build" -j"$jobs" >>"$work/build.log" || { tail -50 "$work/build.log"; fail "build"; }
  cmake --install "$work/build" >"$work/install.log" || { cat "$work/install.log"; fail "install"; }
fi
for f in include/gcpressure/boehm.hpp include/gcpressure/gcpressure.h include/gcpressure/config.hpp; do
  [ -f "$prefix/$f" ] || fail "$f not installed"
done
# Test support (tests/support: the fault-injecting adaptor) stays out of the install.
! find "$prefix" -name 'fault_injection*' -o -name '*gcpressure_testing*' | grep -q . \
  || fail "test support installed: $(find "$prefix" -name 'fault_injection*' -o -name '*gcpressure_testing*')"
cmakedir=$(dirname "$(find "$prefix" -name gcpressureConfig.cmake | head -n1)")
pcdir=$(dirname "$(find "$prefix" -name gcpressure.pc | head -n1)")
[ -f "$cmakedir/gcpressureTargets.cmake" ] || fail "gcpressureConfig.cmake / gcpressureTargets.cmake not installed"
[ -f "$pcdir/gcpressure.pc" ] || fail "gcpressure.pc not installed"

step "README.md's C/C++ blocks and the find_package consumers"
python3 tests/install/extract_snippets.py README.md "$work/snippets" >"$work/snippets.list" || fail "extracting README blocks"
cmake -S tests/install/consumer -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DSNIPPET_DIR="$work/snippets" >"$work/consumer-configure.log" \
  || { cat "$work/consumer-configure.log"; fail "configuring the find_package consumer"; }
cmake --build "$work/consumer" -j"$jobs" || fail "building the consumers / README blocks (see the compiler's message above)"
while read -r snippet; do
  name=$(basename "${snippet%.*}")
  step "run README block $name"
  run_clean "$name" "$work/consumer/$name"
done <"$work/snippets.list"
run_ok cxx_consumer "$work/consumer/cxx_consumer"
# The environment as the default layer, in an installed program: a variable
# fills what the program left unset, an explicit option wins over its
# variable, and a misspelt name is reported with the closest option.
step "GCPRESSURE_* in the consumer: default layer, explicit option wins, misspelling reported"
GCPRESSURE_POLICY=every_iteration GCPRESSURE_HARD_LIMIT=64MiB GCPRESSURE_HARD_LIMT=1GiB \
  run_ok cxx_consumer_env "$work/consumer/cxx_consumer" >"$work/cxx_consumer_env.stdout"
cat "$work/cxx_consumer_env.stdout"
grep -q "policy every_iteration" "$work/cxx_consumer_env.stdout" || fail "GCPRESSURE_POLICY did not reach an installed program"
grep -q "did you mean GCPRESSURE_HARD_LIMIT?" "$work/cxx_consumer_env.stderr" || fail "no warning for GCPRESSURE_HARD_LIMT"
run_ok c_consumer_cmake "$work/consumer/c_consumer_cmake"

step "C consumer through pkg-config"
export PKG_CONFIG_PATH="$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pc_libdir=$(pkg-config --variable=libdir gcpressure) || fail "pkg-config gcpressure"
# shellcheck disable=SC2046  # the flags are words
cc -std=c99 -Wall -Wextra -Werror tests/install/c_consumer.c -o "$work/c_consumer_pc" \
  $(pkg-config --cflags --libs gcpressure) -Wl,-rpath,"$pc_libdir" || fail "compiling with pkg-config's flags"
run_ok c_consumer_pc "$work/c_consumer_pc"

lua_mod=$prefix/lib/lua/5.4/gcpressure.so
if command -v lua5.4 >/dev/null && [ -f "$work/build/examples/runtimes/lua/gcpressure.so" ]; then
  step "Lua: require \"gcpressure\" from $prefix/lib/lua/5.4"
  [ -f "$lua_mod" ] || fail "the Lua module is not at $lua_mod"
  run_clean lua env -u LUA_CPATH -u LUA_CPATH_5_4 lua5.4 -e "
    package.cpath = '$prefix/lib/lua/5.4/?.so;' .. package.cpath
    local g = require 'gcpressure'
    local h = g.new{ backend = 'host', hard_limit = '16MiB' }
    for _ = 1, 100 do local a = h:array(65536); h:iteration() end  -- 25 MiB of dropped arrays
    local live, reserved = h:usage()
    assert(reserved <= 16 * 2^20, 'reserved above the limit')
    h:close()
    print('lua: gcpressure ' .. g.version() .. ' from the prefix')"
else
  fail "Lua 5.4 (lua5.4, liblua5.4-dev) is needed for this check: bash scripts/setup.sh installs it"
fi

if command -v guile-3.0 >/dev/null || command -v guile >/dev/null; then
  guile=$(command -v guile-3.0 || command -v guile)
  scm=$(find "$prefix" -name gcpressure.scm | head -n1)
  go=$(find "$prefix" -name gcpressure.go | head -n1)
  ext=$(find "$prefix" -name 'libguile-gcpressure.so' | head -n1)
  [ -n "$scm" ] && [ -n "$go" ] && [ -n "$ext" ] || fail "the Guile module is not installed (scm '$scm', go '$go', extension '$ext')"
  step "Guile: (use-modules (gcpressure)) from ${scm%/*}"
  run_ok guile env GUILE_LOAD_PATH="${scm%/*}" GUILE_LOAD_COMPILED_PATH="${go%/*}" GUILE_EXTENSIONS_PATH="${ext%/*}" \
    GUILE_AUTO_COMPILE=0 "$guile" --no-auto-compile -c "
    (use-modules (gcpressure))
    (define h (make-device-heap #:backend 'host #:hard-limit \"16MiB\"))
    (do ((i 0 (+ i 1))) ((= i 100)) (device-array h 65536) (heap-iteration! h))
    (heap-destroy! h)
    (display (string-append \"guile: gcpressure \" gcpressure-version \" from the prefix\n\"))"
  if grep -q "newer than compiled" "$work/guile.stderr"; then fail "the installed gcpressure.go is older than gcpressure.scm"; fi
else
  fail "Guile 3.0 (guile-3.0, guile-3.0-dev) is needed for this check: bash scripts/setup.sh installs it"
fi
python3 scripts/check-test-groups.py count install "$checks" || fail "$checks checks made, fewer than the install group's floor"
echo "check-install: OK, $checks checks (prefix layout: README.md, Build and install)"
