"""Agents, rooms, grants and the one visibility rule every shared read obeys.

The embedded library is single-owner: whoever opens the file sees everything.
Shared memory goes through the service, where every caller is an *agent*:

* its private namespace is ``("agent", <name>, ...)``;
* a room ``("room", <name>, ...)`` is readable and writable by its members;
* grants give an agent ``read`` or ``write`` on any other namespace prefix
  (``write`` implies ``read``);
* an admin agent sees and may change everything.

Access records live in their own tables (``access_agents``, ``access_rooms``,
``access_members``, ``access_grants``; migration ``m006_access``) in whichever
backend the memory uses, and travel with export/import. Each change is one
transaction that cannot lose a concurrent one, appended to ``access_log``, so
who was in which room, and when, stays answerable (:meth:`Access.members_at`).
No item verb reaches them: the ``_memlane`` root is refused everywhere. Tokens
are stored only as SHA-256 hashes.

:class:`AgentView` wraps a :class:`~memlane.core.memory.Memory` with an agent's
:class:`Scope`: the same methods, with every read narrowed to what the agent
may see and every explicit namespace outside it refused with
:class:`~memlane.values.errors.ForbiddenError` before any lookup.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..store import sharing
from ..store._common import SqlSession, ns_tuple, ts
from ..values import surface
from ..values import validate as v
from ..values.agents import Agent, Change, Grant, Listing, Scope
from ..values.errors import ConflictError, NotFoundError, ValidationError
from ..values.gate import Gate
from ..values.model import Namespace, namespace_text
from ..values.operations import Operation

if TYPE_CHECKING:
    from .memory import Memory
    from .memory import Memory as _Operations  # a type checker sees Memory's operations, typed as Memory's
else:
    _Operations = object

# the sharing records live in memlane.values.agents; they are still importable from here
__all__ = ["Access", "Agent", "AgentView", "Change", "Grant", "Listing", "Scope", "RESERVED", "MODES"]

RESERVED = v.RESERVED
MODES = ("read", "write")
MAX_PAGE = 10_000
MAX_SCOPES = 1000  # agents' scopes remembered at once (each as large as the agent's rooms and grants)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _page(limit: Any) -> int:
    return v.limit(limit, maximum=MAX_PAGE)


class Access:
    """Agents, rooms and grants, in the memory's access tables (one transaction per change, logged).

    ``actor`` is recorded in the access log as who made each change (``None``:
    the store's owner, e.g. the CLI). ``gate`` limits each agent's concurrent
    expensive reads through the views this object hands out.
    """

    def __init__(self, mem: Memory, *, actor: str | None = None, gate: Gate | None = None) -> None:
        self.mem = mem
        self.actor = actor
        self.gate = gate
        self._version = -1
        self._by_token: dict[str, tuple[int, Agent | None]] = {}  # token hash -> (log head, agent)
        self._scopes: dict[int, tuple[Agent, Scope]] = {}

    # -- plumbing ---------------------------------------------------------

    def _session(self, *, write: bool = False) -> AbstractContextManager[SqlSession]:
        return self.mem.store.session(write=write)

    def _log(self, s: SqlSession, at: str, action: str, **what: Any) -> None:
        sharing.log(s, at, self.actor, action, **what)

    def _now(self) -> str:
        return ts(self.mem._now())

    @staticmethod
    def _name(raw: Any, field: str) -> str:
        return v.namespace((raw,), field)[0]

    @staticmethod
    def _require(s: SqlSession, kind: str, name: str) -> None:
        if not sharing.exists(s, kind, name):
            raise NotFoundError(f"no {kind} named {name!r}; create it with `memlane {kind} create {name}`")

    # -- agents -----------------------------------------------------------

    def create_agent(self, name: str, *, admin: bool = False) -> tuple[Agent, str]:
        """Create an agent; returns it with its token, shown only this once."""
        name = self._name(name, "name")
        if not isinstance(admin, bool):
            raise ValidationError("admin", f"must be true or false, not {admin!r}")
        token = "ml_" + secrets.token_urlsafe(32)
        at = self._now()
        with self._session(write=True) as s:
            # one statement decides: two processes creating one name cannot both get a token
            if not sharing.insert_agent(s, name, admin, _hash(token), at):
                raise ConflictError(f"agent {name!r} already exists; pick another name")
            self._log(s, at, "create_agent", agent=name, mode="admin" if admin else None)
        return self.agent(name), token

    def rotate_token(self, name: str) -> str:
        """Issue a new token for an agent; the old one stops working at once."""
        name = self._name(name, "agent")
        token = "ml_" + secrets.token_urlsafe(32)
        at = self._now()
        with self._session(write=True) as s:
            if not sharing.set_token(s, name, _hash(token)):
                raise NotFoundError(f"no agent named {name!r}; create it with `memlane agent create {name}`")
            self._log(s, at, "rotate_token", agent=name)
        return token

    def delete_agent(self, name: str) -> bool:
        """Delete an agent, its memberships and grants; its token stops working. ``False`` if missing.

        Its items stay where they are (``agent/<name>/...``): delete them with ``clear``.
        """
        name = self._name(name, "agent")
        at = self._now()
        with self._session(write=True) as s:
            rooms, existed = sharing.delete_agent(s, name)
            for room in rooms:
                self._log(s, at, "remove_member", room=room, agent=name)
            if not existed:
                return False
            self._log(s, at, "delete_agent", agent=name)
        return True

    def agent(self, name: str) -> Agent:
        """An agent by name, with its rooms and grants."""
        name = self._name(name, "agent")
        with self._session() as s:
            found = sharing.agent(s, "name", name)
        if found is None:
            raise NotFoundError(f"no agent named {name!r}; create it with `memlane agent create {name}`")
        return found

    def agents(self, *, limit: Any = MAX_PAGE, cursor: str | None = None) -> list[Agent]:
        """Agents by name, a page at a time (see :meth:`agent_page` for the cursor)."""
        return self.agent_page(limit=limit, cursor=cursor).entries

    def agent_page(self, *, limit: Any = 1000, cursor: str | None = None) -> Listing:
        """One page of agents by name, with their rooms and grants; pass ``next_cursor`` back to go on."""
        limit = _page(limit)
        with self._session() as s:
            names = sharing.agent_names(s, cursor or "", limit + 1)
            agents = [a for a in (sharing.agent(s, "name", n) for n in names[:limit]) if a is not None]
        return Listing(agents, names[limit - 1] if len(names) > limit else None)

    def has_admin(self) -> bool:
        """Whether any admin agent exists (``memlane serve`` creates one on first start)."""
        with self._session() as s:
            return sharing.has_admin(s)

    def authenticate(self, token: str | None) -> Agent | None:
        """The agent a token belongs to, or ``None``.

        Resolved agents are cached until the access log moves (any change, by any
        process sharing the database), so a request costs one indexed read of the
        log's head, whatever the number of rooms and grants.
        """
        if not token or len(token) > 200:
            return None
        digest = _hash(token)
        version = self.mem.store.access_head()
        if version != self._version:  # the agents handed out so far may be stale: their scopes go too
            self._by_token, self._scopes, self._version = {}, {}, version
        cached = self._by_token.get(digest)
        # an entry serves only the head it was loaded under: one loaded just before a change, and stored
        # after another thread moved the cache on, is never served after that change
        if cached is not None and cached[0] == version:
            return cached[1]
        with self._session() as s:
            found = sharing.agent(s, "token", digest)  # read after the head: as new as it, or newer
        cache = self._by_token
        if len(cache) >= 10_000:  # many callers: start over rather than grow without bound
            cache.clear()
        cache[digest] = (version, found)
        return found

    def history(
        self, *, agent: str | None = None, room: str | None = None, limit: Any = 1000, after: int = 0
    ) -> list[Change]:
        """The access log, oldest first: every change to agents, rooms, members and grants."""
        limit = _page(limit)
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValidationError("after", f"must be a log sequence number (an integer >= 0), not {after!r}")
        agent = None if agent is None else self._name(agent, "agent")
        room = None if room is None else self._name(room, "room")
        with self._session() as s:
            rows = sharing.changes(s, after, agent, room, limit)
        return [
            Change(seq, datetime.fromisoformat(at), actor, action, a, r, None if p is None else ns_tuple(p), m)
            for seq, at, actor, action, a, r, p, m in rows
        ]

    def members_at(self, room: str, at: datetime) -> list[str]:
        """Who was a member of ``room`` at instant ``at``, replayed from the access log."""
        room = self._name(room, "room")
        if not isinstance(at, datetime) or at.tzinfo is None:
            raise ValidationError("at", "must be an aware datetime, e.g. datetime(2026, 3, 1, tzinfo=UTC)")
        until = ts(v.time(at, "at"))  # stored times are UTC text: compare like with like
        with self._session() as s:
            rows = sharing.membership_changes(s, room, until)
        members: set[str] = set()
        for action, agent in rows:
            if action == "add_member":
                members.add(agent)
            elif action == "remove_member":
                members.discard(agent)
        return sorted(members)

    # -- rooms ------------------------------------------------------------

    def create_room(self, name: str) -> dict[str, Any]:
        """Create a room (``("room", name)``); idempotent."""
        name = self._name(name, "room")
        at = self._now()
        with self._session(write=True) as s:
            if sharing.insert_room(s, name, at):
                self._log(s, at, "create_room", room=name)
            return self._members(s, name)

    def rooms(self, *, limit: Any = MAX_PAGE, cursor: str | None = None) -> list[dict[str, Any]]:
        """Rooms with their members, a page at a time (see :meth:`room_page` for the cursor)."""
        return self.room_page(limit=limit, cursor=cursor).entries

    def room_page(self, *, limit: Any = 1000, cursor: str | None = None) -> Listing:
        """One page of rooms by name with their members; pass ``next_cursor`` back to go on."""
        limit = _page(limit)
        with self._session() as s:
            names = sharing.room_names(s, cursor or "", limit + 1)
            shown = names[:limit]
            members: dict[str, list[str]] = {n: [] for n in shown}
            if shown:
                for room, agent in sharing.members_between(s, shown[0], shown[-1]):
                    if room in members:
                        members[room].append(agent)
        entries = [{"name": n, "members": members[n]} for n in shown]
        return Listing(entries, shown[-1] if len(names) > limit else None)

    def _members(self, s: SqlSession, room: str) -> dict[str, Any]:
        return {"name": room, "members": sharing.members(s, room)}

    def add_member(self, room: str, agent: str) -> dict[str, Any]:
        """Add an agent to a room (one row; a concurrent change to the room is never lost)."""
        room, agent = self._name(room, "room"), self._name(agent, "agent")
        at = self._now()
        with self._session(write=True) as s:
            self._require(s, "room", room)
            self._require(s, "agent", agent)
            if sharing.insert_member(s, room, agent, at):
                self._log(s, at, "add_member", room=room, agent=agent)
            return self._members(s, room)

    def remove_member(self, room: str, agent: str) -> dict[str, Any]:
        """Remove an agent from a room; it takes effect for the agent's next request."""
        room, agent = self._name(room, "room"), self._name(agent, "agent")
        at = self._now()
        with self._session(write=True) as s:
            self._require(s, "room", room)
            if sharing.delete_member(s, room, agent):
                self._log(s, at, "remove_member", room=room, agent=agent)
            return self._members(s, room)

    # -- grants -----------------------------------------------------------

    def grant(self, agent: str, prefix: Namespace | str, mode: str) -> Agent:
        """Give an agent ``read`` or ``write`` on a namespace prefix (replacing its mode there)."""
        if mode not in MODES:
            raise ValidationError("mode", f"{mode!r} is not one of read, write")
        agent = self._name(agent, "agent")
        ns = v.namespace(prefix, "prefix")
        at = self._now()
        with self._session(write=True) as s:
            self._require(s, "agent", agent)
            sharing.upsert_grant(s, agent, namespace_text(ns), mode, at)
            self._log(s, at, "grant", agent=agent, prefix=namespace_text(ns), mode=mode)
        return self.agent(agent)

    def revoke(self, agent: str, prefix: Namespace | str) -> Agent:
        """Remove an agent's grant on a prefix; it takes effect for the agent's next request."""
        agent = self._name(agent, "agent")
        ns = v.namespace(prefix, "prefix")
        at = self._now()
        with self._session(write=True) as s:
            self._require(s, "agent", agent)
            if sharing.delete_grant(s, agent, namespace_text(ns)):
                self._log(s, at, "revoke", agent=agent, prefix=namespace_text(ns))
        return self.agent(agent)

    def count(self) -> int:
        """Rows in the access tables (agents, rooms, members, grants), for stats."""
        with self._session() as s:
            return sharing.count(s)

    # -- the rule ---------------------------------------------------------

    def scope(self, agent: Agent) -> Scope:
        """What ``agent`` may read and write (an admin: everything).

        Remembered for the agent (an :class:`Agent` never changes, and :meth:`authenticate`
        hands out the same one until the access log moves), so a request of an agent in
        thousands of rooms does not rebuild its scope.
        """
        known = self._scopes.get(id(agent))
        if known is not None and known[0] is agent:  # the entry holds the agent, so its id is not reused
            return known[1]
        if agent.admin:
            scope = Scope((), (), admin=True)
        else:
            write = [agent.namespace, *(("room", r) for r in agent.rooms)]
            write += [g.prefix for g in agent.grants if g.mode == "write"]
            read = write + [g.prefix for g in agent.grants if g.mode == "read"]
            scope = Scope(tuple(dict.fromkeys(read)), tuple(dict.fromkeys(write)), agent.admin)
        if len(self._scopes) >= MAX_SCOPES:
            self._scopes.clear()
        self._scopes[id(agent)] = (agent, scope)
        return scope

    def view(self, agent: Agent, *, gated: bool = True) -> AgentView:
        """The memory as ``agent`` sees it (``gated``: its expensive reads pass :attr:`gate`)."""
        return AgentView(self.mem, self.scope(agent), agent.name, gate=self.gate if gated else None)


class AgentView(_Operations):
    """A :class:`Memory` narrowed to one agent's scope; writes record the agent as author.

    It has every operation of the table except the owner's settings (``admin``),
    made from the core's: each call goes to a copy of the memory that carries the
    agent's scope and name, and the core itself enforces that scope. Every read
    runs once, as one statement, over all of the agent's readable prefixes (the
    scope travels into the SQL: nothing is merged afterwards); every explicit
    namespace, and every record an agent would change, is checked before anything
    is read or written. Its expensive reads wait for the agent's share of the
    :class:`~memlane.values.gate.Gate` when it has one.
    """

    DIFFERS: dict[str, str] = {}  # nothing written by hand: the core enforces the scope
    author: str  # the agent's name (a Memory's author may be None)

    def __init__(self, mem: Memory, scope: Scope, author: str, *, gate: Gate | None = None) -> None:
        import copy

        self._gate = gate
        self._mem = mem
        self.scope = scope
        self.author = author
        # the wrapped memory is shared between requests: read and write through a
        # shallow copy that carries this agent's scope and name
        self._scoped = copy.copy(mem)
        self._scoped._scope = scope
        self._scoped.author = author

    def _expensive(self) -> AbstractContextManager[None]:
        return nullcontext() if self._gate is None else self._gate.enter(self.author)

    def _as_author(self) -> Memory:
        """The memory as this agent: its scope, its name on every write."""
        return self._scoped


def _on_scoped(view: AgentView, name: str, expensive: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """One operation on the agent's scoped copy of the memory, within its share of the gate when expensive."""
    if expensive:
        with view._expensive():
            return getattr(view._scoped, name)(*args, **kwargs)
    return getattr(view._scoped, name)(*args, **kwargs)


def _through_scope(op: Operation) -> Callable[..., Any]:
    name, expensive = op.name, op.expensive

    def method(self: AgentView, *args: Any, **kwargs: Any) -> Any:
        return _on_scoped(self, name, expensive, args, kwargs)

    return method


surface.fill(AgentView, _through_scope, only=lambda op: not op.admin)
