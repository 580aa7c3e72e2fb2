"""PostgreSQL backend: the same memory on a server, for many processes and machines.

Design (the SQLite backend's, translated):

* ``items`` holds one live row per address with ``UNIQUE(namespace, key)``.
  Names and times are ``COLLATE "C"`` text, so ordering, cursors and the
  segment-boundary prefix ranges behave byte for byte as on SQLite.
* Upsert is ``INSERT .. ON CONFLICT DO UPDATE .. RETURNING``: atomic under
  concurrent writers (two processes replacing one address serialise on the
  row lock), and an ``AFTER UPDATE`` trigger writes history, as on SQLite.
* Lexical search uses a stored ``tsvector`` (the ``memlane`` configuration:
  English Snowball stemming without stop words, like SQLite's porter
  tokenizer) with a GIN index. Ranking is
  ``ts_rank`` with length normalisation, weighted per query term by an
  inverse document frequency computed from the matching rows, a BM25-like
  score; docs/backends.md compares its quality with SQLite's BM25.
* ``items.text`` is NULL where the text is the value's own (stored once, see
  ``_common.stored_text``); the ``tsvector`` reads it rebuilt (``_common.text_sql``).
* Vectors live in ``item_vectors`` as ``pgvector`` values, searched with an
  HNSW index (cosine) once the embedder's dimension is known. Without the
  extension everything else works and the vector channel raises
  :class:`~memlane.values.errors.BackendUnavailableError` naming it.
* A ``psycopg_pool`` connection pool; every write is one transaction.
"""

from __future__ import annotations

import asyncio
import builtins
import math
import os
import re
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, nullcontext
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeVar

from ..values.errors import (
    BackendUnavailableError,
    ConflictError,
    SchemaVersionError,
    StorageFullError,
    StoreError,
    StoreUnavailableError,
)
from ..values.model import Item, Namespace, Stats, Version
from . import _common as c
from . import access_tables, facts_schema, query_space, retention_tables
from .base import ACCESS_HEAD, Nomination, PutRow, Store, Within

try:  # the postgres extra
    import psycopg
    from psycopg_pool import ConnectionPool
except ImportError:  # pragma: no cover - exercised only without the extra
    psycopg = None  # type: ignore[assignment]
    ConnectionPool = None  # type: ignore[assignment,misc]

# the tsvector of very long texts would pass PostgreSQL's 1 MB tsvector limit
LEXICAL_CHARS = 200_000
_LIVE = "(expires_at IS NULL OR expires_at > %s)"
_IN_NS = "(namespace = %s OR (namespace >= %s AND namespace < %s))"
_IN_KEY = "(key = %s OR (key >= %s AND key < %s))"
_EXPIRED_OLD = "(items.expires_at IS NOT NULL AND items.expires_at <= excluded.updated_at)"
_CHUNK = 1000

_HISTORY_INSERT = (
    "INSERT INTO item_history (item_id, namespace, key, value, value_type, text, metadata, author, "
    "created_at, updated_at, expires_at, version, change, changed_at, changed_by) "
)
_HISTORY_ROW = _HISTORY_INSERT + "VALUES (" + ", ".join(["%s"] * 15) + ")"

# a stored text that is the value's own (c.stored_text), for rows written before m010; a string holding
# NUL (JSON \\u0000, which jsonb refuses) never is: its text has spaces for the NULs
_ELIDABLE = (
    "CASE WHEN value_type <> 'string' THEN text = value WHEN position('\\u0000' in value) > 0 THEN false "
    "ELSE text = (value::jsonb #>> '{}') END"
)

_ADDRESS_WORDS = (
    "setweight(to_tsvector('memlane', regexp_replace(namespace || ' ' || key, '[^[:alnum:]]+', ' ', 'g')), 'C')"
)
# The lexical column as of m013: rows written with index=False have none, so the partial GIN index holds
# only what search may find. m013 makes it; migrate() makes it again where a migration listed before m013
# but applied after it (m010, on a store that applied m013 first) made it its own way.
_INDEXED_TSV = [
    "DROP INDEX IF EXISTS items_tsv",
    "ALTER TABLE items DROP COLUMN IF EXISTS tsv",
    f"""ALTER TABLE items ADD COLUMN tsv tsvector GENERATED ALWAYS AS (CASE WHEN indexed THEN
        to_tsvector('memlane', left({c.text_sql("postgres")}, {LEXICAL_CHARS})) || {_ADDRESS_WORDS} END) STORED""",
    "CREATE INDEX items_tsv ON items USING gin (tsv) WHERE tsv IS NOT NULL",
]

MIGRATIONS: list[tuple[str, list[str]]] = [
    (
        "m001_initial",
        [
            # English stemming without a stop-word list, like SQLite's porter
            # tokenizer: "and" or "near" stay searchable, IDF keeps them cheap
            "CREATE TEXT SEARCH DICTIONARY memlane_stem (TEMPLATE = snowball, Language = english)",
            "CREATE TEXT SEARCH CONFIGURATION memlane (COPY = english)",
            """ALTER TEXT SEARCH CONFIGURATION memlane ALTER MAPPING FOR
                asciiword, asciihword, hword_asciipart, word, hword, hword_part WITH memlane_stem""",
            f"""CREATE TABLE items (
                ref BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                id TEXT NOT NULL,
                namespace TEXT COLLATE "C" NOT NULL,
                key TEXT COLLATE "C" NOT NULL,
                value TEXT NOT NULL,
                value_type TEXT NOT NULL,
                text TEXT NOT NULL,
                metadata TEXT NOT NULL DEFAULT '{{}}',
                author TEXT,
                created_at TEXT COLLATE "C" NOT NULL,
                updated_at TEXT COLLATE "C" NOT NULL,
                expires_at TEXT COLLATE "C",
                version INTEGER NOT NULL,
                tsv tsvector GENERATED ALWAYS AS (to_tsvector('memlane', left(text, {LEXICAL_CHARS}))) STORED,
                UNIQUE (namespace, key)
            )""",
            "CREATE INDEX items_key ON items (key, updated_at)",
            "CREATE INDEX items_expires ON items (expires_at) WHERE expires_at IS NOT NULL",
            "CREATE INDEX items_tsv ON items USING gin (tsv)",
            """CREATE TABLE item_history (
                seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                item_id TEXT NOT NULL,
                namespace TEXT COLLATE "C" NOT NULL,
                key TEXT COLLATE "C" NOT NULL,
                value TEXT NOT NULL,
                value_type TEXT NOT NULL,
                text TEXT NOT NULL,
                metadata TEXT NOT NULL,
                author TEXT,
                created_at TEXT COLLATE "C" NOT NULL,
                updated_at TEXT COLLATE "C" NOT NULL,
                expires_at TEXT COLLATE "C",
                version INTEGER NOT NULL,
                change TEXT NOT NULL,
                changed_at TEXT COLLATE "C" NOT NULL,
                changed_by TEXT
            )""",
            "CREATE INDEX item_history_address ON item_history (namespace, key, seq)",
            "CREATE INDEX item_history_item ON item_history (item_id, version)",
            """CREATE FUNCTION memlane_items_history() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO item_history (item_id, namespace, key, value, value_type, text, metadata, author,
                    created_at, updated_at, expires_at, version, change, changed_at, changed_by)
                VALUES (OLD.id, OLD.namespace, OLD.key, OLD.value, OLD.value_type, OLD.text, OLD.metadata,
                    OLD.author, OLD.created_at, OLD.updated_at, OLD.expires_at, OLD.version,
                    CASE WHEN OLD.id = NEW.id THEN 'replace' ELSE 'expire' END, NEW.updated_at, NEW.author);
                RETURN NULL;
            END $$""",
            """CREATE TRIGGER items_history_update AFTER UPDATE ON items
                FOR EACH ROW EXECUTE FUNCTION memlane_items_history()""",
            "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
        ],
    ),
    (
        "m002_vectors",
        [
            # without pgvector the column is bytea (float32) so writes keep working;
            # _vector_type() tells which one this database has
            """DO $$ BEGIN
                CREATE EXTENSION IF NOT EXISTS vector;
            EXCEPTION WHEN OTHERS THEN
                RAISE NOTICE 'pgvector unavailable: %', SQLERRM;
            END $$""",
            """DO $$ BEGIN
                IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
                    CREATE TABLE item_vectors (
                        item_ref BIGINT PRIMARY KEY REFERENCES items (ref) ON DELETE CASCADE,
                        version INTEGER NOT NULL,
                        embedding vector NOT NULL
                    );
                ELSE
                    CREATE TABLE item_vectors (
                        item_ref BIGINT PRIMARY KEY REFERENCES items (ref) ON DELETE CASCADE,
                        version INTEGER NOT NULL,
                        embedding bytea NOT NULL
                    );
                END IF;
            END $$""",
        ],
    ),
    ("m003_facts", facts_schema.POSTGRES),
    ("m004_query_space", query_space.postgres_migration()),
    (
        "m005_item_ids",
        [
            # confirm re-reads candidates by id: make ids unique (an old import could repeat one)
            "UPDATE items SET id = id || '_' || ref WHERE ref NOT IN (SELECT min(ref) FROM items GROUP BY id)",
            "CREATE UNIQUE INDEX items_id ON items (id)",
        ],
    ),
    ("m006_access", access_tables.POSTGRES),
    ("m007_retention", retention_tables.POSTGRES),
    (
        "m008_pending",
        [
            # write-behind indexing: a write marks its item (at its version) for the indexer, which claims
            # marks with a lease (FOR UPDATE SKIP LOCKED, then claimed_until) so several processes share the work
            """CREATE TABLE item_pending (
                item_ref BIGINT PRIMARY KEY REFERENCES items (ref) ON DELETE CASCADE,
                version INTEGER NOT NULL,
                claimed_until TIMESTAMPTZ,
                claimed_by TEXT
            )""",
            # an expired row overwritten by a new item keeps its ref and restarts at version 1: the old
            # item's vector must go with it, or it would pass for the new item's
            """CREATE FUNCTION memlane_items_new_item() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                DELETE FROM item_vectors WHERE item_ref = OLD.ref;
                RETURN NULL;
            END $$""",
            """CREATE TRIGGER items_vectors_new_item AFTER UPDATE ON items
                FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION memlane_items_new_item()""",
        ],
    ),
    (
        "m009_lexical_address",
        [
            # keys and namespaces become searchable words, labelled C (the text stays unlabelled, D) so
            # ranking weighs them at ADDRESS_WEIGHT; the punctuation of addresses becomes spaces first,
            # or the parser would keep "preferences.ui.theme" as one host-name token
            "DROP INDEX items_tsv",
            "ALTER TABLE items DROP COLUMN tsv",
            f"""ALTER TABLE items ADD COLUMN tsv tsvector GENERATED ALWAYS AS (
                to_tsvector('memlane', left(text, {LEXICAL_CHARS}))
                || setweight(to_tsvector('memlane',
                    regexp_replace(namespace || ' ' || key, '[^[:alnum:]]+', ' ', 'g')), 'C')
            ) STORED""",
            "CREATE INDEX items_tsv ON items USING gin (tsv)",
        ],
    ),
    (
        "m010_text_once",
        [
            # the text is stored only when it is not the value's own text (see _common.stored_text): NULL
            # marks a text rebuilt from the value, by every read and by the tsvector
            "ALTER TABLE items ALTER COLUMN text DROP NOT NULL",
            "ALTER TABLE item_history ALTER COLUMN text DROP NOT NULL",
            "DROP INDEX items_tsv",
            "ALTER TABLE items DROP COLUMN tsv",
            # rows written before: no history for this rewrite
            "ALTER TABLE items DISABLE TRIGGER items_history_update",
            f"UPDATE items SET text = NULL WHERE {_ELIDABLE}",
            "ALTER TABLE items ENABLE TRIGGER items_history_update",
            f"UPDATE item_history SET text = NULL WHERE {_ELIDABLE}",
            f"""ALTER TABLE items ADD COLUMN tsv tsvector GENERATED ALWAYS AS (
                to_tsvector('memlane', left({c.text_sql("postgres")}, {LEXICAL_CHARS}))
                || setweight(to_tsvector('memlane',
                    regexp_replace(namespace || ' ' || key, '[^[:alnum:]]+', ' ', 'g')), 'C')
            ) STORED""",
            "CREATE INDEX items_tsv ON items USING gin (tsv)",
            *query_space.postgres_item_views(),
        ],
    ),
    ("m011_chunk_context", facts_schema.POSTGRES_CHUNK_CONTEXT),
    ("m012_scope_heads", query_space.postgres_views()),
    (
        "m013_index_opt_out",
        [
            # index=False: an item search never finds. Its tsvector is NULL (the GIN index holds only indexed
            # rows); it has no vector and no mark, and loses them when a rewrite un-indexes it
            "ALTER TABLE items ADD COLUMN indexed boolean NOT NULL DEFAULT true",
            *_INDEXED_TSV,
            """CREATE FUNCTION memlane_items_unindexed() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                DELETE FROM item_vectors WHERE item_ref = OLD.ref;
                DELETE FROM item_pending WHERE item_ref = OLD.ref;
                RETURN NULL;
            END $$""",
            """CREATE TRIGGER items_unindexed AFTER UPDATE OF indexed ON items
                FOR EACH ROW WHEN (OLD.indexed AND NOT NEW.indexed) EXECUTE FUNCTION memlane_items_unindexed()""",
        ],
    ),
]
# ts_rank weight of address words (label C) against the text's (label D) 1.0: they rank below text matches
ADDRESS_WEIGHT = 0.25

