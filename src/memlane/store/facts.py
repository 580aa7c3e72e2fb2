"""Every statement of the facts layer over its tables (:mod:`.facts_schema`): entities, facts, documents, claims.

One function per statement (or per pair that always runs together), run in a
session of either backend; where the backends differ (full-text search, the
full-text tables only SQLite keeps, the lock on one fact's key) the session's
dialect chooses. A read of records that live in namespaces takes ``within``,
the prefixes the caller may see, and applies it in SQL.
:class:`memlane.domain.facts.layer.FactsLayer` holds the rules (checks, ids, times,
merges followed, the assured reads' ranking, the records built) and calls these
inside its transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..values.model import Namespace
from ._common import SqlSession, within_filter
from .facts_schema import CONTEXT_WEIGHT, index_chunks

Rows = list[tuple[Any, ...]]
# an extra condition on a searched table's ``id``, with its parameters (:func:`among`, :func:`claims_about`, ...)
Narrowing = tuple[str, list[Any]]

# a searched kind's full-text table and its own
_FTS = {"fact": ("fact_fts", "facts"), "claim": ("claim_fts", "claims"), "chunk": ("chunk_fts", "chunks")}
# an embedded kind's table and what its vector is made from beside its text (a chunk's context)
_EMBEDDED = {"fact": ("facts", "NULL"), "claim": ("claims", "NULL"), "chunk": ("chunks", "t.context")}
# what the lexical channel alone may narrow its scan to: testimony not superseded
_CURRENT = {"claim": "superseded_at IS NULL"}

_FACT_COLUMNS = (
    "f.id, f.version, f.namespace, f.subject, f.predicate, f.object_entity, f.object_value, f.text, "
    "f.valid_from, f.valid_to, f.recorded_at, f.retracted_at"
)
_BELIEVED = "f.recorded_at <= ? AND (f.retracted_at IS NULL OR f.retracted_at > ?)"
_VALID = "(f.valid_from IS NULL OR f.valid_from <= ?) AND (f.valid_to IS NULL OR f.valid_to > ?)"
_CLAIM_COLUMNS = (
    "c.id, c.namespace, c.text, c.speaker, c.asserted_at, c.chunk_id, c.recorded_at, c.superseded_by, c.superseded_at"
)


def in_sql(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """``column IN (...)`` with one parameter per value (never empty SQL)."""
    if not values:
        return "1=0", []
    return f"{column} IN ({','.join('?' * len(values))})", list(values)


def _scope(s: SqlSession, column: str, within: Sequence[Namespace]) -> tuple[str, list[Any]]:
    """``WHERE`` text keeping rows whose namespace lies under one of ``within`` (never empty SQL)."""
    where, params = within_filter(within, "?", column, s.dialect)
    return where or "1=1", params


# -- vectors and the full-text tables ------------------------------------------


def vector_count(s: SqlSession, kind: str) -> int:
    return int(s.rows("SELECT count(*) FROM graph_vectors WHERE kind = ?", (kind,))[0][0])


def vectors(s: SqlSession, kind: str) -> Rows:
    """``(ref, vector)`` of every vector of a kind, by ref."""
    return s.rows("SELECT ref, vector FROM graph_vectors WHERE kind = ? ORDER BY ref", (kind,))


def insert_vectors(s: SqlSession, kind: str, rows: Iterable[tuple[str, bytes]], *, if_absent: bool = False) -> None:
    """Store ``(ref, vector)`` rows of a kind; ``if_absent`` leaves a ref that has one alone."""
    sql = "INSERT INTO graph_vectors (kind, ref, vector) VALUES (?, ?, ?)"
    s.many(sql + " ON CONFLICT DO NOTHING" if if_absent else sql, [(kind, ref, blob) for ref, blob in rows])


def delete_vectors(s: SqlSession) -> None:
    s.run("DELETE FROM graph_vectors")


def unembedded(s: SqlSession, kind: str, limit: int) -> Rows:
    """Up to ``limit`` ``(id, text, context)`` of a kind's rows that have no vector, by id (context: chunks')."""
    table, context = _EMBEDDED[kind]
    return s.rows(
        f"SELECT DISTINCT t.id, t.text, {context} FROM {table} t WHERE NOT EXISTS "
        "(SELECT 1 FROM graph_vectors g WHERE g.kind = ? AND g.ref = t.id) ORDER BY t.id LIMIT ?",
        (kind, limit),
    )


def index_text(s: SqlSession, kind: str, rows: Sequence[tuple[str, str, str]]) -> None:
    """Full-text rows ``(ref, namespace, text)`` of facts or claims; PostgreSQL indexes generated columns itself."""
    if s.dialect == "sqlite" and rows:
        s.many(f"INSERT INTO {kind}_fts (ref, namespace, text) VALUES (?, ?, ?)", rows)


# -- entities ------------------------------------------------------------------


def entity_links(s: SqlSession, ids: Sequence[str]) -> Rows:
    """``(id, merged_into, namespace)`` of the entities among ``ids``."""
    where, params = in_sql("id", ids)
    return s.rows(f"SELECT id, merged_into, namespace FROM entities WHERE {where}", params)


def merged_into_any(s: SqlSession, ids: Sequence[str]) -> Rows:
    """``(id, merged_into)`` of the entities merged into one of ``ids`` within its own namespace."""
    where, params = in_sql("m.merged_into", ids)
    return s.rows(
        f"SELECT m.id, m.merged_into FROM entities m JOIN entities p ON p.id = m.merged_into "
        f"WHERE {where} AND m.namespace = p.namespace",
        params,
    )


def entity_rows(s: SqlSession, ids: Sequence[str]) -> Rows:
    """``(id, namespace, kind, name, profile, merged_into, created_at)`` of the entities among ``ids``."""
    where, params = in_sql("id", ids)
    return s.rows(
        f"SELECT id, namespace, kind, name, profile, merged_into, created_at FROM entities WHERE {where}", params
    )


def aliases(s: SqlSession, ids: Sequence[str]) -> Rows:
    """``(entity_id, alias)`` of the entities among ``ids``, by alias."""
    where, params = in_sql("entity_id", ids)
    return s.rows(f"SELECT entity_id, alias FROM entity_aliases WHERE {where} ORDER BY alias", params)


def entity_visible(s: SqlSession, entity_id: str, within: Sequence[Namespace]) -> bool:
    where, params = _scope(s, "namespace", within)
    return bool(s.rows(f"SELECT 1 FROM entities WHERE id = ? AND {where}", [entity_id, *params]))


def visible_entities(s: SqlSession, ids: Sequence[str], within: Sequence[Namespace]) -> set[str]:
    """The ids among ``ids`` of entities in ``within``."""
    where, params = _scope(s, "namespace", within)
    return {r[0] for r in s.rows(f"SELECT id FROM entities WHERE {in_sql('id', ids)[0]} AND {where}", [*ids, *params])}


def entity_names(s: SqlSession, ids: Sequence[str]) -> dict[str, str]:
    """Name by id of the entities among ``ids``."""
    where, params = in_sql("id", ids)
    return dict(s.rows(f"SELECT id, name FROM entities WHERE {where}", params))


def entity_namespaces(s: SqlSession, ids: Sequence[str]) -> dict[str, str]:
    """Namespace (text) by id of the entities among ``ids``."""
    where, params = in_sql("id", ids)
    return dict(s.rows(f"SELECT id, namespace FROM entities WHERE {where}", params))


def matching_entities(s: SqlSession, by: str, value: str, within: Sequence[Namespace]) -> list[str]:
    """Ids of the entities in ``within`` whose ``name``, an ``alias``, or either one ``normalised`` is ``value``."""
    scope, params = _scope(s, "e.namespace", within)
    aliased = "SELECT a.entity_id FROM entity_aliases a JOIN entities e ON e.id = a.entity_id"
    if by == "name":
        sql, args = f"SELECT e.id FROM entities e WHERE e.name = ? AND {scope}", [value, *params]
    elif by == "alias":
        sql, args = f"{aliased} WHERE a.alias = ? AND {scope}", [value, *params]
    else:
        sql = f"SELECT e.id FROM entities e WHERE e.norm = ? AND {scope} UNION {aliased} WHERE a.norm = ? AND {scope}"
        args = [value, *params, value, *params]
    return [r[0] for r in s.rows(sql, args)]


def insert_entity(
    s: SqlSession,
    entity_id: str,
    namespace: str,
    kind: str,
    name: str,
    norm: str,
    profile: str,
    created_at: str,
    author: str | None,
) -> None:
    s.run(
        "INSERT INTO entities (id, namespace, kind, name, norm, profile, created_at, author) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (entity_id, namespace, kind, name, norm, profile, created_at, author),
    )


def insert_aliases(s: SqlSession, rows: Iterable[tuple[str, str, str, str]]) -> None:
    """Aliases ``(entity_id, alias, norm, created_at)``; one the entity has (by ``norm``) is left alone."""
    s.many(
        "INSERT INTO entity_aliases (entity_id, alias, norm, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
        rows,
    )


def set_merged_into(s: SqlSession, merged: str, survivor: str) -> None:
    s.run("UPDATE entities SET merged_into = ? WHERE id = ?", (survivor, merged))


# -- facts ---------------------------------------------------------------------


def _latest(s: SqlSession, where: str, params: Sequence[Any]) -> Rows:
    return s.rows(
        f"SELECT {_FACT_COLUMNS} FROM facts f WHERE {where} AND f.version = "
        "(SELECT max(g.version) FROM facts g WHERE g.id = f.id)",
        params,
    )


def latest_fact(s: SqlSession, fact_id: str) -> Rows:
    """A fact's row of its latest version (none if there is no such fact)."""
    return _latest(s, "f.id = ?", [fact_id])


