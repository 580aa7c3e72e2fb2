"""``memory_v1``: the views of the query space, defined once for every backend.

Each :class:`View` names its columns (type and meaning) and gives its body as
SQL over the base tables, with a few markers that :func:`view_sql` fills in
per dialect:

* ``{T}`` before a base table (``{T}items``): ``main.`` on SQLite, nothing on
  PostgreSQL (the migration resolves names when it creates the view);
* ``{V}`` before another view (``{V}entities``): ``temp.`` on SQLite,
  ``memory_v1.`` on PostgreSQL;
* ``{now}``: the memory's clock for this statement (``Memory._now()``, so
  "live", "unexpired" and "current" follow an injected clock): the function
  ``memlane_now()`` of the read-only connection on SQLite, the
  transaction-local setting ``memlane.now`` on PostgreSQL;
* ``{visible:<column>}``: the visibility rule for a namespace column: never the
  reserved ``_memlane`` namespace (access records), and only the prefixes the
  caller may read (a TEMP table on SQLite; on PostgreSQL the transaction-local
  setting ``memlane.scope``, believed only with the runner's signature in
  ``memlane.sig``, checked by ``memory_v1.visible_scope()`` against a secret
  the query role cannot read). A missing or unsigned setting hides every row.

The same list generates the SQLite TEMP views (created on the read-only
connection when it opens), the PostgreSQL ``memory_v1`` schema (migration
``m004_query_space``), the validator's allow-list of views and functions,
``describe_query_space()``, and ``docs/query-space.md`` (:func:`markdown`;
a test keeps the checked-in page equal to it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SCHEMA = "memory_v1"
QUERY_ROLE = "memlane_query"
RESERVED = "_memlane"
DIALECTS = ("sqlite", "postgres")


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a view: ``type`` is text, integer, json (JSON as text) or time (ISO-8601 UTC text)."""

    name: str
    type: str
    description: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"name": self.name, "type": self.type, "description": self.description}


@dataclass(frozen=True, slots=True)
class View:
    """One view of ``memory_v1``: its columns and its body over the base tables."""

    name: str
    description: str
    columns: tuple[Column, ...]
    body: str
    match: tuple[str, str] | None = None  # (text column, match helper) when text_match() works on it

    @property
    def column_names(self) -> tuple[str, ...]:
        """The columns, in order."""
        return tuple(c.name for c in self.columns)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "columns": [c.to_dict() for c in self.columns],
        }
        if self.match:
            out["text_match"] = self.match[0]
        return out


_c = Column


_NS = "namespace as text, segments joined by '/' (user/123)"
_ITEM_COLUMNS = (
    _c("id", "text", "the item's id (32 hex digits); kept when the item is replaced"),
    _c("namespace", "text", _NS),
    _c("key", "text", "the key, a dotted taxonomy path such as preferences.ui.theme"),
    _c("value", "json", "the value as canonical JSON text; read into it with JSON functions"),
    _c("value_type", "text", "string, number, boolean, list, object or null"),
    _c("text", "text", "what search indexes: the value for strings, its JSON otherwise, or the writer's text"),
    _c("metadata", "json", "the metadata object as JSON text ({} when none)"),
    _c("author", "text", "who wrote this version (null when unknown)"),
    _c("created_at", "time", "when the item was first written"),
    _c("updated_at", "time", "when this version was written"),
    _c("expires_at", "time", "when the item expires (null: never)"),
    _c("version", "integer", "1 for a new item, +1 on every replace"),
)
_FACT_COLUMNS = (
    _c("id", "text", "the fact's id (fact_...); the same on every version"),
    _c("version", "integer", "1, then +1 each time the fact's validity changed (end_fact)"),
    _c("namespace", "text", _NS),
    _c("subject_id", "text", "the subject entity, as asserted (entities.merged_into says if it was merged)"),
    _c("subject_name", "text", "the subject entity's name (null if you cannot see that entity)"),
    _c("predicate", "text", "the relation, lowercase with underscores (works_on, lives_in)"),
    _c("object_id", "text", "the object entity when the object is an entity, else null"),
    _c("object_name", "text", "the object entity's name (null for value objects or entities you cannot see)"),
    _c("object_value", "json", "the object as JSON text when it is a value, else null"),
    _c("fact_text", "text", "the fact as a sentence (subject predicate object); text_match() works on it"),
    _c("valid_from", "time", "valid time: when it started to hold in the world (null: always)"),
    _c("valid_to", "time", "valid time: when it stopped holding (null: still holds)"),
    _c("recorded_at", "time", "belief time: when memlane recorded this version"),
    _c("retracted_at", "time", "belief time: when memlane stopped believing this version (null: believed)"),
    _c("author", "text", "who recorded it"),
    _c("evidence_count", "integer", "how many times the fact was asserted (rows in evidence)"),
)
_CLAIM_COLUMNS = (
    _c("id", "text", "the claim's id (claim_...)"),
    _c("namespace", "text", _NS),
    _c("claim_text", "text", "what the source said; text_match() works on it"),
    _c("speaker", "text", "who said it (null when unknown)"),
    _c("asserted_at", "time", "when it was said (null when unknown)"),
    _c("chunk_id", "text", "the passage it came from (null when none)"),
    _c("document_id", "text", "the document of that passage (null when none or not visible)"),
    _c("recorded_at", "time", "when memlane recorded the claim"),
    _c("superseded_by", "text", "the claim that replaced it (null when none)"),
    _c("superseded_at", "time", "when it stopped being current testimony (null: live)"),
    _c("author", "text", "who recorded it"),
)


