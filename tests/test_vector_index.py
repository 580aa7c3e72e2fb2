"""The shared, memory-mapped vector index of the SQLite store (#36).

What it promises, each tested against the old private exact scan (a second store on the same file with
``MEMLANE_VECTOR_INDEX=0``) or against live rows:

* a scoped (and ``where``-filtered) search through the index equals the exact scan, across puts, replaced
  vectors, deletes and folds (hypothesis);
* the approximate path's recall on vectors with neighbourhoods is above a floor;
* whatever is written into the index files between searches (garbage, truncation, another dimension, a
  stale generation, deletion), searches still answer, and never with a deleted or out-of-scope item;
* a write is found right after it, before any fold;
* a second process opening the store shares the index's pages: its private memory grows by at most a
  quarter of the vectors' bytes and its first search does not read every vector;
* a process killed while writing a generation leaves a store that answers right.
"""

from __future__ import annotations

import contextlib
import json
import os
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
from graphcorpus import GraphCorpus
from memlane.store import vector_index as vi
from memlane.store.sqlite import SqliteStore

DIM = 8
ROOT = Path(__file__).resolve().parent.parent


class TableEmbedder:
    """Embeds ``"v<i>"`` (optionally followed by words) as row ``i`` of a fixed table."""

    name = "table-embedder"

    def __init__(self, table: np.ndarray) -> None:
        self.table = table
        self.dimension = table.shape[1]

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.table[int(t.split()[0][1:])].tolist() for t in texts]


