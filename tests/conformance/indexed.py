"""Waiting for write-behind vectors in a test, on every backend (``mem`` may be a Client)."""

from __future__ import annotations

import time
from typing import Any


def indexed(mem: Any, timeout: float = 60.0) -> None:
    """Return once every written item has its vector (fail after ``timeout`` seconds).

    The embedded memory drains with ``wait_indexed``; over the wire the
    service's own indexer does the work and ``pending_vectors`` says when it is done.
    """
    if hasattr(mem, "wait_indexed"):
        assert mem.wait_indexed(timeout), "items still wait for their vectors"
        return
    deadline = time.monotonic() + timeout
    while mem.search("pending", channels=["vector"]).pending_vectors:
        assert time.monotonic() < deadline, "items still wait for their vectors"
        time.sleep(0.01)  # polling the service's progress, not ordering events