def _cols(columns: Sequence[Column], alias: str, renames: dict[str, str] | None = None) -> str:
    renames = renames or {}
    return ", ".join(
        renames[c.name].format(a=alias) if c.name in renames else f"{alias}.{c.name} AS {c.name}" for c in columns
    )


# an item's text is not stored where it is the value's own (memlane.store._common.stored_text): {text:i}
# becomes the dialect's SQL that rebuilds it (view_sql)
_FULL_TEXT = {"text": "{{text:{a}}} AS text"}


_FACT_SELECT = (
    "f.id AS id, f.version AS version, f.namespace AS namespace, f.subject AS subject_id, s.name AS subject_name, "
    "f.predicate AS predicate, f.object_entity AS object_id, o.name AS object_name, "
    "f.object_value AS object_value, f.text AS fact_text, f.valid_from AS valid_from, f.valid_to AS valid_to, "
    "f.recorded_at AS recorded_at, f.retracted_at AS retracted_at, f.author AS author, "
    "(SELECT count(*) FROM {T}evidence ev WHERE ev.fact_id = f.id) AS evidence_count"
)

VIEWS: tuple[View, ...] = (
    View(
        "items",
        "Live items: one row per address, expired items left out.",
        _ITEM_COLUMNS,
        f"SELECT {_cols(_ITEM_COLUMNS, 'i', _FULL_TEXT)} FROM {{T}}items i "
        "WHERE (i.expires_at IS NULL OR i.expires_at > {now}) AND {visible:i.namespace}",
        match=("text", "memlane_match_items"),
    ),
    View(
        "item_history",
        "Past versions of items (replaced, deleted, cleared, expired, imported), one row per version.",
        (
            _c("item_id", "text", "the item's id"),
            *_ITEM_COLUMNS[1:],
            _c("change", "text", "what ended this version: replace, delete, clear, expire or import"),
            _c("changed_at", "time", "when it ended"),
            _c("changed_by", "text", "who ended it (null when unknown)"),
        ),
        "SELECT h.item_id AS item_id, "
        + _cols(_ITEM_COLUMNS[1:], "h", _FULL_TEXT)
        + ", h.change AS change, h.changed_at AS changed_at, h.changed_by AS changed_by "
        "FROM {T}item_history h WHERE {visible:h.namespace}",
    ),
    View(
        "entities",
        "Entities (people, projects, things). A merged entity keeps its row; merged_into names the survivor.",
        (
            _c("id", "text", "the entity's id (ent_...)"),
            _c("namespace", "text", _NS),
            _c("kind", "text", "what it is: person, project, thing..."),
            _c("name", "text", "its canonical name"),
            _c("profile", "text", "free text about it ('' when none)"),
            _c("merged_into", "text", "the entity it was merged into (null: not merged)"),
            _c("created_at", "time", "when it was created"),
            _c("author", "text", "who created it"),
        ),
        "SELECT e.id AS id, e.namespace AS namespace, e.kind AS kind, e.name AS name, e.profile AS profile, "
        "e.merged_into AS merged_into, e.created_at AS created_at, e.author AS author "
        "FROM {T}entities e WHERE {visible:e.namespace}",
    ),
    View(
        "entity_aliases",
        "Other names of entities (what resolve_entity also matches).",
        (
            _c("entity_id", "text", "the entity"),
            _c("namespace", "text", "the entity's namespace"),
            _c("alias", "text", "the other name"),
            _c("created_at", "time", "when the alias was added"),
        ),
        "SELECT a.entity_id AS entity_id, e.namespace AS namespace, a.alias AS alias, a.created_at AS created_at "
        "FROM {T}entity_aliases a JOIN {V}entities e ON e.id = a.entity_id",
    ),
    View(
        "facts",
        "Every version of every fact, with both clocks (valid and belief time) and its evidence count.",
        _FACT_COLUMNS,
        f"SELECT {_FACT_SELECT} FROM {{T}}facts f "
        "LEFT JOIN {V}entities s ON s.id = f.subject LEFT JOIN {V}entities o ON o.id = f.object_entity "
        "WHERE {visible:f.namespace}",
        match=("fact_text", "memlane_match_facts"),
    ),
    View(
        "facts_current",
        "Facts that hold now: believed (not retracted) and valid at this moment (null bounds are open).",
        _FACT_COLUMNS,
        f"SELECT {_cols(_FACT_COLUMNS, 'f')} FROM {{V}}facts f WHERE f.retracted_at IS NULL "
        "AND (f.valid_from IS NULL OR f.valid_from <= {now}) AND (f.valid_to IS NULL OR f.valid_to > {now})",
        match=("fact_text", "memlane_match_facts"),
    ),
    View(
        "evidence",
        "Why memlane believes a fact: one row per assertion (source).",
        (
            _c("fact_id", "text", "the fact"),
            _c("namespace", "text", "the fact's namespace"),
            _c("source", "text", "where the assertion came from ('' when none was given)"),
            _c("recorded_at", "time", "when it was recorded"),
            _c("author", "text", "who recorded it"),
        ),
        "SELECT ev.fact_id AS fact_id, f.namespace AS namespace, ev.source AS source, "
        "ev.recorded_at AS recorded_at, ev.author AS author "
        "FROM {T}evidence ev JOIN {T}facts f ON f.id = ev.fact_id AND f.version = 1 WHERE {visible:f.namespace}",
    ),
    View(
        "documents",
        "Sources stored with add_document, split into chunks.",
        (
            _c("id", "text", "the document's id (doc_...)"),
            _c("namespace", "text", _NS),
            _c("title", "text", "its title"),
            _c("source", "text", "where it came from (a URL, a path; null when none)"),
            _c("created_at", "time", "when the source was written (null when unknown)"),
            _c("recorded_at", "time", "when memlane stored it"),
            _c("chunk_count", "integer", "how many chunks it was split into"),
            _c("author", "text", "who stored it"),
        ),
        "SELECT d.id AS id, d.namespace AS namespace, d.title AS title, d.source AS source, "
        "d.created_at AS created_at, d.recorded_at AS recorded_at, d.chunk_count AS chunk_count, d.author AS author "
        "FROM {T}documents d WHERE {visible:d.namespace}",
    ),
    View(
        "chunks",
        "Ordered passages of documents.",
        (
            _c("id", "text", "the chunk's id (chunk_...)"),
            _c("document_id", "text", "its document"),
            _c("namespace", "text", _NS),
            _c("position", "integer", "its place in the document, from 0"),
            _c("chunk_text", "text", "the passage; text_match() works on it"),
        ),
        "SELECT k.id AS id, k.document_id AS document_id, k.namespace AS namespace, k.position AS position, "
        "k.text AS chunk_text FROM {T}chunks k WHERE {visible:k.namespace}",
        match=("chunk_text", "memlane_match_chunks"),
    ),
    View(
        "claims",
        "Every claim: what a source said, who said it and when, live or superseded.",
        _CLAIM_COLUMNS,
        "SELECT c.id AS id, c.namespace AS namespace, c.text AS claim_text, c.speaker AS speaker, "
        "c.asserted_at AS asserted_at, c.chunk_id AS chunk_id, k.document_id AS document_id, "
        "c.recorded_at AS recorded_at, c.superseded_by AS superseded_by, c.superseded_at AS superseded_at, "
        "c.author AS author FROM {T}claims c LEFT JOIN {V}chunks k ON k.id = c.chunk_id WHERE {visible:c.namespace}",
        match=("claim_text", "memlane_match_claims"),
    ),
    View(
        "claims_live",
        "Claims that are current testimony (not superseded).",
        _CLAIM_COLUMNS,
        f"SELECT {_cols(_CLAIM_COLUMNS, 'c')} FROM {{V}}claims c WHERE c.superseded_at IS NULL",
        match=("claim_text", "memlane_match_claims"),
    ),
    View(
        "claim_entities",
        "Which entities each claim is about.",
        (
            _c("claim_id", "text", "the claim"),
            _c("entity_id", "text", "an entity it is about"),
            _c("namespace", "text", "the claim's namespace"),
        ),
        "SELECT ce.claim_id AS claim_id, ce.entity_id AS entity_id, c.namespace AS namespace "
        "FROM {T}claim_entities ce JOIN {V}claims c ON c.id = ce.claim_id",
    ),
    View(
        "namespaces",
        "Every namespace holding live items, entities, current facts, documents or live claims, with counts.",
        (
            _c("namespace", "text", _NS),
            _c("depth", "integer", "how many segments it has"),
            _c("items", "integer", "live items in it"),
            _c("entities", "integer", "entities in it"),
            _c("facts", "integer", "facts that hold now"),
            _c("documents", "integer", "documents in it"),
            _c("claims", "integer", "live claims in it"),
        ),
        "SELECT n.namespace AS namespace, "
        "length(n.namespace) - length(replace(n.namespace, '/', '')) + 1 AS depth, "
        "sum(CASE WHEN n.kind = 'item' THEN 1 ELSE 0 END) AS items, "
        "sum(CASE WHEN n.kind = 'entity' THEN 1 ELSE 0 END) AS entities, "
        "sum(CASE WHEN n.kind = 'fact' THEN 1 ELSE 0 END) AS facts, "
        "sum(CASE WHEN n.kind = 'document' THEN 1 ELSE 0 END) AS documents, "
        "sum(CASE WHEN n.kind = 'claim' THEN 1 ELSE 0 END) AS claims FROM ("
        "SELECT namespace, 'item' AS kind FROM {V}items "
        "UNION ALL SELECT namespace, 'entity' AS kind FROM {V}entities "
        "UNION ALL SELECT namespace, 'fact' AS kind FROM {V}facts_current "
        "UNION ALL SELECT namespace, 'document' AS kind FROM {V}documents "
        "UNION ALL SELECT namespace, 'claim' AS kind FROM {V}claims_live"
        ") n GROUP BY n.namespace",
    ),
)

