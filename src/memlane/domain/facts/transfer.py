"""Export and import of the facts layer's and the access tables' rows, beside the items in one JSONL stream.

Rows travel verbatim (ids, times, versions, stamps), one record per row, in an
order where every reference points backwards. Import is idempotent: a row
already present is left alone, except that a stamp the file has and the store
lacks (a retraction, a supersession, a merge) is applied, so importing a newer
export over an older one converges. Vectors are not exported; an importing
memory with an embedder computes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ...store import facts_transfer as db
from ...store._common import SqlSession, loads_json, ns_text, ns_tuple
from ...store.base import Store
from ...store.facts import index_text
from ...store.facts_schema import index_chunks
from ...values import validate as v
from ...values.errors import ValidationError

# record kind: (table, columns, primary key columns, time columns, stamps applied to an existing row)
TABLES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "entity": (
        "entities",
        ("id", "namespace", "kind", "name", "norm", "profile", "merged_into", "created_at", "author"),
        ("id",),
        ("created_at",),
        ("merged_into",),
    ),
    "alias": (
        "entity_aliases", ("entity_id", "alias", "norm", "created_at"), ("entity_id", "norm"), ("created_at",), (),
    ),
    "document": (
        "documents",
        ("id", "namespace", "title", "source", "created_at", "recorded_at", "chunk_count", "author"),
        ("id",),
        ("created_at", "recorded_at"),
        (),
    ),
    # context: the title and neighbouring passages the chunk is indexed with (absent before m011_chunk_context)
    "chunk": ("chunks", ("id", "document_id", "namespace", "position", "text", "context"), ("id",), (), ()),
    "fact": (
        "facts",
        (
            "id", "version", "namespace", "fact_key", "subject", "predicate", "object_entity", "object_value", "text",
            "valid_from", "valid_to", "recorded_at", "retracted_at", "author",
        ),
        ("id", "version"),
        ("valid_from", "valid_to", "recorded_at", "retracted_at"),
        ("retracted_at",),
    ),
    "evidence": (
        "evidence", ("fact_id", "source", "recorded_at", "author"), ("fact_id", "source"), ("recorded_at",), (),
    ),
    "claim": (
        "claims",
        (
            "id", "namespace", "text", "norm", "speaker", "asserted_at", "chunk_id", "recorded_at", "superseded_by",
            "superseded_at", "author",
        ),
        ("id",),
        ("asserted_at", "recorded_at", "superseded_at"),
        ("superseded_by", "superseded_at"),
    ),
    "claim_entity": ("claim_entities", ("claim_id", "entity_id"), ("claim_id", "entity_id"), (), ()),
    # access records (memlane.core.access): agents with their token hashes, rooms, members, grants, the log
    "access_agent": (
        "access_agents", ("name", "admin", "token_hash", "created_at"), ("name",), ("created_at",), (),
    ),
    "access_room": ("access_rooms", ("name", "created_at"), ("name",), ("created_at",), ()),
    "access_member": (
        "access_members", ("room", "agent", "added_at"), ("room", "agent"), ("added_at",), (),
    ),
    "access_grant": (
        "access_grants", ("agent", "prefix", "mode", "granted_at"), ("agent", "prefix"), ("granted_at",), (),
    ),
    "access_change": (
        "access_log",
        ("at", "actor", "action", "agent", "room", "prefix", "mode"),
        ("at", "actor", "action", "agent", "room", "prefix", "mode"),
        ("at",),
        (),
    ),
}  # fmt: skip
_BOOLEAN = {"admin"}
_NULLABLE_KEYS = {"access_change"}  # keys compared NULL-safely
# references that may point forwards (a merge into a newer entity): set after every row is in
_LATE = {"entity": ("merged_into",), "claim": ("superseded_by",)}
_INTEGER = {"version", "position", "chunk_count"}
_SEARCHED = {"fact", "claim", "chunk"}  # kinds with a full-text table on SQLite
# columns that may be empty (NULL); every other column is required, as the tables' NOT NULL say
_OPTIONAL = {
    "entity": {"merged_into", "author"},
    "document": {"source", "created_at", "author"},
    "chunk": {"context"},
    "fact": {"object_entity", "object_value", "valid_from", "valid_to", "retracted_at", "author"},
    "evidence": {"author"},
    "claim": {"speaker", "asserted_at", "chunk_id", "superseded_by", "superseded_at", "author"},
    "access_change": {"actor", "agent", "room", "prefix", "mode"},
}
# ids and references: short tokens, as memlane makes them (``ent_`` and 32 hex digits), so every key fits its index
_ID_COLUMNS = {
    "id", "entity_id", "fact_id", "document_id", "claim_id", "subject", "object_entity", "merged_into", "chunk_id",
    "superseded_by", "fact_key",
}  # fmt: skip
# indexed text made from names: within the facts layer's byte limit (the name rules' own)
_INDEXED_NAMES = {("entity", "norm"), ("alias", "norm"), ("claim", "norm"), ("evidence", "source")}
# access names are namespace segments; a grant's prefix is a namespace
_SEGMENTS = {("access_agent", "name"), ("access_room", "name"), ("access_member", "room"),
             ("access_member", "agent"), ("access_grant", "agent")}  # fmt: skip
# references the database enforces: (kind, column) -> (kind, column) it points at
_REFERENCES = {
    ("entity", "merged_into"): ("entity", "id"),
    ("alias", "entity_id"): ("entity", "id"),
    ("chunk", "document_id"): ("document", "id"),
    ("fact", "subject"): ("entity", "id"),
    ("fact", "object_entity"): ("entity", "id"),
    ("claim", "chunk_id"): ("chunk", "id"),
    ("claim", "superseded_by"): ("claim", "id"),
    ("claim_entity", "claim_id"): ("claim", "id"),
    ("claim_entity", "entity_id"): ("entity", "id"),
    ("access_member", "room"): ("access_room", "name"),
    ("access_member", "agent"): ("access_agent", "name"),
    ("access_grant", "agent"): ("access_agent", "name"),
}


def export_rows(store: Store) -> Iterator[dict[str, Any]]:
    """Every facts-layer row as a record, references first."""
    with store.session() as s:
        batches = [(kind, db.rows(s, table, columns, key)) for kind, (table, columns, key, _, _) in TABLES.items()]
    for kind, rows in batches:
        columns = TABLES[kind][1]
        for row in rows:
            rec: dict[str, Any] = {"record": kind, **dict(zip(columns, row, strict=True))}
            if "namespace" in rec:
                rec["namespace"] = list(ns_tuple(rec["namespace"]))
            if kind == "fact" and rec["object_value"] is not None:
                rec["object_value"] = loads_json(rec["object_value"])
            for col in _BOOLEAN.intersection(rec):
                rec[col] = bool(rec[col])
            yield rec


def _row(kind: str, rec: dict[str, Any]) -> tuple[Any, ...]:
    from ...store._common import _time
    from .layer import MAX_CHUNK_CHARS, MAX_FACT_TEXT_CHARS, MAX_NAME_BYTES, MAX_NAME_CHARS

    # texts indexed for search (PostgreSQL's tsvector holds 1 MB): as long as the writes make them
    longest = {
        ("fact", "text"): MAX_FACT_TEXT_CHARS,
        ("chunk", "text"): MAX_CHUNK_CHARS,
        ("chunk", "context"): MAX_CHUNK_CHARS,
        ("claim", "text"): MAX_NAME_CHARS,
    }

    _, columns, _, times, _ = TABLES[kind]
    optional = _OPTIONAL.get(kind, set())
    out = []
    for col in columns:
        value = rec.get(col)
        if value is None and col not in optional and not (kind == "fact" and col == "object_value"):
            needs = ", ".join(c for c in columns if c not in optional)
            raise ValidationError(col, f"is missing; {kind} records need {needs}")
        if col == "namespace":
            value = ns_text(v.namespace(value))
        elif col in times:
            value = _time(rec, col, optional=True)
        elif col == "object_value":
            if value is not None or rec.get("object_entity") is None:  # a fact with no object entity holds a value
                value = v.value(value, "object_value")[0]  # (JSON null travels as null)
        elif col in _INTEGER:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{col} {value!r} is not an integer")
        elif col in _BOOLEAN:
            if not isinstance(value, bool):
                raise ValueError(f"{col} {value!r} is not true or false")
        elif value is not None and not isinstance(value, str):
            raise ValueError(f"{col} {value!r} is not a string")
        elif value is not None and col in _ID_COLUMNS and not v.ID.fullmatch(value):
            raise ValidationError(col, f"{value[:120]!r} is not an id (1 to 100 letters, digits, '_' or '-')")
        elif value is not None and (kind, col) in _INDEXED_NAMES:
            v.text(value, col)  # before its size: a lone surrogate has none in UTF-8
            v.utf8_within(value, col, MAX_NAME_BYTES, MAX_NAME_CHARS)
        elif (kind, col) in _SEGMENTS:
            value = v.namespace((value,), col)[0]
        elif kind == "access_grant" and col == "prefix":
            value = ns_text(v.namespace(value, col))
        elif kind == "access_grant" and col == "mode" and value not in ("read", "write"):
            raise ValidationError(col, f"{value!r} is not 'read' or 'write'")
        if isinstance(value, str):
            v.text(value, col)  # stored as it is: valid Unicode without NUL, as every write checks its text
            if len(value) > longest.get((kind, col), len(value)):
                raise ValidationError(
                    col, f"is {len(value):,} characters; at most {longest[(kind, col)]:,}, as a {kind} is written"
                )
        out.append(value)
    return tuple(out)


Parsed = dict[str, list[tuple[int, tuple[Any, ...]]]]


def parse(records: Iterable[tuple[int, dict[str, Any]]], store: Store | None = None) -> Parsed:
    """Validate facts-layer records (numbered as in the file) into rows by kind, before anything is written.

    With ``store``, every reference must point at a row of the import or one already stored, and a new
    agent's token hash must be its own: what the database would refuse is refused here, so nothing is written.
    """
    by_kind: Parsed = {kind: [] for kind in TABLES}
    for n, rec in records:
        try:
            by_kind[rec["record"]].append((n, _row(rec["record"], rec)))
        except (KeyError, TypeError, ValueError) as e:
            raise _refused(n, str(e) if isinstance(e, ValidationError) else f"malformed ({e!r})") from e
    if store is not None:
        _check_references(store, by_kind)
    return by_kind


def _refused(n: int, what: str) -> ValidationError:
    return ValidationError("record", f"record {n}: {what}; nothing was imported", record=n)


def _column(kind: str, rows: list[tuple[int, tuple[Any, ...]]], col: str) -> list[tuple[int, Any]]:
    at = TABLES[kind][1].index(col)
    return [(n, row[at]) for n, row in rows]


def _check_references(store: Store, by_kind: Parsed) -> None:
    wanted: dict[tuple[str, str], set[Any]] = {}
    for (kind, col), target in _REFERENCES.items():
        wanted.setdefault(target, set()).update(x for _, x in _column(kind, by_kind[kind], col) if x is not None)
    known: dict[tuple[str, str], set[Any]] = {}
    with store.session() as s:
        for (kind, col), values in wanted.items():
            have = {x for _, x in _column(kind, by_kind[kind], col)}
            have.update(db.present(s, TABLES[kind][0], col, sorted(values - have)))
            known[(kind, col)] = have
        tokens = _column("access_agent", by_kind["access_agent"], "token_hash")
        names = _column("access_agent", by_kind["access_agent"], "name")
        held = db.token_holders(s) if tokens else {}
    for (kind, col), target in _REFERENCES.items():
        for n, x in _column(kind, by_kind[kind], col):
            if x is not None and x not in known[target]:
                raise _refused(n, f"{col} {x!r} names no {target[0]} in the import or in this memory")
    for (n, token), (_, name) in zip(tokens, names, strict=True):
        if held.setdefault(token, name) != name:
            raise _refused(n, f"agent {name!r} has the token hash of agent {held[token]!r}; each agent needs its own")


def import_rows(s: SqlSession, by_kind: Parsed) -> int:
    """Insert parsed rows into an open write session; returns the rows written (vectors: ``reindex``)."""
    written = 0
    for kind, rows in by_kind.items():
        table, columns, key, _, stamps = TABLES[kind]
        late = _LATE.get(kind, ())
        for _, row in rows:
            values = dict(zip(columns, row, strict=True))
            wanted = [values[k] for k in key]
            nullable = kind in _NULLABLE_KEYS
            current = db.existing(s, table, key, wanted, stamps, nullable)
            if current is not None:
                for stamp, have in zip(stamps, current, strict=False):
                    if have is None and values[stamp] is not None and stamp not in late:
                        db.set_stamp(s, table, key, wanted, nullable, stamp, values[stamp])
                        written += 1
                continue
            db.insert(s, table, columns, [None if c in late else values[c] for c in columns])
            written += 1
            # SQLite's full-text rows (PostgreSQL indexes generated columns); a fact's later versions keep its
            # text, indexed once under its id
            if kind == "chunk":
                index_chunks(s, [(values["id"], values["namespace"], values["text"], values["context"])])
            elif kind in _SEARCHED and not (kind == "fact" and values["version"] > 1):
                index_text(s, kind, [(values["id"], values["namespace"], values["text"])])
    for kind, columns_late in _LATE.items():
        table, columns, key, _, _ = TABLES[kind]
        for _, row in by_kind[kind]:
            values = dict(zip(columns, row, strict=True))
            for col in columns_late:
                if values[col] is not None:
                    db.set_reference(s, table, col, values[col], values["id"])
    return written


def is_facts_record(rec: dict[str, Any]) -> bool:
    """Whether an exported record belongs to the facts layer."""
    return rec.get("record") in TABLES


def split(
    records: Iterable[dict[str, Any]],
) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, dict[str, Any]]]]:
    """Items and versions, and the facts-layer records, each numbered as in the input."""
    items: list[tuple[int, dict[str, Any]]] = []
    facts: list[tuple[int, dict[str, Any]]] = []
    for n, rec in enumerate(records, 1):
        (facts if isinstance(rec, dict) and is_facts_record(rec) else items).append((n, rec))
    return items, facts
