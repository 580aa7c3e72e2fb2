"""Search speed: lexical, vector and hybrid ``Memory.search`` against raw FTS5 and raw numpy.

Usage::

    python bench/search.py [--n 10000 --n 100000] [--n 1000000] [--queries 400] [--json OUT]
                           [--backend sqlite|postgres|both]
    python bench/search.py --common [--n 100000] [--queries 200] [--backend sqlite|postgres|both]

For each N, in one process: ``put_many`` N synthetic items (Zipf-distributed
words over a fixed vocabulary, 10-30 words each, spread over ``--namespaces``
namespaces) into a fresh store opened with a *synthetic* embedder (random unit
vectors seeded by a hash of the text, 384 dimensions), so building 100k items
takes seconds instead of the hours MiniLM would need; search speed does not
depend on where vectors came from. Then, warm, with the subjects interleaved
in rotating blocks (``_util.time_calls_interleaved``):

* ``Memory.search`` with ``channels=("lexical",)``, ``("vector",)`` and both
  (hybrid), ``limit=10``, over the whole store, query vectors passed as
  ``embedding=`` so every subject gets the same precomputed vector (the cost
  of embedding a query with MiniLM is reported on its own line);
* raw FTS5 on a second plain ``sqlite3`` connection to the same file: the
  same quoted-OR query, top 10 by ``bm25``, fetching the rows;
* raw numpy: the same vectors as one float32 matrix, ``matrix @ q``,
  ``argpartition`` top 10, sorted;
* hybrid scoped to one namespace (``namespace_prefix``), the usual agent call.

Three query sets: ``rare`` (1-3 words drawn uniformly from the vocabulary,
mostly tail terms: short posting lists), ``natural`` (3-6 words drawn with
the corpus's own Zipf weights, so common words with long posting lists are
in most queries, as in questions an agent asks) and ``natural-stop`` (the
same queries with English stop words dropped, as ``bench/retrieval.py``'s
stop-word experiment does: what that change would do to speed).

BLAS threading matters on small machines: run once as is and once with
``OPENBLAS_NUM_THREADS=1`` to compare (the setting in effect is printed).

Also reported: the first vector search after opening (it loads the vector
cache from SQLite), the cache's bytes (``store.vector_cache_bytes()``) and the
process RSS. Files live in a temporary directory removed afterwards.

``--backend postgres`` (``both``: SQLite first, then PostgreSQL, in one run)
builds the same items with the same synthetic vectors in a fresh database on
``$MEMLANE_TEST_PG_URL`` or a throwaway pgserver (PostgreSQL 16 + pgvector),
runs ``VACUUM ANALYZE``, times the first vector search (it creates the HNSW
index), and then times the same memlane subjects beside raw psycopg queries on
the same tables through a second plain connection:

* raw ts_rank: ``tsv @@ to_tsquery('memlane', q)`` ``ORDER BY ts_rank(tsv, q)
  DESC LIMIT 10`` with memlane's own terms quoted and OR-ed, fetching the rows
  (the GIN index; plain ``ts_rank``, no IDF);
* raw pgvector: ``ORDER BY embedding::vector(384) <=> q LIMIT 10`` on memlane's
  HNSW expression index (default ``hnsw.ef_search``, 40), fetching the rows;
* raw pgvector with memlane's own nomination settings (``LIMIT 50``,
  ``hnsw.ef_search = 100``: memlane asks every channel for
  ``candidate_k = max(50, 2 * limit)`` candidates), refs only.

Reported: p50/p99 and memlane/raw ratios, the top-10 overlap of memlane with
each raw query (memlane's lexical ranking is IDF-weighted, so it differs from
plain ``ts_rank`` by design), the vector recall@10 of both settings against
an exact scan, whether each raw plan uses its index, and the database size.
A comparison table of both backends ends a ``both`` run.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import memlane
from memlane.domain.search import rank

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import (  # noqa: E402
    Goal,
    db_size,
    fmt_bytes,
    format_table,
    machine_info,
    pg_url_for,
    postgres_server,
    progress,
    ratio,
    summarize,
    time_calls_interleaved,
    write_json,
)
from retrieval import STOP_WORDS, strip_stop_words  # noqa: E402

DIM = 384
QUERY_KINDS = ("rare", "natural", "natural-stop")
GOAL_HYBRID = Goal("hybrid p50 < 30 ms at 100k", 30.0)
GOAL_LEXICAL = Goal("lexical p50 <= 1.5x raw FTS5", 1.5)

RAW_FTS = (
    "SELECT i.* FROM (SELECT rowid AS r, bm25(items_fts) AS s FROM items_fts "
    "WHERE items_fts MATCH ? ORDER BY s LIMIT 10) AS top JOIN items i ON i.rowid = top.r ORDER BY top.s"
)

_COMMON = """
the a of to and in for on with at by from about after before is was will user prefers meeting project
deadline team review code release notes customer support ticket issue fixed bug feature request design
document summary email call schedule weekly sync budget report quarter plan goal task status blocked done
progress draft final version update change config setting editor font size language python rust database
query index cache memory agent model prompt context search result ranking latency error timeout deploy
server client key value store file backup migration schema table history travel flight hotel booking dinner
restaurant coffee morning evening weekend holiday birthday family friend colleague manager contact phone
address city office remote training workshop conference talk demo feedback invoice payment refund order
delivery recipe vegetarian allergy breakfast lunch gym running music podcast book article paper research
""".split()
_SYLLABLES = "ka lo mi nu pe ra si to vu ze bri dan fel gor hin jas kel lum mor nix".split()


class RandomUnitEmbedder:
    """Deterministic random unit vectors seeded by a BLAKE2b hash of the text.

    Stands in for a real model so a 100k-item store builds in seconds; the
    vectors carry no meaning, which does not matter for speed. Rows are
    returned as float32 numpy arrays (sequences of floats) to keep the build
    cheap.
    """

    name = "bench-random-unit"
    dimension = DIM

    def embed_batch(self, texts: Sequence[str]) -> list[Any]:
        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(DIM, dtype=np.float32)
            out.append(v / np.linalg.norm(v))
        return out


class Corpus:
    """Items and queries as pure functions of a seed."""

    def __init__(self, seed: int, namespaces: int, vocab_size: int = 5000) -> None:
        vocab = list(dict.fromkeys(_COMMON))
        seen = set(vocab)
        for parts in (p for n in (2, 3, 4) for p in itertools.product(_SYLLABLES, repeat=n)):
            word = "".join(parts)
            if word not in seen:
                seen.add(word)
                vocab.append(word)
            if len(vocab) >= vocab_size:
                break
        self.vocab = vocab
        self.seed = seed
        self.namespaces = [("bench", f"ns{i:05d}") for i in range(namespaces)]
        acc, self._cum = 0.0, []
        for r in range(1, len(vocab) + 1):
            acc += 1.0 / r**1.07
            self._cum.append(acc)

    def _zipf(self, rng: random.Random, k: int) -> list[str]:
        return rng.choices(self.vocab, cum_weights=self._cum, k=k)

    def batch(self, start: int, stop: int) -> list[dict[str, Any]]:
        rng = random.Random(self.seed * 1_000_003 + start)
        return [
            {
                "namespace": self.namespaces[i % len(self.namespaces)],
                "key": f"notes.{i}",
                "value": " ".join(self._zipf(rng, rng.randint(10, 30))),
            }
            for i in range(start, stop)
        ]

    def queries(self, kind: str, count: int) -> list[str]:
        rng = random.Random(self.seed + (1 if kind == "rare" else 2))
        if kind == "rare":
            return [" ".join(rng.choice(self.vocab) for _ in range(rng.randint(1, 3))) for _ in range(count)]
        natural = [" ".join(self._zipf(rng, rng.randint(3, 6))) for _ in range(count)]
        if kind == "natural-stop":  # the same questions with English stop words dropped (see retrieval.py)
            return [strip_stop_words(q, STOP_WORDS["nltk"]) for q in natural]
        return natural


def rss_bytes() -> dict[str, int]:
    """Current and peak resident set size of this process (Linux /proc)."""
    out = {}
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"rss": out.get("VmRSS", 0), "peak": out.get("VmHWM", 0)}


def match_expr(query: str) -> str:
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in rank.terms(query))


def minilm_query_cost(count: int = 50) -> dict[str, Any] | None:
    """p50 of embedding one short question with MiniLM (what a text query adds to vector/hybrid)."""
    try:
        from memlane.domain.search.minilm import MiniLMEmbedder

        emb = MiniLMEmbedder()
        emb.load()
    except Exception as e:  # the vectors extra is optional
        return {"error": str(e)}
    corpus = Corpus(7, 1)
    qs = corpus.queries("natural", count + 5)
    emb.embed_batch(qs[:5])
    samples = []
    for q in qs[5:]:
        t0 = time.perf_counter_ns()
        emb.embed_batch([q])
        samples.append(time.perf_counter_ns() - t0)
    s = summarize(samples)
    return {"n": s.n, "p50_ms": round(s.p50_us / 1000, 3), "p99_ms": round(s.p99_us / 1000, 3)}


def run(n: int, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    corpus = Corpus(args.seed, args.namespaces)
    path = workdir / "search.db"
    embedder = RandomUnitEmbedder()
    result: dict[str, Any] = {"n": n, "namespaces": args.namespaces, "vocabulary": len(corpus.vocab)}

    # build --------------------------------------------------------------------
    progress(f"N={n:,}: put_many in batches of {args.batch:,} (synthetic vectors)")
    mem = memlane.open(str(path), embedder=embedder)
    t0 = time.perf_counter()
    for start in range(0, n, args.batch):
        mem.put_many(corpus.batch(start, min(n, start + args.batch)))
    build_s = time.perf_counter() - t0
    mem.close()
    result["build"] = {"seconds": round(build_s, 2), "items_per_s": round(n / build_s, 1), "db_bytes": db_size(path)}
    progress(f"  built in {build_s:,.1f} s ({n / build_s:,.0f} items/s), {fmt_bytes(db_size(path))}")

    # fresh open: the first vector search loads the cache ------------------------
    rss_before = rss_bytes()
    mem = memlane.open(str(path), embedder=embedder)
    probe = embedder.embed_batch(["cache load probe"])[0].tolist()
    t0 = time.perf_counter()
    mem.search("cache load probe", channels=("vector",), embedding=probe, limit=10)
    first_ms = (time.perf_counter() - t0) * 1000
    cache_bytes = mem.store.vector_cache_bytes()
    rss_after = rss_bytes()
    result["vector_cache"] = {
        "first_search_ms": round(first_ms, 2),
        "bytes": cache_bytes,
        "bytes_per_100k_items": round(cache_bytes / n * 100_000),
        "rss_before_bytes": rss_before["rss"],
        "rss_after_bytes": rss_after["rss"],
    }
    progress(f"  first vector search (cache load) {first_ms:,.0f} ms; cache {fmt_bytes(cache_bytes)}")

    # raw baselines ----------------------------------------------------------------
    raw = sqlite3.connect(str(path), isolation_level=None)
    refs_and_blobs = raw.execute("SELECT item_rowid, embedding FROM item_vectors ORDER BY item_rowid").fetchall()
    matrix = np.frombuffer(b"".join(b for _, b in refs_and_blobs), dtype="<f4").reshape(len(refs_and_blobs), DIM)
    matrix = np.ascontiguousarray(matrix)
    row_refs = np.array([r for r, _ in refs_and_blobs], dtype=np.int64)
    del refs_and_blobs
    raw_exec = raw.execute

    def raw_fts(match: str) -> Any:
        return raw_exec(RAW_FTS, (match,)).fetchall()

    def raw_numpy(q: Any) -> Any:
        scores = matrix @ q
        top = np.argpartition(-scores, 9)[:10]
        top = top[np.argsort(-scores[top])]
        return row_refs[top], scores[top]

    def lexical(q: str) -> Any:
        return mem.search(q, limit=10, channels=("lexical",))

    def vector(q: str, vec: Any) -> Any:
        return mem.search(q, limit=10, channels=("vector",), embedding=vec)

    def hybrid(q: str, vec: Any) -> Any:
        return mem.search(q, limit=10, embedding=vec)

    def hybrid_ns(q: str, vec: Any, ns: tuple[str, ...]) -> Any:
        return mem.search(q, limit=10, embedding=vec, namespace_prefix=ns)

    # timed -----------------------------------------------------------------------
    warm = min(50, args.queries)
    result["queries"] = {}
    qrng = random.Random(args.seed + 3)
    for kind in args.query_kind:
        texts = corpus.queries(kind, args.queries + warm)
        vecs = [v.tolist() for v in embedder.embed_batch(texts)]
        arrays = [np.asarray(v, dtype=np.float32) for v in vecs]
        namespaces = [corpus.namespaces[qrng.randrange(len(corpus.namespaces))] for _ in texts]
        matches = [match_expr(t) for t in texts]
        # sanity: memlane lexical and raw FTS5 agree on the top 10
        agree = 0
        for t, m in zip(texts[:50], matches[:50], strict=True):
            mine = [h.item.key for h in lexical(t).hits]
            theirs = [row[3] for row in raw_fts(m)]
            agree += mine == theirs
        progress(f"N={n:,} {kind}: timing {args.queries:,} queries x 6 subjects (+{warm} warm-up)")
        samples = time_calls_interleaved(
            {
                "raw FTS5": (raw_fts, [(m,) for m in matches]),
                "memlane lexical": (lexical, [(t,) for t in texts]),
                "raw numpy": (raw_numpy, [(a,) for a in arrays]),
                "memlane vector": (vector, list(zip(texts, vecs, strict=True))),
                "memlane hybrid": (hybrid, list(zip(texts, vecs, strict=True))),
                "memlane hybrid, one namespace": (hybrid_ns, list(zip(texts, vecs, namespaces, strict=True))),
            },
            rounds=args.rounds,
            warmup=warm,
        )
        summary = {name: summarize(s).to_dict() for name, s in samples.items()}
        result["queries"][kind] = {
            "examples": texts[warm : warm + 3],
            "top10_agreement_lexical_vs_raw": round(agree / 50, 3),
            "latency_us": summary,
        }
    result["rss_end_bytes"] = rss_bytes()
    mem.close()
    raw.close()
    return result


def pg_tsquery(query: str) -> str:
    """memlane's query terms, each quoted, OR-ed, for ``to_tsquery`` (as bench/kv.py's raw search)."""
    return " | ".join("'" + t.replace("'", "''") + "'" for t in rank.terms(query))


def run_postgres(n: int, admin_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same items and subjects on PostgreSQL, beside raw psycopg queries on memlane's own tables."""
    import psycopg

    dbname = f"memlane_search_{os.getpid()}_{n}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        row: Any = admin.execute("SHOW server_version").fetchone()
        server_version = row[0]
        admin.execute(f'DROP DATABASE IF EXISTS "{dbname}"')
        admin.execute(f'CREATE DATABASE "{dbname}"')
    try:
        return _run_postgres(n, pg_url_for(admin_url, dbname), server_version, args)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def _run_postgres(n: int, url: str, server_version: str, args: argparse.Namespace) -> dict[str, Any]:
    import psycopg

    from memlane.store._common import ITEM_COLUMNS

    corpus = Corpus(args.seed, args.namespaces)
    embedder = RandomUnitEmbedder()
    result: dict[str, Any] = {
        "backend": "postgres",
        "server_version": server_version,
        "n": n,
        "namespaces": args.namespaces,
        "vocabulary": len(corpus.vocab),
    }

    # build ----------------------------------------------------------------------
    progress(f"N={n:,} postgres: put_many in batches of {args.batch:,} (synthetic vectors)")
    mem = memlane.open(url, embedder=embedder)
    t0 = time.perf_counter()
    for start in range(0, n, args.batch):
        mem.put_many(corpus.batch(start, min(n, start + args.batch)))
    build_s = time.perf_counter() - t0
    raw = psycopg.connect(url, autocommit=True)
    t0 = time.perf_counter()
    raw.execute("VACUUM ANALYZE items")
    raw.execute("VACUUM ANALYZE item_vectors")
    vacuum_s = time.perf_counter() - t0
    progress(f"  built in {build_s:,.1f} s ({n / build_s:,.0f} items/s); VACUUM ANALYZE {vacuum_s:,.1f} s")

    # the first vector search creates the HNSW index ---------------------------------
    probe = embedder.embed_batch(["cache load probe"])[0].tolist()
    t0 = time.perf_counter()
    mem.search("cache load probe", channels=("vector",), embedding=probe, limit=10)
    first_s = time.perf_counter() - t0
    sizes: Any = raw.execute(
        "SELECT pg_database_size(current_database()), pg_total_relation_size('items'), "
        "pg_total_relation_size('item_vectors'), pg_relation_size('items_tsv'), "
        f"pg_relation_size('item_vectors_hnsw_{DIM}')"
    ).fetchone()
    result["build"] = {
        "seconds": round(build_s, 2),
        "items_per_s": round(n / build_s, 1),
        "vacuum_analyze_seconds": round(vacuum_s, 2),
        "first_vector_search_seconds": round(first_s, 2),
        "database_bytes": sizes[0],
        "items_bytes": sizes[1],
        "item_vectors_bytes": sizes[2],
        "gin_bytes": sizes[3],
        "hnsw_bytes": sizes[4],
    }
    progress(
        f"  first vector search (creates the HNSW index) {first_s:,.1f} s; database {fmt_bytes(sizes[0])}, "
        f"HNSW index {fmt_bytes(sizes[4])}"
    )

    # raw baselines on a second plain connection ---------------------------------------
    raw_fts_sql = (
        f"SELECT {ITEM_COLUMNS} FROM items WHERE tsv @@ to_tsquery('memlane', %s) "
        "ORDER BY ts_rank(tsv, to_tsquery('memlane', %s)) DESC LIMIT 10"
    )
    raw_vec_sql = (
        f"SELECT {ITEM_COLUMNS} FROM (SELECT item_ref, embedding::vector({DIM}) <=> %s::vector({DIM}) AS d "
        "FROM item_vectors ORDER BY d LIMIT 10) AS v JOIN items ON items.ref = v.item_ref ORDER BY v.d"
    )
    # memlane's own nomination: candidate_k = max(50, 2 * limit) refs, hnsw.ef_search = 2 * candidate_k
    wide_k = 50
    raw_wide_sql = (
        f"SELECT item_ref, 1 - (embedding::vector({DIM}) <=> %s::vector({DIM})), version FROM item_vectors "
        f"ORDER BY embedding::vector({DIM}) <=> %s::vector({DIM}) LIMIT {wide_k}"
    )
    exact_sql = (
        f"SELECT items.id FROM item_vectors v JOIN items ON items.ref = v.item_ref "
        f"ORDER BY v.embedding::vector({DIM}) <=> %s::vector({DIM}) LIMIT 10"
    )
    execute = raw.execute
    wide = psycopg.connect(url, autocommit=True)
    wide.execute(f"SET hnsw.ef_search = {2 * wide_k}")

    def raw_fts(q1: str, q2: str) -> Any:
        return execute(raw_fts_sql, (q1, q2)).fetchall()

    def raw_vec(literal: str) -> Any:
        return execute(raw_vec_sql, (literal,)).fetchall()

    def raw_wide(literal: str) -> Any:
        return wide.execute(raw_wide_sql, (literal, literal)).fetchall()

    def exact_top10(literal: str) -> set[str]:
        with raw.transaction():
            raw.execute("SET LOCAL enable_indexscan = off")
            return {r[0] for r in raw.execute(exact_sql, (literal,)).fetchall()}

    def lexical(q: str) -> Any:
        return mem.search(q, limit=10, channels=("lexical",))

    def vector(q: str, vec: Any) -> Any:
        return mem.search(q, limit=10, channels=("vector",), embedding=vec)

    def hybrid(q: str, vec: Any) -> Any:
        return mem.search(q, limit=10, embedding=vec)

    def hybrid_ns(q: str, vec: Any, ns: tuple[str, ...]) -> Any:
        return mem.search(q, limit=10, embedding=vec, namespace_prefix=ns)

    def plan(sql: str, params: tuple[Any, ...]) -> str:
        return "\n".join(r[0] for r in execute("EXPLAIN " + sql, params).fetchall())

    # timed ---------------------------------------------------------------------------
    warm = min(50, args.queries)
    result["queries"] = {}
    qrng = random.Random(args.seed + 3)
    for kind in args.query_kind:
        texts = corpus.queries(kind, args.queries + warm)
        vecs = [v.tolist() for v in embedder.embed_batch(texts)]
        literals = ["[" + ",".join(repr(float(x)) for x in v) + "]" for v in vecs]
        namespaces = [corpus.namespaces[qrng.randrange(len(corpus.namespaces))] for _ in texts]
        tsq = [(pg_tsquery(t), pg_tsquery(t)) for t in texts]
        plans = {
            "raw ts_rank uses the GIN index": "items_tsv" in plan(raw_fts_sql, tsq[0]),
            "raw pgvector uses the HNSW index": f"item_vectors_hnsw_{DIM}" in plan(raw_vec_sql, (literals[0],)),
        }
        if "vector_recall_at_10" not in result:
            # HNSW is approximate: recall@10 against an exact scan, for the default and for memlane's settings
            hits = {"raw pgvector": 0, "memlane vector": 0}
            for v, lit in zip(vecs[:50], literals[:50], strict=True):
                exact = exact_top10(lit)
                hits["raw pgvector"] += len(
                    exact & {r[0] for r in execute(raw_vec_sql.replace(ITEM_COLUMNS, "items.id"), (lit,))}
                )
                hits["memlane vector"] += len(exact & {i for i, _, _ in mem.store.vector(v, [()], wide_k)[:10]})
            result["vector_recall_at_10"] = {k: round(h / 500, 3) for k, h in hits.items()}
        # top-10 overlap with the raw queries (memlane's lexical ranking is IDF-weighted: it differs by design)
        lex_same = vec_same = lex_total = vec_total = 0
        for t, v, q, lit in zip(texts[:50], vecs[:50], tsq[:50], literals[:50], strict=True):
            mine = {h.item.key for h in lexical(t).hits}
            theirs = {row[2] for row in raw_fts(*q)}
            lex_same, lex_total = lex_same + len(mine & theirs), lex_total + max(len(mine), len(theirs))
            mine = {h.item.key for h in vector(t, v).hits}
            theirs = {row[2] for row in raw_vec(lit)}
            vec_same, vec_total = vec_same + len(mine & theirs), vec_total + max(len(mine), len(theirs))
        progress(f"N={n:,} postgres {kind}: timing {args.queries:,} queries x 7 subjects (+{warm} warm-up)")
        samples = time_calls_interleaved(
            {
                "raw ts_rank": (raw_fts, tsq),
                "memlane lexical": (lexical, [(t,) for t in texts]),
                "raw pgvector": (raw_vec, [(lit,) for lit in literals]),
                "raw pgvector, k=50, ef_search=100": (raw_wide, [(lit,) for lit in literals]),
                "memlane vector": (vector, list(zip(texts, vecs, strict=True))),
                "memlane hybrid": (hybrid, list(zip(texts, vecs, strict=True))),
                "memlane hybrid, one namespace": (hybrid_ns, list(zip(texts, vecs, namespaces, strict=True))),
            },
            rounds=args.rounds,
            warmup=warm,
        )
        result["queries"][kind] = {
            "examples": texts[warm : warm + 3],
            "top10_overlap_lexical_vs_raw": round(lex_same / lex_total, 3) if lex_total else None,
            "top10_overlap_vector_vs_raw": round(vec_same / vec_total, 3) if vec_total else None,
            "plans": plans,
            "latency_us": {name: summarize(s).to_dict() for name, s in samples.items()},
        }
    mem.close()
    raw.close()
    wide.close()
    return result