BY_NAME: dict[str, View] = {v.name: v for v in VIEWS}
NAMES: frozenset[str] = frozenset(BY_NAME)

# Helpers behind text_match(): the ids of rows whose text matches, through the
# full-text index, filtered like the views. Not nameable by queries; the
# validator rewrites text_match() into ``id IN (SELECT id FROM <helper> ...)``.
MATCH_HELPERS: dict[str, str] = {
    "memlane_match_items": "SELECT i.id AS id, f.text AS text FROM {T}items_fts f JOIN {T}items i "
    "ON i.rowid = f.rowid WHERE (i.expires_at IS NULL OR i.expires_at > {now}) AND {visible:i.namespace}",
    "memlane_match_facts": "SELECT f.ref AS id, f.text AS text FROM {T}fact_fts f WHERE {visible:f.namespace}",
    "memlane_match_claims": "SELECT f.ref AS id, f.text AS text FROM {T}claim_fts f WHERE {visible:f.namespace}",
    "memlane_match_chunks": "SELECT f.ref AS id, f.text AS text FROM {T}chunk_fts f WHERE {visible:f.namespace}",
}

# Base tables the SQLite views read (the authorizer allows them only from inside a view).
BASE_TABLES = frozenset(
    {
        "items",
        "item_history",
        "entities",
        "entity_aliases",
        "facts",
        "evidence",
        "documents",
        "chunks",
        "claims",
        "claim_entities",
        "items_fts",
        "fact_fts",
        "claim_fts",
        "chunk_fts",
    }
)

