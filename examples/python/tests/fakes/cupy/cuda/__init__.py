from . import device, memory, stream  # noqa: F401
from .device import Device  # noqa: F401
from .memory import MemoryPointer, UnownedMemory, alloc, get_allocator, set_allocator  # noqa: F401
from .stream import ExternalStream, Stream, get_current_stream  # noqa: F401
