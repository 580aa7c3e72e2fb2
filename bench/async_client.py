"""memlane's async surfaces against the raw async drivers they could use instead of worker threads.

Why the async client runs the Client in worker threads rather than on ``httpx.AsyncClient``: for a
concurrency of C tasks, each doing ``get`` of one address, this measures requests/s of

* ``AsyncClient``: memlane's async client (the synchronous Client in the loop's worker threads);
* ``raw threads``: plain ``httpx.Client.post`` in ``asyncio.to_thread`` (the same design with no memlane code);
* ``raw async``: plain ``await httpx.AsyncClient.post``, the best a native async client could do
  (its connection pool sized to C, every connection kept alive).

The server is a real ``memlane serve --workers 1`` on loopback over a temporary SQLite file; it shares the
machine with this process, so the figures are about the client side's cost at a fixed server.

With ``--postgres``, the same for ``AsyncMemory.get`` and ``AsyncMemory.put`` over PostgreSQL, which run
natively on psycopg's async connections, against the synchronous ``Memory.get`` / ``Memory.put`` in worker
threads (the design they replaced) and a raw ``psycopg`` async pool running a point ``SELECT`` or a one-row
upsert into a two-column table with no memlane code at all (no validation, no scope, no decoding, no history):
an upper bound for a native async store.

Example::

    python bench/async_client.py --concurrency 1,6,32,200 --requests 3000
    python bench/async_client.py --postgres --concurrency 1,6,32
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

import memlane
from memlane.core.access import Access

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import format_table, free_port, machine_info, progress, ratio, write_json  # noqa: E402


async def _rate(send: Any, concurrency: int, requests: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            await send()

    await asyncio.gather(*(one() for _ in range(min(requests, 300))))  # warm: connections open, caches full
    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(requests)))
    return requests / (time.perf_counter() - start)


async def _measure(url: str, token: str, concurrency: int, requests: int) -> dict[str, float]:
    body = {"namespace": "agent/bench", "key": "k"}
    headers = {"Authorization": f"Bearer {token}"}
    out: dict[str, float] = {}
    async with memlane.AsyncClient(url, token) as client:
        out["AsyncClient"] = await _rate(lambda: client.get("agent/bench", "k"), concurrency, requests)
    with httpx.Client(headers=headers) as plain:
        out["raw threads"] = await _rate(
            lambda: asyncio.to_thread(plain.post, f"{url}/v1/get", json=body), concurrency, requests
        )
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers=headers, limits=limits) as native:
        out["raw async"] = await _rate(lambda: native.post(f"{url}/v1/get", json=body), concurrency, requests)
    return out


async def _memory(url: str, concurrency: int, requests: int) -> dict[str, float]:
    from psycopg_pool import AsyncConnectionPool

    out: dict[str, float] = {}
    mem = memlane.open(url, embedder=None)
    mem.put("user/1", "k", {"v": 1})
    amem = memlane.AsyncMemory(mem)
    out["AsyncMemory"] = await _rate(lambda: amem.get("user/1", "k"), concurrency, requests)
    out["threads"] = await _rate(lambda: asyncio.to_thread(mem.get, "user/1", "k"), concurrency, requests)
    async with AsyncConnectionPool(url, min_size=16, max_size=16) as pool:

        async def raw() -> None:
            async with pool.connection() as conn:
                statement = "SELECT value FROM items WHERE namespace = %s AND key = %s"
                await (await conn.execute(statement, ("user/1", "k"))).fetchone()

        out["raw async"] = await _rate(raw, concurrency, requests)

        # writes: AsyncMemory.put (native), Memory.put in worker threads, and the least a native write could
        # cost: a raw async upsert of one small row into a two-column table, committed
        count = iter(range(10**9))
        out["put"] = await _rate(lambda: amem.put("user/1", f"w{next(count) % 500}", {"v": 1}), concurrency, requests)
        out["put threads"] = await _rate(
            lambda: asyncio.to_thread(mem.put, "user/1", f"w{next(count) % 500}", {"v": 1}), concurrency, requests
        )
        async with pool.connection() as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS bench_kv (k text PRIMARY KEY, v text)")
            await conn.commit()

        async def raw_put() -> None:
            async with pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO bench_kv VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                    (f"w{next(count) % 500}", '{"v": 1}'),
                )
                await conn.commit()

        out["raw put"] = await _rate(raw_put, concurrency, requests)
    await amem.close()
    return out


def _postgres(levels: list[int], requests: int) -> None:
    import psycopg

    from _util import pg_url_for, postgres_server

    with postgres_server() as admin:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS bench_async")
            conn.execute("CREATE DATABASE bench_async")
        rows, writes = [], []
        for c in levels:
            progress(f"PostgreSQL, concurrency {c}")
            got = asyncio.run(_memory(pg_url_for(admin, "bench_async"), c, requests))
            writes.append([str(c), f"{got['put']:,.0f}", f"{got['put threads']:,.0f}", f"{got['raw put']:,.0f}",
                           f"{ratio(got['put'], got['put threads']):.2f}x",
                           f"{ratio(got['raw put'], got['put']):.2f}x"])  # fmt: skip
            rows.append([str(c), f"{got['AsyncMemory']:,.0f}", f"{got['threads']:,.0f}", f"{got['raw async']:,.0f}",
                         f"{ratio(got['AsyncMemory'], got['threads']):.2f}x",
                         f"{ratio(got['raw async'], got['AsyncMemory']):.2f}x"])  # fmt: skip
        headers = ["in flight", "AsyncMemory.get /s", "Memory.get in threads /s", "raw psycopg async /s",
                   "native / threads", "raw / AsyncMemory"]  # fmt: skip
        print(format_table(headers, rows))
        print()
        headers = ["in flight", "AsyncMemory.put /s", "Memory.put in threads /s", "raw async upsert /s",
                   "native / threads", "raw / AsyncMemory"]  # fmt: skip
        print(format_table(headers, writes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,6,32,200", help="tasks in flight, comma-separated")
    parser.add_argument("--requests", type=int, default=3000, help="requests per measurement")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--postgres", action="store_true", help="AsyncMemory over PostgreSQL instead of the client")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    if args.postgres:
        _postgres(levels, args.requests)
        return

    folder = Path(tempfile.mkdtemp())
    db = folder / "bench.db"
    with memlane.open(db, embedder=None) as mem:
        _, token = Access(mem).create_agent("bench", admin=True)
        mem.put("agent/bench", "k", {"v": 1})
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("memlane")), "serve", "--db", str(db), "--port", str(port)]
        + ["--workers", "1", "--embedder", "none"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/v1/health", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise SystemExit("memlane serve did not start") from None
                time.sleep(0.1)
        rows, results = [], []
        for c in levels:
            progress(f"concurrency {c}")
            got = asyncio.run(_measure(url, token, c, args.requests))
            results.append({"concurrency": c, **got})
            rows.append(
                [
                    str(c),
                    *(f"{got[k]:,.0f}" for k in ("AsyncClient", "raw threads", "raw async")),
                    f"{ratio(got['raw async'], got['AsyncClient']):.2f}x",
                ]
            )
        print(
            format_table(["in flight", "AsyncClient /s", "raw threads /s", "raw async /s", "async / AsyncClient"], rows)
        )
        if args.json:
            write_json(args.json, {"machine": machine_info(), "results": results})
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