# -- per dialect -------------------------------------------------------------------------

_SQLITE_NOW = "(SELECT memlane_now())"
_PG_NOW = "(current_setting('memlane.now', true) COLLATE \"C\")"


# A namespace lies under a readable prefix when it or one of its heads (its first 1, 2, ... 7 segments) is
# one. The caller's prefixes are a set each head is looked up in (an index on SQLite, a hash a statement
# builds once on PostgreSQL), and only the heads as deep as some prefix are made, so each row costs a few
# lookups whatever the number of rooms and grants. Every head is the namespace's own ancestor, so no
# lookup can admit a row that lies under no readable prefix.
MAX_DEPTH = 8  # segments of a namespace (memlane.values.validate.MAX_SEGMENTS)


def scope_depths(prefixes: Sequence[Sequence[str]]) -> str:
    """The depths (segment counts) of ``prefixes`` as digits, each once, e.g. ``"23"``."""
    return "".join(str(n) for n in sorted({len(p) for p in prefixes}))


def sqlite_head(namespace: str | None, depth: int) -> str | None:
    """``memlane_head(namespace, depth)``, a function of each read-only SQLite connection: the text before the
    ``depth``-th '/' of ``namespace`` (its shallower ancestor when it has fewer, '' when it has none).

    A function, not an expression: each '/' found in SQL needs the position of the one before it twice, so the
    expression doubled with every level (a grant 7 segments deep: 127 ``instr`` a row, 1.8 s to count 100,000
    items through the views).
    """
    if namespace is None:
        return None
    parts = namespace.split("/")
    return "/".join(parts[: min(depth, len(parts) - 1)])


def _sqlite_head(col: str, depth: int) -> str:
    if depth > 2:  # the function: the expression is 2 ** depth - 1 instr calls
        return f"memlane_head({col}, {depth})"
    end = f"instr({col}, '/')"  # in SQL while it is short (a Python call a row costs more than 3 instr)
    if depth == 2:  # a missing '/' adds 0: the head stays the shallower ancestor
        end = f"{end} + instr(substr({col}, {end} + 1), '/')"
    return f"substr({col}, 1, {end} - 1)"


def _sqlite_visible(col: str) -> str:
    scope = "(SELECT prefix FROM temp.memlane_scope)"
    heads = " ".join(
        f"OR ((SELECT instr(depths, '{n}') > 0 FROM temp.memlane_ctx) AND {_sqlite_head(col, n)} IN {scope})"
        for n in range(1, MAX_DEPTH)
    )
    return (
        f"(substr({col}, 1, 9) <> '{RESERVED}/' AND {col} <> '{RESERVED}' AND "
        f"((SELECT everything FROM temp.memlane_ctx) = 1 OR {col} IN {scope} {heads}))"
    )


