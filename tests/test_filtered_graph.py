"""A ``where`` that many items meet is answered from the HNSW graph's nearest (#37), as a search without one is.

Without this, every filtered vector search scanned the whole index exactly, so at 1M items a filter matching
half of them cost the exact scan (50 ms) where the search without it asked the graph (8 ms).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import memlane
from benchmods import bench_module
from memlane.store import vector_index as vi

ROOT = Path(__file__).resolve().parents[1]


def _exact_filtered(mem: memlane.Memory, query: list[float], share: int, k: int) -> list[str]:
    """The exact ranking of the whole store with the rows failing ``bucket < share`` taken out."""
    ranked = mem.store.vector(query, [()], 10**6)  # no graph for a k this large: every row, exactly
    keep = mem.store.hydrate([r[0] for r in ranked], [()], mem._clock(), [(("metadata", "bucket"), "$lt", share)])  # type: ignore[attr-defined]
    return [r[0] for r in ranked if r[0] in keep][:k]


def test_a_broad_filter_asks_the_graph_and_a_selective_one_still_finds_k(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("usearch")
    Corpus = bench_module("search").Corpus

    monkeypatch.setattr(vi, "GRAPH_MIN", 2000)
    monkeypatch.setattr(vi, "APPROX_MIN", 2000)
    n = 6000
    corpus = Corpus(seed=5, namespaces=20)
    path = str(tmp_path / "m.db")
    mem = memlane.open(path, embedder="fake:64", indexing="sync")
    try:
        for start in range(0, n, 1000):
            rows = corpus.batch(start, start + 1000)
            for i, row in enumerate(rows, start):
                row["metadata"] = {"bucket": i % 100}
            mem.put_many(rows)
        assert mem.store.fold_vectors(min_delta=1)
        queries = mem.embedder.embed_batch(corpus.queries("natural", 30))  # type: ignore[union-attr]
        mem.store.vector(queries[0], [()], 10)  # opens the shared index
        shared = mem.store._vectors  # type: ignore[attr-defined]
        assert shared.approximate_searches == 1
        for share in (50, 20):  # half the store, a fifth
            before = shared.approximate_searches
            found = 0
            for q in queries:
                got = mem.store.vector(q, [()], 10, [(("metadata", "bucket"), "$lt", share)])
                ids = [g[0] for g in got]
                assert len(ids) == 10
                items = mem.store.hydrate(ids, [()], mem._clock(), [(("metadata", "bucket"), "$lt", share)])  # type: ignore[attr-defined]
                assert set(items) == set(ids)  # every hit meets the filter
                found += len(set(ids) & set(_exact_filtered(mem, q, share, 10)))
            assert shared.approximate_searches - before == len(queries)
            assert found / (10 * len(queries)) >= 0.9  # the graph's recall, as without a filter
        # a selective filter (1 %): too few of the graph's nearest meet it; the exact answer, k of them
        for q in queries[:10]:
            got = [g[0] for g in mem.store.vector(q, [()], 10, [(("metadata", "bucket"), "$lt", 1)])]
            assert got == _exact_filtered(mem, q, 1, 10)
    finally:
        mem.close()
