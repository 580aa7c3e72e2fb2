"""Which approximate vector index for the SQLite store (#36): usearch, hnswlib, faiss-cpu, side by side.

Usage::

    nice python bench/vector_index.py [--n 100000] [--queries 300] [--dim 384] [--threads 2]

Vectors with real neighbourhoods: ``--n`` items of 10-30 Zipf-weighted words from
``bench/search.py``'s corpus (5,000 words), embedded with memlane's ``fake:<dim>``
embedder (word hashing: texts that share words are near), unit length; queries
are 3-6 Zipf-weighted words, embedded the same way. For each library: build
rate (vectors/s, ``--threads`` threads), recall@10 against an exact numpy scan,
single-query p50/p99 (one thread, as a search runs), the file size and whether
the saved index can be memory-mapped (opened without reading it into private
memory), with the same graph parameters (M=16, ef_construction=128, ef_search=64,
128 and 256). numpy's exact scan is timed beside them.

``--store N`` measures memlane's own index instead (``memlane.store.vector_index``):
a SQLite store of N such items over 1,000 namespaces, the fold's build time
(matrix, then matrix and graph), then in a fresh process each: the first
search after opening (time, bytes read, private memory), ``SqliteStore.vector``
p50/p99 unscoped (the graph) and in one namespace (an exact scan of its rows),
recall@10 against the exact scan, and the private memory a second process adds
after its searches while the first still maps the index; the same with
``MEMLANE_VECTOR_INDEX=0`` (the private cache of before).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memlane.domain.search.embedders import FakeEmbedder  # noqa: E402
from search import Corpus  # noqa: E402

M, EF_CONSTRUCTION = 16, 128


def dataset(n: int, queries: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    corpus = Corpus(seed=7, namespaces=1000)
    emb = FakeEmbedder(dim)
    texts = [row["value"] for row in corpus.batch(0, n)]
    data = np.asarray(emb.embed_batch(texts), dtype=np.float32)
    qs = np.asarray(emb.embed_batch(corpus.queries("natural", queries)), dtype=np.float32)
    return data, qs


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, int(np.ceil(p / 100 * len(s))) - 1))]


def timed(fn: Any, qs: np.ndarray) -> tuple[list[np.ndarray], float, float]:
    out, lat = [], []
    for q in qs:
        t = time.perf_counter()
        out.append(np.asarray(fn(q)))
        lat.append((time.perf_counter() - t) * 1000)
    return out, pct(lat, 50), pct(lat, 99)


DATA: np.ndarray | None = None
QUERIES: np.ndarray | None = None


def recall(found: list[np.ndarray], truth: list[np.ndarray]) -> float:
    """recall@10, counting as found a row that ties the exact 10th score (fake vectors tie often)."""
    assert DATA is not None and QUERIES is not None
    out = []
    for q, f, t in zip(QUERIES, found, truth, strict=True):
        tenth = float(DATA[t[9]] @ q)
        out.append(min(10, int(np.sum(DATA[f[:10].astype(np.int64)] @ q >= tenth - 1e-6))) / 10)
    return float(np.mean(out))


def strict_recall(found: list[np.ndarray], truth: list[np.ndarray]) -> float:
    return float(
        np.mean([len(set(f[:10].tolist()) & set(t[:10].tolist())) / 10 for f, t in zip(found, truth, strict=True)])
    )


def rerank(data: np.ndarray, q: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The graph's candidates ranked by their exact score (as memlane does over the mapped matrix)."""
    keys = np.asarray(keys, dtype=np.int64)
    s = data[keys] @ q
    return keys[np.argsort(-s, kind="stable")][:10]