RAW_BASE = {
    "sqlite": {"memlane lexical": "raw FTS5", "memlane vector": "raw numpy"},
    "postgres": {"memlane lexical": "raw ts_rank", "memlane vector": "raw pgvector"},
}


def report(res: dict[str, Any]) -> str:
    n = res["n"]
    backend = res.get("backend", "sqlite")
    bases = RAW_BASE[backend]
    raw_lex, raw_vec = bases["memlane lexical"], bases["memlane vector"]
    lines = []
    for kind, q in res["queries"].items():
        lat = q["latency_us"]
        rows = []
        for name, s in lat.items():
            base = bases.get(name)
            vs = f"{ratio(s['p50_us'], lat[base]['p50_us']):.2f}x {base}" if base else ""
            wide = "raw pgvector, k=50, ef_search=100"
            if name == "memlane vector" and wide in lat:
                vs += f"; {ratio(s['p50_us'], lat[wide]['p50_us']):.2f}x k=50"
            if name == "memlane hybrid":
                both = lat[raw_lex]["p50_us"] + lat[raw_vec]["p50_us"]
                vs = f"{ratio(s['p50_us'], both):.2f}x {raw_lex} + {raw_vec}"
            rows.append(
                [name, f"{s['p50_us'] / 1000:.2f}", f"{s['p90_us'] / 1000:.2f}", f"{s['p99_us'] / 1000:.2f}", vs]
            )
        if backend == "postgres":
            checks = (
                f"top-10 overlap with raw: lexical {q['top10_overlap_lexical_vs_raw']:.0%} (IDF-weighted vs plain "
                f"ts_rank), vector {q['top10_overlap_vector_vs_raw']:.0%}; "
                + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in q["plans"].items())
            )
        else:
            checks = f"lexical/raw top-10 agreement {q['top10_agreement_lexical_vs_raw']:.0%}"
        title = (
            f"{backend} N={n:,}, {kind} queries (e.g. {q['examples'][0]!r}); {lat[raw_lex]['n']} timed each; " + checks
        )
        lines.append(format_table(["subject", "p50 ms", "p90 ms", "p99 ms", "p50 vs raw"], rows, title=title))
        hyb = lat["memlane hybrid"]["p50_us"] / 1000
        lex = ratio(lat["memlane lexical"]["p50_us"], lat[raw_lex]["p50_us"])
        goals = [f"lexical p50 <= 1.5x {raw_lex}: {lex:.2f}x {GOAL_LEXICAL.status(lex)}"]
        if n == 100_000:
            goals.append(f"{GOAL_HYBRID.label}: {hyb:.1f} ms {GOAL_HYBRID.status(hyb)}")
        lines.append("  goals: " + "; ".join(goals))
        lines.append("")
    b = res["build"]
    if backend == "postgres":
        lines.append(
            f"postgres {res['server_version']} N={n:,}: build {b['seconds']:,.1f} s ({b['items_per_s']:,.0f} items/s), "
            f"VACUUM ANALYZE {b['vacuum_analyze_seconds']:,.1f} s; first vector search (creates the HNSW index) "
            f"{b['first_vector_search_seconds']:,.1f} s; database {fmt_bytes(b['database_bytes'])} (items "
            f"{fmt_bytes(b['items_bytes'])}, item_vectors {fmt_bytes(b['item_vectors_bytes'])}, GIN "
            f"{fmt_bytes(b['gin_bytes'])}, HNSW {fmt_bytes(b['hnsw_bytes'])})"
        )
        rec = res.get("vector_recall_at_10")
        if rec:
            lines.append(
                f"vector recall@10 against an exact scan (50 queries): raw pgvector (LIMIT 10, default ef_search 40) "
                f"{rec['raw pgvector']:.2f}; memlane (k=50, ef_search=100) {rec['memlane vector']:.2f}"
            )
        return "\n".join(lines)
    vc = res["vector_cache"]
    lines.append(
        f"N={n:,}: build {b['seconds']:,.1f} s ({b['items_per_s']:,.0f} items/s), file {fmt_bytes(b['db_bytes'])}; "
        f"first vector search (loads the cache) {vc['first_search_ms']:,.0f} ms; vector cache {fmt_bytes(vc['bytes'])} "
        f"= {fmt_bytes(vc['bytes_per_100k_items'])} per 100k items; RSS {fmt_bytes(vc['rss_before_bytes'])} before "
        f"the cache load, {fmt_bytes(vc['rss_after_bytes'])} after, {fmt_bytes(res['rss_end_bytes']['rss'])} at the "
        f"end (incl. the raw numpy copy), peak {fmt_bytes(res['rss_end_bytes']['peak'])}"
    )
    return "\n".join(lines)