EVERYTHING = "\t"  # the scope "everything but _memlane": a namespace never holds a control character
_PG_SCOPE = f"(SELECT {SCHEMA}.visible_scope())"
# the signed setting holds the prefixes, one a line (visible_scope() returns it only with a valid signature);
# each lookup in it is a hashed SubPlan, built once per statement. The depths to look at need no signature:
# whatever they say, only the namespace's own ancestors are looked up, among the signed prefixes
_PG_PREFIXES = f"(SELECT unnest(string_to_array({_PG_SCOPE}, E'\\n')))"
_PG_DEPTHS = "(current_setting('memlane.depths', true))"


def _pg_head(col: str, depth: int) -> str:
    """PostgreSQL: the first ``depth`` segments of ``col`` joined again (ending in '/' when it has fewer)."""
    return " || '/' || ".join(f"split_part({col}, '/', {k})" for k in range(1, depth + 1))


def _pg_visible(col: str) -> str:
    heads = " ".join(
        f"OR ((SELECT strpos({_PG_DEPTHS}, '{n}') > 0) AND ({_pg_head(col, n)}) IN {_PG_PREFIXES})"
        for n in range(1, MAX_DEPTH)
    )
    return (
        f"(substr({col}, 1, 9) <> '{RESERVED}/' AND {col} <> '{RESERVED}' AND "
        f"({_PG_SCOPE} = E'\\t' OR {col} IN {_PG_PREFIXES} {heads}))"
    )


# -- what a caller sees -------------------------------------------------------------------
# The machinery behind the views has names no answer shows (explain's plan, errors, notes): the inner views
# named with each SQLite connection's random token (a second guard, after the fence: a statement cannot name
# what it cannot know), the context tables and their indexes, the helpers behind text_match(), the settings
# and the function that check the caller's scope on PostgreSQL.
INTERNAL = re.compile(
    r"memlane_[0-9a-f]{16}|memlane_(?:ctx|scope|now|fts_query|match_|head)|visible_scope|memlane_query_secret"
    r"|memlane\.(?:now|scope|sig|depths)"
)
_INNER = re.compile(r"(?:temp\.)?memlane_[0-9a-f]{16}_")
_HELPER = re.compile(r"memlane_match_(items|facts|claims|chunks)\b")
_CLOCK = re.compile(r"\(?current_setting\('memlane\.now'(?:::text)?, true\)\)?(?:::text)?")


def public(text: str) -> str | None:
    """``text`` in the query space's own words, or ``None`` when it names machinery no words stand for.

    An inner view becomes the view it holds, a text_match() helper the view it searches, PostgreSQL's
    reading of the memory's clock ``(the memory's clock)``.
    """
    text = _HELPER.sub(r"\1", _INNER.sub("", text))
    text = _CLOCK.sub("(the memory's clock)", text)
    return None if INTERNAL.search(text) else text


def scope_message(scope: str, now: str, pid: int) -> str:
    """What the runner signs for one PostgreSQL transaction: prefixes, clock and backend, length-prefixed."""
    return f"{len(scope)}:{scope}|{len(now)}:{now}|{pid}"


# The same message built in SQL, and its signature: sha256(secret || sha256(secret || message)), hex.
_PG_MESSAGE = (
    "length(coalesce(current_setting('memlane.scope', true), ''))::text || ':' || "
    "coalesce(current_setting('memlane.scope', true), '') || '|' || "
    "length(coalesce(current_setting('memlane.now', true), ''))::text || ':' || "
    "coalesce(current_setting('memlane.now', true), '') || '|' || pg_backend_pid()::text"
)
_PG_SIGNED = (
    "encode(sha256(convert_to(s.secret || encode(sha256(convert_to(s.secret || "
    + _PG_MESSAGE
    + ", 'UTF8')), 'hex'), 'UTF8')), 'hex')"
)


_VISIBLE = re.compile(r"\{visible:([a-z_.]+)\}")
_TEXT = re.compile(r"\{text:([a-z_]+)\}")


def view_sql(body: str, dialect: str, inner: str = "") -> str:
    """A view body with its markers filled in for ``dialect`` (``inner``: SQLite's prefix of the inner views)."""
    if dialect == "sqlite":
        table, view, now, visible = "main.", f"temp.{inner}", _SQLITE_NOW, _sqlite_visible
    else:
        table, view, now, visible = "", f"{SCHEMA}.", _PG_NOW, _pg_visible
    from ._common import text_sql

    out = _VISIBLE.sub(lambda m: visible(m.group(1)), body)
    out = _TEXT.sub(lambda m: text_sql(dialect, m.group(1) + "."), out)
    return out.replace("{T}", table).replace("{V}", view).replace("{now}", now)


