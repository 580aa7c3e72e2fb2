"""memlane as a LangGraph store: ``MemlaneStore`` and ``AsyncMemlaneStore`` (``pip install 'memlane[langgraph]'``).

A thin adapter: every LangGraph operation becomes calls to one
:class:`~memlane.core.memory.Memory` (or a :class:`~memlane.client.Client` talking to
a ``memlane serve``), so the graph's memories are ordinary memlane items with
history, search, rooms and the query space around them.

- ``GetOp`` runs of consecutive gets are one ``get_many``; ``PutOp`` runs are one
  ``put_many`` transaction (``value=None`` deletes); ``SearchOp`` without a query
  is one ``select`` (the filter evaluated in SQL, newest first), with a query a
  ranked ``search``; ``ListNamespacesOp`` reads ``namespaces``.
- Namespaces and keys LangGraph allows but memlane's own rules refuse are stored
  under a reversible encoding (:func:`encode_namespace`, :func:`encode_key`):
  ``%``, ``/`` and control characters are percent-escaped, dots a key cannot
  start, end or double are escaped, labels past the seventh are packed into the
  eighth segment joined by ``%|``. Ordinary names are stored unchanged.

See docs/langgraph.md.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import contextlib
import functools
import logging
import math
import re
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, ClassVar

try:  # first: without the extra, one line naming it, before anything else fails on a bare import
    import numpy as np
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
    )
    from langgraph.store.base.embed import get_text_at_path
except ImportError as e:  # pragma: no cover - the langgraph extra
    raise ImportError(
        f"memlane.langgraph needs LangGraph and numpy ({e}): pip install 'memlane[langgraph]'", name=e.name
    ) from e

from .domain.search.embedders import Embedder, resolve_embedder
from .store.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from .values import validate as v
from .values import where as w
from .values.errors import ValidationError
from .values.model import Item as MemlaneItem
from .values.vectors import normalise

__all__ = [
    "AsyncMemlaneStore",
    "MemlaneSearchItem",
    "MemlaneStore",
    "decode_key",
    "decode_namespace",
    "encode_key",
    "encode_namespace",
]

logger = logging.getLogger(__name__)

TTL_FIELD = "langgraph_ttl_minutes"  # in an item's metadata: the TTL a read refreshes
FIELDS_FIELD = "langgraph_index"  # in an item's metadata: the paths a put's own index=[...] indexed
PACK = "%|"  # joins the labels past the seventh inside the eighth segment; escaping never makes it
EMPTY_KEY = "%!"  # the empty key; escaping never makes it either
_UNSAFE = re.compile(r"[%/\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_ESCAPED = re.compile(r"%u([0-9A-F]{4})|%([0-9A-F]{2})")
_LABELS_KEPT = v.MAX_SEGMENTS - 1
# a query's ranked candidates a filter is then applied to: this many times the page, at least 50, and this
# many times more while the filtered page is not full, up to the most hits one memlane search returns
FILTER_OVERFETCH = 4
MAX_FETCH = 1000


# -- the reversible encoding ----------------------------------------------------------------------


def _escape_char(ch: str) -> str:
    code = ord(ch)
    return f"%{code:02X}" if code < 0x100 else f"%u{code:04X}"


def _escape(text: str) -> str:
    return _UNSAFE.sub(lambda m: _escape_char(m.group()), text)


def _unescape(text: str) -> str:
    return _ESCAPED.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), text)


def _label(label: str, first: bool) -> str:
    text = _escape(label)
    if first and text == v.RESERVED:  # memlane keeps this root for itself
        text = "%5F" + text[1:]
    return text


@functools.lru_cache(maxsize=4096)
def encode_namespace(namespace: tuple[str, ...]) -> tuple[str, ...]:
    """A LangGraph namespace as memlane segments: escaped labels; labels past the seventh packed into the eighth.

    Ordinary labels (no ``%``, ``/`` or control characters) are stored as they are.
    """
    labels = [_label(label, i == 0) for i, label in enumerate(namespace)]
    if len(labels) <= v.MAX_SEGMENTS:
        return tuple(labels)
    return (*labels[:_LABELS_KEPT], PACK.join(labels[_LABELS_KEPT:]))


@functools.lru_cache(maxsize=4096)
def decode_namespace(segments: tuple[str, ...]) -> tuple[str, ...]:
    """The LangGraph namespace :func:`encode_namespace` stored as ``segments``."""
    parts = list(segments[:_LABELS_KEPT])
    if len(segments) > _LABELS_KEPT:
        parts += segments[_LABELS_KEPT].split(PACK)
    return tuple(_unescape(p) for p in parts)


@functools.lru_cache(maxsize=16384)
def encode_key(key: str) -> str:
    """A LangGraph key as a memlane key: ``%`` and control characters escaped, and the dots memlane's taxonomy
    refuses (leading, trailing, doubled); ``""`` is ``%!``."""
    if key == "":
        return EMPTY_KEY
    text = _escape(key)
    if "." in text and (text[0] == "." or text[-1] == "." or ".." in text):
        chars = list(text)
        for i, ch in enumerate(chars):
            if ch == "." and (i == 0 or i == len(chars) - 1 or text[i - 1] == "." or text[i + 1] == "."):
                chars[i] = "%2E"
        text = "".join(chars)
    return text


@functools.lru_cache(maxsize=16384)
def decode_key(key: str) -> str:
    """The LangGraph key :func:`encode_key` stored as ``key``."""
    return "" if key == EMPTY_KEY else _unescape(key)


def _validate_labels(namespace: Sequence[str]) -> None:
    """LangGraph's own label rules, for ops given to ``batch`` directly (``BaseStore`` methods check them first)."""
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(f"Namespace labels must be strings, got {type(label).__name__} in {namespace}")
        if not label:
            raise InvalidNamespaceError(f"Namespace labels cannot be empty strings. Got {namespace}")
        if "." in label or "\x00" in label:
            raise InvalidNamespaceError(f"Namespace labels cannot contain periods or NUL bytes. Got {namespace}")