_UPSERT = f"""
INSERT INTO items (id, namespace, key, value, value_type, text, metadata, author,
                   created_at, updated_at, expires_at, indexed, version)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 1)
ON CONFLICT (namespace, key) DO UPDATE SET
    id = CASE WHEN {_EXPIRED_OLD} THEN excluded.id ELSE items.id END,
    created_at = CASE WHEN {_EXPIRED_OLD} THEN excluded.created_at ELSE items.created_at END,
    version = CASE WHEN {_EXPIRED_OLD} THEN 1 ELSE items.version + 1 END,
    value = excluded.value,
    value_type = excluded.value_type,
    text = excluded.text,
    metadata = excluded.metadata,
    author = excluded.author,
    updated_at = excluded.updated_at,
    expires_at = excluded.expires_at,
    indexed = excluded.indexed
RETURNING ref, id, created_at, version
"""


# The same upsert for a whole batch in one statement, its rows read from a source: a small batch as one array
# parameter per column (one round trip and one plan, where a row per execution pays both per row), a large one
# COPYed into a temporary table first (COPY costs the client a tenth of the CPU of adapting arrays). A batch
# must not repeat an address (one statement cannot update a row twice): put_many splits it where one repeats.
_UPSERT_FROM = _UPSERT.replace(
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 1)", "SELECT r.*, 1 FROM {source}"
).replace("RETURNING ref,", "RETURNING namespace, key, ref,")
_UPSERT_ARRAYS = _UPSERT_FROM.format(source="unnest(" + ", ".join(["%s::text[]"] * 11) + ", %s::boolean[]) AS r")
_UPSERT_STAGED = _UPSERT_FROM.format(source="pg_temp.memlane_put_rows AS r")
_STAGE = (
    "CREATE TEMP TABLE IF NOT EXISTS memlane_put_rows (id text, namespace text, key text, value text, "
    "value_type text, text text, metadata text, author text, created_at text, updated_at text, expires_at text, "
    "indexed boolean) ON COMMIT DELETE ROWS"
)
_STAGE_COPY = "COPY pg_temp.memlane_put_rows FROM STDIN"
_COPY_ROWS = 64  # from this many rows a batch goes through COPY

_GET = f"SELECT {c.ITEM_COLUMNS} FROM items WHERE namespace = %s AND key = %s"
_EXISTS = "SELECT expires_at FROM items WHERE namespace = %s AND key = %s"
_GET_MANY = (
    f"SELECT {c.ITEM_COLUMNS} FROM items WHERE (namespace, key) IN "
    "(SELECT * FROM unnest(%s::text[], %s::text[])) AND " + _LIVE
)
_ONE_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"
_DELETE = f"DELETE FROM items WHERE namespace = %s AND key = %s AND {_LIVE} RETURNING {c.VERSION_COLUMNS}"
_HISTORY = f"SELECT {c.HISTORY_COLUMNS} FROM item_history WHERE namespace = %s AND key = %s ORDER BY seq DESC"
# namespaces(): each seek must walk the (namespace, key) index in order: with stale statistics (a fresh bulk
# load) the planner would sort a bitmap scan of the whole prefix at every step instead
_IN_INDEX_ORDER = "SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off"
_GENERIC_PLANS = "SET plan_cache_mode = force_generic_plan"
_MARK = (
    "INSERT INTO item_pending (item_ref, version) VALUES (%s, %s) ON CONFLICT (item_ref) DO UPDATE "
    "SET version = excluded.version, claimed_until = NULL, claimed_by = NULL"
)
_MARK_ARRAYS = _MARK.replace("VALUES (%s, %s)", "SELECT * FROM unnest(%s::bigint[], %s::integer[])")

# Lexical ranking in one statement (PostgresStore.lexical):
# * ``words``: the query's distinct lexemes, each with its one-word tsquery;
# * ``share``: each lexeme's share of the scope's rows: unscoped, the column statistics (the scope is the table);
#   in a scope, a sample of the scope's own rows (``_SAMPLED``), so rows outside a scope never change what it
#   returns;
# * ``skipped``: lexemes with a ``share`` of at least COMMON_SHARE, in a scope of at least the
#   cap, while the query has a rarer lexeme: their IDF is below 0.11 and every row holding a rarer word is
#   still a candidate, so their index scan (a GIN scan builds its whole bitmap before any LIMIT applies,
#   which grows with the table) is not run, as SQLite leaves such words out of its query;
# * ``capped``: per lexeme, the rows of the scope containing it, at most ``%(cap)s`` of them (LEXICAL_CAP):
#   the ranking work for a word is bounded however many rows contain it. They are found through the GIN
#   index, except (``plan.by_scope``) in a scope of fewer rows than the cap where the statistics say the
#   word has more postings in the table than the scope has rows: then the scope's rows are read through the
#   namespace index and each is tested (``tsv || ''`` keeps the planner off the GIN index), so a common word
#   costs the scope's size, not the table's;
# * ``idf``: each lexeme's document frequency in the scope (its capped count; a lexeme that reaches the cap
#   is given ``greatest(cap, rows x its share)``), as BM25's IDF;
# * ``hits``: the candidate rows (the union of ``capped``), one row per (ref, lexeme it contains, ts_rank
#   for that lexeme); the tsvector is detoasted once per row (``setweight(.., 'D', '{}')`` relabels
#   nothing, and its result is reused); text words (label D) weigh 1, address words (label C) ADDRESS_WEIGHT;
# * the score: the IDF-weighted sum of ``ts_rank(.., 1)`` (rank divided by log2(1 + document length)).
# Below the cap the ranking is exact; above it, rows that contain only capped (common) words are
# candidates only as far as the cap reaches, while every row containing a rarer word is one.
# Sequential scans are off for the statement (_LEXICAL_SETTINGS): the planner does not count detoasting
# a tsvector in a filter, so once a lexeme is common it would scan and detoast every row instead of using
# the index. The statement is prepared once per connection but always planned for its parameters.
_LEXICAL_SETTINGS = (
    "SELECT set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_custom_plan', true)"
)
_CUSTOM_PLAN = "SELECT set_config('plan_cache_mode', 'force_custom_plan', true)"
LEXICAL_CAP = 2000
_PIPELINED_CHARS = 64 * 1024  # parameters' characters in the statements of one pipeline, at most


def _chars(values: Iterable[Any]) -> int:
    """The characters of the text in statement parameters (text, and lists of text)."""
    return sum(len(v) if isinstance(v, str) else _chars(v) if isinstance(v, list | tuple) else 0 for v in values)


# a lexeme in this share of the rows (column statistics) is skipped while the query has a rarer one (``skipped``)
COMMON_SHARE = 0.9
_LEXICAL = """
WITH words AS MATERIALIZED (
    SELECT v.lexeme AS w, to_tsquery('simple', quote_literal(v.lexeme)) AS q
    FROM unnest(to_tsvector('memlane', %(text)s)) AS v
),
total AS MATERIALIZED ({total}),
frequent AS MATERIALIZED (
    SELECT e.w, max(e.f) AS f
    FROM pg_stats s
    CROSS JOIN LATERAL unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(w, f)
    WHERE s.tablename = 'items' AND s.attname = 'tsv' AND s.schemaname = current_schema()
      AND e.w IN (SELECT w FROM words)
    GROUP BY e.w
),
share AS MATERIALIZED ({share}),
skipped AS MATERIALIZED (
    SELECT f.w FROM share f CROSS JOIN total
    WHERE f.f >= %(common)s AND total.n >= %(cap)s/*skip*/
      AND EXISTS (SELECT 1 FROM words x WHERE x.w NOT IN (SELECT y.w FROM share y WHERE y.f >= %(common)s))
),
table_rows AS MATERIALIZED (
    SELECT greatest(reltuples, 0)::float8 AS n FROM pg_class WHERE oid = 'items'::regclass
),
plan AS MATERIALIZED (
    SELECT w.w, w.q, total.n < %(cap)s AND coalesce(fr.f, 0) * table_rows.n > total.n AS by_scope
    FROM words w CROSS JOIN total CROSS JOIN table_rows LEFT JOIN frequent fr ON fr.w = w.w
    WHERE w.w NOT IN (SELECT w FROM skipped)
),
capped AS MATERIALIZED (
    SELECT p.w, c.ref
    FROM plan p
    CROSS JOIN LATERAL (
        (SELECT i.ref FROM items i WHERE NOT p.by_scope AND i.tsv @@ p.q{scope}/*where*/ LIMIT %(cap)s)
        UNION ALL
        (SELECT i.ref FROM items i WHERE p.by_scope AND (i.tsv || ''::tsvector) @@ p.q{scope}/*where*/ LIMIT %(cap)s)
    ) AS c
),
df AS MATERIALIZED (
    SELECT c.w, CASE WHEN count(*) >= %(cap)s
        THEN greatest(count(*)::float8, total.n * coalesce(max(share.f), 0)) ELSE count(*)::float8 END AS n,
        total.n AS total
    FROM capped c CROSS JOIN total LEFT JOIN share ON share.w = c.w GROUP BY c.w, total.n
),
idf AS MATERIALIZED (
    SELECT df.w, ln(1 + (greatest(df.total, df.n) - df.n + 0.5::float8) / (df.n + 0.5::float8)) AS idf FROM df
),
hits AS MATERIALIZED (
    SELECT i.ref, x.w, x.r
    FROM (SELECT DISTINCT ref FROM capped) AS c
    JOIN items i ON i.ref = c.ref
    CROSS JOIN LATERAL (SELECT setweight(i.tsv, 'D', '{{}}') AS t OFFSET 0) AS d
    CROSS JOIN LATERAL (
        SELECT w.w, ts_rank('{{1, ADDRESS_WEIGHT, 1, 1}}', d.t, w.q, 1) AS r FROM words w WHERE d.t @@ w.q OFFSET 0
    ) AS x
),
ranked AS (
    SELECT h.ref, sum(idf.idf * h.r) AS score FROM hits h JOIN idf USING (w)
    GROUP BY h.ref ORDER BY score DESC, h.ref LIMIT %(k)s
)
SELECT i.id, r.score, i.version FROM ranked r JOIN items i ON i.ref = r.ref ORDER BY r.score DESC, r.ref
""".replace("ADDRESS_WEIGHT", str(ADDRESS_WEIGHT))
# A scope's share of each word (``share`` in _LEXICAL): the share of the scope's first COMMON_SAMPLE indexed rows
# (in the (namespace, key) index's order) holding it, read only in a scope of at least the cap. What is common,
# and a capped word's document frequency, then depend on the scope's rows alone, never on the table's statistics
# (rows outside the scope); the sample costs COMMON_SAMPLE rows whatever the table's size.
COMMON_SAMPLE = 64
_SAMPLED = """
    SELECT w.w, avg(coalesce((s.tsv @@ w.q)::int, 0))::float8 AS f
    FROM words w
    CROSS JOIN (
        SELECT i.tsv FROM items i JOIN (
            -- the scope's rows found as every scope read finds them (an ordered index scan would test the scope's
            -- ranges on every row before it), then their first by address
            SELECT r.ref FROM (
                SELECT i.ref, i.namespace, i.key FROM items i
                WHERE (SELECT n FROM total) >= %(cap)s AND i.indexed{scope}/*where*/ OFFSET 0
            ) AS r
            ORDER BY r.namespace, r.key LIMIT COMMON_SAMPLE
        ) AS pick ON pick.ref = i.ref
    ) AS s
    GROUP BY w.w
""".replace("COMMON_SAMPLE", str(COMMON_SAMPLE))


