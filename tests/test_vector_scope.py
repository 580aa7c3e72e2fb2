"""Vector nomination inside a scope: only the scope's items, and the true top k where the plan is exact.

On PostgreSQL a scoped search takes one of three plans (see ``PostgresStore.vector``):
an exact scan inside a small scope; inside a large one, the HNSW index's nearest
filtered by the scope; and the exact scan again when too few of those are inside.
These tests build a store where each plan is forced (two well-separated clusters
of known vectors, scopes above and below the exact-scan threshold) and compare
with a brute-force top k. SQLite's brute-force cache must give the same answers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import memlane
from memlane.store._common import EVERYTHING

DIM = 8
K = 10
BIG_A, BIG_B = 1100, 1900  # both above the PostgreSQL store's exact-scan threshold (1000 items)


class TableEmbedder:
    """Embeds ``"v<i>"`` as row ``i`` of a fixed table, so the test knows every vector."""

    name = "table-embedder"
    dimension = DIM

    def __init__(self, table: np.ndarray) -> None:
        self.table = table

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.table[int(t[1:])].tolist() for t in texts]


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    rng = np.random.default_rng(11)
    axis = np.zeros(DIM)
    axis[0] = 1.0
    a = _unit(axis + rng.normal(0, 0.15, (BIG_A, DIM)))  # around +e1
    b = _unit(-axis + rng.normal(0, 0.15, (BIG_B, DIM)))  # around -e1: every b is nearer -e1 than any a
    queries = _unit(np.concatenate([axis + rng.normal(0, 0.15, (6, DIM)), -axis + rng.normal(0, 0.15, (6, DIM))]))
    return np.concatenate([a, b, queries]).astype(np.float32)


@pytest.fixture
def corpus(store_url: str, clock: Any, table: np.ndarray) -> Iterator[tuple[Any, dict[str, tuple[str, ...]]]]:
    mem = memlane.open(store_url, clock=clock, embedder=TableEmbedder(table), indexing="sync")
    records = [
        {"namespace": ("a", f"x{i % 5}") if i < BIG_A else ("b", f"y{i % 5}"), "key": f"k{i}", "value": f"v{i}"}
        for i in range(BIG_A + BIG_B)
    ]
    where: dict[str, tuple[str, ...]] = {}
    for start in range(0, len(records), 500):
        for item in mem.put_many(records[start : start + 500]):
            where[item.id] = item.namespace
    yield mem, where
    mem.close()


def _exact(table: np.ndarray, query: np.ndarray, ids: list[str], inside: list[bool], k: int) -> list[str]:
    scores = table[: len(ids)] @ query
    order = [i for i in np.argsort(-scores, kind="stable") if inside[i]]
    return [ids[i] for i in order[:k]]


SCOPES = [
    [("a",)],  # large: the index path for queries near a, the exact fallback for queries near b
    [("b",)],  # large
    [("a", "x1")],  # small: exact
    [("a", "x1"), ("b", "y2")],  # small, two prefixes: exact
    [("a", "x0"), ("b",)],  # large, two prefixes
]


@pytest.mark.parametrize("within", SCOPES, ids=lambda w: "+".join("/".join(p) for p in w))
def test_scoped_nominations_stay_inside_and_match_brute_force(corpus: Any, table: np.ndarray, within: Any) -> None:
    mem, where = corpus
    ids = list(where)  # insertion order: item i is row i of the table
    inside = [any(where[i][: len(p)] == p for p in within) for i in ids]
    size = sum(inside)
    recalls = []
    for q in range(BIG_A + BIG_B, len(table)):
        query = table[q]
        got = mem.store.vector(query.tolist(), within, K)
        assert all(any(where[i][: len(p)] == p for p in within) for i, _, _ in got), "nominated outside the scope"
        assert len(got) == min(K, size)
        scores = [s for _, s, _ in got]
        assert scores == sorted(scores, reverse=True)
        assert scores == pytest.approx([float(table[ids.index(i)] @ query) for i, _, _ in got], abs=1e-5)
        expected = _exact(table, query, ids, inside, K)
        if size <= 1000 or (within == [("a",)] and query[0] < 0):
            assert [i for i, _, _ in got] == expected  # an exact plan: the true top k, in order
        recalls.append(len({i for i, _, _ in got} & set(expected)) / K)
    # the index path is approximate, like the unscoped search. Once in seven full runs (2026-12-07, PostgreSQL,
    # scope a/x0 + b) one query's scoped HNSW nominations held none of the true top 10 while every other query's
    # held all of them: an approximate graph can miss a whole region. Issue #36 (exact where it must be) is
    # where that is mended; until then one such query in the set is tolerated, never two, nor a low average.
    assert sorted(recalls)[1] >= 0.8 and sum(recalls) / len(recalls) >= 0.9, recalls


def test_unscoped_nominations_match_brute_force(corpus: Any, table: np.ndarray) -> None:
    mem, where = corpus
    ids = list(where)
    for q in range(BIG_A + BIG_B, len(table)):
        got = mem.store.vector(table[q].tolist(), EVERYTHING, K)
        expected = _exact(table, table[q], ids, [True] * len(ids), K)
        assert len(got) == K and len({i for i, _, _ in got} & set(expected)) >= 8
