"""A stand-in for CuPy (see ../README.md): what gcpressure.cupy calls."""
from . import cuda  # noqa: F401

__version__ = "0-fake"
float32 = "float32"  # a dtype name: the stand-in's arrays are 4-byte items


class ndarray:
    """Keeps its MemoryPointer as CuPy's ndarray keeps `data`."""

    def __init__(self, n, itemsize=4):
        self.size = n
        self.nbytes = n * itemsize
        self.data = cuda.memory.alloc(self.nbytes)

    def fill(self, value):
        """No device work on the host backend: what bench_cycles.py calls."""


def empty(n, dtype=None):
    return ndarray(int(n))
