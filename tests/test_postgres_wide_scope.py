"""PostgreSQL's lexical search in a scope of more prefixes than ``SMALL_SCOPE``, where the prefixes go to the
statement as arrays (``under_any_params``) instead of one index range each: exactly the scope's rows."""

from __future__ import annotations

from typing import Any

import memlane
from memlane.core.access import AgentView, Scope
from memlane.store import _common as c


def test_a_lexical_search_in_a_scope_wider_than_small_scope_finds_exactly_its_rooms(postgres: Any) -> None:
    url = postgres.create()
    mem = memlane.open(url, embedder=None)
    try:
        rooms = [("room", f"r{i:02d}") for i in range(c.SMALL_SCOPE + 4)]
        outside = [("room", "r00-b"), ("room", "zz"), ("team", "t")]
        mem.put_many([{"namespace": ns, "key": "doc", "value": "orchid note"} for ns in rooms + outside])
        read = (("agent", "reader"), *rooms)
        view = AgentView(mem, Scope(read, read), "reader")
        hits = view.search("orchid", limit=100, channels=["lexical"]).hits
        assert sorted(h.namespace for h in hits) == sorted(rooms)
    finally:
        mem.close()
        postgres.drop(url)
