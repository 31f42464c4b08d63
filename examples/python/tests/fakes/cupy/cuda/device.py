_current = [0]


def get_device_id():
    return _current[0]


class Device:
    """cupy.cuda.Device: synchronize() waits for the device (the host
    backend's work is done when queued; bench_cycles.py calls it)."""

    def __init__(self, device=None):
        self.id = 0 if device is None else int(device)

    def synchronize(self):
        pass
