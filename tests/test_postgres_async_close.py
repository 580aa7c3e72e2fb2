"""PostgreSQL: ``aclose`` closes the async connections an event loop's native reads opened."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

import psycopg

import memlane


def _connections(admin_url: str, name: str) -> int:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()
    return int(row[0]) if row else 0


def test_aclose_closes_the_loops_async_connections(postgres: Any) -> None:
    url = postgres.create()
    name = urlsplit(url).path.lstrip("/")
    mem = memlane.open(url, embedder=None)
    try:
        mem.put("notes", "k", {"v": 1})
        before = _connections(postgres.admin_url, name)
        amem = memlane.AsyncMemory(mem)

        async def main() -> tuple[Any, int, int]:
            got = (await amem.get("notes", "k")).value
            during = _connections(postgres.admin_url, name)
            await amem.sync._aclose()
            deadline = time.monotonic() + 10
            while _connections(postgres.admin_url, name) > before and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return got, during, _connections(postgres.admin_url, name)

        got, during, after = asyncio.run(main())
        assert got == {"v": 1}
        assert during > before  # the loop's reads opened connections of their own
        assert after == before  # aclose closed them
    finally:
        mem.close()
        postgres.drop(url)
