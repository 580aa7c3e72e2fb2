"""``memlane.AsyncMemory`` on PostgreSQL: the exact reads on psycopg's async connections, on the event loop.

The conformance suite runs every operation through ``AsyncMemory`` on both backends (``async``,
``async_postgres``). These tests pin what only the native path has: no worker thread for the reads, a pool per
event loop, calls cancelled mid-flight, closing, and reads that see the writes made through the threads.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import memlane
from memlane.store.postgres import PostgresStore
from memlane.values.errors import ConflictError, StoreError, ValidationError

READS = ("get", "exists", "get_many", "fetch", "list", "namespaces", "select", "history")
WRITES = ("put_many", "delete")  # the store's verbs under put, put_many and delete


@pytest.fixture
def pg_url(postgres: Any) -> Iterator[str]:
    url = postgres.create()
    yield url
    postgres.drop(url)


@pytest.fixture
def mem(pg_url: str) -> Iterator[memlane.Memory]:
    with memlane.open(pg_url, embedder=None) as m:
        yield m


async def _reads(amem: memlane.AsyncMemory) -> list[Any]:
    return [
        (await amem.get("notes/a", "k1")).value,
        await amem.exists("notes/a", "k1"),
        await amem.exists("notes/a", "gone"),
        [None if i is None else i.value for i in await amem.get_many([("notes/a", "k1"), ("notes/b", "x")])],
        [i.namespace for i in await amem.fetch("k1")],
        [i.key for i in (await amem.list("notes", limit=1)).items],
        await amem.namespaces("notes"),
        [i.namespace for i in await amem.select("notes", where={"v": {"$gte": 2}})],
        [version.value for version in await amem.history("notes/a", "k1")],
    ]


def test_the_reads_and_writes_run_on_the_event_loop_without_the_synchronous_store(
    mem: memlane.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the store's synchronous verbs and every worker thread taken away, the exact reads and the item writes
    still answer: a conflict refused and rolled back, 70 records (past the batch size that goes through COPY), a
    delete into history."""
    mem.put("notes/a", "k1", {"v": 0})
    mem.put("notes/a", "k1", {"v": 1})
    mem.put("notes/c", "k1", {"v": 3})
    expected = [
        {"v": 1}, True, False, [{"v": 1}, None], [("notes", "c"), ("notes", "a")], ["k1"],
        [("notes", "a"), ("notes", "c")], [("notes", "c")], [{"v": 0}],
    ]  # fmt: skip

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a native read reached the synchronous store or a worker thread")

    for name in READS + WRITES:
        monkeypatch.setattr(PostgresStore, name, refused)
    monkeypatch.setattr(asyncio, "to_thread", refused)

    async def main() -> list[Any]:
        amem = memlane.AsyncMemory(mem)
        got = await _reads(amem)
        written = await amem.put("notes/d", "k1", {"v": 4}, ttl=60)
        with pytest.raises(ConflictError):
            await amem.put("notes/d", "k1", {"v": 5}, if_absent=True)  # refused, rolled back: the next write is fine
        many = await amem.put_many([{"namespace": "notes/d", "key": f"m{i}", "value": i} for i in range(70)])
        got.append([written.version, len(many), many[-1].value])
        got.append([await amem.delete("notes/d", "m0"), await amem.delete("notes/d", "m0")])
        got.append([(await amem.get("notes/d", "k1")).value, [v.value for v in await amem.history("notes/d", "m0")]])
        await amem.sync._aclose()
        return got

    assert asyncio.run(main()) == [*expected, [1, 70, 69], [True, False], [{"v": 4}, [0]]]
    monkeypatch.undo()
    assert mem.get("notes/d", "k1").expires_at is not None and len(mem.list("notes/d", limit=100).items) == 70


def test_many_tasks_read_their_own_writes(mem: memlane.Memory) -> None:
    """Each task writes (in a worker thread, on the synchronous pool) then reads natively: it sees its write."""

    async def one(amem: memlane.AsyncMemory, i: int) -> tuple[Any, ...]:
        await amem.put("tasks", f"t{i}", {"i": i})
        seen = await amem.get("tasks", f"t{i}")
        await amem.put("tasks", f"t{i}", {"i": i, "again": True})
        page = await amem.list("tasks", key_prefix=f"t{i}", limit=1)
        return seen.value, page.items[0].value, await amem.exists("tasks", f"t{i}")

    async def main() -> list[tuple[Any, ...]]:
        amem = memlane.AsyncMemory(mem)
        got = await asyncio.gather(*(one(amem, i) for i in range(40)))
        await amem.sync._aclose()
        return got

    for i, (first, second, there) in enumerate(asyncio.run(main())):
        assert first == {"i": i}
        assert second["i"] == i  # t1's page can start at t1 itself or t10...: each has i's own prefix first
        assert there is True


