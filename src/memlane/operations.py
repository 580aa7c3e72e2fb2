"""The operations every interface offers, read from the core's own signatures.

One :class:`Param` list per :class:`~memlane.memory.Memory` method: which
parameters are required and what the others default to, exactly as the method
says. The HTTP bodies of the facts layer are built from it, and the tests hold
every other interface (HTTP item bodies, MCP tools, the Client) to it, so a
required parameter is required everywhere and a default is stated once.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import cache
from typing import Any

REQUIRED: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    """One parameter of a core operation: its name and default (:data:`REQUIRED` if none)."""

    name: str
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def wire_default(value: Any) -> Any:
    """A default as JSON carries it (a tuple is a list)."""
    if isinstance(value, tuple):
        return [wire_default(v) for v in value]
    return value


@cache
def params(method: str) -> tuple[Param, ...]:
    """The parameters of ``Memory.<method>``, in order, without ``self``."""
    from .memory import Memory

    signature = inspect.signature(getattr(Memory, method))
    return tuple(
        Param(p.name, p.default)
        for p in signature.parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    )


def required(method: str) -> list[str]:
    """The names ``Memory.<method>`` cannot do without."""
    return [p.name for p in params(method) if p.required]


def defaults(method: str) -> dict[str, Any]:
    """The optional parameters of ``Memory.<method>`` with their defaults, as JSON carries them."""
    return {p.name: wire_default(p.default) for p in params(method) if not p.required}
