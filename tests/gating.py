"""Putting a :class:`memlane.values.gate.Gate` in a known state from a test: places held, other agents waiting."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from memlane.values.gate import Gate


@contextmanager
def waiting(gate: Gate, caller: str, count: int = 1) -> Iterator[list[threading.Thread]]:
    """``count`` requests of ``caller`` waiting for a place (threads blocked in ``gate.enter``) until the block ends.

    Each gets its place, and gives it back at once, when places free up after the block.
    """
    before = gate.waiting()
    threads = [threading.Thread(target=_enter_and_leave, args=(gate, caller), daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while gate.waiting() < before + count:
        assert time.monotonic() < deadline, "the waiting requests did not queue"
        time.sleep(0.001)
    yield threads


def _enter_and_leave(gate: Gate, caller: str) -> None:
    with gate.enter(caller):
        pass


@contextmanager
def over_share(gate: Gate, share: str) -> Iterator[None]:
    """``share`` holds its fair share, every other place is held, and another agent waits.

    A request of ``share`` is then refused at once (429): it is over its share while others wait.
    """
    with ExitStack() as held:
        for _ in range(gate.per_agent):
            held.enter_context(gate.enter(share))
        for n in range(gate.capacity - gate.per_agent):
            held.enter_context(gate.enter(f"someone-else-{n}"))
        threads = held.enter_context(waiting(gate, "another-agent"))
        yield
    for t in threads:
        t.join(timeout=10)
