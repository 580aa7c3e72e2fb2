"""The PostgreSQL store's own rules that the conformance suite cannot see (it asks what, not how often).

Guards ``src/memlane/store/postgres.py``: the query-space runner is made once
per store (it reads the schema, the role and the text search configuration
when made, and the query space's statements share it).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import memlane


@pytest.fixture
def pg_url(postgres) -> Iterator[str]:  # type: ignore[no-untyped-def]
    url = postgres.create()
    yield url
    postgres.drop(url)


def test_the_query_runner_is_made_once_per_store(pg_url: str) -> None:
    with memlane.open(pg_url, embedder=None) as mem, memlane.open(pg_url, embedder=None) as other:
        runner = mem.store.query_runner()
        assert mem.store.query_runner() is runner
        assert other.store.query_runner() is not runner
        mem.put("agent/a", "k", 1)
        assert mem.query("SELECT key FROM items").rows == [["k"]]
        assert mem.store.query_runner() is runner
