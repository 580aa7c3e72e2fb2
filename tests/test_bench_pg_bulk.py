"""bench/search.py's bulk PostgreSQL build leaves the store the write-behind indexer leaves.

The 1M figures of #36 on PostgreSQL come from a store built in bulk (items
through ``put_many``, vectors by COPY, the HNSW index made once); they stand
for memlane's own store only if that store is the one the indexer makes: the
same vectors, the same index definition, no marks left, the same embedder
record and the same search results (up to equal scores, which two HNSW graphs
order each their own way).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmods import bench_module

ROOT = Path(__file__).resolve().parents[1]


def test_the_bulk_build_is_the_indexers_store(postgres) -> None:
    pytest.importorskip("numpy")
    verify_bulk = bench_module("search").verify_bulk

    assert verify_bulk(postgres.admin_url, n=500, seed=11, namespaces=20, queries=15, batch=100) == []
