"""SQLite backend: one file, WAL, FTS5 for BM25.

Design:

* ``items`` holds one live row per address; ``UNIQUE(namespace, key)`` is the
  index every exact verb uses. Upsert is one ``INSERT .. ON CONFLICT DO
  UPDATE``; an ``AFTER UPDATE`` trigger copies the old row into
  ``item_history``, so no write path can forget history.
* ``items_fts`` is an external-content FTS5 index over ``items.text`` and the
  item's address words (``address``: namespace and key, split by the
  tokenizer at ``/``, ``.``, ``-``...; ranked at ``ADDRESS_WEIGHT``), kept in
  step by triggers inside the same transaction: the lexical channel can
  never see a row the table does not have.
* ``items.text`` is NULL where the text is the value's own (stored once, see
  ``_common.stored_text``); the index reads it rebuilt (``_common.text_sql``).
* Every write is one ``BEGIN IMMEDIATE`` transaction (the writer lock is taken
  up front, so concurrent writers queue on the busy timeout instead of failing
  on a lock upgrade). ``synchronous=NORMAL`` under WAL: a committed write
  survives a process crash; a power cut may lose the last commits but never
  corrupts the file.
* One connection per store, guarded by a lock, so a ``Memory`` may be shared
  between threads.
"""

from __future__ import annotations

import builtins
import json
import logging
import math
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..values.errors import ConflictError, SchemaVersionError, StorageFullError, StoreError
from ..values.model import Item, Namespace, Stats, Version
from . import _common as c
from . import access_tables, facts_schema, query_space, retention_tables
from .base import ACCESS_HEAD, Nomination, PutRow, Store, Within

if TYPE_CHECKING:
    from .vector_index import SharedVectors

BUSY_TIMEOUT_S = 30.0
_CHUNK = 400  # addresses per statement; 2 variables each stays far below SQLite's limit
_FETCH_PROBE = 1000  # rows a fetch counts of its key, then of its prefix, to choose an index (SqliteStore.fetch)
# WAL checkpoints run in a thread beside the writers (_Checkpointer), at most this often while commits arrive;
# a commit runs one itself only once this many pages wait (SQLite's default is 1,000 pages)
CHECKPOINT_INTERVAL_S = 0.2
CHECKPOINT_BACKSTOP_PAGES = 10_000
# the WAL file is cut back (a TRUNCATE checkpoint) once it is larger than the database and than this; SQLite
# itself truncates it to this size when it starts the WAL over (journal_size_limit)
WAL_LIMIT_BYTES = 1 << 20
WAL_CHECK_WRITES = 16  # a writer looks at the WAL's size every this many of its commits (a stat: no file opened)
TRUNCATE_INSIST_MS = 2000  # ... and at most this once the WAL is twice the database
TRUNCATE_WAIT_MS = 100  # how long a TRUNCATE checkpoint may hold writers back waiting for readers: else next time
_log = logging.getLogger(__name__)

_LIVE = "(expires_at IS NULL OR expires_at > ?)"
_IN_NS = "(namespace = ? OR (namespace >= ? AND namespace < ?))"
_IN_KEY = "(key = ? OR (key >= ? AND key < ?))"

_TEXT = c.text_sql("sqlite")
_OLD_TEXT = c.text_sql("sqlite", "old.")
_NEW_TEXT = c.text_sql("sqlite", "new.")
_ITEM_TABLE = """CREATE TABLE {name} (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    value_type TEXT NOT NULL,
    text TEXT,
    metadata TEXT NOT NULL DEFAULT '{{}}',
    author TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    expires_at TEXT,
    version INTEGER NOT NULL,
    UNIQUE (namespace, key)
)"""
_HISTORY_TABLE = """CREATE TABLE item_history_m010 (
    seq INTEGER PRIMARY KEY,
    item_id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    value_type TEXT NOT NULL,
    text TEXT,
    metadata TEXT NOT NULL,
    author TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    expires_at TEXT,
    version INTEGER NOT NULL,
    change TEXT NOT NULL,
    changed_at TEXT NOT NULL,
    changed_by TEXT
)"""
# the text when it is not the value's own (c.stored_text), for rows written before m010
_ELIDED = (
    "CASE WHEN text = CASE WHEN value_type = 'string' THEN json_extract(value, '$') ELSE value END "
    "THEN NULL ELSE text END"
)


def _m010_copy_items(conn: sqlite3.Connection) -> None:
    """m010's copy of ``items``, keeping any column a later migration added (a store that applied it first)."""
    known = {"rowid", "id", "namespace", "key", "value", "value_type", "text", "metadata", "author"}
    known |= {"created_at", "updated_at", "expires_at", "version"}
    later = [r for r in conn.execute("PRAGMA table_info(items)") if r[1] not in known]
    table = _ITEM_TABLE.format(name="items_m010")
    for _, name, kind, not_null, default, _ in later:
        column = f"{name} {kind}" + (" NOT NULL" if not_null else "") + (f" DEFAULT {default}" if default else "")
        table = table.replace("\n    UNIQUE (namespace, key)", f"\n    {column},\n    UNIQUE (namespace, key)")
    extra = "".join(f", {r[1]}" for r in later)
    conn.execute(table)
    conn.execute(
        "INSERT INTO items_m010 (rowid, id, namespace, key, value, value_type, text, metadata, author, created_at, "
        f"updated_at, expires_at, version{extra}) SELECT rowid, id, namespace, key, value, value_type, {_ELIDED}, "
        f"metadata, author, created_at, updated_at, expires_at, version{extra} FROM items"
    )


Step = str | Callable[[sqlite3.Connection], None]
_M010: builtins.list[Step] = [
    # The text is stored only when it is not the value's own text (see _common.stored_text): the column
    # becomes nullable, which SQLite can only do by copying each table (rowids and seqs kept, so the
    # full-text index, vectors and marks still point at the same rows), then recreating what hung on it.
    "DROP VIEW items_lexical",
    _m010_copy_items,
    "DROP TABLE items",
    "ALTER TABLE items_m010 RENAME TO items",
    "CREATE INDEX items_key ON items (key, updated_at)",
    "CREATE INDEX items_expires ON items (expires_at) WHERE expires_at IS NOT NULL",
    "CREATE UNIQUE INDEX items_id ON items (id)",
    _HISTORY_TABLE,
    "INSERT INTO item_history_m010 (seq, item_id, namespace, key, value, value_type, text, metadata, author, "
    "created_at, updated_at, expires_at, version, change, changed_at, changed_by) SELECT seq, item_id, namespace, "
    f"key, value, value_type, {_ELIDED}, metadata, author, created_at, updated_at, expires_at, version, change, "
    "changed_at, changed_by FROM item_history",
    "DROP TABLE item_history",
    "ALTER TABLE item_history_m010 RENAME TO item_history",
    "CREATE INDEX item_history_address ON item_history (namespace, key, seq)",
    "CREATE INDEX item_history_item ON item_history (item_id, version)",
    """CREATE TRIGGER items_history_update AFTER UPDATE ON items BEGIN
        INSERT INTO item_history (item_id, namespace, key, value, value_type, text, metadata,
            author, created_at, updated_at, expires_at, version, change, changed_at, changed_by)
        VALUES (old.id, old.namespace, old.key, old.value, old.value_type, old.text,
            old.metadata, old.author, old.created_at, old.updated_at, old.expires_at,
            old.version, CASE WHEN old.id = new.id THEN 'replace' ELSE 'expire' END,
            new.updated_at, new.author);
    END""",
    """CREATE TRIGGER items_vectors_delete AFTER DELETE ON items BEGIN
        DELETE FROM item_vectors WHERE item_rowid = old.rowid;
    END""",
    """CREATE TRIGGER items_pending_delete AFTER DELETE ON items BEGIN
        DELETE FROM item_pending WHERE item_rowid = old.rowid;
    END""",
    """CREATE TRIGGER items_vectors_new_item AFTER UPDATE OF id ON items WHEN old.id <> new.id BEGIN
        DELETE FROM item_vectors WHERE item_rowid = old.rowid;
    END""",
    # the index sees the full text, rebuilt from the value where it is not stored (the same words as before)
    f"CREATE VIEW items_lexical (ref, text, address) AS SELECT rowid, {_TEXT}, namespace || ' ' || key FROM items",
    f"""CREATE TRIGGER items_fts_delete AFTER DELETE ON items BEGIN
        INSERT INTO items_fts (items_fts, rowid, text, address)
        VALUES ('delete', old.rowid, {_OLD_TEXT}, old.namespace || ' ' || old.key);
    END""",
    f"""CREATE TRIGGER items_fts_update AFTER UPDATE OF text, value, value_type, namespace, key ON items
    WHEN {_OLD_TEXT} IS NOT {_NEW_TEXT} OR old.namespace IS NOT new.namespace OR old.key IS NOT new.key BEGIN
        INSERT INTO items_fts (items_fts, rowid, text, address)
        VALUES ('delete', old.rowid, {_OLD_TEXT}, old.namespace || ' ' || old.key);
        INSERT INTO items_fts (rowid, text, address)
        VALUES (new.rowid, {_NEW_TEXT}, new.namespace || ' ' || new.key);
    END""",
]

# How the full-text index and the vectors follow the items table, as of m013: only rows with ``indexed``
# are in the index (the view is FTS5's content for 'rebuild' and 'integrity-check'); a row that stops
# being indexed loses its entry, its vector and its mark. m013 creates them; migrate() creates them
# again after any migration, so a store that applied a later migration before an earlier one that
# rebuilt the table (m010) keeps them as they are now.
_ITEM_INDEXING = [
    "DROP VIEW IF EXISTS items_lexical",
    f"CREATE VIEW items_lexical (ref, text, address) AS SELECT rowid, {_TEXT}, namespace || ' ' || key FROM items "
    "WHERE indexed",
    "DROP TRIGGER IF EXISTS items_fts_delete",
    f"""CREATE TRIGGER items_fts_delete AFTER DELETE ON items WHEN old.indexed BEGIN
        INSERT INTO items_fts (items_fts, rowid, text, address)
        VALUES ('delete', old.rowid, {_OLD_TEXT}, old.namespace || ' ' || old.key);
    END""",
    "DROP TRIGGER IF EXISTS items_fts_update",
    f"""CREATE TRIGGER items_fts_update AFTER UPDATE OF text, value, value_type, namespace, key, indexed ON items
    WHEN (old.indexed OR new.indexed) AND (old.indexed IS NOT new.indexed OR {_OLD_TEXT} IS NOT {_NEW_TEXT}
        OR old.namespace IS NOT new.namespace OR old.key IS NOT new.key) BEGIN
        INSERT INTO items_fts (items_fts, rowid, text, address)
        SELECT 'delete', old.rowid, {_OLD_TEXT}, old.namespace || ' ' || old.key WHERE old.indexed;
        INSERT INTO items_fts (rowid, text, address)
        SELECT new.rowid, {_NEW_TEXT}, new.namespace || ' ' || new.key WHERE new.indexed;
    END""",
    "DROP TRIGGER IF EXISTS items_unindexed",
    """CREATE TRIGGER items_unindexed AFTER UPDATE OF indexed ON items WHEN old.indexed AND NOT new.indexed BEGIN
        DELETE FROM item_vectors WHERE item_rowid = old.rowid;
        DELETE FROM item_pending WHERE item_rowid = old.rowid;
    END""",
]

