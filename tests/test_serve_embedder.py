"""``memlane serve --embedder SPEC --workers N``: every worker embeds with the full spec, not the name alone.

A worker opened with ``fake`` (64 dimensions) over a store of ``fake:384``
vectors would nominate nothing from vectors on every search.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import memlane
from memlane.core.access import Access
from test_workers import Service, call, db  # noqa: F401  (db: the sqlite and postgres fixture)

pytestmark = pytest.mark.slow

NOTES = {
    "car": "I drive a blue hatchback to work every morning",
    "food": "Lunch is usually a bowl of ramen noodles",
    "trip": "The summer trip goes to the mountains of Norway",
    "pet": "The cat sleeps on the radiator all winter",
}
QUERIES = ["blue hatchback", "ramen noodles for lunch", "mountains of Norway", "cat on the radiator"]


def test_every_search_through_every_worker_nominates_from_vectors(db, tmp_path: Path):  # noqa: F811
    with memlane.open(db, embedder="fake:384", indexing="sync") as mem:
        access = Access(mem)
        token = access.create_agent("alice")[1]
        access.create_room("eng")
        access.add_member("eng", "alice")
        for key, text in NOTES.items():
            mem.put("room/eng", key, text)
    svc = Service(db, tmp_path, embedder="fake:384", workers=2)
    try:
        conns = svc.per_worker()
        for conn in conns.values():
            for query in QUERIES:
                status, env = call(conn, "/v1/search", token, {"query": query})
                assert status == 200, env
                assert env["counts"]["vector"] > 0, (query, env["counts"], env["notes"])
            # a write through the worker is embedded with the same spec: found by vectors alone
            status, _ = call(conn, "/v1/put", token, {"namespace": "room/eng", "key": "bike", "value": "red bicycle"})
            assert status == 200
    finally:
        assert svc.stop() == 0
    with memlane.open(db) as mem:  # the store still records the full spec, and every vector has its dimension
        assert mem.embedder is not None and mem.embedder.dimension == 384
        mem.wait_indexed(timeout=30)
        env = mem.search("red bicycle", channels=["vector"])
        assert env.hits and env.hits[0].key == "bike"
