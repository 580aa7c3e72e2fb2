"""Write-behind indexing: embed marked items in batches, after their writes committed.

A write commits the row and its lexical index and marks the item (at its
version) in the store; it never calls the model. An :class:`Indexer` drains the
marks: it claims a batch with a lease (so processes sharing a database never
embed one item twice, and a crashed indexer's claims come back when the lease
runs out), embeds the texts, and writes each vector only where the item is
still at the version embedded. A mark re-made by a newer write stays for the
next claim, so nothing is lost and no vector of an old version is served.

One indexer serves one :class:`~memlane.core.memory.Memory`: as a background thread
(started on the first write, or by the service), in the caller's thread
(:meth:`drain`, for ``wait_indexed`` and ``memlane index``), or both: a lock
keeps their embedding calls apart.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..store.base import EVERYTHING, Within
from ..values.errors import StoreError, ValidationError

if TYPE_CHECKING:
    from .ports import Core

BATCH_SIZE = 64
LEASE_S = 120.0  # far above one batch's embedding time: a claim outlives it only when its holder died
POLL_S = 1.0  # how often an idle thread looks for marks written by other processes
RETRY_S = 5.0  # after a failed batch (a remote embedder down), before trying again
GATHER_S = 0.02  # after a write wakes the idle thread, before it claims: the next writes share the batch
CATCH_UP_ITEMS = 256  # a search embeds at most this many of its scope's waiting items first (CatchUp)...
CATCH_UP_MS = 1000.0  # ... for about this long
CATCH_UP_FIRST = 8  # a search's first batch of its own scope's marks, before it knows the embedder's rate
# after a search waited its whole bound for marks others hold and none finished (an indexer that died holding its
# lease, LEASE_S), searches skip that wait for this long
HELD_STILL_S = 10.0
CATCH_UP_POLL_S = 0.01  # how often a search waiting for marks another process holds looks again


@dataclass(frozen=True, slots=True)
class CatchUp:
    """How much of its own scope's waiting items a search embeds before it answers (read-your-writes).

    A search whose scope holds items written but not embedded yet embeds up to
    ``items`` of them, for at most about ``ms`` milliseconds (a batch already
    started is finished; batches are sized to the time left), then answers; what
    still waits is reported in the envelope's ``pending_vectors``. ``items=0``
    turns it off. The defaults come from ``$MEMLANE_SEARCH_EMBED_ITEMS`` and
    ``$MEMLANE_SEARCH_EMBED_MS`` when set.
    """

    items: int = CATCH_UP_ITEMS
    ms: float = CATCH_UP_MS

    def __post_init__(self) -> None:
        if isinstance(self.items, bool) or not isinstance(self.items, int) or self.items < 0:
            raise ValidationError("catch_up.items", f"must be a whole number >= 0, got {self.items!r}")
        if isinstance(self.ms, bool) or not isinstance(self.ms, int | float) or not 0 <= self.ms < math.inf:
            raise ValidationError("catch_up.ms", f"must be a finite number of milliseconds >= 0, got {self.ms!r}")

    @classmethod
    def from_env(cls) -> CatchUp:
        """The defaults, or ``$MEMLANE_SEARCH_EMBED_ITEMS`` / ``$MEMLANE_SEARCH_EMBED_MS`` where set."""
        items, ms = os.environ.get("MEMLANE_SEARCH_EMBED_ITEMS"), os.environ.get("MEMLANE_SEARCH_EMBED_MS")
        try:
            return cls(CATCH_UP_ITEMS if items is None else int(items), CATCH_UP_MS if ms is None else float(ms))
        except (ValueError, ValidationError) as e:
            raise ValidationError(
                "MEMLANE_SEARCH_EMBED_ITEMS / MEMLANE_SEARCH_EMBED_MS", f"must be numbers ({e})"
            ) from e


class Indexer:
    """Drains one store's pending marks with one memory's embedder.

    Args:
        mem: the memory whose store and embedder it uses.
        batch_size: items claimed and embedded at once.
        lease_s: how long a claim keeps other indexers off its items.
    """

    def __init__(self, mem: Core, *, batch_size: int = BATCH_SIZE, lease_s: float = LEASE_S) -> None:
        self._mem = mem
        self.batch_size = batch_size
        self.lease_s = lease_s
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._embedding = threading.Lock()  # one batch at a time per memory: thread and callers alike
        self._batch_done = threading.Condition()  # notified after every batch (for searches waiting on one)
        self._thread: threading.Thread | None = None
        self._started = threading.Lock()
        self._scanned = False
        self._folded = False  # one look at the index after the first (even empty) batch: a store opened behind
        self._held_still_until = 0.0  # see HELD_STILL_S
        self._scaled = False  # the embedder's relevance scale measured (or read) after a batch: see drain_batch
        self.error: BaseException | None = None  # the thread's last failure, cleared by a batch that works

    @property
    def running(self) -> bool:
        """Whether the background thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def scan(self) -> int:
        """Mark items whose vector is missing or stale (written before an embedder, or by a lexical-only writer).

        Runs once per indexer before its first batch: a store gains its
        vectors without a manual ``reindex``.
        """
        self._scanned = True
        return self._mem.store.mark_missing()

    def drain_batch(self) -> int:
        """Claim, embed and store one batch; returns the items claimed (0: nothing to do)."""
        with self._embedding:
            if self._stop.is_set():  # the memory is closing (or closed): leave the store alone
                return 0
            if not self._scanned:
                self.scan()
            claimed = self._mem.store.claim_pending(self.batch_size, self.owner, self.lease_s)
            self._finish(claimed)
        if claimed or not self._folded:
            self._fold()
        if claimed and not self._scaled:
            # the embedder's relevance scale, measured here (once per indexer, kept in the store's meta) rather
            # than by the first search that needs it, which then only reads it; a store that fails here is the
            # next claim's to report (the batch is stored), and a search measures the scale itself
            with contextlib.suppress(StoreError):
                self._scaled = self._mem._scale_for_relevance() is not None
        return len(claimed)

    def _fold(self) -> None:
        """Fold the vectors stored since the shared vector index's generation into a new one, once enough wait.

        A store with a shared index (SQLite: ``fold_vectors``) keeps it current here, after the batch and
        outside the embedding lock; several processes' indexers take turns through the index's file lock.
        """
        fold = getattr(self._mem.store, "fold_vectors", None)
        if fold is None:
            return
        self._folded = True
        fold()

    def _finish(self, claimed: list[tuple[int, int, str, int]]) -> None:
        """Embed claimed marks and store their vectors (the caller holds ``_embedding``)."""
        if not claimed:
            return
        store = self._mem.store
        try:
            texts = [text for _, _, text, _ in claimed if text]
            blobs = iter(self._mem._embed(texts)) if texts else iter(())
            done = [(ref, version, next(blobs) if text else None, mark) for ref, version, text, mark in claimed]
            store.finish_pending(done, self.owner)
        except BaseException:
            # give the batch back at once rather than when the lease ends (a writer may have won a lock)
            try:
                store.release_pending(self.owner)
            except Exception:  # noqa: BLE001 - the store is gone: the lease still brings the batch back
                pass
            raise
        finally:
            with self._batch_done:
                self._batch_done.notify_all()

    def catch_up(self, within: Within, *, items: int, seconds: float) -> int:
        """Embed the marks inside ``within`` now, within a bound; returns how many still wait there.

        A search calls this before its vector channel nominates (read-your-writes):
        it claims marks of its own scope through the store's lease, in small
        batches, so the background thread, other processes and this call never
        embed one item twice, and it stops after ``items`` items or ``seconds``
        (a batch already started is finished; batches are sized to the time left).
        Marks another indexer holds are waited for until the deadline.

        Raises:
            EmbedderError: the embedder failed; the claimed marks are given back.
        """
        store = self._mem.store
        pending = store.count_pending(within)
        if not pending or items <= 0 or seconds <= 0:
            return pending
        deadline = time.monotonic() + seconds
        done, per_item = 0, None
        waited_for: int | None = None  # marks held by others when this call began to wait for them
        while done < items:
            left = deadline - time.monotonic()
            if left <= 0 or not self._embedding.acquire(timeout=left):
                break
            try:
                if self._stop.is_set():
                    break
                # the first batch is small; the next ones fit the time left at the rate measured
                size = CATCH_UP_FIRST if per_item is None else int((deadline - time.monotonic()) / per_item) + 1
                size = max(1, min(size, self.batch_size, items - done))
                started = time.monotonic()
                claimed = store.claim_pending(size, self.owner, self.lease_s, within)
                self._finish(claimed)
            finally:
                self._embedding.release()
            if claimed:
                done += len(claimed)
                per_item = max(time.monotonic() - started, 1e-4) / len(claimed)
                continue
            # nothing free to claim: what is left is another indexer's batch (or none is left)
            held = store.count_pending(within)
            if not held:
                return 0
            if waited_for is None:
                if time.monotonic() < self._held_still_until:
                    return held  # they did not move at the last wait either (a dead indexer's lease): no wait
                waited_for = held
            with self._batch_done:  # this memory's thread says when its batch ends; other processes are polled
                self._batch_done.wait(min(CATCH_UP_POLL_S, max(0.0, deadline - time.monotonic())))
        left = store.count_pending(within)
        if waited_for is not None and left >= waited_for:
            # a whole wait and nothing of theirs finished: the next searches do not wait for them for a while
            self._held_still_until = time.monotonic() + HELD_STILL_S
        return left

    def drain(self, *, limit: int | None = None) -> int:
        """Drain batches in the caller's thread until no mark is free to claim (or ``limit`` items); returns count."""
        total = 0
        while limit is None or total < limit:
            n = self.drain_batch()
            if n == 0:
                break
            total += n
        return total

    def wait(self, timeout: float | None = None) -> bool:
        """Drain in the caller's thread, then wait for claims held elsewhere; ``True`` once nothing is pending.

        Returns ``False`` if marks remain when ``timeout`` seconds have passed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.drain()
            if self._mem.store.count_pending(EVERYTHING) == 0:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            # what is left is leased to another indexer: look again soon (or when its lease ends)
            time.sleep(0.02 if left is None else min(0.02, left))

    def idle(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for new marks or a stop; ``True`` if stopped (for ``memlane index --watch``)."""
        self._wake.wait(seconds)
        self._wake.clear()
        return self._stop.is_set()

    def start(self) -> None:
        """Start the background thread (idempotent)."""
        with self._started:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="memlane-indexer", daemon=True)
            self._thread.start()

    def notify(self) -> None:
        """Tell the thread that new marks were written, starting it if needed."""
        self.start()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the batch: a write committed during it wakes the next wait at once
            try:
                n = self.drain_batch()
                self.error = None
            except BaseException as e:  # noqa: BLE001 - kept for the caller; the marks stay for a retry
                if self._stop.is_set():
                    break
                self.error = e
                self._stop.wait(RETRY_S)
                continue
            if n == 0 and self._wake.wait(POLL_S) and not self._stop.is_set():
                # a write woke the thread: the writes right behind it join its batch (one claim, one embedding
                # call and one vector write for many: one put at a time cost a batch each)
                self._stop.wait(GATHER_S)

    def stop(self) -> None:
        """Stop the thread after its current batch (a batch always ends its claims). Idempotent.

        A batch running in another thread (``wait_indexed``, ``index``) is
        finished too; no batch starts after this returns.
        """
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._embedding:
            pass
