#!/usr/bin/env bash
# The install, as a new user meets it (issue 12): setup.sh's package choice
# (tests/install/test_setup.sh), then a clean host-only Release
# build installed into a temporary prefix, then, against that prefix only:
#   - every C/C++ block of README.md compiled (CMake's default build type and
#     Release) and run: no "leaked" warning allowed, and the peak it prints no
#     higher than the soft limit it sets,
#   - the README's C block through pkg-config with the prefix outside the
#     loader's path: fails to start without rpath or LD_LIBRARY_PATH (the
#     README's note), runs with either,
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

# A README block prints "peak reserved <N> MiB|GiB" and sets a soft limit
# ("512MiB" in parse_size or a C string); the peak must not exceed it.
check_peak() {
  local out=$1 src=$2 peak soft
  peak=$(grep -o 'peak reserved [0-9.]* [MG]iB' "$out" | tail -n1 | awk '{ print $3 * ($4 == "GiB" ? 1024 : 1) }')
  soft=$(grep -o 'soft_limit = [^"]*"[0-9]*[MG]iB"' "$src" | grep -o '[0-9]*[MG]iB' | head -n1 |
         awk '{ n = $0 + 0; print ($0 ~ /GiB/) ? n * 1024 : n }')
  [ -n "$peak" ] || fail "$(basename "$out"): no 'peak reserved' line"
  [ -n "$soft" ] || fail "$src: no soft limit set"
  awk -v p="$peak" -v s="$soft" 'BEGIN { exit !(p > 0 && p <= s) }' \
    || fail "$(basename "$out"): peak reserved $peak MiB, above the block's soft limit $soft MiB"
  echo "check-install: $(basename "$out"): peak reserved $peak MiB <= soft limit $soft MiB"
}

step "README.md's C/C++ blocks and the find_package consumers"
python3 tests/install/extract_snippets.py README.md "$work/snippets" >"$work/snippets.list" || fail "extracting README blocks"
# "default": no CMAKE_BUILD_TYPE, as a user's first build (unoptimised; a
# dead stack slot then keeps the last buffer to the end of main).
for bt in Release default; do
  bt_arg=(); [ "$bt" = Release ] && bt_arg=(-DCMAKE_BUILD_TYPE=Release)
  cmake -S tests/install/consumer -B "$work/consumer-$bt" -G Ninja "${bt_arg[@]}" \
    -DCMAKE_PREFIX_PATH="$prefix" -DSNIPPET_DIR="$work/snippets" >"$work/consumer-$bt-configure.log" \
    || { cat "$work/consumer-$bt-configure.log"; fail "configuring the find_package consumer ($bt)"; }
done
ln -s "$work/consumer-Release" "$work/consumer"
cmake --build "$work/consumer" -j"$jobs" || fail "building the consumers / README blocks (see the compiler's message above)"
while read -r snippet; do
  name=$(basename "${snippet%.*}")
  cmake --build "$work/consumer-default" -j"$jobs" --target "$name" >"$work/consumer-default-build.log" \
    || { cat "$work/consumer-default-build.log"; fail "building README block $name in the default build type"; }
  for bt in Release default; do
    step "run README block $name (build type $bt)"
    run_clean "$name-$bt" "$work/consumer-$bt/$name" >"$work/$name-$bt.stdout"
    cat "$work/$name-$bt.stdout"
    check_peak "$work/$name-$bt.stdout" "$snippet"
  done
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
# README.md's note: a prefix outside the loader's path needs an rpath or
# LD_LIBRARY_PATH; without either the program does not start.
c_block=$(grep '\.c$' "$work/snippets.list" | head -n1)
[ -n "$c_block" ] || fail "README.md has no C block"
step "README's C block through pkg-config: no rpath fails to start, LD_LIBRARY_PATH and rpath run"
# shellcheck disable=SC2046  # the flags are words
cc -Wall -Wextra -Werror "$c_block" -o "$work/readme_c_pc" $(pkg-config --cflags --libs gcpressure) \
  || fail "compiling the README's C block with pkg-config's flags"
if env -u LD_LIBRARY_PATH "$work/readme_c_pc" >"$work/readme_c_pc.out" 2>&1; then
  fail "the README's C block started without rpath or LD_LIBRARY_PATH: the README's note is wrong"
fi
grep -q "libgcpressure.so.0: cannot open shared object file" "$work/readme_c_pc.out" \
  || { cat "$work/readme_c_pc.out"; fail "not the loader message the README's note quotes"; }
LD_LIBRARY_PATH="$pc_libdir" run_clean readme_c_pc_ldpath "$work/readme_c_pc" >"$work/readme_c_pc_ldpath.stdout"
check_peak "$work/readme_c_pc_ldpath.stdout" "$c_block"
# shellcheck disable=SC2046
cc -Wall -Wextra -Werror "$c_block" -o "$work/readme_c_rpath" $(pkg-config --cflags --libs gcpressure) \
  -Wl,-rpath,"$(pkg-config --variable=libdir gcpressure)" || fail "compiling the README's C block with an rpath"
run_clean readme_c_rpath "$work/readme_c_rpath" >"$work/readme_c_rpath.stdout"
check_peak "$work/readme_c_rpath.stdout" "$c_block"

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
