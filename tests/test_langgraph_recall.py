"""LangGraph's own vector-search checks through MemlaneStore, with memlane's default write-behind indexing.

A LangGraph store finds an item by vector right after ``put`` and scores a
vector search by cosine similarity, the top matches however weak. memlane's
writes never wait for the model, so these hold because a search embeds its
scope's waiting items first (read-your-writes). Translated from LangGraph's
``test_embed_with_path``; on SQLite, PostgreSQL and the Client (``mem``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("langgraph.store.base")

from memlane import Client  # noqa: E402
from memlane.domain.search.embedders import FakeEmbedder  # noqa: E402
from memlane.langgraph import MemlaneStore  # noqa: E402

pytestmark = pytest.mark.background_indexing

FAKE_DIMS = 64


def _cosine(a: str, b: str) -> float:
    va, vb = FakeEmbedder().embed_batch([a, b])
    return float(np.dot(va, vb))


def test_embed_with_path_right_after_the_writes(mem: Any) -> None:
    store = MemlaneStore(mem, index={"dims": FAKE_DIMS, "fields": ["key0", "key1", "key3"]})
    store.put(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})  # key0 left out: no error
    store.put(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
    results = store.search(("test",), query="xxx")  # no wait: the search embeds what the puts left waiting
    assert len(results) == 2 and results[0].key != results[1].key
    indexed = {"doc1": ["xxx", "zzz"], "doc2": ["uuu", "vvv", "xxx"]}
    for r in results:
        # a cosine similarity, not a fused score: as LangGraph, the best of the item's fields where the store
        # embeds here; over a Client (the service embeds) the item's one vector of its joined fields
        best = max(_cosine("xxx", text) for text in indexed[r.key])
        assert r.score == pytest.approx(r.channel_scores["vector"] if isinstance(mem, Client) else best, abs=1e-5)
    only_doc2 = store.search(("test",), query="uuu")
    assert len(only_doc2) == 2 and only_doc2[0].key == "doc2" and only_doc2[0].score > only_doc2[1].score
    only_doc1 = store.search(("test",), query="zzz")
    assert len(only_doc1) == 2 and only_doc1[0].key == "doc1" and only_doc1[0].score > only_doc1[1].score
    # an unindexed field does not count: "yyy" is in doc1's value, not in what it indexes
    assert store.search(("test",), query="yyy")[0].score < 0.5


def test_a_vector_search_answers_the_k_nearest_however_far(mem: Any) -> None:
    store = MemlaneStore(mem, index={"dims": FAKE_DIMS, "fields": ["text"]})
    for i, text in enumerate(["alpine lake", "desert wind", "city traffic"]):
        store.put(("far",), f"p{i}", {"text": text})
    results = store.search(("far",), query="quarterly tax paperwork", limit=3)
    assert len(results) == 3  # never "nothing relevant": a store answers its top matches
    expected = sorted(_cosine("quarterly tax paperwork", t) for t in ["alpine lake", "desert wind", "city traffic"])
    assert [r.score for r in results] == pytest.approx(expected[::-1], abs=1e-5)


class Counting(FakeEmbedder):
    """The fake embedder, recording every text it embeds."""

    def __init__(self) -> None:
        super().__init__(FAKE_DIMS)
        self.texts: list[str] = []

    def embed_batch(self, texts: Any) -> list[list[float]]:
        self.texts.extend(texts)
        return super().embed_batch(texts)


@pytest.mark.parametrize("fields", [["text"], ["title", "text"]])
def test_a_search_embeds_its_query_once_however_many_pages_its_filter_reads(tmp_path: Any, fields: list[str]) -> None:
    import memlane

    counting = Counting()
    with memlane.open(str(tmp_path / "lg.db"), embedder=counting, indexing="sync") as mem:
        store = MemlaneStore(mem, index={"dims": FAKE_DIMS, "fields": fields})
        for i in range(120):  # one in ten passes the filter: the search reads page after page
            store.put(("docs",), f"d{i}", {"title": f"note {i}", "text": f"red car number {i}", "keep": i % 10 == 0})
        counting.texts.clear()
        results = store.search(("docs",), query="red car", filter={"keep": True}, limit=12)
        assert len(results) == 12 and all(r.value["keep"] for r in results)
        assert counting.texts.count("red car") == 1