def test_each_event_loop_gets_its_own_pool(mem: memlane.Memory) -> None:
    """One memory used from successive ``asyncio.run`` calls and from threads with loops of their own."""
    mem.put("notes/a", "k1", {"v": 1})
    amem = memlane.AsyncMemory(mem)

    async def read() -> Any:
        got = (await amem.get("notes/a", "k1")).value
        await amem.sync._aclose()
        return got

    assert asyncio.run(read()) == {"v": 1}
    assert asyncio.run(read()) == {"v": 1}  # the first loop's pool is closed and gone; a new one opens

    results: list[Any] = []

    def in_thread() -> None:
        results.append(asyncio.run(read()))

    threads = [threading.Thread(target=in_thread) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [{"v": 1}] * 4


def _connections(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def _settles(url: str, at_most: int) -> int:
    """The connections to the test database once the server has seen the closed ones go (it takes a moment)."""
    import time

    for _ in range(50):
        if (now := _connections(url)) <= at_most:
            return now
        time.sleep(0.05)
    return _connections(url)


def test_loops_that_end_without_closing_leave_no_connections_behind(mem: memlane.Memory, pg_url: str) -> None:
    """A program that runs ``asyncio.run(...)`` again and again, never closing: each loop's pool is closed as
    the loop ends (asyncio.run closes its async generators); a loop closed by hand is swept at the next loop's
    first read. The server's connection count stays where it was."""
    import gc

    mem.put("notes/a", "k1", {"v": 1})
    amem = memlane.AsyncMemory(mem)
    before = _connections(pg_url)
    for _ in range(12):
        assert asyncio.run(amem.exists("notes/a", "k1")) is True
    assert _settles(pg_url, before) == before
    for _ in range(12):
        loop = asyncio.new_event_loop()
        assert loop.run_until_complete(amem.exists("notes/a", "k1")) is True
        loop.close()  # no shutdown_asyncgens: nothing closed the pool on this loop
    gc.collect()
    assert asyncio.run(amem.exists("notes/a", "k1")) is True  # sweeps the closed loops' pools
    gc.collect()
    assert _settles(pg_url, before) == before


def test_after_the_server_drops_its_connections_one_read_fails_and_the_next_connect_anew(
    mem: memlane.Memory, pg_url: str
) -> None:
    """As after a server restart: every idle async connection is dead. One read says so (``StoreError``); the
    others, idle too, are dropped with it, so the next read connects anew and answers."""
    import psycopg

    mem.put("notes/a", "k1", {"v": 1})

    async def main() -> list[Any]:
        amem = memlane.AsyncMemory(mem)
        await asyncio.gather(*(amem.get("notes/a", "k1") for _ in range(6)))  # several idle connections now
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        outcomes: list[Any] = []
        for _ in range(3):
            try:
                outcomes.append((await amem.get("notes/a", "k1")).value)
            except StoreError as e:
                outcomes.append(type(e).__name__)
        await amem.sync._aclose()
        return outcomes

    outcomes = asyncio.run(main())
    assert outcomes[-2:] == [{"v": 1}, {"v": 1}], outcomes
    assert outcomes[0] in ("StoreUnavailableError", {"v": 1})  # the connection was lost: the database is away


def test_closing_while_reads_are_in_flight_leaves_no_connection_and_refuses_the_next_read(pg_url: str) -> None:
    """``aclose`` with reads still running: those finish, and memlane closes their connections (none is left
    for the collector, which would warn); the synchronous ``close()`` on a loop that still holds connections
    closes them at once and refuses the loop's next read."""
    import warnings

    mem = memlane.open(pg_url, embedder=None)
    mem.put("notes/a", "k1", {"v": 1})
    before = _connections(pg_url) - 2  # the synchronous pool's and reader's, which close with the memory

    async def main() -> list[Any]:
        amem = memlane.AsyncMemory(mem)
        reads = [asyncio.create_task(amem.get("notes/a", "k1")) for _ in range(8)]
        await asyncio.sleep(0)  # every read has started
        await mem._aclose()
        got = [(await r).value for r in reads]
        await asyncio.gather(*(amem.exists("notes/a", "k1") for _ in range(4)))  # a new set, with idle ones
        mem.close()  # the synchronous close, while this loop still holds them
        assert _settles(pg_url, before) == before  # closed now, not when the loop ends
        with pytest.raises(StoreError, match="closed"):
            await amem.get("notes/a", "k1")
        await mem._aclose()
        return got

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert asyncio.run(main()) == [{"v": 1}] * 8
        import gc

        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]
    assert _settles(pg_url, before) == before


def test_reads_during_a_slow_close_leave_no_connection_open(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``await AsyncMemory.close()`` waits for the indexer's batch before it closes the store; reads that come
    meanwhile may open connections, and the close still closes every one, while the loop goes on."""
    import time

    mem = memlane.open(pg_url, embedder=None)
    mem.put("notes/a", "k1", {"v": 1})
    before = _connections(pg_url) - 2
    stop = mem._indexer.stop
    monkeypatch.setattr(mem._indexer, "stop", lambda: (time.sleep(0.3), stop())[1])

    async def main() -> int:
        amem = memlane.AsyncMemory(mem)
        closing = asyncio.create_task(amem.close())
        await asyncio.sleep(0.05)  # the close is in the indexer's wait
        await asyncio.gather(*(amem.get("notes/a", "k1") for _ in range(4)), return_exceptions=True)
        await closing
        return _settles(pg_url, before)  # the loop still runs

    assert asyncio.run(main()) == before


def test_an_error_that_leaves_the_connection_sound_keeps_the_idle_ones(pg_url: str) -> None:
    """A lock timeout (an OperationalError, like a statement timeout or a deadlock) ends one write; its
    connection rolled back and is sound, so neither it nor the loop's idle connections are thrown away."""
    import psycopg

    joiner = "&" if "?" in pg_url else "?"
    with memlane.open(pg_url + joiner + "options=-c%20lock_timeout%3D200", embedder=None) as mem:
        mem.put("notes/a", "k1", {"v": 1})

        async def main() -> tuple[int, int, Any]:
            amem = memlane.AsyncMemory(mem)
            await asyncio.gather(*(amem.get("notes/a", "k1") for _ in range(6)))
            mine = mem.store._loops[asyncio.get_running_loop()]  # type: ignore[attr-defined]
            idle = len(mine._idle)
            with psycopg.connect(pg_url) as holder:
                holder.execute("SELECT 1 FROM items WHERE key = 'k1' FOR UPDATE")  # held until the block ends
                with pytest.raises(StoreError, match="lock"):
                    await amem.put("notes/a", "k1", {"v": 2})
            after = len(mine._idle)
            value = (await amem.get("notes/a", "k1")).value
            await mem._aclose()
            return idle, after, value

        idle, after, value = asyncio.run(main())
    assert idle >= 2 and after == idle and value == {"v": 1}


def test_calls_cancelled_mid_flight_leave_every_connection_answering_its_own_question(mem: memlane.Memory) -> None:
    """Reads cut off at random points (while the pool opens, while a statement runs) never leave a connection
    that answers the next caller with another question's rows."""
    mem.put_many([{"namespace": "many", "key": f"k{i}", "value": {"i": i}} for i in range(50)])

    async def main() -> list[Any]:
        amem = memlane.AsyncMemory(mem)
        for round_ in range(5):
            tasks = [asyncio.create_task(amem.get("many", f"k{i}")) for i in range(50)]
            await asyncio.sleep(0.0005 * round_)
            for task in tasks[::2]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        answers = await asyncio.gather(*(amem.get("many", f"k{i % 50}") for i in range(200)))
        listed = await asyncio.gather(*(amem.list("many", key_prefix=f"k{i}", limit=1) for i in range(50)))
        await amem.sync._aclose()
        return [a.value["i"] for a in answers] + [p.items[0].key for p in listed]

    got = asyncio.run(main())
    assert got == [i % 50 for i in range(200)] + [f"k{i}" for i in range(50)]


def test_a_closed_memory_refuses_reads_and_a_bad_argument_is_refused_before_any_connection(pg_url: str) -> None:
    async def main() -> None:
        amem = await memlane.aio.open(pg_url, embedder=None)
        with pytest.raises(ValidationError, match="namespace"):
            await amem.get("", "k")  # checked on the loop, as the synchronous get checks it
        assert amem.sync.store._loops.get(asyncio.get_running_loop()) is None
        assert await amem.get("notes", "k") is None
        await amem.close()
        with pytest.raises(StoreError, match="closed"):
            await amem.get("notes", "k")

    asyncio.run(main())


def test_the_store_says_which_reads_are_native() -> None:
    from memlane.store.sqlite import SqliteStore

    assert PostgresStore.native_async is True
    assert SqliteStore.native_async is False  # its reads are the base's: the synchronous read in a worker thread
    for name in READS + WRITES:
        assert f"a{name}" in vars(PostgresStore)
