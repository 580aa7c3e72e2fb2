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

:class:`AgentView` wraps a :class:`~memlane.memory.Memory` with an agent's
:class:`Scope`: the same methods, with every read narrowed to what the agent
may see and every explicit namespace outside it refused with
:class:`~memlane.errors.ForbiddenError` before any lookup.
"""

from __future__ import annotations

import builtins
import hashlib
import secrets
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import validate as v
from .agents import Agent, Change, Grant, Listing, Scope
from .errors import ConflictError, ForbiddenError, NotFoundError, ValidationError
from .facts.layer import FactsLayer
from .facts.model import Chunk, Claim, Context, Document, Entity, Fact, Record
from .gate import Gate
from .model import Envelope, Item, Namespace, Page, Version, namespace_text
from .query.model import QueryPlan, QueryResult, SavedQuery
from .store._common import SqlSession, ns_tuple, ts

if TYPE_CHECKING:
    from .memory import Memory

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
        s.run(
            "INSERT INTO access_log (at, actor, action, agent, room, prefix, mode) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (at, self.actor, action, what.get("agent"), what.get("room"), what.get("prefix"), what.get("mode")),
        )

    def _now(self) -> str:
        return ts(self.mem._now())

    @staticmethod
    def _name(raw: Any, field: str) -> str:
        return v.namespace((raw,), field)[0]

    @staticmethod
    def _require(s: SqlSession, table: str, name: str, what: str, hint: str) -> None:
        if not s.rows(f"SELECT 1 FROM {table} WHERE name = ?", (name,)):
            raise NotFoundError(f"no {what} named {name!r}; {hint}")

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
            created = s.rows(
                "INSERT INTO access_agents (name, admin, token_hash, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO NOTHING RETURNING name",
                (name, admin, _hash(token), at),
            )
            if not created:
                raise ConflictError(f"agent {name!r} already exists; pick another name")
            self._log(s, at, "create_agent", agent=name, mode="admin" if admin else None)
        return self.agent(name), token

    def rotate_token(self, name: str) -> str:
        """Issue a new token for an agent; the old one stops working at once."""
        name = self._name(name, "agent")
        token = "ml_" + secrets.token_urlsafe(32)
        at = self._now()
        with self._session(write=True) as s:
            if not s.rows(
                "UPDATE access_agents SET token_hash = ? WHERE name = ? RETURNING name", (_hash(token), name)
            ):
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
            for (room,) in s.rows("DELETE FROM access_members WHERE agent = ? RETURNING room", (name,)):
                self._log(s, at, "remove_member", room=room, agent=name)
            s.run("DELETE FROM access_grants WHERE agent = ?", (name,))
            if not s.rows("DELETE FROM access_agents WHERE name = ? RETURNING name", (name,)):
                return False
            self._log(s, at, "delete_agent", agent=name)
        return True

    def _load(self, s: SqlSession, where: str, param: str) -> Agent | None:
        rows = s.rows(f"SELECT name, admin FROM access_agents WHERE {where} = ?", (param,))
        if not rows:
            return None
        name, admin = rows[0][0], bool(rows[0][1])
        rooms = tuple(r[0] for r in s.rows("SELECT room FROM access_members WHERE agent = ? ORDER BY room", (name,)))
        grants = tuple(
            Grant(ns_tuple(prefix), mode)
            for prefix, mode in s.rows(
                "SELECT prefix, mode FROM access_grants WHERE agent = ? ORDER BY prefix", (name,)
            )
        )
        return Agent(name, admin, grants, rooms)

    def agent(self, name: str) -> Agent:
        """An agent by name, with its rooms and grants."""
        name = self._name(name, "agent")
        with self._session() as s:
            found = self._load(s, "name", name)
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
            names = [r[0] for r in s.rows(
                "SELECT name FROM access_agents WHERE name > ? ORDER BY name LIMIT ?", (cursor or "", limit + 1)
            )]  # fmt: skip
            agents = [a for a in (self._load(s, "name", n) for n in names[:limit]) if a is not None]
        return Listing(agents, names[limit - 1] if len(names) > limit else None)

    def has_admin(self) -> bool:
        """Whether any admin agent exists (``memlane serve`` creates one on first start)."""
        with self._session() as s:
            return bool(s.rows("SELECT 1 FROM access_agents WHERE admin = ? LIMIT 1", (True,)))

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
            found = self._load(s, "token_hash", digest)  # read after the head: as new as it, or newer
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
        where: list[str] = ["seq > ?"]
        params: list[Any] = [after]
        if agent is not None:
            where.append("agent = ?")
            params.append(self._name(agent, "agent"))
        if room is not None:
            where.append("room = ?")
            params.append(self._name(room, "room"))
        with self._session() as s:
            rows = s.rows(
                "SELECT seq, at, actor, action, agent, room, prefix, mode FROM access_log "
                f"WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?",
                (*params, limit),
            )
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
            rows = s.rows(
                "SELECT action, agent FROM access_log WHERE room = ? AND at <= ? AND agent IS NOT NULL ORDER BY seq",
                (room, until),
            )
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
            if s.rows(
                "INSERT INTO access_rooms (name, created_at) VALUES (?, ?) "
                "ON CONFLICT (name) DO NOTHING RETURNING name",
                (name, at),
            ):
                self._log(s, at, "create_room", room=name)
            members = [r[0] for r in s.rows("SELECT agent FROM access_members WHERE room = ? ORDER BY agent", (name,))]
        return {"name": name, "members": members}

    def rooms(self, *, limit: Any = MAX_PAGE, cursor: str | None = None) -> list[dict[str, Any]]:
        """Rooms with their members, a page at a time (see :meth:`room_page` for the cursor)."""
        return self.room_page(limit=limit, cursor=cursor).entries

    def room_page(self, *, limit: Any = 1000, cursor: str | None = None) -> Listing:
        """One page of rooms by name with their members; pass ``next_cursor`` back to go on."""
        limit = _page(limit)
        with self._session() as s:
            names = [r[0] for r in s.rows(
                "SELECT name FROM access_rooms WHERE name > ? ORDER BY name LIMIT ?", (cursor or "", limit + 1)
            )]  # fmt: skip
            shown = names[:limit]
            members: dict[str, list[str]] = {n: [] for n in shown}
            if shown:
                for room, agent in s.rows(
                    "SELECT room, agent FROM access_members WHERE room >= ? AND room <= ? ORDER BY room, agent",
                    (shown[0], shown[-1]),
                ):
                    if room in members:
                        members[room].append(agent)
        entries = [{"name": n, "members": members[n]} for n in shown]
        return Listing(entries, shown[-1] if len(names) > limit else None)

    def _members(self, s: SqlSession, room: str) -> dict[str, Any]:
        agents = [r[0] for r in s.rows("SELECT agent FROM access_members WHERE room = ? ORDER BY agent", (room,))]
        return {"name": room, "members": agents}

    def add_member(self, room: str, agent: str) -> dict[str, Any]:
        """Add an agent to a room (one row; a concurrent change to the room is never lost)."""
        room, agent = self._name(room, "room"), self._name(agent, "agent")
        at = self._now()
        with self._session(write=True) as s:
            self._require(s, "access_rooms", room, "room", f"create it with `memlane room create {room}`")
            self._require(s, "access_agents", agent, "agent", f"create it with `memlane agent create {agent}`")
            if s.rows(
                "INSERT INTO access_members (room, agent, added_at) VALUES (?, ?, ?) "
                "ON CONFLICT (room, agent) DO NOTHING RETURNING agent",
                (room, agent, at),
            ):
                self._log(s, at, "add_member", room=room, agent=agent)
            return self._members(s, room)

    def remove_member(self, room: str, agent: str) -> dict[str, Any]:
        """Remove an agent from a room; it takes effect for the agent's next request."""
        room, agent = self._name(room, "room"), self._name(agent, "agent")
        at = self._now()
        with self._session(write=True) as s:
            self._require(s, "access_rooms", room, "room", f"create it with `memlane room create {room}`")
            if s.rows("DELETE FROM access_members WHERE room = ? AND agent = ? RETURNING agent", (room, agent)):
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
            self._require(s, "access_agents", agent, "agent", f"create it with `memlane agent create {agent}`")
            s.run(
                "INSERT INTO access_grants (agent, prefix, mode, granted_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (agent, prefix) DO UPDATE SET mode = excluded.mode, granted_at = excluded.granted_at",
                (agent, namespace_text(ns), mode, at),
            )
            self._log(s, at, "grant", agent=agent, prefix=namespace_text(ns), mode=mode)
        return self.agent(agent)

    def revoke(self, agent: str, prefix: Namespace | str) -> Agent:
        """Remove an agent's grant on a prefix; it takes effect for the agent's next request."""
        agent = self._name(agent, "agent")
        ns = v.namespace(prefix, "prefix")
        at = self._now()
        with self._session(write=True) as s:
            self._require(s, "access_agents", agent, "agent", f"create it with `memlane agent create {agent}`")
            if s.rows(
                "DELETE FROM access_grants WHERE agent = ? AND prefix = ? RETURNING prefix", (agent, namespace_text(ns))
            ):
                self._log(s, at, "revoke", agent=agent, prefix=namespace_text(ns))
        return self.agent(agent)

    def count(self) -> int:
        """Rows in the access tables (agents, rooms, members, grants), for stats."""
        with self._session() as s:
            return int(
                s.rows(
                    "SELECT (SELECT count(*) FROM access_agents) + (SELECT count(*) FROM access_rooms) "
                    "+ (SELECT count(*) FROM access_members) + (SELECT count(*) FROM access_grants)"
                )[0][0]
            )

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


