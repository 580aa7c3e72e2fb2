"""The relevance decision's counts (rows in scope, rows holding a word) agree with a count by hand.

A scope of up to ``SMALL_SCOPE`` prefixes is counted through index ranges, a larger one through the prefix
sets: the strategy draws scopes on both sides of that line, with namespaces that share their first
characters with a prefix without lying under it (``a-b`` beside ``a``), and counts capped below and above
what is there.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import memlane
from memlane.store._common import SMALL_SCOPE

SEGMENTS = ["a", "a-b", "ab", "b", "a0", "c"]
NAMESPACES = [(x,) for x in SEGMENTS] + [(x, y) for x in SEGMENTS[:3] for y in SEGMENTS[:4]]
# more prefixes than a small scope holds, so both ways of counting are drawn
PREFIXES = [(), *NAMESPACES] + [(x, y, "z") for x in SEGMENTS for y in SEGMENTS[:3]]


def under(namespace: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return namespace[: len(prefix)] == prefix


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    scope=st.lists(st.sampled_from(PREFIXES), min_size=1, max_size=SMALL_SCOPE + 8, unique=True),
    limit=st.sampled_from([1, 3, 1000]),
)
# the look-alikes the docstring names, on both sides of the small-scope line, whatever the seed draws
@example(scope=[("a",)], limit=1000)
@example(scope=[("a",), ("c",)], limit=1000)
@example(scope=[("a", "a-b"), ("ab",)], limit=1000)
@example(scope=[("a",), *[(x, y, "z") for x in SEGMENTS for y in SEGMENTS[:3]][:SMALL_SCOPE]], limit=1000)
def test_scope_and_word_counts_match_a_count_by_hand(store_url: str, scope: list[Any], limit: int) -> None:
    with memlane.open(store_url, embedder=None) as mem:
        if not mem.list("", limit=1).items:  # the first example writes the items, the others read them
            mem.put_many(
                [
                    {"namespace": ns, "key": f"k{i}", "value": "alpha note" if i % 2 else "beta note"}
                    for ns in NAMESPACES
                    for i in range(3)
                ]
            )
        total, counts = mem.store.document_counts(["alpha", "beta"], scope, limit)
    inside = [ns for ns in NAMESPACES if any(under(ns, p) for p in scope)]
    assert total == min(limit, 3 * len(inside))
    assert counts == {"alpha": min(limit, len(inside)), "beta": min(limit, 2 * len(inside))}
