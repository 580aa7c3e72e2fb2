"""Vector nomination inside a scope: only the scope's items, and the true top k where the plan is exact.

On PostgreSQL a scoped search scans exactly inside a scope of up to ``_EXACT_SCOPE_ROWS``
items (see ``PostgresStore.vector``); inside a larger one it filters the HNSW index's
nearest by the scope, widening ``ef_search`` when too few are inside, and scans
exactly when even the widest holds too few. These tests build stores whose scopes
take the exact plan (two well-separated clusters of known vectors; word-hashing
vectors in 384 dimensions, where an HNSW graph does lose neighbours) and compare with
a brute-force top k: a scoped search returns the scope's true top k, in order.
SQLite's brute-force search must give the same answers.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import memlane
from memlane.domain.search.embedders import FakeEmbedder
from memlane.store._common import EVERYTHING

DIM = 8
K = 10
BIG_A, BIG_B = 1100, 1700  # every scope below is under the PostgreSQL store's exact-scan threshold (2000)


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
    [("a",)],
    [("b",)],
    [("a", "x1")],
    [("a", "x1"), ("b", "y2")],  # two prefixes
    [("a", "x0"), ("b",)],  # two prefixes: most of the store (one query in seven runs lost its region to HNSW)
]


@pytest.mark.parametrize("within", SCOPES, ids=lambda w: "+".join("/".join(p) for p in w))
def test_scoped_nominations_stay_inside_and_match_brute_force(corpus: Any, table: np.ndarray, within: Any) -> None:
    mem, where = corpus
    ids = list(where)  # insertion order: item i is row i of the table
    inside = [any(where[i][: len(p)] == p for p in within) for i in ids]
    size = sum(inside)
    for q in range(BIG_A + BIG_B, len(table)):
        query = table[q]
        got = mem.store.vector(query.tolist(), within, K)
        assert all(any(where[i][: len(p)] == p for p in within) for i, _, _ in got), "nominated outside the scope"
        assert len(got) == min(K, size)
        scores = [s for _, s, _ in got]
        assert scores == sorted(scores, reverse=True)
        assert scores == pytest.approx([float(table[ids.index(i)] @ query) for i, _, _ in got], abs=1e-5)
        expected = _exact(table, query, ids, inside, K)
        assert [i for i, _, _ in got] == expected  # exact inside a scope: the true top k, in order


@pytest.mark.parametrize("within", [[("b", "y2")], [("a", "x1")]], ids=["b/y2", "a/x1"])
def test_a_scope_above_the_exact_threshold_widens_the_index_search(
    corpus: Any, table: np.ndarray, within: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the threshold (lowered here) the index's nearest are filtered by the scope, ef_search widened when
    too few are inside, the exact scan when even the widest holds too few: k nominations, all inside, best first."""
    from memlane.store import postgres

    monkeypatch.setattr(postgres, "_EXACT_SCOPE_ROWS", 100)
    mem, where = corpus
    ids = list(where)
    inside = [any(where[i][: len(p)] == p for p in within) for i in ids]
    k = 40  # more than the first ef_search's nearest hold inside this scope (about 1 in 8 of the store)
    overlap = []
    for q in range(BIG_A + BIG_B, len(table)):
        got = mem.store.vector(table[q].tolist(), within, k)
        assert len(got) == k and all(inside[ids.index(i)] for i, _, _ in got)
        scores = [s for _, s, _ in got]
        assert scores == sorted(scores, reverse=True)
        overlap.append(len({i for i, _, _ in got} & set(_exact(table, table[q], ids, inside, k))) / k)
    assert sum(overlap) / len(overlap) >= 0.9, overlap


def test_unscoped_nominations_match_brute_force(corpus: Any, table: np.ndarray) -> None:
    mem, where = corpus
    ids = list(where)
    for q in range(BIG_A + BIG_B, len(table)):
        got = mem.store.vector(table[q].tolist(), EVERYTHING, K)
        expected = _exact(table, table[q], ids, [True] * len(ids), K)
        assert len(got) == K and len({i for i, _, _ in got} & set(expected)) >= 8


def _word_texts(count: int, seed: int) -> list[str]:
    """Texts of 4-12 words drawn with Zipf weights from 300 words: many share words, so their vectors are near."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    weights = [1 / (r + 1) for r in range(300)]
    return [" ".join(rng.choices(words, weights, k=rng.randint(4, 12))) for _ in range(count)]


def test_scoped_search_is_exact_on_word_vectors(store_url: str, clock: Any) -> None:
    """Word-hashing vectors in 384 dimensions (where an HNSW graph does lose neighbours) in a scope of most of
    the store, above the old exact-scan threshold: the scope's true top k, in order, for every query."""
    embedder = FakeEmbedder(384)
    texts = _word_texts(2400, seed=5)
    mem = memlane.open(store_url, clock=clock, embedder=embedder, indexing="sync")
    try:
        records = [
            {"namespace": ("big", f"n{i % 3}") if i < 2000 else ("other",), "key": f"k{i}", "value": t}
            for i, t in enumerate(texts)
        ]
        ids = []
        for start in range(0, len(records), 400):
            ids.extend(item.id for item in mem.put_many(records[start : start + 400]))
        matrix = np.asarray(embedder.embed_batch(texts), dtype=np.float32)
        for query in _word_texts(25, seed=6):
            q = np.asarray(embedder.embed_batch([query])[0], dtype=np.float32)
            scores = matrix[:2000] @ q
            got = mem.store.vector(q.tolist(), [("big",)], K)
            # ties broken either way are the same answer: compare the scores, then the ids where scores differ
            assert [s for _, s, _ in got] == pytest.approx(sorted(scores, reverse=True)[:K], abs=1e-5), query
            best = {ids[i] for i in np.flatnonzero(scores > sorted(scores, reverse=True)[K - 1] + 1e-5)}
            assert best <= {i for i, _, _ in got}, query
    finally:
        mem.close()