def _table(n: int, dim: int = DIM, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(n, dim))
    rows[0 : n - 1 : 7] = rows[1::7][: len(range(0, n - 1, 7))]  # some identical vectors: ties broken by ref
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def small_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Folds and graphs at test sizes."""
    monkeypatch.setattr(vi, "FOLD_MIN", 8)
    monkeypatch.setattr(vi, "GRAPH_MIN", 10**9)


def _exact(path: str, query: Sequence[float], within: Any, k: int, where: Sequence[Any] = ()) -> list[Any]:
    """The old private exact scan over the same file: the reference."""
    old = os.environ.get("MEMLANE_VECTOR_INDEX")
    os.environ["MEMLANE_VECTOR_INDEX"] = "0"
    try:
        store = SqliteStore(path, migrate=False)
        try:
            return store.vector(query, within, k, where)
        finally:
            store.close()
    finally:
        if old is None:
            del os.environ["MEMLANE_VECTOR_INDEX"]
        else:
            os.environ["MEMLANE_VECTOR_INDEX"] = old


def _same(got: list[Any], want: list[Any]) -> None:
    assert [(i, v) for i, _, v in got] == [(i, v) for i, _, v in want]
    assert np.allclose([s for _, s, _ in got], [s for _, s, _ in want], atol=1e-6)


NAMESPACES = [("a", "x"), ("a", "x", "deep"), ("a", "y"), ("a", "x-y"), ("b",), ("b", "z")]
SCOPES = [[()], [("a",)], [("a", "x")], [("a", "x", "deep")], [("b",)], [("a", "y"), ("b", "z")], [("c",)]]

op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 39), st.integers(0, len(NAMESPACES) - 1), st.integers(0, 199)),
    st.tuples(st.just("delete"), st.integers(0, 39)),
    st.tuples(st.just("fold")),
    st.tuples(st.just("search"), st.integers(0, len(SCOPES) - 1), st.integers(1, 12), st.integers(0, 199)),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=5, max_size=40), filtered=st.booleans())
def test_index_results_equal_an_exact_scan(
    tmp_path_factory: pytest.TempPathFactory, small_index: None, ops: list[tuple[Any, ...]], filtered: bool
) -> None:
    table = _table(200)
    path = str(tmp_path_factory.mktemp("idx") / "m.db")
    mem = memlane.open(path, embedder=TableEmbedder(table), indexing="sync")
    store = mem.store
    where = [(("metadata", "even"), "$eq", True)] if filtered else []
    try:
        for step in ops:
            if step[0] == "put":
                _, key, ns, row = step
                mem.put(NAMESPACES[ns], f"k{key}", f"v{row} text", metadata={"even": row % 2 == 0})
            elif step[0] == "delete":
                for ns in NAMESPACES:
                    mem.delete(ns, f"k{step[1]}")
            elif step[0] == "fold":
                store.fold_vectors(min_delta=1)
            else:
                _, scope, k, row = step
                query = table[row].tolist()
                _same(store.vector(query, SCOPES[scope], k, where), _exact(path, query, SCOPES[scope], k, where))
        for scope in SCOPES:  # and once more after the last step, from the index where one was folded
            _same(store.vector(table[0].tolist(), scope, 5, where), _exact(path, table[0].tolist(), scope, 5, where))
    finally:
        mem.close()


def _filled(path: str, table: np.ndarray, n: int) -> Any:
    mem = memlane.open(path, embedder=TableEmbedder(table), indexing="sync")
    mem.put_many([{"namespace": NAMESPACES[i % len(NAMESPACES)], "key": f"k{i}", "value": f"v{i}"} for i in range(n)])
    return mem


def test_read_your_writes_before_any_fold(tmp_path: Path, small_index: None) -> None:
    table = _table(400)
    path = str(tmp_path / "m.db")
    mem = _filled(path, table, 300)
    try:
        assert mem.store.fold_vectors(min_delta=1)
        gen = vi.open_current(vi.directory_for(path))
        assert gen is not None and gen.count == 300
        # new, replaced and deleted after the generation: none of them waits for a fold
        mem.put(("a", "x"), "fresh", "v352")
        mem.put(("a", "x"), "k0", "v353")  # k0 (namespace a/x) now has another vector
        mem.delete(("a", "y"), "k2")
        for row, key in ((352, "fresh"), (353, "k0")):
            got = mem.store.vector(table[row].tolist(), [("a",)], 1)
            assert mem.get(("a", "x"), key).id == got[0][0]  # type: ignore[union-attr]
        k0 = mem.get(("a", "x"), "k0").id  # type: ignore[union-attr]
        everything = mem.store.vector(table[0].tolist(), [()], 400)
        assert [s for i, s, _ in everything if i == k0] == pytest.approx([float(table[353] @ table[0])], abs=1e-6)
        assert len(everything) == 300  # 300 + fresh - k2: the old k0 is not there twice
        _same(mem.store.vector(table[2].tolist(), [()], 10), _exact(path, table[2].tolist(), [()], 10))
        assert vi.open_current(vi.directory_for(path)).seq == gen.seq  # type: ignore[union-attr]
    finally:
        mem.close()


def test_deletions_never_cost_a_result_slot(tmp_path: Path, small_index: None) -> None:
    table = _table(400)
    path = str(tmp_path / "m.db")
    mem = _filled(path, table, 400)
    try:
        assert mem.store.fold_vectors(min_delta=1)
        query = table[5].tolist()
        nearest = mem.store.vector(query, [()], 50)
        by_id = _items(mem, [n[0] for n in nearest])
        for item_id, _, _ in nearest[:40]:  # the 40 nearest go, after the generation was written
            item = by_id[item_id]
            mem.delete(item.namespace, item.key)
        got = mem.store.vector(query, [()], 10)
        assert len(got) == 10 and not {g[0] for g in got} & {n[0] for n in nearest[:40]}
        _same(got, _exact(path, query, [()], 10))
    finally:
        mem.close()


def _corrupt(folder: str, how: str, other: str) -> None:
    name = vi.current_name(folder)
    assert name is not None
    vec = os.path.join(folder, name + ".vec")
    size = os.path.getsize(vec)
    if how == "deleted":
        os.remove(vec)
    elif how == "truncated":
        os.truncate(vec, size // 2)
    elif how == "torn-tail":
        with open(vec, "r+b") as f:
            f.seek(size - 100)
            f.write(b"\0" * 100)
    elif how == "garbage-header":
        with open(vec, "r+b") as f:
            f.write(os.urandom(200))
    elif how == "garbage-matrix":  # passes every check but the scores
        with open(vec, "r+b") as f:
            f.seek(vi.HEADER_BYTES)
            f.write(np.full(DIM * 50, 1e6, dtype="<f4").tobytes())
    elif how == "garbage-everything":
        with open(vec, "r+b") as f:
            f.write(os.urandom(size))
    elif how == "current-garbage":
        with open(os.path.join(folder, "CURRENT"), "wb") as f:
            f.write(os.urandom(30))
    elif how in ("wrong-dimension", "stale"):
        # another store's generation (16 dimensions) or this store's own older one, renamed in as the current
        src = vi.current_name(other)
        assert src is not None
        os.remove(vec)
        os.replace(os.path.join(other, src + ".vec"), vec)
    else:
        raise AssertionError(how)


HOW = [
    "deleted",
    "truncated",
    "torn-tail",
    "garbage-header",
    "garbage-matrix",
    "garbage-everything",
    "current-garbage",
    "wrong-dimension",
    "stale",
]


@pytest.mark.parametrize("how", HOW)
def test_damaged_index_never_returns_a_deleted_or_forbidden_item(tmp_path: Path, small_index: None, how: str) -> None:
    table = _table(300)
    path = str(tmp_path / "m.db")
    other = str(tmp_path / "other.db")
    if how == "wrong-dimension":
        wide = _table(50, dim=16)
        omem = _filled(other, wide, 50)
        omem.store.fold_vectors(min_delta=1)
        omem.close()
    mem = _filled(path, table, 200)
    folder = vi.directory_for(path)
    try:
        assert mem.store.fold_vectors(min_delta=1)
        if how == "stale":  # keep this generation aside, then move on past it
            stale = str(tmp_path / "stale.db.vectors")
            os.makedirs(stale)
            name = vi.current_name(folder)
            os.link(os.path.join(folder, f"{name}.vec"), os.path.join(stale, f"{name}.vec"))
            Path(stale, "CURRENT").write_text(str(name))
            mem.put_many([{"namespace": ("a", "x"), "key": f"n{i}", "value": f"v{200 + i}"} for i in range(50)])
            assert mem.store.fold_vectors(min_delta=1)
            other = str(tmp_path / "stale.db")
        query = table[3].tolist()
        assert mem.store.vector(query, [()], 10)  # the process maps the generation
        gone = mem.store.vector(query, [("a",)], 5)
        by_id = _items(mem, [g[0] for g in gone])
        for item_id, _, _ in gone:
            mem.delete(by_id[item_id].namespace, by_id[item_id].key)
        _corrupt(folder, how, vi.directory_for(other))
        for _ in range(2):  # the damaged file, then whatever the search's own fold made of it
            for scope in ([()], [("a",)], [("a", "x")], [("b", "z")]):
                got = mem.store.vector(query, scope, 10)
                _same(got, _exact(path, query, scope, 10))
                assert not {g[0] for g in got} & {g[0] for g in gone}
                for item_id, _, _ in got:
                    ns = mem.store.hydrate([item_id], scope, mem._clock())  # type: ignore[attr-defined]
                    assert item_id in ns
        # a fresh process-like open of the same folder answers too
        again = SqliteStore(path)
        try:
            _same(again.vector(query, [("a",)], 10), _exact(path, query, [("a",)], 10))
        finally:
            again.close()
    finally:
        mem.close()


def test_approximate_recall_on_neighbourhoods(graph_corpus: GraphCorpus) -> None:
    c = graph_corpus
    hits = 0
    for q in c.questions:
        got = {g[0] for g in c.mem.store.vector(q, [()], 10)}
        hits += len(got & {g[0] for g in _exact(c.path, q, [()], 10)})
    assert c.shared.approximate_searches == len(c.questions)
    assert hits / (10 * len(c.questions)) >= 0.9
    # a small scope is scanned exactly: nothing lost to the graph
    for q in c.questions[:10]:
        _same(c.mem.store.vector(q, [("bench", "ns00003")], 10), _exact(c.path, q, [("bench", "ns00003")], 10))
    assert c.shared.approximate_searches == len(c.questions)


# format 2's header: the graph's parameters were not recorded
_HEAD_FORMAT_2 = "<8sIIQqqQQQIQI"


def _as_format_2(folder: str) -> None:
    """Rewrite the current generation's header as format 2 wrote it (no graph parameters), checksum and all."""
    import struct
    import zlib

    name = vi.current_name(folder)
    assert name is not None
    with open(os.path.join(folder, name + ".vec"), "r+b") as f:
        head = f.read(vi.HEADER_BYTES)
        fields = list(vi._HEAD.unpack(head[: vi._HEAD.size]))
        fields[1] = 2
        old = struct.pack(_HEAD_FORMAT_2, *fields[:12])
        f.seek(0)
        f.write((old + struct.pack("<I", zlib.crc32(old))).ljust(vi.HEADER_BYTES, b"\0"))


