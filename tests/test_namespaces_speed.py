"""The stores' skip-scan ``namespaces`` gives exactly the live namespaces inside a scope.

``namespaces`` seeks one namespace at a time instead of reading every row (see
``memlane.store._common.skip_scan``); these tests hold it to the plain
definition on generated data: namespaces that look like prefixes of each other
(``a``, ``a.b``, ``a!``, ``a/b``), expired rows before, between and after live
ones, and scopes of several prefixes, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane.store._common import EVERYTHING

SEGMENTS = ["a", "a.b", "a!", "b", "a0", "c"]
namespaces = st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=2).map(tuple)
rows = st.lists(st.tuples(namespaces, st.sampled_from(["k", "k2"]), st.sampled_from([None, 5.0, 100.0])), max_size=25)
scopes = st.one_of(
    st.just(EVERYTHING), st.lists(st.lists(st.sampled_from(SEGMENTS), max_size=2).map(tuple), max_size=3)
)


@pytest.fixture
def memory(store_url: str, clock: Any) -> Iterator[Any]:
    m = memlane.open(store_url, clock=clock, indexing="sync")  # no indexer thread racing clear()
    yield m
    m.close()


def _prefixes(written: Any) -> st.SearchStrategy[tuple[str, ...]]:
    """Mostly cut from the written namespaces, so a prefix often equals a stored namespace; ``()`` is everything."""
    stored = st.sampled_from([ns for ns, _, _ in written])
    cut = stored.flatmap(lambda ns: st.integers(1, len(ns)).map(lambda j: ns[:j]))
    other = st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=2).map(tuple)
    return st.one_of(cut, cut, cut, other, st.just(()))


def _inside(ns: tuple[str, ...], within: Any) -> bool:
    return any(ns[: len(prefix)] == prefix for prefix in within)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(written=rows, data=st.data())
def test_namespaces_are_the_live_ones_inside_the_scope(memory: Any, clock: Any, written: Any, data: Any) -> None:
    within = data.draw(st.lists(_prefixes(written), max_size=3) if written else scopes, "within")
    for top in SEGMENTS:  # a fresh store for each example
        memory.clear((top,))
    live: dict[tuple[tuple[str, ...], str], bool] = {}
    for ns, key, ttl in written:
        memory.put(ns, key, {"x": 1}, ttl=ttl)
        live[(ns, key)] = ttl != 5.0
    clock.advance(10)  # the 5 s items are now expired but still stored
    expected = sorted({ns for (ns, _), alive in live.items() if alive and _inside(ns, within)})
    assert memory.store.namespaces(within, clock()) == expected


def test_namespaces_skip_long_runs_of_expired_and_out_of_scope_rows(memory: Any, clock: Any) -> None:
    memory.put_many([{"namespace": ("a", f"n{i % 3}"), "key": f"k{i}", "value": i, "ttl": 5} for i in range(300)])
    memory.put_many([{"namespace": ("b", f"n{i % 4}"), "key": f"k{i}", "value": i} for i in range(300)])
    memory.put(("a", "n1"), "kept", 1)
    clock.advance(10)
    assert memory.namespaces() == [("a", "n1"), ("b", "n0"), ("b", "n1"), ("b", "n2"), ("b", "n3")]
    assert memory.store.namespaces([("a",), ("b", "n2")], clock()) == [("a", "n1"), ("b", "n2")]
    assert memory.store.namespaces([("a", "n0")], clock()) == []
    assert memory.store.namespaces([], clock()) == []
