"""Attacks on the SQLite store's filtered reads (review of #37): what a conformance test cannot reach."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import memlane


def test_a_filtered_vector_search_binds_no_variable_per_candidate(tmp_path: Path) -> None:
    # the window of the cache's nearest was bound one id per variable: past SQLite's variable limit (999 before
    # 3.32, 32,766 since, unless raised at build time) a filtered vector search failed (StoreError, HTTP 500)
    with memlane.open(tmp_path / "m.db", embedder="fake", indexing="sync") as mem:
        mem.put_many([{"namespace": "big", "key": f"k{i:04}", "value": f"item {i}", "metadata": {"m": i % 2}}
                      for i in range(1100)])  # fmt: skip
        mem.put("other", "k", "item elsewhere")
        mem._store._conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
        env = mem.search("item 5", namespace_prefix="big", channels=["vector"], limit=5, where={"metadata.m": 1})
        assert len(env.hits) == 5 and all(h.item.metadata["m"] == 1 for h in env.hits)


@pytest.mark.parametrize("operator", ["$and", "$or", "$not", "$nor"])
def test_a_logical_operator_where_a_field_path_goes_is_refused_naming_where(tmp_path: Path, operator: str) -> None:
    """Read as a value field, ``{"$or": [...]}`` matched nothing and said nothing; a value field of that name is
    still reachable as ``value.$or``."""
    with memlane.open(str(tmp_path / "m.db"), embedder=None) as mem:
        mem.put("n", "k", {operator: 1, "kind": "a"})
        for call in (
            lambda: mem.select("n", where={operator: [{"kind": "a"}]}),
            lambda: mem.search("kind", where={operator: [{"kind": "a"}]}),
        ):
            with pytest.raises(memlane.ValidationError, match=r"where: .*not supported.*value\."):
                call()
        assert [i.key for i in mem.select("n", where={f"value.{operator}": 1})] == ["k"]


def test_a_keyed_recall_with_where_finds_matches_past_ten_thousand_newer_addresses(tmp_path: Path) -> None:
    """The conditions are part of the keyed fetch's statement: it filtered the 10,001 newest addresses in Python,
    so a match older than those was never found."""
    with memlane.open(str(tmp_path / "m.db"), embedder=None) as mem:
        mem.put("users/old", "profile", {"plan": "pro"})
        mem.put_many([{"namespace": f"users/u{i}", "key": "profile", "value": {"plan": "free"}} for i in range(10_050)])
        env = mem.recall("profile", key="profile", where={"plan": "pro"}, limit=1)
        assert [(h.item.namespace, h.item.value) for h in env.hits] == [(("users", "old"), {"plan": "pro"})]
        assert not env.truncated
