#!/usr/bin/env bash
# CI check (issues 12, 22): `pip install ./examples/python` in a fresh venv
# gives the one gcpressure package with no environment variable, the plug-in
# library inside it: `import gcpressure` (the C-API binding), gcpressure.torch
# (and its shim gcpressure_torch, the same module), gcpressure.cupy and
# gcpressure.numba against the stand-ins of tests/fakes (no CuPy, Numba or GPU
# here); the gcpressure_py shim. Then `pip install ./examples/torch`, which
# must install the same package (kept working for today's instructions).
# What it can test without a GPU: the imports, where the library was found,
# configure() on the host backend, allocations and frees through the
# plug-in's entry points and through the CuPy and Numba adaptors, stats(),
# collect(); with torch present but no GPU, that install() refuses with a
# clear error.
#   bash examples/python/check_pip.sh            (Debian's python3 by default)
#   PYTHON=python3.12 bash examples/python/check_pip.sh
# Host-only build (GCPRESSURE_WITH_CUDA=OFF unless set): it is the packaging
# that is checked here; the CUDA library is built for examples/python/h200.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fakes=$here/tests/fakes
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
work=$(mktemp -d "${TMPDIR:-/tmp}/gcp-pip.XXXXXX")
# At exit, a run that would pass must have made the pip group's floor of
# checks (Note [Test groups], scripts/test.sh): a check deleted, or an early
# `exit 0`, shows as a lower count and fails.
checks=0
finish() {
  local rc=$?
  cd "$root"  # not $work, which goes
  rm -rf "$work"
  if [ "$rc" = 0 ] && ! python3 "$root/scripts/check-test-groups.py" count pip "$checks"; then
    echo "check_pip: FAIL ($checks checks, below the pip group's floor)"
    rc=1
  fi
  exit "$rc"
}
trap finish EXIT
export GCPRESSURE_WITH_CUDA=${GCPRESSURE_WITH_CUDA:-OFF}
export GCP_TORCH_BUILD_DIR=${GCP_TORCH_BUILD_DIR:-$root/build/torch-pip-check}
if command -v ccache >/dev/null && [ -z "${CMAKE_ARGS:-}" ]; then
  export CMAKE_ARGS="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache"
fi
unset GCPRESSURE_TORCH_LIB PYTHONPATH
ok() { checks=$((checks + 1)); echo "check_pip: OK $*"; }
gone() {  # the package is no longer importable from the venv
  if "$vpy" -c "import gcpressure" 2>/dev/null; then echo "check_pip: FAIL (gcpressure still importable after $1)"; exit 1; fi
  ok "uninstall$2: gcpressure is gone"
}

"$py" -m venv --system-site-packages "$work/venv"
vpy="$work/venv/bin/python"
echo "check_pip: $("$vpy" --version) in $work/venv"
"$vpy" -m pip install --no-build-isolation --no-index "$here" >"$work/pip.log" 2>&1 || {
  tail -40 "$work/pip.log"; echo "check_pip: FAIL (pip install ./examples/python)"; exit 1; }
ok "pip install ./examples/python"

cd "$work"  # not the checkout: the import must come from the venv
"$vpy" - "$work/venv" "$fakes" <<'PY'
import ctypes, os, sys
venv = os.path.realpath(sys.argv[1])
import gcpressure, gcpressure.torch, gcpressure_torch as g, gcpressure_py
assert g is gcpressure.torch and gcpressure_py is gcpressure, "the shims are not the package's modules"
assert os.path.realpath(gcpressure.__file__).startswith(venv), gcpressure.__file__
assert hasattr(gcpressure, "Allocator") and hasattr(gcpressure, "CPythonCollector")
mod, lib = os.path.realpath(g.__file__), os.path.realpath(g.find_library())
assert mod.startswith(venv), f"module imported from {mod}, not the venv"
assert lib == os.path.join(os.path.dirname(mod), g.LIB_NAME), f"library found at {lib}, not in the package"
L = g.configure(hard_limit="64MiB", backend="host", host_capacity="256MiB", oom="null")
p = L.c.gcp_torch_alloc_nothrow(1 << 20, 0, None)
assert p, "allocation failed"
ctypes.memset(p, 7, 1 << 20)
live, reserved = g.usage()
assert live == 1 << 20 and reserved >= live, (live, reserved)
L.c.gcp_torch_free(p, 1 << 20, 0, None)
g.collect()
s = g.stats()
assert s["backend"] == "host" and s["allocations"] == 1 and s["live_bytes"] == 0, s
try:
    import torch  # noqa: F401
except Exception:
    torch_note = "no torch here: install() not exercised"
else:
    if torch.cuda.is_available():
        torch_note = "torch with a GPU: install() is exercised by torch_h200.sh"
    else:
        try:
            g.install()
        except g.GcpressureTorchError as e:
            torch_note = f"torch without a GPU: install() refused ({e})"
        else:
            raise AssertionError("install() accepted a process with no CUDA device")
# The CuPy and Numba adaptors, against the stand-ins (not installed: on sys.path).
sys.path.insert(0, sys.argv[2])
import cupy, gcpressure.cupy as gcu, gcpressure.numba as gnu
from numba import cuda
gcu.install(cupy=cupy, backend="host")  # shares the configured devices and policy
a = cupy.empty(1 << 18)
gnu.install(backend="host")
d = cuda.device_array(1 << 18)
fw = g.stats()["frameworks"]
assert fw["cupy"][0]["live_bytes"] == 1 << 20 and fw["numba"][0]["live_bytes"] == 1 << 20, fw
del a, d
fw = g.stats()["frameworks"]
assert fw["cupy"][0]["live_bytes"] == 0 and fw["numba"][0]["live_bytes"] == 0, fw
print(f"check_pip: import from {mod}; library {lib}; host alloc/free/stats; cupy and numba adaptors; {torch_note}")
PY
ok "the installed package (above)"
"$vpy" -m pip uninstall -y gcpressure >/dev/null
gone "pip uninstall" ""

# Today's instruction, `pip install ./examples/torch`, installs the same package.
"$vpy" -m pip install --no-build-isolation --no-index "$root/examples/torch" >"$work/pip-torch.log" 2>&1 || {
  tail -40 "$work/pip-torch.log"; echo "check_pip: FAIL (pip install ./examples/torch)"; exit 1; }
ok "pip install ./examples/torch"
"$vpy" -c "import gcpressure_torch as g, gcpressure.torch as t, os, sys; assert g is t; assert os.path.isfile(g.find_library()); \
assert os.path.realpath(g.find_library()).startswith(os.path.realpath(sys.prefix)), g.find_library(); print('check_pip: ./examples/torch installs gcpressure:', g.find_library())"
ok "./examples/torch installs the same package"
"$vpy" -m pip uninstall -y gcpressure >/dev/null
gone "pip uninstall (./examples/torch)" " (./examples/torch)"
