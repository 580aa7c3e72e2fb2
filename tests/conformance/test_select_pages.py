"""``select``'s pages: ``offset`` skips that many matches in the order asked, on every backend."""

from __future__ import annotations

from typing import Any


def test_select_pages_through_the_matches_in_either_order(mem: Any, clock: Any) -> None:
    for i in range(5):
        mem.put("pages", f"k{i}", {"n": i, "kind": "odd" if i % 2 else "even"})
        clock.advance(1)
    newest = [item.key for item in mem.select("pages", limit=10)]
    assert newest == ["k4", "k3", "k2", "k1", "k0"]
    assert [item.key for item in mem.select("pages", limit=2, offset=2)] == ["k2", "k1"]
    assert [item.key for item in mem.select("pages", order="address", limit=2, offset=3)] == ["k3", "k4"]
    assert [item.key for item in mem.select("pages", where={"kind": "even"}, limit=5, offset=1)] == ["k2", "k0"]
    assert mem.select("pages", limit=5, offset=5) == []