def _scoped(scope: str, total: str) -> str:
    """The ranking statement for a scope: its words' shares from a sample of its own rows (``_SAMPLED``)."""
    return _LEXICAL.format(scope=scope, total=total, share=_SAMPLED.format(scope=scope))


_LEXICAL_IN_PREFIX = _scoped(
    scope="\n      AND (i.namespace = %(ns)s OR (i.namespace >= %(ns_lo)s AND i.namespace < %(ns_hi)s))",
    # each part of the prefix as its own index range: written as one OR, the planner may read the whole index and
    # test the OR on every entry (an ordered index-only scan: 28,000 entries read to count 2,000 of 30,000)
    total="SELECT (SELECT count(*) FROM items WHERE namespace = %(ns)s) "
    "+ (SELECT count(*) FROM items WHERE namespace >= %(ns_lo)s AND namespace < %(ns_hi)s) AS n",
)


@lru_cache(maxsize=256)
def _lexical_in_prefixes(lengths: tuple[int, ...], ranges: int = 0) -> str:
    """The ranking statement over several prefixes (an agent's rooms and grants), one per set of prefix lengths.

    The scope's size for IDF is summed over the prefixes' index ranges (narrowed
    prefixes never nest, so nothing counts twice). A small scope, ``ranges``
    prefixes, is written out as ranges (parameters ``r<i>``, ``r<i>_lo``,
    ``r<i>_hi``), for its rows and its size, which the planner then reads off the
    index whatever the table's size (``lengths`` is then ``()``).
    """
    if ranges:

        def tests(column: str) -> str:
            return " OR ".join(
                f"{column} = %(r{i})s OR ({column} >= %(r{i}_lo)s AND {column} < %(r{i}_hi)s)" for i in range(ranges)
            )

        # the scope's rows found through the index too: a word common in the table is tested on the scope's
        # rows (``by_scope``), which the prefix sets could only find by reading every row (180 ms at 100k)
        # each range counted on its own (see _LEXICAL_IN_PREFIX); narrowed prefixes never nest
        total = (
            "SELECT "
            + " + ".join(
                f"(SELECT count(*) FROM items WHERE namespace = %(r{i})s) + (SELECT count(*) FROM items "
                f"WHERE namespace >= %(r{i}_lo)s AND namespace < %(r{i}_hi)s)"
                for i in range(ranges)
            )
            + " AS n"
        )
        return _scoped(scope=f"\n      AND ({tests('i.namespace')})", total=total)
    total = (
        "SELECT count(*) AS n FROM unnest(string_to_array(%(prefixes)s, E'\\n')) AS s(p) JOIN items "
        'ON items.namespace = s.p COLLATE "C" OR (items.namespace >= (s.p || \'/\') COLLATE "C" '
        "AND items.namespace < (s.p || '0') COLLATE \"C\")"
    )
    scope = "\n      AND " + c.under_any("i.namespace", lengths, "postgres", lambda i: f"%(w{i})s")
    return _scoped(scope=scope, total=total)


# without a prefix the planner's row estimate is plenty for IDF and avoids counting the table per query
_LEXICAL_ALL = _LEXICAL.format(
    scope="",
    share="SELECT w, f FROM frequent",
    total="SELECT CASE WHEN reltuples >= 1 THEN reltuples::bigint ELSE (SELECT count(*) FROM items) END AS n "
    "FROM pg_class WHERE oid = 'items'::regclass",
)


# document_counts (PostgresStore): one term's rows, counted up to a limit. The term's lexemes are AND-ed, as the
# lexical channel matches them (a word, never syntax). Each statement has two branches, only one of which runs
# (a one-time filter on an InitPlan): the word's posting list (the GIN index builds its whole bitmap before any
# LIMIT applies: the cost of every row holding the word in the table) or rows read and tested one by one,
# stopping at the limit (``coalesce(tsv, ..)`` keeps the planner off the GIN index, which a test implying
# ``tsv IS NOT NULL`` would let it read whole, as the partial index's predicate).
SCOPE_DRIVEN_ROWS = 2000  # a scope smaller than this is counted from its own rows (bench/lexical.py)
COMMON_COUNTED = 0.2  # over the whole table, a word in this share of the rows is counted from the rows
# the term's tsquery, written out where the GIN branch tests it so its plan is made for the word (an InitPlan's
# value would be planned as any word: a worse plan for a common one)
_TERM = "to_tsquery('simple', nullif(replace(strip(to_tsvector('memlane', %s))::text, ''' ''', ''' & '''), ''))"
_COUNT_IN_SCOPE = f"""
WITH small AS MATERIALIZED ({{small}})
SELECT count(*) FROM (
    (SELECT 1 FROM items WHERE NOT (SELECT yes FROM small) AND tsv @@ {_TERM} AND {{inside}} LIMIT %s)
    UNION ALL
    (SELECT 1 FROM items WHERE (SELECT yes FROM small) AND coalesce(tsv, ''::tsvector) @@ {_TERM}
        AND {{inside}} LIMIT %s)
) s
"""


def _small_scope(within: Within, inside: str, params: Sequence[Any]) -> tuple[str, list[Any]]:
    """A statement answering whether ``within`` holds fewer than SCOPE_DRIVEN_ROWS rows, reading at most about that.

    A few prefixes are counted range by range, each an index range scan that stops at the bound (as one OR, the
    planner may read the whole index and test the OR on each entry). Nested prefixes would be counted twice: a
    scope then looks larger, which changes only how it is counted, never the count.
    """
    if within and all(within) and len(within) <= c.SMALL_SCOPE:
        parts: list[str] = []
        values: list[Any] = []
        for prefix in within:
            exact, low, high = c.ns_range(prefix)
            parts.append("(SELECT count(*) FROM (SELECT 1 FROM items WHERE namespace = %s LIMIT %s) a)")
            parts.append(
                "(SELECT count(*) FROM (SELECT 1 FROM items WHERE namespace >= %s AND namespace < %s LIMIT %s) b)"
            )
            values += [exact, SCOPE_DRIVEN_ROWS, low, high, SCOPE_DRIVEN_ROWS]
        return f"SELECT {' + '.join(parts)} < %s AS yes", [*values, SCOPE_DRIVEN_ROWS]
    return (
        f"SELECT count(*) < %s AS yes FROM (SELECT 1 FROM items WHERE {inside} LIMIT %s) s",
        [SCOPE_DRIVEN_ROWS, *params, SCOPE_DRIVEN_ROWS],
    )


_COUNT_ALL = f"""
WITH common AS MATERIALIZED (
    SELECT coalesce(min(coalesce(e.f, 0)), 0) >= %s AS yes
    FROM unnest(to_tsvector('memlane', %s)) AS v
    LEFT JOIN (
        SELECT x.w, max(x.f) AS f FROM pg_stats s
        CROSS JOIN LATERAL unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS x(w, f)
        WHERE s.tablename = 'items' AND s.attname = 'tsv' AND s.schemaname = current_schema()
        GROUP BY x.w
    ) AS e ON e.w = v.lexeme
)
SELECT count(*) FROM (
    (SELECT 1 FROM items WHERE NOT (SELECT yes FROM common) AND tsv @@ {_TERM} LIMIT %s)
    UNION ALL
    (SELECT 1 FROM items WHERE (SELECT yes FROM common) AND coalesce(tsv, ''::tsvector) @@ {_TERM} LIMIT %s)
) s
"""


# Inside a scope of at most this many items the vector channel scans exactly. Measured at 384 dimensions over
# 100k items (#36; 2 busy cores), the exact scan costs about 22 us a scope row (1,600 rows: 36 ms), one HNSW
# search 20-44 ms: up to this size the exact scan costs about one index search, and a scoped search never loses
# an item to the approximate graph.
_EXACT_SCOPE_ROWS = 2000
# The graph's build: each node's links (m) and the candidates weighed when it is linked (ef_construction). On
# word-hashing vectors (bench/search.py, 100k items, 384 dimensions), pgvector's defaults (16, 64) found 0.86 of
# the true top 10 at ef_search 200 and 0.93 at 800; (32, 128) found 0.94 at 200, 0.96 at 300, 0.97 at 400, and
# each search cost less at the same recall. Built once over 100k vectors in 279 s (2 busy cores). An index made
# by an earlier version keeps its parameters until it is dropped (the next process to write a vector makes it).
_HNSW_M = 32
_HNSW_EF_CONSTRUCTION = 128
# hnsw.ef_search for a nomination of k: at least _EF_SEARCH (recall@10 0.96 above, p50 20 ms), at most _EF_MAX
# (pgvector's largest)
_EF_SEARCH = 300
_EF_MAX = 1000


def _vector_nearest(cast: str, inside: str = "") -> str:
    """The index's nearest (first ``LIMIT``), then those ``inside`` the scope, best first (second ``LIMIT``).

    Each candidate's item is looked up by its key (the lateral subquery is not
    flattened), so the scope filter reads the candidates only, never the scope's
    other rows.
    """
    return (
        f"SELECT items.id, 1 - n.d, n.version FROM (SELECT item_ref, version, "
        f"embedding{cast} <=> %s{cast} AS d FROM item_vectors "
        f"ORDER BY embedding{cast} <=> %s{cast} LIMIT %s) AS n CROSS JOIN LATERAL "
        f"(SELECT id FROM items WHERE items.ref = n.item_ref{f' AND {inside}' if inside else ''} OFFSET 0) AS items "
        "ORDER BY n.d LIMIT %s"
    )


# The scope's rows first (its index ranges), then each one's vector by its key: a join let the planner scan every
# vector (its estimate of the vector_dims test is a guess), 339 ms for a tenth of 100k items. Ordered by the
# score, which no index serves: ordered by the distance, the planner may pick the HNSW index, which filters its
# ef_search nearest by the scope and can return fewer than k.
_EXACT_IN_SCOPE = (
    "SELECT items.id, 1 - (v.embedding{cast} <=> %s{cast}) AS score, v.version FROM items CROSS JOIN LATERAL "
    "(SELECT embedding, version FROM item_vectors WHERE item_vectors.item_ref = items.ref "
    "AND vector_dims(embedding) = %s OFFSET 0) AS v WHERE {inside} ORDER BY score DESC LIMIT %s"
)


