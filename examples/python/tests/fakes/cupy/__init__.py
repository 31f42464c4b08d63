"""A stand-in for CuPy (see ../README.md): what gcpressure.cupy calls."""
from . import cuda  # noqa: F401

__version__ = "0-fake"


class ndarray:
    """Keeps its MemoryPointer as CuPy's ndarray keeps `data`."""

    def __init__(self, n, itemsize=4):
        self.size = n
        self.nbytes = n * itemsize
        self.data = cuda.memory.alloc(self.nbytes)


def empty(n, dtype=None):
    return ndarray(int(n))