def latest_facts(s: SqlSession, ids: Sequence[str], within: Sequence[Namespace]) -> Rows:
    """The latest version's row of each fact among ``ids`` in ``within``."""
    where, params = in_sql("f.id", ids)
    scope, p2 = _scope(s, "f.namespace", within)
    return _latest(s, f"{where} AND {scope}", [*params, *p2])


def current_facts(s: SqlSession, ids: Sequence[str], within: Sequence[Namespace], now: str) -> Rows:
    """Rows of the facts among ``ids`` in ``within`` that are believed and valid at ``now``."""
    where, params = in_sql("f.id", ids)
    scope, p2 = _scope(s, "f.namespace", within)
    return s.rows(
        f"SELECT {_FACT_COLUMNS} FROM facts f WHERE {where} AND {scope} AND f.retracted_at IS NULL AND {_VALID}",
        [*params, *p2, now, now],
    )


def facts_about(s: SqlSession, subjects: Sequence[str], within: Sequence[Namespace], now: str, limit: int) -> Rows:
    """Up to ``limit`` rows, newest first, of facts in ``within`` about ``subjects`` believed and valid at ``now``."""
    subj, p1 = in_sql("f.subject", subjects)
    where, p2 = _scope(s, "f.namespace", within)
    return s.rows(
        f"SELECT {_FACT_COLUMNS} FROM facts f WHERE {subj} AND {where} AND f.retracted_at IS NULL AND {_VALID} "
        "ORDER BY f.recorded_at DESC, f.id LIMIT ?",
        [*p1, *p2, now, now, limit],
    )


