"""Fair sharing of expensive work (ranked reads, the query space) between the agents of one service process.

A :class:`Gate` runs at most ``capacity`` expensive requests at once, and at
most ``per_agent`` of one agent's: a statement of the query space can hold a
core for seconds, and one agent's many must not take every place another
agent's one search needs. A request within both starts at once. Beyond them it
waits, one queue per agent, holding no thread, and a freed place goes to the
agents in turn (round robin), so one agent's hundred waiting searches delay
another agent's one search by at most one turn. A request is refused
(:class:`~memlane.values.errors.BusyError`, HTTP 429 with ``Retry-After``) only when

* its agent already has ``per_agent`` requests running or waiting while other
  agents wait: it is over its fair share, and waiting would only lengthen
  everyone's queue;
* its agent has ``max_waiting`` requests waiting, or the process
  :data:`MAX_QUEUED` (memory is bounded, also against many made-up tokens); or
* it has waited ``max_wait`` seconds without starting (waiting is bounded in
  time).

A refused request never ran: retrying it is always safe. Async callers (the
HTTP middleware, on the event loop) and threads (MCP tool calls) share one
gate; the state sits behind one lock and each waiter is woken by whoever frees
its place.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import BusyError

DEFAULT_PER_AGENT = 4
DEFAULT_CAPACITY = 16
DEFAULT_MAX_WAIT = 10.0
DEFAULT_MAX_WAITING = 64
# requests waiting in one process, every caller's together: the callers are told apart before their token is
# checked, so many callers with made-up tokens must not queue without bound
MAX_QUEUED = 1024


class _Waiter:
    """One request waiting for a place: woken through its event loop or a threading event."""

    __slots__ = ("caller", "granted", "_loop", "_future", "_event")

    def __init__(self, caller: str, loop: asyncio.AbstractEventLoop | None) -> None:
        self.caller = caller
        self.granted = False
        self._loop = loop
        self._future: asyncio.Future[None] | None = loop.create_future() if loop is not None else None
        self._event = None if loop is not None else threading.Event()

    def wake(self) -> None:
        if self._future is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(_resolve, self._future)
        elif self._event is not None:
            self._event.set()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Gate:
    """At most ``capacity`` expensive requests at once, shared fairly between agents.

    Args:
        per_agent: an agent's fair share of running and waiting requests while others wait.
        capacity: expensive requests running at once in this process.
        max_wait: seconds a request may wait for a place before it is refused.
        max_waiting: requests one agent may have waiting.
    """

    def __init__(
        self,
        per_agent: int = DEFAULT_PER_AGENT,
        capacity: int = DEFAULT_CAPACITY,
        *,
        max_wait: float = DEFAULT_MAX_WAIT,
        max_waiting: int = DEFAULT_MAX_WAITING,
    ) -> None:
        if per_agent < 1 or capacity < 1 or max_waiting < 0 or not max_wait >= 0:
            raise ValueError("per_agent and capacity must be at least 1, max_wait and max_waiting at least 0")
        self.per_agent = per_agent
        self.capacity = capacity
        self.max_wait = max_wait
        self.max_waiting = max_waiting
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}
        self._total = 0
        self._queues: dict[str, deque[_Waiter]] = {}
        self._turns: deque[str] = deque()  # agents with a waiting request, in the order they are served
        self._waiting = 0
        self._held_s = 1.0  # a moving average of how long a place is held, for Retry-After

    # -- what callers use ---------------------------------------------------

    async def acquire(self, caller: str) -> None:
        """Wait (on the event loop) for a place for ``caller``; :class:`BusyError` if refused."""
        waiter = self._arrive(caller, asyncio.get_running_loop())
        if waiter is None:
            return
        assert waiter._future is not None
        try:
            await asyncio.wait_for(asyncio.shield(waiter._future), self.max_wait)
        except TimeoutError:
            self._give_up(waiter)
        except BaseException:  # cancelled (the caller went away): give the place on if it came meanwhile
            if self._give_up(waiter, refuse=False):
                self.release(caller)
            raise

    def release(self, caller: str, held_s: float | None = None) -> None:
        """Free one of ``caller``'s places and hand it to the next agent in turn."""
        woken: list[_Waiter] = []
        with self._lock:
            left = self._running.get(caller, 0) - 1
            if left > 0:
                self._running[caller] = left
            else:
                self._running.pop(caller, None)
            self._total -= 1
            if held_s is not None:
                self._held_s += (held_s - self._held_s) / 8
            while self._total < self.capacity:
                waiter = self._grant_next()
                if waiter is None:
                    break
                woken.append(waiter)
        for waiter in woken:
            waiter.wake()

    @contextmanager
    def enter(self, caller: str) -> Iterator[None]:
        """Hold a place for ``caller`` for the duration of the block (from a thread; blocks while waiting)."""
        waiter = self._arrive(caller, None)
        if waiter is not None:
            assert waiter._event is not None
            if not waiter._event.wait(self.max_wait):
                self._give_up(waiter)
        started = time.monotonic()
        try:
            yield
        finally:
            self.release(caller, time.monotonic() - started)

    def running(self, caller: str | None = None) -> int:
        """Requests holding a place: ``caller``'s, or everyone's."""
        with self._lock:
            return self._total if caller is None else self._running.get(caller, 0)

    def waiting(self) -> int:
        """Requests waiting for a place."""
        with self._lock:
            return self._waiting

    # -- the rule -----------------------------------------------------------

    def _arrive(self, caller: str, loop: asyncio.AbstractEventLoop | None) -> _Waiter | None:
        """Take a place now (``None``), or queue a waiter; :class:`BusyError` when over the share."""
        with self._lock:
            # a waiter that could start has always started (every release hands places on), so nobody whom this
            # request would overtake is waiting when both limits leave room
            if self._total < self.capacity and self._running.get(caller, 0) < self.per_agent:
                self._take(caller)
                return None
            mine = self._queues.get(caller)
            mine_waiting = len(mine) if mine else 0
            others_wait = self._waiting > mine_waiting
            if others_wait and self._running.get(caller, 0) + mine_waiting >= self.per_agent:
                raise BusyError(
                    f"this agent already has {self._running.get(caller, 0) + mine_waiting} searches or queries "
                    f"running or waiting while other agents wait (its fair share is {self.per_agent}); "
                    "retry after the time given",
                    retry_after=self._retry_after(),
                )
            if self._waiting >= MAX_QUEUED:
                raise BusyError(
                    f"{self._waiting} searches or queries are waiting in this process (at most {MAX_QUEUED}); "
                    "retry after the time given",
                    retry_after=self._retry_after(),
                )
            if mine_waiting >= self.max_waiting:
                raise BusyError(
                    f"this agent already has {mine_waiting} searches or queries waiting (at most "
                    f"{self.max_waiting}); wait for some to finish, then retry",
                    retry_after=self._retry_after(),
                )
            waiter = _Waiter(caller, loop)
            if mine is None:
                mine = self._queues[caller] = deque()
                self._turns.append(caller)
            mine.append(waiter)
            self._waiting += 1
            return waiter

    def _take(self, caller: str) -> None:
        self._running[caller] = self._running.get(caller, 0) + 1
        self._total += 1

    def _grant_next(self) -> _Waiter | None:
        """Give a place to the first waiter of the next agent in turn below its share; it goes to the back."""
        for _ in range(len(self._turns)):
            caller = self._turns.popleft()
            if self._running.get(caller, 0) >= self.per_agent:
                self._turns.append(caller)  # at its share: its turn passes to the next agent
                continue
            queue = self._queues[caller]
            waiter = queue.popleft()
            if queue:
                self._turns.append(caller)
            else:
                del self._queues[caller]
            self._waiting -= 1
            self._take(caller)
            waiter.granted = True
            return waiter
        return None

    def _give_up(self, waiter: _Waiter, *, refuse: bool = True) -> bool:
        """Take a waiter out of its queue after a time-out (refused) or cancellation; ``True`` if it had a place."""
        with self._lock:
            if waiter.granted:
                return True
            queue = self._queues.get(waiter.caller)
            if queue is not None and waiter in queue:
                queue.remove(waiter)
                self._waiting -= 1
                if not queue:
                    del self._queues[waiter.caller]
                    self._turns.remove(waiter.caller)
            retry_after = self._retry_after()
        if refuse:
            raise BusyError(
                f"no place for this search or query within {self.max_wait:g} s (the service is saturated); "
                "retry after the time given",
                retry_after=retry_after,
            )
        return False

    def _retry_after(self) -> int:
        # whole seconds, at least 1: how long the queue ahead takes to move, from how long places are held
        return max(1, math.ceil(self._held_s * (1 + self._waiting / self.capacity)))
