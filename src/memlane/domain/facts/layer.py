"""The facts layer over a store's portable SQL: writes, primitives and the four assured reads.

Every read takes ``within``, the namespace prefixes the caller may see
(``[()]`` is everything), and applies it in SQL, so the embedded owner and a
service agent get the same code path. Ranked reads follow the item search
pipeline: nominate per channel (BM25 and, with an embedder, cosine), fuse with
RRF, confirm against the live rows.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import re
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from time import perf_counter
from typing import TYPE_CHECKING, Any

from ...store import facts as db
from ...store._common import SqlSession, loads_json, ns_text, ns_tuple, ts
from ...store.facts import in_sql as in_sql  # public here before the statements moved to the store
from ...store.facts_schema import CONTEXT_MARK, index_chunks
from ...values import facts_text as t
from ...values import validate as v
from ...values.errors import ConflictError, NotFoundError, ValidationError
from ...values.facts import Candidate, Chunk, Claim, ClaimGroup, Context, Document, Entity, Fact, Path, Record
from ...values.ids import new_ids
from ...values.model import Namespace
from ..search import rank

if TYPE_CHECKING:
    from ..ports import Core

MAX_ENTITY_IDS = 20
MAX_HOPS = 3
MAX_K = 100
MAX_CANDIDATE_K = 400
MAX_NEIGHBOURHOOD = 2000  # entities reached by expansion; past it the answer says it was cut
MAX_PATHS = 1000
MAX_NAME_CHARS = 1000
# names are bounded in UTF-8 bytes too (two a character on average), and so is the normalised form that
# entities, aliases and claims are matched by: it is indexed, and PostgreSQL's btree holds at most
# 2704 bytes per row (compatibility forms can expand a character into many, so it is checked itself)
MAX_NAME_BYTES = 2 * MAX_NAME_CHARS
MAX_LOOKUP = 1000
MAX_CHUNK_CHARS = 100_000
# a fact's text (subject, predicate and object in words) is what search indexes; PostgreSQL's tsvector holds
# 1 MB, so like an item's lexical text it is cut here, while the object itself is kept whole
MAX_FACT_TEXT_CHARS = 200_000
MAX_BATCH = 10_000  # claims per add_claims call
MAX_AREA = 5000  # facts a neighbourhood search restricts to by id
_ENTITY_ID = re.compile(r"^ent_[0-9a-f]{32}$")
_PREFIXES = {"ent": "entities", "fact": "facts", "doc": "documents", "chunk": "chunks", "claim": "claims"}
_WEIGHTS = {"lexical": 1.0, "vector": 0.5}
_RRF_K = 10


def _ms(since: float) -> float:
    return round((perf_counter() - since) * 1000, 3)


def _dt(raw: str | None) -> datetime | None:
    return None if raw is None else datetime.fromisoformat(raw)


def _new_ids(kind: str, now: datetime, count: int = 1) -> builtins.list[str]:
    return [f"{kind}_{i}" for i in new_ids(now, count)]


# -- input checks ------------------------------------------------------------


def _name(raw: Any, field: str) -> str:
    if not isinstance(raw, str):
        raise ValidationError(field, f"must be a string, not {type(raw).__name__}")
    text = " ".join(raw.split())
    if not text:
        raise ValidationError(field, "must not be empty")
    if len(text) > MAX_NAME_CHARS:
        raise ValidationError(field, f"is {len(text):,} characters; at most {MAX_NAME_CHARS:,}")
    v.text(text, field)
    v.utf8_within(text, field, MAX_NAME_BYTES, MAX_NAME_CHARS)
    return text


def _matched_name(raw: Any, field: str) -> str:
    """A name that is stored with its normalised form (entity names, aliases, claims): both within the limits."""
    name = _name(raw, field)
    size = len(t.normalise(name).encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise ValidationError(
            field,
            f"is {size:,} bytes in UTF-8 once normalised for matching (compatibility characters such as "
            f"ligatures expand); at most {MAX_NAME_BYTES:,}",
        )
    return name


def _optional_name(raw: Any, field: str) -> str | None:
    return None if raw is None else _name(raw, field)


def _time(raw: Any, field: str) -> datetime | None:
    return v.time(raw, field)


def _ids(raw: Any, field: str, *, maximum: int, kind: str | None = None) -> builtins.list[str]:
    if isinstance(raw, str) or not isinstance(raw, list | tuple):
        raise ValidationError(field, "must be a list of ids")
    if len(raw) > maximum:
        raise ValidationError(field, f"has {len(raw)} ids; at most {maximum}")
    for i in raw:
        if not isinstance(i, str) or (kind is not None and not i.startswith(kind + "_")):
            raise ValidationError(field, f"{i!r} is not {'an id' if kind is None else f'a {kind}_... id'}")
    return builtins.list(dict.fromkeys(raw))


def _id_like(raw: Any) -> bool:
    """Whether ``raw`` could name a record (any other text names none, and need not reach the database)."""
    return isinstance(raw, str) and v.ID.fullmatch(raw) is not None


def _predicate(raw: Any, field: str = "predicate") -> str:
    return "_".join(_name(raw, field).lower().split())


@dataclass(frozen=True, slots=True)
class At:
    """The two clocks of a read: ``valid`` (world time) and ``believed`` (memlane's time)."""

    valid: str
    believed: str
    current: bool

    def params(self) -> dict[str, Any]:
        """How the read's parameters report it."""
        return {"time": "current"} if self.current else {"time": {"valid_at": self.valid, "believed_at": self.believed}}


def parse_time(raw: Any, now: datetime) -> At:
    """``"current"`` or ``{"valid_at": t, "believed_at": t}`` (either may be left out: now)."""
    if raw is None or raw == "current":
        return At(ts(now), ts(now), True)
    if not isinstance(raw, dict):
        raise ValidationError("time", 'must be "current" or {"valid_at": ..., "believed_at": ...}')
    unknown = set(raw) - {"valid_at", "believed_at"}
    if unknown:
        raise ValidationError("time", f"has unknown fields {sorted(unknown)}; use valid_at and believed_at")
    valid = _time(raw.get("valid_at"), "time.valid_at") or now
    believed = _time(raw.get("believed_at"), "time.believed_at") or now
    return At(ts(valid), ts(believed), False)


# -- vectors -------------------------------------------------------------------


class _VectorIndex:
    """One kind's vectors as a numpy matrix; rows are immutable, so new rows only append."""

    def __init__(self) -> None:
        self.refs: builtins.list[str] = []
        self.skipped = 0
        self.matrix: Any = None
        self.lock = threading.Lock()

    def refresh(self, s: SqlSession, kind: str, dimension: int) -> None:
        import numpy as np

        if db.vector_count(s, kind) == len(self.refs) + self.skipped:
            return
        rows = db.vectors(s, kind)
        # a vector of another dimension (left by an older embedder) is skipped, never misread
        fitting = [r for r in rows if len(r[1]) == 4 * dimension]
        self.refs = [r[0] for r in fitting]
        self.skipped = len(rows) - len(fitting)
        self.matrix = (
            np.frombuffer(b"".join(bytes(r[1]) for r in fitting), dtype="<f4").reshape(len(fitting), dimension)
            if fitting
            else None
        )

    def top(self, query: Any, allowed: set[str] | None, k: int) -> builtins.list[tuple[str, float]]:
        import numpy as np

        if self.matrix is None or self.matrix.shape[1] != len(query):
            return []
        scores = self.matrix @ np.asarray(query, dtype=np.float32)
        if allowed is not None:
            mask = np.fromiter((ref in allowed for ref in self.refs), dtype=bool, count=len(self.refs))
            scores = np.where(mask, scores, -np.inf)
        take = min(k, len(self.refs))
        if take <= 0:
            return []
        top = np.argpartition(-scores, take - 1)[:take]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(self.refs[int(i)], float(scores[i])) for i in top if np.isfinite(scores[i])]