MIGRATIONS: builtins.list[tuple[str, Sequence[Step]]] = [
    (
        "m001_initial",
        [
            """CREATE TABLE items (
                rowid INTEGER PRIMARY KEY,
                id TEXT NOT NULL,
                namespace TEXT NOT NULL,
                key TEXT NOT NULL,
                value TEXT NOT NULL,
                value_type TEXT NOT NULL,
                text TEXT NOT NULL,
                metadata TEXT NOT NULL DEFAULT '{}',
                author TEXT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                expires_at TEXT,
                version INTEGER NOT NULL,
                UNIQUE (namespace, key)
            )""",
            "CREATE INDEX items_key ON items (key, updated_at)",
            "CREATE INDEX items_expires ON items (expires_at) WHERE expires_at IS NOT NULL",
            """CREATE TABLE item_history (
                seq INTEGER PRIMARY KEY,
                item_id TEXT NOT NULL,
                namespace TEXT NOT NULL,
                key TEXT NOT NULL,
                value TEXT NOT NULL,
                value_type TEXT NOT NULL,
                text TEXT NOT NULL,
                metadata TEXT NOT NULL,
                author TEXT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                expires_at TEXT,
                version INTEGER NOT NULL,
                change TEXT NOT NULL,
                changed_at TEXT NOT NULL,
                changed_by TEXT
            )""",
            "CREATE INDEX item_history_address ON item_history (namespace, key, seq)",
            "CREATE INDEX item_history_item ON item_history (item_id, version)",
            """CREATE VIRTUAL TABLE items_fts USING fts5(
                text, content='items', content_rowid='rowid',
                tokenize='porter unicode61 remove_diacritics 2'
            )""",
            """CREATE TRIGGER items_fts_delete AFTER DELETE ON items BEGIN
                INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
            END""",
            """CREATE TRIGGER items_fts_update AFTER UPDATE OF text ON items
            WHEN old.text IS NOT new.text BEGIN
                INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
                INSERT INTO items_fts (rowid, text) VALUES (new.rowid, new.text);
            END""",
            """CREATE TRIGGER items_history_update AFTER UPDATE ON items BEGIN
                INSERT INTO item_history (item_id, namespace, key, value, value_type, text, metadata,
                    author, created_at, updated_at, expires_at, version, change, changed_at, changed_by)
                VALUES (old.id, old.namespace, old.key, old.value, old.value_type, old.text,
                    old.metadata, old.author, old.created_at, old.updated_at, old.expires_at,
                    old.version, CASE WHEN old.id = new.id THEN 'replace' ELSE 'expire' END,
                    new.updated_at, new.author);
            END""",
            "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
        ],
    ),
    (
        "m002_vectors",
        [
            # one vector per item, stamped with the item version it was made from
            # and a write sequence number that lets caches load only what changed
            """CREATE TABLE item_vectors (
                item_rowid INTEGER PRIMARY KEY,
                version INTEGER NOT NULL,
                seq INTEGER NOT NULL,
                embedding BLOB NOT NULL
            )""",
            "CREATE INDEX item_vectors_seq ON item_vectors (seq)",
            "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
            "INSERT INTO counters (name, value) VALUES ('vector_deletes', 0)",
            """CREATE TRIGGER items_vectors_delete AFTER DELETE ON items BEGIN
                DELETE FROM item_vectors WHERE item_rowid = old.rowid;
            END""",
            """CREATE TRIGGER item_vectors_deleted AFTER DELETE ON item_vectors BEGIN
                UPDATE counters SET value = value + 1 WHERE name = 'vector_deletes';
            END""",
        ],
    ),
    ("m003_facts", facts_schema.SQLITE),
    ("m004_query_space", query_space.SQLITE_MIGRATION),
    (
        "m005_item_ids",
        [
            # confirm re-reads candidates by id: make ids unique (an old import could repeat one)
            "UPDATE items SET id = id || '_' || rowid WHERE rowid NOT IN (SELECT min(rowid) FROM items GROUP BY id)",
            "CREATE UNIQUE INDEX items_id ON items (id)",
        ],
    ),
    ("m006_access", access_tables.SQLITE),
    ("m007_retention", retention_tables.SQLITE),
    (
        "m008_pending",
        [
            # write-behind indexing: a write marks its item (at its version) for the indexer, which claims
            # marks with a lease (claimed_until, unix seconds) so several processes share the work
            """CREATE TABLE item_pending (
                item_rowid INTEGER PRIMARY KEY,
                version INTEGER NOT NULL,
                claimed_until REAL,
                claimed_by TEXT
            )""",
            """CREATE TRIGGER items_pending_delete AFTER DELETE ON items BEGIN
                DELETE FROM item_pending WHERE item_rowid = old.rowid;
            END""",
            # an expired row overwritten by a new item keeps its rowid and restarts at version 1: the old
            # item's vector must go with it, or it would pass for the new item's
            """CREATE TRIGGER items_vectors_new_item AFTER UPDATE OF id ON items WHEN old.id <> new.id BEGIN
                DELETE FROM item_vectors WHERE item_rowid = old.rowid;
            END""",
            "DELETE FROM item_vectors WHERE item_rowid NOT IN (SELECT rowid FROM items)",
        ],
    ),
    (
        "m009_lexical_address",
        [
            # keys and namespaces become searchable words: a second, lower-weighted FTS column
            # (the view gives FTS5 the column values for 'rebuild' and integrity checks)
            "DROP TRIGGER items_fts_delete",
            "DROP TRIGGER items_fts_update",
            "DROP TABLE items_fts",
            "CREATE VIEW items_lexical (ref, text, address) AS SELECT rowid, text, namespace || ' ' || key FROM items",
            """CREATE VIRTUAL TABLE items_fts USING fts5(
                text, address, content='items_lexical', content_rowid='ref',
                tokenize='porter unicode61 remove_diacritics 2'
            )""",
            """CREATE TRIGGER items_fts_delete AFTER DELETE ON items BEGIN
                INSERT INTO items_fts (items_fts, rowid, text, address)
                VALUES ('delete', old.rowid, old.text, old.namespace || ' ' || old.key);
            END""",
            """CREATE TRIGGER items_fts_update AFTER UPDATE OF text, namespace, key ON items
            WHEN old.text IS NOT new.text OR old.namespace IS NOT new.namespace OR old.key IS NOT new.key BEGIN
                INSERT INTO items_fts (items_fts, rowid, text, address)
                VALUES ('delete', old.rowid, old.text, old.namespace || ' ' || old.key);
                INSERT INTO items_fts (rowid, text, address)
                VALUES (new.rowid, new.text, new.namespace || ' ' || new.key);
            END""",
            "INSERT INTO items_fts (items_fts) VALUES ('rebuild')",
        ],
    ),
    ("m010_text_once", _M010),
    ("m011_chunk_context", facts_schema.SQLITE_CHUNK_CONTEXT),
    ("m012_scope_heads", []),  # the query space's views are TEMP views of each read-only connection
    (
        "m013_index_opt_out",
        [
            # index=False: an item search never finds (no full-text entry, no vector, no mark); old rows stay
            # indexed (the default is read from the schema: no row is rewritten)
            "ALTER TABLE items ADD COLUMN indexed INTEGER NOT NULL DEFAULT 1",
            *_ITEM_INDEXING,
            # items_id stays whole: the query space's text_match() reads the items its full-text matches name by
            # id, and callers' queries read by id
        ],
    ),
]
# count_pending: a backlog this long is counted from the scope's side when the scope is small
_LONG_BACKLOG = 2_000
_BACKLOG_PROBE = "SELECT count(*) FROM (SELECT 1 FROM item_pending LIMIT ?)"
# BM25 weight of the address column against the text's 1.0: an address match ranks below text matches
ADDRESS_WEIGHT = 0.25
# a word in at least LEXICAL_CAP rows and in COMMON_SHARE of them is left out of a query (SqliteStore.lexical)
LEXICAL_CAP = 2000
COMMON_SHARE = 0.9
# a scope of fewer indexed rows than this and than LEXICAL_CAP is ranked and counted from its own rows instead of
# by FTS5's bm25(), which reads every posting of each word in the store: at 100k rows the scope's way is cheaper up
# to about 3,000 rows, and the postings' side grows with the store (bench/lexical.py: docs/benchmarks.md, "Lexical
# cost per query (#36)"); from the cap on, common words are left out instead
SCOPE_DRIVEN_ROWS = 2000
# in a scope of this many rows, a word in half of them or more (IDF at FTS5's floor) is not counted row by row
FLOOR_UNCOUNTED_ROWS = 500
# the scope's rows (its first, in index order) a larger scope's words are tested on to judge them common
COMMON_SAMPLE = 64
_MARK = "\x02\x03"  # highlight()'s opening mark, counted to get a word's occurrences in a row (_scope_bm25)
# FTS5's bm25() constants
_K1 = 1.2
_B = 0.75


def _quoted(term: str) -> str:
    """A term as one FTS5 phrase: a word, never query syntax."""
    return '"' + term.replace('"', '""') + '"'


def _scope_rows(conn: sqlite3.Connection, inside: str, params: Sequence[Any], limit: int) -> int:
    """The indexed rows meeting ``inside``, counted up to ``limit``."""
    return int(
        conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM items JOIN items_fts_docsize d ON d.id = items.rowid "
            f"WHERE {inside} LIMIT ?)",
            (*params, limit),
        ).fetchone()[0]
    )


def varints(blob: bytes) -> list[int]:
    """The varints of an FTS5 record (SQLite's encoding: 7 bits a byte, high first, a 9th byte of 8)."""
    out: list[int] = []
    i = 0
    while i < len(blob):
        value = 0
        for j in range(9):
            byte = blob[i]
            i += 1
            if j == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        out.append(value)
    return out


def _sizes(blob: bytes) -> int:
    """The tokens of a row in all columns: FTS5's docsize record, one varint per column."""
    return sum(varints(blob))


def _scope_match(within: Within) -> str | None:
    """An FTS5 expression every row inside ``within`` matches (and few others), or ``None`` where there is none.

    A row's address column starts with its namespace's words, so the rows under
    a prefix are among those whose address starts with the prefix's words
    (``address : ^ "<prefix>"``, tokenized as the column is). AND-ed with a
    word, FTS5 intersects the two posting lists itself, skipping through the
    longer one: a word's rows in a small scope are found without walking the
    word's rows elsewhere. A superset (``Team/A`` matches ``team/a``): the
    statement still tests the scope exactly. ``None`` for many prefixes or a
    prefix with no ASCII letter or digit (it might hold no word at all).
    """
    if not within or not all(within) or len(within) > c.SMALL_SCOPE:
        return None
    phrases = []
    for prefix in within:
        text = "/".join(prefix)
        if not any(ch.isascii() and ch.isalnum() for ch in text):
            return None
        phrases.append(f"address : ^ {_quoted(text)}")
    return " OR ".join(phrases)


_SEEK = (
    f"SELECT s.value, highlight(items_fts, 0, '{_MARK}', ''), highlight(items_fts, 1, '{_MARK}', '') "
    "FROM json_each(?) AS s CROSS JOIN items_fts ON items_fts.rowid = s.value WHERE items_fts MATCH ?"
)
_SEEK_ROWS = (
    "SELECT s.value FROM json_each(?) AS s CROSS JOIN items_fts ON items_fts.rowid = s.value WHERE items_fts MATCH ?"
)


def _add_bm25(
    score: dict[int, float], found: Sequence[tuple[int, float]], idf: float, length: Mapping[int, int], mean: float
) -> None:
    """Add one word's BM25 term (FTS5's formula) to each row's score: ``found`` is (row, weighted occurrences)."""
    for rowid, freq in found:
        norm = _K1 * (1 - _B + _B * length[rowid] / mean)
        score[rowid] = score.get(rowid, 0.0) + idf * freq * (_K1 + 1.0) / (freq + norm)


