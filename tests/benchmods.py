"""Import a module of ``bench/`` without leaving ``bench/`` on ``sys.path``.

``bench/langgraph.py`` would otherwise shadow the ``langgraph`` namespace package
for every later test of the same process (a plain module anywhere on the path
beats a namespace package), and which tests share a process is the scheduler's
choice: a test of the docs failed only when it ran after one of these.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = str(Path(__file__).resolve().parents[1] / "bench")


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py``, imported with ``bench/`` on the path only while it loads (the path is restored
    whole: a bench script puts its own folder on it too)."""
    saved = list(sys.path)
    sys.path.insert(0, BENCH)
    try:
        return importlib.import_module(name)
    finally:
        sys.path[:] = saved
