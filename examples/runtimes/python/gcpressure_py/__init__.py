"""gcpressure_py: the C-API binding's old name, kept as a shim.

The binding is the `gcpressure` package now (examples/python/gcpressure:
Allocator, DeviceArray, CPythonCollector and the _capi module). Importing
gcpressure_py gives that very package, and gcpressure_py._capi /
gcpressure_py.collector its modules (the same objects: one copy of every
class and of the loaded library); from a checkout that has not installed the
package, examples/python is put on sys.path first.
"""
import os
import sys

try:
    import gcpressure as _impl
except ImportError:
    _root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
    sys.path.insert(0, os.path.join(_root, "examples", "python"))
    import gcpressure as _impl
from gcpressure import _capi, collector  # noqa: E402

sys.modules[__name__ + "._capi"] = _capi
sys.modules[__name__ + ".collector"] = collector
sys.modules[__name__] = _impl
