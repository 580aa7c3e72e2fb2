"""Write-behind indexing: embed marked items in batches, after their writes committed.

A write commits the row and its lexical index and marks the item (at its
version) in the store; it never calls the model. An :class:`Indexer` drains the
marks: it claims a batch with a lease (so processes sharing a database never
embed one item twice, and a crashed indexer's claims come back when the lease
runs out), embeds the texts, and writes each vector only where the item is
still at the version embedded. A mark re-made by a newer write stays for the
next claim, so nothing is lost and no vector of an old version is served.

One indexer serves one :class:`~memlane.memory.Memory`: as a background thread
(started on the first write, or by the service), in the caller's thread
(:meth:`drain`, for ``wait_indexed`` and ``memlane index``), or both: a lock
keeps their embedding calls apart.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from typing import TYPE_CHECKING

from .store.base import EVERYTHING

if TYPE_CHECKING:
    from .memory import Memory

BATCH_SIZE = 64
LEASE_S = 120.0  # far above one batch's embedding time: a claim outlives it only when its holder died
POLL_S = 1.0  # how often an idle thread looks for marks written by other processes
RETRY_S = 5.0  # after a failed batch (a remote embedder down), before trying again


class Indexer:
    """Drains one store's pending marks with one memory's embedder.

    Args:
        mem: the memory whose store and embedder it uses.
        batch_size: items claimed and embedded at once.
        lease_s: how long a claim keeps other indexers off its items.
    """

    def __init__(self, mem: Memory, *, batch_size: int = BATCH_SIZE, lease_s: float = LEASE_S) -> None:
        self._mem = mem
        self.batch_size = batch_size
        self.lease_s = lease_s
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._embedding = threading.Lock()  # one batch at a time per memory: thread and callers alike
        self._thread: threading.Thread | None = None
        self._started = threading.Lock()
        self._scanned = False
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
            store = self._mem.store
            claimed = store.claim_pending(self.batch_size, self.owner, self.lease_s)
            if not claimed:
                return 0
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
            return len(claimed)

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
            if n == 0:
                self._wake.wait(POLL_S)

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