def sqlite_setup(token: str) -> tuple[list[str], dict[str, str]]:
    """Statements that build the query space on a read-only SQLite connection (TEMP objects only).

    Each view is two: the one queries name (``items``), a plain ``SELECT *`` of an
    inner view named with a random per-connection ``token``
    (``memlane_<token>_items``) that holds the body. SQLite's authorizer lets
    base tables be read only from inside the inner views, and it names a CTE
    as the reader the same way it names a view, so a reader must be a name
    that no statement can know. Returns the statements and ``{view: inner}``.
    """
    inner = {name: f"memlane_{token}_{name}" for name in [*NAMES, *MATCH_HELPERS]}
    prefix = f"memlane_{token}_"
    out = [
        "CREATE TEMP TABLE memlane_ctx (everything INTEGER NOT NULL, depths TEXT NOT NULL)",
        "INSERT INTO temp.memlane_ctx (everything, depths) VALUES (0, '')",
        "CREATE TEMP TABLE memlane_scope (prefix TEXT PRIMARY KEY) WITHOUT ROWID",
    ]
    bodies = [(v.name, v.body) for v in VIEWS] + list(MATCH_HELPERS.items())
    for name, body in bodies:
        out.append(f"CREATE TEMP VIEW {inner[name]} AS {view_sql(body, 'sqlite', prefix)}")
        out.append(f"CREATE TEMP VIEW {name} AS SELECT * FROM temp.{inner[name]}")
    return out, inner


SAVED_QUERIES_TABLE = """CREATE TABLE saved_queries (
    name TEXT PRIMARY KEY,
    sql TEXT NOT NULL,
    description TEXT NOT NULL,
    author TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
)"""

# Migration m004_query_space. On SQLite the views are TEMP views made by each
# read-only connection, so the migration only adds the saved queries' table.
SQLITE_MIGRATION: list[str] = [SAVED_QUERIES_TABLE]


def postgres_migration() -> list[str]:
    """Migration ``m004_query_space`` on PostgreSQL: the schema, its views and the role that may read them.

    The role is shared by every database of the server; creating it or joining it
    needs CREATEROLE (or a superuser). Without that the migration still succeeds
    and queries run as the connecting role, inside the same read-only transaction.
    """
    out = [SAVED_QUERIES_TABLE, f"CREATE SCHEMA {SCHEMA}"]
    # The views read the caller's prefixes and clock from transaction-local settings, which any role
    # may set; they count only with the runner's signature (a secret the query role cannot read), so
    # a statement that sets them itself sees nothing.
    out += [
        "CREATE TABLE memlane_query_secret (secret TEXT NOT NULL)",
        "INSERT INTO memlane_query_secret (secret) "
        "VALUES (replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))",
        f"""DO $do$ BEGIN EXECUTE format($f$
            CREATE FUNCTION {SCHEMA}.visible_scope() RETURNS text LANGUAGE sql STABLE SECURITY DEFINER
            SET search_path = pg_catalog AS $body$
                SELECT CASE WHEN current_setting('memlane.sig', true) = {_PG_SIGNED}
                    THEN current_setting('memlane.scope', true) END
                FROM %I.memlane_query_secret s
            $body$
        $f$, current_schema());
        END $do$""",
        f"REVOKE ALL ON FUNCTION {SCHEMA}.visible_scope() FROM PUBLIC",
    ]
    out += [f"CREATE VIEW {SCHEMA}.{v.name} AS {view_sql(v.body, 'postgres')}" for v in VIEWS]
    out.append(
        f"""DO $$ BEGIN
            CREATE ROLE {QUERY_ROLE} NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'memlane: cannot create role {QUERY_ROLE}; queries will run as the connecting role';
        END $$"""
    )
    out.append(
        f"""DO $$ BEGIN
            GRANT USAGE ON SCHEMA {SCHEMA} TO {QUERY_ROLE};
            GRANT SELECT ON ALL TABLES IN SCHEMA {SCHEMA} TO {QUERY_ROLE};
            GRANT EXECUTE ON FUNCTION {SCHEMA}.visible_scope() TO {QUERY_ROLE};
        EXCEPTION WHEN undefined_object THEN
            RAISE NOTICE 'memlane: no role {QUERY_ROLE}; queries will run as the connecting role';
        END $$"""
    )
    out.append(
        f"""DO $$ BEGIN
            EXECUTE format('GRANT {QUERY_ROLE} TO %I', current_user);
        EXCEPTION WHEN undefined_object OR insufficient_privilege OR invalid_grant_operation THEN
            RAISE NOTICE 'memlane: cannot join role {QUERY_ROLE}: %', SQLERRM;
        END $$"""
    )
    return out


def postgres_views() -> list[str]:
    """Every view again (migration ``m012_scope_heads``: a row's visibility is a lookup of its heads)."""
    return [f"CREATE OR REPLACE VIEW {SCHEMA}.{v.name} AS {view_sql(v.body, 'postgres')}" for v in VIEWS]


def postgres_item_views() -> list[str]:
    """The item views again (migration ``m010_text_once``: their text is rebuilt where it is not stored)."""
    return [
        f"CREATE OR REPLACE VIEW {SCHEMA}.{v.name} AS {view_sql(v.body, 'postgres')}"
        for v in VIEWS
        if v.name in ("items", "item_history")
    ]


# -- functions -------------------------------------------------------------------------------
# The allow-list, as calls a caller may write. The validator parses each sample in
# its dialect and allows exactly the function kinds found, so this list is both the
# rule and its documentation. Grouped for describe_query_space() and the docs.

FUNCTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "common": {
        "aggregate": ("count(*)", "count(DISTINCT x)", "sum(x)", "avg(x)", "min(x)", "max(x)"),
        "string": (
            "lower(x)",
            "upper(x)",
            "length(x)",
            "substr(x, 1, 2)",
            "substring(x, 1, 2)",
            "trim(x)",
            "ltrim(x)",
            "rtrim(x)",
            "replace(x, 'a', 'b')",
            "coalesce(x, y)",
            "nullif(x, y)",
        ),
        "number": ("abs(x)", "round(x, 2)", "ceil(x)", "floor(x)", "sign(x)"),
        "window": (
            "row_number() OVER (ORDER BY x)",
            "rank() OVER (ORDER BY x)",
            "dense_rank() OVER (ORDER BY x)",
            "lag(x) OVER (ORDER BY x)",
            "lead(x) OVER (ORDER BY x)",
            "first_value(x) OVER (ORDER BY x)",
            "last_value(x) OVER (ORDER BY x)",
        ),
        "full text": ("text_match(claim_text, 'billing migration')",),
        "other": (
            "cast(x AS integer)",
            "CASE WHEN c THEN x ELSE y END",
            "EXISTS (SELECT 1)",
            "current_timestamp",
        ),
    },
    "sqlite": {
        "aggregate": ("total(x)", "group_concat(x, ', ')", "json_group_array(x)", "json_group_object(k, x)"),
        "string": ("instr(x, 'a')", "ifnull(x, y)", "iif(c, x, y)", "typeof(x)", "unicode(x)", "char(65)"),
        "number": ("max(x, y)", "min(x, y)"),
        "date": (
            "date(x)",
            "time(x)",
            "datetime(x)",
            "julianday(x)",
            "unixepoch(x)",
            "strftime('%Y-%m', x)",
        ),
        "json": (
            "json_extract(value, '$.a')",
            "value -> '$.a'",
            "value ->> '$.a'",
            "json_type(value)",
            "json_array_length(value)",
            "json_valid(value)",
            "json(value)",
            "json_object('a', x)",
            "json_array(x, y)",
        ),
    },
    "postgres": {
        "aggregate": ("string_agg(x, ', ')", "array_agg(x)", "bool_and(c)", "bool_or(c)", "jsonb_agg(x)"),
        "string": (
            "strpos(x, 'a')",
            "position('a' IN x)",
            "split_part(x, '/', 1)",
            "left(x, 2)",
            "right(x, 2)",
            "starts_with(x, 'a')",
            "concat(x, y)",
            "concat_ws('/', x, y)",
            "char_length(x)",
            "initcap(x)",
            "reverse(x)",
            "regexp_replace(x, 'a', 'b')",
            "x ~ 'a'",
        ),
        "number": ("greatest(x, y)", "least(x, y)", "mod(x, y)", "power(x, 2)", "sqrt(x)"),
        "date": (
            "date_trunc('day', x::timestamptz)",
            "extract(year FROM x::timestamptz)",
            "date_part('year', x::timestamptz)",
            "to_char(x::timestamptz, 'YYYY-MM')",
            "age(x::timestamptz)",
            "current_date",
        ),
        "json": (
            "value::jsonb -> 'a'",
            "value::jsonb ->> 'a'",
            "value::jsonb #>> '{a,b}'",
            "jsonb_extract_path_text(value::jsonb, 'a')",
            "jsonb_typeof(value::jsonb)",
            "jsonb_array_length(value::jsonb)",
            "jsonb_build_object('a', x)",
        ),
        "full text": (
            "to_tsvector('english', x) @@ plainto_tsquery('english', 'a')",
            "websearch_to_tsquery('english', 'a')",
            "to_tsquery('english', 'a')",
            "ts_rank(to_tsvector('english', x), to_tsquery('english', 'a'))",
        ),
    },
}

# Types a value may be cast to (``cast(x AS ...)`` / ``x::...``).
CAST_TYPES: dict[str, tuple[str, ...]] = {
    "sqlite": ("text", "integer", "real", "numeric"),
    "postgres": (
        "text",
        "integer",
        "bigint",
        "real",
        "double precision",
        "numeric",
        "boolean",
        "date",
        "timestamptz",
        "timestamp",
        "interval",
        "json",
        "jsonb",
    ),
}


def function_samples(dialect: str) -> list[tuple[str, str]]:
    """``(group, sample call)`` for every allowed function of ``dialect``."""
    return [(group, s) for part in ("common", dialect) for group, samples in FUNCTIONS[part].items() for s in samples]


# -- describe, search, docs --------------------------------------------------------------------

LIMITS_TEXT = (
    "Every statement is one SELECT (WITH allowed) over these views, checked before it runs, on a read-only "
    "connection, stopped at the row cap (max_rows, at most 100,000), the time cap (timeout_ms, at most 60,000) "
    "and the result size cap (16 MiB); the result says what was cut."
)


