"""The query space shows an agent exactly what it may read, at every depth a grant or room can have.

On SQLite a row's ancestor at each depth is computed per row (deeper than two segments by a function of the
read-only connection): the namespaces here hold their ancestor at every depth beside siblings that share its
first characters, and grants reach 1 to 8 segments deep.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane.core.access import Access
from memlane.store.query_space import sqlite_head

SEGMENTS = ["a", "ab", "a-b", "b"]


def under(namespace: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return namespace[: len(prefix)] == prefix


def test_an_agent_sees_through_the_views_what_its_grants_reach_at_every_depth(store_url: str) -> None:
    deep = ("a", "b", "c", "d", "e", "f", "g", "h")  # 8 segments: the deepest namespace there is
    namespaces = [deep[:n] for n in range(1, 9)] + [deep[:n] + ("ab",) for n in range(1, 8)] + [("a", "bb")]
    with memlane.open(store_url, embedder=None) as mem:
        mem.put_many([{"namespace": ns, "key": "k", "value": len(ns)} for ns in namespaces])
        access = Access(mem)
        for depth in (1, 2, 3, 5, 7):
            name = f"reader{depth}"
            access.create_agent(name)
            access.grant(name, deep[:depth], "read")
            seen = access.view(access.agent(name)).query("SELECT namespace FROM items ORDER BY namespace").rows
            want = sorted("/".join(ns) for ns in namespaces if under(ns, deep[:depth]))
            assert sorted(r[0] for r in seen) == want, depth


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=8), st.integers(1, 8))
def test_the_head_function_is_the_ancestor_at_that_depth(segments: list[str], depth: int) -> None:
    namespace = "/".join(segments)
    # a model apart from the function's slicing: the longest proper ancestor of at most ``depth`` segments,
    # found among every proper ancestor ('' for a namespace of one segment)
    ancestors = ["/".join(segments[:n]) for n in range(len(segments))]
    expected = max((a for a in ancestors if (a.count("/") + 1 if a else 0) <= depth), key=len)
    assert sqlite_head(namespace, depth) == expected
    assert sqlite_head(None, depth) is None
