"""Every statement over the access tables (:mod:`memlane.store.access_tables`): agents, rooms, members, grants, log.

One function per statement, run in a session of either backend (the SQL is
the same on SQLite and PostgreSQL). :class:`memlane.core.access.Access` holds the
rules (names, modes, the log's meaning, caching) and calls these inside its
transactions; nothing else writes the access tables.
"""

from __future__ import annotations

from typing import Any

from ..values.agents import Agent, Grant
from ._common import SqlSession, ns_tuple

# the tables a name is looked up in, by what the name is of
_NAMED = {"agent": "access_agents", "room": "access_rooms"}
# the columns an agent is found by
_AGENT_KEYS = {"name": "name", "token": "token_hash"}


def log(s: SqlSession, at: str, actor: str | None, action: str, **what: Any) -> None:
    """Append one change to the access log."""
    s.run(
        "INSERT INTO access_log (at, actor, action, agent, room, prefix, mode) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (at, actor, action, what.get("agent"), what.get("room"), what.get("prefix"), what.get("mode")),
    )


def exists(s: SqlSession, kind: str, name: str) -> bool:
    """Whether an agent or a room (``kind``) of this name exists."""
    return bool(s.rows(f"SELECT 1 FROM {_NAMED[kind]} WHERE name = ?", (name,)))


# -- agents -------------------------------------------------------------------


def insert_agent(s: SqlSession, name: str, admin: bool, token_hash: str, at: str) -> bool:
    """Create an agent; ``False`` if the name is taken (one statement decides between racing creators)."""
    return bool(
        s.rows(
            "INSERT INTO access_agents (name, admin, token_hash, created_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (name) DO NOTHING RETURNING name",
            (name, admin, token_hash, at),
        )
    )


def set_token(s: SqlSession, name: str, token_hash: str) -> bool:
    """Replace an agent's token hash; ``False`` if there is no such agent."""
    return bool(s.rows("UPDATE access_agents SET token_hash = ? WHERE name = ? RETURNING name", (token_hash, name)))


def delete_agent(s: SqlSession, name: str) -> tuple[list[str], bool]:
    """Delete an agent with its memberships and grants: the rooms it left, and whether it existed."""
    rooms = [r[0] for r in s.rows("DELETE FROM access_members WHERE agent = ? RETURNING room", (name,))]
    s.run("DELETE FROM access_grants WHERE agent = ?", (name,))
    return rooms, bool(s.rows("DELETE FROM access_agents WHERE name = ? RETURNING name", (name,)))


def agent(s: SqlSession, by: str, value: str) -> Agent | None:
    """An agent with its rooms and grants, found by ``name`` or ``token`` (hash); ``None`` if none."""
    rows = s.rows(f"SELECT name, admin FROM access_agents WHERE {_AGENT_KEYS[by]} = ?", (value,))
    if not rows:
        return None
    name, admin = rows[0][0], bool(rows[0][1])
    rooms = tuple(r[0] for r in s.rows("SELECT room FROM access_members WHERE agent = ? ORDER BY room", (name,)))
    grants = tuple(
        Grant(ns_tuple(prefix), mode)
        for prefix, mode in s.rows("SELECT prefix, mode FROM access_grants WHERE agent = ? ORDER BY prefix", (name,))
    )
    return Agent(name, admin, grants, rooms)


def agent_names(s: SqlSession, after: str, limit: int) -> list[str]:
    """Up to ``limit`` agent names after ``after``, in order."""
    rows = s.rows("SELECT name FROM access_agents WHERE name > ? ORDER BY name LIMIT ?", (after, limit))
    return [r[0] for r in rows]


def has_admin(s: SqlSession) -> bool:
    return bool(s.rows("SELECT 1 FROM access_agents WHERE admin = ? LIMIT 1", (True,)))


# -- rooms and members --------------------------------------------------------