def describe(dialect: str) -> dict[str, Any]:
    """The query space as data: views with columns, allowed functions, parameters and limits."""
    functions: dict[str, list[str]] = {}
    for group, sample in function_samples(dialect):
        functions.setdefault(group, []).append(sample)
    return {
        "schema": SCHEMA,
        "dialect": dialect,
        "views": [v.to_dict() for v in VIEWS],
        "functions": functions,
        "casts": list(CAST_TYPES[dialect]),
        "parameters": "?, bound from a list, or :name, bound from a dict (not both in one statement)",
        "limits": LIMITS_TEXT,
        "notes": [
            "Name views unqualified (FROM claims_live) or as memory_v1.claims_live.",
            "Times are ISO-8601 UTC text of fixed width: compare them as text.",
            "json columns hold JSON text; on PostgreSQL cast to jsonb to read into them (value::jsonb ->> 'a').",
            "text_match(column, 'words') keeps rows whose text holds every word (stemmed, through the full-text "
            "index), on items.text, facts.fact_text, facts_current.fact_text, claims.claim_text, "
            "claims_live.claim_text and chunks.chunk_text.",
            "Rows are what the caller may see: the reserved _memlane namespace never appears.",
            "explain_query shows the statement as it runs (text_match as written) and the database's plan in "
            "the views' own names; on SQLite the steps that apply what the caller may see are left out of the "
            "plan (PostgreSQL shows them as InitPlan and SubPlan steps, without the machinery's names).",
        ],
    }


_WORD = re.compile(r"\w+")


def search(text: str, dialect: str) -> list[dict[str, Any]]:
    """Views and columns whose name or description mentions the words of ``text``, best first.

    Each hit is ``{"view", "column" (or None for the view itself), "type", "description", "score"}``,
    scored by the distinct words it matches (a word in the name counts twice); stop words
    ("who", "it") only break ties, unless the text has nothing else.
    """
    from ..values.stopwords import ENGLISH

    found = {w for w in _WORD.findall(text.lower()) if len(w) > 1}
    words = {w for w in found if w not in ENGLISH} or found
    if not words:
        return []

    def score(name: str, description: str, among: set[str]) -> int:
        name_words = set(_WORD.findall(name.lower().replace("_", " ")))
        desc = set(_WORD.findall(description.lower()))
        return sum(2 if w in name_words else 1 if w in desc else 0 for w in among)

    entries: list[tuple[str, str | None, str, str, str]] = []
    for view in VIEWS:
        entries.append((view.name, None, "view", view.name, view.description))
        entries += [(view.name, c.name, c.type, c.name, c.description) for c in view.columns]
    hits = []
    for order, (view_name, column, type_, name, description) in enumerate(entries):
        s = score(name, description, words)
        if s:
            tie = score(name, description, found)
            hits.append(
                (
                    -s,
                    -tie,
                    order,
                    {"view": view_name, "column": column, "type": type_, "description": description, "score": s},
                )
            )
    hits.sort(key=lambda h: (h[0], h[1], h[2]))
    return [h[3] for h in hits]


def markdown() -> str:
    """``docs/query-space.md``: the column reference, generated from :data:`VIEWS` and :data:`FUNCTIONS`."""
    lines = [
        "# The query space: `memory_v1`",
        "",
        "<!-- Generated by memlane.store.query_space.markdown(); edit src/memlane/store/query_space.py, then run",
        '     .venv/bin/python -c \'import memlane.store.query_space as s; open("docs/query-space.md", "w").write('
        "s.markdown())' -->",
        "",
        "Read-only SQL over stable views, the same names and columns on SQLite and PostgreSQL. "
        "See [python-api.md](python-api.md#the-query-space) for the calls, the fence and the limits.",
        "",
        LIMITS_TEXT,
        "",
        "Column types: `text`; `integer`; `json` (JSON as text); `time` (ISO-8601 UTC text of fixed width, "
        "so text order is time order).",
        "",
        "## Views",
        "",
    ]
    for view in VIEWS:
        lines += [f"### {view.name}", "", view.description, "", "| column | type | meaning |", "| --- | --- | --- |"]
        lines += [f"| `{c.name}` | {c.type} | {c.description} |" for c in view.columns]
        lines.append("")
    lines += ["## Functions", "", "Any function not listed here is refused, with its name.", ""]
    for part, title in (("common", "Both backends"), ("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        lines += [f"### {title}", "", "| kind | calls |", "| --- | --- |"]
        for group, samples in FUNCTIONS[part].items():
            lines.append(f"| {group} | " + ", ".join(f"`{s.replace('|', chr(92) + '|')}`" for s in samples) + " |")
        lines.append("")
    lines += [
        "Casts: " + "; ".join(f"{d}: " + ", ".join(f"`{t}`" for t in CAST_TYPES[d]) for d in DIALECTS) + ".",
        "",
        "## Notes",
        "",
        *[f"- {n}" for n in describe("sqlite")["notes"]],
        "",
    ]
    return "\n".join(lines)
