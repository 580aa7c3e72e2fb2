"""Tables of agents, tokens, rooms, members and grants (migration ``m006_access``), one list per backend.

Access records used to be JSON items under the reserved namespace ``_memlane``,
read and rewritten whole in Python, so two concurrent changes could lose one.
Each fact of access is now one row with its own key (a member of a room, a grant
on a prefix), changed by one statement inside one transaction, and every change
is appended to ``access_log`` (who, what, when), which also tells every service
process when its cached scopes are stale (the log's highest ``seq``).

The migration converts the old items in place and removes them, so the
``_memlane`` root holds no items afterwards (every item verb refuses it).
"""

from __future__ import annotations

_SQLITE_TABLES = [
    """CREATE TABLE access_agents (
        name TEXT PRIMARY KEY,
        admin INTEGER NOT NULL DEFAULT 0 CHECK (admin IN (0, 1)),
        token_hash TEXT NOT NULL UNIQUE,
        created_at TEXT NOT NULL
    )""",
    "CREATE TABLE access_rooms (name TEXT PRIMARY KEY, created_at TEXT NOT NULL)",
    """CREATE TABLE access_members (
        room TEXT NOT NULL REFERENCES access_rooms (name),
        agent TEXT NOT NULL REFERENCES access_agents (name),
        added_at TEXT NOT NULL,
        PRIMARY KEY (room, agent)
    )""",
    "CREATE INDEX access_members_agent ON access_members (agent, room)",
    """CREATE TABLE access_grants (
        agent TEXT NOT NULL REFERENCES access_agents (name),
        prefix TEXT NOT NULL CHECK (prefix <> ''),
        mode TEXT NOT NULL CHECK (mode IN ('read', 'write')),
        granted_at TEXT NOT NULL,
        PRIMARY KEY (agent, prefix)
    )""",
    """CREATE TABLE access_log (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        actor TEXT,
        action TEXT NOT NULL,
        agent TEXT,
        room TEXT,
        prefix TEXT,
        mode TEXT
    )""",
    "CREATE INDEX access_log_room ON access_log (room, at) WHERE room IS NOT NULL",
    "CREATE INDEX access_log_agent ON access_log (agent, at) WHERE agent IS NOT NULL",
]

_SQLITE_CONVERT = [
    """INSERT INTO access_agents (name, admin, token_hash, created_at)
        SELECT key, CASE WHEN json_extract(value, '$.admin') THEN 1 ELSE 0 END, json_extract(value, '$.token'),
               created_at
        FROM items WHERE namespace = '_memlane/agents' AND json_extract(value, '$.token') IS NOT NULL""",
    "INSERT INTO access_rooms (name, created_at) SELECT key, created_at FROM items WHERE namespace = '_memlane/rooms'",
    """INSERT OR IGNORE INTO access_members (room, agent, added_at)
        SELECT r.key, m.value, r.updated_at FROM items AS r, json_each(r.value, '$.members') AS m
        WHERE r.namespace = '_memlane/rooms' AND m.value IN (SELECT name FROM access_agents)""",
    """INSERT OR IGNORE INTO access_grants (agent, prefix, mode, granted_at)
        SELECT a.key, (SELECT group_concat(p.value, '/') FROM json_each(g.value, '$.prefix') AS p),
               json_extract(g.value, '$.mode'), a.updated_at
        FROM items AS a, json_each(a.value, '$.grants') AS g
        WHERE a.namespace = '_memlane/agents' AND a.key IN (SELECT name FROM access_agents)""",
    """INSERT INTO access_log (at, action, agent) SELECT created_at, 'migrated', name FROM access_agents""",
    """INSERT INTO access_log (at, action, room) SELECT created_at, 'migrated', name FROM access_rooms""",
    """INSERT INTO access_log (at, action, room, agent)
        SELECT added_at, 'add_member', room, agent FROM access_members""",
    """INSERT INTO access_log (at, action, agent, prefix, mode)
        SELECT granted_at, 'grant', agent, prefix, mode FROM access_grants""",
    "DELETE FROM item_history WHERE namespace = '_memlane' OR (namespace >= '_memlane/' AND namespace < '_memlane0')",
    "DELETE FROM items WHERE namespace = '_memlane' OR (namespace >= '_memlane/' AND namespace < '_memlane0')",
]

