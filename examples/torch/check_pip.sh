#!/usr/bin/env bash
# CI check (issue 12): `pip install ./examples/torch` in a fresh venv gives
# `import gcpressure_torch` with no environment variable, the library inside
# the installed package. What it can test without torch or a GPU: the import,
# where the library was found, configure() on the host backend, an allocation
# and a free through the exported entry points, stats(), collect(); with
# torch present but no GPU, that install() refuses with a clear error.
#   bash examples/torch/check_pip.sh            (Debian's python3 by default)
#   PYTHON=python3.12 bash examples/torch/check_pip.sh
# Host-only build (GCPRESSURE_WITH_CUDA=OFF unless set): it is the packaging
# that is checked here; the CUDA library is built by torch_h200.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
work=$(mktemp -d "${TMPDIR:-/tmp}/gcp-pip.XXXXXX")
trap 'rm -rf "$work"' EXIT
export GCPRESSURE_WITH_CUDA=${GCPRESSURE_WITH_CUDA:-OFF}
export GCP_TORCH_BUILD_DIR=${GCP_TORCH_BUILD_DIR:-$root/build/torch-pip-check}
if command -v ccache >/dev/null && [ -z "${CMAKE_ARGS:-}" ]; then
  export CMAKE_ARGS="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache"
fi
unset GCPRESSURE_TORCH_LIB PYTHONPATH

"$py" -m venv --system-site-packages "$work/venv"
vpy="$work/venv/bin/python"
echo "check_pip: $("$vpy" --version) in $work/venv"
"$vpy" -m pip install --no-build-isolation --no-index "$here" >"$work/pip.log" 2>&1 || {
  tail -40 "$work/pip.log"; echo "check_pip: FAIL (pip install)"; exit 1; }

cd "$work"  # not the checkout: the import must come from the venv
"$vpy" - "$work/venv" <<'PY'
import ctypes, os, sys
venv = os.path.realpath(sys.argv[1])
import gcpressure_torch as g
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
print(f"check_pip: OK import from {mod}; library {lib}; host alloc/free/stats; {torch_note}")
PY
"$vpy" -m pip uninstall -y gcpressure-torch >/dev/null
echo "check_pip: OK uninstall"
