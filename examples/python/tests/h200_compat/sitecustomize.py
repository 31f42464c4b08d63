"""On the GPU machine only (examples/python/h200.sh puts this folder on
PYTHONPATH, for every run with and without gcpressure alike): its NumPy has
no numpy.row_stack (removed in NumPy 2.4, an alias of vstack since 2.0),
which numba-cuda's array typing registers at its first @cuda.jit compile, so
every kernel compile failed there with AttributeError (2026-12-02), whatever
the memory manager. The alias restores it; nothing else changes."""
try:
    import numpy as _np
    if not hasattr(_np, "row_stack"):
        _np.row_stack = _np.vstack
except Exception:  # noqa: BLE001
    pass
