"""The PostgreSQL store's own rules that the conformance suite cannot see (it asks what, not how often).

Guards ``src/memlane/store/postgres.py``: the query-space runner is made once
per store (it reads the schema, the role and the text search configuration
when made, and the query space's statements share it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

import memlane


@pytest.fixture
def pg_url(postgres) -> Iterator[str]:  # type: ignore[no-untyped-def]
    url = postgres.create()
    yield url
    postgres.drop(url)


def test_the_query_runner_is_made_once_per_store(pg_url: str) -> None:
    with memlane.open(pg_url, embedder=None) as mem, memlane.open(pg_url, embedder=None) as other:
        store: Any = mem.store  # the PostgreSQL store (the Store protocol does not name query_runner)
        runner = store.query_runner()
        assert store.query_runner() is runner
        assert cast(Any, other.store).query_runner() is not runner
        mem.put("agent/a", "k", 1)
        assert mem.query("SELECT key FROM items").rows == [["k"]]
        assert store.query_runner() is runner


@pytest.mark.parametrize("awaited", [False, True], ids=["sync", "async"])
def test_get_many_over_many_chunks_answers_from_one_snapshot(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, awaited: bool
) -> None:
    """Another connection commits between the first chunk's statement and the second's: the answer is still
    one snapshot, on the synchronous path and on AsyncMemory's native one."""
    import asyncio

    from memlane.store import postgres

    n = 1001  # two chunks: the last address is read by the second statement
    with memlane.open(pg_url, embedder=None) as mem, memlane.open(pg_url, embedder=None) as writer:
        mem.put_many([{"namespace": "agent/a", "key": f"k{i:04}", "value": "before"} for i in range(n)])
        chunks = postgres._address_chunks
        wrote: list[bool] = []

        def write_between_chunks(addresses, at):  # type: ignore[no-untyped-def]
            for number, params in enumerate(chunks(addresses, at)):
                if number == 1:  # the first chunk's statement has run: another connection commits a change
                    wrote.append(True)
                    writer.put("agent/a", f"k{n - 1:04}", "after")
                yield params

        monkeypatch.setattr(postgres, "_address_chunks", write_between_chunks)
        addresses = [("agent/a", f"k{i:04}") for i in range(n)]
        if awaited:

            async def read() -> list[Any]:
                amem = memlane.AsyncMemory(mem)
                got = await amem.get_many(addresses)
                await mem._aclose()
                return got

            got = asyncio.run(read())
        else:
            got = mem.get_many(addresses)
        assert wrote and len(got) == n and {item.value for item in got if item is not None} == {"before"}
        assert writer.get("agent/a", f"k{n - 1:04}").value == "after"  # type: ignore[union-attr]