@pytest.mark.skipif(not vi.graphs_available(), reason="usearch is not installed")
@pytest.mark.parametrize("other", ["scalar kind", "connectivity", "expansion_add", "format 2: none recorded"])
def test_an_index_built_with_other_graph_parameters_is_rebuilt_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: str
) -> None:
    """A graph built with other parameters (an older version's) is not searched: exact until the next fold
    rebuilds it, once, with the matrix's rows kept."""
    monkeypatch.setattr(vi, "FOLD_MIN", 8)
    monkeypatch.setattr(vi, "GRAPH_MIN", 64)
    monkeypatch.setattr(vi, "APPROX_MIN", 64)
    ours = (vi.GRAPH_DTYPE, vi.GRAPH_CONNECTIVITY, vi.GRAPH_EXPANSION_ADD)
    if other == "scalar kind":
        monkeypatch.setattr(vi, "GRAPH_DTYPE", "f32" if vi.GRAPH_DTYPE != "f32" else "f16")
    elif other == "connectivity":
        monkeypatch.setattr(vi, "GRAPH_CONNECTIVITY", vi.GRAPH_CONNECTIVITY // 2)
    elif other == "expansion_add":
        monkeypatch.setattr(vi, "GRAPH_EXPANSION_ADD", vi.GRAPH_EXPANSION_ADD // 2)
    table = _table(400, dim=16)
    path = str(tmp_path / "m.db")
    folder = vi.directory_for(path)
    mem = _filled(path, table, 300)
    try:
        vi.fold(path, min_delta=0, blocking=True, rebuild=True)
        built = vi.open_current(folder)
        assert built is not None and built.graph is not None  # searched by the version that built it
        built.close()
        built_name = vi.current_name(folder)
        if other.startswith("format 2"):
            _as_format_2(folder)
        monkeypatch.setattr(vi, "GRAPH_DTYPE", ours[0])
        monkeypatch.setattr(vi, "GRAPH_CONNECTIVITY", ours[1])
        monkeypatch.setattr(vi, "GRAPH_EXPANSION_ADD", ours[2])

        stale = vi.open_current(folder)
        assert stale is not None and stale.count == 300 and stale.graph is None
        stale.close()
        for row in (0, 7, 150, 299):
            q = table[row].tolist()
            _same(mem.store.vector(q, [()], 10), _exact(path, q, [()], 10))
        shared = mem.store._vectors  # type: ignore[attr-defined]
        assert shared.approximate_searches == 0 and shared.exact_searches >= 4
        assert vi.current_name(folder) == built_name  # a search does not rebuild a graph (minutes at scale)

        # the indexer's next fold (no new rows) rebuilds it; the one after has nothing to do
        assert mem.store.fold_vectors()
        assert not mem.store.fold_vectors()
        fresh = vi.open_current(folder)
        assert fresh is not None and fresh.graph is not None and fresh.graph_params == ours
        assert fresh.graph.dtype.name.lower() == vi.GRAPH_DTYPE and fresh.graph.connectivity == vi.GRAPH_CONNECTIVITY
        fresh.close()
        for row in (3, 42):
            q = table[row].tolist()
            _same(mem.store.vector(q, [()], 10), _exact(path, q, [()], 10))
        assert shared.approximate_searches >= 2
    finally:
        mem.close()


_CHILD = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import memlane
    from memlane.store.sqlite import SqliteStore

    def private():
        out = {}
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith(("Private_Clean:", "Private_Dirty:", "Anonymous:")):
                    out[line.split(":")[0]] = int(line.split()[1]) * 1024
        return out["Private_Clean"] + out["Private_Dirty"], out["Anonymous"]

    def rchar():
        with open("/proc/self/io") as f:
            return int(next(l for l in f if l.startswith("rchar:")).split()[1])

    path, warm, dim = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = np.random.default_rng(1)
    queries = [(q / np.linalg.norm(q)).astype(np.float32).tolist() for q in rng.normal(size=(6, dim))]
    w = SqliteStore(warm)  # imports and first-call costs paid on another store
    w.vector(queries[0], [()], 10)
    w.vector(queries[0], [("ns1",)], 10)
    w.close()
    (before, anon), read = private(), rchar()
    store = SqliteStore(path)
    first = store.vector(queries[0], [()], 10)
    first_read = rchar() - read
    for q in queries[1:]:
        store.vector(q, [()], 10)
        store.vector(q, [("ns1",)], 10)
    after, anon_after = private()
    print(json.dumps({"private": after - before, "anonymous": anon_after - anon, "first_read": first_read,
                      "top": first[0][0],
                      "loaded": store._vectors.rows_loaded, "cache": store.vector_cache_bytes()}))
    """
)


def test_second_process_shares_the_index(tmp_path: Path) -> None:
    dim, n = 384, 40_000
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    path, warm = str(tmp_path / "m.db"), str(tmp_path / "warm.db")
    for p, count in ((path, n), (warm, 2000)):
        store = SqliteStore(p)
        with store._write() as conn:  # type: ignore[attr-defined]
            conn.executemany(
                "INSERT INTO items (id, namespace, key, value, value_type, text, metadata, created_at, updated_at,"
                " version, indexed) VALUES (?, ?, ?, '\"x\"', 'string', 'x', '{}', '2026-01-01T00:00:00.000000Z',"
                " '2026-01-01T00:00:00.000000Z', 1, 1)",
                [(f"id{i}", f"ns{i % 50}", f"k{i}") for i in range(count)],
            )
        store.put_vectors([(i + 1, 1, vectors[i % n].tobytes()) for i in range(count)])
        assert store.fold_vectors(min_delta=1)
        store.close()
    # the first process serves searches (its map holds the pages), then a second opens the same store
    first = SqliteStore(path)
    try:
        first.vector(vectors[0].tolist(), [()], 10)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OPENBLAS_NUM_THREADS": "1"}
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, path, warm, str(dim)], capture_output=True, text=True, env=env, timeout=120
        )
    finally:
        first.close()
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    vector_bytes = n * dim * 4
    assert got["private"] <= vector_bytes / 4, got  # pages another process maps are not private
    assert got["anonymous"] <= vector_bytes / 4, got  # nor copied into the heap
    assert got["first_read"] < vector_bytes / 4, got  # it did not read the vectors from the database
    assert got["loaded"] == 0 and got["cache"] < vector_bytes / 100, got
    assert got["top"].startswith("id")


_KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from memlane.store import vector_index as vi
    real = vi._read_missing

    def killed(*args, **kwargs):
        real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)  # the new generation is half written: header and trailer missing

    vi._read_missing = killed
    vi.fold(sys.argv[1], min_delta=1)
    """
)


def test_killed_while_writing_a_generation(tmp_path: Path, small_index: None) -> None:
    table = _table(300)
    path = str(tmp_path / "m.db")
    mem = _filled(path, table, 200)
    folder = vi.directory_for(path)
    try:
        assert mem.store.fold_vectors(min_delta=1)
        before = vi.current_name(folder)
        mem.put_many([{"namespace": ("b",), "key": f"n{i}", "value": f"v{200 + i}"} for i in range(60)])
        mem.delete(("a", "x"), "k0")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        proc = subprocess.run([sys.executable, "-c", _KILLED, path], env=env, capture_output=True, timeout=60)
        assert proc.returncode == -9, proc.stderr
        assert vi.current_name(folder) == before
        assert any(name.startswith("tmp-") for name in os.listdir(folder))  # what the killed fold left
        for row in (0, 250, 7):
            for scope in ([()], [("b",)], [("a", "x")]):
                _same(mem.store.vector(table[row].tolist(), scope, 10), _exact(path, table[row].tolist(), scope, 10))
        mem.store.fold_vectors(min_delta=1)  # the next fold (here, or a search's own) cleans up and publishes
        assert vi.current_name(folder) != before
        assert not any(name.startswith("tmp-") for name in os.listdir(folder))
        _same(mem.store.vector(table[250].tolist(), [()], 10), _exact(path, table[250].tolist(), [()], 10))
    finally:
        mem.close()


def test_indexer_folds_and_searches_fold_when_no_indexer_does(tmp_path: Path, small_index: None) -> None:
    table = _table(300)
    path = str(tmp_path / "m.db")
    mem = memlane.open(path, embedder=TableEmbedder(table), indexing="background")
    try:
        mem.put_many([{"namespace": ("a",), "key": f"k{i}", "value": f"v{i}"} for i in range(100)])
        assert mem.wait_indexed(30)
        deadline = time.monotonic() + 30  # the indexer's thread folds right after its batch
        while (gen := vi.open_current(vi.directory_for(path))) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gen is not None and gen.count >= vi.FOLD_MIN
    finally:
        mem.close()
    # a store written with vectors and never searched by an indexer: the first search builds the index
    path2 = str(tmp_path / "n.db")
    mem2 = _filled(path2, table, 200)
    mem2.close()
    store = SqliteStore(path2)
    try:
        assert vi.current_name(vi.directory_for(path2)) is None
        got = store.vector(table[1].tolist(), [()], 5)
        assert len(got) == 5
        assert vi.open_current(vi.directory_for(path2)) is not None
        assert store._vectors.rows_loaded < 200  # type: ignore[union-attr]
    finally:
        store.close()


def _items(mem: Any, ids: list[str]) -> dict[str, Any]:
    """The live items of ``ids``, by id (for their addresses)."""
    return mem.store.hydrate(ids, [()], mem._clock())  # type: ignore[no-any-return]


def test_index_newer_than_the_database(tmp_path: Path, small_index: None) -> None:
    """A backup restored under a newer index: seqs are handed out again, and the index must not take the new
    vectors for the ones it holds."""
    import sqlite3

    table = _table(400)
    path = str(tmp_path / "m.db")
    mem = _filled(path, table, 100)
    mem.store.fold_vectors(min_delta=1)
    backup = sqlite3.connect(str(tmp_path / "backup.db"))
    mem.store.connection.backup(backup)
    backup.close()
    mem.put_many([{"namespace": ("b",), "key": f"n{i}", "value": f"v{100 + i}"} for i in range(100)])
    assert mem.store.fold_vectors(min_delta=1)
    mem.close()
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)
    os.replace(tmp_path / "backup.db", path)
    mem = memlane.open(path, embedder=TableEmbedder(table), indexing="sync")
    try:  # the same addresses and seqs again, other vectors
        mem.put_many([{"namespace": ("b",), "key": f"n{i}", "value": f"v{300 + i}"} for i in range(100)])
        for row in (5, 150, 350):
            for scope in ([()], [("b",)]):
                _same(mem.store.vector(table[row].tolist(), scope, 10), _exact(path, table[row].tolist(), scope, 10))
    finally:
        mem.close()


