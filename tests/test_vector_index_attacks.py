"""A hostile review of the shared vector index of the SQLite store (#36): attacks on its promises.

Every answer is compared with a brute-force numpy model over the live items (never with the store's own
fallback path): a search never returns a deleted, expired, out-of-scope or replaced item, a write is found
right after it, a scoped (and ``where``-filtered) search equals an exact scan, whatever happens to the index
files, the embedder, other processes or the disk. A test marked ``xfail(strict=True)`` is a bug found.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane.store import vector_index as vi
from memlane.store.sqlite import SqliteStore

DIM = 8
ROWS = 4000
ROOT = Path(__file__).resolve().parent.parent


def _table(n: int = ROWS, dim: int = DIM, seed: int = 11) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, dim))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


TABLE = _table()


class RowEmbedder:
    """Embeds ``"v<i> ..."`` as row ``i`` of :data:`TABLE` (every live item gets its own row: no ties)."""

    name = "row-embedder"

    def __init__(self, table: np.ndarray = TABLE, name: str = "row-embedder") -> None:
        self.table = table
        self.dimension = table.shape[1]
        self.name = name

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.table[int(t.split()[0][1:])].tolist() for t in texts]


class Model:
    """The live items: ``(namespace, key) -> (item id, table row, metadata)``."""

    def __init__(self, table: np.ndarray = TABLE) -> None:
        self.items: dict[tuple[tuple[str, ...], str], tuple[str, int, dict[str, Any]]] = {}
        self.table = table

    def put(self, mem: Any, ns: tuple[str, ...], key: str, row: int, meta: dict[str, Any] | None = None) -> None:
        item = mem.put(ns, key, f"v{row} words", metadata=meta or {})
        self.items[(ns, key)] = (item.id, row, meta or {})

    def delete(self, mem: Any, ns: tuple[str, ...], key: str) -> None:
        mem.delete(ns, key)
        self.items.pop((ns, key), None)

    def clear(self, mem: Any, prefix: tuple[str, ...]) -> None:
        mem.clear(prefix)
        for ns, key in list(self.items):
            if ns[: len(prefix)] == prefix:
                del self.items[(ns, key)]

    def exact(
        self, q: np.ndarray, within: Sequence[tuple[str, ...]], k: int, meta: tuple[str, Any] | None = None
    ) -> list[tuple[str, float]]:
        hits = []
        for (ns, _), (item_id, row, md) in self.items.items():
            if not any(ns[: len(p)] == p for p in within):
                continue
            if meta is not None and md.get(meta[0]) != meta[1]:
                continue
            hits.append((item_id, float(self.table[row] @ q)))
        hits.sort(key=lambda h: -h[1])
        return hits[:k]


def _check(got: list[Any], want: list[tuple[str, float]]) -> None:
    assert [g[0] for g in got] == [w[0] for w in want], (got, want)
    assert np.allclose([g[1] for g in got], [w[1] for w in want], atol=1e-5)


def _search(mem: Any, q: np.ndarray, within: Sequence[tuple[str, ...]], k: int, where: Sequence[Any] = ()) -> Any:
    return mem.store.vector(q.tolist(), list(within), k, list(where))


def _fold(mem: Any, **kw: Any) -> bool:
    store = mem.store
    assert isinstance(store, SqliteStore)
    return store.fold_vectors(**kw)


@pytest.fixture
def small_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Folds at test sizes (graphs never: they are only a candidate generator re-scored exactly)."""
    monkeypatch.setattr(vi, "FOLD_MIN", 8)
    monkeypatch.setattr(vi, "GRAPH_MIN", 10**9)


NAMESPACES = [("a",), ("a", "x"), ("a", "x", "deep"), ("a", "x-y"), ("a", "x0"), ("a", "y"), ("b",), ("b", "a")]
SCOPES = [
    [()],
    [("a",)],
    [("a", "x")],
    [("a", "x", "deep")],
    [("a", "x-y")],
    [("a", "y"), ("b", "a")],
    [("a", "x"), ("a",)],
    [("b",)],
    [("c",)],
    [("a", "x", "deep"), ("a", "x0")],
]