def insert_room(s: SqlSession, name: str, at: str) -> bool:
    """Create a room; ``False`` if it exists."""
    return bool(
        s.rows(
            "INSERT INTO access_rooms (name, created_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING RETURNING name",
            (name, at),
        )
    )


def room_names(s: SqlSession, after: str, limit: int) -> list[str]:
    """Up to ``limit`` room names after ``after``, in order."""
    rows = s.rows("SELECT name FROM access_rooms WHERE name > ? ORDER BY name LIMIT ?", (after, limit))
    return [r[0] for r in rows]


def members(s: SqlSession, room: str) -> list[str]:
    """A room's members, by name."""
    return [r[0] for r in s.rows("SELECT agent FROM access_members WHERE room = ? ORDER BY agent", (room,))]


def members_between(s: SqlSession, first: str, last: str) -> list[tuple[str, str]]:
    """``(room, agent)`` for every member of the rooms from ``first`` to ``last``, in order: one read for a page."""
    rows = s.rows(
        "SELECT room, agent FROM access_members WHERE room >= ? AND room <= ? ORDER BY room, agent", (first, last)
    )
    return [(room, agent) for room, agent in rows]


def insert_member(s: SqlSession, room: str, agent: str, at: str) -> bool:
    """Add a member; ``False`` if it was one already."""
    return bool(
        s.rows(
            "INSERT INTO access_members (room, agent, added_at) VALUES (?, ?, ?) "
            "ON CONFLICT (room, agent) DO NOTHING RETURNING agent",
            (room, agent, at),
        )
    )


def delete_member(s: SqlSession, room: str, agent: str) -> bool:
    """Remove a member; ``False`` if it was none."""
    return bool(s.rows("DELETE FROM access_members WHERE room = ? AND agent = ? RETURNING agent", (room, agent)))


# -- grants -------------------------------------------------------------------


def upsert_grant(s: SqlSession, agent: str, prefix: str, mode: str, at: str) -> None:
    """Give ``agent`` ``mode`` on ``prefix`` (text), replacing its mode there."""
    s.run(
        "INSERT INTO access_grants (agent, prefix, mode, granted_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (agent, prefix) DO UPDATE SET mode = excluded.mode, granted_at = excluded.granted_at",
        (agent, prefix, mode, at),
    )


def delete_grant(s: SqlSession, agent: str, prefix: str) -> bool:
    """Remove a grant; ``False`` if there was none."""
    return bool(s.rows("DELETE FROM access_grants WHERE agent = ? AND prefix = ? RETURNING prefix", (agent, prefix)))


# -- the log and counts -------------------------------------------------------


def changes(s: SqlSession, after: int, agent: str | None, room: str | None, limit: int) -> list[tuple[Any, ...]]:
    """Log rows after sequence number ``after`` (of one agent, one room), oldest first."""
    where: list[str] = ["seq > ?"]
    params: list[Any] = [after]
    if agent is not None:
        where.append("agent = ?")
        params.append(agent)
    if room is not None:
        where.append("room = ?")
        params.append(room)
    return s.rows(
        "SELECT seq, at, actor, action, agent, room, prefix, mode FROM access_log "
        f"WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?",
        (*params, limit),
    )


def membership_changes(s: SqlSession, room: str, until: str) -> list[tuple[str, str]]:
    """``(action, agent)`` for every logged change to a room's members up to ``until``, in order."""
    rows = s.rows(
        "SELECT action, agent FROM access_log WHERE room = ? AND at <= ? AND agent IS NOT NULL ORDER BY seq",
        (room, until),
    )
    return [(action, agent) for action, agent in rows]


def count(s: SqlSession) -> int:
    """Rows in the access tables (agents, rooms, members, grants)."""
    return int(
        s.rows(
            "SELECT (SELECT count(*) FROM access_agents) + (SELECT count(*) FROM access_rooms) "
            "+ (SELECT count(*) FROM access_members) + (SELECT count(*) FROM access_grants)"
        )[0][0]
    )
