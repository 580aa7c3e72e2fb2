"""The mutation run's scope methods (``scripts/mutate.py``'s ``SCOPE_CHECKS``) are read from ``Memory``'s source.

The ``access`` module of the mutation run mutates, of ``core/memory.py``, only the methods that enforce an
agent's scope: a method missing from that list is a scope check no mutant ever tests. The list is derived (every
method that reads ``self._scope``, and every method that calls one), so a new one cannot be forgotten.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

from memlane.core.memory import Memory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import mutate  # noqa: E402


def test_every_method_that_reaches_the_scope_is_listed_and_no_other() -> None:
    """Read again another way (the live class, its methods' text): each synchronous method that touches
    ``self._scope`` or calls, at any depth, a method that does."""
    methods = {
        name: set(re.findall(r"self\.(\w+)", inspect.getsource(fn)))
        for name, fn in vars(Memory).items()
        if inspect.isfunction(fn) and not inspect.iscoroutinefunction(fn) and name != "__init__"
    }
    reaching = {name for name, used in methods.items() if "_scope" in used}
    while more := {name for name, used in methods.items() if used & reaching} - reaching:
        reaching |= more
    assert set(mutate.SCOPE_CHECKS) == reaching
    # the checks, the writes and reads that call them, and put, which the list kept by hand had missed
    for name in ("_readable", "_writable", "_changeable", "_owner_only", "put", "put_many", "get", "search"):
        assert name in mutate.SCOPE_CHECKS, name
    assert "_aget" not in mutate.SCOPE_CHECKS and "close" not in mutate.SCOPE_CHECKS  # a twin; no scope


def test_a_new_method_calling_a_check_through_a_helper_is_found(tmp_path: Path) -> None:
    source = tmp_path / "memory.py"
    source.write_text(
        "class Memory:\n"
        "    def __init__(self, scope):\n"
        "        self._scope = scope\n"
        "    def _readable(self, ns):\n"
        "        return ns if self._scope is None else self._scope.check(ns)\n"
        "    def _helper(self, ns):\n"
        "        return self._readable(ns)\n"
        "    def frob(self, ns):\n"
        "        return self._helper(ns)\n"
        "    def plain(self):\n"
        "        return self._clock()\n"
        "    async def _afrob(self, ns):\n"
        "        return self._readable(ns)\n"
    )
    assert mutate.scope_checks(source) == ("_helper", "_readable", "frob")
