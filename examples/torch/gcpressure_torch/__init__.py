"""gcpressure_torch: the PyTorch plug-in's old name, kept as a shim.

The plug-in is gcpressure.torch now (examples/python/gcpressure/torch.py, in
the one `gcpressure` package with the CuPy and Numba adaptors). Importing
gcpressure_torch gives that very module (the same object, so every name,
function and piece of state is the same); from a checkout that has not
installed the package, examples/python is put on sys.path first.
"""
import os
import sys

try:
    import gcpressure.torch as _impl
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "python"))
    import gcpressure.torch as _impl

sys.modules[__name__] = _impl
