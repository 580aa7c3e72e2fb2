"""``memlane.AsyncClient`` from an event loop: many tasks at once, absent answers, refusals, plugged-in code.

The conformance suite runs every operation through it (backend ``async_client``) and the transport tests
(tests/test_client_retry.py) run its retries and failover.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import memlane
from live import LiveServer
from memlane.core.access import Access
from memlane.server import create_app


@pytest.fixture
def served(tmp_path: Path) -> Any:
    mem = memlane.open(tmp_path / "aio.db", embedder=None)
    _, token = Access(mem).create_agent("tester", admin=True)
    server = LiveServer(create_app(mem))
    yield server.url, token
    server.stop()
    mem.close()


def test_many_concurrent_calls_each_get_their_own_answer(served: Any) -> None:
    """500 tasks at once over one client: the connection pool is shared, the answers never crossed, and the
    event loop is never held by a call."""
    url, token = served

    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    async def main() -> list[Any]:
        async with memlane.AsyncClient(url, token) as client:
            await asyncio.gather(*(client.put("notes", f"n{i}", {"i": i}) for i in range(100)))
            ticker = asyncio.create_task(tick())
            got = await asyncio.gather(*(client.get("notes", f"n{i % 100}") for i in range(500)))
            ticker.cancel()
            return got

    got = asyncio.run(main())
    assert [item.value["i"] for item in got] == [i % 100 for i in range(500)]
    assert ticks >= 20  # the event loop stayed free while the calls were in flight


def test_a_missing_item_and_a_refusal_come_back_as_the_sync_client_says(served: Any) -> None:
    url, token = served

    async def main() -> None:
        async with memlane.AsyncClient(url, token) as client:
            assert await client.get("notes", "absent") is None  # a 404 that means "nothing there"
            assert await client.delete("notes", "absent") is False
            with pytest.raises(memlane.ValidationError) as e:
                await client.put("notes", "bad..key", 1)
            assert e.value.field == "key"

    asyncio.run(main())


def test_an_extractor_runs_off_the_loop_and_files_through_the_client(served: Any) -> None:
    url, token = served
    seen: list[str] = []

    class Extract:
        def extract(self, turns: Any) -> Any:
            from memlane.domain.extract import Extraction

            seen.append(threading.current_thread().name)
            return Extraction()

    async def main() -> None:
        loop_thread = threading.current_thread().name
        async with memlane.AsyncClient(url, token) as client:
            items = await client.add_conversation("chat", [{"speaker": "a", "text": "hello"}], extractor=Extract())
        assert len(items) == 1 and seen and seen[0] != loop_thread

    asyncio.run(main())
