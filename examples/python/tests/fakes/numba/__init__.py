"""A stand-in for Numba-CUDA (see ../README.md): what gcpressure.numba calls."""
__version__ = "0-fake"