@pytest.mark.parametrize("every", [1, 3, 40, 1000, 5000])
def test_filtered_searches_equal_the_exact_ranking_filtered(tmp_path: Path, small_index: None, every: int) -> None:
    """Common filters are tested window by window down the ranking, selective ones read the matching rows first:
    both are the exact ranking with the non-matching rows taken out, in the index and in the delta."""
    table = _table(3000, seed=9)
    path = str(tmp_path / "m.db")
    mem = memlane.open(path, embedder=TableEmbedder(table), indexing="sync")
    try:
        rows = [
            {"namespace": NAMESPACES[i % 3], "key": f"k{i}", "value": f"v{i}", "metadata": {"pick": i % every == 0}}
            for i in range(2400)
        ]
        mem.put_many(rows[:2000])
        assert mem.store.fold_vectors(min_delta=1)
        mem.put_many(rows[2000:])  # 400 in the delta
        where = [(("metadata", "pick"), "$eq", True)]
        for row in (1, 2100, 2999):
            for scope in ([()], [("a",)], [("a", "x")]):
                query = table[row].tolist()
                ranked = _exact(path, query, scope, 5000)
                meets = mem.store.hydrate([r[0] for r in ranked], scope, mem._clock(), where)  # type: ignore[attr-defined]
                want = [r for r in ranked if r[0] in meets][:10]
                _same(mem.store.vector(query, scope, 10, where), want)
    finally:
        mem.close()


@given(
    bounds=st.lists(st.integers(0, 60), max_size=12, unique=True).map(sorted),
    rows=st.lists(st.integers(0, 64), max_size=40, unique=True).map(sorted),
)
def test_the_rows_kept_for_a_scope_are_exactly_those_inside_its_ranges(bounds: list[int], rows: list[int]) -> None:
    """A graph's or a filter's nominated rows are cut to the scope's ranges: a row at a range's end is the next
    namespace's first and must go, a row at its start must stay."""
    ranges = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds) - 1, 2)]
    kept = vi._inside(np.array(rows, dtype=np.int64), ranges).tolist()
    assert kept == [r for r in rows if any(a <= r < b for a, b in ranges)]
    assert vi._inside(np.array(rows, dtype=np.int64), None).tolist() == rows