search = st.tuples(
    st.just("search"),
    st.integers(0, len(SCOPES) - 1),
    st.integers(1, 15),
    st.integers(0, ROWS - 1),
    st.sampled_from([None, None, True, False]),  # a where puts the scope in SQL too: half without
)
op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 24), st.integers(0, len(NAMESPACES) - 1), st.booleans()),
    st.tuples(st.just("delete"), st.integers(0, 10**6)),  # a live item, picked by its rank
    st.tuples(st.just("update"), st.integers(0, 10**6), st.booleans()),
    st.tuples(st.just("clear"), st.integers(0, len(NAMESPACES) - 1)),
    st.tuples(st.just("fold"), st.booleans()),
    *[search] * 3,  # searches weigh as much as every change together
)


def _change(mem: Any, model: Model, step: tuple[Any, ...], next_row: int) -> int:
    """Apply one change of :data:`op`; returns the next unused table row."""
    if step[0] == "put":  # an update when the key is live: the new text is what must rank
        _, key, ns, even = step
        model.put(mem, NAMESPACES[ns], f"k{key}", next_row, {"even": even})
        return next_row + 1
    if step[0] in ("delete", "update"):
        if model.items:
            ns, key = sorted(model.items)[step[1] % len(model.items)]
            if step[0] == "delete":
                model.delete(mem, ns, key)
            else:
                model.put(mem, ns, key, next_row, {"even": step[2]})
                return next_row + 1
    elif step[0] == "clear":
        model.clear(mem, NAMESPACES[step[1]])
    elif step[0] == "fold":
        _fold(mem, min_delta=0 if step[1] else None)
    return next_row


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=10, max_size=60))
def test_scoped_searches_equal_a_numpy_model(
    tmp_path_factory: pytest.TempPathFactory, small_index: None, ops: list[tuple[Any, ...]]
) -> None:
    """Random puts, updates, deletes, clears and folds; every search equals the brute-force model (and where)."""
    path = str(tmp_path_factory.mktemp("model") / "m.db")
    mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
    model, next_row = Model(), 0
    try:
        for i in range(16):  # a generation to start from
            model.put(mem, NAMESPACES[i % len(NAMESPACES)], f"s{i}", next_row, {"even": i % 2 == 0})
            next_row += 1
        _fold(mem, min_delta=0)
        for step in ops:
            if step[0] != "search":
                next_row = _change(mem, model, step, next_row)
            else:
                _, scope, k, row, even = step
                q = TABLE[row]
                where = [] if even is None else [(("metadata", "even"), "$eq", even)]
                meta = None if even is None else ("even", even)
                _check(_search(mem, q, SCOPES[scope], k, where), model.exact(q, SCOPES[scope], k, meta))
    finally:
        mem.close()


BOUNDARY_NAMESPACES = [("a", "x"), ("a", "x!"), ("a", "x.y"), ("a", "x", "deep"), ("a", "x0"), ("a", "xa"), ("a", "xé")]


@pytest.mark.parametrize("folded", [True, False])
def test_prefix_scopes_at_the_sort_boundaries_of_slash(tmp_path: Path, small_index: None, folded: bool) -> None:
    """Namespaces that sort just below and above "a/x/" stay out of the scope ("a", "x"), in the index and the delta."""
    path = str(tmp_path / "m.db")
    mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
    model = Model()
    try:
        for i in range(70):
            model.put(mem, BOUNDARY_NAMESPACES[i % len(BOUNDARY_NAMESPACES)], f"k{i}", i)
        if folded:
            assert _fold(mem, min_delta=0)
        for ns in BOUNDARY_NAMESPACES + [("a",), ("a", "x", "deep", "er")]:
            for row in (0, 5, 33):
                _check(_search(mem, TABLE[row], [ns], 70), model.exact(TABLE[row], [ns], 70))
    finally:
        mem.close()


def test_a_deleted_item_of_the_delta_is_never_returned(tmp_path: Path, small_index: None) -> None:
    path = str(tmp_path / "m.db")
    mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
    model = Model()
    try:
        for i in range(40):
            model.put(mem, ("a",), f"k{i}", i)
        assert _fold(mem, min_delta=0)
        for i in range(40, 50):  # the delta
            model.put(mem, ("a",), f"k{i}", i)
        _check(_search(mem, TABLE[45], [()], 5), model.exact(TABLE[45], [()], 5))
        model.delete(mem, ("a",), "k45")
        _check(_search(mem, TABLE[45], [()], 5), model.exact(TABLE[45], [()], 5))
        model.put(mem, ("b",), "late", 45)  # the same vector under another item
        _check(_search(mem, TABLE[45], [()], 5), model.exact(TABLE[45], [()], 5))
    finally:
        mem.close()