_INDEXES: weakref.WeakKeyDictionary[Any, dict[str, _VectorIndex]] = weakref.WeakKeyDictionary()
_INDEXES_LOCK = threading.Lock()


# -- the layer -------------------------------------------------------------------


class FactsLayer:
    """Entities, facts, documents and claims of one :class:`~memlane.core.memory.Memory`."""

    def __init__(self, mem: Core) -> None:
        self._mem = mem
        self._store = mem.store
        self._query_vectors: dict[str, builtins.list[float]] = {}

    # -- plumbing ------------------------------------------------------------

    def _vectors(self, kind: str) -> _VectorIndex:
        with _INDEXES_LOCK:
            per_store = _INDEXES.setdefault(self._store, {})
            return per_store.setdefault(kind, _VectorIndex())

    def _embed(self, texts: Sequence[str]) -> builtins.list[bytes] | None:
        """Vectors for texts, made before a write opens its transaction (None without an embedder)."""
        return None if self._mem.embedder is None or not texts else self._mem._embed(texts)

    def _insert_vectors(self, s: SqlSession, kind: str, refs: Sequence[str], blobs: Sequence[bytes] | None) -> None:
        if blobs is None:
            return
        db.insert_vectors(s, kind, zip(refs, blobs, strict=True))

    def _index_text(self, s: SqlSession, kind: str, rows: Sequence[tuple[str, str, str]]) -> None:
        """Full-text rows ``(ref, namespace, text)`` (SQLite's; PostgreSQL indexes generated columns itself)."""
        db.index_text(s, kind, rows)

    def backfill_context(self) -> int:
        """Contexts for the chunks stored before ``m011_chunk_context``, once per store; returns how many.

        The migration is SQL and cannot cut passages at words as ``text.context`` does, so this runs at the
        first open after it (``memlane.open``) and records in ``meta`` that it is done. A store created with
        the migration is recorded as done by it. Their vectors stay those of the chunk text alone.
        """
        if self._store.get_meta(CONTEXT_MARK) is not None:
            return 0
        done = 0
        with self._store.session(write=True) as s:
            for did, title in db.documents_without_context(s):
                chunks = db.document_chunks(s, did)
                pieces = [text for _, _, text in chunks]
                rows = [(cid, ns, text, t.context(title, pieces, i)) for i, (cid, ns, text) in enumerate(chunks)]
                db.set_contexts(s, rows)
                done += len(rows)
        self._store.set_meta(CONTEXT_MARK, "complete")
        return done

    def embed_missing(self, batch_size: int = 64) -> int:
        """Vectors for facts, claims and chunks that have none (after an import or an embedder change)."""
        if self._mem.embedder is None:
            return 0
        done = 0
        for kind in ("fact", "claim", "chunk"):
            while True:
                with self._store.session() as s:
                    rows = db.unembedded(s, kind, batch_size)
                if not rows:
                    break
                blobs = self._embed([t.embedded(text, around) for _, text, around in rows])
                with self._store.session(write=True) as s:
                    pairs = [(ref, blob) for (ref, _, _), blob in zip(rows, blobs or [], strict=True)]
                    db.insert_vectors(s, kind, pairs, if_absent=True)
                done += len(rows)
        return done

    def drop_vectors(self) -> None:
        """Forget every facts-layer vector (the embedder changed)."""
        with self._store.session(write=True) as s:
            db.delete_vectors(s)
        with _INDEXES_LOCK:
            _INDEXES.pop(self._store, None)

    # -- entities --------------------------------------------------------------

    def _survivors(self, s: SqlSession, ids: Iterable[str]) -> dict[str, str]:
        """Each known id mapped to the entity it was (transitively) merged into, or itself.

        A redirect is followed only inside one namespace: merges never cross
        namespaces (``merge_entities`` refuses), and one recorded before that rule
        stays invisible, so no reader is ever led to an entity it may not see.
        """
        row: dict[str, tuple[str | None, str]] = {}
        wanted = set(ids)
        todo = set(wanted)
        while todo:
            rows = db.entity_links(s, sorted(todo))
            row.update((i, (m, ns)) for i, m, ns in rows)
            todo = {m for _, m, _ in rows if m is not None and m not in row}
        out = {}
        for start in wanted.intersection(row):  # only the ids asked about: a parent is no answer of its own
            node, seen = start, {start}
            while True:
                parent = row[node][0]
                if parent is None or parent in seen or parent not in row or row[parent][1] != row[node][1]:
                    break
                node = parent
                seen.add(node)
            out[start] = node
        return out

    def _family(self, s: SqlSession, survivors: Iterable[str]) -> dict[str, str]:
        """Every id that resolves to one of ``survivors`` (the survivors included), mapped to it.

        Only ids of the survivor's own namespace: their names become its aliases,
        and a reader of the survivor may read nothing else.
        """
        family = {sid: sid for sid in survivors}
        frontier = builtins.list(family)
        while frontier:
            rows = db.merged_into_any(s, frontier)
            frontier = [i for i, _ in rows if i not in family]
            for i, m in rows:
                family.setdefault(i, family[m])
        return family

    def _entities(self, s: SqlSession, ids: Iterable[str]) -> dict[str, Entity]:
        """Entities by id, aliases including the names of everything merged into them."""
        ids = builtins.list(dict.fromkeys(ids))
        if not ids:
            return {}
        family = self._family(s, ids)
        by_id = {r[0]: r for r in db.entity_rows(s, builtins.list(family))}
        aliases: dict[str, dict[str, None]] = {i: {} for i in ids}
        for eid, alias in db.aliases(s, builtins.list(family)):
            aliases[family[eid]][alias] = None
        for member, sid in family.items():
            if member != sid and member in by_id:
                aliases[sid][by_id[member][3]] = None
        # merged_into shows only a redirect a reader would follow (one namespace)
        redirect = self._survivors(s, [i for i in ids if i in by_id and by_id[i][5] is not None])
        out = {}
        for i in ids:
            r = by_id.get(i)
            if r is None:
                continue
            names = [a for a in aliases[i] if a != r[3]]
            followed = redirect.get(i) not in (None, i)  # its first link stays in one namespace
            out[i] = Entity(r[0], ns_tuple(r[1]), r[2], r[3], names, r[4], r[5] if followed else None, _dt(r[6]))
        return out

    def _visible_entity(self, s: SqlSession, raw: Any, field: str, within: Sequence[Namespace]) -> str:
        """The survivor id of an entity the caller may see, or a clear error."""
        if not isinstance(raw, str) or not _ENTITY_ID.match(raw):
            raise ValidationError(field, f"{raw!r} is not an entity id (ent_ followed by 32 hex digits)")
        sid = self._survivors(s, [raw]).get(raw)
        if sid is not None and db.entity_visible(s, sid, within):
            return sid
        raise NotFoundError(f"no entity {raw!r} that you can see; find one with resolve_entity or add_entity")

    def add_entity(
        self,
        namespace: Any,
        name: Any,
        *,
        kind: Any = "thing",
        aliases: Any = (),
        profile: Any = "",
    ) -> Entity:
        """Create an entity. Two entities may share a name; ``resolve_entity`` tells them apart."""
        ns = v.namespace(namespace)
        name = _matched_name(name, "name")
        kind = _name(kind, "kind")
        if isinstance(aliases, str) or not isinstance(aliases, list | tuple):
            raise ValidationError("aliases", "must be a list of names")
        alias_list = builtins.list(dict.fromkeys(_matched_name(a, "aliases") for a in aliases))
        if not isinstance(profile, str):
            raise ValidationError("profile", f"must be a string, not {type(profile).__name__}")
        profile = v.text(profile, "profile")
        now = self._mem._now()
        eid = _new_ids("ent", now)[0]
        with self._store.session(write=True) as s:
            db.insert_entity(s, eid, ns_text(ns), kind, name, t.normalise(name), profile, ts(now), self._mem.author)
            self._insert_aliases(s, eid, alias_list, now)
        return Entity(eid, ns, kind, name, [a for a in alias_list if a != name], profile, None, now)

    def _insert_aliases(self, s: SqlSession, eid: str, aliases: Sequence[str], now: datetime) -> None:
        db.insert_aliases(s, [(eid, a, t.normalise(a), ts(now)) for a in aliases])

    def add_alias(self, entity_id: Any, alias: Any, *, within: Sequence[Namespace] = ((),)) -> Entity:
        """Another name for an entity (added to the survivor if it was merged away)."""
        alias = _matched_name(alias, "alias")
        now = self._mem._now()
        with self._store.session(write=True) as s:
            sid = self._visible_entity(s, entity_id, "entity_id", within)
            self._insert_aliases(s, sid, [alias], now)
            return self._entities(s, [sid])[sid]

    def merge_entities(self, survivor: Any, merged: Any, *, within: Sequence[Namespace] = ((),)) -> Entity:
        """Merge ``merged`` into ``survivor``; the merged-away id keeps resolving to the survivor."""
        with self._store.session(write=True) as s:
            keep = self._visible_entity(s, survivor, "survivor", within)
            gone = self._visible_entity(s, merged, "merged", within)
            if keep == gone:
                raise ConflictError(f"{merged!r} already is (or was merged into) {keep!r}; nothing to merge")
            homes = db.entity_namespaces(s, [keep, gone])
            if homes[keep] != homes[gone]:
                # a reader of the merged entity may not see the survivor's namespace: never redirect across
                raise ValidationError(
                    "merged",
                    f"{merged!r} lives in {homes[gone]!r} and the survivor in {homes[keep]!r}; entities merge only "
                    "within one namespace, so no reader is led to what it may not see: add the name as an alias "
                    "(add_alias) instead",
                )
            db.set_merged_into(s, gone, keep)
            return self._entities(s, [keep])[keep]

    def resolve_entity(self, name: Any, *, within: Sequence[Namespace]) -> Context:
        """A name to one entity, several candidates (with what sets them apart), or none."""
        started = perf_counter()
        name = _name(name, "name")
        norm = t.normalise(name)
        # the exact name, then an alias, then either normalised: the first stage that finds any decides
        stages = [("name", name), ("alias", name), ("normalised", norm)]
        candidates: builtins.list[Candidate] = []
        with self._store.session() as s:
            for matched, value in stages:
                found = db.matching_entities(s, matched, value, within) if norm or matched != "normalised" else []
                if not found:
                    continue
                survivors = builtins.list(dict.fromkeys(self._survivors(s, found).values()))
                entities = self._entities(s, survivors)
                for sid in sorted(entities, key=lambda i: (entities[i].created_at or datetime.min, i)):
                    facts = self._current_facts(s, sid, within, 3)
                    candidates.append(Candidate(entities[sid], matched, [f.text for f in facts]))
                break
        status = "none" if not candidates else "resolved" if len(candidates) == 1 else "ambiguous"
        notes = []
        if status == "ambiguous":
            differ = [
                f
                for f in ("namespace", "kind", "profile", "aliases")
                if len({json.dumps(getattr(c.entity, f), default=str) for c in candidates}) > 1
            ]
            notes.append(
                f"{len(candidates)} entities match {name!r}; they differ in: "
                + (", ".join(differ + ["facts"]) if differ else "facts only")
            )
        return Context(
            "resolve_entity",
            {"name": name},
            {"entities": candidates},
            counts={"candidates": len(candidates)},
            timings={"total_ms": _ms(started)},
            notes=notes,
            status=status,
        )

    # -- facts -----------------------------------------------------------------

    def _facts(self, s: SqlSession, rows: Sequence[tuple], believed: str | None) -> builtins.list[Fact]:
        """Fact records for rows, with entity names and evidence as of ``believed``."""
        if not rows:
            return []
        ids = {r[3] for r in rows} | {r[5] for r in rows if r[5]}
        survivors = self._survivors(s, ids)
        names = db.entity_names(s, builtins.list(set(survivors.values())))
        evidence: dict[str, builtins.list[str]] = {r[0]: [] for r in rows}
        for fid, source in db.evidence(s, builtins.list(evidence), believed):
            evidence[fid].append(source)
        out = []
        for r in rows:
            subject = survivors.get(r[3], r[3])
            obj = survivors.get(r[5], r[5]) if r[5] else None
            sources = evidence[r[0]]
            out.append(
                Fact(
                    r[0],
                    r[1],
                    ns_tuple(r[2]),
                    subject,
                    names.get(subject, ""),
                    r[4],
                    obj,
                    names.get(obj) if obj else None,
                    None if r[6] is None else loads_json(r[6]),
                    r[7],
                    _dt(r[8]),
                    _dt(r[9]),
                    datetime.fromisoformat(r[10]),
                    _dt(r[11]),
                    len(sources),
                    [x for x in sources if x],
                )
            )
        return out

    def _current_facts(self, s: SqlSession, eid: str, within: Sequence[Namespace], limit: int) -> builtins.list[Fact]:
        now = ts(self._mem._now())
        rows = db.facts_about(s, builtins.list(self._family(s, [eid])), within, now, limit)
        return self._facts(s, rows, None)

    def assert_fact(
        self,
        namespace: Any,
        subject: Any,
        predicate: Any,
        object: Any,  # noqa: A002 - the word of the domain
        *,
        valid_from: Any = None,
        valid_to: Any = None,
        source: Any = None,
        supersedes: Any = None,
        within: Sequence[Namespace] = ((),),
    ) -> Fact:
        """Assert ``subject predicate object``; a fact that already holds gains evidence instead."""
        ns = v.namespace(namespace)
        pred = _predicate(predicate)
        start = _time(valid_from, "valid_from")
        end = _time(valid_to, "valid_to")
        if start is not None and end is not None and end <= start:
            raise ValidationError("valid_to", "must be later than valid_from")
        src = "" if source is None else _name(source, "source")
        now = self._mem._now()
        with self._store.session(write=True) as s:
            subj = self._visible_entity(s, subject, "subject", within)
            if isinstance(object, str) and _ENTITY_ID.match(object):
                obj_entity: str | None = self._visible_entity(s, object, "object", within)
                obj_value = None
                key_object = obj_entity
            else:
                obj_entity = None
                obj_value, _ = v.value(object, "object")
                key_object = obj_value
            fact_key = hashlib.sha256(json.dumps([ns_text(ns), subj, pred, key_object]).encode()).hexdigest()[:32]
            db.lock_fact_key(s, fact_key)
            if supersedes is not None:
                self._close(s, supersedes, "supersedes", within, now)
            # the same fact may have been asserted about an entity since merged into this one: its key holds
            # the merged-away id, so match on what the key stands for, through every id of each family
            subjects = builtins.list(self._family(s, [subj]))
            objects = None if obj_entity is None else builtins.list(self._family(s, [obj_entity]))
            for row in db.open_facts(s, ns_text(ns), subjects, pred, objects, obj_value):
                if (start is None or _dt(row[8]) == start) and (end is None or _dt(row[9]) == end):
                    db.insert_evidence(s, row[0], src, ts(now), self._mem.author, if_absent=True)
                    return self._facts(s, db.latest_fact(s, row[0]), None)[0]
            names = db.entity_names(s, [subj, obj_entity or subj])
            shown = names[obj_entity] if obj_entity else (loads_json(obj_value) if obj_value else "")
            text = f"{names[subj]} {pred.replace('_', ' ')} {shown if isinstance(shown, str) else obj_value}"
            text = text.replace("\x00", " ")[:MAX_FACT_TEXT_CHARS]  # as an item's: text cannot hold NUL
            fid = _new_ids("fact", now)[0]
            self._insert_fact(s, fid, 1, ns, fact_key, subj, pred, obj_entity, obj_value, text, start, end, now)
            db.insert_evidence(s, fid, src, ts(now), self._mem.author)
            self._index_text(s, "fact", [(fid, ns_text(ns), text)])
            fact = self._facts(s, db.latest_fact(s, fid), None)[0]
        # the text depends on names read in the transaction, so its vector follows it;
        # a fact without one is still found by the lexical channel
        blobs = self._embed([text])
        if blobs is not None:
            with self._store.session(write=True) as s:
                self._insert_vectors(s, "fact", [fid], blobs)
        return fact

    def _insert_fact(
        self,
        s: SqlSession,
        fid: str,
        version: int,
        ns: Namespace,
        key: str,
        subj: str,
        pred: str,
        obj_entity: str | None,
        obj_value: str | None,
        text: str,
        start: datetime | None,
        end: datetime | None,
        now: datetime,
    ) -> None:
        db.insert_fact(
            s,
            fid,
            version,
            ns_text(ns),
            key,
            subj,
            pred,
            obj_entity,
            obj_value,
            text,
            None if start is None else ts(start),
            None if end is None else ts(end),
            ts(now),
            self._mem.author,
        )

    def _close(self, s: SqlSession, fact_id: Any, field: str, within: Sequence[Namespace], now: datetime) -> tuple:
        """Stamp the end of belief on a fact's current row; returns that row."""
        if not isinstance(fact_id, str) or not fact_id.startswith("fact_"):
            raise ValidationError(field, f"{fact_id!r} is not a fact id (fact_...)")
        rows = db.fact_versions(s, fact_id, within)
        if not rows:
            raise NotFoundError(f"no fact {fact_id!r} that you can see")
        if rows[0][11] is not None:
            raise ConflictError(
                f"fact {fact_id!r} was already retracted at {rows[0][11]}; assert it again to revive it"
            )
        db.retract(s, fact_id, rows[0][1], ts(now))
        return rows[0]

    def retract_fact(self, fact_id: Any, *, within: Sequence[Namespace] = ((),)) -> Fact:
        """End memlane's belief in a fact; it stays readable at earlier ``believed_at`` times."""
        now = self._mem._now()
        with self._store.session(write=True) as s:
            self._close(s, fact_id, "fact_id", within, now)
            return self._facts(s, db.latest_fact(s, fact_id), None)[0]

    def end_fact(self, fact_id: Any, valid_to: Any, *, within: Sequence[Namespace] = ((),)) -> Fact:
        """Record that a fact stopped being true in the world at ``valid_to`` (a new version)."""
        end = _time(valid_to, "valid_to")
        if end is None:
            raise ValidationError("valid_to", "is required: the time the fact stopped holding")
        now = self._mem._now()
        with self._store.session(write=True) as s:
            row = self._close(s, fact_id, "fact_id", within, now)
            start = _dt(row[8])
            if start is not None and end <= start:
                raise ValidationError("valid_to", f"must be later than the fact's valid_from ({row[8]})")
            key = db.fact_key(s, row[0], row[1])
            self._insert_fact(
                s, row[0], row[1] + 1, ns_tuple(row[2]), key, row[3], row[4], row[5], row[6], row[7], start, end, now
            )
            return self._facts(s, db.latest_fact(s, row[0]), None)[0]

    # -- documents and claims ----------------------------------------------------

    def add_document(
        self,
        namespace: Any,
        title: Any,
        text: Any,
        *,
        source: Any = None,
        created_at: Any = None,
        chunk_chars: Any = t.DEFAULT_CHUNK_CHARS,
    ) -> Document:
        """Store a source split into ordered chunks (a list of strings: one chunk each).

        Each chunk keeps its context (``text.context``: the title and the passages around it) in
        ``chunks.context``, indexed as a second, lower-weighted column; its vector is made from the title and
        the chunk (``text.embedded``).
        """
        ns = v.namespace(namespace)
        title = _name(title, "title")
        if isinstance(text, list):
            parts = [v.text(p, "text") if isinstance(p, str) else _name(p, "text") for p in text]
        elif isinstance(text, str):
            parts = v.text(text, "text")  # type: ignore[assignment]
        else:
            raise ValidationError("text", f"must be a string or a list of strings, not {type(text).__name__}")
        limit = v.limit(chunk_chars, "chunk_chars", maximum=MAX_CHUNK_CHARS, minimum=100)
        pieces = t.chunk(parts, limit)
        if not pieces:
            raise ValidationError("text", "has no words; a document needs at least one non-blank passage")
        src = _optional_name(source, "source")
        created = _time(created_at, "created_at")
        now = self._mem._now()
        contexts = [t.context(title, pieces, i) for i in range(len(pieces))]
        blobs = self._embed([t.embedded(p, c) for p, c in zip(pieces, contexts, strict=True)])
        did = _new_ids("doc", now)[0]
        chunk_ids = _new_ids("chunk", now, len(pieces))
        ns_t = ns_text(ns)
        with self._store.session(write=True) as s:
            db.insert_document(
                s,
                did,
                ns_t,
                title,
                src,
                None if created is None else ts(created),
                ts(now),
                len(pieces),
                self._mem.author,
            )
            rows = builtins.list(zip(chunk_ids, pieces, contexts, strict=True))
            db.insert_chunks(s, [(cid, did, ns_t, i, p, c) for i, (cid, p, c) in enumerate(rows)])
            index_chunks(s, [(cid, ns_t, p, c) for cid, p, c in rows])
            self._insert_vectors(s, "chunk", chunk_ids, blobs)
        return Document(did, ns, title, src, created, now, len(pieces), chunk_ids)

    def add_claim(
        self,
        namespace: Any,
        text: Any,
        *,
        speaker: Any = None,
        asserted_at: Any = None,
        chunk: Any = None,
        about: Any = (),
        within: Sequence[Namespace] = ((),),
    ) -> Claim:
        """Record what a source said: its text, who said it, when, from which chunk, about whom."""
        record = {"text": text, "speaker": speaker, "asserted_at": asserted_at, "chunk": chunk, "about": about}
        return self.add_claims(namespace, [record], within=within, fields=False)[0]

    def add_claims(
        self, namespace: Any, claims: Any, *, within: Sequence[Namespace] = ((),), fields: bool = True
    ) -> builtins.list[Claim]:
        """Record many claims in one transaction (one embedding batch): each a dict of ``add_claim``'s arguments."""
        ns = v.namespace(namespace)
        if isinstance(claims, str | bytes | Mapping) or not isinstance(claims, Iterable):
            raise ValidationError("claims", "must be a list of claim objects")
        checked = []
        for n, raw in enumerate(claims):
            where = f"claims[{n}]." if fields else ""
            if not isinstance(raw, Mapping):
                raise ValidationError("claims", f"item {n} is not an object with a text")
            unknown = set(raw) - {"text", "speaker", "asserted_at", "chunk", "about"}
            if unknown:
                raise ValidationError(f"{where}{sorted(unknown)[0]}", "is not a claim field (text, speaker, "
                                      "asserted_at, chunk, about)")  # fmt: skip
            checked.append(
                (
                    _matched_name(raw.get("text"), f"{where}text"),
                    _optional_name(raw.get("speaker"), f"{where}speaker"),
                    _time(raw.get("asserted_at"), f"{where}asserted_at"),
                    raw.get("chunk"),
                    _ids(raw.get("about") or [], f"{where}about", maximum=100),
                )
            )
        if len(checked) > MAX_BATCH:
            raise ValidationError("claims", f"has {len(checked):,} claims; at most {MAX_BATCH:,} per call")
        if not checked:
            return []
        now = self._mem._now()
        blobs = self._embed([c[0] for c in checked])
        ids = _new_ids("claim", now, len(checked))
        out: builtins.list[Claim] = []
        with self._store.session(write=True) as s:
            visible_chunk = db.chunk_finder(s, within)
            for n, (cid, (text, who, when, chunk, about_ids)) in enumerate(zip(ids, checked, strict=True)):
                entities = builtins.list(
                    dict.fromkeys(self._visible_entity(s, e, f"claims[{n}].about" if fields else "about", within)
                                  for e in about_ids)
                )  # fmt: skip
                if chunk is not None and (not _id_like(chunk) or not visible_chunk(chunk)):
                    raise NotFoundError(f"no chunk {chunk!r} that you can see; chunk ids come from add_document")
                out.append(Claim(cid, ns, text, who, when, chunk, entities, now))
            db.insert_claims(
                s,
                [
                    (c.id, ns_text(ns), c.text, t.normalise(c.text), c.speaker,
                     None if c.asserted_at is None else ts(c.asserted_at), c.chunk_id, ts(now), self._mem.author)
                    for c in out
                ],
            )  # fmt: skip
            db.insert_claim_entities(s, [(c.id, e) for c in out for e in c.about])
            self._index_text(s, "claim", [(c.id, ns_text(ns), c.text) for c in out])
            self._insert_vectors(s, "claim", ids, blobs)
        return out

    def supersede_claim(self, claim_id: Any, by: Any = None, *, within: Sequence[Namespace] = ((),)) -> Claim:
        """Mark a claim as no longer current testimony, optionally naming the claim that replaces it."""
        now = self._mem._now()
        with self._store.session(write=True) as s:
            claim = self._claims(s, [claim_id], within).get(claim_id) if _id_like(claim_id) else None
            if claim is None:
                raise NotFoundError(f"no claim {claim_id!r} that you can see")
            if claim.superseded_at is not None:
                raise ConflictError(f"claim {claim_id!r} was already superseded at {claim.superseded_at.isoformat()}")
            if by is not None and (not _id_like(by) or by == claim_id or by not in self._claims(s, [by], within)):
                raise NotFoundError(f"no other claim {by!r} that you can see to supersede {claim_id!r} with")
            db.supersede(s, claim_id, by, ts(now))
            return self._claims(s, [claim_id], within)[claim_id]

    def _claims(self, s: SqlSession, ids: Sequence[str], within: Sequence[Namespace]) -> dict[str, Claim]:
        rows = db.claim_rows(s, ids, within)
        about: dict[str, builtins.list[str]] = {r[0]: [] for r in rows}
        if rows:
            for cid, eid in db.claim_entities(s, builtins.list(about)):
                about[cid].append(eid)
        return {
            r[0]: Claim(
                r[0],
                ns_tuple(r[1]),
                r[2],
                r[3],
                _dt(r[4]),
                r[5],
                about[r[0]],
                datetime.fromisoformat(r[6]),
                r[7],
                _dt(r[8]),
            )
            for r in rows
        }

    def _chunks(self, s: SqlSession, ids: Sequence[str], within: Sequence[Namespace]) -> dict[str, Chunk]:
        rows = db.chunk_rows(s, ids, within)
        return {r[0]: Chunk(r[0], r[1], ns_tuple(r[2]), r[3], r[4], r[5]) for r in rows}

    def _documents(self, s: SqlSession, ids: Sequence[str], within: Sequence[Namespace]) -> dict[str, Document]:
        out = {}
        for r in db.document_rows(s, ids, within):
            chunk_ids = db.chunk_ids(s, r[0])
            out[r[0]] = Document(
                r[0], ns_tuple(r[1]), r[2], r[3], _dt(r[4]), datetime.fromisoformat(r[5]), r[6], chunk_ids
            )
        return out

    # -- primitives --------------------------------------------------------------

    def lookup(self, ids: Any, *, within: Sequence[Namespace], current: bool = False) -> builtins.list[Record | None]:
        """Records by id, any mix of kinds, in order; ``None`` for unknown or unseen ids.

        With ``current`` (the ``hydrate`` primitive) only what is current comes
        back: facts believed and valid now, claims not superseded.
        """
        wanted = _ids(ids, "ids", maximum=MAX_LOOKUP)
        by_kind: dict[str, builtins.list[str]] = {}
        for i in wanted:
            by_kind.setdefault(i.split("_", 1)[0], []).append(i)
        unknown = sorted(set(by_kind) - set(_PREFIXES))
        if unknown:
            raise ValidationError("ids", f"has ids of unknown kind {unknown}; ids start with {sorted(_PREFIXES)}")
        found: dict[str, Record] = {}
        now = ts(self._mem._now())
        with self._store.session() as s:
            if "ent" in by_kind:
                ents = self._entities(s, by_kind["ent"])
                visible = db.visible_entities(s, builtins.list(ents), within) if ents else set()
                found.update((i, e) for i, e in ents.items() if i in visible and not (current and e.merged_into))
            if "fact" in by_kind:
                if current:
                    rows = db.current_facts(s, by_kind["fact"], within, now)
                else:
                    rows = db.latest_facts(s, by_kind["fact"], within)
                found.update((f.id, f) for f in self._facts(s, rows, None))
            if "claim" in by_kind:
                claims = self._claims(s, by_kind["claim"], within)
                found.update((i, c) for i, c in claims.items() if not (current and c.superseded_at))
            if "chunk" in by_kind:
                found.update(self._chunks(s, by_kind["chunk"], within))
            if "doc" in by_kind:
                found.update(self._documents(s, by_kind["doc"], within))
        return [found.get(i) for i in wanted]

    def neighbours(
        self, chunk_id: Any, before: Any = 1, after: Any = 1, *, within: Sequence[Namespace]
    ) -> builtins.list[Chunk]:
        """A chunk with up to ``before`` chunks ahead of it and ``after`` behind, in document order."""
        before = v.limit(before, "before", maximum=50, minimum=0)
        after = v.limit(after, "after", maximum=50, minimum=0)
        with self._store.session() as s:
            centre = self._chunks(s, [chunk_id], within).get(chunk_id) if _id_like(chunk_id) else None
            if centre is None:
                raise NotFoundError(f"no chunk {chunk_id!r} that you can see")
            ids = db.chunks_between(s, centre.document_id, centre.position - before, centre.position + after)
            chunks = self._chunks(s, ids, within)
        return [chunks[i] for i in ids]

    def _edges(self, s: SqlSession, nodes: Sequence[str], within: Sequence[Namespace], at: At) -> builtins.list[tuple]:
        """Entity-to-entity fact rows touching ``nodes``, as believed at ``at`` (validity not applied)."""
        return db.edges(s, nodes, within, at.believed)

    def traverse(
        self, entity_ids: Any, *, hops: Any = 2, time: Any = "current", within: Sequence[Namespace]
    ) -> Context:
        """Paths of entity-to-entity facts from the given entities, whole or not at all.

        A path is kept only if every edge on it holds at the requested valid
        time; a path with a broken edge is dropped and counted in
        ``dropped["broken_paths"]``, never cut short.
        """
        started = perf_counter()
        starts = _ids(entity_ids, "entity_ids", maximum=MAX_ENTITY_IDS, kind="ent")
        if not starts:
            raise ValidationError("entity_ids", "must name at least one entity")
        hops = v.limit(hops, "hops", maximum=MAX_HOPS)
        at = parse_time(time, self._mem._now())
        paths: builtins.list[Path] = []
        broken = 0
        truncated = False
        with self._store.session() as s:
            survivors = [self._visible_entity(s, e, "entity_ids", within) for e in starts]
            family = self._family(s, survivors)
            frontier: builtins.list[tuple[builtins.list[str], builtins.list[tuple]]] = [
                ([sid], []) for sid in survivors
            ]
            found: builtins.list[tuple[builtins.list[str], builtins.list[tuple]]] = []
            for _ in range(hops):
                ends = {p[-1] for p, _ in frontier}
                members = [m for m, sid in family.items() if sid in ends]
                edges = self._edges(s, members or builtins.list(ends), within, at)
                ends_of = self._survivors(s, {x for e in edges for x in (e[3], e[5])})
                family = {**family, **self._family(s, set(ends_of.values()))}
                step = []
                for nodes, facts in frontier:
                    for e in edges:
                        a, b = family.get(e[3], e[3]), family.get(e[5], e[5])
                        if nodes[-1] not in (a, b):
                            continue
                        other = b if a == nodes[-1] else a
                        if other in nodes:
                            continue
                        step.append((nodes + [other], facts + [e]))
                found.extend(step)
                frontier = step
                if len(found) > MAX_PATHS:
                    truncated = True
                    break
            for nodes, facts in found[:MAX_PATHS]:
                if all(_holds(f, at.valid) for f in facts):
                    records = self._facts(s, facts, at.believed)
                    names = self._entities(s, nodes)
                    paths.append(Path(nodes, [names[n].name if n in names else "" for n in nodes], records))
                else:
                    broken += 1
        return Context(
            "traverse",
            {"entity_ids": starts, "hops": hops, **at.params()},
            {"paths": paths},
            counts={"paths": len(paths)},
            dropped={"broken_paths": broken},
            truncated=["paths"] if truncated else [],
            timings={"total_ms": _ms(started)},
            notes=[f"{broken} path(s) dropped: an edge on them does not hold at the requested time"] if broken else [],
        )

    # -- ranked reads ----------------------------------------------------------

    def _query_vector(self, query: str) -> builtins.list[float]:
        # one embedding per question, however many runs of one read use it
        if query not in self._query_vectors:
            self._query_vectors[query] = self._mem._embed_query(query)
        return self._query_vectors[query]

    def _nominate(
        self,
        s: SqlSession,
        kind: str,
        query: str,
        within: Sequence[Namespace],
        k: int,
        restrict: db.Narrowing | None,
        current_only: bool = False,
    ) -> tuple[dict[str, builtins.list[tuple[str, float]]], builtins.list[str]]:
        """Per-channel candidates for one kind of text.

        ``restrict`` (from :mod:`memlane.store.facts`: ``among``, ``claims_about``,
        ``passages_about``) narrows both channels; ``current_only`` (claims not
        superseded) narrows the index scan, while the vector channel leaves it
        to the confirm step.
        """
        nominations: dict[str, builtins.list[tuple[str, float]]] = {}
        notes: builtins.list[str] = []
        words = rank.terms(query)
        if words:
            nominations["lexical"] = db.lexical(s, kind, words, within, k, restrict, current_only)
        else:
            notes.append("the query has no searchable words")
        embedder = self._mem.embedder
        if embedder is not None and query.strip():
            index = self._vectors(kind)
            with index.lock:
                index.refresh(s, kind, embedder.dimension)
                allowed = db.allowed(s, kind, within, restrict)
                nominations["vector"] = index.top(self._query_vector(query), allowed, k)
        return nominations, notes

    def facts_context(
        self,
        query: Any,
        *,
        entity_ids: Any = None,
        hops: Any = 1,
        predicate: Any = None,
        time: Any = "current",
        limit: Any = 20,
        within: Sequence[Namespace],
    ) -> Context:
        """What is true: facts holding at ``time``, searched inside the entities' neighbourhood."""
        started = perf_counter()
        query = v.query(query)
        ids = None if entity_ids is None else _ids(entity_ids, "entity_ids", maximum=MAX_ENTITY_IDS, kind="ent")
        hops = v.limit(hops, "hops", maximum=MAX_HOPS, minimum=0)
        pred = None if predicate is None else _predicate(predicate)
        limit = v.limit(limit, "limit", maximum=MAX_K)
        at = parse_time(time, self._mem._now())
        if not ids and not query.strip():
            raise ValidationError("query", "is empty; give a query, entity_ids, or both")
        counts: dict[str, int] = {}
        notes: builtins.list[str] = []
        truncated: builtins.list[str] = []
        with self._store.session() as s:
            family: dict[str, str] = {}
            reached: dict[str, int] = {}
            entities: builtins.list[str] | None = None  # the neighbourhood's, when there is one

            def holding(**narrowed: Any) -> builtins.list[tuple]:
                """Rows of the facts that hold at ``at`` in the scope, of ``pred`` and the neighbourhood."""
                return db.holding_facts(s, within, at.believed, at.valid, pred, entities, **narrowed)

            if ids:
                survivors = [self._visible_entity(s, e, "entity_ids", within) for e in ids]
                reached = self._neighbourhood(s, survivors, hops, within, at)
                counts["neighbourhood"] = len(reached)
                if len(reached) >= MAX_NEIGHBOURHOOD:
                    truncated.append("neighbourhood")
                family = self._family(s, reached)
                entities = builtins.list(family)
            kept: builtins.list[tuple[tuple, Any]] = []
            dropped = 0
            if query.strip() and rank.terms(query):
                # nominate inside the neighbourhood when there is one, then keep
                # only candidates whose row holds at the requested time
                area = holding() if ids or pred is not None else None
                # a small area is searched inside; a large one (more ids than a statement
                # should carry) is searched whole and filtered by the confirm step below
                restrict = None if area is None or len(area) > MAX_AREA else db.among([r[0] for r in area])
                nominations, more = self._nominate(s, "fact", query, within, 4 * MAX_K, restrict)
                notes.extend(more)
                fused = rank.fuse(nominations, rrf_k=_RRF_K, weights=_WEIGHTS)
                counts.update({ch: len(n) for ch, n in nominations.items()})
                held = {r[0]: r for r in holding(ids=[c.ref for c in fused])}
                kept = [(held[c.ref], c) for c in fused if c.ref in held]
                dropped = len(fused) - len(kept)
                counts["matched"] = len(kept)
            if ids:
                # the neighbourhood is the context: facts the query did not match
                # follow the matched ones, nearest entities first, newest first
                seen = {row[0] for row, _ in kept}
                rest = [r for r in holding(newest_first=True) if r[0] not in seen]

                def distance(r: tuple) -> int:
                    ends = [family.get(r[3], r[3]), family.get(r[5], r[5]) if r[5] else None]
                    return min(reached.get(e, hops + 1) for e in ends if e is not None)

                kept += [(r, None) for r in sorted(rest, key=distance)]
            elif not kept and not (query.strip() and rank.terms(query)):
                kept = [(r, None) for r in holding(newest_first=True, limit=limit + 1)]
            if len(kept) > limit:
                truncated.append("facts")
            kept = kept[:limit]
            facts = self._facts(s, [r for r, _ in kept], at.believed)
            for fact, (_, cand) in zip(facts, kept, strict=True):
                if cand is not None:
                    fact.score, fact.ranks = round(cand.score, 10), cand.ranks
        counts["facts"] = len(facts)
        return Context(
            "facts_context",
            {"query": query, "entity_ids": ids, "hops": hops, "predicate": pred, "limit": limit, **at.params()},
            {"facts": facts},
            counts=counts,
            dropped={"not_holding": dropped},
            truncated=truncated,
            timings={"total_ms": _ms(started)},
            notes=notes,
        )

    def _neighbourhood(
        self, s: SqlSession, starts: Sequence[str], hops: int, within: Sequence[Namespace], at: At
    ) -> dict[str, int]:
        """Entities within ``hops`` edges of ``starts`` over facts that hold at ``at``, with their distance."""
        reached = dict.fromkeys(starts, 0)
        frontier = builtins.list(starts)
        for distance in range(1, hops + 1):
            if not frontier or len(reached) >= MAX_NEIGHBOURHOOD:
                break
            family = self._family(s, frontier)
            edges = [e for e in self._edges(s, builtins.list(family), within, at) if _holds(e, at.valid)]
            ends = self._survivors(s, {x for e in edges for x in (e[3], e[5])})
            frontier = [sid for sid in dict.fromkeys(ends.values()) if sid not in reached]
            for sid in frontier[: MAX_NEIGHBOURHOOD - len(reached)]:
                reached[sid] = distance
        return reached

    def claims_and_sources_context(
        self,
        query: Any,
        *,
        entity_ids: Any = None,
        k: Any = 50,
        candidate_k: Any = 200,
        within: Sequence[Namespace],
    ) -> Context:
        """What was said: current claims grouped by what they say, and passages, each from its own run."""
        started = perf_counter()
        query = v.query(query)
        if not query.strip():
            raise ValidationError("query", "is empty; say what to look for")
        ids = None if entity_ids is None else _ids(entity_ids, "entity_ids", maximum=MAX_ENTITY_IDS, kind="ent")
        k = v.limit(k, "k", maximum=MAX_K)
        candidate_k = v.limit(candidate_k, "candidate_k", maximum=MAX_CANDIDATE_K)
        counts: dict[str, int] = {}
        dropped: dict[str, int] = {}
        truncated: builtins.list[str] = []
        notes: builtins.list[str] = []
        timings: dict[str, float] = {}
        with self._store.session() as s:
            claim_filter = chunk_filter = None
            if ids:
                survivors = [self._visible_entity(s, e, "entity_ids", within) for e in ids]
                members = builtins.list(self._family(s, survivors))
                claim_filter = db.claims_about(members)
                # the sources about the entities: every passage of a document that a
                # current claim about them cites (not only the cited passages, which
                # would hide the rest of a conversation or report)
                chunk_filter = db.passages_about(members)
            t0 = perf_counter()
            nominations, more = self._nominate(s, "claim", query, within, candidate_k, claim_filter, current_only=True)
            notes.extend(more)
            fused = rank.fuse(nominations, rrf_k=_RRF_K, weights=_WEIGHTS)
            counts.update({f"claims_{ch}": len(n) for ch, n in nominations.items()})
            live = db.current_claim_norms(s, [c.ref for c in fused], within)
            confirmed = [(live[c.ref], c) for c in fused if c.ref in live]
            dropped["claims"] = len(fused) - len(confirmed)
            groups = self._group(s, confirmed, within, k)
            if len(groups) > k:
                truncated.append("claims")
            groups = groups[:k]
            timings["claims_ms"] = _ms(t0)
            t0 = perf_counter()
            nominations, more = self._nominate(s, "chunk", query, within, candidate_k, chunk_filter)
            fused = rank.fuse(nominations, rrf_k=_RRF_K, weights=_WEIGHTS)
            counts.update({f"passages_{ch}": len(n) for ch, n in nominations.items()})
            # confirm best first, a page at a time, until k + 1 passages stand
            passages: builtins.list[Chunk] = []
            pos = dropped["passages"] = 0
            while pos < len(fused) and len(passages) <= k:
                page = fused[pos : pos + max(k + 1 - len(passages), 8)]
                pos += len(page)
                chunks = self._chunks(s, [c.ref for c in page], within)
                for c in page:
                    chunk = chunks.get(c.ref)
                    if chunk is None:
                        dropped["passages"] += 1
                        continue
                    chunk.score, chunk.ranks = round(c.score, 10), c.ranks
                    passages.append(chunk)
            if len(passages) > k:
                truncated.append("passages")
            passages = passages[:k]
            timings["passages_ms"] = _ms(t0)
        if ids and not passages:
            notes.append("no document is cited by a current claim about these entities")
        counts.update(claims=len(groups), passages=len(passages))
        timings["total_ms"] = _ms(started)
        return Context(
            "claims_and_sources_context",
            {"query": query, "entity_ids": ids, "k": k, "candidate_k": candidate_k},
            {"claims": groups, "passages": passages},
            counts=counts,
            dropped=dropped,
            truncated=truncated,
            timings=timings,
            notes=notes,
        )

    def _group(
        self, s: SqlSession, confirmed: Sequence[tuple[str, Any]], within: Sequence[Namespace], k: int
    ) -> builtins.list[ClaimGroup]:
        """Claims that say the same thing (same stored normalised text), best first, each with all its members.

        ``confirmed`` is ``(norm, candidate)`` best first; only the first
        ``k + 1`` groups are read in full (the extra one tells truncation).
        """
        order: dict[str, Any] = {}
        for norm, cand in confirmed:
            if norm not in order:
                order[norm] = cand
                if len(order) > k:
                    break
        if not order:
            return []
        rows = db.current_claims_saying(s, builtins.list(order), within)
        members: dict[str, builtins.list[str]] = {n: [] for n in order}
        for cid, norm in rows:
            members[norm].append(cid)
        claims = self._claims(s, [r[0] for r in rows], within)
        groups = []
        for norm, cand in order.items():
            group = [claims[i] for i in members[norm] if i in claims]
            if not group:  # defensive: every norm came from a confirmed live claim
                continue
            sources = {c.chunk_id or c.id for c in group}
            groups.append(ClaimGroup(group[0].text, len(sources), group, round(cand.score, 10), cand.ranks))
        return groups

    def combined_context(
        self,
        query: Any,
        *,
        entity_ids: Any = None,
        hops: Any = 1,
        predicate: Any = None,
        time: Any = "current",
        k: Any = 50,
        within: Sequence[Namespace],
    ) -> Context:
        """Facts and claims-with-sources for one question, run independently, side by side."""
        started = perf_counter()
        facts = self.facts_context(
            query,
            entity_ids=entity_ids,
            hops=hops,
            predicate=predicate,
            time=time,
            limit=v.limit(k, "k", maximum=MAX_K),
            within=within,
        )
        said = self.claims_and_sources_context(query, entity_ids=entity_ids, k=k, within=within)
        return Context(
            "combined_context",
            {**facts.params, "k": said.params["k"]},
            {"facts": facts["facts"], "claims": said["claims"], "passages": said["passages"]},
            counts={**{f"facts_{n}": c for n, c in facts.counts.items()}, **said.counts},
            dropped={**{f"facts_{n}": c for n, c in facts.dropped.items()}, **said.dropped},
            truncated=[*facts.truncated, *said.truncated],
            timings={
                "facts_ms": facts.timings["total_ms"],
                "claims_and_sources_ms": said.timings["total_ms"],
                "total_ms": _ms(started),
            },
            notes=[*facts.notes, *said.notes],
        )


def _holds(row: Sequence[Any], valid: str) -> bool:
    """Whether a fact row is valid in the world at ``valid``."""
    return (row[8] is None or row[8] <= valid) and (row[9] is None or row[9] > valid)