def _nominations(rows: Sequence[Any]) -> builtins.list[Nomination]:
    return [(item_id, float(score), version) for item_id, score, version in rows]


CONNECT_TIMEOUT_S = 5.0


def connect_timeout_s(given: float | None = None) -> float:
    """Seconds to wait for the server at open: ``given``, else ``$MEMLANE_PG_CONNECT_TIMEOUT``, else 5."""
    raw: Any = given if given is not None else os.environ.get("MEMLANE_PG_CONNECT_TIMEOUT")
    if raw is None or raw == "":
        return CONNECT_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise StoreError(f"the connect timeout must be a positive number of seconds, not {raw!r}")
    return seconds


def _url_connect_timeout(url: str) -> float | None:
    """The ``connect_timeout`` a connection URL sets itself, in seconds, or ``None``."""
    if "connect_timeout" not in url:
        return None
    try:
        raw = psycopg.conninfo.conninfo_to_dict(url).get("connect_timeout")
        return float(raw) if raw is not None else None
    except (psycopg.Error, ValueError):
        return None  # the connection attempt will say what is wrong with the URL


def _one_line(e: BaseException) -> str:
    """A driver's message on one line: libpq's own, without its repeated per-address attempts."""
    lines = [" ".join(line.split()) for line in str(e).splitlines() if line.strip()]
    lines = [line for line in lines if not line.lower().startswith("multiple connection attempts failed")]
    return "; ".join(dict.fromkeys(lines)) or type(e).__name__


# SQLSTATEs of a server that is going away or not yet there: admin_shutdown, crash_shutdown, cannot_connect_now
# (class 08, connection_exception, too)
_AWAY = frozenset({"57P01", "57P02", "57P03"})
DISK_FULL = "53100"  # disk_full
RETRY_AFTER_S = 1  # what a 503 for an unreachable server tells the caller to wait


def store_error(e: Exception, location: str) -> StoreError:
    """The memlane error for a driver's error: the server unreachable (a connection refused or lost, the
    pool finding none in time, the server shutting down) is :class:`StoreUnavailableError`, a full disk
    :class:`StorageFullError`, anything else :class:`StoreError`; the driver's error is chained by the caller."""
    state = getattr(e, "sqlstate", None)
    if state == DISK_FULL:
        return StorageFullError(
            f"the PostgreSQL server's disk is full (database {location}): {_one_line(e)}; nothing was written. "
            "Free space on the server's data disk, then write again; reads still work"
        )
    if (psycopg is not None and isinstance(e, psycopg.OperationalError) and state is None) or (
        state is not None and (state.startswith("08") or state in _AWAY)
    ):
        return StoreUnavailableError(
            f"the database is unreachable ({location}): {_one_line(e)}; retry in a moment "
            "(a write whose answer was lost may have committed: read it back before writing it again)",
            retry_after=RETRY_AFTER_S,
        )
    return StoreError(f"PostgreSQL error: {e}")


def redact(url: str) -> str:
    """A connection URL without its password, for messages and ``location``."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


# -- what the synchronous and the async reads share: the statements above, and these ------------------


def _at(now: datetime | Callable[[], datetime]) -> str:
    return c.ts(now if isinstance(now, datetime) else now())


def _alive(row: Any, now: datetime | Callable[[], datetime]) -> bool:
    """An ``_EXISTS`` row: a live item is there (the clock is read only for a row that can expire)."""
    return row is not None and (row[0] is None or row[0] > _at(now))


def _live_item(row: Any, namespace: Namespace, now: datetime | Callable[[], datetime]) -> Item | None:
    """A ``_GET`` row as the item, or ``None`` for no row or an expired one."""
    if row is None or (row[10] is not None and row[10] <= _at(now)):
        return None
    return c.row_to_item(row, namespace)


def _as_text(addresses: Sequence[tuple[Namespace, str]]) -> builtins.list[tuple[str, str]]:
    return [("/".join(ns), k) for ns, k in addresses]


def _address_chunks(texts: Sequence[tuple[str, str]], at: str) -> Iterator[tuple[Any, ...]]:
    """``_GET_MANY``'s parameters for addresses as text, one statement per ``_CHUNK`` of them."""
    for start in range(0, len(texts), _CHUNK):
        chunk = texts[start : start + _CHUNK]
        yield ([ns for ns, _ in chunk], [k for _, k in chunk], at)


def _in_order(
    addresses: Sequence[tuple[Namespace, str]], texts: Sequence[tuple[str, str]], rows: Iterable[Any]
) -> builtins.list[Item | None]:
    found = {(row[1], row[2]): row for row in rows}
    return [
        None if (row := found.get(text)) is None else c.row_to_item(row, address[0])
        for address, text in zip(addresses, texts, strict=True)
    ]


def _fetch_statement(
    key: str, within: Within, limit: int, now: datetime, conditions: Sequence[Any] = ()
) -> tuple[str, builtins.list[Any]]:
    params: builtins.list[Any] = [key, c.ts(now)]
    where = f"key = %s AND {_LIVE}"
    inside, inside_params = c.within_filter(within, "%s")
    if inside:
        where += f" AND {inside}"
        params.extend(inside_params)
    if conditions:
        from . import where_sql

        test, test_params = where_sql.postgres_sql(builtins.list(conditions))
        where += f" AND {test}"
        params.extend(test_params)
    params.append(limit)
    return f"SELECT {c.ITEM_COLUMNS} FROM items WHERE {where} ORDER BY updated_at DESC, namespace LIMIT %s", params


def _select_statement(
    within: Within, where: Sequence[Any], order: str, limit: int, offset: int, now: datetime
) -> tuple[str, builtins.list[Any]]:
    from . import where_sql as w

    live, params = c.live_filter(within, "", now, "%s")
    test, test_params = w.postgres_sql(builtins.list(where))
    ordering = "updated_at DESC, namespace, key" if order == "updated_desc" else "namespace, key"
    sql = f"SELECT {c.ITEM_COLUMNS} FROM items WHERE {live} AND {test} ORDER BY {ordering} LIMIT %s OFFSET %s"
    return sql, [*params, *test_params, limit, offset]


T = TypeVar("T")
# A write's transaction as steps, so that a synchronous cursor (PostgresStore._steps) and an async one
# (PostgresStore._asteps) carry out the one statement of it: each step is (kind, sql, argument), and the
# step's rows come back in: "one" (fetchone), "all" (fetchall), "run", "many" (executemany), "copy" (COPY the
# argument's rows)
Steps = Generator[tuple[str, Any, Any], Any, T]


def _delete_steps(namespace: Namespace, key: str, now: datetime, author: str | None) -> Steps[bool]:
    at = c.ts(now)
    gone = yield "all", _DELETE, ("/".join(namespace), key, at)
    if gone:
        yield "many", _HISTORY_ROW, [(*r, "delete", at, author) for r in gone]
    return bool(gone)


class _LoopConnections:
    """One event loop's async connections: at most ``size`` at once, opened as reads need them, kept for the next.

    Not psycopg_pool's ``AsyncConnectionPool``: its workers are tasks, which ``asyncio.run`` cancels before a
    pool could close, leaving every connection open until collected. These close when the loop closes its
    async generators (:meth:`PostgresStore._close_at_loop_end`), or at once when the loop is found closed.
    """

    def __init__(self, url: str, options: dict[str, Any], size: int) -> None:
        self._url = url
        self._options = options
        self._slots = asyncio.Semaphore(size)
        self._idle: builtins.list[Any] = []
        self._closed = False
        self.ender: Any = None  # the async generator that closes them at the loop's end

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        async with self._slots:
            conn = self._idle.pop() if self._idle else await self._connect()
            try:
                yield conn
            finally:
                if conn.broken:
                    # the server went away (a restart, say): so did the idle ones, and the next reads connect
                    # anew rather than each fail once
                    self._drop_idle()
                if self._closed or conn.broken or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    # closed meanwhile, or cut off mid-statement: not kept
                    conn.pgconn.finish()
                else:
                    # a read, a write, or one refused and rolled back (a conflict, a lock timeout): ready again
                    self._idle.append(conn)
                    if self._closed:  # closed from another thread meanwhile (close()): it missed this one
                        self._drop_idle()

    async def _connect(self) -> Any:
        conn = await psycopg.AsyncConnection.connect(self._url, **self._options)
        try:
            await conn.execute(_GENERIC_PLANS)  # as the synchronous reader (_connect_reader)
        except BaseException:
            conn.pgconn.finish()
            raise
        return conn

    def finish(self) -> None:
        """Close them, from any thread (libpq's own close is synchronous): the idle ones now, those in use as
        their calls end."""
        self._closed = True
        self._drop_idle()

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.pgconn.finish()