def _occurrences(
    conn: sqlite3.Connection,
    holding: Collection[int],
    word: str,
    inside: str,
    params: Sequence[Any],
    scope_match: str | None,
) -> builtins.list[tuple[int, float]]:
    """Each row of ``holding`` with the occurrences of ``word`` in it, the address's weighted (highlight() marks)."""
    if scope_match is None:
        marked = conn.execute(_SEEK, (json.dumps(builtins.list(holding)), word)).fetchall()
    else:
        # the text's from the intersection (the scope's phrase is the address's: no mark in the text); the
        # address's by a seek, in the few rows whose address holds the word
        text = conn.execute(
            f"SELECT items.rowid, highlight(items_fts, 0, '{_MARK}', '') FROM items_fts JOIN items "
            f"ON items.rowid = items_fts.rowid WHERE items_fts MATCH ? AND {inside}",
            (f"{word} AND ({scope_match})", *params),
        ).fetchall()
        there = [
            r[0]
            for r in conn.execute(
                "SELECT rowid FROM items_fts WHERE items_fts MATCH ?", (f"address : {word} AND ({scope_match})",)
            )
        ]
        address = {r[0]: r[2] for r in conn.execute(_SEEK, (json.dumps(there), word))} if there else {}
        marked = [(rowid, t, address.get(rowid)) for rowid, t in text if rowid in holding]
    return [(rowid, (t or "").count(_MARK) + ADDRESS_WEIGHT * (a or "").count(_MARK)) for rowid, t, a in marked]


def _scope_bm25(
    conn: sqlite3.Connection,
    terms: Sequence[str],
    inside: str,
    params: Sequence[Any],
    k: int,
    scope_match: str | None,
) -> builtins.list[tuple[str, float, int]]:
    """The top ``k`` of a small scope by FTS5's BM25 with the scope's own statistics: ``(id, score, version)``.

    The same formula as FTS5's ``bm25()`` (k1 1.2, b 0.75, column weights 1 and
    ``ADDRESS_WEIGHT``, an IDF of at least 1e-6), with the row count, each word's
    document frequency and the mean row length taken over the scope's rows:
    what a scoped search returns never depends on rows outside it. A word's
    rows in the scope are found through ``scope_match`` (FTS5 intersects the
    posting lists), else each scope row is looked up (rowid and MATCH: a seek);
    its occurrences are counted with ``highlight()``, except, in a scope of
    ``FLOOR_UNCOUNTED_ROWS`` rows or more, for a word in half of it or more,
    whose IDF is FTS5's floor (1e-6): each row holding it counts it once, which
    can reorder only rows that hold no other word. FTS5's
    own ``bm25()`` would read every posting of each word in the store to count it.
    """
    scope = conn.execute(
        "SELECT items.rowid, items.id, items.version, d.sz FROM items JOIN items_fts_docsize d "
        f"ON d.id = items.rowid WHERE {inside}",
        params,
    ).fetchall()
    if not scope:
        return []
    length = {rowid: _sizes(sz) for rowid, _, _, sz in scope}
    mean = (sum(length.values()) / len(scope)) or 1.0
    everyone = json.dumps([r[0] for r in scope])
    score: dict[int, float] = {}
    for term in terms:
        word = _quoted(term)
        if scope_match is not None and len(scope) < FLOOR_UNCOUNTED_ROWS:
            # every occurrence is counted: the rows and their counts in one pass
            found = _occurrences(conn, length.keys(), word, inside, params, scope_match)
            if found:
                idf = math.log((len(scope) - len(found) + 0.5) / (len(found) + 0.5))
                _add_bm25(score, found, idf if idf > 0.0 else 1e-6, length, mean)
            continue
        if scope_match is None:
            holding = [r[0] for r in conn.execute(_SEEK_ROWS, (everyone, word))]
        else:
            holding = [
                r[0]
                for r in conn.execute(
                    "SELECT items.rowid FROM items_fts JOIN items ON items.rowid = items_fts.rowid "
                    f"WHERE items_fts MATCH ? AND {inside}",
                    (f"{word} AND ({scope_match})", *params),
                )
                if r[0] in length
            ]
        if not holding:
            continue
        idf = math.log((len(scope) - len(holding) + 0.5) / (len(holding) + 0.5))
        if idf <= 0.0 and len(scope) >= FLOOR_UNCOUNTED_ROWS:
            # in half of a large scope or more: FTS5's floor of 1e-6 makes its weight nil beside any other word, so
            # its occurrences are not counted (each row holding it is scored as holding it once)
            found = [(rowid, 1.0) for rowid in holding]
        else:
            found = _occurrences(conn, set(holding), word, inside, params, scope_match)
        _add_bm25(score, found, idf if idf > 0.0 else 1e-6, length, mean)
    about = {r[0]: (r[1], r[2]) for r in scope}
    # best first, ties newest first, as FTS5's ranking statement orders them
    top = sorted(score.items(), key=lambda kv: (-kv[1], -kv[0]))[:k]
    return [(about[rowid][0], s, about[rowid][1]) for rowid, s in top]


def _within_scope(match: str, scope_match: str | None) -> str:
    """``match`` restricted to the scope's address words where there are some (rows only: it would score them)."""
    return match if scope_match is None else f"({match}) AND ({scope_match})"


# a filtered lexical search reads the index's ranking in windows (_lexical_windows): the first as long as the share
# of LEXICAL_WINDOW_SAMPLE rows across the store meeting the filter says k hits take, times LEXICAL_WINDOW_MARGIN,
# and at least LEXICAL_WINDOW_FIRST rows per hit; each next one LEXICAL_WINDOW_GROWTH times as far. A window past
# LEXICAL_WINDOW_MAX rows gives way to the joined statement: each window ranks every match again, so a selective
# filter is cheaper tested on every match once (bench/filter.py: docs/benchmarks.md, "Filtered search at scale")
LEXICAL_WINDOW_FIRST = 4
LEXICAL_WINDOW_GROWTH = 4
LEXICAL_WINDOW_MARGIN = 2
LEXICAL_WINDOW_SAMPLE = 128
LEXICAL_WINDOW_MAX = 2048


def _lexical_joined(
    conn: sqlite3.Connection, match: str, rank: str, order: str, inside: str, params: Sequence[Any], k: int
) -> builtins.list[tuple[str, float, int]]:
    """The top ``k`` of the rows matching ``match`` and meeting ``inside``: every match joined and tested, then cut."""
    return conn.execute(
        f"SELECT items.id, {rank}, items.version FROM items_fts "
        f"JOIN items ON items.rowid = items_fts.rowid WHERE items_fts MATCH ? AND {inside} "
        # ties newest first, as the unscoped statement breaks them: a scope never reorders
        f"ORDER BY {order} LIMIT ?",
        (match, *params, k),
    ).fetchall()


