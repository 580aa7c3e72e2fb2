"""A batch large enough to be copied in (PostgreSQL stages 64 rows or more through COPY) that repeats its
addresses: each run without a repeat is written whole, in order, on every backend."""

from __future__ import annotations

from typing import Any


def test_a_large_batch_that_writes_every_address_twice_keeps_the_later_values(mem: Any) -> None:
    rows = [{"namespace": "big", "key": f"k{i:03}", "value": {"round": r, "i": i}} for r in (1, 2) for i in range(70)]
    items = mem.put_many(rows)
    assert [(it.key, it.version) for it in items] == [(f"k{i:03}", r) for r in (1, 2) for i in range(70)]
    stored = mem.select("big", order="address", limit=100)
    assert [(it.key, it.value, it.version) for it in stored] == [
        (f"k{i:03}", {"round": 2, "i": i}, 2) for i in range(70)
    ]
    assert all(v.value["round"] == 1 for v in mem.history("big", "k042"))
