"""Run an embedding in a forked child and compare it with the parent's (an embedder must survive fork)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest


def assert_same_in_forked_child(embed: Callable[[], Any], parent: Any, tolerance: float) -> None:
    """Fork; the child runs ``embed()`` and must match ``parent`` within ``tolerance`` in 60 s, or it hung."""
    import numpy as np

    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os._exit(0 if np.abs(embed() - parent).max() < tolerance else 1)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0  # 1: another vector, 2: the child raised
            return
        time.sleep(0.05)  # polling a child process's exit, bounded
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("embedding in a forked child hung")