SQLITE = _SQLITE_TABLES + _SQLITE_CONVERT

_POSTGRES_TABLES = [
    """CREATE TABLE access_agents (
        name TEXT COLLATE "C" PRIMARY KEY,
        admin BOOLEAN NOT NULL DEFAULT false,
        token_hash TEXT NOT NULL UNIQUE,
        created_at TEXT NOT NULL
    )""",
    'CREATE TABLE access_rooms (name TEXT COLLATE "C" PRIMARY KEY, created_at TEXT NOT NULL)',
    """CREATE TABLE access_members (
        room TEXT COLLATE "C" NOT NULL REFERENCES access_rooms (name),
        agent TEXT COLLATE "C" NOT NULL REFERENCES access_agents (name),
        added_at TEXT NOT NULL,
        PRIMARY KEY (room, agent)
    )""",
    "CREATE INDEX access_members_agent ON access_members (agent, room)",
    """CREATE TABLE access_grants (
        agent TEXT COLLATE "C" NOT NULL REFERENCES access_agents (name),
        prefix TEXT COLLATE "C" NOT NULL CHECK (prefix <> ''),
        mode TEXT NOT NULL CHECK (mode IN ('read', 'write')),
        granted_at TEXT NOT NULL,
        PRIMARY KEY (agent, prefix)
    )""",
    """CREATE TABLE access_log (
        seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        at TEXT NOT NULL,
        actor TEXT,
        action TEXT NOT NULL,
        agent TEXT,
        room TEXT,
        prefix TEXT,
        mode TEXT
    )""",
    "CREATE INDEX access_log_room ON access_log (room, at) WHERE room IS NOT NULL",
    "CREATE INDEX access_log_agent ON access_log (agent, at) WHERE agent IS NOT NULL",
]

_POSTGRES_CONVERT = [
    """INSERT INTO access_agents (name, admin, token_hash, created_at)
        SELECT key, coalesce((value::jsonb ->> 'admin')::boolean, false), value::jsonb ->> 'token', created_at
        FROM items WHERE namespace = '_memlane/agents' AND value::jsonb ->> 'token' IS NOT NULL""",
    "INSERT INTO access_rooms (name, created_at) SELECT key, created_at FROM items WHERE namespace = '_memlane/rooms'",
    """INSERT INTO access_members (room, agent, added_at)
        SELECT r.key, m.agent, r.updated_at
        FROM items AS r CROSS JOIN LATERAL jsonb_array_elements_text(r.value::jsonb -> 'members') AS m (agent)
        WHERE r.namespace = '_memlane/rooms' AND m.agent IN (SELECT name FROM access_agents)
        ON CONFLICT DO NOTHING""",
    """INSERT INTO access_grants (agent, prefix, mode, granted_at)
        SELECT a.key, array_to_string(ARRAY(SELECT jsonb_array_elements_text(g -> 'prefix')), '/'), g ->> 'mode',
               a.updated_at
        FROM items AS a CROSS JOIN LATERAL jsonb_array_elements(a.value::jsonb -> 'grants') AS g
        WHERE a.namespace = '_memlane/agents' AND a.key IN (SELECT name FROM access_agents)
        ON CONFLICT DO NOTHING""",
    """INSERT INTO access_log (at, action, agent) SELECT created_at, 'migrated', name FROM access_agents""",
    """INSERT INTO access_log (at, action, room) SELECT created_at, 'migrated', name FROM access_rooms""",
    """INSERT INTO access_log (at, action, room, agent)
        SELECT added_at, 'add_member', room, agent FROM access_members""",
    """INSERT INTO access_log (at, action, agent, prefix, mode)
        SELECT granted_at, 'grant', agent, prefix, mode FROM access_grants""",
    "DELETE FROM item_history WHERE namespace = '_memlane' OR (namespace >= '_memlane/' AND namespace < '_memlane0')",
    "DELETE FROM items WHERE namespace = '_memlane' OR (namespace >= '_memlane/' AND namespace < '_memlane0')",
]

POSTGRES = _POSTGRES_TABLES + _POSTGRES_CONVERT