# -- search results ----------------------------------------------------------------------------------


class MemlaneSearchItem(SearchItem):
    """A LangGraph ``SearchItem`` that also carries memlane's per-channel ranks and raw scores.

    ``score`` is what LangGraph defines: the vector similarity when the search was
    semantic (``None`` for a search without a query). ``ranks`` and
    ``channel_scores`` are memlane's view of the same hit (see :class:`memlane.Hit`).
    """

    __slots__ = ("channel_scores", "ranks")

    def __init__(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        created_at: datetime,
        updated_at: datetime,
        score: float | None = None,
        ranks: dict[str, int] | None = None,
        channel_scores: dict[str, float] | None = None,
    ) -> None:
        super().__init__(namespace, key, value, created_at, updated_at, score)
        self.ranks = ranks or {}
        self.channel_scores = channel_scores or {}


# -- embeddings ---------------------------------------------------------------------------------------


class LangChainEmbedder:
    """A LangChain ``Embeddings`` (or a plain function of texts) as a memlane embedder."""

    def __init__(self, embeddings: Any, dimension: int, name: str) -> None:
        self.embeddings = embeddings
        self.dimension = dimension
        self.name = name

    def embed_batch(self, texts: Sequence[str]) -> builtins.list[builtins.list[float]]:
        if not texts:
            return []
        return [[float(x) for x in vec] for vec in self.embeddings.embed_documents(list(texts))]


def embedder_for(index: IndexConfig) -> Embedder | None:
    """The memlane embedder an index config's ``embed`` names: a LangChain ``Embeddings``, a function of a list of
    texts, or a memlane embedder name (``"minilm"``, ``"fake"``, ``"openai:<model>"``)."""
    embed = index.get("embed")
    dims = index.get("dims")
    if embed is None:
        return None
    if isinstance(embed, str):
        embedder = resolve_embedder(embed)
    else:
        if dims is None:
            raise ValueError("index config: give 'dims' with an Embeddings object or function")
        from langgraph.store.base.embed import ensure_embeddings

        embeddings = ensure_embeddings(embed)
        label = getattr(embed, "__qualname__", None) or type(embed).__name__
        embedder = LangChainEmbedder(embeddings, int(dims), f"langgraph:{label}:{dims}")
    if embedder is not None and dims is not None and embedder.dimension != dims:
        raise ValueError(f"index config: dims is {dims} but embedder {embedder.name!r} makes {embedder.dimension}")
    return embedder


