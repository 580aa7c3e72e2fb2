"""Tables of the facts layer (migration ``m003_facts``), one list per backend.

Rows are appended, never rewritten: a fact's belief ends by stamping
``retracted_at`` on its row, and a change of validity (``end_fact``) closes the
current row and appends the next version, so every state stays readable at its
time. Identifiers are text (``ent_...``, ``fact_...``) made in Python, so a
memory moves between backends without renumbering.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._common import SqlSession

_TABLES = [
    """CREATE TABLE entities (
        id TEXT PRIMARY KEY,
        namespace TEXT NOT NULL,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        norm TEXT NOT NULL,
        profile TEXT NOT NULL DEFAULT '',
        merged_into TEXT REFERENCES entities (id),
        created_at TEXT NOT NULL,
        author TEXT
    )""",
    "CREATE INDEX entities_norm ON entities (norm)",
    "CREATE INDEX entities_namespace ON entities (namespace)",
    "CREATE INDEX entities_merged_into ON entities (merged_into)",
    """CREATE TABLE entity_aliases (
        entity_id TEXT NOT NULL REFERENCES entities (id),
        alias TEXT NOT NULL,
        norm TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (entity_id, norm)
    )""",
    "CREATE INDEX entity_aliases_norm ON entity_aliases (norm)",
    """CREATE TABLE facts (
        id TEXT NOT NULL,
        version INTEGER NOT NULL,
        namespace TEXT NOT NULL,
        fact_key TEXT NOT NULL,
        subject TEXT NOT NULL REFERENCES entities (id),
        predicate TEXT NOT NULL,
        object_entity TEXT REFERENCES entities (id),
        object_value TEXT,
        text TEXT NOT NULL,
        valid_from TEXT,
        valid_to TEXT,
        recorded_at TEXT NOT NULL,
        retracted_at TEXT,
        author TEXT,
        PRIMARY KEY (id, version)
    )""",
    "CREATE INDEX facts_key ON facts (fact_key)",
    "CREATE INDEX facts_subject ON facts (subject)",
    "CREATE INDEX facts_object ON facts (object_entity)",
    """CREATE TABLE evidence (
        fact_id TEXT NOT NULL,
        source TEXT NOT NULL,
        recorded_at TEXT NOT NULL,
        author TEXT,
        PRIMARY KEY (fact_id, source)
    )""",
    """CREATE TABLE documents (
        id TEXT PRIMARY KEY,
        namespace TEXT NOT NULL,
        title TEXT NOT NULL,
        source TEXT,
        created_at TEXT,
        recorded_at TEXT NOT NULL,
        chunk_count INTEGER NOT NULL,
        author TEXT
    )""",
    "CREATE INDEX documents_namespace ON documents (namespace)",
    """CREATE TABLE chunks (
        id TEXT PRIMARY KEY,
        document_id TEXT NOT NULL REFERENCES documents (id),
        namespace TEXT NOT NULL,
        position INTEGER NOT NULL,
        text TEXT NOT NULL,
        UNIQUE (document_id, position)
    )""",
    """CREATE TABLE claims (
        id TEXT PRIMARY KEY,
        namespace TEXT NOT NULL,
        text TEXT NOT NULL,
        norm TEXT NOT NULL,
        speaker TEXT,
        asserted_at TEXT,
        chunk_id TEXT REFERENCES chunks (id),
        recorded_at TEXT NOT NULL,
        superseded_by TEXT REFERENCES claims (id),
        superseded_at TEXT,
        author TEXT
    )""",
    "CREATE INDEX claims_norm ON claims (norm)",
    "CREATE INDEX claims_chunk ON claims (chunk_id)",
    """CREATE TABLE claim_entities (
        claim_id TEXT NOT NULL REFERENCES claims (id),
        entity_id TEXT NOT NULL REFERENCES entities (id),
        PRIMARY KEY (claim_id, entity_id)
    )""",
    "CREATE INDEX claim_entities_entity ON claim_entities (entity_id)",
]

SQLITE: list[str] = [
    *_TABLES,
    """CREATE TABLE graph_vectors (
        kind TEXT NOT NULL,
        ref TEXT NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (kind, ref)
    )""",
    # one full-text index per searchable table; namespace rides along so a
    # scoped search filters inside the index scan
    *(
        f"CREATE VIRTUAL TABLE {kind}_fts USING fts5(text, ref UNINDEXED, namespace UNINDEXED, "
        "tokenize = 'porter unicode61')"
        for kind in ("fact", "claim", "chunk")
    ),
]

POSTGRES: list[str] = [
    *_TABLES,
    """CREATE TABLE graph_vectors (
        kind TEXT NOT NULL,
        ref TEXT NOT NULL,
        vector BYTEA NOT NULL,
        PRIMARY KEY (kind, ref)
    )""",
    *(
        stmt
        for table in ("facts", "claims", "chunks")
        for stmt in (
            f"ALTER TABLE {table} ADD COLUMN tsv tsvector "
            "GENERATED ALWAYS AS (to_tsvector('memlane'::regconfig, text)) STORED",
            f"CREATE INDEX {table}_tsv ON {table} USING gin (tsv)",
        )
    ),
]

# Migration ``m011_chunk_context``: a chunk is found with its context (its document's title and the passages
# around it, memlane.values.facts_text.context), kept in ``chunks.context`` and indexed as a second, lower-weighted
# full-text column, so a passage matched on its own words ranks above a neighbour matched on them as context.
# Chunks stored before it have no context (NULL) and stay indexed on their own text.
CONTEXT_WEIGHT = 0.5  # BM25 / ts_rank weight of context words against the chunk's own 1.0
# the meta row saying every chunk has its context (FactsLayer.backfill_context); a new store starts with it
CONTEXT_MARK = "chunk_context"
_MARK_IF_EMPTY = (
    f"INSERT INTO meta (name, value) SELECT '{CONTEXT_MARK}', 'complete' WHERE NOT EXISTS (SELECT 1 FROM chunks) "
    "ON CONFLICT (name) DO NOTHING"
)


def index_chunks(s: SqlSession, rows: Sequence[tuple[str, str, str, str | None]]) -> None:
    """Full-text rows ``(ref, namespace, text, context)`` of chunks; PostgreSQL indexes both columns itself."""
    if s.dialect == "sqlite" and rows:
        s.many("INSERT INTO chunk_fts (ref, namespace, text, context) VALUES (?, ?, ?, ?)", rows)


SQLITE_CHUNK_CONTEXT: list[str] = [
    "ALTER TABLE chunks ADD COLUMN context TEXT",
    "DROP TABLE chunk_fts",
    "CREATE VIRTUAL TABLE chunk_fts USING fts5(text, context, ref UNINDEXED, namespace UNINDEXED, "
    "tokenize = 'porter unicode61')",
    "INSERT INTO chunk_fts (ref, namespace, text, context) SELECT id, namespace, text, context FROM chunks",
    _MARK_IF_EMPTY,
]

POSTGRES_CHUNK_CONTEXT: list[str] = [
    "ALTER TABLE chunks ADD COLUMN context TEXT",
    "DROP INDEX chunks_tsv",
    "ALTER TABLE chunks DROP COLUMN tsv",
    # the chunk's words unlabelled (D), its context's labelled C: ranking weighs C at CONTEXT_WEIGHT
    "ALTER TABLE chunks ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('memlane'::regconfig, text) "
    "|| setweight(to_tsvector('memlane'::regconfig, coalesce(context, '')), 'C')) STORED",
    "CREATE INDEX chunks_tsv ON chunks USING gin (tsv)",
    _MARK_IF_EMPTY,
]
