"""``Memory``: the one facade every interface (Python, CLI, HTTP, MCP) calls.

It validates input once, reads the injectable clock, generates ids, and hands
already-valid rows to a :class:`~memlane.store.base.Store`. It never prints and
never builds SQL.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import json
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from . import validate as v
from .errors import BackendUnavailableError, ValidationError
from .model import Envelope, Item, Namespace, Page, Stats, Version, namespace_text
from .search import rank
from .store.base import PutRow, Store

Clock = Callable[[], datetime]
DEFAULT_PATH = "memlane.db"
CHANNELS = ("lexical",)
_RECORD_FIELDS = frozenset({"namespace", "key", "value", "text", "metadata", "ttl"})


def _system_clock() -> datetime:
    return datetime.now(UTC)


def new_ids(now: datetime, count: int) -> builtins.list[str]:
    """``count`` 32-hex-digit ids that sort by creation time (48-bit ms + 80 random bits)."""
    prefix = f"{int(now.timestamp() * 1000) & 0xFFFFFFFFFFFF:012x}"
    rand = secrets.token_hex(10 * count)
    return [prefix + rand[i : i + 20] for i in range(0, 20 * count, 20)]


def _encode_cursor(namespace: Namespace, key: str) -> str:
    raw = json.dumps([list(namespace), key], separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[Namespace, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ns, key = json.loads(raw)
        return v.namespace(ns, "cursor"), v.key(key, "cursor")
    except (ValueError, TypeError, binascii.Error) as e:
        raise ValidationError("cursor", "is not a cursor returned by list(); pass next_cursor unchanged") from e


class Memory:
    """Durable memory over one store.

    Args:
        store: the storage backend.
        clock: zero-argument callable returning an aware datetime; defaults
            to the system clock. Tests inject a fake one.
        author: recorded on every write made through this object.
    """

    def __init__(self, store: Store, *, clock: Clock | None = None, author: str | None = None) -> None:
        self._store = store
        self._clock = clock or _system_clock
        self.author = author

    # -- plumbing ---------------------------------------------------------

    @property
    def store(self) -> Store:
        """The storage backend (for diagnostics and benchmarks)."""
        return self._store

    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ValidationError("clock", "returned a naive datetime; return an aware one (UTC)")
        return now if now.tzinfo is UTC else now.astimezone(UTC)

    def close(self) -> None:
        """Close the store. Idempotent."""
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
    ) -> PutRow:
        ns = v.namespace(namespace)
        key = item_id if key is None else v.key(key)
        value_json, value_type = v.value(value)
        if text is None:
            text = value if value_type == "string" else value_json
        else:
            text = v.text(text)
        seconds = v.ttl(ttl)
        expires = None if seconds is None else now + timedelta(seconds=seconds)
        return PutRow(
            item_id,
            ns,
            key,
            value_json,
            value_type,
            text,
            v.metadata(metadata),
            self.author,
            expires,
        )

    def put(
        self,
        namespace: Namespace | str,
        key: str | None,
        value: Any,
        *,
        text: str | None = None,
        metadata: dict[str, Any] | None = None,
        ttl: float | None = None,
    ) -> Item:
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

        Raises:
            ValidationError: naming the offending field; nothing is written.
        """
        now = self._now()
        row = self._row(now, new_ids(now, 1)[0], namespace, key, value, text, metadata, ttl)
        return self._store.put_many([row], now)[0]

    def put_many(self, records: Iterable[Mapping[str, Any]]) -> builtins.list[Item]:
        """Write many records in one transaction: all or nothing.

        Each record is a mapping with ``namespace``, ``key`` (may be None or
        absent), ``value``, and optional ``text``, ``metadata``, ``ttl``.
        Every record is validated before anything is written.
        """
        now = self._now()
        records = records if isinstance(records, Sequence) else list(records)
        ids = new_ids(now, len(records))
        rows = []
        for n, rec in enumerate(records):
            if not isinstance(rec, Mapping):
                raise ValidationError("records", f"record {n} is a {type(rec).__name__}, not a mapping")
            if not _RECORD_FIELDS.issuperset(rec):
                unknown = sorted(set(rec) - _RECORD_FIELDS)
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
                    )
                )
            except ValidationError as e:
                raise ValidationError(e.field, f"{str(e).split(': ', 1)[1]} (record {n}); nothing was written") from e
        if not rows:
            return []
        return self._store.put_many(rows, now)

    def delete(self, namespace: Namespace | str, key: str) -> bool:
        """Delete an item (kept in history). Returns whether a live item was deleted."""
        ns = v.namespace(namespace)
        return self._store.delete(ns, v.key(key), self._now(), self.author)

    def clear(self, namespace_prefix: Namespace | str) -> int:
        """Delete every item under a namespace prefix; returns the live items deleted.

        The empty prefix is refused: clearing a whole store is never an accident.
        """
        prefix = v.namespace(namespace_prefix, "namespace_prefix")
        return self._store.clear(prefix, self._now(), self.author)

    def cleanup(self) -> int:
        """Physically delete expired rows (they are already invisible); returns how many."""
        return self._store.cleanup(self._now())

    # -- exact reads ------------------------------------------------------

    def get(self, namespace: Namespace | str, key: str) -> Item | None:
        """The item at ``(namespace, key)``, or ``None`` if missing or expired."""
        return self._store.get(v.namespace(namespace), v.key(key), self._now())

    def get_many(self, addresses: Iterable[tuple[Namespace | str, str]]) -> builtins.list[Item | None]:
        """Items for many addresses in one round trip, in input order (``None`` where missing)."""
        checked: builtins.list[tuple[Namespace, str]] = []
        for n, addr in enumerate(addresses):
            if not isinstance(addr, tuple | list) or len(addr) != 2:
                raise ValidationError("addresses", f"address {n} must be a (namespace, key) pair")
            checked.append((v.namespace(addr[0]), v.key(addr[1])))
        if not checked:
            return []
        return self._store.get_many(checked, self._now())

    def fetch(self, key: str, *, namespace_prefix: Namespace | str = (), limit: int = 10) -> builtins.list[Item]:
        """Every visible item stored under exactly ``key`` below a prefix, newest first.

        The keyed recall: no ranking and no index, the same answer every time
        for the same state (ties on ``updated_at`` are ordered by namespace).
        """
        prefix = v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True)
        return self._store.fetch(v.key(key), prefix, v.limit(limit, maximum=1000), self._now())

    def list(
        self,
        namespace_prefix: Namespace | str = (),
        *,
        key_prefix: str = "",
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        """Items in address order (namespace text, then key), one page at a time.

        Pass ``page.next_cursor`` back as ``cursor`` to continue; it is ``None``
        on the last page.
        """
        prefix = v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True)
        kp = v.key_prefix(key_prefix)
        limit = v.limit(limit)
        after = None if cursor is None else _decode_cursor(cursor)
        items = self._store.list(prefix, kp, limit + 1, after, self._now())
        if len(items) > limit:
            items = items[:limit]
            return Page(items, _encode_cursor(items[-1].namespace, items[-1].key))
        return Page(items, None)

    def namespaces(self, prefix: Namespace | str = (), *, max_depth: int | None = None) -> builtins.list[Namespace]:
        """Namespaces holding live items under ``prefix``, truncated to ``max_depth`` segments."""
        pre = v.namespace(prefix, "prefix", allow_empty=True)
        found = self._store.namespaces(pre, self._now())
        if max_depth is None:
            return found
        depth = v.limit(max_depth, "max_depth", maximum=8)
        return sorted({ns[:depth] for ns in found})

    def summarize(
        self, namespace_prefix: Namespace | str = (), *, depth: int = 3, key_prefix: str = ""
    ) -> dict[str, dict[str, int]]:
        """The taxonomy map: per namespace, key paths cut at ``depth`` segments, with counts.

        ``{"user/123": {"preferences.ui": 2, "preferences.editor": 1}}``: drill
        by passing a path back as ``key_prefix`` with a larger ``depth``.
        """
        prefix = v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True)
        kp = v.key_prefix(key_prefix)
        depth = v.limit(depth, "depth", maximum=64)
        out: dict[str, dict[str, int]] = {}
        for ns, key in self._store.addresses(prefix, kp, self._now()):
            parts = key.split(".", depth)
            path = key if len(parts) <= depth else ".".join(parts[:depth])
            bucket = out.setdefault(namespace_text(ns), {})
            bucket[path] = bucket.get(path, 0) + 1
        return out

    def history(self, namespace: Namespace | str, key: str) -> builtins.list[Version]:
        """Past versions of an address (replaced, deleted, cleared), newest first."""
        return self._store.history(v.namespace(namespace), v.key(key))

    def stats(self) -> Stats:
        """Counts (active and expired items, namespaces, history) and size."""
        return self._store.stats(self._now())

    # -- ranked reads -----------------------------------------------------

    def search(
        self,
        query: str,
        *,
        namespace_prefix: Namespace | str = (),
        limit: int = 10,
        candidate_k: int | None = None,
        rrf_k: int = 60,
    ) -> Envelope:
        """Search by topic: BM25 over item text, fused and confirmed.

        User text is never parsed as index syntax. Results are re-read from
        live rows; anything expired or deleted since indexing is dropped and
        counted in ``dropped_by_hydration``.
        """
        started = time.perf_counter()
        query = v.query(query)
        prefix = v.namespace(namespace_prefix, "namespace_prefix", allow_empty=True)
        limit = v.limit(limit, maximum=1000)
        k = v.limit(candidate_k, "candidate_k", maximum=10_000) if candidate_k is not None else max(50, 2 * limit)
        rrf_k = v.limit(rrf_k, "rrf_k", maximum=100_000)
        now = self._now()
        notes: builtins.list[str] = []
        words = rank.terms(query)
        if not words:
            notes.append("the query has no searchable words")
        nominations = {"lexical": self._store.lexical(words, prefix, k)}
        nominated = time.perf_counter()
        fused = rank.fuse(nominations, rrf_k=rrf_k)
        fused_at = time.perf_counter()
        hits, dropped, truncated = rank.confirm(fused, lambda refs: self._store.hydrate(refs, now), limit)
        done = time.perf_counter()
        return Envelope(
            operation="search",
            params={
                "query": query,
                "namespace_prefix": namespace_text(prefix),
                "limit": limit,
                "channels": list(CHANNELS),
                "candidate_k": k,
                "rrf_k": rrf_k,
            },
            hits=hits,
            counts={ch: len(found) for ch, found in nominations.items()},
            dropped_by_hydration=dropped,
            truncated=truncated,
            timings={
                "nominate_ms": round((nominated - started) * 1000, 3),
                "fuse_ms": round((fused_at - nominated) * 1000, 3),
                "confirm_ms": round((done - fused_at) * 1000, 3),
                "total_ms": round((done - started) * 1000, 3),
            },
            notes=notes,
        )

    # -- moving data ------------------------------------------------------

    def export_records(self) -> Iterator[dict[str, Any]]:
        """Every stored row (items, then history versions) as JSON-ready dicts.

        Expired rows not yet cleaned up are included (they stay invisible
        after import, since ``expires_at`` travels with them).
        """
        return self._store.export_records()

    def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Write exported records back exactly (ids, times, versions) in one transaction.

        An address that already exists is replaced by the imported row (its
        old version goes to history). Returns the number of records written.
        """
        return self._store.import_records(dict(r) for r in records)


def open(url: str | None = None, *, clock: Clock | None = None, author: str | None = None) -> Memory:  # noqa: A001
    """Open a memory.

    Args:
        url: a file path, ``sqlite:///path``, or ``None`` for ``$MEMLANE_DB``
            or ``./memlane.db``.
        clock: zero-argument callable returning an aware datetime.
        author: recorded on every write.
    """
    url = url or os.environ.get("MEMLANE_DB") or DEFAULT_PATH
    if url.startswith(("postgresql://", "postgres://")):
        raise BackendUnavailableError(
            "PostgreSQL is not supported by this version of memlane; use a SQLite path or sqlite:///path"
        )
    if "://" in url and not url.startswith("sqlite:"):
        raise BackendUnavailableError(
            f"unknown database URL scheme in {url.split('://')[0]!r}; use a path or sqlite:///path"
        )
    from .store.sqlite import SqliteStore, parse_url

    return Memory(SqliteStore(parse_url(url)), clock=clock, author=author)
