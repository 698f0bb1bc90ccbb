"""Small helpers shared by tests that start servers and wait on workers."""

import socket
import time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition, timeout: float = 120, every: float = 0.1):
    """Poll `condition()` until it returns something truthy (returned), or fail after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")