def test_a_reused_rowid_is_ranked_by_its_new_item(tmp_path: Path, small_index: None) -> None:
    """SQLite hands the newest rowid out again after a delete: the index's row for it must not rank the new item."""
    path = str(tmp_path / "m.db")
    mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
    model = Model()
    try:
        for i in range(40):
            model.put(mem, ("a",), f"k{i}", i)
        assert _fold(mem, min_delta=0)
        _search(mem, TABLE[39], [()], 3)
        for cycle in range(3):
            model.delete(mem, ("a",), "k39" if cycle == 0 else f"n{cycle - 1}")
            model.put(mem, ("b",), f"n{cycle}", 500 + cycle)  # takes the deleted rowid
            for row in (39, 500 + cycle, 5):
                for scope in ([()], [("a",)], [("b",)]):
                    _check(_search(mem, TABLE[row], scope, 5), model.exact(TABLE[row], scope, 5))
            _fold(mem, min_delta=0)
    finally:
        mem.close()


def test_an_update_is_ranked_by_its_new_text_after_a_fold(tmp_path: Path, small_index: None) -> None:
    """The folded vector of an item must not outrank its new one, nor come back after the update."""
    path = str(tmp_path / "m.db")
    mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
    model = Model()
    try:
        for i in range(100):
            model.put(mem, ("a",), f"k{i}", i)
        assert _fold(mem, min_delta=0)
        for i in range(0, 100, 3):
            model.put(mem, ("a",), f"k{i}", 1000 + i)  # the update
        for row in (0, 3, 1003, 1006, 50):
            _check(_search(mem, TABLE[row], [()], 10), model.exact(TABLE[row], [()], 10))
        _fold(mem, min_delta=0)  # (the searches may have folded already)
        for row in (0, 3, 1003, 1006, 50):
            _check(_search(mem, TABLE[row], [()], 10), model.exact(TABLE[row], [()], 10))
    finally:
        mem.close()


def test_read_your_writes_with_write_behind_indexing(tmp_path: Path, small_index: None) -> None:
    """indexing="background": after wait_indexed a put is found and a delete is gone, with folds in between."""
    path = str(tmp_path / "m.db")
    mem = memlane.open(path, embedder=RowEmbedder(), indexing="background")
    model = Model()
    try:
        for rnd in range(4):
            for i in range(40):
                model.put(mem, ("a", str(i % 3)), f"k{rnd}-{i}", rnd * 100 + i)
            for i in range(0, 40, 5):
                model.delete(mem, ("a", str(i % 3)), f"k{max(0, rnd - 1)}-{i}")
            assert mem.wait_indexed(timeout=30)
            for row in (rnd * 100, rnd * 100 + 7, 3):
                for scope in ([()], [("a", "1")]):
                    _check(_search(mem, TABLE[row], scope, 12), model.exact(TABLE[row], scope, 12))
    finally:
        mem.close()


def test_searches_without_writes_publish_no_generation(tmp_path: Path, small_index: None) -> None:
    """A fold removes the generation the store had mapped; its next search must not rebuild the whole index."""
    path = str(tmp_path / "m.db")
    folder = vi.directory_for(path)
    mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
    try:
        for i in range(60):
            mem.put(("a",), f"k{i}", f"v{i}")
        assert _fold(mem, min_delta=0)
        _search(mem, TABLE[1], [()], 3)  # maps gen 1
        for i in range(60, 80):
            mem.put(("a",), f"k{i}", f"v{i}")
        assert _fold(mem, min_delta=0)  # what the indexer does after a batch: gen 2, gen 1 removed
        published = vi.current_name(folder)
        for _ in range(3):
            _search(mem, TABLE[1], [()], 3)
        assert vi.current_name(folder) == published  # no write happened: nothing to publish
    finally:
        mem.close()


def test_a_generation_removed_by_another_process_fold_is_not_damage(tmp_path: Path, small_index: None) -> None:
    """Another process folds without pause (each fold removes the generation before it): searches between its
    reading CURRENT and its removing the old file condemn nothing, rebuild nothing, and stay exact."""
    path = str(tmp_path / "m.db")
    mem, model = _build(path, 400)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", _FOLDER, path], env=env)
    try:
        shared = mem.store._vectors  # type: ignore[attr-defined]
        names = set()
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline or len(names) < 5:
            for row in (0, 77, 399):
                _check(_search(mem, TABLE[row], [()], 10), model.exact(TABLE[row], [()], 10))
            shared = mem.store._vectors  # type: ignore[attr-defined]
            assert shared is not None and not shared._condemned and not shared.needs_rebuild
            if shared.gen is not None:
                names.add(shared.gen.path)
            assert time.monotonic() < deadline + 30, names
    finally:
        proc.kill()
        proc.wait()
        mem.close()