def compare(runs: list[dict[str, Any]]) -> str:
    """p50 of each memlane subject on both backends, side by side, with the PostgreSQL/SQLite ratio."""
    by = {(r.get("backend", "sqlite"), r["n"]): r for r in runs}
    out = []
    for n in sorted({r["n"] for r in runs}):
        lite, pg = by.get(("sqlite", n)), by.get(("postgres", n))
        if lite is None or pg is None:
            continue
        rows = []
        for kind in lite["queries"]:
            if kind not in pg["queries"]:
                continue
            a, b = lite["queries"][kind]["latency_us"], pg["queries"][kind]["latency_us"]
            for name in ("memlane lexical", "memlane vector", "memlane hybrid", "memlane hybrid, one namespace"):
                rows.append(
                    [
                        f"{kind}: {name}",
                        f"{a[name]['p50_us'] / 1000:.2f} / {a[name]['p99_us'] / 1000:.2f}",
                        f"{b[name]['p50_us'] / 1000:.2f} / {b[name]['p99_us'] / 1000:.2f}",
                        f"{ratio(b[name]['p50_us'], a[name]['p50_us']):.2f}x",
                    ]
                )
        title = f"N={n:,}: SQLite vs PostgreSQL, same items, same queries (ms)"
        out.append(
            format_table(["subject", "SQLite p50 / p99", "PostgreSQL p50 / p99", "PG / SQLite p50"], rows, title=title)
        )
    return "\n\n".join(out)