def edges(s: SqlSession, nodes: Sequence[str], within: Sequence[Namespace], believed: str) -> Rows:
    """Rows of facts in ``within`` between two entities, one of them among ``nodes``, as believed at ``believed``."""
    subj, p1 = in_sql("f.subject", nodes)
    obj, p2 = in_sql("f.object_entity", nodes)
    scope, p3 = _scope(s, "f.namespace", within)
    return s.rows(
        f"SELECT {_FACT_COLUMNS} FROM facts f WHERE f.object_entity IS NOT NULL AND ({subj} OR {obj}) AND {scope} "
        f"AND {_BELIEVED}",
        [*p1, *p2, *p3, believed, believed],
    )


def holding_facts(
    s: SqlSession,
    within: Sequence[Namespace],
    believed: str,
    valid: str,
    predicate: str | None,
    entities: Sequence[str] | None,
    *,
    ids: Sequence[str] | None = None,
    newest_first: bool = False,
    limit: int | None = None,
) -> Rows:
    """Rows of facts in ``within`` believed at ``believed`` and valid at ``valid``.

    Narrowed to a ``predicate``, to facts with a subject or object among
    ``entities``, to ``ids``; ``limit`` rows, newest first with ``newest_first``.
    """
    scope, scope_params = _scope(s, "f.namespace", within)
    where = [scope, f"{_BELIEVED} AND {_VALID}"]
    params: list[Any] = [*scope_params, believed, believed, valid, valid]
    if predicate is not None:
        where.append("f.predicate = ?")
        params.append(predicate)
    if entities is not None:
        subj, p1 = in_sql("f.subject", entities)
        obj, p2 = in_sql("f.object_entity", entities)
        where.append(f"({subj} OR {obj})")
        params.extend([*p1, *p2])
    sql = f"SELECT {_FACT_COLUMNS} FROM facts f WHERE {' AND '.join(where)}"
    if ids is not None:
        refs, ref_params = in_sql("f.id", ids)
        sql += f" AND {refs}"
        params.extend(ref_params)
    if newest_first:
        sql += " ORDER BY f.recorded_at DESC, f.id"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return s.rows(sql, params)