# -- damage between searches ---------------------------------------------------------------------------------


def _build(path: str, n: int, table: np.ndarray = TABLE, first_row: int = 0) -> tuple[Any, Model]:
    mem = memlane.open(path, embedder=RowEmbedder(table), indexing="sync")
    model = Model(table)
    for i in range(n):
        model.put(mem, NAMESPACES[i % len(NAMESPACES)], f"k{i}", first_row + i, {"even": i % 2 == 0})
    assert _fold(mem, min_delta=0)
    return mem, model


def _damage(folder: str, how: str, tmp: Path) -> None:
    name = vi.current_name(folder)
    assert name is not None
    vec = os.path.join(folder, name + ".vec")
    if how == "folder-deleted":
        shutil.rmtree(folder)
    elif how == "folder-is-a-file":
        shutil.rmtree(folder)
        Path(folder).write_bytes(b"not a folder")
    elif how == "current-names-a-missing-generation":
        Path(folder, "CURRENT").write_text("gen-999999999")
    elif how == "zeroed-file":
        size = os.path.getsize(vec)
        with open(vec, "r+b") as f:
            f.write(b"\0" * size)
    elif how == "zeroed-matrix-mtime-kept":  # in place, the file's stamp restored (a bit rot, a careless tool)
        st_ = os.stat(vec)
        gen = vi.Generation(vec, with_graph=False)
        rows, gen_dim = gen.count, gen.dim
        gen.close()
        del gen
        with open(vec, "r+b") as f:
            f.seek(vi.HEADER_BYTES)
            f.write(b"\0" * (rows * gen_dim * 4))
        os.utime(vec, ns=(st_.st_atime_ns, st_.st_mtime_ns))
    elif how == "random-matrix-rows-in-range":  # valid unit vectors, other rows' places swapped
        st_ = os.stat(vec)
        gen = vi.Generation(vec, with_graph=False)
        matrix = np.array(gen.matrix)
        gen.close()
        del gen
        with open(vec, "r+b") as f:
            f.seek(vi.HEADER_BYTES)
            f.write(matrix[::-1].astype("<f4").tobytes())
        os.utime(vec, ns=(st_.st_atime_ns, st_.st_mtime_ns))
    elif how == "stale-copied-in-place":  # an older generation written over the current file (same inode)
        old = tmp / "old.vec"
        assert old.exists()
        with open(vec, "r+b") as f:
            f.truncate(0)
            f.write(old.read_bytes())
    elif how == "current-rolled-back":  # the older generation put back beside the current, CURRENT naming it
        shutil.copyfile(old_gen := tmp / "old.vec", os.path.join(folder, "gen-000000000.vec"))
        assert old_gen.exists()
        Path(folder, "CURRENT").write_text("gen-000000000")
    elif how == "foreign-same-dimension":  # a generation of another store with the same refs, other vectors
        other = str(tmp / "other.db")
        omem, _ = _build(other, 60, TABLE, first_row=2000)
        omem.close()
        ofolder = vi.directory_for(other)
        oname = vi.current_name(ofolder)
        assert oname is not None
        shutil.copyfile(os.path.join(ofolder, oname + ".vec"), vec + ".x")
        os.replace(vec + ".x", vec)
    elif how == "other-dimension":
        other = str(tmp / "wide.db")
        omem, _ = _build(other, 60, _table(200, 16, seed=5))
        omem.close()
        ofolder = vi.directory_for(other)
        oname = vi.current_name(ofolder)
        assert oname is not None
        shutil.copyfile(os.path.join(ofolder, oname + ".vec"), vec + ".x")
        os.replace(vec + ".x", vec)
    else:
        raise AssertionError(how)


DAMAGE = [
    "folder-deleted",
    "folder-is-a-file",
    "current-names-a-missing-generation",
    "zeroed-file",
    "stale-copied-in-place",
    "current-rolled-back",
    "foreign-same-dimension",
    "other-dimension",
    "zeroed-matrix-mtime-kept",  # in place, stamp restored: st_ctime_ns still tells
    "random-matrix-rows-in-range",  # in place, stamp restored: st_ctime_ns still tells
]