class MemlaneEmbeddings:
    """A memlane embedder seen as a LangChain ``Embeddings`` (the store's ``embeddings`` for a named embedder)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def embed_documents(self, texts: builtins.list[str]) -> builtins.list[builtins.list[float]]:
        return [[float(x) for x in vec] for vec in self.embedder.embed_batch(list(texts))]

    def embed_query(self, text: str) -> builtins.list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: builtins.list[str]) -> builtins.list[builtins.list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> builtins.list[float]:
        return await asyncio.to_thread(self.embed_query, text)


def _embeddings(index: IndexConfig | None, memory: Any) -> Any:
    """What LangGraph's stores call ``embeddings``: the index config's ``embed`` as a LangChain ``Embeddings``."""
    if not index:
        return None
    embed = index.get("embed")
    if embed is not None and not isinstance(embed, str):
        from langgraph.store.base.embed import ensure_embeddings

        return ensure_embeddings(embed)
    embedder = getattr(memory, "embedder", None)  # a Client embeds on the service: none here
    if embedder is None and isinstance(embed, str):
        embedder = resolve_embedder(embed)
    return None if embedder is None else MemlaneEmbeddings(embedder)


def _index_fields(index: IndexConfig | None) -> builtins.list[str]:
    """The JSON paths an index config embeds: ``fields`` (LangGraph's ``IndexConfig``), else ``text_fields``
    (its ``SqliteStore``'s name for them), else the whole value."""
    raw = (index or {}).get("fields") or (index or {}).get("text_fields") or ["$"]  # type: ignore[misc]
    if isinstance(raw, str):
        return [raw]
    if not isinstance(raw, list | tuple):
        raise ValueError(f"index config: fields must be a list of JSON paths or one path, not {raw!r}")
    return list(raw)


# -- filters: LangGraph's semantics on top of memlane's where -------------------------------------------


def _filter_paths(raw: Any, at: str = "") -> Iterator[tuple[str, str, Any]]:
    """``(dotted path, operator, operand)`` for every condition of a LangGraph filter, as memlane reads it."""
    for name, want in raw.items():
        path = f"{at}.{name}" if at and isinstance(name, str) else name
        if isinstance(want, dict) and want and not any(isinstance(k, str) and k.startswith("$") for k in want):
            yield from _filter_paths(want, path)
        elif isinstance(want, dict) and want:
            for op, operand in want.items():
                yield path, op, operand
        elif isinstance(want, dict):
            yield path, "", want  # an empty object: memlane's where says how to match one
        else:
            yield path, "$eq", want


def _sql_can_carry(operand: Any) -> bool:
    """Whether memlane's SQL filters take this operand: JSON without NUL characters or non-finite numbers."""
    if isinstance(operand, str):
        return "\x00" not in operand
    if isinstance(operand, bool) or operand is None:
        return True
    if isinstance(operand, int | float):
        try:
            return math.isfinite(operand)
        except OverflowError:  # an integer no double can hold
            return False
    if isinstance(operand, list | tuple):
        return all(_sql_can_carry(x) for x in operand)
    if isinstance(operand, dict):
        return all(_sql_can_carry(x) for x in operand.values())
    return True  # not JSON: memlane's own validation names it


def split_filter(raw: Any) -> tuple[dict[str, Any] | None, builtins.list[w.Condition]]:
    """A LangGraph filter as ``(where for memlane's SQL, conditions checked in Python)``, on the value
    (``value.<path>``: a field named ``author`` or ``created_at`` stays the value's).

    LangGraph's stores compare any value a filter holds: ``{"$lt": float("inf")}`` matches every
    finite number, a NaN or a string with a NUL character matches nothing (``$ne``: everything).
    memlane's ``where`` refuses such operands (its SQL cannot carry them), so the adapter checks
    those conditions on the rows instead, with the same rule (:func:`memlane.values.where.holds`). A field
    path memlane refuses raises ``ValidationError`` (a ``ValueError``) saying "Invalid filter key",
    as LangGraph's stores do.
    """
    if raw is None:
        return None, []
    if not isinstance(raw, dict):
        return raw, []  # memlane's validation names the problem
    sql: dict[str, dict[str, Any]] = {}
    python: builtins.list[w.Condition] = []
    for path, op, operand in _filter_paths(raw):
        # LangGraph filters the value: ``value.`` keeps a field named author, metadata or created_at on it
        named = f"value.{path}" if isinstance(path, str) and path else path
        try:
            w.conditions({named: None}, "filter")  # the path alone
        except ValidationError as e:
            reason = str(e).split(": ", 1)[-1].replace("'value.", "'")
            raise ValidationError("filter", f"Invalid filter key {path!r}: {reason}") from None
        comparable = op in ("$eq", "$ne") or (isinstance(operand, int | float | str) and not isinstance(operand, bool))
        if op in w.OPERATORS and comparable and not _sql_can_carry(operand):
            python.append((("value", *path.split(".")), op, operand))
        elif not op:
            sql[named] = operand
        else:
            sql.setdefault(named, {})[op] = operand
    return (sql or None), python


# -- the adapter ---------------------------------------------------------------------------------------


class _Adapter:
    """What both stores share: the mapping from LangGraph ops to memory calls (sync; the async store threads it)."""

    supports_ttl = True

    def __init__(
        self,
        memory: Any,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        channels: Sequence[str] | None = None,
    ) -> None:
        """
        Args:
            memory: a :class:`memlane.Memory` or a :class:`memlane.Client`.
            index: LangGraph's index config: ``fields`` (JSON paths, default ``["$"]``, the whole value) decide
                the text memlane indexes; ``embed``/``dims`` are used by ``from_conn_string`` (a memory or
                service you pass makes vectors with its own embedder).
            ttl: LangGraph's TTL config (``default_ttl`` minutes, ``refresh_on_read``, ``sweep_interval_minutes``).
            channels: memlane channels a query searches; default ``("vector",)`` with an index config
                (``score`` is the similarity, as LangGraph's), else ``("lexical",)``. ``("lexical", "vector")``
                is memlane's hybrid ranking.
        """
        self.memory = memory
        self.index_config = index
        self.ttl_config = ttl
        self._fields = _index_fields(index)
        # LangGraph's stores expose the index config's embed as a LangChain Embeddings
        self.embeddings = _embeddings(index, memory)
        self._field_vectors: dict[str, np.ndarray] = {}  # text -> unit vector, for _best_field_scores
        self._channels = tuple(channels) if channels else (("vector",) if index else ("lexical",))
        self._owns = False  # from_conn_string's stores close the memory they opened
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    # -- ops ------------------------------------------------------------------------------------------

    def _batch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        ops = list(ops)
        results: builtins.list[Result] = [None] * len(ops)
        i = 0
        while i < len(ops):
            j = i
            kind = type(ops[i])
            while j < len(ops) and type(ops[j]) is kind and kind in (GetOp, PutOp):
                j += 1
            j = max(j, i + 1)
            run = ops[i:j]
            for op in run:
                self._check(op)
            if kind is GetOp:
                results[i:j] = self._get(run)  # type: ignore[arg-type]
            elif kind is PutOp:
                self._put(run)  # type: ignore[arg-type]
            elif kind is SearchOp:
                results[i] = self._search(run[0])  # type: ignore[arg-type]
            elif kind is ListNamespacesOp:
                results[i] = self._list_namespaces(run[0])  # type: ignore[arg-type]
            else:
                raise ValueError(f"unknown operation {kind.__name__}")
            i = j
        return results

    @staticmethod
    def _check(op: Op) -> None:
        if isinstance(op, GetOp | PutOp):
            _validate_labels(op.namespace)
        elif isinstance(op, SearchOp):
            _validate_labels(op.namespace_prefix)
        elif isinstance(op, ListNamespacesOp):
            for condition in op.match_conditions or ():
                _validate_labels([label for label in condition.path if label != "*"])

    def _get(self, ops: Sequence[GetOp]) -> builtins.list[Item | None]:
        if len(ops) == 1:  # the common case: memlane's point lookup is cheaper than a one-address get_many
            found = [self.memory.get(encode_namespace(tuple(ops[0].namespace)), encode_key(ops[0].key))]
        else:
            found = self.memory.get_many([(encode_namespace(tuple(op.namespace)), encode_key(op.key)) for op in ops])
        self._refresh([item for op, item in zip(ops, found, strict=True) if item is not None and self._refreshes(op)])
        return [None if item is None else _item(item) for item in found]

    def _put(self, ops: Sequence[PutOp]) -> None:
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:  # the last write to an address wins, as in LangGraph's stores
            address = (encode_namespace(tuple(op.namespace)), encode_key(op.key))
            last.pop(address, None)
            last[address] = op
        records = []
        for (namespace, key), op in last.items():
            if op.value is None:
                self.memory.delete(namespace, key)
                continue
            minutes = op.ttl
            records.append(
                {
                    "namespace": namespace,
                    "key": key,
                    "value": op.value,
                    "text": self._text(op.value, op.index),
                    "metadata": self._metadata(minutes, op.index),
                    "ttl": None if minutes is None else minutes * 60,
                    # index=False is memlane's opt-out (no full text, no vector, no search hit); as in LangGraph,
                    # a store without an index config ignores it
                    "index": self.index_config is None or op.index is not False,
                }
            )
        if records:
            self.memory.put_many(records)

    def _metadata(self, minutes: float | None, index: Any) -> dict[str, Any] | None:
        """What an item's metadata keeps for the adapter: its TTL (a read refreshes it) and its own index paths."""
        kept: dict[str, Any] = {}
        if minutes is not None:
            kept[TTL_FIELD] = minutes
        if self.index_config is not None and isinstance(index, list | tuple):
            kept[FIELDS_FIELD] = list(index)
        return kept or None

    def _text(self, value: Any, index: Any) -> str | None:
        """What memlane indexes for a value: the configured fields' text (``index=False``: nothing is indexed)."""
        if self.index_config is None or index is False:
            return None  # without an index config memlane indexes the value's JSON; with index=False, nothing
        fields = self._fields if index is None else list(index)
        texts = [text for field in fields for text in get_text_at_path(value, field)]
        return "\n".join(texts)

    def _refreshes(self, op: GetOp | SearchOp) -> bool:
        """Whether a read restarts the TTL of what it returns: asked for (LangGraph's ``refresh_ttl``, which
        ``BaseStore`` defaults to True) and allowed by the TTL config's ``refresh_on_read``, as in LangGraph's
        ``SqliteStore``."""
        return bool(op.refresh_ttl and (self.ttl_config or {}).get("refresh_on_read", False))

    def _refresh(self, items: Sequence[MemlaneItem]) -> None:
        """Restart the TTL of items read with refresh: a rewrite of the same value (memlane has no touch)."""
        records = [
            {
                "namespace": item.namespace,
                "key": item.key,
                "value": item.value,
                "text": item.text,
                "metadata": item.metadata,
                "ttl": item.metadata[TTL_FIELD] * 60,
            }
            for item in items
            if item.metadata.get(TTL_FIELD) is not None
        ]
        if records:
            self.memory.put_many(records)

    def _search(self, op: SearchOp) -> builtins.list[SearchItem]:
        prefix = encode_namespace(tuple(op.namespace_prefix))
        deep = len(op.namespace_prefix) > _LABELS_KEPT  # the packed segment: narrowed here, then exactly below
        if deep:
            prefix = prefix[:_LABELS_KEPT]
        where, checked = split_filter(op.filter)  # checked: conditions memlane's SQL cannot carry
        w.conditions(where, "filter")  # a bad filter is named "filter" here, as LangGraph's stores name it
        if op.limit <= 0 or op.offset < 0:
            return []
        if not op.query:
            if not deep and not checked:
                found = self.memory.select(prefix, where=where, limit=op.limit, offset=op.offset)
            else:
                found = self._select_kept(op, prefix, where, checked)
            self._refresh([i for i in found if self._refreshes(op)])
            return [_search_item(i, None) for i in found]
        wanted = op.offset + op.limit
        # the filter is part of memlane's ranking statements (where=): only what SQL cannot carry is checked here
        overfetch = checked or deep or self._several_texts
        fetch = min(MAX_FETCH, max(50, FILTER_OVERFETCH * wanted)) if overfetch else min(MAX_FETCH, wanted)
        # one channel has nothing to fuse: it need nominate no more than it returns (as LangGraph asks its index)
        single = len(self._channels) == 1
        semantic = "vector" in self._channels
        # the query embedded once, here where its vector also scores the fields, for every page asked below
        embedder = getattr(self.memory, "embedder", None) if semantic and op.query.strip() else None
        asked = np.asarray(self.memory._embed_query(op.query), dtype=np.float32) if embedder is not None else None
        while True:
            # no relevance floor: a LangGraph store answers the top matches, however weak, ranked by score
            env = self.memory.search(
                op.query,
                namespace_prefix=prefix,
                limit=fetch,
                channels=self._channels,
                floor=False,
                candidate_k=fetch if single else None,
                embedding=None if asked is None else asked.tolist(),
                where=where,
            )
            hits = [
                h
                for h in env.hits
                if (not checked or w.matches(h.value, builtins.list(checked)))
                and (not deep or decode_namespace(h.namespace)[: len(op.namespace_prefix)] == op.namespace_prefix)
            ]
            # matches that rank below the items the filter refuses: look further down, until the page is full,
            # the ranking has nothing more, or memlane's largest page was read
            if len(hits) >= wanted or len(env.hits) < fetch or fetch >= MAX_FETCH:
                break
            fetch = min(MAX_FETCH, fetch * FILTER_OVERFETCH)
        scores = {h.item.id: h.channel_scores.get("vector") if semantic else h.score for h in hits}
        if asked is not None and self._several_texts:
            scores |= self._best_field_scores(asked, hits)
            if single:  # LangGraph ranks an item by its best field
                hits.sort(key=lambda h: -(scores[h.item.id] or 0.0))
        hits = hits[op.offset : wanted]
        if self._refreshes(op):
            self._refresh([h.item for h in hits])
        return [_search_item(h.item, scores[h.item.id], h.ranks, h.channel_scores) for h in hits]

    @property
    def _several_texts(self) -> bool:
        """Whether the index config may give an item more than one text (several fields, or a wildcard path)."""
        return self.index_config is not None and (len(self._fields) > 1 or any("*" in f for f in self._fields))

    def _best_field_scores(self, query: np.ndarray, hits: Sequence[Any]) -> dict[str, float]:
        """Each hit's best cosine similarity over its fields' texts embedded one by one, as LangGraph scores an
        item with several fields (memlane stores one vector of their joined text, which nominates it).

        ``query`` is the query's unit vector, made by the memory's embedder here (a Client embeds on the service:
        its scores stay the joined text's).
        """
        embedder = self.memory.embedder
        several = {h.item.id: texts for h in hits if len(texts := self._texts_of(h.item)) > 1}
        if not several:
            return {}
        missing = list(dict.fromkeys(t for texts in several.values() for t in texts if t not in self._field_vectors))
        for text, vector in zip(missing, embedder.embed_batch(missing) if missing else [], strict=True):
            if len(self._field_vectors) >= 4096:
                self._field_vectors.pop(next(iter(self._field_vectors)))
            self._field_vectors[text] = normalise(vector)
        return {
            item_id: max(float(np.dot(query, self._field_vectors[t])) for t in texts)
            for item_id, texts in several.items()
        }

    def _texts_of(self, item: MemlaneItem) -> builtins.list[str]:
        """The texts an item's put indexed, one per field value (the fields of its own ``index=``, if it gave one)."""
        fields = item.metadata.get(FIELDS_FIELD) or self._fields
        return [text for field in fields for text in get_text_at_path(item.value, field)]

    def _select_kept(
        self, op: SearchOp, prefix: tuple[str, ...], where: Any, checked: Sequence[w.Condition]
    ) -> builtins.list[MemlaneItem]:
        """Page through ``select`` and keep what SQL could not decide: the exact labels of a prefix deeper than
        seven, and the conditions in ``checked``."""
        out: builtins.list[MemlaneItem] = []
        skip, offset, page = op.offset, 0, 1000
        while len(out) < op.limit:
            batch = self.memory.select(prefix, where=where, limit=page, offset=offset)
            for item in batch:
                if decode_namespace(item.namespace)[: len(op.namespace_prefix)] == tuple(
                    op.namespace_prefix
                ) and w.matches(item.value, list(checked)):
                    if skip:
                        skip -= 1
                    elif len(out) < op.limit:
                        out.append(item)
            if len(batch) < page:
                break
            offset += page
        return out

    def _list_namespaces(self, op: ListNamespacesOp) -> builtins.list[tuple[str, ...]]:
        literal: builtins.list[str] = []
        for condition in op.match_conditions or ():
            if condition.match_type == "prefix":
                for label in condition.path:
                    if label == "*":
                        break
                    literal.append(label)
                break
        prefix = encode_namespace(tuple(literal[:_LABELS_KEPT]))
        found = {decode_namespace(ns) for ns in self.memory.namespaces(prefix)}
        kept = {ns for ns in found if all(_does_match(c, ns) for c in op.match_conditions or ())}
        if op.max_depth is not None:
            kept = {ns[: op.max_depth] for ns in kept}
        return sorted(kept)[op.offset : op.offset + op.limit]

    # -- lifetime and TTL -------------------------------------------------------------------------------

    @property
    def conn(self) -> Any:
        """The SQLite connection under a memory on a SQLite file, as LangGraph's ``SqliteStore.conn`` (for
        diagnostics: write through the store). ``AttributeError`` over PostgreSQL or a Client."""
        connection = getattr(getattr(self.memory, "store", None), "connection", None)
        if connection is None:
            raise AttributeError("conn: this store's memory is not a local SQLite file")
        return connection

    def _setup(self) -> None:
        migrate = getattr(self.memory, "migrate", None)  # a Client: the service migrated its store
        if migrate is not None:
            migrate()

    def _sweep(self) -> int:
        report = getattr(self.memory, "cleanup_report", None)
        return int(report().expired_items) if report is not None else int(self.memory.cleanup())

    def _interval_s(self, minutes: float | None) -> float:
        return float(minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5) * 60

    def close(self) -> None:
        """Stop the sweeper, and close the memory if this store opened it (``from_conn_string``)."""
        self._stop.set()
        if self._owns:
            self.memory.close()


def _item(item: MemlaneItem) -> Item:
    return Item(
        value=item.value,
        key=decode_key(item.key),
        namespace=decode_namespace(item.namespace),
        created_at=item.created_at,
        updated_at=item.updated_at,
    )


def _search_item(
    item: MemlaneItem,
    score: float | None,
    ranks: dict[str, int] | None = None,
    channel_scores: dict[str, float] | None = None,
) -> MemlaneSearchItem:
    return MemlaneSearchItem(
        decode_namespace(item.namespace),
        decode_key(item.key),
        item.value,
        item.created_at,
        item.updated_at,
        score,
        ranks,
        channel_scores,
    )


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(namespace, path, strict=False)
        if condition.match_type == "prefix"
        else zip(reversed(namespace), reversed(path), strict=False)
    )
    if condition.match_type not in ("prefix", "suffix"):
        raise ValueError(f"unsupported match type {condition.match_type!r}")
    return all(p == "*" or n == p for n, p in pairs)


def _open(conn_string: str, index: IndexConfig | None, embedder: Any) -> Any:
    from .core.memory import open as open_memory

    chosen = embedder if embedder is not None else (embedder_for(index) if index else None)
    # sync indexing: LangGraph's stores embed before put returns, so a search right after a put finds it
    return open_memory(conn_string, embedder=chosen, indexing="sync")


class MemlaneStore(_Adapter, BaseStore):
    """A LangGraph ``BaseStore`` over a :class:`memlane.Memory` or a :class:`memlane.Client`.

    >>> store = MemlaneStore(memlane.open("memory.db"))        # doctest: +SKIP
    >>> graph = builder.compile(store=store)                   # doctest: +SKIP
    """

    # LangGraph's SqliteStore lists its schema statements here; these are memlane's SQLite schema's
    MIGRATIONS: ClassVar[builtins.list[str]] = [
        sql for _, statements in SQLITE_MIGRATIONS for sql in statements if isinstance(sql, str)
    ]

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        embedder: Any = None,
        channels: Sequence[str] | None = None,
    ) -> Iterator[MemlaneStore]:
        """Open a memlane store at a path, ``:memory:``, ``sqlite:///...`` or ``postgresql://...``; closed on exit.

        ``index["embed"]`` makes the vectors (``embedder=`` overrides it with any memlane embedder).
        """
        store = cls(_open(conn_string, index, embedder), index=index, ttl=ttl, channels=channels)
        store._owns = True
        try:
            yield store
        finally:
            store.stop_ttl_sweeper(timeout=5)
            store.close()

    def setup(self) -> None:
        """Apply memlane's pending migrations (``open`` already does; kept for LangGraph's API). Idempotent."""
        self._setup()

    def batch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """Run ops in order; results in order (``None`` for a put)."""
        return self._batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """``batch`` in a worker thread (memlane's calls are blocking)."""
        return await asyncio.to_thread(self._batch, list(ops))

    def sweep_ttl(self) -> int:
        """Delete expired items physically; returns how many (they were already invisible)."""
        return self._sweep()

    def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> concurrent.futures.Future[None]:
        """Sweep every ``sweep_interval_minutes`` (default: the TTL config's, else 5) in a daemon thread."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self.ttl_config or (self._sweeper is not None and self._sweeper.is_alive()):
            future.set_result(None)
            return future
        self._stop.clear()
        interval = self._interval_s(sweep_interval_minutes)

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.sweep_ttl()
                except Exception:  # a failed sweep is retried at the next interval
                    logger.exception("memlane TTL sweep failed")
            if not future.cancelled():  # a cancelled future stopped the loop, and takes no result
                future.set_result(None)

        self._sweeper = threading.Thread(target=loop, daemon=True, name="memlane-ttl-sweeper")
        self._sweeper.start()
        future.add_done_callback(lambda f: self._stop.set() if f.cancelled() else None)
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; ``False`` if it did not stop within ``timeout`` seconds."""
        if self._sweeper is None or not self._sweeper.is_alive():
            return True
        self._stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped


class AsyncMemlaneStore(_Adapter, BaseStore):
    """The async twin of :class:`MemlaneStore`, used like LangGraph's ``AsyncSqliteStore``.

    Each batch runs in a worker thread; ``setup``, ``sweep_ttl`` and the sweeper are coroutines.
    """

    _task: asyncio.Task[None] | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        embedder: Any = None,
        channels: Sequence[str] | None = None,
    ) -> AsyncIterator[AsyncMemlaneStore]:
        """``MemlaneStore.from_conn_string`` as an async context manager."""
        memory = await asyncio.to_thread(_open, conn_string, index, embedder)
        store = cls(memory, index=index, ttl=ttl, channels=channels)
        store._owns = True
        try:
            yield store
        finally:
            await store.stop_ttl_sweeper(timeout=5)
            await asyncio.to_thread(store.close)

    async def setup(self) -> None:
        """Apply memlane's pending migrations. Idempotent."""
        await asyncio.to_thread(self._setup)

    def batch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """Run ops in order in this thread (for sync callers of an async store)."""
        return self._batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """Run ops in order in a worker thread; results in order."""
        return await asyncio.to_thread(self._batch, list(ops))

    async def sweep_ttl(self) -> int:
        """Delete expired items physically; returns how many."""
        return await asyncio.to_thread(self._sweep)

    async def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> asyncio.Task[None]:
        """Sweep every interval in a task of the running loop."""
        if not self.ttl_config:
            return asyncio.create_task(asyncio.sleep(0))
        if self._task is not None and not self._task.done():
            return self._task
        interval = self._interval_s(sweep_interval_minutes)
        stop = asyncio.Event()
        self._stop_async = stop

        async def loop() -> None:
            while True:
                try:
                    await asyncio.wait_for(stop.wait(), timeout=interval)
                    return
                except TimeoutError:
                    pass
                try:
                    await self.sweep_ttl()
                except Exception:
                    logger.exception("memlane TTL sweep failed")

        self._task = asyncio.create_task(loop(), name="memlane-ttl-sweeper")
        return self._task

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper task; ``False`` if it did not stop within ``timeout`` seconds."""
        if self._task is None or self._task.done():
            return True
        self._stop_async.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=timeout)
        except TimeoutError:
            return False
        self._task = None
        return True