def evidence(s: SqlSession, fact_ids: Sequence[str], believed: str | None) -> Rows:
    """``(fact_id, source)`` of the facts' evidence recorded by ``believed`` (all with ``None``), oldest first."""
    where, params = in_sql("fact_id", fact_ids)
    sql = f"SELECT fact_id, source FROM evidence WHERE {where}"
    if believed is not None:
        sql += " AND recorded_at <= ?"
        params.append(believed)
    return s.rows(sql + " ORDER BY recorded_at, source", params)


def lock_fact_key(s: SqlSession, key: str) -> None:
    """Hold one fact's key until the transaction ends, so two writers asserting one fact do not both create it.

    PostgreSQL only: a write transaction on SQLite already excludes every other writer.
    """
    if s.dialect == "postgres":
        s.run("SELECT pg_advisory_xact_lock(hashtext(?))", (key,))


def open_facts(
    s: SqlSession,
    namespace: str,
    subjects: Sequence[str],
    predicate: str,
    objects: Sequence[str] | None,
    value: str | None,
) -> Rows:
    """Rows, oldest first, of the facts not retracted that say a subject among ``subjects`` ``predicate`` an object.

    The object is an entity among ``objects``, or with ``objects`` ``None`` the value ``value`` (JSON text).
    """
    subj, s_params = in_sql("f.subject", subjects)
    if objects is not None:
        obj, o_params = in_sql("f.object_entity", objects)
    else:
        obj, o_params = "f.object_entity IS NULL AND f.object_value = ?", [value]
    return s.rows(
        f"SELECT {_FACT_COLUMNS} FROM facts f WHERE f.namespace = ? AND {subj} AND f.predicate = ? "
        f"AND {obj} AND f.retracted_at IS NULL ORDER BY f.recorded_at, f.id",
        [namespace, *s_params, predicate, *o_params],
    )


def insert_evidence(
    s: SqlSession, fact_id: str, source: str, recorded_at: str, author: str | None, *, if_absent: bool = False
) -> None:
    """One source of a fact; ``if_absent`` leaves a source the fact has alone."""
    sql = "INSERT INTO evidence (fact_id, source, recorded_at, author) VALUES (?, ?, ?, ?)"
    s.run(sql + " ON CONFLICT DO NOTHING" if if_absent else sql, (fact_id, source, recorded_at, author))