# -- common words (issue #14) ---------------------------------------------------------


def common_words(n: int, url: str, backend: str, count: int) -> dict[str, Any]:
    """Lexical search and recall for words present in every row: ``"value 123 text"`` over N items.

    Every item's text is ``"value <i> text <zipf words>"``, one namespace per
    100 items; timed, warm, with the floor on (the default): ``search`` with
    ``channels=("lexical",)`` over the whole store, ``recall`` (lexical, no
    embedder) over the whole store and in one namespace, for the query
    ``"value <i> text"`` with a different ``i`` each call (so the one rare
    word differs) and for ``"value text"`` (only words in every row).
    """
    corpus = Corpus(20240607, 10)
    rng = random.Random(7)
    with memlane.open(url, embedder=None) as mem:
        for start in range(0, n, 5000):
            stop = min(n, start + 5000)
            mem.put_many(
                [
                    {"namespace": f"team/{i // 100}", "key": f"notes.{i}", "value": f"value {i} text {words}"}
                    for i, words in zip(
                        range(start, stop),
                        (" ".join(corpus._zipf(rng, rng.randint(5, 15))) for _ in range(start, stop)),
                        strict=True,
                    )
                ]
            )
        if backend == "postgres":
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE items")
        picks = [rng.randrange(n) for _ in range(count)]
        subjects = {
            "search lexical 'value <i> text'": lambda i: mem.search(f"value {i} text", channels=["lexical"]),
            "search lexical 'value text'": lambda i: mem.search("value text", channels=["lexical"]),
            "recall 'value <i> text'": lambda i: mem.recall(f"value {i} text", mode="lexical"),
            "recall 'value <i> text', one namespace": lambda i: mem.recall(
                f"value {i} text", mode="lexical", namespace_prefix=f"team/{i // 100}"
            ),
        }
        out: dict[str, Any] = {"backend": backend, "n": n, "queries": count}
        for label, call in subjects.items():
            for i in picks[:5]:
                call(i)  # warm
            samples = []
            for i in picks:
                t0 = time.perf_counter_ns()
                env = call(i)
                samples.append(time.perf_counter_ns() - t0)
            lat = summarize(samples)
            out[label] = {"p50_ms": round(lat.p50_us / 1000, 2), "p99_ms": round(lat.p99_us / 1000, 2)}
            top = env.hits[0].key if env.hits else None
            out[label]["last_top"] = top
    return out