class PostgresStore(Store):
    """The server backend. See the module docstring for the design."""

    backend = "postgres"

    migration_names = tuple(name for name, _ in MIGRATIONS)

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        migrate: bool = True,
        connect_timeout: float | None = None,
    ) -> None:
        if psycopg is None or ConnectionPool is None:
            raise BackendUnavailableError(
                "PostgreSQL support needs the postgres extra: pip install 'memlane[postgres]'"
            )
        self._url = url
        self._closed = False
        timeout = connect_timeout_s(connect_timeout)
        # libpq's own connect_timeout (whole seconds, at least 2: libpq's floor), unless the URL sets one
        options: dict[str, Any] = {"autocommit": True}
        in_url = _url_connect_timeout(url)
        if in_url is None:
            options["connect_timeout"] = max(2, math.ceil(timeout))
        else:
            timeout = in_url
        self._options = options
        self._max_size = max_size
        # the async reads' connections, a set per event loop (an async connection serves only the loop that opened it)
        self._loops: dict[asyncio.AbstractEventLoop, _LoopConnections] = {}
        self._loops_lock = threading.Lock()
        # point reads skip the pool's checkout (a third of a get's cost) through
        # one dedicated connection when it is free; otherwise they use the pool.
        # It is opened first, once: an unreachable server fails here, in one line, without the pool's retries
        self._reader_lock = threading.Lock()
        try:
            self._reader: Any = self._connect_reader()
        except Exception as e:
            raise StoreError(
                f"cannot connect to {redact(url)}: {_one_line(e)}; check the URL and that the server is up "
                f"(waited at most {timeout:g} s; set connect_timeout= in the URL or $MEMLANE_PG_CONNECT_TIMEOUT)"
            ) from None
        self._min_size = min_size
        # set when the server was found unreachable: the pool's connections may all be broken, and its own
        # reconnection waits longer after each failure; the next use connects anew first (_recover)
        self._outage = False
        self._recover_lock = threading.Lock()
        try:
            self._pool = self._new_pool()
            self._pool.open(wait=True, timeout=timeout)
        except Exception as e:
            self._reader.close()
            raise StoreError(f"cannot connect to {redact(url)}: {_one_line(e)}") from None
        self._vector_kind = "unknown"
        if migrate:
            self.migrate()
            self._vector_kind = self._detect_vector_kind()
        self._index_dimension: int | None = None
        self._stage: bool | None = None  # may large batches go through a temporary table (_stage_allowed)

    # -- plumbing ---------------------------------------------------------

    @property
    def location(self) -> str:
        """The server URL without its password."""
        return redact(self._url)

    def _new_pool(self) -> Any:
        return ConnectionPool(
            self._url, min_size=self._min_size, max_size=self._max_size, kwargs=self._options, open=False
        )

    def _error(self, e: Exception) -> StoreError:
        """:func:`store_error`, noting an unreachable server so that the next use reconnects first."""
        error = store_error(e, self.location)
        if isinstance(error, StoreUnavailableError):
            self._outage = True
        return error

    def _recover(self, *, probe: bool = True) -> None:
        """After an outage, before the pool is used: connect anew (``probe``), and on success put a new pool in
        place of the old one, whose connections the outage broke and whose reconnection backs off. While the
        server is still away this fails at once with :class:`StoreUnavailableError`, instead of a request
        waiting for the pool's timeout; once it is back, the first request is served."""
        with self._recover_lock:
            if not self._outage or self._closed:
                return
            if probe:
                try:
                    psycopg.connect(self._url, **self._options).close()
                except psycopg.Error as e:
                    raise store_error(e, self.location) from e
            old, self._pool = self._pool, self._new_pool()
            self._pool.open(wait=False)
            self._outage = False
        # connections of the old pool still in use close as they come back
        threading.Thread(target=old.close, kwargs={"timeout": 5.0}, name="memlane-old-pool", daemon=True).start()

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        if self._closed:
            raise StoreError("this memory is closed; open it again with memlane.open()")
        if self._outage:
            self._recover()
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as e:
            raise self._error(e) from e

    def _connect_reader(self) -> Any:
        reader = psycopg.connect(self._url, **self._options)
        # the statements this connection runs again and again (get, list, hydrate...) keep one plan: a custom
        # plan per call cost as much as running them (list: 1.6x the raw query, not 3x); the ranking statements
        # ask for custom plans in their own transaction (_LEXICAL_SETTINGS)
        reader.execute(_GENERIC_PLANS)
        return reader

    @contextmanager
    def _read(self) -> Iterator[Any]:
        """A connection for one single-statement read: the dedicated one if free, else the pool's."""
        if self._closed:
            raise StoreError("this memory is closed; open it again with memlane.open()")
        if not self._reader_lock.acquire(blocking=False):
            with self._conn() as conn:
                yield conn
            return
        try:
            if self._reader is None or self._reader.closed:
                try:
                    self._reader = self._connect_reader()
                except psycopg.Error as e:  # the server away (a restart, say): the request's answer is a 503
                    self._reader = None
                    raise self._error(e) from e
                if self._outage:  # the server is back: so is the pool, at once
                    self._recover(probe=False)
            try:
                yield self._reader
            except psycopg.OperationalError as e:
                self._reader.close()  # reconnect next time
                raise self._error(e) from e
            except psycopg.Error as e:
                raise self._error(e) from e
        finally:
            self._reader_lock.release()

    @contextmanager
    def _write(self) -> Iterator[Any]:
        with self._conn() as conn, conn.transaction():
            yield conn

    # -- the async reads (AsyncMemory): psycopg's async connections, on the event loop itself -----------

    native_async = True

    async def _loop_connections(self) -> _LoopConnections:
        """The running event loop's connections, made at its first read."""
        loop = asyncio.get_running_loop()
        mine = self._loops.get(loop)
        if mine is not None:
            return mine
        if self._closed:
            raise StoreError("this memory is closed; open it again with memlane.open()")
        with self._loops_lock:
            # a loop closed without closing its async generators (a hand-made loop, no aclose) left its own here
            for ended in [other for other in self._loops if other.is_closed()]:
                self._loops.pop(ended).finish()
            mine = self._loops[loop] = _LoopConnections(self._url, self._options, self._max_size)
        mine.ender = self._close_at_loop_end(loop, mine)
        await mine.ender.__anext__()  # its first step makes the loop track it: asyncio.run closes it at the end
        return mine

    async def _close_at_loop_end(self, loop: asyncio.AbstractEventLoop, mine: _LoopConnections) -> AsyncIterator[None]:
        """Closes ``mine`` when the loop closes its async generators (``asyncio.run`` does, before the loop ends)."""
        try:
            yield
        finally:
            with self._loops_lock:
                if self._loops.get(loop) is mine:
                    del self._loops[loop]
            mine.finish()

    @asynccontextmanager
    async def _awrite(self) -> AsyncIterator[Any]:
        """An async cursor in one transaction, committed when the block ends, rolled back if it raises."""
        async with self._aconn() as conn, conn.transaction(), conn.cursor() as cur:
            yield cur

    async def _asteps(self, cur: Any, steps: Steps[T]) -> T:
        """Carry out a write's steps on an async cursor, in its transaction (as :meth:`_steps`)."""
        result: Any = None
        try:
            while True:
                kind, sql, argument = steps.send(result)
                result = None
                if kind == "copy":
                    async with cur.copy(sql) as copy:
                        for row in argument:
                            await copy.write_row(row)
                elif kind == "many":
                    await cur.executemany(sql, argument)
                else:
                    await cur.execute(sql, argument)
                    if kind == "one":
                        result = await cur.fetchone()
                    elif kind == "all":
                        result = await cur.fetchall()
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    @asynccontextmanager
    async def _aconn(self) -> AsyncIterator[Any]:
        """An async connection of the running loop's own."""
        if self._closed:  # closed by the synchronous close() while this loop still had connections
            raise StoreError("this memory is closed; open it again with memlane.open()")
        try:
            async with (await self._loop_connections()).connection() as conn:
                yield conn
        except psycopg.Error as e:
            raise self._error(e) from e

    async def aexists(self, namespace: Namespace, key: str, now: datetime | Callable[[], datetime]) -> bool:
        """:meth:`exists` on the event loop."""
        async with self._aconn() as conn:
            row = await (await conn.execute(_EXISTS, ("/".join(namespace), key), prepare=True)).fetchone()
        return _alive(row, now)

    async def aget(self, namespace: Namespace, key: str, now: datetime | Callable[[], datetime]) -> Item | None:
        """:meth:`get` on the event loop."""
        async with self._aconn() as conn:
            row = await (await conn.execute(_GET, ("/".join(namespace), key), prepare=True)).fetchone()
        return _live_item(row, namespace, now)

    async def aget_many(self, addresses: Sequence[tuple[Namespace, str]], now: datetime) -> builtins.list[Item | None]:
        """:meth:`get_many` on the event loop: one statement per 1000 addresses, one snapshot."""
        texts, rows = _as_text(addresses), []
        several = len(texts) > _CHUNK
        async with self._aconn() as conn, conn.transaction() if several else nullcontext():
            if several:
                await conn.execute(_ONE_SNAPSHOT)
            for params in _address_chunks(texts, c.ts(now)):
                rows.extend(await (await conn.execute(_GET_MANY, params)).fetchall())
        return _in_order(addresses, texts, rows)

    async def afetch(self, key: str, within: Within, limit: int, now: datetime) -> builtins.list[Item]:
        """:meth:`fetch` on the event loop."""
        async with self._aconn() as conn:
            rows = await (await conn.execute(*_fetch_statement(key, within, limit, now))).fetchall()
        return [c.row_to_item(r) for r in rows]

    async def alist(
        self, within: Within, key_prefix: str, limit: int, after: tuple[Namespace, str] | None, now: datetime
    ) -> builtins.list[Item]:
        """:meth:`list` on the event loop."""
        sql, params = c.list_statement(within, key_prefix, after, limit, now, "%s")
        async with self._aconn() as conn:
            rows = await (await conn.execute(sql, params, prepare=True)).fetchall()
        return [c.row_to_item(r) for r in rows]

    async def anamespaces(self, within: Within, now: datetime) -> builtins.list[Namespace]:
        """:meth:`namespaces` on the event loop."""
        sql, params = c.skip_scan(within, now, "%s")
        async with self._aconn() as conn, conn.transaction():
            await conn.execute(_IN_INDEX_ORDER)
            rows = await (await conn.execute(sql, params)).fetchall()
        return sorted(c.ns_tuple(r[0]) for r in rows)

    async def ahistory(self, namespace: Namespace, key: str) -> builtins.list[Version]:
        """:meth:`history` on the event loop."""
        async with self._aconn() as conn:
            rows = await (await conn.execute(_HISTORY, ("/".join(namespace), key))).fetchall()
        return [c.row_to_version(r) for r in rows]

    async def aselect(
        self, within: Within, where: Sequence[Any], order: str, limit: int, offset: int, now: datetime
    ) -> builtins.list[Item]:
        """:meth:`select` on the event loop."""
        async with self._aconn() as conn:
            rows = await (await conn.execute(*_select_statement(within, where, order, limit, offset, now))).fetchall()
        return [c.row_to_item(r) for r in rows]

    async def aclose(self) -> None:
        """Close the running event loop's async connections, if its reads opened any."""
        with self._loops_lock:
            mine = self._loops.pop(asyncio.get_running_loop(), None)
        if mine is not None:
            await mine.ender.aclose()  # closes them

    def migrate(self) -> builtins.list[str]:
        """Apply pending migrations in order, under an advisory lock."""
        applied: builtins.list[str] = []
        with self._write() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('memlane_migrate'))")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS _memlane_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            done = {r[0] for r in conn.execute("SELECT name FROM _memlane_migrations")}
            unknown = sorted(done - {name for name, _ in MIGRATIONS})
            if unknown:
                raise SchemaVersionError(
                    f"{self.location} has migrations {unknown} that this memlane does not know; upgrade memlane"
                )
            for name, statements in MIGRATIONS:
                if name in done:
                    continue
                for sql in statements:
                    conn.execute(sql)
                conn.execute("INSERT INTO _memlane_migrations (name, applied_at) VALUES (%s, now()::text)", (name,))
                applied.append(name)
            if applied and "m013_index_opt_out" in done:
                tsv = conn.execute(
                    "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a "
                    "ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE d.adrelid = 'items'::regclass "
                    "AND a.attname = 'tsv'"
                ).fetchone()
                if tsv is None or "indexed" not in tsv[0]:
                    for sql in _INDEXED_TSV:  # see _INDEXED_TSV
                        conn.execute(sql)
            if "m013_index_opt_out" in done:
                # m013 as first written made items_id partial (indexed rows only): every read by id but
                # search's (the query space's WHERE id = ..., an import's check) then read the whole table
                partial = conn.execute(
                    "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'items_id' "
                    "AND indexdef LIKE '%% WHERE %%'"
                ).fetchone()
                if partial:
                    conn.execute("DROP INDEX items_id")
                    conn.execute("CREATE UNIQUE INDEX items_id ON items (id)")
        if applied:
            self._vector_kind = self._detect_vector_kind()
        return applied

    def migrations(self) -> builtins.list[tuple[str, str]]:
        """Applied migrations with their times."""
        with self._conn() as conn:
            if conn.execute("SELECT to_regclass('_memlane_migrations')").fetchone()[0] is None:
                return []
            return conn.execute("SELECT name, applied_at FROM _memlane_migrations ORDER BY name").fetchall()

    def _detect_vector_kind(self) -> str:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'item_vectors'::regclass AND attname = 'embedding'"
            ).fetchone()
        return "pgvector" if row and row[0].startswith("vector") else "bytea"

    def get_meta(self, name: str) -> str | None:
        """A value from ``meta``."""
        with self._conn() as conn:
            row = conn.execute("SELECT value FROM meta WHERE name = %s", (name,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, name: str, value: str) -> None:
        """Set a value in ``meta``."""
        with self._write() as conn:
            conn.execute(
                "INSERT INTO meta (name, value) VALUES (%s, %s) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (name, value),
            )

    # -- writes -----------------------------------------------------------

    def put_many(
        self, rows: Sequence[PutRow], now: datetime, *, if_absent: bool = False, mark: bool | None = False
    ) -> builtins.list[Item]:
        """Upsert rows in one transaction (in order, so repeated addresses replace).

        With ``mark``, rows with text and no vector are marked for the indexer
        (``None``: if the store records an embedder, read in the same transaction).
        """
        with self._write() as conn, conn.cursor() as cur:
            return self._steps(cur, self._put_steps(rows, now, if_absent, mark))

    async def aput_many(
        self, rows: Sequence[PutRow], now: datetime, *, if_absent: bool = False, mark: bool | None = False
    ) -> builtins.list[Item]:
        """:meth:`put_many` on the event loop (the same steps, on an async connection)."""
        async with self._awrite() as cur:
            return await self._asteps(cur, self._put_steps(rows, now, if_absent, mark))

    def _put_steps(
        self, rows: Sequence[PutRow], now: datetime, if_absent: bool, mark: bool | None
    ) -> Steps[builtins.list[Item]]:
        at = c.ts(now)
        out: builtins.list[Item] = []
        stored, item = c.stored_text, Item.stored
        params = [
            (
                r.id,
                "/".join(r.namespace),
                r.key,
                r.value,
                r.value_type,
                stored(r.value, r.value_type, r.text),
                r.metadata,
                r.author,
                at,
                at,
                None if r.expires_at is None else r.expires_at.isoformat(timespec="microseconds"),
                r.indexed,
            )
            for r in rows
        ]
        if if_absent:
            for p in params:
                # serialise writers of this address for the rest of the transaction, then check
                yield "run", "SELECT pg_advisory_xact_lock(hashtext(%s || '/' || %s))", (p[1], p[2])
                taken = yield "one", f"SELECT 1 FROM items WHERE namespace = %s AND key = %s AND {_LIVE}", (
                    p[1], p[2], at,
                )  # fmt: skip
                if taken:
                    raise ConflictError(f"an item already exists at {p[1]} key {p[2]!r}")
        returned: builtins.list[Any] = []
        for start, stop in c.unique_spans([(p[1], p[2]) for p in params]):
            span = params[start:stop]
            if len(span) >= _COPY_ROWS and (yield from self._stage_allowed()):
                yield "run", _STAGE, None
                if start:
                    yield "run", "DELETE FROM pg_temp.memlane_put_rows", None  # an earlier span's rows
                yield "copy", _STAGE_COPY, span
                upserted = yield "all", _UPSERT_STAGED, None
            elif span:
                upserted = yield "all", _UPSERT_ARRAYS, [builtins.list(col) for col in zip(*span, strict=True)]
            else:
                continue
            done = {(ns, key): rest for ns, key, *rest in upserted}
            returned.extend(done[(p[1], p[2])] for p in span)
        if mark is None:
            mark = (yield "one", "SELECT 1 FROM meta WHERE name = 'embedder'", None) is not None
        vectors = []
        marks = []
        for r, (ref, item_id, created, version) in zip(rows, returned, strict=True):
            # the returned item decodes nothing until it is read: the caller mostly wants ids and versions
            row = (item_id, None, r.key, r.value, r.value_type, r.text, r.metadata, r.author)
            out.append(
                item((*row, now if created == at else created, now, r.expires_at, version, r.indexed), r.namespace)
            )
            if r.vector is not None:
                vectors.append((ref, version, r.vector))
            elif mark and r.text and r.indexed:
                marks.append((ref, version))
        if vectors:
            yield from self._vector_steps(vectors)
            yield "many", "DELETE FROM item_pending WHERE item_ref = %s", [(v[0],) for v in vectors]
        if marks:
            latest = dict(marks)  # an address written twice in the batch: its last version
            yield "run", _MARK_ARRAYS, ([*latest], [*latest.values()])
        return out

    def _stage_allowed(self) -> Steps[bool]:
        """Whether this role may create the temporary table a large batch is COPYed into (asked once)."""
        if self._stage is None:
            row = yield "one", "SELECT has_database_privilege(current_database(), 'TEMPORARY')", None
            self._stage = bool(row[0])
        return self._stage

    def _steps(self, cur: Any, steps: Steps[T]) -> T:
        """Carry out a write's steps on a synchronous cursor, in its transaction."""
        result: Any = None
        try:
            while True:
                kind, sql, argument = steps.send(result)
                result = None
                if kind == "copy":
                    with cur.copy(sql) as copy:
                        for row in argument:
                            copy.write_row(row)
                elif kind == "many":
                    cur.executemany(sql, argument)
                else:
                    cur.execute(sql, argument)
                    result = cur.fetchone() if kind == "one" else cur.fetchall() if kind == "all" else None
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _vector_param(self, blob: bytes) -> Any:
        if self._vector_kind == "bytea":
            return blob
        import numpy as np

        return "[" + ",".join(repr(float(x)) for x in np.frombuffer(blob, dtype="<f4")) + "]"

    def _upsert_vectors(self, cur: Any, rows: Sequence[tuple[int, int, bytes]]) -> None:
        self._steps(cur, self._vector_steps(rows))

    def _vector_steps(self, rows: Sequence[tuple[int, int, bytes]]) -> Steps[None]:
        cast = "::vector" if self._vector_kind == "pgvector" else ""
        if cast and rows and self._index_dimension != len(rows[0][2]) // 4:
            # made with the first vectors, while the table is small: an index built
            # at the first search would stall that search for minutes on a large table
            yield from self._index_steps(len(rows[0][2]) // 4)
        yield (
            "many",
            # FOR KEY SHARE: an item deleted by a writer meanwhile is skipped, not a foreign key violation
            f"INSERT INTO item_vectors (item_ref, version, embedding) SELECT ref, version, %s{cast} FROM items "
            "WHERE ref = %s AND version = %s AND indexed FOR KEY SHARE ON CONFLICT (item_ref) DO UPDATE SET "
            "version = excluded.version, "
            "embedding = excluded.embedding",
            [(self._vector_param(blob), ref, version) for ref, version, blob in rows],
        )

    def delete(self, namespace: Namespace, key: str, now: datetime, author: str | None) -> bool:
        """Delete a live item, keeping it in history."""
        with self._write() as conn, conn.cursor() as cur:
            return self._steps(cur, _delete_steps(namespace, key, now, author))

    def delete_by_id(self, item_id: str, within: Within, now: datetime, author: str | None) -> bool:
        """Delete the live item with this id inside ``within``, keeping it in history (as :meth:`delete`)."""
        at = c.ts(now)
        where, params = self._filter(within, "", now)
        with self._write() as conn, conn.cursor() as cur:
            cur.execute(
                f"DELETE FROM items WHERE id = %s AND {where} RETURNING {c.VERSION_COLUMNS}", (item_id, *params)
            )
            gone = cur.fetchall()
            if gone:
                cur.executemany(_HISTORY_ROW, [(*r, "delete", at, author) for r in gone])
        return bool(gone)

    async def adelete(self, namespace: Namespace, key: str, now: datetime, author: str | None) -> bool:
        """:meth:`delete` on the event loop."""
        async with self._awrite() as cur:
            return await self._asteps(cur, _delete_steps(namespace, key, now, author))

    def _history(self, conn: Any, rows: Sequence[Any], change: str, at: str, author: str | None) -> None:
        if rows:
            with conn.cursor() as cur:
                cur.executemany(_HISTORY_ROW, [(*r, change, at, author) for r in rows])

    def clear(self, prefix: Namespace, now: datetime, author: str | None) -> int:
        """Delete everything under a prefix; live items go to history."""
        at = c.ts(now)
        rng = c.ns_range(prefix)
        with self._write() as conn:
            rows = conn.execute(f"DELETE FROM items WHERE {_IN_NS} RETURNING {c.VERSION_COLUMNS}", rng).fetchall()
            live = [r for r in rows if r[10] is None or r[10] > at]
            self._history(conn, live, "clear", at, author)
        return len(live)

    def cleanup(self, now: datetime) -> int:
        """Physically delete expired rows."""
        with self._write() as conn:
            return conn.execute(
                "DELETE FROM items WHERE expires_at IS NOT NULL AND expires_at <= %s", (c.ts(now),)
            ).rowcount

    # -- exact reads ------------------------------------------------------

    def access_head(self) -> int:
        """The access log's head in one autocommit statement (a read session would take four round trips)."""
        with self._read() as conn:
            return int(conn.execute(ACCESS_HEAD, prepare=True).fetchone()[0])

    def exists(self, namespace: Namespace, key: str, now: datetime | Callable[[], datetime]) -> bool:
        """Whether a live item is at an address: its expiry read, never its value."""
        with self._read() as conn:
            row = conn.execute(_EXISTS, ("/".join(namespace), key), prepare=True).fetchone()
        return _alive(row, now)

    def get(self, namespace: Namespace, key: str, now: datetime | Callable[[], datetime]) -> Item | None:
        """The live item at an address."""
        with self._read() as conn:
            row = conn.execute(_GET, ("/".join(namespace), key), prepare=True).fetchone()
        return _live_item(row, namespace, now)

    def get_by_id(self, item_id: str, within: Within, now: datetime) -> Item | None:
        """The live item with this id inside ``within``: one statement over the ``items_id`` index."""
        where, params = self._filter(within, "", now)
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {c.ITEM_COLUMNS} FROM items WHERE id = %s AND {where}", (item_id, *params)
            ).fetchone()
        return None if row is None else c.row_to_item(row)

    def get_many(self, addresses: Sequence[tuple[Namespace, str]], now: datetime) -> builtins.list[Item | None]:
        """Many addresses in one statement per 1000."""
        texts, rows = _as_text(addresses), []
        # one statement needs no transaction for a consistent answer (and saves two round trips)
        several = len(texts) > _CHUNK
        with self._conn() if several else self._read() as conn, conn.transaction() if several else nullcontext():
            if several:
                # several statements, one snapshot: under READ COMMITTED each chunk would see later commits
                conn.execute(_ONE_SNAPSHOT)
            for params in _address_chunks(texts, c.ts(now)):
                rows.extend(conn.execute(_GET_MANY, params).fetchall())
        return _in_order(addresses, texts, rows)

    def fetch(
        self, key: str, within: Within, limit: int, now: datetime, conditions: Sequence[Any] = ()
    ) -> builtins.list[Item]:
        """Same key across namespaces meeting ``conditions``, newest first, ties by namespace."""
        with self._conn() as conn:
            rows = conn.execute(*_fetch_statement(key, within, limit, now, conditions)).fetchall()
        return [c.row_to_item(r) for r in rows]

    def _filter(self, within: Within, key_prefix: str, now: datetime) -> tuple[str, builtins.list[Any]]:
        return c.live_filter(within, key_prefix, now, "%s")

    def list(
        self,
        within: Within,
        key_prefix: str,
        limit: int,
        after: tuple[Namespace, str] | None,
        now: datetime,
    ) -> builtins.list[Item]:
        """Items in address order after a cursor position."""
        sql, params = c.list_statement(within, key_prefix, after, limit, now, "%s")
        with self._read() as conn:
            rows = conn.execute(sql, params, prepare=True).fetchall()
        return [c.row_to_item(r) for r in rows]

    def namespaces(self, within: Within, now: datetime) -> builtins.list[Namespace]:
        """Distinct live namespaces inside ``within``, one index seek per namespace (see ``skip_scan``)."""
        sql, params = c.skip_scan(within, now, "%s")
        with self._conn() as conn, conn.transaction():
            conn.execute(_IN_INDEX_ORDER)
            rows = conn.execute(sql, params).fetchall()
        return sorted(c.ns_tuple(r[0]) for r in rows)

    def addresses(self, within: Within, key_prefix: str, now: datetime) -> Iterator[tuple[Namespace, str]]:
        """Every live address inside ``within`` under a key prefix."""
        where, params = self._filter(within, key_prefix, now)
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT namespace, key FROM items WHERE {where} ORDER BY namespace, key", params
            ).fetchall()
        for ns, key in rows:
            yield c.ns_tuple(ns), key

    def history(self, namespace: Namespace, key: str) -> builtins.list[Version]:
        """Past versions, newest first."""
        with self._conn() as conn:
            rows = conn.execute(_HISTORY, ("/".join(namespace), key)).fetchall()
        return [c.row_to_version(r) for r in rows]

    def stats(self, now: datetime) -> Stats:
        """Counts and relation sizes."""
        at = c.ts(now)
        with self._conn() as conn, conn.transaction():
            active, total = conn.execute(
                f"SELECT count(*) FILTER (WHERE {_LIVE}), count(*) FROM items", (at,)
            ).fetchone()
            namespaces = conn.execute(f"SELECT count(DISTINCT namespace) FROM items WHERE {_LIVE}", (at,)).fetchone()[0]
            history = conn.execute("SELECT count(*) FROM item_history").fetchone()[0]
            size = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.relname IN ('items', 'item_history', 'item_vectors', 'meta') "
                "AND c.relnamespace = current_schema()::regnamespace"
            ).fetchone()[0]
            schema = conn.execute("SELECT count(*) FROM _memlane_migrations").fetchone()[0]
        return Stats(
            backend=self.backend,
            location=self.location,
            active_items=active,
            expired_items=total - active,
            namespaces=namespaces,
            history_versions=history,
            size_bytes=int(size),
            schema_version=schema,
        )

    # -- ranked reads -----------------------------------------------------

    def lexical(
        self, terms: Sequence[str], within: Within, k: int, where: Sequence[Any] = ()
    ) -> builtins.list[Nomination]:
        """Full-text nomination: IDF-weighted, length-normalised ``ts_rank`` (BM25-like), one round trip.

        The terms are normalised by the ``memlane`` configuration into
        lexemes, each quoted for ``to_tsquery`` (a word, never syntax). A
        lexeme's weight is BM25's IDF, ``ln(1 + (N - n + 0.5) / (n + 0.5))``,
        with ``n`` the rows it matches in the searched scope and ``N`` the
        rows of the scope (the planner's estimate for the whole table). See
        ``_LEXICAL`` for how one statement does it all. A ``where`` joins the scope's test where each word's
        rows are found, so the ``k`` ranked are the best among the items meeting it (the IDF counts those rows).
        """
        if not terms:
            return []
        params: dict[str, Any] = {"text": " ".join(terms), "k": k, "cap": max(LEXICAL_CAP, k), "common": COMMON_SHARE}
        if not within:
            return []
        if any(not prefix for prefix in within):
            statement = _LEXICAL_ALL
        elif len(within) == 1:
            statement = _LEXICAL_IN_PREFIX
            params.update(zip(("ns", "ns_lo", "ns_hi"), c.ns_range(within[0]), strict=True))
        else:
            if len(within) <= c.SMALL_SCOPE:
                statement = _lexical_in_prefixes((), len(within))
                for i, prefix in enumerate(within):
                    params.update(zip((f"r{i}", f"r{i}_lo", f"r{i}_hi"), c.ns_range(prefix), strict=True))
            else:
                lengths, arrays = c.under_any_params(within, "postgres")
                statement = _lexical_in_prefixes(lengths)
                params.update((f"w{i}", a) for i, a in enumerate(arrays))
                params["prefixes"] = c.prefix_lines(within)
        if where:
            from . import where_sql

            test, test_params = where_sql.postgres_sql(builtins.list(where), table="i", named="where")
            statement = statement.replace("/*where*/", f"\n      AND {test}")
            # no word is left out as common: the items meeting ``where`` may hold only the common ones (each
            # word's rows are still capped), else a filtered search finds none of them
            statement = statement.replace("/*skip*/", " AND FALSE")
            params.update((f"where{i}", p) for i, p in enumerate(test_params))
        with self._one_trip(_chars(params.values())) as (conn, sync):
            # the settings hold for the ranking statement only (one transaction)
            conn.execute(_LEXICAL_SETTINGS, prepare=True)
            cur = conn.execute(statement, params, prepare=True if not where else None)
            sync()
            rows = cur.fetchall()
        return [(item_id, float(score), version) for item_id, score, version in rows]

    @contextmanager
    def _one_trip(self, chars: int) -> Iterator[tuple[Any, Callable[[], None]]]:
        """The read connection and a ``sync`` for a few statements in one transaction and one round trip.

        They go out in a pipeline before one Sync, so they run in one implicit transaction. Statements that
        carry more than :data:`_PIPELINED_CHARS` characters of parameters (the prefixes of a large scope) run
        one after another in a transaction of their own instead: psycopg's pipeline can wait forever on a
        message larger than the socket's buffer (seen with 3.3.9 and 50,000 rooms; psycopg/psycopg#685).
        """
        if chars > _PIPELINED_CHARS:
            with self._read() as conn, conn.transaction():
                yield conn, lambda: None
        else:
            with self._read() as conn, conn.pipeline() as pipeline:
                yield conn, pipeline.sync

    def document_counts(self, terms: Sequence[str], within: Within, limit: int) -> tuple[int, dict[str, int]]:
        """Rows in scope and rows containing each term (text or address), each count stopping at ``limit``.

        The cost follows the counts asked for, not the table: a scope of fewer
        than ``SCOPE_DRIVEN_ROWS`` rows is counted from its own rows (the
        namespace index, each row's tsvector tested), never from a word's whole
        posting list; over the whole table a word the column statistics put in
        ``COMMON_COUNTED`` of the rows is counted by reading rows until ``limit``
        hold it (about ``limit / share`` rows) instead of building its bitmap.
        Both ways give the same counts; only the work differs.
        """
        inside, inside_params = c.scope_ranges(within, p="%s", column="namespace")
        # every statement carries the scope's parameters
        with self._one_trip(_chars(inside_params) * (1 + 3 * len(terms))) as (conn, sync):
            # planned for its parameters (the read connection plans generically; _LEXICAL_SETTINGS)
            conn.execute(_LEXICAL_SETTINGS, prepare=True)
            total = conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM items {'WHERE ' + inside if inside else ''} LIMIT %s) s",
                (*inside_params, limit),
            )
            if inside:
                small, head = _small_scope(within, inside, inside_params)
                sql = _COUNT_IN_SCOPE.format(inside=inside, small=small)
                each = {
                    term: conn.execute(sql, (*head, term, *inside_params, limit, term, *inside_params, limit))
                    for term in terms
                }
            else:
                each = {
                    term: conn.execute(_COUNT_ALL, (COMMON_COUNTED, term, term, limit, term, limit)) for term in terms
                }
            sync()
            counts = {term: int(cur.fetchone()[0]) for term, cur in each.items()}
            return int(total.fetchone()[0]), counts

    def hydrate(self, ids: Sequence[str], within: Within, now: datetime, where: Sequence[Any] = ()) -> dict[str, Item]:
        """Live rows inside ``within`` meeting ``where`` for candidate item ids (one statement, so one snapshot)."""
        from . import where_sql

        if not ids:
            return {}
        live, params = self._filter(within, "", now)
        test, test_params = where_sql.postgres_sql(builtins.list(where))
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {c.ITEM_COLUMNS} FROM items WHERE id = ANY(%s) AND indexed AND {live} AND {test}",
                (builtins.list(ids), *params, *test_params),
            ).fetchall()
        return {r[0]: c.row_to_item(r) for r in rows}

    # -- vectors ----------------------------------------------------------

    def _require_pgvector(self) -> None:
        if self._vector_kind != "pgvector":
            raise BackendUnavailableError(
                "the vector channel needs the PostgreSQL extension 'vector' (pgvector), which this database "
                "does not have; install pgvector and run CREATE EXTENSION vector, or search with "
                "channels=['lexical']"
            )

    def _ensure_index(self, conn: Any, dimension: int) -> None:
        with conn.cursor() as cur:
            self._steps(cur, self._index_steps(dimension))

    def _index_steps(self, dimension: int) -> Steps[None]:
        # HNSW needs a fixed dimension, known only once an embedder is chosen
        if self._index_dimension == dimension:
            return
        name = f"item_vectors_hnsw_{dimension}"
        # look before creating: CREATE INDEX IF NOT EXISTS would lock the table even when the index is there
        if (yield "one", "SELECT to_regclass(%s)", (name,))[0] is None:
            yield (
                "run",
                f"CREATE INDEX IF NOT EXISTS {name} ON item_vectors "
                f"USING hnsw ((embedding::vector({dimension})) vector_cosine_ops) "
                f"WITH (m = {_HNSW_M}, ef_construction = {_HNSW_EF_CONSTRUCTION})",
                None,
            )
        self._index_dimension = dimension

    def vector(
        self, query: Sequence[float], within: Within, k: int, where: Sequence[Any] = ()
    ) -> builtins.list[Nomination]:
        """Cosine nomination through the HNSW index; inside a scope of up to ``_EXACT_SCOPE_ROWS``, an exact scan.

        The index is approximate (as any HNSW): the top ``k`` of the ``ef_search``
        nearest it finds (``ef_search`` at least ``_EF_SEARCH``). Inside a scope of
        at most ``_EXACT_SCOPE_ROWS`` items (an agent's namespace, a room) the exact
        scan costs no more and gives the true top ``k``. Inside a larger scope the
        index's nearest are filtered by the scope; when fewer than ``k`` are inside,
        the search is repeated with an ``ef_search`` widened by the share found
        inside, and when even pgvector's largest (1000) holds fewer than ``k``, the
        exact scan ranks the scope. Every statement applies the scope itself, and
        ``where`` with it. The index is made with the first vectors written
        (``_vector_steps``), while the table is small; a search only looks that it
        is there (and makes it where it is missing: a table with no vector yet).
        """
        self._require_pgvector()
        if not within:
            return []
        dim = len(query)
        literal = "[" + ",".join(repr(float(x)) for x in query) + "]"
        cast = f"::vector({dim})"
        # a small scope as index ranges: the exact scan reads the scope's rows, not the table's
        inside, inside_params = c.scope_ranges(within, "%s", column="items.namespace")
        ef = max(_EF_SEARCH, min(_EF_MAX, 2 * k))
        with self._conn() as conn, conn.transaction():
            self._ensure_index(conn, dim)
            conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
            if not inside and not where:
                # the index ranks alone; id is read for the top k in the same statement
                return _nominations(conn.execute(_vector_nearest(cast, ""), (literal, literal, k, k)).fetchall())
            rooted = not inside
            if where:
                from . import where_sql

                test, test_params = where_sql.postgres_sql(builtins.list(where))
                inside = f"{inside} AND {test}" if inside else test
                inside_params = [*inside_params, *test_params]
            if k <= _EF_MAX and (rooted or self._scope_exceeds(conn, within, _EXACT_SCOPE_ROWS)):
                nearest = _vector_nearest(cast, inside)
                while True:
                    rows = conn.execute(nearest, (literal, literal, ef, *inside_params, k)).fetchall()
                    if len(rows) >= k or ef >= _EF_MAX:
                        break
                    # the share inside so far says how deep k of them lie; a little more, for the graph's misses
                    ef = min(_EF_MAX, max(2 * ef, (ef * k * 3) // (2 * max(1, len(rows)))))
                    conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                if len(rows) >= k:
                    return _nominations(rows)
            return _nominations(
                conn.execute(
                    _EXACT_IN_SCOPE.format(cast=cast, inside=inside), (literal, dim, *inside_params, k)
                ).fetchall()
            )

    @staticmethod
    def _scope_exceeds(conn: Any, within: Within, rows: int) -> bool:
        """Whether more than ``rows`` items lie inside the scope, counting no further than that.

        A small scope is its prefixes' index ranges; a larger one is bounded by the
        span from the lowest to the highest prefix, one range of the (namespace, key)
        index (no ``ORDER BY``: a sort would read the whole scope).
        """
        if len(within) <= c.SMALL_SCOPE:
            inside, params = c.scope_ranges(within, "%s")
            sql = f"SELECT count(*) FROM (SELECT 1 FROM items WHERE {inside} LIMIT %s) AS s"
            return int(conn.execute(sql, (*params, rows + 1)).fetchone()[0]) > rows
        inside, params = c.within_filter(within, "%s")
        ranges = [c.ns_range(prefix) for prefix in within]
        sql = (
            "SELECT count(*) FROM (SELECT 1 FROM items WHERE namespace >= %s AND namespace < %s "
            f"AND {inside} LIMIT %s) AS s"
        )
        bounds = (min(r[0] for r in ranges), max(r[2] for r in ranges))
        return int(conn.execute(sql, (*bounds, *params, rows + 1)).fetchone()[0]) > rows

    def vector_backlog(self, limit: int, *, after: int = 0) -> builtins.list[tuple[int, int, str]]:
        """Items whose vector is missing or stale."""
        with self._conn() as conn:
            return conn.execute(
                f"SELECT i.ref, i.version, {c.text_sql('postgres', 'i.')} FROM items i "
                "LEFT JOIN item_vectors v ON v.item_ref = i.ref "
                f"WHERE i.ref > %s AND {c.to_embed_sql('i.')} AND (v.item_ref IS NULL OR v.version <> i.version) "
                "ORDER BY i.ref LIMIT %s",
                (after, limit),
            ).fetchall()

    def stored_dimension(self) -> int | None:
        """The dimension of one stored item vector (``pgvector``'s own, or float32 bytes without it), or ``None``."""
        dims = "vector_dims(embedding)" if self._vector_kind == "pgvector" else "length(embedding) / 4"
        with self._conn() as conn:
            row = conn.execute(f"SELECT {dims} FROM item_vectors LIMIT 1").fetchone()
        return None if row is None else int(row[0])

    def count_vectors(self) -> tuple[int, int]:
        """``(items with a current vector, items without one)``."""
        with self._conn() as conn:
            current, total = conn.execute(
                "SELECT (SELECT count(*) FROM item_vectors v JOIN items i ON i.ref = v.item_ref "
                f"AND i.version = v.version), (SELECT count(*) FROM items WHERE {c.to_embed_sql()})"
            ).fetchone()
        return current, total - current

    def put_vectors(self, rows: Sequence[tuple[int, int, bytes]]) -> int:
        """Store vectors where the item is still at that version."""
        with self._write() as conn, conn.cursor() as cur:
            self._upsert_vectors(cur, rows)
            written = max(cur.rowcount, 0)
            cur.executemany(
                "DELETE FROM item_pending WHERE item_ref = %s AND version = %s", [(r, v) for r, v, _ in rows]
            )
            return written

    # -- write-behind indexing --------------------------------------------

    def mark_missing(self) -> int:
        """Mark every item with text whose vector is missing or stale and that is not marked yet."""
        with self._write() as conn:
            return max(
                conn.execute(
                    "INSERT INTO item_pending (item_ref, version) SELECT i.ref, i.version FROM items i "
                    f"LEFT JOIN item_vectors v ON v.item_ref = i.ref WHERE {c.to_embed_sql('i.')} "
                    "AND (v.item_ref IS NULL OR v.version <> i.version) ON CONFLICT (item_ref) DO NOTHING"
                ).rowcount,
                0,
            )

    def claim_pending(
        self, limit: int, owner: str, lease_s: float, within: Within | None = None
    ) -> builtins.list[tuple[int, int, str, int]]:
        """Claim up to ``limit`` marks no live lease holds: ``(ref, version, text, mark_version)``.

        ``FOR UPDATE SKIP LOCKED`` keeps two claimers off the same marks; the
        lease (the server's clock) keeps the next claimers off them until it
        runs out, which is how a crashed indexer's claims come back. ``within``:
        only marks of items under those prefixes (a search embedding its own scope first).
        """
        free = "(q.claimed_until IS NULL OR q.claimed_until < clock_timestamp())"
        inside, inside_params = c.within_filter([()] if within is None else within, "%s", column="i.namespace")
        scoped = f" AND {inside}" if inside else ""
        marks_in = f"item_pending q JOIN items i ON i.ref = q.item_ref WHERE {free}{scoped}"
        with self._read() as conn:  # an idle indexer looks without a write transaction
            free_row = conn.execute(f"SELECT 1 FROM {marks_in} LIMIT 1", inside_params).fetchone()
        if free_row is None:
            return []
        with self._write() as conn:
            refs = conn.execute(
                f"WITH c AS (SELECT q.item_ref FROM {marks_in} "
                "ORDER BY q.item_ref LIMIT %s FOR UPDATE OF q SKIP LOCKED) "
                "UPDATE item_pending p SET claimed_until = clock_timestamp() + make_interval(secs => %s), "
                "claimed_by = %s FROM c WHERE p.item_ref = c.item_ref RETURNING p.item_ref, p.version",
                (*inside_params, limit, float(lease_s), owner),
            ).fetchall()
            if not refs:
                return []
            marks = dict(refs)
            rows = conn.execute(
                f"SELECT ref, version, {c.text_sql('postgres')} FROM items WHERE ref = ANY(%s) ORDER BY ref",
                (builtins.list(marks),),
            ).fetchall()
        return [(int(r), int(v), t, int(marks[r])) for r, v, t in rows]

    def finish_pending(self, done: Sequence[tuple[int, int, bytes | None, int]], owner: str) -> int:
        """Store the vectors of claimed items still at the embedded version and clear their marks.

        A mark is deleted only at the version it had when claimed: a writer that
        moved the item on meanwhile re-marked it at its new version, in its own transaction.
        """
        vectors = [(ref, version, blob) for ref, version, blob, _ in done if blob is not None]
        with self._write() as conn, conn.cursor() as cur:
            written = 0
            if vectors:
                self._upsert_vectors(cur, vectors)
                written = max(cur.rowcount, 0)
            cur.executemany(
                "DELETE FROM item_pending WHERE item_ref = %s AND version = %s", [(d[0], d[3]) for d in done]
            )
            cur.executemany(
                "UPDATE item_pending SET claimed_until = NULL, claimed_by = NULL WHERE item_ref = %s "
                "AND claimed_by = %s",
                [(d[0], owner) for d in done],
            )
        return written

    def release_pending(self, owner: str) -> None:
        """Give back every mark ``owner`` still holds (an indexer stopping cleanly)."""
        with self._write() as conn:
            conn.execute(
                "UPDATE item_pending SET claimed_until = NULL, claimed_by = NULL WHERE claimed_by = %s", (owner,)
            )

    def count_pending(self, within: Within) -> int:
        """Marks of items inside ``within`` still waiting for a vector.

        A small scope is written as index ranges, so the planner may read the scope's rows and look each up
        among the marks, instead of every mark of a long backlog (a bulk load being embedded).
        """
        inside, params = c.scope_ranges(within, p="%s", column="i.namespace")
        sql = "SELECT count(*) FROM item_pending p"
        if inside:
            sql += f" JOIN items i ON i.ref = p.item_ref WHERE {inside}"
        if not inside:
            with self._read() as conn:
                return int(conn.execute(sql, prepare=True).fetchone()[0])
        with self._one_trip(_chars(params)) as (conn, sync):
            # planned for its values (the read connection plans generically, and its generic plan reads every
            # mark: 8.4 ms beside the 300,000 of a bulk load, where the scope's 5 rows take 0.05)
            conn.execute(_CUSTOM_PLAN, prepare=True)
            cur = conn.execute(sql, params, prepare=True)
            sync()
            return int(cur.fetchone()[0])

    def drop_vectors(self) -> None:
        """Delete every vector and any HNSW index.

        ``TRUNCATE``, not ``DELETE``: an index built next for another dimension
        would still read the dead rows of the old one until a VACUUM.
        """
        with self._write() as conn:
            conn.execute("TRUNCATE item_vectors")
            for (name,) in conn.execute(
                "SELECT indexname FROM pg_indexes "
                "WHERE tablename = 'item_vectors' AND indexname LIKE 'item_vectors_hnsw_%%'"
            ).fetchall():
                conn.execute(f'DROP INDEX IF EXISTS "{name}"')
        self._index_dimension = None

    # -- export / import --------------------------------------------------

    def export_records(self) -> Iterator[dict[str, Any]]:
        """Items in address order, then history oldest first."""
        with self._conn() as conn, conn.transaction():
            items = conn.execute(f"SELECT {c.ITEM_COLUMNS} FROM items ORDER BY namespace, key").fetchall()
            versions = conn.execute(f"SELECT {c.HISTORY_COLUMNS} FROM item_history ORDER BY seq").fetchall()
        for r in items:
            yield c.item_record(r)
        for r in versions:
            yield c.version_record(r)

    def import_records(
        self, records: Iterable[dict[str, Any]], now: datetime, *, numbers: Iterable[int] | None = None
    ) -> int:
        """Write exported records verbatim; idempotent."""
        at = c.ts(now)
        written = 0
        with self._write() as conn:
            for kind, row in c.import_rows(records, numbers):
                if kind == "item":
                    ns, key = row[1], row[2]
                    current = conn.execute(
                        f"SELECT {c.ITEM_COLUMNS} FROM items WHERE namespace = %s AND key = %s", (ns, key)
                    ).fetchone()
                    if current is not None and tuple(current) == row:
                        continue
                    if current is not None:
                        gone = conn.execute(
                            f"DELETE FROM items WHERE namespace = %s AND key = %s RETURNING {c.VERSION_COLUMNS}",
                            (ns, key),
                        ).fetchall()
                        self._history(conn, gone, "import", at, None)
                    try:
                        conn.execute(f"INSERT INTO items ({c.ITEM_COLUMNS}) VALUES ({', '.join(['%s'] * 13)})", row)
                    except psycopg.errors.UniqueViolation as e:
                        raise ConflictError(c.id_taken(row[0], ns, key)) from e
                else:
                    exists = conn.execute(
                        "SELECT 1 FROM item_history WHERE item_id = %s AND version = %s AND change = %s "
                        "AND changed_at = %s",
                        (row[0], row[11], row[12], row[13]),
                    ).fetchone()
                    if exists:
                        continue
                    conn.execute(
                        f"INSERT INTO item_history ({c.HISTORY_COLUMNS}) VALUES ({', '.join(['%s'] * 15)})", row
                    )
                written += 1
        return written

    @contextmanager
    def session(self, *, write: bool = False) -> Iterator[c.SqlSession]:
        """A transaction (``write``) or snapshot for the facts layer's portable SQL."""
        with self._conn() as conn:
            if write:
                with conn.transaction():
                    yield c.SqlSession(conn, "postgres")
            else:
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    yield c.SqlSession(conn, "postgres")

    def close(self) -> None:
        """Close the pool and the read connection (the async reads' connections close with :meth:`aclose`)."""
        if not self._closed:
            self._closed = True
            self._pool.close()
            with self._loops_lock:
                # a running loop's too: its next call is refused (_aconn); each set leaves _loops as its loop
                # closes it (aclose, or the loop's end)
                for mine in self._loops.values():
                    mine.finish()
            with self._reader_lock:
                if self._reader is not None:
                    self._reader.close()

    # -- query space (memlane.domain.query) ---------------------------------

    def query_runner(self) -> Any:
        """The query space's runner (:class:`memlane.store.runner.PostgresRunner`), made once per store."""
        runner = getattr(self, "_query_runner", None)
        if runner is None:
            from .runner import PostgresRunner

            runner = self._query_runner = PostgresRunner(self)
        return runner

    # -- conditions on values (Memory.select) ---------------------------------

    def select(
        self, within: Within, where: Sequence[Any], order: str, limit: int, offset: int, now: datetime
    ) -> builtins.list[Item]:
        """Live items inside ``within`` meeting ``where`` (jsonb ``#>`` with bound paths), paged."""
        with self._conn() as conn:
            rows = conn.execute(*_select_statement(within, where, order, limit, offset, now)).fetchall()
        return [c.row_to_item(r) for r in rows]