@pytest.mark.parametrize("how", ["zeroed", "rows-reversed", "one-row"])
def test_matrix_damage_does_not_outlive_its_generation(
    tmp_path: Path, small_index: None, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Rows damaged in place while no process maps the file: the next fold copies none of the damaged blocks."""
    monkeypatch.setattr(vi, "MATRIX_BLOCK", 16)  # several blocks (the constant is the format's, set for both sides)
    path = str(tmp_path / "m.db")
    folder = vi.directory_for(path)
    mem, model = _build(path, 120)
    mem.close()
    name = vi.current_name(folder)
    assert name is not None
    vec = os.path.join(folder, name + ".vec")
    gen = vi.Generation(vec, with_graph=False)
    matrix = np.array(gen.matrix)
    gen.close()
    del gen
    probes = [TABLE[r] for r in (0, 77, 119, 133)] + [matrix[40].copy(), matrix[41].copy()]  # the damaged rows'
    if how == "zeroed":
        matrix[:] = 0
    elif how == "rows-reversed":
        matrix = matrix[::-1]
    else:
        matrix[40] = matrix[41]
    with open(vec, "r+b") as f:
        f.seek(vi.HEADER_BYTES)
        f.write(np.ascontiguousarray(matrix, dtype="<f4").tobytes())
    mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
    try:
        for i in range(120, 140):
            model.put(mem, NAMESPACES[i % len(NAMESPACES)], f"k{i}", i, {"even": i % 2 == 0})
        assert _fold(mem, min_delta=0)  # copies the unchanged rows from the damaged generation
        assert vi.current_name(folder) != name
        for q in probes:
            for scope in ([()], [("a", "x")]):
                _check(_search(mem, q, scope, 10), model.exact(q, scope, 10))
        assert mem.store._vectors.rows_loaded == 0  # the new generation serves everything, unmasked
    finally:
        mem.close()


@pytest.mark.parametrize("how", DAMAGE)
def test_damage_between_searches_keeps_answers_exact(tmp_path: Path, small_index: None, how: str) -> None:
    path = str(tmp_path / "m.db")
    folder = vi.directory_for(path)
    mem, model = _build(path, 60)
    try:
        name = vi.current_name(folder)
        assert name is not None
        shutil.copyfile(os.path.join(folder, name + ".vec"), tmp_path / "old.vec")
        for i in range(60, 120):  # a newer generation, so "old.vec" is stale
            model.put(mem, NAMESPACES[i % len(NAMESPACES)], f"k{i}", i, {"even": i % 2 == 0})
        assert _fold(mem, min_delta=0)
        rows = (0, 61, 119, 33)
        for row in rows:  # maps the current generation
            _check(_search(mem, TABLE[row], [()], 10), model.exact(TABLE[row], [()], 10))
        _damage(folder, how, tmp_path)
        for round_ in range(3):  # searches fold for themselves; each answer must stay exact
            for row in rows:
                for scope in ([()], [("a", "x")], [("b",)]):
                    _check(_search(mem, TABLE[row], scope, 10), model.exact(TABLE[row], scope, 10))
                where = [(("metadata", "even"), "$eq", True)]
                _check(_search(mem, TABLE[row], [()], 7, where), model.exact(TABLE[row], [()], 7, ("even", True)))
            model.delete(mem, NAMESPACES[round_], f"k{round_}")
            model.put(mem, ("c",), f"n{round_}", 3000 + round_)
        # a second process opening the damaged store answers right too
        other = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
        try:
            for row in rows:
                _check(_search(other, TABLE[row], [()], 10), model.exact(TABLE[row], [()], 10))
        finally:
            other.close()
    finally:
        mem.close()


# -- the embedder changed ------------------------------------------------------------------------------------


def test_embedder_changed_same_dimension_reindex_and_drop(tmp_path: Path, small_index: None) -> None:
    """After reindex with another embedder of the same dimension, only the new vectors rank."""
    path = str(tmp_path / "m.db")
    mem, model = _build(path, 80)
    try:
        _search(mem, TABLE[5], [()], 5)
        other_table = _table(ROWS, DIM, seed=99)
        assert mem.reindex(RowEmbedder(other_table, name="row-embedder-2")) == 80
        model.table = other_table
        for row in (5, 40, 79):
            _check(_search(mem, other_table[row], [()], 10), model.exact(other_table[row], [()], 10))
        _fold(mem, min_delta=0)
        for row in (5, 40, 79):
            _check(_search(mem, other_table[row], [()], 10), model.exact(other_table[row], [()], 10))
        mem.store.drop_vectors()
        assert _search(mem, other_table[5], [()], 10) == []
        _fold(mem, min_delta=0)
        assert _search(mem, other_table[5], [()], 10) == []
    finally:
        mem.close()


def test_embedder_changed_dimension(tmp_path: Path, small_index: None) -> None:
    path = str(tmp_path / "m.db")
    mem, model = _build(path, 80)
    try:
        _search(mem, TABLE[5], [()], 5)
        wide = _table(ROWS, 16, seed=7)
        mem.reindex(RowEmbedder(wide, name="wide"))
        model.table = wide
        for row in (5, 40):
            _check(_search(mem, wide[row], [()], 10), model.exact(wide[row], [()], 10))
        _fold(mem, min_delta=0)
        for row in (5, 40):
            _check(_search(mem, wide[row], [("a",)], 10), model.exact(wide[row], [("a",)], 10))
    finally:
        mem.close()


def test_expired_items_are_never_returned(tmp_path: Path, small_index: None) -> None:
    path = str(tmp_path / "m.db")
    mem, model = _build(path, 40)
    try:
        short = mem.put(("a",), "short", "v500 words", ttl=0.3)
        assert _fold(mem, min_delta=0)
        assert _search(mem, TABLE[500], [()], 1)[0][0] == short.id
        time.sleep(0.5)
        assert short.id not in [h.item.id for h in mem.search("v500 words", limit=10, channels=["vector"]).hits]
    finally:
        mem.close()


# -- several processes ---------------------------------------------------------------------------------------


def _worker(path: str, w: int, rounds: int, out: Any) -> None:
    vi.FOLD_MIN = 8
    vi.GRAPH_MIN = 10**9
    try:
        mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
        model = Model()
        ns = ("w", str(w))
        rng = np.random.default_rng(w)
        row = 1000 * (w + 1)
        for r in range(rounds):
            for _ in range(6):
                model.put(mem, ns, f"k{int(rng.integers(0, 30))}", row)
                row += 1
            if r % 3 == 2:
                model.delete(mem, ns, f"k{int(rng.integers(0, 30))}")
            if r % 4 == w % 4:
                _fold(mem, min_delta=0, blocking=bool(r % 2))
            q = TABLE[int(rng.integers(1000, row))]
            _check(_search(mem, q, [ns], 8), model.exact(q, [ns], 8))  # only this worker writes there
            for hit in _search(mem, q, [()], 8):  # whoever wrote it: a live item's current vector
                item = mem.get_by_id(hit[0])
                if item is not None and item.version == hit[2]:  # not deleted nor replaced since by its writer
                    assert np.isclose(hit[1], float(TABLE[int(str(item.value).split()[0][1:])] @ q), atol=1e-5)
        mem.close()
        out.put((w, None))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        import traceback

        out.put((w, traceback.format_exc() + repr(e)))


@pytest.mark.slow
def test_processes_write_search_and_fold_concurrently(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    memlane.open(path, embedder=RowEmbedder(), indexing="sync").close()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(path, w, 25, out)) for w in range(3)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert all(err is None for _, err in results), results
    # at rest: every answer equals the model read from the database
    model = Model()
    conn = sqlite3.connect(path)
    for item_id, ns, value in conn.execute("SELECT id, namespace, value FROM items"):
        match = re.search(r"v(\d+)", str(value))
        assert match
        model.items[(tuple(ns.split("/")), item_id)] = (item_id, int(match.group(1)), {})
    conn.close()
    mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
    try:
        for row in (1000, 2005, 3010):
            for scope in ([()], [("w", "1")]):
                _check(_search(mem, TABLE[row], scope, 10), model.exact(TABLE[row], scope, 10))
    finally:
        mem.close()


# -- a kill -9 during a fold, a full disk --------------------------------------------------------------------

_FOLDER = textwrap.dedent(
    """
    import sys
    from memlane.store import vector_index as vi
    while True:
        vi.fold(sys.argv[1], min_delta=0, rebuild=True, blocking=True, graph=False)
    """
)


@pytest.mark.slow
def test_reopened_after_kill_9_at_random_moments_of_folds(tmp_path: Path, small_index: None) -> None:
    path = str(tmp_path / "m.db")
    mem, model = _build(path, 3000)
    mem.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    rng = np.random.default_rng(1)
    for attempt in range(6):
        proc = subprocess.Popen([sys.executable, "-c", _FOLDER, path], env=env)
        time.sleep(0.4 + float(rng.random()) * 0.6)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
        try:
            model.put(mem, ("a",), f"after{attempt}", 3500 + attempt)
            for row in (3500 + attempt, 10, 2999):
                _check(_search(mem, TABLE[row], [()], 10), model.exact(TABLE[row], [()], 10))
                _check(_search(mem, TABLE[row], [("a", "x")], 10), model.exact(TABLE[row], [("a", "x")], 10))
        finally:
            mem.close()


_DISK_FULL = textwrap.dedent(
    """
    import sys, logging
    import numpy as np
    sys.path.insert(0, sys.argv[2])
    from test_vector_index_attacks import RowEmbedder, TABLE, Model, _fold
    import memlane
    from memlane.store import vector_index as vi
    vi.FOLD_MIN = 8
    vi.GRAPH_MIN = 10**9
    import os
    folder = vi.directory_for(sys.argv[1])
    mem = memlane.open(sys.argv[1], embedder=RowEmbedder(), indexing="sync")
    model = Model()
    for i in range(100):
        model.put(mem, ("a",), f"k{i}", i)
    assert _fold(mem, min_delta=0)  # a small generation fits
    first = vi.current_name(folder)
    for i in range(100, 3000):
        model.put(mem, ("a",), f"k{i}", i)
    published = _fold(mem, min_delta=0)  # the next does not fit: the fold must fail cleanly
    assert not published
    for row in (0, 1500, 2999):  # each search tries to fold for itself, and fails the same way
        got = mem.store.vector(TABLE[row].tolist(), [()], 5)
        assert [g[0] for g in got] == [w[0] for w in model.exact(TABLE[row], [()], 5)]
    assert vi.current_name(folder) == first
    assert sorted(os.listdir(folder)) == ["CURRENT", first + ".vec", "lock"], os.listdir(folder)
    assert mem.store._vectors.gen is not None  # the old generation still serves, beside the delta
    print("ANSWERED", published)
    """
)


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


@pytest.mark.slow
def test_disk_full_while_writing_a_generation(tmp_path: Path) -> None:
    if not _can_mount():
        pytest.skip("cannot mount a small tmpfs here")
    path = str(tmp_path / "m.db")
    folder = vi.directory_for(path)
    os.makedirs(folder)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    script = tmp_path / "full.py"
    script.write_text(_DISK_FULL)
    proc = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f'mount -t tmpfs -o size=48k tmpfs "{folder}" && exec "{sys.executable}" "{script}" "{path}" '
            f'"{ROOT / "tests"}"',
        ],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0 and b"ANSWERED" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


# -- the approximate path, a read-only store -----------------------------------------------------------------


@pytest.mark.skipif(not vi.graphs_available(), reason="usearch is not installed")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=5, max_size=30))
def test_graph_path_never_returns_a_dead_stale_or_out_of_scope_item(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, ops: list[tuple[Any, ...]]
) -> None:
    """With an HNSW graph at test size, every hit is live, in scope, at its current vector; small scopes exact."""
    monkeypatch.setattr(vi, "FOLD_MIN", 8)
    monkeypatch.setattr(vi, "GRAPH_MIN", 64)
    monkeypatch.setattr(vi, "APPROX_MIN", 64)
    path = str(tmp_path_factory.mktemp("graph") / "m.db")
    mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
    model, next_row = Model(), 0
    try:
        for i in range(160):
            model.put(mem, NAMESPACES[i % 2], f"s{i}", next_row, {"even": i % 2 == 0})  # ("a",) and ("a", "x")
            next_row += 1
        assert _fold(mem, min_delta=0)
        name = vi.current_name(vi.directory_for(path))
        assert name is not None and os.path.exists(os.path.join(vi.directory_for(path), name + ".graph"))
        for step in ops:
            if step[0] != "search":
                next_row = _change(mem, model, step, next_row)
            else:
                _, scope, k, row, _even = step
                q = TABLE[row]
                within = SCOPES[scope]
                got = _search(mem, q, within, k)
                live = {item_id: r for item_id, r, _ in model.items.values()}
                in_scope = {w[0] for w in model.exact(q, within, 10**6)}
                for item_id, score, _version in got:
                    assert item_id in in_scope
                    assert np.isclose(score, float(TABLE[live[item_id]] @ q), atol=1e-5)
                assert [g[1] for g in got] == sorted((g[1] for g in got), reverse=True)
                want = model.exact(q, within, k)
                assert len(got) == len(want)
                if len(in_scope) < 64:  # below APPROX_MIN: scanned exactly
                    _check(got, want)
    finally:
        mem.close()


def test_read_only_store_beside_a_writer(tmp_path: Path, small_index: None) -> None:
    """A read-only store (no fold of its own) sees the writer's puts, deletes, folds and damaged index right."""
    path = str(tmp_path / "m.db")
    mem, model = _build(path, 80)
    reader = memlane.open(path, embedder=RowEmbedder(), read_only=True)
    folder = vi.directory_for(path)
    try:
        for rnd in range(4):
            for row in (3, 50, 200 + rnd):
                for scope in ([()], [("a", "x")]):
                    _check(_search(reader, TABLE[row], scope, 10), model.exact(TABLE[row], scope, 10))
            for i in range(30):
                model.put(mem, ("a", "x"), f"r{rnd}-{i}", 200 + rnd * 40 + i)
            model.delete(mem, NAMESPACES[rnd], f"k{rnd}")
            if rnd == 1:
                _fold(mem, min_delta=0)
            if rnd == 2:
                name = vi.current_name(folder)
                assert name is not None
                with open(os.path.join(folder, name + ".vec"), "r+b") as f:
                    f.write(os.urandom(4096))
        assert not any(n.startswith("tmp-") for n in os.listdir(folder))
    finally:
        reader.close()
        mem.close()


def test_a_read_only_store_facing_a_damaged_body_is_relieved_by_the_writers_next_fold(
    tmp_path: Path, small_index: None
) -> None:
    """The header is sound, the body is not: the reader (which cannot fold) loads every vector privately, and
    the writer's next fold after a batch publishes at once rather than waiting for a full delta."""
    path = str(tmp_path / "m.db")
    mem, model = _build(path, 200)
    reader = memlane.open(path, embedder=RowEmbedder(), read_only=True)
    folder = vi.directory_for(path)
    try:
        _check(_search(reader, TABLE[3], [()], 10), model.exact(TABLE[3], [()], 10))
        assert _fold(mem) is False  # nothing new: not due
        name = vi.current_name(folder)
        assert name is not None
        gen = vi.Generation(os.path.join(folder, name + ".vec"), with_graph=False)
        refs_at = vi.HEADER_BYTES + vi._align(gen.count * gen.dim * 4) + vi._align(4 * vi._blocks(gen.count))
        gen.close()
        del gen
        with open(os.path.join(folder, name + ".vec"), "r+b") as f:
            f.seek(refs_at)
            f.write(os.urandom(64))  # inside the refs: the header still reads fine
        _check(_search(reader, TABLE[5], [()], 10), model.exact(TABLE[5], [()], 10))
        shared = reader.store._vectors  # type: ignore[attr-defined]
        assert shared.gen is None and len(shared.delta) == 200  # everything private, until...
        for i in range(3):  # ... a batch far below the fold size
            model.put(mem, ("a",), f"late{i}", 300 + i)
        assert _fold(mem) is True  # what the indexer does after it: the unsound generation is replaced now
        for row in (5, 301):
            _check(_search(reader, TABLE[row], [()], 10), model.exact(TABLE[row], [()], 10))
        assert shared.gen is not None and len(shared.delta) == 0
    finally:
        reader.close()
        mem.close()


@pytest.mark.skipif(not vi.graphs_available(), reason="usearch is not installed")
def test_the_graph_keeps_serving_after_the_indexers_folds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vi, "FOLD_MIN", 8)
    monkeypatch.setattr(vi, "GRAPH_MIN", 64)
    monkeypatch.setattr(vi, "APPROX_MIN", 64)
    path = str(tmp_path / "m.db")
    mem = memlane.open(path, embedder=RowEmbedder(), indexing="sync")
    model = Model()
    try:
        for i in range(200):
            model.put(mem, ("a",), f"k{i}", i)
        assert _fold(mem, min_delta=0)
        _check(_search(mem, TABLE[1], [()], 5), model.exact(TABLE[1], [()], 5))
        shared = mem.store._vectors  # type: ignore[attr-defined]
        assert shared.approximate_searches == 1
        for i in range(200, 240):
            model.put(mem, ("a",), f"k{i}", i)
        assert _fold(mem, min_delta=0)  # the indexer after a batch
        for n in range(2, 5):
            _check(_search(mem, TABLE[n], [()], 5), model.exact(TABLE[n], [()], 5))
            assert shared.approximate_searches == n, n
    finally:
        mem.close()
