_current = [0]


def get_device_id():
    return _current[0]