def insert_fact(
    s: SqlSession,
    fact_id: str,
    version: int,
    namespace: str,
    key: str,
    subject: str,
    predicate: str,
    object_entity: str | None,
    object_value: str | None,
    text: str,
    valid_from: str | None,
    valid_to: str | None,
    recorded_at: str,
    author: str | None,
) -> None:
    s.run(
        "INSERT INTO facts (id, version, namespace, fact_key, subject, predicate, object_entity, object_value, "
        "text, valid_from, valid_to, recorded_at, author) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            fact_id,
            version,
            namespace,
            key,
            subject,
            predicate,
            object_entity,
            object_value,
            text,
            valid_from,
            valid_to,
            recorded_at,
            author,
        ),
    )


def fact_versions(s: SqlSession, fact_id: str, within: Sequence[Namespace]) -> Rows:
    """A fact's rows in ``within``, latest version first."""
    where, params = _scope(s, "f.namespace", within)
    return s.rows(
        f"SELECT {_FACT_COLUMNS} FROM facts f WHERE f.id = ? AND {where} ORDER BY f.version DESC", [fact_id, *params]
    )


def retract(s: SqlSession, fact_id: str, version: int, at: str) -> None:
    s.run("UPDATE facts SET retracted_at = ? WHERE id = ? AND version = ?", (at, fact_id, version))


def fact_key(s: SqlSession, fact_id: str, version: int) -> str:
    return str(s.rows("SELECT fact_key FROM facts WHERE id = ? AND version = ?", (fact_id, version))[0][0])


# -- documents, chunks and claims ----------------------------------------------


def insert_document(
    s: SqlSession,
    document_id: str,
    namespace: str,
    title: str,
    source: str | None,
    created_at: str | None,
    recorded_at: str,
    chunk_count: int,
    author: str | None,
) -> None:
    s.run(
        "INSERT INTO documents (id, namespace, title, source, created_at, recorded_at, chunk_count, author) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (document_id, namespace, title, source, created_at, recorded_at, chunk_count, author),
    )


def insert_chunks(s: SqlSession, rows: Iterable[tuple[str, str, str, int, str, str]]) -> None:
    """Chunks ``(id, document_id, namespace, position, text, context)``."""
    s.many("INSERT INTO chunks (id, document_id, namespace, position, text, context) VALUES (?, ?, ?, ?, ?, ?)", rows)


def documents_without_context(s: SqlSession) -> Rows:
    """``(id, title)`` of the documents with a chunk whose context is not stored, by id."""
    return s.rows(
        "SELECT d.id, d.title FROM documents d WHERE EXISTS "
        "(SELECT 1 FROM chunks c WHERE c.document_id = d.id AND c.context IS NULL) ORDER BY d.id"
    )


def document_chunks(s: SqlSession, document_id: str) -> Rows:
    """``(id, namespace, text)`` of a document's chunks, in order."""
    return s.rows("SELECT id, namespace, text FROM chunks WHERE document_id = ? ORDER BY position", (document_id,))


def set_contexts(s: SqlSession, rows: Sequence[tuple[str, str, str, str]]) -> None:
    """Store the contexts of chunks ``(id, namespace, text, context)``, and index them (SQLite's full-text rows)."""
    s.many("UPDATE chunks SET context = ? WHERE id = ?", [(ctx, cid) for cid, _, _, ctx in rows])
    if s.dialect == "sqlite":
        s.many("DELETE FROM chunk_fts WHERE ref = ?", [(cid,) for cid, _, _, _ in rows])
        index_chunks(s, rows)


def chunk_ids(s: SqlSession, document_id: str) -> list[str]:
    """A document's chunk ids, in order."""
    return [c[0] for c in s.rows("SELECT id FROM chunks WHERE document_id = ? ORDER BY position", [document_id])]


def chunks_between(s: SqlSession, document_id: str, first: int, last: int) -> list[str]:
    """Ids of a document's chunks at positions ``first`` to ``last``, in order."""
    rows = s.rows(
        "SELECT id FROM chunks WHERE document_id = ? AND position >= ? AND position <= ? ORDER BY position",
        (document_id, first, last),
    )
    return [r[0] for r in rows]


