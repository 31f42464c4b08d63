"""cupy/cuda/memory.pyx: the allocator slot, UnownedMemory, MemoryPointer,
OutOfMemoryError (message as CuPy builds it)."""


class OutOfMemoryError(MemoryError):
    def __init__(self, size, total, limit=0):
        self._size, self._total, self._limit = size, total, limit
        if limit == 0:
            msg = "Out of memory allocating {:,} bytes (allocated so far: {:,} bytes).".format(size, total)
        else:
            msg = ("Out of memory allocating {:,} bytes (allocated so far: {:,} bytes, limit set to: {:,} bytes)."
                   .format(size, total, limit))
        super().__init__(msg)


class BaseMemory:
    ptr = 0
    size = 0
    device_id = -1


class UnownedMemory(BaseMemory):
    def __init__(self, ptr, size, owner, device_id=-1):
        if device_id < 0:
            if ptr == 0:
                raise RuntimeError("UnownedMemory requires explicit device ID for a null pointer.")
            device_id = 0
        self.size = size
        self.device_id = device_id
        self.ptr = ptr
        self._owner = owner


class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem = mem
        self.device_id = mem.device_id
        self.ptr = mem.ptr + offset


def _malloc(size):  # CuPy without a pool: never used by the tests' allocations
    raise AssertionError("the fake's default allocator was called: gcpressure.cupy is not installed")


_current_allocator = _malloc


def set_allocator(allocator=None):
    global _current_allocator
    _current_allocator = _malloc if allocator is None else allocator


def get_allocator():
    return _current_allocator


def alloc(size):
    return get_allocator()(size)