_PROBE = """
import json, os, sys, time
import numpy as np
from memlane.store.sqlite import SqliteStore

def private():
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return sum(out.values())

def rchar():
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("rchar:")).split()[1])

path, qfile, hold = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
qs = np.load(qfile)
import memlane.store.vector_index  # imports paid before the counts
before, read = private(), rchar()
store = SqliteStore(path)
t = time.perf_counter()
store.vector(qs[0].tolist(), [()], 10)
first_ms = (time.perf_counter() - t) * 1000
first_read = rchar() - read
first_private = private() - before
lat = {"all": [], "one": []}
tops = []
for i, q in enumerate(qs[1:]):
    t = time.perf_counter()
    tops.append([h[0] for h in store.vector(q.tolist(), [()], 10)])
    lat["all"].append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    store.vector(q.tolist(), [("bench", f"ns{i % 1000:05d}")], 10)
    lat["one"].append((time.perf_counter() - t) * 1000)
out = {"first_ms": first_ms, "first_read": first_read, "first_private": first_private,
       "private": private() - before, "cache_bytes": store.vector_cache_bytes(), "tops": tops,
       "lat": {k: sorted(v) for k, v in lat.items()}}
print(json.dumps(out))
if hold:
    sys.stdin.readline()
"""


def store_mode(args: argparse.Namespace) -> int:
    import subprocess

    import memlane
    from memlane.store import vector_index as vi

    n = args.store
    corpus = Corpus(seed=7, namespaces=1000)
    tmp = Path(tempfile.mkdtemp())
    path = str(tmp / "m.db")
    os.environ["MEMLANE_VECTOR_INDEX"] = "0"  # the build folds nothing; the folds below are timed alone
    mem = memlane.open(path, embedder=f"fake:{args.dim}", indexing="sync")
    t = time.perf_counter()
    for start in range(0, n, 5000):
        mem.put_many(corpus.batch(start, min(n, start + 5000)))
    build_s = time.perf_counter() - t
    qs = np.asarray(mem.embedder.embed_batch(corpus.queries("natural", args.queries + 1)), dtype=np.float32)  # type: ignore[union-attr]
    mem.close()
    del os.environ["MEMLANE_VECTOR_INDEX"]
    np.save(tmp / "q.npy", qs)
    print(f"store: {n:,} items with fake:{args.dim} vectors in {build_s:.1f}s", flush=True)
    t = time.perf_counter()
    vi.fold(path, min_delta=0, graph=False)
    matrix_s = time.perf_counter() - t
    t = time.perf_counter()
    vi.fold(path, min_delta=0, rebuild=True)
    graph_s = time.perf_counter() - t
    extra = n // 16  # the indexer's next fold: 1/16 more rows, copied rows and the graph extended
    os.environ["MEMLANE_VECTOR_INDEX"] = "0"
    mem = memlane.open(path, embedder=f"fake:{args.dim}", indexing="sync")
    mem.put_many(corpus.batch(n, n + extra))
    mem.close()
    del os.environ["MEMLANE_VECTOR_INDEX"]
    t = time.perf_counter()
    assert vi.fold(path)
    update_s = time.perf_counter() - t
    print(f"fold of {extra:,} new rows into {n:,}: {update_s:.1f}s ({extra / update_s:,.0f} new rows/s)", flush=True)
    gen = vi.open_current(vi.directory_for(path))
    assert gen is not None
    print(
        f"fold: matrix only {matrix_s:.1f}s ({n / matrix_s:,.0f} rows/s); matrix + graph {graph_s:.1f}s "
        f"({n / graph_s:,.0f} rows/s); graph {'yes' if gen.graph is not None else 'no'}",
        flush=True,
    )
    vector_bytes = n * args.dim * 4
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    results = {}
    for label, flag in (("shared index", "1"), ("private cache (before)", "0")):
        env["MEMLANE_VECTOR_INDEX"] = flag
        cmd = [sys.executable, "-c", _PROBE, path, str(tmp / "q.npy")]
        first = subprocess.Popen([*cmd, "1"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert first.stdout is not None and first.stdin is not None
        one = json.loads(first.stdout.readline())
        two = json.loads(subprocess.run([*cmd, "0"], env=env, capture_output=True, text=True, check=True).stdout)
        first.stdin.write("\n")
        first.stdin.close()
        first.wait()
        results[label] = (one, two)
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    exact_tops = results["private cache (before)"][0]["tops"]
    print(f"\n{n:,} x {args.dim}, vectors {vector_bytes / 2**20:.0f} MiB, {args.queries} queries, one thread\n")
    print(
        "| subject | first search ms | bytes read by it | private after it | 2nd process private after "
        f"{2 * args.queries} searches | unscoped p50 / p99 ms | one namespace p50 / p99 ms | recall@10 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, (one, two) in results.items():
        rec = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(one["tops"], exact_tops, strict=True)])
        la, lo = one["lat"]["all"], one["lat"]["one"]
        print(
            f"| {label} | {one['first_ms']:.0f} | {one['first_read'] / 2**20:.1f} MiB | "
            f"{one['first_private'] / 2**20:.1f} MiB | {two['private'] / 2**20:.1f} MiB | "
            f"{pct(la, 50):.2f} / {pct(la, 99):.2f} | {pct(lo, 50):.2f} / {pct(lo, 99):.2f} | {rec:.3f} |"
        )
    return 0


def sweep_mode(args: argparse.Namespace) -> int:
    """Graphs of each ``--graphs`` setting over a built store's index matrix, on ``bench/search.py``'s questions.

    Each setting ``KIND:CONNECTIVITY:EXPANSION_ADD[:sSHARDS]`` (or ``current``: the generation's own graph, as
    the fold built it with ``vector_index.graph_params()``) is built afresh over the matrix of the store's
    current generation (``--threads`` threads; ``sN``: N graphs over contiguous slices of the rows, each
    searched and the candidates pooled, like restarts from N entry points), saved under ``--save``, reopened
    memory-mapped (``view=True``, as a search opens it), then searched at each ``--ef``: the graph's
    ``GRAPH_CANDIDATES`` nearest re-scored exactly from the matrix, as ``SharedVectors._approximate`` does.
    recall@10 is counted as ``bench/search.py`` counts it (a row tying the exact 10th score is found) on its
    first ``--recall-queries`` natural questions; latency (graph search + re-scoring, one thread) on
    ``--queries`` of them.
    """
    from usearch.index import Index

    import search as scale
    from memlane.store import vector_index as vi

    gen = vi.open_current(vi.directory_for(args.sweep))
    assert gen is not None, f"no index beside {args.sweep}: fold it first"
    matrix = np.asarray(gen.matrix)
    rows = np.arange(gen.count, dtype=np.uint64)  # keys are rows here (memlane keys by ref: the same graph)
    corpus = scale.ScaleCorpus(args.seed, 1000)
    questions = corpus.questions(max(args.queries, args.recall_queries) + 60)
    qv = scale.FakeVectors().matrix(questions).astype(np.float32)
    nrec = args.recall_queries
    truth = []
    for lo in range(0, nrec, 25):  # one pass over the matrix per 25 questions
        s = qv[lo : min(nrec, lo + 25)] @ matrix.T
        for row in s:
            best = np.argpartition(-row, 9)[:10]
            truth.append((float(row[best].min()), row))
    os.makedirs(args.save, exist_ok=True)
    print(f"{gen.count:,} x {gen.dim} from {args.sweep}; load {os.getloadavg()[0]:.1f}", flush=True)
    print(
        "| graph (kind, connectivity, expansion_add) | build s | file MiB | expansion_search | recall@10 | worst "
        "| below 0.8 | p50 / p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    want = vi.GRAPH_CANDIDATES
    for spec in args.graphs.split(","):
        saved = spec.endswith(".graph")  # a graph an earlier sweep saved (keys: rows)
        if spec == "current":
            assert gen.graph is not None, "the generation has no graph it can search"
            spec = "memlane's fold: " + ":".join(map(str, gen.graph_params or ()))
            kind, conn, add, shards = "", 0, 0, 0
        elif saved:
            kind, conn, add, shards = "", 0, 0, 0
        else:
            kind, conn, add, *rest = spec.split(":")
            shards = int(rest[0][1:]) if rest else 1
        bounds = np.linspace(0, gen.count, shards + 1).astype(np.int64)
        t = time.perf_counter()
        paths = []
        for j in range(shards):
            g = Index(ndim=gen.dim, metric="ip", dtype=kind, connectivity=int(conn), expansion_add=int(add))
            for lo in range(int(bounds[j]), int(bounds[j + 1]), 65536):
                hi = min(int(bounds[j + 1]), lo + 65536)
                g.add(rows[lo:hi], np.ascontiguousarray(matrix[lo:hi]), threads=args.threads)
            path = os.path.join(args.save, f"{spec.replace(':', '-')}-{j}.graph")
            g.save(path)
            paths.append(path)
            del g
        build_s = time.perf_counter() - t
        if saved:
            paths = [spec]
        size = sum(os.path.getsize(p) for p in paths) if paths else gen.graph_size
        graphs = [Index.restore(p, view=True) for p in paths] if paths else [gen.graph]
        by_ref = not paths  # the fold's graph is keyed by ref, the sweep's by row

        def nearest(q: np.ndarray, graphs: list[Any] = graphs, by_ref: bool = by_ref) -> np.ndarray:
            keys = np.concatenate([np.asarray(g.search(q, want, threads=1).keys, dtype=np.int64) for g in graphs])
            rows = gen.positions(keys) if by_ref else keys
            return rows[np.argsort(-(matrix[rows] @ q), kind="stable")[:10]]

        for ef in [int(e) for e in args.ef.split(",")]:
            for g in graphs:
                g.expansion_search = ef

            rec = []
            for j in range(nrec):
                tenth, scores = truth[j]
                rec.append(min(10, int(np.sum(scores[nearest(qv[j])] >= tenth - 1e-6))) / 10)
            lat = []
            for q in qv[: args.queries]:
                t = time.perf_counter()
                nearest(q)
                lat.append((time.perf_counter() - t) * 1000)
            r = np.array(rec)
            print(
                f"| {spec} | {f'{build_s:.0f}' if paths and not saved else '-'} | {size / 2**20:.0f} | {ef:,} | "
                f"{r.mean():.3f} | {r.min():.1f} | {int((r < 0.8).sum())} | {pct(lat, 50):.1f} / {pct(lat, 99):.1f} |",
                flush=True,
            )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--libs", default="usearch,hnswlib,faiss")
    ap.add_argument("--dtypes", default="f32,f16,i8", help="usearch's stored precisions")
    ap.add_argument("--connectivity", type=int, default=M, help="usearch's M")
    ap.add_argument("--ef", default="64,128,256", help="ef_search values")
    ap.add_argument("--rerank", action="store_true", help="also: usearch's top ef re-scored exactly")
    ap.add_argument("--store", type=int, default=0, help="measure memlane's index on a store of this many items")
    ap.add_argument("--sweep", metavar="DB", help="graph settings over this built store's index (see sweep_mode)")
    ap.add_argument("--graphs", default="i8:32:128,f16:32:128,f32:32:128", help="KIND:CONNECTIVITY:EXPANSION_ADD,...")
    ap.add_argument("--recall-queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=20240607, help="bench/search.py's seed (its questions)")
    ap.add_argument("--save", default=os.path.join(tempfile.gettempdir(), "memlane-graphs"))
    args = ap.parse_args()
    if args.sweep:
        return sweep_mode(args)
    if args.store:
        return store_mode(args)
    libs = args.libs.split(",")
    efs = [int(e) for e in args.ef.split(",")]
    global DATA, QUERIES
    t = time.perf_counter()
    data, qs = dataset(args.n, args.queries, args.dim)
    DATA, QUERIES = data, qs
    print(f"dataset: {args.n} x {args.dim} fake:{args.dim} vectors in {time.perf_counter() - t:.1f}s", flush=True)
    keys = np.arange(args.n, dtype=np.uint64)

    def exact(q: np.ndarray) -> np.ndarray:
        s = data @ q
        top = np.argpartition(-s, 10)[:10]
        return top[np.argsort(-s[top])]

    truth, p50, p99 = timed(exact, qs)
    rows = [("numpy exact scan", "-", 1.0, 1.0, p50, p99, data.nbytes, "yes (np.memmap)")]
    tmp = Path(tempfile.mkdtemp())

    try:
        if "usearch" not in libs:
            raise ImportError("not asked for")
        import usearch
        from usearch.index import Index

        for dtype in args.dtypes.split(","):
            idx = Index(
                ndim=args.dim, metric="ip", dtype=dtype, connectivity=args.connectivity, expansion_add=EF_CONSTRUCTION
            )
            t = time.perf_counter()
            idx.add(keys, data, threads=args.threads)
            rate = args.n / (time.perf_counter() - t)
            path = str(tmp / f"u-{dtype}.usearch")
            idx.save(path)
            view = Index.restore(path, view=True)
            for ef in efs:
                view.expansion_search = ef
                found, p50, p99 = timed(lambda q, v=view: v.search(q, 10, threads=1).keys, qs)
                rows.append(
                    (
                        f"usearch {usearch.__version__} {dtype} M={args.connectivity} ef={ef}",
                        f"{rate:,.0f}",
                        strict_recall(found, truth),
                        recall(found, truth),
                        p50,
                        p99,
                        os.path.getsize(path),
                        "yes (restore(view=True))",
                    )
                )
                if args.rerank:
                    found, p50, p99 = timed(lambda q, v=view, e=ef: rerank(data, q, v.search(q, e, threads=1).keys), qs)
                    rows.append(
                        (
                            f"usearch {dtype} M={args.connectivity} ef={ef}, top {ef} re-scored exactly",
                            f"{rate:,.0f}",
                            strict_recall(found, truth),
                            recall(found, truth),
                            p50,
                            p99,
                            os.path.getsize(path),
                            "yes (graph and matrix mapped)",
                        )
                    )
            del idx
    except ImportError as e:
        print(f"usearch: {e}")
    try:
        if "hnswlib" not in libs:
            raise ImportError("not asked for")
        import hnswlib

        idx = hnswlib.Index(space="ip", dim=args.dim)
        idx.init_index(max_elements=args.n, M=M, ef_construction=EF_CONSTRUCTION, random_seed=1)
        idx.set_num_threads(args.threads)
        t = time.perf_counter()
        idx.add_items(data, keys)
        rate = args.n / (time.perf_counter() - t)
        path = str(tmp / "h.bin")
        idx.save_index(path)
        idx.set_num_threads(1)
        for ef in efs:
            idx.set_ef(ef)
            found, p50, p99 = timed(lambda q: idx.knn_query(q, 10)[0][0], qs)
            rows.append(
                (
                    f"hnswlib {hnswlib.__version__ if hasattr(hnswlib, '__version__') else '0.8'} ef={ef}",
                    f"{rate:,.0f}",
                    strict_recall(found, truth),
                    recall(found, truth),
                    p50,
                    p99,
                    os.path.getsize(path),
                    "no (load_index reads it into memory)",
                )
            )
        del idx
    except ImportError as e:
        print(f"hnswlib: {e}")
    try:
        if "faiss" not in libs:
            raise ImportError("not asked for")
        import faiss

        faiss.omp_set_num_threads(args.threads)
        idx = faiss.IndexHNSWFlat(args.dim, M, faiss.METRIC_INNER_PRODUCT)
        idx.hnsw.efConstruction = EF_CONSTRUCTION
        t = time.perf_counter()
        idx.add(data)
        rate = args.n / (time.perf_counter() - t)
        path = str(tmp / "f.faiss")
        faiss.write_index(idx, path)
        try:
            loaded = faiss.read_index(path, faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
            mm = "IO_FLAG_MMAP accepted (flat codes only; the graph is read)"
        except Exception as e:  # noqa: BLE001
            loaded, mm = idx, f"no ({str(e)[:40]})"
        faiss.omp_set_num_threads(1)
        for ef in efs:
            loaded.hnsw.efSearch = ef
            found, p50, p99 = timed(lambda q: loaded.search(q[None, :], 10)[1][0], qs)
            rows.append(
                (
                    f"faiss-cpu {faiss.__version__} HNSWFlat ef={ef}",
                    f"{rate:,.0f}",
                    strict_recall(found, truth),
                    recall(found, truth),
                    p50,
                    p99,
                    os.path.getsize(path),
                    mm,
                )
            )
    except ImportError as e:
        print(f"faiss: {e}")

    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{args.n:,} x {args.dim}, {args.queries} queries, build threads {args.threads}, search 1 thread\n")
    print("| index | build (vectors/s) | recall@10 (ids) | recall@10 (ties count) | p50 ms | p99 ms | file | mapped |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rate, rec, tied, p50, p99, size, mm in rows:
        print(f"| {name} | {rate} | {rec:.3f} | {tied:.3f} | {p50:.2f} | {p99:.2f} | {size / 2**20:.0f} MiB | {mm} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