def chunk_rows(s: SqlSession, ids: Sequence[str], within: Sequence[Namespace]) -> Rows:
    """``(id, document_id, namespace, position, text, title)`` of the chunks among ``ids`` in ``within``."""
    where, params = in_sql("k.id", ids)
    scope, p2 = _scope(s, "k.namespace", within)
    return s.rows(
        f"SELECT k.id, k.document_id, k.namespace, k.position, k.text, d.title FROM chunks k "
        f"JOIN documents d ON d.id = k.document_id WHERE {where} AND {scope}",
        [*params, *p2],
    )


def chunk_finder(s: SqlSession, within: Sequence[Namespace]) -> Callable[[str], bool]:
    """Whether a chunk of this id lies in ``within``: the scope's SQL made once for a batch's many asks."""
    scope, params = _scope(s, "namespace", within)

    def visible(chunk_id: str) -> bool:
        return bool(s.rows(f"SELECT 1 FROM chunks WHERE id = ? AND {scope}", [chunk_id, *params]))

    return visible


def document_rows(s: SqlSession, ids: Sequence[str], within: Sequence[Namespace]) -> Rows:
    """``(id, namespace, title, source, created_at, recorded_at, chunk_count)`` of the documents among ``ids``."""
    where, params = in_sql("id", ids)
    scope, p2 = _scope(s, "namespace", within)
    return s.rows(
        f"SELECT id, namespace, title, source, created_at, recorded_at, chunk_count FROM documents "
        f"WHERE {where} AND {scope}",
        [*params, *p2],
    )


