"""cupy/cuda/stream.pyx: a thread-local stack of current streams (`with
stream:`), the null stream (ptr 0) when none is current; synchronize() is a
method of the Python class _BaseStream."""
import threading

_tls = threading.local()
synchronized = []  # the streams synchronize() was called on, in order


class _BaseStream:
    def __init__(self, ptr=0):
        self.ptr = ptr

    def synchronize(self):
        synchronized.append(self.ptr)

    def __enter__(self):
        _stack().append(self)
        return self

    def __exit__(self, *exc):
        _stack().pop()


class Stream(_BaseStream):
    null = None


class ExternalStream(_BaseStream):
    pass


Stream.null = Stream(0)


def _stack():
    s = getattr(_tls, "stack", None)
    if s is None:
        s = _tls.stack = []
    return s


def get_current_stream(device_id=-1):
    s = _stack()
    return s[-1] if s else Stream.null
