"""The PEP 517 build backend of the gcpressure package (pyproject.toml here;
examples/torch's pyproject.toml points to this file too, so that
`pip install ./examples/torch` keeps working: it installs this same package).

Why in-tree: only Debian's packages are reachable from this project's
machines, and setuptools before 70.1 also needs `wheel`, which not every
interpreter has (pyenv's does not). This backend needs the standard library,
cmake and a C++ compiler, so `pip install ./examples/python` works offline,
with or without --no-build-isolation.

build_wheel: configures examples/torch standalone (CMakeLists.txt: core from
this checkout + the plug-in library every framework adaptor uses) into
$GCP_TORCH_BUILD_DIR (default <repo>/build/torch-pip), builds
gcpressure_torch, and writes a py3-none-<platform> wheel holding the
gcpressure package (examples/python/gcpressure: the C-API binding, the
collector, torch, cupy, numba), libgcpressure_torch.so inside it, and the
two shims gcpressure_torch and gcpressure_py. The library is loaded with
ctypes (not imported), is built against the stable ABI 3.11 and links no
libpython, so one wheel fits every CPython >= 3.11 on that platform. The
C API's libgcpressure.so (with Boehm GC) is not in the wheel: the binding
finds an installed or built one (gcpressure/_capi.py, find_library).
Environment: GCPRESSURE_WITH_CUDA=ON|OFF (default: on when nvcc is found),
CMAKE_ARGS (extra configure arguments, split like a shell), CMAKE_BUILD_PARALLEL_LEVEL
(default 2).
"""
from __future__ import annotations

import base64
import hashlib
import os
import shlex
import subprocess
import sys
import sysconfig
import zipfile

NAME = "gcpressure"
DIST = "gcpressure"  # the distribution name, normalised for file names
VERSION = "0.2.0"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TORCH_DIR = os.path.join(ROOT, "examples", "torch")
LIB = "libgcpressure_torch.so"
# The wheel's pure-Python files: (path in the wheel, source under ROOT).
SHIMS = {"gcpressure_torch/__init__.py": "examples/torch/gcpressure_torch/__init__.py",
         "gcpressure_py/__init__.py": "examples/runtimes/python/gcpressure_py/__init__.py"}


def _tag() -> str:
    return "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _metadata() -> str:
    return (f"Metadata-Version: 2.1\nName: gcpressure\nVersion: {VERSION}\n"
            "Summary: GPU memory collected by device pressure: PyTorch, CuPy and Numba allocators over one pool\n"
            "Requires-Python: >=3.11\n")


def _build_library() -> str:
    if not os.path.isfile(os.path.join(ROOT, "core", "CMakeLists.txt")):
        raise RuntimeError(f"gcpressure: {ROOT}/core not found; build from a gcpressure checkout "
                           "(pip install ./examples/python from the repository root)")
    build = os.environ.get("GCP_TORCH_BUILD_DIR") or os.path.join(ROOT, "build", "torch-pip")
    cfg = ["cmake", "-S", TORCH_DIR, "-B", build, "-DCMAKE_BUILD_TYPE=Release", f"-DPython3_EXECUTABLE={sys.executable}"]
    if os.environ.get("GCPRESSURE_WITH_CUDA"):
        cfg.append(f"-DGCPRESSURE_WITH_CUDA={os.environ['GCPRESSURE_WITH_CUDA']}")
    cfg += shlex.split(os.environ.get("CMAKE_ARGS", ""))
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    for cmd in (cfg, ["cmake", "--build", build, "--target", "gcpressure_torch", "-j", jobs]):
        print("gcpressure:", " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=sys.stderr)
    lib = os.path.join(build, LIB)
    if not os.path.isfile(lib):
        raise RuntimeError(f"gcpressure: the build did not produce {lib}")
    return lib


def _record_line(arc: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory: str, files: dict[str, bytes]) -> str:
    info = f"{DIST}-{VERSION}.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = _metadata().encode()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: gcp_build_backend\nRoot-Is-Purelib: false\n"
                              f"Tag: {_tag()}\n").encode()
    files[f"{info}/top_level.txt"] = "".join(f"{n}\n" for n in (NAME, *sorted({a.split("/")[0] for a in SHIMS})))\
        .encode()
    record = [_record_line(a, d) for a, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{DIST}-{VERSION}-{_tag()}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            zi = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if arc.endswith(".so") else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return name


# --- PEP 517 hooks -------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, f"{DIST}-{VERSION}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(_metadata())
    return os.path.basename(info)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    lib = _build_library()
    files = {}
    pkg = os.path.join(HERE, NAME)
    for f in sorted(os.listdir(pkg)):
        if f.endswith(".py"):
            with open(os.path.join(pkg, f), "rb") as fh:
                files[f"{NAME}/{f}"] = fh.read()
    for arc, src in SHIMS.items():
        with open(os.path.join(ROOT, src), "rb") as fh:
            files[arc] = fh.read()
    with open(lib, "rb") as f:
        files[f"{NAME}/{LIB}"] = f.read()
    return _write_wheel(wheel_directory, files)
