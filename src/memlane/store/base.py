"""The storage interface every backend implements.

The :class:`~memlane.core.memory.Memory` facade validates input, reads the clock
and generates ids; a :class:`Store` only moves already-valid rows in and out of
its database. Namespaces arrive as tuples, times as aware UTC datetimes, values
as canonical JSON text, so a backend never re-validates and never builds SQL
from user strings.

Reads take ``now`` so that expiry is applied by the query itself: an expired
row is invisible on every read path before ``cleanup`` deletes it.

Reads over more than one address take ``within``: the namespace prefixes the
caller may read (``EVERYTHING`` for the owner), applied inside the one
statement that reads, so no read is ever widened or merged in Python. Ranked
reads name items by their stable ``id``, never by a row number a database may
reuse, and ``hydrate`` checks liveness and scope in the same read.

One conformance suite (``tests/conformance``) runs against every backend.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any, NamedTuple

from ..values.model import Item, Namespace, Stats, Version
from ..values.retention import RetentionRule
from ..values.where import Condition
from . import retention_tables
from ._common import EVERYTHING, SqlSession

ACCESS_HEAD = "SELECT coalesce(max(seq), 0) FROM access_log"

Within = Sequence[Namespace]
"""Namespace prefixes a read may see; ``()`` among them means everything, ``[]`` nothing."""
Nomination = tuple[str, float, int]
"""``(item id, channel score, item version the score was computed from)``, best first."""

__all__ = ["EVERYTHING", "Nomination", "PutRow", "Store", "Within"]


class PutRow(NamedTuple):
    """One validated write. ``value``/``metadata`` are canonical JSON text."""

    id: str
    namespace: Namespace
    key: str
    value: str
    value_type: str
    text: str
    metadata: str
    author: str | None
    expires_at: datetime | None
    vector: bytes | None = None  # float32 embedding of ``text``, if the memory has an embedder
    indexed: bool = True  # False (``index=False``): no full-text entry, no vector, never a search result


class Store(ABC):
    """Abstract storage backend: the exact verbs plus the lexical channel.

    Capabilities are class attributes so that callers and tests can ask
    before they use a feature.
    """

    backend: str = "abstract"
    supports_lexical: bool = True
    migration_names: tuple[str, ...] = ()

    def at_hand(self) -> AbstractContextManager[bool]:
        """Hold the store if a short read can run here and now without waiting; yields whether it can.

        The service answers point reads on its event loop while this yields
        ``True`` (an embedded store whose connection is free), and hands them to
        a worker thread otherwise. A store that reads over a network yields ``False``.
        """
        return nullcontext(False)

    def access_head(self) -> int:
        """The sequence number of the access log's last change (0: none), in one short read.

        The service reads it on every request, to know whether any agent, room
        or grant changed since it resolved its cached agents.
        """
        with self.session() as s:
            return int(s.rows(ACCESS_HEAD)[0][0])

    @abstractmethod
    def migrate(self) -> builtins.list[str]:
        """Apply pending migrations in order; returns the names applied."""

    @abstractmethod
    def migrations(self) -> builtins.list[tuple[str, str]]:
        """Applied migrations ``(name, applied_at)``, by name."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the data lives (a file path, a server URL without password)."""

    @abstractmethod
    def put_many(
        self, rows: Sequence[PutRow], now: datetime, *, if_absent: bool = False, mark: bool | None = False
    ) -> builtins.list[Item]:
        """Upsert rows in one transaction; replaced versions go to history.

        A row with ``indexed=False`` gets no full-text entry and no mark, and
        loses any it had (and its vector): search never finds it. The returned
        items carry the stored JSON and decode it only when read.
        With ``if_absent``, a live item at any of the addresses raises
        :class:`~memlane.values.errors.ConflictError` and nothing is written; the
        check and the write are atomic against other writers. With ``mark``,
        every written item with text and no vector is marked (at its new
        version) for the indexer, in the same transaction; ``None`` marks them if
        the store records an embedder (a lexical-only writer's case).
        """

    def exists(self, namespace: Namespace, key: str, now: datetime | Callable[[], datetime]) -> bool:
        """Whether a live item is at an address; a store reads no value for it where it can."""
        return self.get(namespace, key, now) is not None

    @abstractmethod
    def get(self, namespace: Namespace, key: str, now: datetime | Callable[[], datetime]) -> Item | None:
        """The live item at an address, or ``None``.

        ``now`` may be the clock itself: it is read only for a row that can expire.
        """

    @abstractmethod
    def get_many(self, addresses: Sequence[tuple[Namespace, str]], now: datetime) -> builtins.list[Item | None]:
        """Live items for many addresses in one round trip, in input order."""

    @abstractmethod
    def fetch(
        self, key: str, within: Within, limit: int, now: datetime, conditions: Sequence[Any] = ()
    ) -> builtins.list[Item]:
        """Live items with exactly this key inside ``within`` meeting ``conditions`` (in the statement), newest
        first."""

    @abstractmethod
    def list(
        self,
        within: Within,
        key_prefix: str,
        limit: int,
        after: tuple[Namespace, str] | None,
        now: datetime,
    ) -> builtins.list[Item]:
        """Live items inside ``within`` in address order, strictly after ``after``."""

    @abstractmethod
    def namespaces(self, within: Within, now: datetime) -> builtins.list[Namespace]:
        """Distinct namespaces holding live items inside ``within``, sorted."""

    @abstractmethod
    def addresses(self, within: Within, key_prefix: str, now: datetime) -> Iterator[tuple[Namespace, str]]:
        """Every live address inside ``within`` under a key prefix (feeds ``summarize``)."""

    @abstractmethod
    def get_by_id(self, item_id: str, within: Within, now: datetime) -> Item | None:
        """The live item with this id if it lies inside ``within`` (the scope is in the statement), else ``None``."""

    @abstractmethod
    def delete_by_id(self, item_id: str, within: Within, now: datetime, author: str | None) -> bool:
        """Delete the live item with this id if it lies inside ``within``, keeping it in history as :meth:`delete`
        does; ``False`` if there is none there."""

    @abstractmethod
    def delete(self, namespace: Namespace, key: str, now: datetime, author: str | None) -> bool:
        """Delete a live item, keeping it in history; ``False`` if missing."""

    @abstractmethod
    def clear(self, prefix: Namespace, now: datetime, author: str | None) -> int:
        """Delete every item under a non-empty prefix; returns live items deleted."""

    @abstractmethod
    def history(self, namespace: Namespace, key: str) -> builtins.list[Version]:
        """Past versions of an address, newest first."""

    @abstractmethod
    def cleanup(self, now: datetime) -> int:
        """Physically delete expired rows; returns how many."""

    # -- history retention (portable SQL over ``session``; see retention_tables) --

    def retention_rules(self) -> builtins.list[RetentionRule]:
        """Every history retention rule, by prefix."""
        with self.session() as s:
            return retention_tables.rules(s)

    def set_retention(
        self,
        prefix: Namespace,
        keep_versions: int | None,
        keep_days: float | None,
        now: datetime,
        author: str | None,
    ) -> RetentionRule:
        """Create or replace the retention rule at exactly ``prefix`` (already validated)."""
        with self.session(write=True) as s:
            return retention_tables.set_rule(s, prefix, keep_versions, keep_days, now, author)

    def clear_retention(self, prefix: Namespace) -> bool:
        """Remove the rule at exactly ``prefix``; ``False`` if there was none."""
        with self.session(write=True) as s:
            return retention_tables.clear_rule(s, prefix)

    def prune_history(self, now: datetime) -> dict[Namespace, int]:
        """Delete history versions beyond the rules, in one transaction; versions deleted per rule."""
        with self.session(write=True) as s:
            return retention_tables.prune(s, now)

    @abstractmethod
    def stats(self, now: datetime) -> Stats:
        """Counts and size."""

    @abstractmethod
    def lexical(
        self, terms: Sequence[str], within: Within, k: int, where: Sequence[Condition] = ()
    ) -> builtins.list[Nomination]:
        """BM25 nomination over all of ``within`` at once, higher score is better.

        ``terms`` are plain words; the backend quotes them, so user text is
        never parsed as index query syntax. Expiry is *not* applied here: the
        confirm step owns it. ``where`` is part of the statement: the ``k``
        nominated are the best among the items meeting it.
        """

    @abstractmethod
    def document_counts(self, terms: Sequence[str], within: Within, limit: int) -> tuple[int, dict[str, int]]:
        """Rows inside ``within`` and, per term, rows whose text or address contains it (each count stops at ``limit``).

        For the relevance decision (the scope's IDF of each query word); expiry is not applied.
        """

    @abstractmethod
    def hydrate(
        self, ids: Sequence[str], within: Within, now: datetime, where: Sequence[Condition] = ()
    ) -> dict[str, Item]:
        """Re-read candidates by item id from live, indexed rows inside ``within`` meeting ``where``, in one
        statement."""

    @abstractmethod
    def vector(
        self, query: Sequence[float], within: Within, k: int, where: Sequence[Condition] = ()
    ) -> builtins.list[Nomination]:
        """Cosine nomination over stored vectors inside ``within`` (score: similarity); ``where`` is applied
        before the top ``k`` are taken."""

    @abstractmethod
    def vector_backlog(self, limit: int, *, after: int = 0) -> builtins.list[tuple[int, int, str]]:
        """Items (ref above ``after``) whose vector is missing or stale: ``(ref, version, text)``."""

    @abstractmethod
    def count_vectors(self) -> tuple[int, int]:
        """``(items with a current vector, items without one)``."""

    @abstractmethod
    def stored_dimension(self) -> int | None:
        """The dimension of one stored item vector, or ``None`` when there is none (a store's recorded embedder
        from before dimensions were recorded gets it from here)."""

    @abstractmethod
    def put_vectors(self, rows: Sequence[tuple[int, int, bytes]]) -> int:
        """Store ``(ref, version, blob)`` vectors where the item is still at that version."""

    @abstractmethod
    def drop_vectors(self) -> None:
        """Delete every vector."""

    # -- write-behind indexing (memlane.domain.indexer) --------------------

    @abstractmethod
    def mark_missing(self) -> int:
        """Mark every item with text whose vector is missing or stale and that is not marked; returns how many."""

    @abstractmethod
    def claim_pending(
        self, limit: int, owner: str, lease_s: float, within: Within | None = None
    ) -> builtins.list[tuple[int, int, str, int]]:
        """Lease up to ``limit`` unclaimed (or lease-expired) marks to ``owner``, only inside ``within`` if given.

        Returns ``(ref, version, text, mark_version)``: the item as it is now, and the version its mark had.
        """

    @abstractmethod
    def finish_pending(self, done: Sequence[tuple[int, int, bytes | None, int]], owner: str) -> int:
        """Write ``(ref, version, blob, mark_version)`` vectors where the item is still at ``version``.

        Each mark is cleared if it still has ``mark_version``; one re-made by a
        write since the claim stays for the next claim. Returns vectors written.
        """

    @abstractmethod
    def release_pending(self, owner: str) -> None:
        """Give back every mark ``owner`` holds."""

    @abstractmethod
    def count_pending(self, within: Within) -> int:
        """Items inside ``within`` still marked for embedding."""

    @abstractmethod
    def get_meta(self, name: str) -> str | None:
        """A value from the store's metadata (the recorded embedder...)."""

    @abstractmethod
    def set_meta(self, name: str, value: str) -> None:
        """Set a store metadata value."""

    @abstractmethod
    def export_records(self) -> Iterator[dict[str, Any]]:
        """Every stored row (items, then history) as JSON-ready dicts."""

    @abstractmethod
    def import_records(
        self, records: Iterable[dict[str, Any]], now: datetime, *, numbers: Iterable[int] | None = None
    ) -> int:
        """Write exported records back verbatim in one transaction; returns rows written.

        Rows already present exactly are skipped; a different live row at an
        imported address goes to history with ``change="import"``. ``numbers``
        are the records' numbers in the caller's input, for error messages.
        """

    @abstractmethod
    def session(self, *, write: bool = False) -> AbstractContextManager[SqlSession]:
        """A connection for layers that bring their own portable SQL (the facts layer).

        ``write=True`` is one transaction, committed when the block ends and
        rolled back if it raises; a read sees one consistent snapshot.
        """

    @abstractmethod
    def close(self) -> None:
        """Release connections. Idempotent."""

    # -- what AsyncMemory awaits ------------------------------------------------
    # A store with an async driver (PostgreSQL) sets ``native_async`` and offers ``a<verb>`` for each verb a
    # twin's steps name (core/twins.py), with the synchronous verb's arguments and answer; for any other store
    # AsyncMemory runs the synchronous verb in a worker thread.

    native_async: bool = False  # whether ``a<verb>`` run on the event loop, not in a worker thread

    async def aclose(self) -> None:
        """Release what the async reads hold on the running event loop (the synchronous :meth:`close` is apart)."""
        return  # the reads above hold nothing: the worker threads are the loop's

    @abstractmethod
    def select(
        self, within: Within, where: Sequence[Condition], order: str, limit: int, offset: int, now: datetime
    ) -> builtins.list[Item]:
        """Live items inside ``within`` whose value meets every condition, in one statement.

        ``where`` is already validated (:mod:`memlane.values.where`) and is rendered as
        bound SQL, never formatted into it. ``order`` is ``updated_desc``
        (newest first, then address) or ``address``; ``offset`` items are skipped.
        """
