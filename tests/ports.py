"""A loopback port for a test's own server (or for one that must find nothing listening)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel just gave out and took back: free now, so nothing listens there until
    the test binds it (the kernel hands ports out in turn, so another test rarely gets it first)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