def common_main(args: argparse.Namespace) -> int:
    """``--common``: the common-word case on the chosen backends, one table."""
    rows = []
    results = []
    for backend in ("sqlite", "postgres") if args.backend == "both" else (args.backend,):
        for n in args.n or [100_000]:
            if backend == "sqlite":
                with tempfile.TemporaryDirectory(prefix=f"memlane-common-{n}-") as tmp:
                    res = common_words(n, str(Path(tmp) / "common.db"), backend, args.queries)
            else:
                import psycopg

                with postgres_server() as admin_url:
                    dbname = f"memlane_common_{os.getpid()}_{n}"
                    with psycopg.connect(admin_url, autocommit=True) as admin:
                        admin.execute(f'CREATE DATABASE "{dbname}"')
                    try:
                        res = common_words(n, pg_url_for(admin_url, dbname), backend, args.queries)
                    finally:
                        with psycopg.connect(admin_url, autocommit=True) as admin:
                            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            results.append(res)
            for label, v in res.items():
                if isinstance(v, dict):
                    rows.append([f"{backend} {n:,}: {label}", f"{v['p50_ms']:.2f}", f"{v['p99_ms']:.2f}"])
            print(format_table(["subject", "p50 ms", "p99 ms"], rows[-4:]), flush=True)
    if args.json:
        write_json(args.json, {"benchmark": "search --common", "machine": machine_info(), "runs": results})
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, action="append", help="items (repeatable); default 10000 and 100000")
    ap.add_argument("--queries", type=int, default=400, help="timed queries per subject and query set")
    ap.add_argument(
        "--query-kind", choices=QUERY_KINDS, action="append", help="query sets to time (default: all three)"
    )
    ap.add_argument("--namespaces", type=int, default=1000, help="namespaces the items are spread over")
    ap.add_argument("--batch", type=int, default=5000, help="records per put_many call")
    ap.add_argument("--rounds", type=int, default=4, help="alternating blocks per measurement")
    ap.add_argument("--seed", type=int, default=20240607)
    ap.add_argument("--no-minilm", dest="minilm", action="store_false", help="skip the MiniLM query-embedding line")
    ap.add_argument(
        "--backend",
        choices=("sqlite", "postgres", "both"),
        default="sqlite",
        help="sqlite (default), postgres ($MEMLANE_TEST_PG_URL or a throwaway pgserver) or both",
    )
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    ap.add_argument(
        "--common",
        action="store_true",
        help="only the common-word case: 'value <i> text' over N items whose every text has 'value' and 'text'",
    )
    args = ap.parse_args(argv)
    if args.common:
        return common_main(args)
    args.query_kind = args.query_kind or list(QUERY_KINDS)
    sizes = args.n or [10_000, 100_000]

    info = machine_info()
    print(
        f"machine: {info['cpu_model']}, {info['cpu_count']} CPUs ({info['cpu_usable']} usable), "
        f"{fmt_bytes(info['memory_total_bytes'])} RAM; Python {info['python']}; numpy {np.__version__}; "
        f"SQLite {info['sqlite']}; load {info['loadavg_1_5_15']}"
    )
    blas = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS") if v in os.environ}
    info["blas_threads_env"] = blas
    print(f"BLAS threads: {blas or 'OpenBLAS default (one per CPU)'}")
    print(f"command: python bench/search.py {' '.join(argv if argv is not None else sys.argv[1:])}\n", flush=True)
    runs = []
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    if "sqlite" in backends:
        for n in sizes:
            with tempfile.TemporaryDirectory(prefix=f"memlane-search-{n}-") as tmp:
                runs.append(run(n, Path(tmp), args))
            runs[-1].setdefault("backend", "sqlite")
            print(report(runs[-1]), flush=True)
            print(flush=True)
    if "postgres" in backends:
        with postgres_server() as admin_url:
            for n in sizes:
                runs.append(run_postgres(n, admin_url, args))
                print(report(runs[-1]), flush=True)
                print(flush=True)
    if len(backends) == 2:
        print(compare(runs), flush=True)
        print(flush=True)
    out: dict[str, Any] = {"benchmark": "search", "machine": info, "runs": runs}
    if args.minilm:
        cost = minilm_query_cost()
        out["minilm_query_embedding"] = cost
        if cost and "p50_ms" in cost:
            print(
                f"embedding one short query with MiniLM (adds to vector/hybrid when a text query is given): "
                f"p50 {cost['p50_ms']:.1f} ms, p99 {cost['p99_ms']:.1f} ms over {cost['n']} queries"
            )
    if args.json:
        write_json(args.json, out)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