def _meeting_share(conn: sqlite3.Connection, inside: str, params: Sequence[Any]) -> float:
    """The share of ``LEXICAL_WINDOW_SAMPLE`` rows spread evenly over the store's rowids that meet ``inside``."""
    last = conn.execute("SELECT max(rowid) FROM items").fetchone()[0] or 0
    if last <= 0 or LEXICAL_WINDOW_SAMPLE <= 0:
        return 1.0
    step = max(1, last // LEXICAL_WINDOW_SAMPLE)
    seen, meeting = conn.execute(
        f"SELECT count(*), coalesce(sum({inside}), 0) FROM items WHERE items.rowid IN (SELECT value FROM json_each(?))",
        (*params, json.dumps(builtins.list(range(1 + step // 2, last + 1, step)))),
    ).fetchone()
    return meeting / seen if seen else 1.0


def _lexical_windows(
    conn: sqlite3.Connection, match: str, inside: str, params: Sequence[Any], k: int
) -> builtins.list[tuple[str, float, int]]:
    """``_lexical_joined``'s answer by BM25 (bit for bit), read from the index's own ranking in growing windows.

    The index ranks its matches alone (``bm25, rowid DESC``: a total order, the
    same in every statement of one snapshot); each window's rows are joined and
    tested against ``inside`` in one statement, and the rows meeting it, in that
    order, are the joined statement's. It stops at ``k`` such rows or at the
    last match, or gives way to the joined statement past ``LEXICAL_WINDOW_MAX``
    rows (sizes: see ``LEXICAL_WINDOW_FIRST``). Only the cost depends on the
    sample of the share meeting ``inside``, never the answer.
    """
    bm25 = f"bm25(items_fts, 1.0, {ADDRESS_WEIGHT})"
    window = (
        f"SELECT f.rowid, items.id, f.score, items.version FROM (SELECT rowid, {bm25} AS score FROM items_fts "
        f"WHERE items_fts MATCH ? ORDER BY {bm25}, items_fts.rowid DESC LIMIT ? OFFSET ?) AS f "
        f"LEFT JOIN items ON items.rowid = f.rowid AND {inside} ORDER BY f.score, f.rowid DESC"
    )
    share = _meeting_share(conn, inside, params) if LEXICAL_WINDOW_MARGIN > 0 else 1.0
    # none of the sample meets it: the joined statement (below) at once
    end = max(LEXICAL_WINDOW_FIRST * k, math.ceil(LEXICAL_WINDOW_MARGIN * k / share), 1) if share > 0 else None
    found: builtins.list[tuple[str, float, int]] = []
    start = 0
    while end is not None and end <= LEXICAL_WINDOW_MAX:
        rows = conn.execute(window, (match, end - start, start, *params)).fetchall()
        found += [(item_id, score, version) for _, item_id, score, version in rows if item_id is not None]
        if len(found) >= k or len(rows) < end - start:
            return found[:k]
        start, end = end, end * LEXICAL_WINDOW_GROWTH
    return _lexical_joined(conn, match, bm25, f"{bm25}, items_fts.rowid DESC", inside, params, k)


def _in_scope_count(
    conn: sqlite3.Connection, term: str, inside: str, params: Sequence[Any], scope_match: str | None, limit: int
) -> int:
    """The rows inside ``inside`` holding ``term``, up to ``limit``, found through ``scope_match`` where given."""
    if scope_match is None:
        match = _quoted(term)
    else:
        match = f"{_quoted(term)} AND ({scope_match})"
    return int(
        conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM items_fts JOIN items ON items.rowid = items_fts.rowid "
            f"WHERE items_fts MATCH ? AND {inside} LIMIT ?)",
            (match, *params, limit),
        ).fetchone()[0]
    )


def _common_in(
    conn: sqlite3.Connection,
    terms: Sequence[str],
    inside: str,
    params: Sequence[Any],
    scope_match: str | None,
    cap: int,
    rows: int,
) -> tuple[builtins.list[str], bool]:
    """The terms worth ranking in a scope of ``rows`` (at least ``cap``, counted up to ``2 * cap``) indexed rows,
    and whether all of them are common.

    A term is common when it is in ``cap`` rows of the scope and in
    ``COMMON_SHARE`` of them. Judged on the scope's rows alone: exactly in a
    scope of fewer than ``2 * cap`` rows with ``scope_match`` (FTS5 intersects
    the word's postings with the scope's); else on the scope's first
    ``COMMON_SAMPLE`` indexed rows (in the index's order), each looked up in
    the index. Neither the verdict nor its cost depends on rows outside the scope.
    """
    common: set[str] = set()
    if rows < 2 * cap and scope_match is not None:
        for t in terms:
            held = _in_scope_count(conn, t, inside, params, scope_match, rows)
            if held >= cap and held >= COMMON_SHARE * rows:
                common.add(t)
    else:
        sample = [
            r[0]
            for r in conn.execute(
                f"SELECT items.rowid FROM items JOIN items_fts_docsize d ON d.id = items.rowid WHERE {inside} LIMIT ?",
                (*params, COMMON_SAMPLE),
            )
        ]
        for t in terms:
            held = conn.execute(
                "SELECT count(*) FROM json_each(?) AS s CROSS JOIN items_fts ON items_fts.rowid = s.value "
                "WHERE items_fts MATCH ?",
                (json.dumps(sample), _quoted(t)),
            ).fetchone()[0]
            if sample and held >= COMMON_SHARE * len(sample):
                common.add(t)
    rare = [t for t in terms if t not in common]
    if rare:
        return rare, False
    return builtins.list(terms), True


_PUT_VECTOR = """
INSERT INTO item_vectors (item_rowid, version, seq, embedding)
SELECT rowid, version, ?, ? FROM items WHERE namespace = ? AND key = ? AND indexed
ON CONFLICT (item_rowid) DO UPDATE SET
    version = excluded.version, seq = excluded.seq, embedding = excluded.embedding
"""

_MARK_UPDATED = f"""
INSERT INTO item_pending (item_rowid, version)
SELECT rowid, version FROM items WHERE namespace = ? AND key = ? AND {c.to_embed_sql()}
ON CONFLICT (item_rowid) DO UPDATE SET version = excluded.version, claimed_until = NULL, claimed_by = NULL
"""
_UNMARK = "DELETE FROM item_pending WHERE item_rowid = (SELECT rowid FROM items WHERE namespace = ? AND key = ?)"

# items with text whose vector is missing or stale and that no mark waits for
_MISSING = (
    f"FROM items i LEFT JOIN item_vectors v ON v.item_rowid = i.rowid WHERE {c.to_embed_sql('i.')} "
    "AND (v.item_rowid IS NULL OR v.version <> i.version) "
    "AND NOT EXISTS (SELECT 1 FROM item_pending p WHERE p.item_rowid = i.rowid)"
)

_GET = f"SELECT {c.ITEM_COLUMNS} FROM items WHERE namespace = ? AND key = ?"
_EXISTS = "SELECT expires_at FROM items WHERE namespace = ? AND key = ?"
# a batch's rows, each as a new item; an address already taken is skipped (and then updated by put_many)
_INSERT_NEW = (
    f"INSERT INTO items ({c.ITEM_COLUMNS}) VALUES ({','.join('?' * 13)}) ON CONFLICT (namespace, key) DO NOTHING"
)
_HISTORY_COPY = f"""
INSERT INTO item_history (item_id, namespace, key, value, value_type, text, metadata, author,
                          created_at, updated_at, expires_at, version, change, changed_at, changed_by)
SELECT {c.VERSION_COLUMNS}, ?, ?, ? FROM items WHERE """


def parse_url(url: str) -> str:
    """File path (or ``:memory:``) from a path or ``sqlite:///path`` URL."""
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///") :] or ":memory:"
    if url.startswith("sqlite://"):
        return url[len("sqlite://") :] or ":memory:"
    return url


def _dir_writable(path: str) -> bool:
    return os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)


def read_only_reason(path: str) -> str | None:
    """Why this process cannot write the SQLite file at ``path``, or ``None`` when it can (or it does not exist).

    A WAL database needs its file writable and a writable ``-wal`` and ``-shm``
    beside it: existing ones, or a directory to create them in.
    """
    if path == ":memory:" or not os.path.exists(path):
        return None
    if not os.access(path, os.W_OK):
        return "the file is not writable"
    if not _dir_writable(path):
        sidecars = [path + "-wal", path + "-shm"]
        if not all(os.path.exists(p) and os.access(p, os.W_OK) for p in sidecars):
            return "its directory is not writable"
    return None


def disk_full_message(path: str, e: BaseException) -> str:
    """What a write refused for a full disk says: the disk, the file, what to do."""
    where = os.path.dirname(os.path.abspath(path)) if path != ":memory:" else "memory"
    try:
        free = shutil.disk_usage(where).free if path != ":memory:" else None
    except OSError:
        free = None
    room = f"{free:,} bytes free there" if free is not None else "no room left"
    return (
        f"the disk is full: cannot write to the SQLite database {path!r} (the disk holding {where!r}: {room}; "
        f"SQLite: {e}); nothing of this write was written and reads still work. Free space on that disk "
        "(or raise the database's size limit), then write again"
    )


def _is_read_only(e: sqlite3.OperationalError) -> bool:
    return "readonly" in str(e) or "read-only" in str(e)


def _repair_stale_wal(path: str) -> None:
    """Make a ``-wal`` / ``-shm`` left read-only by a read-only open writable again, before a writable open.

    A read-only connection cannot checkpoint, so it leaves the two files behind,
    created with the database file's permissions at the time (read-only). Once the
    file is writable again they would keep every write failing ("attempt to write a
    readonly database"): give them the file's permissions (only the owner can), or
    say which file is in the way.
    """
    if path == ":memory:" or not os.access(path, os.W_OK):
        return
    mode = os.stat(path).st_mode & 0o7777
    for stale in (path + "-wal", path + "-shm"):
        if os.path.exists(stale) and not os.access(stale, os.W_OK):
            try:
                os.chmod(stale, mode)
            except OSError as e:
                raise StoreError(
                    f"cannot write to {path!r}: {stale!r} was left read-only by a read-only open "
                    f"({e.strerror}); make it writable, or remove it while no process has the database open"
                ) from e


def truncate_wal(conn: sqlite3.Connection, wait_ms: int = 0) -> tuple[int, int, int] | None:
    """A ``TRUNCATE`` checkpoint that holds writers back at most ``wait_ms`` (:data:`TRUNCATE_WAIT_MS`)
    waiting for readers; its (busy, WAL frames, frames copied)."""
    conn.execute(f"PRAGMA busy_timeout = {wait_ms or TRUNCATE_WAIT_MS}")
    try:
        return conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()  # type: ignore[no-any-return]
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")


class _Checkpointer:
    """Runs a writing store's WAL checkpoints in a thread of their own, not inside a writer's commit.

    SQLite checkpoints in the connection whose commit takes the WAL past 1,000
    pages, so one write pays for copying every earlier write's pages into the
    database (13.8 % of a bulk write's time, docs/benchmarks.md). Here each commit
    wakes this thread, which runs a ``PASSIVE`` checkpoint (it never blocks a reader
    or a writer) at most every ``CHECKPOINT_INTERVAL_S`` while commits arrive. What
    a commit promises is unchanged: durable when it returns, against a crash of the
    process; with ``synchronous=NORMAL`` the WAL reaches the disk at each checkpoint,
    now within ``CHECKPOINT_INTERVAL_S`` of a commit rather than after 1,000 pages.
    The writer's own autocheckpoint stays as a backstop at ``CHECKPOINT_BACKSTOP_PAGES``.
    The thread starts at a process's first write (after a fork, again in the child)
    and reads nothing of SQLite's files itself: closing a descriptor of a file would
    drop every POSIX lock this process holds on it, SQLite's included.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.last: tuple[int, int, int] | None = None  # (busy, WAL frames, frames copied) of the last checkpoint
        self.ran = threading.Event()  # set after each checkpoint (for tests and diagnostics)
        self.overdue = False  # the WAL is too large and this thread could not cut it: the next commit does

    def notify(self) -> None:
        """A write committed: checkpoint soon (starts the thread on first use)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name=f"memlane-checkpoint {self._path}", daemon=True)
            self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self._path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            _log.warning("no background WAL checkpoints for %s (%s); commits run them", self._path, e)
            return
        try:
            while not self._stopping.is_set():
                self._wake.wait()
                if self._stopping.wait(CHECKPOINT_INTERVAL_S):  # commits meanwhile share this checkpoint
                    return
                self._wake.clear()
                try:
                    self.last = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if self.wal_too_large():
                        self._truncate(conn)
                    self.ran.set()
                except sqlite3.Error as e:  # another process checkpointing, a file going away: the next wake retries
                    _log.debug("WAL checkpoint of %s skipped: %s", self._path, e)
        finally:
            conn.close()

    def wal_too_large(self, times: int = 1) -> bool:
        """Whether the ``-wal`` file outgrew :data:`WAL_LIMIT_BYTES` and ``times`` the database (sizes by
        ``stat``: no file is opened here)."""
        try:
            wal = os.stat(self._path + "-wal").st_size
            return wal > WAL_LIMIT_BYTES and wal > times * os.stat(self._path).st_size
        except OSError:
            return False

    def _truncate(self, conn: sqlite3.Connection) -> None:
        """Copy the whole WAL into the database and cut the file to nothing: readers that never pause (other
        workers, other processes) can keep a PASSIVE checkpoint from ever starting the WAL over, and the file
        then only grows. Writers wait at most :data:`TRUNCATE_WAIT_MS` for it; if readers stay, the next wake
        tries again."""
        cut = truncate_wal(conn)
        # a writer that never pauses wins the lock each time: its next commit cuts the WAL itself
        self.overdue = cut is None or cut[0] != 0

    def close(self) -> None:
        """Stop the thread (after a checkpoint under way). Idempotent."""
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and self._pid == os.getpid() and thread is not threading.current_thread():
            thread.join(timeout=BUSY_TIMEOUT_S)


def _index_new_rows(conn: sqlite3.Connection, after_rowid: int) -> None:
    """Add the indexed rows inserted in this transaction (rowid > ``after_rowid``) to the FTS index.

    Inside one writer transaction new rows get rowids above the previous
    maximum, so the range is exactly the rows just inserted.
    """
    conn.execute(
        f"INSERT INTO items_fts (rowid, text, address) SELECT rowid, {_TEXT}, namespace || ' ' || key FROM items "
        "WHERE rowid > ? AND indexed",
        (after_rowid,),
    )


# a filtered vector search tests the ranking in growing windows, the first of k + 8 rows (vector_index); a store
# of more vectors than this reads several before it has k matches (tests/test_sqlite_rewrites.py)
_FILTER_WINDOW = 1000


def _next_vector_seq(conn: sqlite3.Connection) -> int:
    """The ``item_vectors.seq`` of the vectors this write transaction stores: above every seq ever given here.

    The shared vector index (``vector_index``) takes a row whose seq it recorded for the vector it holds, so a
    seq is never handed out twice: ``max(seq) + 1`` gave a deleted newest vector's number out again, and a
    counter alone gives the same numbers again after a backup is restored under a newer index. So the seq is
    the counter's next value or the time in microseconds, whichever is larger.
    """
    return int(
        conn.execute(
            "INSERT INTO counters (name, value) SELECT 'vector_seq', max(coalesce(max(seq), 0) + 1, ?) "
            "FROM item_vectors WHERE true "
            "ON CONFLICT (name) DO UPDATE SET value = max(value + 1, excluded.value) RETURNING value",
            (time.time_ns() // 1000,),
        ).fetchone()[0]
    )


def _put_vectors_at(conn: sqlite3.Connection, rows: Sequence[tuple[int, int, bytes]]) -> int:
    """Write ``(rowid, version, blob)`` vectors where the item is still at ``version``; returns how many."""
    if not rows:
        return 0
    seq = _next_vector_seq(conn)
    before = conn.total_changes
    conn.executemany(
        "INSERT INTO item_vectors (item_rowid, version, seq, embedding) "
        "SELECT rowid, version, ?, ? FROM items WHERE rowid = ? AND version = ? AND indexed "
        "ON CONFLICT (item_rowid) DO UPDATE SET version = excluded.version, seq = excluded.seq, "
        "embedding = excluded.embedding",
        [(seq, blob, rowid, version) for rowid, version, blob in rows],
    )
    return int(conn.total_changes - before)


class SqliteStore(Store):
    """The embedded default backend. See the module docstring for the design."""

    backend = "sqlite"

    migration_names = tuple(name for name, _ in MIGRATIONS)

    def __init__(
        self, path: str, *, busy_timeout: float = BUSY_TIMEOUT_S, migrate: bool = True, read_only: bool = False
    ) -> None:
        self._path = path
        self._lock = threading.RLock()
        self._read_only: str | None = None  # why writes are refused, when opened read-only
        if path != ":memory:":
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise StoreError(f"cannot open {path!r}: directory {parent!r} does not exist; create it first")
        elif read_only:
            raise StoreError("an in-memory SQLite store cannot be opened read-only; open a file instead")
        if read_only:
            if not os.path.exists(path):
                raise StoreError(f"cannot open {path!r} read-only: the file does not exist")
            self._read_only = read_only_reason(path) or "it was opened read-only"
        else:
            _repair_stale_wal(path)
        try:
            if read_only:
                self._conn = sqlite3.connect(
                    self._ro_uri(), uri=True, timeout=busy_timeout, isolation_level=None, check_same_thread=False
                )
            else:
                self._conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            if path != ":memory:" and not read_only:
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open {path!r} as a memlane SQLite database: {e}") from e
        self._closed = False
        self._own_writes = 0
        self._vectors: SharedVectors | None = None
        self._checkpointer: _Checkpointer | None = None
        if migrate:
            self.migrate()
        if path != ":memory:" and not read_only:
            self._checkpointer = _Checkpointer(path)
            self._conn.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_BACKSTOP_PAGES}")
            self._conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")

    def _ro_uri(self) -> str:
        """The ``mode=ro`` URI of the file; ``immutable=1`` when not even the WAL index can be made.

        A WAL database opened read-only needs its ``-shm`` file; in a directory we
        cannot write, and with no ``-wal`` (so nothing uncheckpointed, and nobody
        who cannot write here can be writing), the file is read as immutable.
        """
        from urllib.parse import quote

        uri = "file:" + quote(os.path.abspath(self._path)) + "?mode=ro"
        if self._read_only is not None and not _dir_writable(self._path):
            if not (os.path.exists(self._path + "-wal") and os.path.exists(self._path + "-shm")):
                uri += "&immutable=1"
        return uri

    # -- plumbing ---------------------------------------------------------

    @property
    def location(self) -> str:
        """The database file path."""
        return self._path

    @property
    def connection(self) -> sqlite3.Connection:
        """The underlying connection, for benchmarks and diagnostics only."""
        return self._conn

    def access_head(self) -> int:
        """The access log's head: one indexed read, outside any transaction."""
        with self._lock:
            self._check_open()
            return int(self._conn.execute(ACCESS_HEAD).fetchone()[0])

    @contextmanager
    def at_hand(self) -> Iterator[bool]:
        """Hold the connection if no other thread of this process is using it (a read never waits in WAL)."""
        held = self._lock.acquire(blocking=False)
        try:
            yield held
        finally:
            if held:
                self._lock.release()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._check_open()
            self._own_writes += 1
            conn = self._conn
            if self._read_only is not None:
                raise StoreError(self._read_only_message(self._read_only))
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                if _is_read_only(e):
                    raise StoreError(self._read_only_message(read_only_reason(self._path))) from e
                raise StoreError(f"could not start a write on {self._path!r}: {e}; retry") from e
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as e:
                # SQLite rolls a transaction back itself on some errors (a full disk, out of memory): a ROLLBACK
                # then fails ("no transaction is active"), and must never take the place of the cause
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error as again:
                        _log.warning("rollback after %r failed on %s: %s", e, self._path, again)
                if isinstance(e, sqlite3.Error):
                    raise self._error(e) from e
                raise
            checkpointer = self._checkpointer
            if checkpointer is not None:
                if checkpointer.overdue or (self._own_writes % WAL_CHECK_WRITES == 0 and checkpointer.wal_too_large()):
                    checkpointer.overdue = False
                    try:
                        # twice the database: readers that never all pause have kept the quick tries from
                        # ending, so this one waits them out (once, and at most TRUNCATE_INSIST_MS)
                        insist = checkpointer.wal_too_large(2)
                        truncate_wal(conn, TRUNCATE_INSIST_MS if insist else TRUNCATE_WAIT_MS)
                    except sqlite3.Error as e:  # readers stayed: the checkpoint thread tries again
                        _log.debug("WAL checkpoint of %s skipped: %s", self._path, e)
                checkpointer.notify()

    def _error(self, e: sqlite3.Error) -> StoreError:
        """The memlane error for SQLite's error in a write: a full disk names the disk and the file."""
        if getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return StorageFullError(disk_full_message(self._path, e))
        if isinstance(e, sqlite3.OperationalError) and _is_read_only(e):
            return StoreError(self._read_only_message(read_only_reason(self._path)))
        return StoreError(f"SQLite error on {self._path!r}: {e}")

    def _read_only_message(self, reason: str | None) -> str:
        why = f" ({reason})" if reason else ""
        return f"cannot write to {self._path!r}: the database is read-only{why}; reads still work"

    @contextmanager
    def _snapshot(self, *, refuse_writes: bool = False) -> Iterator[sqlite3.Connection]:
        """A read transaction: every SELECT inside sees the same state.

        ``refuse_writes`` makes a write inside fail, as PostgreSQL's READ ONLY snapshot does, for the sessions
        other layers run their own statements in (about 2.6 µs a session, so not on the store's point reads,
        whose statements are all here).
        """
        with self._lock:
            self._check_open()
            if refuse_writes:
                self._conn.execute("PRAGMA query_only = ON")
            try:
                self._conn.execute("BEGIN")
                try:
                    yield self._conn
                finally:
                    self._conn.execute("COMMIT")
            finally:
                if refuse_writes:
                    self._conn.execute("PRAGMA query_only = OFF")

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("this memory is closed; open it again with memlane.open()")

    def migrate(self) -> builtins.list[str]:
        """Apply pending migrations in order; returns the names applied."""
        applied_now: builtins.list[str] = []
        if self._read_only is not None:
            pending = [name for name in self.migration_names if name not in dict(self.migrations())]
            if pending:
                raise StoreError(
                    f"{self._path!r} needs schema migrations ({', '.join(pending)}) but is read-only "
                    f"({self._read_only}); open it once with write access to migrate it"
                )
            return applied_now
        with self._write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS _memlane_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            done = {r[0] for r in conn.execute("SELECT name FROM _memlane_migrations")}
            known = {name for name, _ in MIGRATIONS}
            unknown = sorted(done - known)
            if unknown:
                raise SchemaVersionError(
                    f"{self._path!r} has migrations {unknown} that this memlane does not know; "
                    "upgrade memlane to open it"
                )
            for name, statements in MIGRATIONS:
                if name in done:
                    continue
                for step in statements:
                    if isinstance(step, str):
                        conn.execute(step)
                    else:
                        step(conn)
                conn.execute(
                    "INSERT INTO _memlane_migrations (name, applied_at) VALUES (?, datetime('now'))",
                    (name,),
                )
                applied_now.append(name)
            if applied_now and "m013_index_opt_out" in done | set(applied_now):
                for sql in _ITEM_INDEXING:  # see _ITEM_INDEXING
                    conn.execute(sql)
        return applied_now

    def migrations(self) -> builtins.list[tuple[str, str]]:
        """Applied migrations with their times."""
        with self._lock:
            exists = self._conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_memlane_migrations'"
            ).fetchone()
            if not exists:
                return []
            return builtins.list(self._conn.execute("SELECT name, applied_at FROM _memlane_migrations ORDER BY name"))

    def get_meta(self, name: str) -> str | None:
        """A value from the store's ``meta`` table."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, name: str, value: str) -> None:
        """Set a value in the store's ``meta`` table."""
        with self._write() as conn:
            conn.execute(
                "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (name, value),
            )

    # -- writes -----------------------------------------------------------

    def put_many(
        self, rows: Sequence[PutRow], now: datetime, *, if_absent: bool = False, mark: bool | None = False
    ) -> builtins.list[Item]:
        """Upsert rows in one transaction.

        New addresses are inserted with one ``executemany`` and indexed with one
        bulk FTS insert (a per-row trigger costs 2.5x in throughput); existing
        ones are updated, and the update triggers keep history and the index.
        With ``mark``, rows with text and no vector are marked for the indexer
        (``None``: if the store records an embedder, read in the same transaction).
        """
        at = c.ts(now)
        addresses = [("/".join(r.namespace), r.key) for r in rows]
        out: builtins.list[Item] = []
        with self._write() as conn:
            if mark is None:
                mark = conn.execute("SELECT 1 FROM meta WHERE name = 'embedder'").fetchone() is not None
            seq = None
            for start, stop in c.unique_spans(addresses):
                segment = rows[start:stop]
                out.extend(self._put_segment(conn, segment, addresses[start:stop], now, at, if_absent, mark))
                vectors = [(r.vector, "/".join(r.namespace), r.key) for r in segment if r.vector is not None]
                if vectors:
                    if seq is None:
                        seq = _next_vector_seq(conn)
                    conn.executemany(_PUT_VECTOR, [(seq, *v) for v in vectors])
                    conn.executemany(_UNMARK, [v[1:] for v in vectors])
        return out

    def _put_segment(
        self,
        conn: sqlite3.Connection,
        rows: Sequence[PutRow],
        addresses: Sequence[tuple[str, str]],
        now: datetime,
        at: str,
        if_absent: bool = False,
        mark: bool = False,
    ) -> builtins.list[Item]:
        """Write rows whose addresses are distinct: every row is inserted as new unless its address is taken.

        The insert skips taken addresses (``ON CONFLICT DO NOTHING``) and counts
        the rows it wrote: when every address was new (a bulk load), nothing else
        is read. Only the rows it skipped are read and updated (history keeps the
        old version). With ``if_absent`` the live rows are looked for first.
        """
        if if_absent:
            for addr, (_, _, _, expires) in self._existing(conn, addresses).items():
                if expires is None or expires > at:  # inside BEGIN IMMEDIATE: no writer slips in before the write
                    raise ConflictError(f"an item already exists at {addr[0]} key {addr[1]!r}")
        stored = c.stored_text
        fresh: builtins.list[tuple[Any, ...]] = []
        for r, addr in zip(rows, addresses, strict=True):
            # one tuple is both the row inserted (ITEM_COLUMNS) and the item returned, which decodes nothing
            # until it is read (a bulk writer mostly wants ids and versions)
            expires = None if r.expires_at is None else r.expires_at.isoformat(timespec="microseconds")
            text = stored(r.value, r.value_type, r.text)
            fresh.append(
                (r.id, *addr, r.value, r.value_type, text, r.metadata, r.author, at, at, expires, 1, r.indexed)
            )
        first = conn.execute("SELECT coalesce(max(rowid), 0) FROM items").fetchone()[0]
        inserted = conn.executemany(_INSERT_NEW, fresh).rowcount
        if inserted and any(r.indexed for r in rows):  # a batch written with index=False has nothing to index
            _index_new_rows(conn, first)
            if mark:
                conn.execute(
                    "INSERT INTO item_pending (item_rowid, version) SELECT rowid, 1 FROM items "
                    f"WHERE rowid > ? AND {c.to_embed_sql()}",
                    (first,),
                )
        item = Item.stored
        if inserted == len(fresh):
            return [item(row, r.namespace) for row, r in zip(fresh, rows, strict=True)]
        taken = self._existing(conn, addresses, after=first)
        out: builtins.list[Item] = []
        updates: builtins.list[tuple[Any, ...]] = []
        marked: builtins.list[tuple[str, str]] = []
        for r, addr, row in zip(rows, addresses, fresh, strict=True):
            old = taken.get(addr)
            if old is None:
                out.append(item(row, r.namespace))
                continue
            if old[3] is not None and old[3] <= at:  # an expired row, replaced by a new item
                item_id, created, version = r.id, at, 1
            else:
                item_id, created, version = old[0], old[1], old[2] + 1
            row = (item_id, *addr, *row[3:8], created, at, row[10], version, r.indexed)
            updates.append((item_id, created, version, *row[3:8], at, row[10], r.indexed, *addr))
            if mark and r.text and r.indexed:
                marked.append(addr)
            out.append(item(row, r.namespace))
        conn.executemany(
            "UPDATE items SET id = ?, created_at = ?, version = ?, value = ?, value_type = ?, text = ?, "
            "metadata = ?, author = ?, updated_at = ?, expires_at = ?, indexed = ? WHERE namespace = ? AND key = ?",
            updates,
        )
        if marked:
            conn.executemany(_MARK_UPDATED, marked)
        return out

    @staticmethod
    def _existing(
        conn: sqlite3.Connection, addresses: Sequence[tuple[str, str]], after: int | None = None
    ) -> dict[tuple[str, str], tuple[str, str, int, str | None]]:
        """``(id, created_at, version, expires_at)`` of the rows at these addresses (rowid at most ``after``)."""
        found: dict[tuple[str, str], tuple[str, str, int, str | None]] = {}
        older = "" if after is None else " AND items.rowid <= ?"
        for start in range(0, len(addresses), _CHUNK):
            chunk = addresses[start : start + _CHUNK]
            values = ",".join(["(?, ?)"] * len(chunk))
            sql = (
                f"WITH wanted (ns, k) AS (VALUES {values}) SELECT items.namespace, items.key, id, created_at, "
                f"version, expires_at FROM wanted JOIN items ON items.namespace = wanted.ns AND items.key = wanted.k"
                + older
            )
            params: builtins.list[Any] = [p for a in chunk for p in a]
            if after is not None:
                params.append(after)
            for ns, key, item_id, created, version, expires in conn.execute(sql, params):
                found[(ns, key)] = (item_id, created, version, expires)
        return found

    def delete(self, namespace: Namespace, key: str, now: datetime, author: str | None) -> bool:
        """Delete a live item, keeping it in history."""
        at = c.ts(now)
        ns = "/".join(namespace)
        with self._write() as conn:
            copied = conn.execute(
                _HISTORY_COPY + f"namespace = ? AND key = ? AND {_LIVE}",
                ("delete", at, author, ns, key, at),
            ).rowcount
            if copied:
                conn.execute("DELETE FROM items WHERE namespace = ? AND key = ?", (ns, key))
        return bool(copied)

    def delete_by_id(self, item_id: str, within: Within, now: datetime, author: str | None) -> bool:
        """Delete the live item with this id inside ``within``, keeping it in history (as :meth:`delete`)."""
        at = c.ts(now)
        where, params = self._filter(within, "", now)
        with self._write() as conn:
            copied = conn.execute(
                _HISTORY_COPY + f"id = ? AND {where}", ("delete", at, author, item_id, *params)
            ).rowcount
            if copied:
                conn.execute("DELETE FROM items WHERE id = ?", (item_id,))
        return bool(copied)

    def clear(self, prefix: Namespace, now: datetime, author: str | None) -> int:
        """Delete everything under a prefix; live items go to history."""
        at = c.ts(now)
        rng = c.ns_range(prefix)
        with self._write() as conn:
            copied = conn.execute(_HISTORY_COPY + f"{_IN_NS} AND {_LIVE}", ("clear", at, author, *rng, at)).rowcount
            conn.execute(f"DELETE FROM items WHERE {_IN_NS}", rng)
        return copied

    def cleanup(self, now: datetime) -> int:
        """Physically delete expired rows."""
        with self._write() as conn:
            return conn.execute(
                "DELETE FROM items WHERE expires_at IS NOT NULL AND expires_at <= ?", (c.ts(now),)
            ).rowcount

    # -- exact reads ------------------------------------------------------

    def exists(self, namespace: Namespace, key: str, now: datetime | Callable[[], datetime]) -> bool:
        """Whether a live item is at an address: its expiry read, never its value."""
        with self._lock:
            self._check_open()
            row = self._conn.execute(_EXISTS, ("/".join(namespace), key)).fetchone()
        return row is not None and (row[0] is None or row[0] > c.ts(now if isinstance(now, datetime) else now()))

    def get(self, namespace: Namespace, key: str, now: datetime | Callable[[], datetime]) -> Item | None:
        """The live item at an address."""
        with self._lock:
            self._check_open()
            row = self._conn.execute(_GET, ("/".join(namespace), key)).fetchone()
        # expiry is checked here rather than in SQL so the common no-TTL read
        # skips reading and formatting the clock: a measurable share of a point lookup
        if row is None or (row[10] is not None and row[10] <= c.ts(now if isinstance(now, datetime) else now())):
            return None
        return c.row_to_item(row, namespace)

    def get_by_id(self, item_id: str, within: Within, now: datetime) -> Item | None:
        """The live item with this id inside ``within``: one statement over the ``items_id`` index."""
        where, params = self._filter(within, "", now)
        with self._lock:
            self._check_open()
            row = self._conn.execute(
                f"SELECT {c.ITEM_COLUMNS} FROM items WHERE id = ? AND {where}", (item_id, *params)
            ).fetchone()
        return None if row is None else c.row_to_item(row)

    def get_many(self, addresses: Sequence[tuple[Namespace, str]], now: datetime) -> builtins.list[Item | None]:
        """Many addresses; each chunk of 400 is one statement, all in one snapshot."""
        at = c.ts(now)
        found: dict[tuple[str, str], Item] = {}
        texts = [("/".join(ns), k) for ns, k in addresses]
        with self._snapshot() as conn:
            for start in range(0, len(texts), _CHUNK):
                chunk = texts[start : start + _CHUNK]
                values = ",".join(["(?, ?)"] * len(chunk))
                params: builtins.list[Any] = [p for addr in chunk for p in addr]
                params.append(at)
                sql = (
                    f"WITH wanted (ns, k) AS (VALUES {values}) "
                    f"SELECT {c.ITEM_COLUMNS.replace('namespace', 'items.namespace')} FROM wanted "
                    f"JOIN items ON items.namespace = wanted.ns AND items.key = wanted.k WHERE {_LIVE}"
                )
                for row in conn.execute(sql, params):
                    found[(row[1], row[2])] = c.row_to_item(row)
        return [found.get(addr) for addr in texts]

    def fetch(
        self, key: str, within: Within, limit: int, now: datetime, conditions: Sequence[Any] = ()
    ) -> builtins.list[Item]:
        """Same key across namespaces, newest first, ties broken by namespace.

        ``items_key (key, updated_at)`` answers it newest first, stopping at
        ``limit``; but inside one prefix, a key that many namespaces hold (a
        profile per user) would be walked through all of them to find the few
        in scope. So when the key is that common (``_FETCH_PROBE`` rows or more)
        and the prefix small (fewer rows), the prefix's range of the ``(namespace,
        key)`` index is read instead. Each probe stops at ``_FETCH_PROBE`` rows.
        """
        params: builtins.list[Any] = [key, c.ts(now)]
        where = f"key = ? AND {_LIVE}"
        inside, inside_params = c.within_filter(within)
        if inside:
            where += f" AND {inside}"
            params.extend(inside_params)
        meets = ""
        if conditions:
            from . import where_sql

            test, test_params = where_sql.sqlite_sql(builtins.list(conditions))
            meets = f" AND {test}"
            params.extend(test_params)
        params.append(limit)
        with self._lock:
            self._check_open()
            conn = self._conn
            if len(within) == 1 and within[0] and self._fetch_by_namespace(conn, key, within[0]):
                where = "+" + where  # the unary plus keeps the planner off items_key
            sql = f"SELECT {c.ITEM_COLUMNS} FROM items WHERE {where}{meets} ORDER BY updated_at DESC, namespace LIMIT ?"
            rows = conn.execute(sql, params).fetchall()
        return [c.row_to_item(r) for r in rows]

    @staticmethod
    def _fetch_by_namespace(conn: sqlite3.Connection, key: str, prefix: Namespace) -> bool:
        """Whether a key is held by more rows than a prefix has (each count stopping at ``_FETCH_PROBE``)."""
        probe = "SELECT count(*) FROM (SELECT 1 FROM items WHERE {} LIMIT ?)"
        common = conn.execute(probe.format("key = ?"), (key, _FETCH_PROBE)).fetchone()[0]
        if common < _FETCH_PROBE:
            return False
        return bool(conn.execute(probe.format(_IN_NS), (*c.ns_range(prefix), _FETCH_PROBE)).fetchone()[0] < common)

    def _filter(self, within: Within, key_prefix: str, now: datetime) -> tuple[str, builtins.list[Any]]:
        return c.live_filter(within, key_prefix, now, "?")

    def list(
        self,
        within: Within,
        key_prefix: str,
        limit: int,
        after: tuple[Namespace, str] | None,
        now: datetime,
    ) -> builtins.list[Item]:
        """Items in address order after a cursor position."""
        sql, params = c.list_statement(within, key_prefix, after, limit, now, "?")
        with self._lock:
            self._check_open()
            rows = self._conn.execute(sql, params).fetchall()
        return [c.row_to_item(r) for r in rows]

    def namespaces(self, within: Within, now: datetime) -> builtins.list[Namespace]:
        """Distinct live namespaces inside ``within``, one index seek per namespace (see ``skip_scan``)."""
        sql, params = c.skip_scan(within, now, "?")
        with self._lock:
            self._check_open()
            rows = self._conn.execute(sql, params).fetchall()
        return sorted(c.ns_tuple(r[0]) for r in rows)

    def addresses(self, within: Within, key_prefix: str, now: datetime) -> Iterator[tuple[Namespace, str]]:
        """Every live address inside ``within`` under a key prefix."""
        where, params = self._filter(within, key_prefix, now)
        with self._lock:
            self._check_open()
            rows = self._conn.execute(
                f"SELECT namespace, key FROM items WHERE {where} ORDER BY namespace, key", params
            ).fetchall()
        for ns, key in rows:
            yield c.ns_tuple(ns), key

    def history(self, namespace: Namespace, key: str) -> builtins.list[Version]:
        """Past versions, newest first."""
        with self._lock:
            self._check_open()
            rows = self._conn.execute(
                f"SELECT {c.HISTORY_COLUMNS} FROM item_history WHERE namespace = ? AND key = ? ORDER BY seq DESC",
                ("/".join(namespace), key),
            ).fetchall()
        return [c.row_to_version(r) for r in rows]

    def stats(self, now: datetime) -> Stats:
        """Counts and file size."""
        at = c.ts(now)
        with self._snapshot() as conn:
            active, expired = conn.execute(
                f"SELECT coalesce(sum({_LIVE}), 0), count(*) - coalesce(sum({_LIVE}), 0) FROM items",
                (at, at),
            ).fetchone()
            namespaces = conn.execute(f"SELECT count(DISTINCT namespace) FROM items WHERE {_LIVE}", (at,)).fetchone()[0]
            history = conn.execute("SELECT count(*) FROM item_history").fetchone()[0]
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            schema = conn.execute("SELECT count(*) FROM _memlane_migrations").fetchone()[0]
        return Stats(
            backend=self.backend,
            location=self._path,
            active_items=active,
            expired_items=expired,
            namespaces=namespaces,
            history_versions=history,
            size_bytes=pages * page_size,
            schema_version=schema,
        )

    # -- ranked reads -----------------------------------------------------

    def lexical(
        self, terms: Sequence[str], within: Within, k: int, where: Sequence[Any] = ()
    ) -> builtins.list[Nomination]:
        """BM25 over ``items.text`` and the address words inside ``within``; terms are quoted and OR-ed.

        What a scoped search returns depends on the scope's rows only, and its
        cost on the scope, not the store:

        * a scope of fewer than ``min(SCOPE_DRIVEN_ROWS, LEXICAL_CAP)``
          indexed rows is ranked from its own rows (those meeting ``where``), found
          through FTS5's intersection with the scope's address words
          (``_scope_match``) or looked up one by one, never by walking a common
          word's postings, and scored by FTS5's BM25 formula with the scope's
          own row count, document frequencies and mean length (``_scope_bm25``);
        * in a larger scope, a word in ``LEXICAL_CAP`` rows and in
          ``COMMON_SHARE`` of the scope's rows (judged on them: ``_common_in``)
          is left out of the query when rarer words exist (its IDF is near
          zero; rows holding a rarer word are all still candidates); when every
          word is that common, BM25 cannot tell the rows apart (and FTS5 would
          read every posting to compute its IDF): the newest ``k`` rows of the
          scope holding any of them are nominated, all with score 0. Other
          scores there are FTS5's, whose IDF and mean length are the store's.

        Unscoped, the scope is the store: a word is common by the store's own
        counts (``_bounded``).
        """
        if not terms:
            return []
        inside, inside_params = c.within_filter(within, column="items.namespace")
        # the scope alone decides the way (a ``where`` is tested on the rows found, never on the whole scope first);
        # a ``where`` without a scope is tested on the rows FTS5 matched, as over the whole store
        scope, scope_params = inside, inside_params
        scoped = bool(scope)
        if where:  # part of the joined statement: the k ranked are the best among the items meeting it
            from . import where_sql

            test, test_params = where_sql.sqlite_sql(builtins.list(where))
            inside = f"{inside} AND {test}" if inside else test
            inside_params = [*inside_params, *test_params]
        bm25 = f"bm25(items_fts, 1.0, {ADDRESS_WEIGHT})"
        cap = max(LEXICAL_CAP, k)
        with self._lock:
            self._check_open()
            conn = self._conn
            own = not conn.in_transaction  # its statements read one snapshot
            if own:
                conn.execute("BEGIN")
            try:
                asked = terms
                scope_match = _scope_match(within) if scoped else None
                if scoped:
                    rows_in = _scope_rows(conn, scope, scope_params, 2 * cap)
                    if rows_in < min(SCOPE_DRIVEN_ROWS, cap):
                        return _scope_bm25(conn, terms, inside, inside_params, k, scope_match)
                    # below the cap no word can be in cap rows of the scope: none is common
                    if rows_in >= cap:
                        terms, common = _common_in(conn, terms, scope, scope_params, scope_match, cap, rows_in)
                    else:
                        common = False
                else:
                    terms, common = self._bounded(terms, cap)
                if not terms:
                    return []
                match = " OR ".join(_quoted(t) for t in terms)
                if common:
                    # newest first and nothing else: FTS5 then walks its rowids backwards and stops at k (a second,
                    # repeated ORDER BY term made SQLite sort every match: 0.9 s at 1M rows); in a scope, only the
                    # postings of its own rows (no score to distort with the scope's words)
                    rank, order = "0.0", "items_fts.rowid DESC"
                    match = _within_scope(match, scope_match)
                else:
                    rank, order = bm25, f"{bm25}, items_fts.rowid DESC"
                if where and not common:
                    # ranked by the index alone in windows, each window's rows tested in one statement: the cost
                    # follows the rows read, not every match (the joined statement below tests them all)
                    rows = _lexical_windows(conn, match, inside, inside_params, k)
                elif inside:
                    rows = _lexical_joined(conn, match, rank, order, inside, inside_params, k)
                else:
                    # rank the index alone, then read id and version of the top k (one statement, one snapshot)
                    sql = (
                        f"SELECT items.id, f.score, items.version FROM (SELECT rowid, {rank} AS score "
                        f"FROM items_fts WHERE items_fts MATCH ? ORDER BY {order} LIMIT ?) AS f "
                        "JOIN items ON items.rowid = f.rowid ORDER BY f.score, f.rowid DESC"
                    )
                    rows = conn.execute(sql, (match, k)).fetchall()
                dropped = [t for t in asked if t not in terms]
                if where and dropped and len(rows) < k:
                    # the common terms left out: the items meeting ``where`` may hold only them (their IDF is near
                    # zero: after the rest, newest first, score 0), else a filtered search finds fewer than it may
                    found = {r[0] for r in rows}
                    more = conn.execute(
                        "SELECT items.id, 0.0, items.version FROM items_fts JOIN items ON items.rowid = "
                        f"items_fts.rowid WHERE items_fts MATCH ? AND {inside} ORDER BY items_fts.rowid DESC LIMIT ?",
                        (_within_scope(" OR ".join(_quoted(t) for t in dropped), scope_match), *inside_params, k),
                    ).fetchall()
                    rows += [r for r in more if r[0] not in found][: k - len(rows)]
            except sqlite3.OperationalError as e:
                raise StoreError(f"full-text search failed: {e}") from e
            finally:
                if own:
                    conn.execute("COMMIT")
        return [(item_id, -score, version) for item_id, score, version in rows]

    def _bounded(self, terms: Sequence[str], cap: int) -> tuple[builtins.list[str], bool]:
        """The terms worth ranking over the whole store, and whether all of them are common (see ``lexical``).

        A term is common when its first ``cap`` matches come from rows among
        which it is nearly everywhere (``COMMON_SHARE``): rowids are dense, so
        ``cap / highest rowid seen`` estimates its share without reading more
        than ``cap`` postings. Its BM25 IDF is then below 0.11. Only for an
        unscoped search: a scoped one judges by the scope's rows (``_common_in``).
        """
        present: builtins.list[str] = []
        common: set[str] = set()
        for t in terms:
            n, last = self._conn.execute(
                "SELECT count(*), max(rowid) FROM (SELECT rowid FROM items_fts WHERE items_fts MATCH ? LIMIT ?)",
                (_quoted(t), cap),
            ).fetchone()
            if n:
                present.append(t)
                if n >= cap and n >= COMMON_SHARE * last:
                    common.add(t)
        rare = [t for t in present if t not in common]
        if rare or not present:
            return rare, False
        return present, True

    def document_counts(self, terms: Sequence[str], within: Within, limit: int) -> tuple[int, dict[str, int]]:
        """Rows in scope and rows containing each term (text or address), each count stopping at ``limit``.

        The cost follows the scope, not the store: a scope of a few prefixes
        finds a word's rows through FTS5's own intersection with the scope's
        address words (``_scope_match``); another scope of fewer than
        ``SCOPE_DRIVEN_ROWS`` rows looks each of its rows up in the index (a
        seek). Otherwise, and over the whole store, the word's postings are
        walked until ``limit`` are found in scope.
        """
        inside, inside_params = c.scope_ranges(within, column="items.namespace")
        where = f"WHERE {inside}" if inside else ""
        counts: dict[str, int] = {}
        with self._lock:
            self._check_open()
            conn = self._conn
            scope_match = _scope_match(within) if inside else None
            seen = conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM items {where} LIMIT ?)",
                (*inside_params, max(limit, SCOPE_DRIVEN_ROWS if inside and terms and not scope_match else 0)),
            ).fetchone()[0]
            by_rows = bool(inside) and scope_match is None and seen < SCOPE_DRIVEN_ROWS
            for term in terms:
                try:
                    if by_rows:
                        counts[term] = conn.execute(
                            "SELECT count(*) FROM (SELECT 1 FROM items CROSS JOIN items_fts ON items_fts.rowid = "
                            f"items.rowid WHERE {inside} AND items_fts MATCH ? LIMIT ?)",
                            (*inside_params, _quoted(term), limit),
                        ).fetchone()[0]
                    elif inside:
                        counts[term] = _in_scope_count(conn, term, inside, inside_params, scope_match, limit)
                    else:
                        counts[term] = conn.execute(
                            "SELECT count(*) FROM (SELECT 1 FROM items_fts WHERE items_fts MATCH ? LIMIT ?)",
                            (_quoted(term), limit),
                        ).fetchone()[0]
                except sqlite3.OperationalError as e:
                    raise StoreError(f"full-text search failed: {e}") from e
        return min(seen, limit), counts

    def hydrate(self, ids: Sequence[str], within: Within, now: datetime, where: Sequence[Any] = ()) -> dict[str, Item]:
        """Live rows inside ``within`` meeting ``where`` for candidate item ids (one statement, so one snapshot)."""
        from . import where_sql

        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        live, params = self._filter(within, "", now)
        test, test_params = where_sql.sqlite_sql(builtins.list(where))
        params = [*params, *test_params]
        sql = f"SELECT {c.ITEM_COLUMNS} FROM items WHERE id IN ({marks}) AND indexed AND {live} AND {test}"
        with self._lock:
            self._check_open()
            rows = self._conn.execute(sql, (*ids, *params)).fetchall()
        return {r[0]: c.row_to_item(r) for r in rows}

    # -- vectors ----------------------------------------------------------

    def _shared_vectors(self) -> SharedVectors:
        """This store's view of the shared vector index (see :mod:`memlane.store.vector_index`)."""
        from .vector_index import SharedVectors

        if self._vectors is None:
            path = None if self._path == ":memory:" else self._path
            self._vectors = SharedVectors(path, writable=self._read_only is None)
        return self._vectors

    def vector(
        self, query: Sequence[float], within: Within, k: int, where: Sequence[Any] = ()
    ) -> builtins.list[Nomination]:
        """Cosine nomination inside ``within``: ``(id, similarity, version_embedded)`` best first, ties by ref.

        The shared index (memory-mapped, one per store) ranks what it holds, the database's newer vectors are
        scored exactly beside it, and every row it nominates is re-checked against ``item_vectors``.
        With ``where``, the top ``k`` are the best among the items meeting it: the ranking is read down in
        growing windows, each tested against the filter (and re-checked) in one statement, until ``k`` rows
        meet it; when that has read a quarter of the scope (a selective filter), the rows meeting it inside the
        scope are read instead (one statement) and only those are ranked.
        """
        from .vector_index import CorruptIndex, fold

        with self._lock:
            self._check_open()
            shared = self._shared_vectors()
            if shared.delta is None and shared.writable and shared.gen is None:
                self._first_fold(shared)
            for attempt in (0, 1):
                try:
                    hits = self._vector_search(shared, query, within, k, where)
                    break
                except CorruptIndex:  # condemned: answer from the database's vectors instead
                    if attempt:
                        raise
            if shared.fold_due():  # no indexer folded the newer vectors in (or the index is unsound): do it here
                rebuild, shared.needs_rebuild = shared.needs_rebuild, False
                try:
                    fold(self._path, min_delta=0 if rebuild else None, rebuild=rebuild, graph=False)
                except (OSError, sqlite3.Error, CorruptIndex) as e:
                    _log.warning("vector index fold for %s failed: %s", self._path, e)
        return [(item_id, score, version) for _, item_id, score, version in hits]

    def _first_fold(self, shared: SharedVectors) -> None:
        """Before a process's first search loads vectors privately: build the shared index if there is none."""
        from .vector_index import FOLD_MIN, CorruptIndex, current_name, fold

        assert shared.folder is not None
        if current_name(shared.folder) is not None:
            return
        if self._conn.execute("SELECT count(*) FROM item_vectors").fetchone()[0] < FOLD_MIN:
            return
        deadline = time.monotonic() + 2.0  # another process building it: wait a while for its generation
        try:
            while not fold(self._path, min_delta=0, graph=False) and current_name(shared.folder) is None:
                if time.monotonic() > deadline:
                    return  # still not there: this search scans privately, as without an index
                time.sleep(0.05)
        except (OSError, sqlite3.Error, CorruptIndex) as e:
            _log.warning("building the vector index of %s failed: %s", self._path, e)

    def _vector_search(
        self, shared: SharedVectors, query: Sequence[float], within: Within, k: int, where: Sequence[Any]
    ) -> builtins.list[tuple[int, str, float, int]]:
        import numpy as np

        from . import where_sql
        from .vector_index import TooSelective

        conn = self._conn
        conn.execute("BEGIN")  # one snapshot: the delta, the re-checks and the filter agree
        try:
            seen = (conn.execute("PRAGMA data_version").fetchone()[0], self._own_writes)
            shared.refresh(conn, len(query), seen)
            if not where:
                return shared.search(conn, query, within, k)
            inside, inside_params = c.within_filter(within, column="items.namespace")
            test, test_params = where_sql.sqlite_sql(builtins.list(where))
            scoped = f"{inside + ' AND ' if inside else ''}{test}"
            try:  # the ranking (the graph's candidates first, where it is asked) read down, each window tested
                return shared.search(conn, query, within, k, test=(scoped, [*inside_params, *test_params]))
            except TooSelective:  # few rows meet it: read those first, rank only them
                pass
            found = conn.execute(f"SELECT rowid FROM items WHERE {scoped}", [*inside_params, *test_params])
            rows = found.fetchall()
            refs = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            return shared.search(conn, query, within, k, refs)
        finally:
            conn.execute("COMMIT")

    def fold_vectors(self, *, min_delta: int | None = None, blocking: bool = False) -> bool:
        """Fold the vectors written since the shared index's generation into a new one, when enough wait.

        The write-behind indexer calls this after its batches; ``True`` when a generation was published.
        """
        from .vector_index import CorruptIndex, enabled, fold

        if self._path == ":memory:" or self._read_only is not None or not enabled():
            return False
        try:
            return fold(self._path, min_delta=min_delta, blocking=blocking)
        except (OSError, sqlite3.Error, CorruptIndex) as e:
            _log.warning("vector index fold for %s failed: %s", self._path, e)
            return False

    def vector_cache_bytes(self) -> int:
        """Private memory held for vector search: the vectors newer than the shared index (which is mapped)."""
        return 0 if self._vectors is None else self._vectors.nbytes

    def vector_backlog(self, limit: int, *, after: int = 0) -> builtins.list[tuple[int, int, str]]:
        """Items whose vector is missing or older than the item: ``(ref, version, text)``."""
        with self._lock:
            self._check_open()
            return self._conn.execute(
                f"SELECT i.rowid, i.version, {c.text_sql('sqlite', 'i.')} FROM items i "
                "LEFT JOIN item_vectors v ON v.item_rowid = i.rowid "
                f"WHERE i.rowid > ? AND {c.to_embed_sql('i.')} AND (v.item_rowid IS NULL OR v.version <> i.version) "
                "ORDER BY i.rowid LIMIT ?",
                (after, limit),
            ).fetchall()

    def stored_dimension(self) -> int | None:
        """The dimension of one stored item vector (float32: 4 bytes each), or ``None``."""
        with self._lock:
            self._check_open()
            row = self._conn.execute("SELECT length(embedding) / 4 FROM item_vectors LIMIT 1").fetchone()
        return None if row is None else int(row[0])

    def count_vectors(self) -> tuple[int, int]:
        """``(items with a current vector, items without one)``."""
        with self._lock:
            self._check_open()
            current, total = self._conn.execute(
                "SELECT (SELECT count(*) FROM item_vectors v JOIN items i ON i.rowid = v.item_rowid "
                f"AND i.version = v.version), (SELECT count(*) FROM items WHERE {c.to_embed_sql()})"
            ).fetchone()
        return current, total - current

    def put_vectors(self, rows: Sequence[tuple[int, int, bytes]]) -> int:
        """Store vectors for ``(ref, version, blob)``; skipped where the item moved on since."""
        with self._write() as conn:
            written = _put_vectors_at(conn, rows)
            conn.executemany(
                "DELETE FROM item_pending WHERE item_rowid = ? AND version = ?", [(r, v) for r, v, _ in rows]
            )
            return written

    def drop_vectors(self) -> None:
        """Delete every vector (before a rebuild with another embedder)."""
        with self._write() as conn:
            conn.execute("DELETE FROM item_vectors")

    # -- write-behind indexing --------------------------------------------

    def mark_missing(self) -> int:
        """Mark every item with text whose vector is missing or stale and that is not marked yet."""
        with self._lock:  # look first without the writer lock: every indexer scans once, and mostly finds none
            self._check_open()
            if self._conn.execute(f"SELECT 1 {_MISSING} LIMIT 1").fetchone() is None:
                return 0
        with self._write() as conn:
            return conn.execute(
                f"INSERT INTO item_pending (item_rowid, version) SELECT i.rowid, i.version {_MISSING}"
            ).rowcount

    def claim_pending(
        self, limit: int, owner: str, lease_s: float, within: Within | None = None
    ) -> builtins.list[tuple[int, int, str, int]]:
        """Claim up to ``limit`` marks no live lease holds: ``(ref, version, text, mark_version)``.

        The claim is one writer transaction, so two processes never claim the
        same mark while its lease runs; a lease past ``claimed_until`` (its
        holder crashed) is claimed again. ``within``: only marks of items under
        those prefixes (a search embedding its own scope first).
        """
        now = time.time()
        free = "(p.claimed_until IS NULL OR p.claimed_until < ?)"
        inside, inside_params = c.within_filter([()] if within is None else within, column="i.namespace")
        scoped = f" AND {inside}" if inside else ""
        with self._lock:  # an idle indexer looks without taking the writer lock
            self._check_open()
            if (
                self._conn.execute(
                    f"SELECT 1 FROM item_pending p JOIN items i ON i.rowid = p.item_rowid WHERE {free}{scoped} LIMIT 1",
                    (now, *inside_params),
                ).fetchone()
                is None
            ):
                return []
        with self._write() as conn:
            rows = conn.execute(
                f"SELECT p.item_rowid, i.version, {c.text_sql('sqlite', 'i.')}, p.version FROM item_pending p "
                f"JOIN items i ON i.rowid = p.item_rowid WHERE {free}{scoped} ORDER BY p.item_rowid LIMIT ?",
                (now, *inside_params, limit),
            ).fetchall()
            conn.executemany(
                "UPDATE item_pending SET claimed_until = ?, claimed_by = ? WHERE item_rowid = ?",
                [(now + lease_s, owner, r[0]) for r in rows],
            )
        return rows

    def finish_pending(self, done: Sequence[tuple[int, int, bytes | None, int]], owner: str) -> int:
        """Store the vectors of claimed items still at the embedded version and clear their marks.

        ``done`` holds ``(ref, version, blob, mark_version)`` (blob ``None``:
        nothing to embed). A mark re-made by a write since the claim (another
        version) stays, released, for the next claim; returns the vectors written.
        """
        with self._write() as conn:
            written = _put_vectors_at(
                conn, [(ref, version, blob) for ref, version, blob, _ in done if blob is not None]
            )
            conn.executemany(
                "DELETE FROM item_pending WHERE item_rowid = ? AND version = ?", [(d[0], d[3]) for d in done]
            )
            conn.executemany(
                "UPDATE item_pending SET claimed_until = NULL, claimed_by = NULL "
                "WHERE item_rowid = ? AND claimed_by = ?",
                [(d[0], owner) for d in done],
            )
        return written

    def release_pending(self, owner: str) -> None:
        """Give back every mark ``owner`` still holds (an indexer stopping cleanly)."""
        with self._write() as conn:
            conn.execute(
                "UPDATE item_pending SET claimed_until = NULL, claimed_by = NULL WHERE claimed_by = ?", (owner,)
            )

    def count_pending(self, within: Within) -> int:
        """Marks of items inside ``within`` still waiting for a vector.

        Usually the backlog is short and the table long: the marks are read first (CROSS JOIN keeps that
        order). A long backlog (a bulk load being embedded) and a small scope are counted the other way, the
        scope's rows through their index ranges, each looked up among the marks: a search of an agent's five
        items then no longer reads 300,000 marks of other namespaces.
        """
        inside, params = c.within_filter(within, column="i.namespace")
        sql = "SELECT count(*) FROM item_pending p"
        if inside:
            sql += f" CROSS JOIN items i ON i.rowid = p.item_rowid WHERE {inside}"
        with self._lock:
            self._check_open()
            conn = self._conn
            if inside and len(within) <= c.SMALL_SCOPE:
                long = conn.execute(_BACKLOG_PROBE, (_LONG_BACKLOG,)).fetchone()[0] >= _LONG_BACKLOG
                if long:
                    ranges, params = c.scope_ranges(within, column="i.namespace")
                    sql = "SELECT count(*) FROM items i CROSS JOIN item_pending p ON p.item_rowid = i.rowid "
                    sql += f"WHERE {ranges}"
            return int(conn.execute(sql, params).fetchone()[0])

    # -- export / import --------------------------------------------------

    def export_records(self) -> Iterator[dict[str, Any]]:
        """Items in address order, then history oldest first."""
        with self._snapshot() as conn:
            items = conn.execute(f"SELECT {c.ITEM_COLUMNS} FROM items ORDER BY namespace, key").fetchall()
            versions = conn.execute(f"SELECT {c.HISTORY_COLUMNS} FROM item_history ORDER BY seq").fetchall()
        for r in items:
            yield c.item_record(r)
        for r in versions:
            yield c.version_record(r)

    def import_records(
        self, records: Iterable[dict[str, Any]], now: datetime, *, numbers: Iterable[int] | None = None
    ) -> int:
        """Write exported records verbatim in one transaction; returns rows written.

        Idempotent: a row already present exactly as exported is skipped, so
        importing the same file twice changes nothing. An address holding a
        different live row is replaced; that row goes to history as ``import``.
        """
        at = c.ts(now)
        written = 0
        with self._write() as conn:
            for kind, row in c.import_rows(records, numbers):
                if kind == "item":
                    ns, key = row[1], row[2]
                    current = conn.execute(
                        f"SELECT {c.ITEM_COLUMNS} FROM items WHERE namespace = ? AND key = ?", (ns, key)
                    ).fetchone()
                    if current == row:
                        continue
                    if current is not None:
                        conn.execute(_HISTORY_COPY + "namespace = ? AND key = ?", ("import", at, None, ns, key))
                        conn.execute("DELETE FROM items WHERE namespace = ? AND key = ?", (ns, key))
                    try:
                        ref = conn.execute(
                            f"INSERT INTO items ({c.ITEM_COLUMNS}) VALUES ({','.join('?' * 13)})", row
                        ).lastrowid
                    except sqlite3.IntegrityError as e:
                        raise ConflictError(c.id_taken(row[0], ns, key)) from e
                    if row[12]:  # indexed one by one: a deleted row's rowid may be reused, so a range would miss it
                        text = c.full_text(c.loads_json(row[3]), row[4], row[3], row[5])
                        conn.execute(
                            "INSERT INTO items_fts (rowid, text, address) VALUES (?, ?, ?)",
                            (ref, text, f"{ns} {key}"),
                        )
                else:
                    exists = conn.execute(
                        "SELECT 1 FROM item_history "
                        "WHERE item_id = ? AND version = ? AND change = ? AND changed_at = ?",
                        (row[0], row[11], row[12], row[13]),
                    ).fetchone()
                    if exists:
                        continue
                    conn.execute(f"INSERT INTO item_history ({c.HISTORY_COLUMNS}) VALUES ({','.join('?' * 15)})", row)
                written += 1
        return written

    @contextmanager
    def session(self, *, write: bool = False) -> Iterator[c.SqlSession]:
        """A transaction (``write``) or snapshot for the facts layer's portable SQL."""
        try:
            with self._write() if write else self._snapshot(refuse_writes=True) as conn:
                yield c.SqlSession(conn, "sqlite")
        except sqlite3.Error as e:
            raise StoreError(f"SQLite error: {e}") from e

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._checkpointer is not None:
                    self._checkpointer.close()
                self._conn.close()
                runner = getattr(self, "_query_runner", None)
                if runner is not None:
                    runner.close()

    # -- query space (memlane.domain.query) ---------------------------------

    def query_connection(self) -> sqlite3.Connection:
        """A new connection to the same file, opened read-only (``mode=ro``), for the query space."""
        if self._path == ":memory:":
            from ..values.errors import BackendUnavailableError

            raise BackendUnavailableError(
                "the query space reads through a second, read-only connection, which an in-memory SQLite store "
                "cannot have; open a file instead"
            )
        uri = self._ro_uri()
        try:
            return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open {self._path!r} read-only for the query space: {e}") from e

    def query_runner(self) -> Any:
        """The query space's runner (:class:`memlane.store.runner.SqliteRunner`), made once, closed with the store."""
        with self._lock:
            self._check_open()
            runner = getattr(self, "_query_runner", None)
            if runner is None:
                from .runner import SqliteRunner

                runner = self._query_runner = SqliteRunner(self)
            return runner

    # -- conditions on values (Memory.select) ---------------------------------

    def select(
        self, within: Within, where: Sequence[Any], order: str, limit: int, offset: int, now: datetime
    ) -> builtins.list[Item]:
        """Live items inside ``within`` meeting ``where`` (json_type/json_extract, bound paths), paged."""
        from . import where_sql as w

        live, params = self._filter(within, "", now)
        test, test_params = w.sqlite_sql(builtins.list(where))
        ordering = "updated_at DESC, namespace, key" if order == "updated_desc" else "namespace, key"
        sql = f"SELECT {c.ITEM_COLUMNS} FROM items WHERE {live} AND {test} ORDER BY {ordering} LIMIT ? OFFSET ?"
        with self._lock:
            self._check_open()
            rows = self._conn.execute(sql, [*params, *test_params, limit, offset]).fetchall()
        return [c.row_to_item(r) for r in rows]
