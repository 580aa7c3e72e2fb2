"""Agents, their grants and the scope they read through: the plain records of sharing.

These are values only: :mod:`memlane.core.access` keeps them in the store and
:class:`~memlane.core.access.AgentView` applies a :class:`Scope`; the Client and
the service carry them. Nothing here imports the core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .errors import ForbiddenError
from .model import Namespace, namespace_text
from .validate import RESERVED


@dataclass(frozen=True, slots=True)
class Grant:
    """``read`` or ``write`` on a namespace prefix."""

    prefix: Namespace
    mode: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"prefix": namespace_text(self.prefix), "mode": self.mode}


@dataclass(frozen=True, slots=True)
class Agent:
    """A caller of the service."""

    name: str
    admin: bool = False
    grants: tuple[Grant, ...] = ()
    rooms: tuple[str, ...] = ()

    @property
    def namespace(self) -> Namespace:
        """The agent's private namespace."""
        return ("agent", self.name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (never the token)."""
        return {
            "name": self.name,
            "admin": self.admin,
            "namespace": namespace_text(self.namespace),
            "rooms": list(self.rooms),
            "grants": [g.to_dict() for g in self.grants],
        }


@dataclass(frozen=True, slots=True)
class Scope:
    """The prefixes an agent may read and write; ``admin`` sees everything.

    Every check costs the same whatever the number of rooms and grants: the
    prefixes are kept as sets, a namespace is tested by looking up each of its
    at most 8 heads, and the readable prefixes that no other readable prefix
    contains (what a read over everything searches) are found once, when the
    scope is made, in one pass.
    """

    read: tuple[Namespace, ...]
    write: tuple[Namespace, ...]
    admin: bool = False
    _readable: frozenset[Namespace] = field(init=False, repr=False, compare=False)
    _writable: frozenset[Namespace] = field(init=False, repr=False, compare=False)
    _outermost: tuple[Namespace, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        readable = frozenset(self.read)
        object.__setattr__(self, "_readable", readable)
        object.__setattr__(self, "_writable", frozenset(self.write))
        # in the scope's own order, once each; a prefix inside another adds nothing to a read
        outermost = (p for p in dict.fromkeys(self.read) if not _under_any(p, readable, len(p)))
        object.__setattr__(self, "_outermost", tuple(outermost))

    def can_read(self, ns: Namespace) -> bool:
        """Whether ``ns`` lies inside a readable prefix."""
        return self.admin or _under_any(ns, self._readable, len(ns) + 1)

    def can_write(self, ns: Namespace) -> bool:
        """Whether ``ns`` lies inside a writable prefix (never the reserved one, unless admin)."""
        return self.admin or (ns[0] != RESERVED and _under_any(ns, self._writable, len(ns) + 1))

    def narrow(self, prefix: Namespace) -> list[Namespace]:
        """The readable prefixes to search for a requested prefix.

        ``()`` means everything the agent may see. A prefix inside a readable
        one is itself; a prefix that contains readable ones becomes those.
        A prefix that touches nothing readable is refused.
        """
        if self.admin or _under_any(prefix, self._readable, len(prefix) + 1):
            return [prefix]
        if not prefix:
            return list(self._outermost)
        size = len(prefix)
        below = [p for p in self._outermost if p[:size] == prefix]
        if not below:
            raise ForbiddenError(f"namespace {namespace_text(prefix)!r} is outside what this agent may read")
        return below


def _under_any(ns: Namespace, prefixes: frozenset[Namespace], heads: int) -> bool:
    """Whether one of the first ``heads`` heads of ``ns`` (``()``, ``ns[:1]``, ...) is in ``prefixes``."""
    return any(ns[:n] in prefixes for n in range(heads))


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of the access log: who changed what, when."""

    seq: int
    at: datetime
    actor: str | None
    action: str
    agent: str | None = None
    room: str | None = None
    prefix: Namespace | None = None
    mode: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}  # in field order
        out["at"] = self.at.isoformat()
        out["prefix"] = None if self.prefix is None else namespace_text(self.prefix)
        return out


@dataclass(frozen=True, slots=True)
class Listing:
    """One page of agents or rooms; ``next_cursor`` is ``None`` on the last page."""

    entries: list[Any]
    next_cursor: str | None
