"""`pip install ./examples/torch` keeps working: it builds and installs the
one gcpressure package (whose gcpressure_torch shim is today's plug-in
module), with the build backend of examples/python (PEP 517 backend-path
must lie inside this folder, so this file loads that one)."""
import importlib.util
import os

_path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python", "gcp_build_backend.py")
_spec = importlib.util.spec_from_file_location("_gcp_build_backend_python", _path)
_impl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_impl)

get_requires_for_build_wheel = _impl.get_requires_for_build_wheel
prepare_metadata_for_build_wheel = _impl.prepare_metadata_for_build_wheel
build_wheel = _impl.build_wheel