def insert_claims(s: SqlSession, rows: Iterable[tuple[Any, ...]]) -> None:
    """Claims ``(id, namespace, text, norm, speaker, asserted_at, chunk_id, recorded_at, author)``."""
    s.many(
        "INSERT INTO claims (id, namespace, text, norm, speaker, asserted_at, chunk_id, recorded_at, author) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def insert_claim_entities(s: SqlSession, rows: Iterable[tuple[str, str]]) -> None:
    """What claims are about: ``(claim_id, entity_id)``."""
    s.many("INSERT INTO claim_entities (claim_id, entity_id) VALUES (?, ?)", rows)


def supersede(s: SqlSession, claim_id: str, by: str | None, at: str) -> None:
    s.run("UPDATE claims SET superseded_by = ?, superseded_at = ? WHERE id = ?", (by, at, claim_id))


def claim_rows(s: SqlSession, ids: Sequence[str], within: Sequence[Namespace]) -> Rows:
    """The rows (``id, namespace, text, speaker, asserted_at, chunk_id, recorded_at, superseded_by, superseded_at``)
    of the claims among ``ids`` in ``within``."""
    where, params = in_sql("c.id", ids)
    scope, p2 = _scope(s, "c.namespace", within)
    return s.rows(f"SELECT {_CLAIM_COLUMNS} FROM claims c WHERE {where} AND {scope}", [*params, *p2])


def claim_entities(s: SqlSession, claim_ids: Sequence[str]) -> Rows:
    """``(claim_id, entity_id)`` of what the claims are about, by entity."""
    where, params = in_sql("claim_id", claim_ids)
    return s.rows(f"SELECT claim_id, entity_id FROM claim_entities WHERE {where} ORDER BY 2", params)


def current_claim_norms(s: SqlSession, ids: Sequence[str], within: Sequence[Namespace]) -> dict[str, str]:
    """Normalised text by id of the claims among ``ids`` in ``within`` not superseded."""
    refs, ref_params = in_sql("c.id", ids)
    scope, scope_params = _scope(s, "c.namespace", within)
    return dict(
        s.rows(
            f"SELECT c.id, c.norm FROM claims c WHERE {refs} AND {scope} AND c.superseded_at IS NULL",
            [*ref_params, *scope_params],
        )
    )


def current_claims_saying(s: SqlSession, norms: Sequence[str], within: Sequence[Namespace]) -> Rows:
    """``(id, norm)``, oldest first, of the claims in ``within`` not superseded saying one of ``norms`` (normalised)."""
    where, params = in_sql("c.norm", norms)
    scope, p2 = _scope(s, "c.namespace", within)
    return s.rows(
        f"SELECT c.id, c.norm FROM claims c WHERE {where} AND {scope} AND c.superseded_at IS NULL "
        "ORDER BY c.recorded_at, c.id",
        [*params, *p2],
    )


# -- the ranked reads' channels --------------------------------------------------


def among(ids: Sequence[str]) -> Narrowing:
    """Narrow a search to these ids."""
    return in_sql("id", ids)


def claims_about(entities: Sequence[str]) -> Narrowing:
    """Narrow a claim search to claims about one of ``entities``."""
    about, params = in_sql("entity_id", entities)
    return f"id IN (SELECT claim_id FROM claim_entities WHERE {about})", params


def passages_about(entities: Sequence[str]) -> Narrowing:
    """Narrow a chunk search to the documents a current claim about one of ``entities`` cites."""
    about, params = in_sql("entity_id", entities)
    return (
        "document_id IN (SELECT k.document_id FROM chunks k JOIN claims c ON c.chunk_id = k.id "
        f"JOIN claim_entities ce ON ce.claim_id = c.id WHERE c.superseded_at IS NULL AND ce.{about})",
        params,
    )


def lexical(
    s: SqlSession,
    kind: str,
    words: Sequence[str],
    within: Sequence[Namespace],
    k: int,
    restrict: Narrowing | None,
    current: bool,
) -> list[tuple[str, float]]:
    """Up to ``k`` ``(id, score)`` of a kind's rows in ``within`` matching any of ``words``, best (highest) first.

    ``current`` narrows the scan to what is current (claims not superseded).
    """
    fts, table = _FTS[kind]
    conditions = [c for c in (restrict[0] if restrict else None, _CURRENT[kind] if current else None) if c]
    extra = " AND ".join(conditions)
    extra_params = restrict[1] if restrict else []
    scope, params = _scope(s, "namespace", within)
    if s.dialect == "sqlite":
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        narrowed = f"AND EXISTS (SELECT 1 FROM {table} WHERE id = {fts}.ref AND {extra}) " if extra else ""
        # a chunk's context is its second column, weighed below its own words
        bm25 = f"bm25({fts}, 1.0, {CONTEXT_WEIGHT})" if kind == "chunk" else f"bm25({fts})"
        rows = s.rows(
            f"SELECT ref, {bm25} FROM {fts} WHERE {fts} MATCH ? AND {scope} {narrowed}ORDER BY {bm25} LIMIT ?",
            [match, *params, *extra_params, k],
        )
        return [(r[0], -r[1]) for r in rows]
    tsquery = " | ".join("'" + w.replace("'", "''") + "'" for w in words)
    # a chunk's context words are labelled C, weighed below its own (unlabelled, D)
    weights = f"'{{1, {CONTEXT_WEIGHT}, 1, 1}}', " if kind == "chunk" else ""
    rows = s.rows(
        f"SELECT id, max(ts_rank({weights}tsv, q)) FROM {table}, to_tsquery('memlane', ?) q "
        f"WHERE tsv @@ q AND {scope} AND {extra or '1=1'} GROUP BY id ORDER BY 2 DESC, id LIMIT ?",
        [tsquery, *params, *extra_params, k],
    )
    return [(r[0], float(r[1])) for r in rows]


def allowed(s: SqlSession, kind: str, within: Sequence[Namespace], restrict: Narrowing | None) -> set[str] | None:
    """Ids of a kind's rows in ``within`` and ``restrict``; ``None`` when neither narrows (every row)."""
    scope, params = _scope(s, "namespace", within)
    if scope == "1=1" and restrict is None:
        return None
    where = " AND ".join([scope, *([restrict[0]] if restrict else [])])
    extra_params = restrict[1] if restrict else []
    return {r[0] for r in s.rows(f"SELECT id FROM {_FTS[kind][1]} WHERE {where}", [*params, *extra_params])}