class AgentView:
    """A :class:`Memory` narrowed to one agent's scope; writes record the agent as author.

    Every read runs once, as one statement, over all of the agent's readable
    prefixes (the scope travels into the SQL: nothing is merged afterwards);
    every explicit namespace is checked before any lookup.
    """

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

    # -- checks -----------------------------------------------------------

    def _expensive(self) -> AbstractContextManager[None]:
        return nullcontext() if self._gate is None else self._gate.enter(self.author)

    def _readable(self, namespace: Any, field: str = "namespace") -> Namespace:
        ns = v.namespace(namespace, field)
        if not self.scope.can_read(ns):
            raise ForbiddenError(f"namespace {namespace_text(ns)!r} is outside what this agent may read")
        return ns

    def _writable(self, namespace: Any, field: str = "namespace") -> Namespace:
        ns = v.namespace(namespace, field)
        if not self.scope.can_write(ns):
            raise ForbiddenError(f"namespace {namespace_text(ns)!r} is outside what this agent may write")
        return ns

    def _prefixes(self, prefix: Any) -> builtins.list[Namespace]:
        # nothing readable: read a namespace that never holds items, so the
        # core still validates every argument and answers in its usual shape
        return self.scope.narrow(v.namespace(prefix, "namespace_prefix", allow_empty=True))

    def _as_author(self) -> Memory:
        return self._scoped

    # -- writes -----------------------------------------------------------

    def put(self, namespace: Any, key: str | None, value: Any, **kwargs: Any) -> Item:
        """``Memory.put`` inside the agent's writable scope."""
        return self._as_author().put(self._writable(namespace), key, value, **kwargs)

    def put_many(self, records: Iterable[Mapping[str, Any]], *, if_absent: bool = False) -> builtins.list[Item]:
        """``Memory.put_many``; every record's namespace must be writable."""
        records = list(records)
        for rec in records:
            if isinstance(rec, Mapping) and "namespace" in rec:
                self._writable(rec["namespace"])
        return self._as_author().put_many(records, if_absent=if_absent)

    def add_conversation(self, namespace: Any, messages: Any, **kwargs: Any) -> builtins.list[Item]:
        """``Memory.add_conversation`` into a writable namespace."""
        return self._as_author().add_conversation(self._writable(namespace), messages, **kwargs)

    def delete(self, namespace: Any, key: str) -> bool:
        """``Memory.delete`` inside the writable scope."""
        return self._as_author().delete(self._writable(namespace), key)

    def clear(self, namespace_prefix: Any) -> int:
        """``Memory.clear`` of a writable prefix."""
        return self._as_author().clear(self._writable(namespace_prefix, "namespace_prefix"))

    # -- exact reads ------------------------------------------------------

    def get(self, namespace: Any, key: str) -> Item | None:
        """``Memory.get`` inside the readable scope."""
        return self._mem.get(self._readable(namespace), key)

    def exists(self, namespace: Any, key: str) -> bool:
        """``Memory.exists`` inside the readable scope."""
        return self._mem.exists(self._readable(namespace), key)

    def get_many(self, addresses: Iterable[tuple[Any, str]]) -> builtins.list[Item | None]:
        """``Memory.get_many``; every address must be readable."""
        checked = []
        for addr in addresses:
            if not isinstance(addr, tuple | list) or len(addr) != 2:
                raise ValidationError("addresses", "each address must be a (namespace, key) pair")
            checked.append((self._readable(addr[0]), addr[1]))
        return self._mem.get_many(checked)

    def history(self, namespace: Any, key: str) -> builtins.list[Version]:
        """``Memory.history`` inside the readable scope."""
        return self._mem.history(self._readable(namespace), key)

    def fetch(self, key: str, *, namespace_prefix: Any = (), limit: int = 10) -> builtins.list[Item]:
        """The keyed recall, over exactly what the agent may read."""
        return self._scoped.fetch(key, namespace_prefix=namespace_prefix, limit=limit)

    def list(
        self, namespace_prefix: Any = (), *, key_prefix: str = "", limit: int = 100, cursor: str | None = None
    ) -> Page:
        """Address-ordered pages over every readable prefix."""
        return self._scoped.list(namespace_prefix, key_prefix=key_prefix, limit=limit, cursor=cursor)

    def namespaces(self, prefix: Any = (), *, max_depth: int | None = None) -> builtins.list[Namespace]:
        """Namespaces the agent may see."""
        return self._scoped.namespaces(prefix, max_depth=max_depth)

    def select(self, namespace_prefix: Any = (), **kwargs: Any) -> builtins.list[Item]:
        """``Memory.select`` over every readable prefix, in one statement."""
        return self._scoped.select(namespace_prefix, **kwargs)

    def summarize(
        self, namespace_prefix: Any = (), *, depth: int = 3, key_prefix: str = ""
    ) -> dict[str, dict[str, int]]:
        """The taxonomy map of what the agent may see."""
        return self._scoped.summarize(namespace_prefix, depth=depth, key_prefix=key_prefix)

    # -- ranked reads -----------------------------------------------------

    def search(self, query: str, *, namespace_prefix: Any = (), limit: int = 10, **kwargs: Any) -> Envelope:
        """``Memory.search`` over the readable scope: one nomination per channel, one fusion."""
        with self._expensive():
            return self._scoped.search(query, namespace_prefix=namespace_prefix, limit=limit, **kwargs)

    def recall(
        self, query: str, *, key: str | None = None, namespace_prefix: Any = (), limit: int = 10, **kwargs: Any
    ) -> Envelope:
        """``Memory.recall`` over the readable scope; keyed recall is checked exactly like search."""
        with self._expensive():
            return self._scoped.recall(query, key=key, namespace_prefix=namespace_prefix, limit=limit, **kwargs)

    # -- facts, claims and sources ------------------------------------------

    def _facts(self) -> FactsLayer:
        return FactsLayer(self._as_author())

    def _within(self, prefix: Any = ()) -> builtins.list[Namespace]:
        # an admin's broad item reads list top-level item namespaces; the facts
        # layer has its own namespaces, so an admin reads them by prefix directly
        if self.scope.admin:
            return [v.namespace(prefix, "namespace_prefix", allow_empty=True)]
        return self._prefixes(prefix)

    def _changeable(self, record_id: Any, field: str) -> None:
        """Refuse a change to a record the agent may read but not write (unknown ids fail later)."""
        if not isinstance(record_id, str):
            return
        try:
            (record,) = FactsLayer(self._mem).lookup([record_id], within=self._within())
        except ValidationError:
            return
        ns = getattr(record, "namespace", None)
        if ns is not None and not self.scope.can_write(ns):
            raise ForbiddenError(
                f"{field} {record_id!r} lives in {namespace_text(ns)!r}, which this agent may read but not write"
            )

    def add_entity(self, namespace: Any, name: Any, **kwargs: Any) -> Entity:
        """``Memory.add_entity`` inside the agent's writable scope."""
        return self._facts().add_entity(self._writable(namespace), name, **kwargs)

    def add_alias(self, entity_id: Any, alias: Any) -> Entity:
        """``Memory.add_alias`` on an entity the agent may write."""
        self._changeable(entity_id, "entity")
        return self._facts().add_alias(entity_id, alias, within=self._within())

    def merge_entities(self, survivor: Any, merged: Any) -> Entity:
        """``Memory.merge_entities``; both entities must be writable by the agent."""
        self._changeable(survivor, "survivor")
        self._changeable(merged, "merged")
        return self._facts().merge_entities(survivor, merged, within=self._within())

    def assert_fact(self, namespace: Any, subject: Any, predicate: Any, object: Any, **kwargs: Any) -> Fact:  # noqa: A002
        """``Memory.assert_fact`` into a writable namespace, about entities the agent may see."""
        ns = self._writable(namespace)
        if kwargs.get("supersedes") is not None:
            self._changeable(kwargs["supersedes"], "supersedes")
        return self._facts().assert_fact(ns, subject, predicate, object, within=self._within(), **kwargs)

    def retract_fact(self, fact_id: Any) -> Fact:
        """``Memory.retract_fact`` on a fact the agent may write."""
        self._changeable(fact_id, "fact")
        return self._facts().retract_fact(fact_id, within=self._within())

    def end_fact(self, fact_id: Any, valid_to: Any) -> Fact:
        """``Memory.end_fact`` on a fact the agent may write."""
        self._changeable(fact_id, "fact")
        return self._facts().end_fact(fact_id, valid_to, within=self._within())

    def add_document(self, namespace: Any, title: Any, text: Any, **kwargs: Any) -> Document:
        """``Memory.add_document`` into a writable namespace."""
        return self._facts().add_document(self._writable(namespace), title, text, **kwargs)

    def add_claim(self, namespace: Any, text: Any, **kwargs: Any) -> Claim:
        """``Memory.add_claim`` into a writable namespace, citing chunks and entities the agent may see."""
        return self._facts().add_claim(self._writable(namespace), text, within=self._within(), **kwargs)

    def add_claims(self, namespace: Any, claims: Any) -> builtins.list[Claim]:
        """``Memory.add_claims`` into a writable namespace, citing what the agent may see."""
        return self._facts().add_claims(self._writable(namespace), claims, within=self._within())

    def supersede_claim(self, claim_id: Any, by: Any = None) -> Claim:
        """``Memory.supersede_claim`` on a claim the agent may write."""
        self._changeable(claim_id, "claim")
        return self._facts().supersede_claim(claim_id, by, within=self._within())

    def resolve_entity(self, name: Any, *, namespace_prefix: Any = ()) -> Context:
        """``Memory.resolve_entity`` among the entities the agent may see."""
        with self._expensive():
            return self._facts().resolve_entity(name, within=self._within(namespace_prefix))

    def facts_context(self, query: Any, *, namespace_prefix: Any = (), **kwargs: Any) -> Context:
        """``Memory.facts_context`` over what the agent may see."""
        with self._expensive():
            return self._facts().facts_context(query, within=self._within(namespace_prefix), **kwargs)

    def claims_and_sources_context(self, query: Any, *, namespace_prefix: Any = (), **kwargs: Any) -> Context:
        """``Memory.claims_and_sources_context`` over what the agent may see."""
        with self._expensive():
            return self._facts().claims_and_sources_context(query, within=self._within(namespace_prefix), **kwargs)

    def combined_context(self, query: Any, *, namespace_prefix: Any = (), **kwargs: Any) -> Context:
        """``Memory.combined_context`` over what the agent may see."""
        with self._expensive():
            return self._facts().combined_context(query, within=self._within(namespace_prefix), **kwargs)

    def lookup(self, ids: Any) -> builtins.list[Record | None]:
        """``Memory.lookup``; what the agent may not see comes back as ``None``."""
        return self._facts().lookup(ids, within=self._within())

    def hydrate(self, ids: Any) -> builtins.list[Record | None]:
        """``Memory.hydrate`` over what the agent may see."""
        return self._facts().lookup(ids, within=self._within(), current=True)

    def traverse(self, entity_ids: Any, **kwargs: Any) -> Context:
        """``Memory.traverse`` over facts the agent may see."""
        with self._expensive():
            return self._facts().traverse(entity_ids, within=self._within(), **kwargs)

    def neighbours(self, chunk_id: Any, before: Any = 1, after: Any = 1) -> builtins.list[Chunk]:
        """``Memory.neighbours`` inside what the agent may see."""
        return self._facts().neighbours(chunk_id, before, after, within=self._within())

    # -- query space (see memlane.query) ----------------------------------------

    def _query_scope(self) -> builtins.list[Namespace] | None:
        # applied inside the memory_v1 views, so no join, subquery or function reaches
        # further; None (an admin) is everything except the reserved namespace
        return None if self.scope.admin else self._prefixes(())

    def _owns(self, author: str | None) -> bool:
        return self.scope.admin or author == self.author

    def query(self, sql: Any, params: Any = None, *, max_rows: Any = 1000, timeout_ms: Any = 2000) -> QueryResult:
        """``Memory.query`` over the rows the agent may see."""
        from .query import run

        with self._expensive():
            return run.query(
                self._mem, sql, params, scope=self._query_scope(), max_rows=max_rows, timeout_ms=timeout_ms
            )

    def explain_query(self, sql: Any, params: Any = None) -> QueryPlan:
        """``Memory.explain_query``, planned over what the agent may see."""
        from .query import run

        with self._expensive():
            return run.explain(self._mem, sql, params, scope=self._query_scope())

    def describe_query_space(self) -> dict[str, Any]:
        """``Memory.describe_query_space`` (the same for every agent)."""
        return self._mem.describe_query_space()

    def search_query_space(self, text: Any) -> builtins.list[dict[str, Any]]:
        """``Memory.search_query_space``."""
        return self._mem.search_query_space(text)

    def save_query(self, name: Any, sql: Any, description: Any = "") -> SavedQuery:
        """Save a query for every agent to run (each sees its own rows); only its author (or an admin) replaces it."""
        from .query import run

        return run.save(self._mem, name, sql, description, author=self.author, may_replace=self._owns)

    def run_saved_query(
        self, name: Any, params: Any = None, *, max_rows: Any = 1000, timeout_ms: Any = 2000
    ) -> QueryResult:
        """Run a saved query over the rows the agent may see."""
        from .query import run

        saved = run.get_saved(self._mem, name)
        return self.query(saved.sql, params, max_rows=max_rows, timeout_ms=timeout_ms)

    def saved_queries(self) -> builtins.list[SavedQuery]:
        """Every saved query (their SQL is shared; their rows are each caller's own)."""
        return self._mem.saved_queries()

    def delete_saved_query(self, name: Any) -> bool:
        """Delete a saved query the agent wrote (an admin: any)."""
        from .query import run

        return run.delete_saved(self._mem, name, may_replace=self._owns)
