"""The corpus the tests of the HNSW graph path search (#36, #37): 6,000 items with the graph forced on.

``bench/search.py``'s corpus (seed 5, 20 namespaces), ``fake:64`` vectors, ``metadata.bucket = i % 100`` on
every item (so ``bucket < t`` meets ``t`` % of any scope), folded once into a generation with its graph. Built
once per test process (:func:`build`, the session fixture ``graph_corpus_template``) and copied into each test's
folder (the ``graph_corpus`` fixture), which may then write to its copy.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

import memlane
from benchmods import bench_module
from memlane.store import vector_index as vi

SIZE = 6000
GRAPH_AT = 2000  # GRAPH_MIN and APPROX_MIN while these tests run: a graph for 6,000 rows, asked by the search
QUESTIONS = 60
DB = "m.db"


@dataclass
class GraphCorpus:
    """An open copy of the corpus and the embedded questions."""

    mem: memlane.Memory
    path: str
    questions: list[list[float]]

    @property
    def shared(self) -> Any:
        """The store's view of its shared index (its path counters)."""
        return self.mem.store._vectors  # type: ignore[attr-defined]


def corpus() -> Any:
    return bench_module("search").Corpus(seed=5, namespaces=20)


def build(folder: str) -> None:
    """Write the corpus and its folded generation (graph included) into ``folder``; the caller patches
    ``GRAPH_MIN`` to :data:`GRAPH_AT` while this runs."""
    made = corpus()
    mem = memlane.open(os.path.join(folder, DB), embedder="fake:64", indexing="sync")
    try:
        for start in range(0, SIZE, 1000):
            rows = made.batch(start, start + 1000)
            for i, row in enumerate(rows, start):
                row["metadata"] = {"bucket": i % 100}
            mem.put_many(rows)
        assert mem.store.fold_vectors(min_delta=1)
        gen = vi.open_current(vi.directory_for(os.path.join(folder, DB)))
        assert gen is not None and gen.graph is not None and gen.count == SIZE
        gen.close()
    finally:
        mem.close()


def open_copy(template: str, folder: str) -> GraphCorpus:
    """A copy of the built corpus in ``folder``, opened (the index folder copied beside it)."""
    path = os.path.join(folder, DB)
    for suffix in ("", "-wal"):  # closed, the database has no log; copied as it is if one was kept
        if os.path.exists(os.path.join(template, DB + suffix)):
            shutil.copy2(os.path.join(template, DB + suffix), path + suffix)
    shutil.copytree(vi.directory_for(os.path.join(template, DB)), vi.directory_for(path))
    mem = memlane.open(path, embedder="fake:64", indexing="sync")
    questions = mem.embedder.embed_batch(corpus().queries("natural", QUESTIONS))  # type: ignore[union-attr]
    return GraphCorpus(mem, path, [list(q) for q in questions])
