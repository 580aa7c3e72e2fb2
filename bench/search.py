"""Search at scale (#36): what ``Memory.search`` costs and finds on vectors with real neighbourhoods, both backends.

Usage::

    python bench/search.py [--n 100000] [--n 1000000] [--backend sqlite|postgres|both] [--queries 300]
                           [--reuse DIR] [--build-only] [--pg-build indexer|bulk] [--serve-workers 1,2,4]
                           [--json OUT]
    python bench/search.py --verify-bulk [--n 20000]
    python bench/search.py --common [--n 100000] [--queries 200] [--backend sqlite|postgres|both]

Data: items of 10-30 words drawn with Zipf weights from a 5,000-word
vocabulary (stop words and everyday nouns first) over ``--namespaces``
namespaces ``(teamNN, agentNNNN)`` (10 teams: a team prefix holds a tenth of
the items, an agent's namespace a thousandth). Vectors are memlane's
``fake:384`` (signed word hashing: texts that share words are near), made by
:class:`FakeVectors`, a numpy twin the run checks against ``FakeEmbedder``, so
the store records ``fake:384`` and ``memlane serve`` embeds questions the same
way. Questions: 2-6 Zipf words, stop words left in, half opened by a question
word.

Per backend and N, the store is built once with ``put_many`` and the
write-behind indexer (``--reuse DIR`` keeps it, a pgserver data directory for
PostgreSQL, and later runs reuse it; ``--build-only`` stops there). On
PostgreSQL ``--pg-build bulk`` makes the same store sooner (:func:`bulk_build`:
the vectors by COPY, the HNSW index once, with the store's own DDL), and
``--verify-bulk`` checks that it is the same store. Then:

* the first search after a start: a fresh process opens the store and searches
  (hybrid in one process, vector-only in another);
* vector recall@10 of ``Memory.search(channels=("vector",))`` against an exact
  numpy scan over the same vectors (ties at the 10th score count as found),
  unscoped, under the question's team prefix and in its agent's namespace;
* p50/p90/p99 of lexical, vector and hybrid, unscoped and under a team prefix,
  and hybrid in one agent's namespace, interleaved in rotating blocks with the
  raw engine on a second plain connection: raw FTS5 (same quoted-OR query, top
  10 by ``bm25``) and raw numpy (the exact scan) on SQLite; raw ``ts_rank`` and
  raw pgvector (``ORDER BY embedding <=> q LIMIT 10``, default ``ef_search``)
  on PostgreSQL, whose own recall is reported too;
* build, indexer and update rates (items/s) against the embedder's alone: the
  update writes ``--update`` new items into the built store, waits until they
  are indexed, times the next search, then clears them;
* memory: ``memlane serve --workers W`` for each W of ``--serve-workers``, each
  worker's ``/proc/PID/smaps_rollup`` read when ready and after
  ``--serve-searches`` hybrid searches per worker over HTTP (new connections,
  spread by the kernel), growth of ``Private_Clean + Private_Dirty`` and
  ``Pss`` against the vectors' bytes.

Everything goes through the public API and the service, so the figures follow
whatever ``Memory.search`` does. Goals of #36 are printed beside the figures.
``--common`` is the common-word case of issue #14 (``common_words``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

import memlane
from memlane.domain.search import rank

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import (  # noqa: E402
    Goal,
    db_size,
    descendants,
    fmt_bytes,
    format_table,
    free_port,
    machine_info,
    pg_url_for,
    postgres_server,
    postgres_server_kept,
    progress,
    ratio,
    smaps_rollup,
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


def pg_tsquery(query: str) -> str:
    """memlane's query terms, each quoted, OR-ed, for ``to_tsquery`` (as bench/kv.py's raw search)."""
    return " | ".join("'" + t.replace("'", "''") + "'" for t in rank.terms(query))


# -- at scale (issue #36): neighbourhood vectors, natural questions, both backends -----------------

TEAMS = 10  # namespaces are (team, agent): a team prefix holds a tenth of the items, an agent's namespace 1/1000
QUESTION_WORDS = ("what", "when", "who", "how", "which", "where", "why")
UPDATE_NS = ("bench-update", "u")
K = 10
_WORD = re.compile(r"\w+")


class ScaleCorpus(Corpus):
    """The items of :class:`Corpus` in two-level namespaces ``(teamNN, agentNNNN)``, and natural questions."""

    def __init__(self, seed: int, namespaces: int) -> None:
        super().__init__(seed, namespaces)
        self.teams = TEAMS if namespaces % TEAMS == 0 else 1
        self.namespaces = [(f"team{i % self.teams:02d}", f"agent{i:04d}") for i in range(namespaces)]

    def texts(self, start: int, stop: int) -> list[str]:
        return [r["value"] for r in self.batch(start, stop)]

    def questions(self, count: int, salt: int = 0) -> list[str]:
        """2-6 words drawn with the corpus's Zipf weights, stop words left in, half opened by a question word."""
        rng = random.Random(self.seed * 7 + 11 + salt)
        out = []
        for _ in range(count):
            size = rng.randint(2, 6)
            if rng.random() < 0.5:
                out.append(" ".join([rng.choice(QUESTION_WORDS), *self._zipf(rng, size - 1)]))
            else:
                out.append(" ".join(self._zipf(rng, size)))
        return out


class FakeVectors:
    """memlane's ``fake:384`` embedder (``FakeEmbedder``: signed word hashing), vectorised with numpy.

    The same vectors, so texts that share words are near and a store it built is
    served by ``memlane serve`` with the recorded ``fake:384``: it records
    itself under the same name, dimension and spec. A word's bucket and sign
    are cached, so a million items embed in seconds instead of minutes.
    """

    name = "fake"
    dimension = DIM
    spec = f"fake:{DIM}"

    def __init__(self) -> None:
        self._words: dict[str, tuple[int, float]] = {}

    def _word(self, word: str) -> tuple[int, float]:
        got = self._words.get(word)
        if got is None:
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            got = (int.from_bytes(digest[:4], "little") % DIM, 1.0 if digest[4] & 1 else -1.0)
            self._words[word] = got
        return got

    def matrix(self, texts: Sequence[str]) -> np.ndarray:
        rows: list[int] = []
        cols: list[int] = []
        signs: list[float] = []
        for r, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                b, s = self._word(word)
                rows.append(r)
                cols.append(b)
                signs.append(s)
        m = np.zeros((len(texts), DIM), dtype=np.float64)
        np.add.at(m, (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)), signs)
        norms = np.linalg.norm(m, axis=1)
        empty = norms == 0
        m[empty, 0], norms[empty] = 1.0, 1.0
        return m / norms[:, None]

    def embed_batch(self, texts: Sequence[str]) -> list[Any]:
        return list(self.matrix(texts))


def check_same_as_fake(corpus: ScaleCorpus) -> None:
    """The bench's vectors must be memlane's ``fake:384`` ones, or the service would embed questions otherwise."""
    from memlane.domain.search.embedders import FakeEmbedder

    texts = corpus.texts(0, 50) + corpus.questions(50)
    mine = FakeVectors().matrix(texts)
    theirs = np.asarray(FakeEmbedder(DIM).embed_batch(texts))
    if not np.allclose(mine, theirs, atol=1e-9):
        raise SystemExit("bench/search.py: FakeVectors no longer matches memlane's fake:384 embedder")


def embed_rates(corpus: ScaleCorpus, count: int = 5000) -> dict[str, float]:
    """Items per second of the bench's vectorised embedder and of memlane's own ``fake:384`` (pure Python)."""
    from memlane.domain.search.embedders import FakeEmbedder

    texts = corpus.texts(0, count)
    t0 = time.perf_counter()
    FakeVectors().matrix(texts)
    fast = count / (time.perf_counter() - t0)
    few = texts[: count // 5]
    t0 = time.perf_counter()
    FakeEmbedder(DIM).embed_batch(few)
    slow = len(few) / (time.perf_counter() - t0)
    return {"bench_embedder_items_per_s": round(fast), "memlane_fake384_items_per_s": round(slow)}


# -- where the store lives -------------------------------------------------------------------------


class Place:
    """One backend's store for one N: a kept one under ``--reuse DIR`` or a throwaway one."""

    def __init__(self, backend: str, n: int, args: argparse.Namespace, admin_url: str | None, suffix: str = "") -> None:
        self.backend, self.n, self.args, self.admin_url = backend, n, args, admin_url
        tag = f"{n}-s{args.seed}-ns{args.namespaces}"
        self._tmp: str | None = None
        if args.reuse:
            folder = Path(args.reuse)
        else:
            self._tmp = tempfile.mkdtemp(prefix=f"memlane-search-{n}-")
            folder = Path(self._tmp)
        folder.mkdir(parents=True, exist_ok=True)
        self.marker = folder / f"{backend}-{tag}.built"
        if backend == "sqlite":
            self.dbname = ""
            self.url = str(folder / f"search-{tag}.db")
        else:
            assert admin_url is not None
            self.dbname = f"memlane_search_{tag.replace('-', '_')}" + ("" if args.reuse else f"_{os.getpid()}") + suffix
            self.url = pg_url_for(admin_url, self.dbname)

    @property
    def built(self) -> bool:
        return self.marker.exists()

    def create(self) -> None:
        """An empty store (an unfinished kept one is started again)."""
        if self.backend == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(self.url + suffix).unlink(missing_ok=True)
            return
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{self.dbname}"')

    def finish(self) -> None:
        """Keep it (``--reuse``) or remove it."""
        if self._tmp is not None:
            if self.backend == "postgres":
                import psycopg

                with psycopg.connect(self.admin_url, autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
            import shutil

            shutil.rmtree(self._tmp, ignore_errors=True)

    def size(self) -> int:
        if self.backend == "sqlite":
            return db_size(self.url)
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            row: Any = conn.execute("SELECT pg_database_size(current_database())").fetchone()
            return int(row[0])


def _write_items(mem: Any, corpus: ScaleCorpus, n: int, batch: int) -> float:
    """``put_many`` the corpus's first ``n`` items in batches of ``batch``, saying how far it got; the seconds."""
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        mem.put_many(corpus.batch(start, min(n, start + batch)))
        if start and start % (20 * batch) == 0:
            progress(f"  {start:,} written, {time.perf_counter() - t0:,.0f} s")
    return time.perf_counter() - t0


def build(place: Place, corpus: ScaleCorpus, args: argparse.Namespace) -> dict[str, Any]:
    """``put_many`` every item with the write-behind indexer on, then wait until every vector is in."""
    n = place.n
    place.create()
    progress(f"{place.backend} N={n:,}: put_many in batches of {args.batch:,} (the indexer embeds behind)")
    mem = memlane.open(place.url, embedder=FakeVectors())
    t0 = time.perf_counter()
    write_s = _write_items(mem, corpus, n, args.batch)
    progress(f"  written in {write_s:,.1f} s; waiting for the indexer")
    mem.wait_indexed()
    total_s = time.perf_counter() - t0
    mem.close()
    out: dict[str, Any] = {
        "batch": args.batch,
        "write_seconds": round(write_s, 1),
        "write_items_per_s": round(n / write_s),
        "indexed_seconds": round(total_s, 1),
        "indexed_items_per_s": round(n / total_s),
    }
    if place.backend == "postgres":
        import psycopg

        with psycopg.connect(place.url, autocommit=True) as conn:
            t0 = time.perf_counter()
            conn.execute("VACUUM ANALYZE items")
            conn.execute("VACUUM ANALYZE item_vectors")
            out["vacuum_analyze_seconds"] = round(time.perf_counter() - t0, 1)
    progress(f"  indexed after {total_s:,.1f} s ({n / total_s:,.0f} items/s)")
    place.marker.write_text(json.dumps(out) + "\n")
    return out


# -- PostgreSQL's bulk build: the indexer's result, without its per-row HNSW inserts ---------------


# what the HNSW build may use: the whole graph in memory (about 3 KiB an item at 384 dimensions and m 32), with
# room to spare, up to 7 GiB (the parallel build takes it from /dev/shm at once; the machine is shared)
def bulk_maintenance_work_mem(n: int) -> str:
    return f"{min(7 * 1024, max(256, n * 6 // 1024))}MB"


BULK_PARALLEL_WORKERS = 1  # the leader builds too: two processes on a 2-core machine
BULK_BATCH = 50_000
_PGCOPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
_PGCOPY_TRAILER = (-1).to_bytes(2, "big", signed=True)
# one item_vectors row in COPY's binary format: (item_ref bigint, version integer, embedding vector), a vector
# being pgvector's binary form (int16 dimensions, int16 unused, float4 each), all big-endian
_PGCOPY_ROW = np.dtype(
    [
        ("fields", ">i2"),
        ("ref_len", ">i4"),
        ("ref", ">i8"),
        ("version_len", ">i4"),
        ("version", ">i4"),
        ("vector_len", ">i4"),
        ("dim", ">i2"),
        ("unused", ">i2"),
        ("vector", ">f4", (DIM,)),
    ]
)


def _copy_rows(refs: Sequence[int], versions: Sequence[int], blobs: Sequence[bytes]) -> bytes:
    """``item_vectors`` rows as COPY binary tuples; ``blobs``: memlane's float32 little-endian vectors."""
    rows = np.zeros(len(refs), dtype=_PGCOPY_ROW)
    rows["fields"], rows["ref_len"], rows["version_len"] = 3, 8, 4
    rows["vector_len"], rows["dim"] = 4 + 4 * DIM, DIM
    rows["ref"], rows["version"] = refs, versions
    rows["vector"] = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(refs), DIM)
    return rows.tobytes()


def bulk_build(place: Place, corpus: ScaleCorpus, args: argparse.Namespace) -> dict[str, Any]:
    """PostgreSQL in stages: items through ``put_many``, vectors by binary COPY, the HNSW index built once.

    The store ends as the write-behind indexer leaves it, only sooner (its
    per-row inserts into a live HNSW graph ran at ~93 items/s here):

    1. ``put_many`` with ``indexing="external"``: items and their marks in
       ``item_pending``, the embedder recorded, as any writer leaves them;
    2. the marked items' stored text (what ``claim_pending`` hands the indexer)
       embedded by the bench's ``fake:384`` and packed by memlane's own
       ``normalise``/``to_blob`` (so every float is the indexer's), COPYed into
       ``item_vectors`` with no HNSW index on it; then the marks deleted where
       the vector is at the mark's version (``finish_pending``'s rule);
    3. the HNSW index made by the store's own DDL (``_ensure_index``), with
       ``maintenance_work_mem`` for the whole graph and a parallel worker.
    """
    import psycopg

    from memlane.store import _common as store_common
    from memlane.values.vectors import normalise, to_blob

    n = place.n
    place.create()
    out: dict[str, Any] = {"batch": args.batch, "method": "bulk (put_many, COPY vectors, CREATE INDEX once)"}
    progress(f"{place.backend} N={n:,}: bulk build, stage 1: put_many in batches of {args.batch:,} (marked only)")
    mem = memlane.open(place.url, embedder=FakeVectors(), indexing="external")
    store: Any = mem.store
    t0 = time.perf_counter()
    items_s = _write_items(mem, corpus, n, args.batch)
    out.update(items_seconds=round(items_s, 1), write_seconds=round(items_s, 1), write_items_per_s=round(n / items_s))
    progress(f"  items in {items_s:,.1f} s ({n / items_s:,.0f} items/s)")

    index_name = f"item_vectors_hnsw_{DIM}"
    with psycopg.connect(place.url, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass(%s)", (index_name,)).fetchone()[0] is not None:  # type: ignore[index]
            raise SystemExit(f"bench/search.py: {index_name} exists before the vectors are loaded")
        progress(f"{place.backend} N={n:,}: stage 2: embed the marked items' text, COPY the vectors")
        t1 = time.perf_counter()
        text = store_common.text_sql("postgres", "i.")
        after, loaded, embed_s = 0, 0, 0.0
        emb = FakeVectors()
        while True:
            rows = conn.execute(
                f"SELECT p.item_ref, i.version, {text} FROM item_pending p JOIN items i ON i.ref = p.item_ref "
                "WHERE p.item_ref > %s ORDER BY p.item_ref LIMIT %s",
                (after, BULK_BATCH),
            ).fetchall()
            if not rows:
                break
            e0 = time.perf_counter()
            blobs = [to_blob(normalise(v)) for v in emb.matrix([r[2] for r in rows])]
            data = _copy_rows([r[0] for r in rows], [r[1] for r in rows], blobs)
            embed_s += time.perf_counter() - e0
            with conn.transaction(), conn.cursor() as cur:
                with cur.copy("COPY item_vectors (item_ref, version, embedding) FROM STDIN (FORMAT BINARY)") as cp:
                    cp.write(_PGCOPY_HEADER + data + _PGCOPY_TRAILER)
                # finish_pending's rule: a mark goes only where the vector is at the mark's version
                cur.execute(
                    "DELETE FROM item_pending p USING item_vectors v WHERE v.item_ref = p.item_ref "
                    "AND v.version = p.version AND p.item_ref > %s AND p.item_ref <= %s",
                    (after, rows[-1][0]),
                )
            after, loaded = rows[-1][0], loaded + len(rows)
            if loaded % (10 * BULK_BATCH) == 0:
                progress(f"  {loaded:,} vectors, {time.perf_counter() - t1:,.0f} s")
        vectors_s = time.perf_counter() - t1
        out.update(
            vectors=loaded,
            vectors_seconds=round(vectors_s, 1),
            vectors_embed_seconds=round(embed_s, 1),
            vectors_items_per_s=round(loaded / max(vectors_s, 1e-9)),
        )
        progress(f"  {loaded:,} vectors in {vectors_s:,.1f} s (embedding and packing {embed_s:,.1f} s)")

        work_mem = bulk_maintenance_work_mem(n)
        progress(
            f"{place.backend} N={n:,}: stage 3: the HNSW index, once (maintenance_work_mem "
            f"{work_mem}, {BULK_PARALLEL_WORKERS} parallel worker)"
        )
        out.update(maintenance_work_mem=work_mem, parallel_workers=BULK_PARALLEL_WORKERS)
        conn.execute(f"SET maintenance_work_mem = '{work_mem}'")
        conn.execute(f"SET max_parallel_maintenance_workers = {BULK_PARALLEL_WORKERS}")
        t2 = time.perf_counter()
        store._ensure_index(conn, DIM)  # the store's own DDL: the index ends as memlane makes it
        index_s = time.perf_counter() - t2
        out.update(index_seconds=round(index_s, 1))
        progress(f"  index built in {index_s:,.1f} s")
        t3 = time.perf_counter()
        conn.execute("VACUUM ANALYZE items")
        conn.execute("VACUUM ANALYZE item_vectors")
        out["vacuum_analyze_seconds"] = round(time.perf_counter() - t3, 1)
    total_s = time.perf_counter() - t0
    current, missing = store.count_vectors()
    pending = store.count_pending(store_common.EVERYTHING)
    mem.close()
    if current != n or missing or pending:
        raise SystemExit(
            f"bench/search.py: bulk build left {current:,} current vectors, {missing:,} missing, {pending:,} marks"
        )
    out.update(indexed_seconds=round(total_s, 1), indexed_items_per_s=round(n / total_s))
    progress(f"  built in {total_s:,.1f} s; {current:,} vectors, none missing, no marks left")
    place.marker.write_text(json.dumps(out) + "\n")
    return out


def _store_state(url: str) -> dict[str, Any]:
    """What the indexer's work leaves in a store: every vector by address, the vector indexes, marks, the embedder."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        vectors = conn.execute(
            "SELECT i.namespace, i.key, v.version = i.version, v.embedding::text FROM item_vectors v "
            "JOIN items i ON i.ref = v.item_ref ORDER BY i.namespace, i.key"
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'item_vectors' ORDER BY indexname"
        ).fetchall()
        items = conn.execute(
            "SELECT md5(string_agg(concat_ws('|', namespace, key, version, indexed, text, value, tsv::text), "
            "E'\\n' ORDER BY namespace, key)) FROM items"
        ).fetchone()
        marks = conn.execute("SELECT count(*) FROM item_pending").fetchone()
        embedder = conn.execute("SELECT value FROM meta WHERE name = 'embedder'").fetchone()
    return {"vectors": vectors, "indexes": indexes, "items": items, "marks": marks, "embedder": embedder}


def verify_bulk(admin_url: str, n: int, seed: int, namespaces: int, queries: int, batch: int) -> list[str]:
    """Build N items both ways (the write-behind indexer, :func:`bulk_build`) and list every difference.

    Compared: each item's stored vector (as pgvector prints it), the
    ``item_vectors`` index definitions, the marks left, the recorded embedder,
    and the top 10 (by address) of hybrid, vector and lexical searches of
    ``queries`` natural questions: unscoped, under a team prefix, in an agent's
    namespace. Empty: the bulk-built store is the indexer-built one.
    """
    import psycopg

    args = argparse.Namespace(reuse=None, seed=seed, namespaces=namespaces, batch=batch)
    corpus = ScaleCorpus(seed, namespaces)
    places = {way: Place("postgres", n, args, admin_url, suffix=f"_{way}") for way in ("indexer", "bulk")}
    try:
        build(places["indexer"], corpus, args)
        bulk_build(places["bulk"], corpus, args)
        states = {way: _store_state(p.url) for way, p in places.items()}
        problems = [
            f"{what} differ: indexer {states['indexer'][what]!r:.300} vs bulk {states['bulk'][what]!r:.300}"
            for what in ("indexes", "items", "marks", "embedder")
            if states["indexer"][what] != states["bulk"][what]
        ]
        vi, vb = states["indexer"]["vectors"], states["bulk"]["vectors"]
        if len(vi) != n or not all(r[2] for r in vi):
            problems.append(f"the indexer left {len(vi):,} vectors for {n:,} items, or some stale")
        differing = [a[:2] for a, b in zip(vi, vb, strict=False) if a != b]
        if len(vi) != len(vb) or differing:
            problems.append(f"vectors: {len(vi):,} vs {len(vb):,} rows, {len(differing):,} differ {differing[:3]}")
        questions = corpus.questions(queries)
        rng = random.Random(seed + 5)
        homes = [corpus.namespaces[rng.randrange(len(corpus.namespaces))] for _ in questions]
        tops: dict[str, list[Any]] = {}
        for way, p in places.items():
            got = tops[way] = []
            with memlane.open(p.url, embedder=FakeVectors(), indexing="external") as mem:
                for q, home in zip(questions, homes, strict=True):
                    for channels in (("vector",), ("lexical",), ("lexical", "vector")):  # hybrid last: see below
                        for prefix in ((), (home[0],), home):
                            env = mem.search(q, limit=K, channels=channels, namespace_prefix=prefix)
                            hits = [(h.item.namespace, h.item.key) for h in env.hits]
                            scores = sorted(
                                tuple(round(h.channel_scores.get(c) or 0.0, 5) for c in channels) for h in env.hits
                            )
                            got.append(((q, channels, prefix), hits, scores))
        # Two HNSW graphs over the same vectors answer alike but not always identically: fake:384 makes many equal
        # scores, which each graph orders (and cuts at the 10th) its own way, and each graph misses a near item now
        # and then that the other finds. So: lexical lists and exact (small-scope) lists must be identical; a
        # vector list that differs is judged by its recall@10 against an exact numpy scan, and the bulk graph's
        # mean recall must be no lower than the indexer's; a hybrid list may differ only where a channel's list did
        # (the fusion takes their ranks, so equal scores ordered otherwise move it too).
        matrix = np.concatenate(
            [FakeVectors().matrix(corpus.texts(s, min(n, s + batch))) for s in range(0, n, batch)]
        ).astype(np.float32)
        spaces = np.array([corpus.namespaces[i % len(corpus.namespaces)] for i in range(n)], dtype=object)
        teams = np.array([ns[0] for ns in spaces], dtype=object)
        qvec = dict(zip(questions, FakeVectors().matrix(questions).astype(np.float32), strict=True))

        def recall(q: str, prefix: tuple[str, ...], scores: list[tuple[float, ...]]) -> float:
            if len(prefix) == 2:
                inside = np.array([tuple(ns) == prefix for ns in spaces])
            else:
                inside = teams == prefix[0] if prefix else np.ones(n, dtype=bool)
            exact = np.sort(matrix[inside] @ qvec[q])[::-1]
            tenth = exact[min(K, len(exact)) - 1]
            return min(K, sum(1 for (s,) in scores if s >= tenth - 1e-4)) / min(K, len(exact))

        verdicts: dict[tuple[Any, ...], str] = {}
        recalls: dict[str, dict[str, list[float]]] = {"indexer": {}, "bulk": {}}
        unequal = []
        for (search, hits_i, scores_i), (_, hits_b, scores_b) in zip(tops["indexer"], tops["bulk"], strict=True):
            q, channels, prefix = search
            scope = ("unscoped", "team prefix", "agent namespace")[len(prefix)]
            if channels == ("vector",):
                recalls["indexer"].setdefault(scope, []).append(recall(q, prefix, scores_i))
                recalls["bulk"].setdefault(scope, []).append(recall(q, prefix, scores_b))
            if hits_i == hits_b:
                verdicts[search] = "identical"
            elif scores_i == scores_b or sorted(hits_i) == sorted(hits_b):
                verdicts[search] = "equal scores"
            elif channels == ("vector",):
                verdicts[search] = "vector: graphs differ"
            elif channels == ("lexical", "vector") and (
                verdicts[(q, ("vector",), prefix)],
                verdicts[(q, ("lexical",), prefix)],
            ) != ("identical", "identical"):
                verdicts[search] = "hybrid: follows its channels' lists"
            elif channels == ("lexical",) and not prefix and all(w in STOP_WORDS["nltk"] for w in rank.terms(q)):
                # seen once at 20k ("how before the"): the items are identical (checked above) and each store
                # answers it the same every time, so the nomination of only-common words depends on the
                # store's physical state or statistics, not on its vectors: reported, not a failure of the build
                verdicts[search] = "lexical, only stop words: other nomination"
            else:
                verdicts[search] = "differs"
                unequal.append((search, hits_i, hits_b, scores_i, scores_b))
        kinds = (
            "identical",
            "equal scores",
            "vector: graphs differ",
            "hybrid: follows its channels' lists",
            "lexical, only stop words: other nomination",
        )
        counts = {v: list(verdicts.values()).count(v) for v in kinds}
        mean = {way: {k: round(sum(v) / len(v), 4) for k, v in r.items()} for way, r in recalls.items()}
        progress(f"  searches: {counts}, {len(unequal)} otherwise; vector recall@10 (indexer, bulk): {mean}")
        if unequal:
            problems.append(f"{len(unequal)} of {len(tops['bulk'])} searches differ, e.g. {unequal[:2]}")
        for scope, r in mean["indexer"].items():
            if mean["bulk"][scope] < r - 0.005:
                problems.append(f"vector recall@10 {scope}: bulk graph {mean['bulk'][scope]} < indexer's {r}")
        return problems
    finally:
        for p in places.values():
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{p.dbname}" WITH (FORCE)')
            p.finish()


# -- the exact answer ------------------------------------------------------------------------------


class Exact:
    """Every item's vector as one float32 matrix (the same vectors the store holds), and each row's scope."""

    def __init__(self, corpus: ScaleCorpus, n: int, ids: dict[str, str], batch: int) -> None:
        progress(f"  exact matrix: embedding {n:,} texts in numpy")
        emb = FakeVectors()
        # in the build's batches: a batch's texts come from a generator seeded by its start
        parts = [emb.matrix(corpus.texts(s, min(n, s + batch))).astype(np.float32) for s in range(0, n, batch)]
        self.matrix = np.ascontiguousarray(np.concatenate(parts))
        self.ids = np.array([ids[f"notes.{i}"] for i in range(n)], dtype=object)
        slot = np.arange(n) % len(corpus.namespaces)
        self.rows_of_team = {f"team{t:02d}": np.flatnonzero(slot % corpus.teams == t) for t in range(corpus.teams)}
        self.corpus = corpus

    def check_against(self, mem: Any) -> None:
        """The matrix's rows are the vectors of the texts the store holds (a sample, by key)."""
        sample = [(len(self.matrix) * j) // 25 for j in range(25)]
        spaces = self.corpus.namespaces
        texts = [mem.get(spaces[i % len(spaces)], f"notes.{i}").value for i in sample]
        if not np.allclose(FakeVectors().matrix(texts).astype(np.float32), self.matrix[sample], atol=1e-6):
            raise SystemExit("bench/search.py: the exact matrix does not match the store's texts")

    def rows_of_namespace(self, namespace: tuple[str, str]) -> np.ndarray:
        j = self.corpus.namespaces.index(namespace)
        return np.arange(j, len(self.matrix), len(self.corpus.namespaces))

    def top(self, q: np.ndarray, rows: np.ndarray | None = None) -> tuple[list[str], float, dict[str, float]]:
        """The exact top 10 ids, the 10th score, and the score of every id in scope (for tie-aware recall)."""
        m = self.matrix if rows is None else self.matrix[rows]
        scores = m @ q
        k = min(K, len(scores))
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best])]
        ids = self.ids if rows is None else self.ids[rows]
        return [ids[i] for i in best], float(scores[best[-1]]), {}

    def score_of(self, item_id: str, q: np.ndarray, row_of: dict[str, int]) -> float:
        r = row_of.get(item_id)
        return -2.0 if r is None else float(self.matrix[r] @ q)


def recall_at_10(got: Sequence[str], exact_top: Sequence[str], tenth: float, scores: Sequence[float]) -> float:
    """Share of the exact top 10 found; a hit scoring as high as the exact 10th counts too (ties are not misses)."""
    found = len(set(got) & set(exact_top))
    tied = sum(1 for i, s in zip(got, scores, strict=True) if i not in exact_top and s >= tenth - 1e-6)
    return min(len(exact_top), found + tied) / len(exact_top)


def store_ids(place: Place) -> dict[str, str]:
    """``notes.<i>`` key to item id, read straight from the store's table."""
    if place.backend == "sqlite":
        conn = sqlite3.connect(place.url)
        try:
            return dict(conn.execute("SELECT key, id FROM items WHERE key LIKE 'notes.%'").fetchall())
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(place.url) as conn:
        return dict(conn.execute("SELECT key, id FROM items WHERE key LIKE 'notes.%%'").fetchall())


# -- the first search after a start, in a fresh process --------------------------------------------

_FIRST = """
import json, sys, time
t0 = time.perf_counter()
import memlane
mem = memlane.open(sys.argv[1], embedder="fake:384")
t1 = time.perf_counter()
qs = json.loads(sys.argv[3])
channels = {} if sys.argv[2] == "hybrid" else {"channels": [sys.argv[2]]}
times = []
for q in qs:
    s = time.perf_counter()
    mem.search(q, limit=10, **channels)
    times.append((time.perf_counter() - s) * 1000)
mem.close()
print(json.dumps({"import_open_ms": (t1 - t0) * 1000, "first_ms": times[0], "next_ms": sorted(times[1:])}))
"""


def first_search(place: Place, channel: str, questions: list[str]) -> dict[str, Any]:
    """A new process opens the store and searches: the first search, then a few more."""
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-c", _FIRST, place.url, channel, json.dumps(questions)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    got = json.loads(out.stdout.strip().splitlines()[-1])
    nxt = got.pop("next_ms")
    got["then_median_ms"] = nxt[len(nxt) // 2] if nxt else None
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in got.items()}


# -- the service's memory per worker ---------------------------------------------------------------


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _workers_of(serve_pid: int, count: int) -> list[int]:
    """The worker processes of ``memlane serve``: itself with one worker, else the fork server's children."""
    if count == 1:
        return [serve_pid]
    deadline = time.monotonic() + 60
    while True:
        children = set(descendants(serve_pid))
        grandchildren = [p for p in children for p in descendants(p)]
        workers = sorted({p for p in grandchildren if "resource_tracker" not in _cmdline(p)})
        if len(workers) >= count or time.monotonic() > deadline:
            return workers[:count]
        time.sleep(0.2)


def private_bytes(m: dict[str, int]) -> int:
    return m.get("Private_Clean", 0) + m.get("Private_Dirty", 0)


def serve_memory(place: Place, workers: int, questions: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """``memlane serve --workers N`` on the store; each worker's memory before and after its first searches."""
    import httpx

    from memlane.core.access import Access

    with memlane.open(place.url, embedder="fake:384") as mem:
        _, token = Access(mem).create_agent(f"bench{os.getpid()}w{workers}t{int(time.time())}", admin=True)
    port = free_port()
    cmd = [str(Path(sys.executable).with_name("memlane")), "serve", "--db", place.url, "--port", str(port)]
    server = subprocess.Popen(
        [*cmd, "--workers", str(workers)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    base = f"http://127.0.0.1:{port}/v1"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        t0 = time.perf_counter()
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"memlane serve did not start: {server.stderr.read() if server.stderr else ''}")
            time.sleep(0.1)
        ready_s = time.perf_counter() - t0
        pids = _workers_of(server.pid, workers)
        time.sleep(0.5)
        before = {p: smaps_rollup(p) for p in pids}
        ticks = {p: _cpu_ticks(p) for p in pids}

        def one(q: str) -> float:
            with httpx.Client(timeout=600, headers=headers) as client:  # a new connection: spread over workers
                s = time.perf_counter()
                r = client.post(f"{base}/search", json={"query": q, "limit": 10})
                r.raise_for_status()
                return (time.perf_counter() - s) * 1000

        first_ms = one(questions[0])
        with ThreadPoolExecutor(max_workers=2 * workers) as pool:
            lat = list(pool.map(one, questions[1 : 1 + args.serve_searches * workers]))
        time.sleep(0.5)
        after = {p: smaps_rollup(p) for p in pids}
        served = {p: _cpu_ticks(p) - ticks[p] for p in pids}
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    per = []
    for p in pids:
        per.append(
            {
                "private_before": private_bytes(before[p]),
                "private_growth": private_bytes(after[p]) - private_bytes(before[p]),
                "pss_growth": after[p].get("Pss", 0) - before[p].get("Pss", 0),
                "rss_growth": after[p].get("Rss", 0) - before[p].get("Rss", 0),
                "pss_after": after[p].get("Pss", 0),
                "cpu_ticks_searching": served[p],
            }
        )
    lat.sort()
    return {
        "workers": workers,
        "found_workers": len(pids),
        "ready_seconds": round(ready_s, 2),
        "first_search_ms": round(first_ms, 1),
        "searches": len(lat) + 1,
        "concurrent_p50_ms": round(lat[len(lat) // 2], 1) if lat else None,
        "per_worker": per,
    }


# -- one backend, one N ------------------------------------------------------------------------------


def run_scale(place: Place, args: argparse.Namespace) -> dict[str, Any]:
    n, backend = place.n, place.backend
    corpus = ScaleCorpus(args.seed, args.namespaces)
    res: dict[str, Any] = {"backend": backend, "n": n, "namespaces": args.namespaces, "teams": corpus.teams}
    res["vectors_bytes"] = n * DIM * 4
    res["embedding"] = embed_rates(corpus)
    if place.built:
        res["build"] = {**json.loads(place.marker.read_text()), "reused": True}
        progress(f"{backend} N={n:,}: reusing {place.url}")
    elif backend == "postgres" and args.pg_build == "bulk":
        res["build"] = bulk_build(place, corpus, args)
    else:
        res["build"] = build(place, corpus, args)
    res["store_bytes"] = place.size()
    if args.build_only:
        return res
    questions = corpus.questions(args.queries + 60)

    # a fresh process: the first search after a start (before this one warms the page cache further) -----------
    progress(f"{backend} N={n:,}: first search after a start (fresh processes)")
    res["first_search"] = {
        "hybrid": first_search(place, "hybrid", questions[:6]),
        "vector": first_search(place, "vector", questions[6:12]),
    }

    ids = store_ids(place)
    exact = Exact(corpus, n, ids, res["build"].get("batch", args.batch))
    row_of = {item_id: r for r, item_id in enumerate(exact.ids)}
    del ids
    emb = FakeVectors()
    qvecs = emb.matrix(questions).astype(np.float32)
    qlists = [v.tolist() for v in qvecs]
    qrng = random.Random(args.seed + 5)
    home = [corpus.namespaces[qrng.randrange(len(corpus.namespaces))] for _ in questions]
    teams = [(ns[0],) for ns in home]

    mem = memlane.open(place.url, embedder=emb)
    try:
        exact.check_against(mem)
        res.update(_measure(place, mem, exact, row_of, questions, qvecs, qlists, home, teams, args))
        res["update"] = _update(mem, corpus, n, args)
    finally:
        mem.close()
    del exact
    if args.serve_workers:
        res["serve"] = []
        for w in args.serve_workers:
            progress(f"{backend} N={n:,}: memlane serve --workers {w}")
            try:
                res["serve"].append(serve_memory(place, w, questions, args))
            except Exception as e:  # a report without this part is still worth having
                res["serve"].append({"workers": w, "error": f"{type(e).__name__}: {e}"})
    return res


def _measure(
    place: Place,
    mem: Any,
    exact: Exact,
    row_of: dict[str, int],
    questions: list[str],
    qvecs: np.ndarray,
    qlists: list[list[float]],
    home: list[tuple[str, str]],
    teams: list[tuple[str]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    backend, n = place.backend, place.n
    # recall@10 of memlane's vector channel against the exact scan -------------------------------------------
    count = min(args.recall_queries, len(questions))
    progress(f"{backend} N={n:,}: vector recall@10 on {count} questions (whole store, a team, an agent)")
    recalls: dict[str, list[float]] = {"unscoped": [], "team prefix (10%)": [], "agent namespace (0.1%)": []}
    for j in range(count):
        q = qvecs[j]
        for label, prefix, rows in (
            ("unscoped", (), None),
            ("team prefix (10%)", teams[j], exact.rows_of_team[teams[j][0]]),
            ("agent namespace (0.1%)", home[j], exact.rows_of_namespace(home[j])),
        ):
            top, tenth, _ = exact.top(q, rows)
            env = mem.search(questions[j], limit=K, channels=("vector",), embedding=qlists[j], namespace_prefix=prefix)
            got = [h.item.id for h in env.hits]
            scores = [exact.score_of(i, q, row_of) for i in got]
            recalls[label].append(recall_at_10(got, top, tenth, scores))
    out["recall_at_10"] = {k: round(sum(v) / len(v), 4) for k, v in recalls.items()}
    out["recall_min"] = {k: min(v) for k, v in recalls.items()}

    # latency: memlane beside the raw engine, interleaved ------------------------------------------------
    warm = min(30, args.queries // 4)
    texts, vecs = questions[: args.queries + warm], qlists[: args.queries + warm]
    arrays = list(qvecs[: args.queries + warm])
    hs, ts = home[: len(texts)], teams[: len(texts)]

    def lexical(q: str, prefix: Any = ()) -> Any:
        return mem.search(q, limit=K, channels=("lexical",), namespace_prefix=prefix)

    def vector(q: str, v: Any, prefix: Any = ()) -> Any:
        return mem.search(q, limit=K, channels=("vector",), embedding=v, namespace_prefix=prefix)

    def hybrid(q: str, v: Any, prefix: Any = ()) -> Any:
        return mem.search(q, limit=K, embedding=v, namespace_prefix=prefix)

    subjects: dict[str, tuple[Any, list[tuple[Any, ...]]]] = {}
    closers: list[Any] = []
    if backend == "sqlite":
        raw = sqlite3.connect(place.url, isolation_level=None)
        closers.append(raw)
        raw_exec = raw.execute

        def raw_fts(match: str) -> Any:
            return raw_exec(RAW_FTS, (match,)).fetchall()

        def raw_numpy(q: np.ndarray) -> Any:
            return exact.top(q)[0]

        subjects["raw FTS5"] = (raw_fts, [(match_expr(t),) for t in texts])
        subjects["raw numpy (exact)"] = (raw_numpy, [(a,) for a in arrays])
        raw_lex, raw_vec = "raw FTS5", "raw numpy (exact)"
    else:
        import psycopg

        from memlane.store._common import ITEM_COLUMNS

        raw = psycopg.connect(place.url, autocommit=True)
        closers.append(raw)
        fts_sql = (
            f"SELECT {ITEM_COLUMNS} FROM items WHERE tsv @@ to_tsquery('memlane', %s) "
            "ORDER BY ts_rank(tsv, to_tsquery('memlane', %s)) DESC LIMIT 10"
        )
        vec_sql = (
            f"SELECT {ITEM_COLUMNS} FROM (SELECT item_ref, embedding::vector({DIM}) <=> %s::vector({DIM}) AS d "
            "FROM item_vectors ORDER BY d LIMIT 10) AS v JOIN items ON items.ref = v.item_ref ORDER BY v.d"
        )

        def raw_ts(q1: str, q2: str) -> Any:
            return raw.execute(fts_sql, (q1, q2)).fetchall()

        def raw_hnsw(literal: str) -> Any:
            return raw.execute(vec_sql, (literal,)).fetchall()

        literals = ["[" + ",".join(repr(float(x)) for x in v) + "]" for v in vecs]
        subjects["raw ts_rank"] = (raw_ts, [(pg_tsquery(t), pg_tsquery(t)) for t in texts])
        subjects["raw pgvector HNSW"] = (raw_hnsw, [(lit,) for lit in literals])
        raw_lex, raw_vec = "raw ts_rank", "raw pgvector HNSW"
        # the raw HNSW query's own recall (default ef_search): what the index gives with no help
        hits = 0.0
        for j in range(min(50, count)):
            top, tenth, _ = exact.top(qvecs[j])
            got = [r[0] for r in raw.execute(vec_sql.replace(ITEM_COLUMNS, "items.id"), (literals[j],))]
            hits += recall_at_10(got, top, tenth, [exact.score_of(i, qvecs[j], row_of) for i in got])
        out["raw_hnsw_recall_at_10"] = round(hits / min(50, count), 4)
    subjects.update(
        {
            "memlane lexical": (lexical, [(t,) for t in texts]),
            "memlane vector": (vector, list(zip(texts, vecs, strict=True))),
            "memlane hybrid": (hybrid, list(zip(texts, vecs, strict=True))),
            "memlane lexical, team prefix": (lexical, list(zip(texts, ts, strict=True))),
            "memlane vector, team prefix": (vector, list(zip(texts, vecs, ts, strict=True))),
            "memlane hybrid, team prefix": (hybrid, list(zip(texts, vecs, ts, strict=True))),
            "memlane hybrid, agent namespace": (hybrid, list(zip(texts, vecs, hs, strict=True))),
        }
    )
    progress(f"{backend} N={n:,}: timing {args.queries} questions x {len(subjects)} subjects (+{warm} warm-up)")
    samples = time_calls_interleaved(subjects, rounds=args.rounds, warmup=warm)
    for c in closers:
        c.close()
    out["latency_us"] = {name: summarize(s).to_dict() for name, s in samples.items()}
    out["raw"] = {"lexical": raw_lex, "vector": raw_vec}
    out["examples"] = texts[warm : warm + 4]
    out["rss_bytes"] = rss_bytes()
    return out


def _update(mem: Any, corpus: ScaleCorpus, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """New items written into the built store: write, indexer catch-up, and the first search after."""
    count = args.update
    rows = [
        {"namespace": UPDATE_NS, "key": f"update.{i}", "value": r["value"]}
        for i, r in enumerate(corpus.batch(n, n + count))
    ]
    progress(f"N={n:,}: update: {count:,} new items")
    t0 = time.perf_counter()
    for s in range(0, count, 500):
        mem.put_many(rows[s : s + 500])
    write_s = time.perf_counter() - t0
    mem.wait_indexed()
    indexed_s = time.perf_counter() - t0
    probe = rows[-1]["value"]
    t1 = time.perf_counter()
    env = mem.search(probe, limit=K, channels=("vector",))
    first_ms = (time.perf_counter() - t1) * 1000
    found = any(h.item.key == rows[-1]["key"] for h in env.hits)
    t1 = time.perf_counter()
    mem.search(probe, limit=K)
    second_ms = (time.perf_counter() - t1) * 1000
    mem.clear(UPDATE_NS[0])
    mem.wait_indexed()
    return {
        "items": count,
        "write_items_per_s": round(count / write_s),
        "indexed_items_per_s": round(count / indexed_s),
        "first_vector_search_after_ms": round(first_ms, 1),
        "found_the_new_item": found,
        "next_hybrid_search_ms": round(second_ms, 1),
    }


# -- report ------------------------------------------------------------------------------------------


def _ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def report_scale(res: dict[str, Any]) -> str:
    backend, n = res["backend"], res["n"]
    lat = res["latency_us"]
    raw_lex, raw_vec = res["raw"]["lexical"], res["raw"]["vector"]
    rows = []
    for name, s in lat.items():
        vs = ""
        if name.startswith("memlane lexical"):
            vs = f"{ratio(s['p50_us'], lat[raw_lex]['p50_us']):.2f}x {raw_lex}"
        elif name.startswith("memlane vector"):
            vs = f"{ratio(s['p50_us'], lat[raw_vec]['p50_us']):.2f}x {raw_vec}"
        elif name.startswith("memlane hybrid"):
            both = lat[raw_lex]["p50_us"] + lat[raw_vec]["p50_us"]
            vs = f"{ratio(s['p50_us'], both):.2f}x the two raw"
        rows.append([name, _ms(s["p50_us"]), _ms(s["p90_us"]), _ms(s["p99_us"]), vs])
    title = (
        f"{backend}, N={n:,} items in {res['namespaces']} namespaces ({res['teams']} teams); "
        f"{lat['memlane hybrid']['n']} natural questions timed per subject, e.g. {res['examples'][0]!r}"
    )
    lines = [format_table(["subject", "p50 ms", "p90 ms", "p99 ms", "p50 vs raw"], rows, title=title)]
    rec = res["recall_at_10"]
    lines.append(
        "vector recall@10 against the exact scan (numpy, same vectors): "
        + ", ".join(f"{k} {v:.3f} (worst query {res['recall_min'][k]:.1f})" for k, v in rec.items())
        + (
            f"; raw HNSW LIMIT 10 (ef_search 40) {res['raw_hnsw_recall_at_10']:.3f}"
            if "raw_hnsw_recall_at_10" in res
            else ""
        )
    )
    b, e, u = res["build"], res["embedding"], res["update"]
    lines.append(
        f"build: {'reused (figures of the build run) ' if b.get('reused') else ''}"
        f"write {b['write_items_per_s']:,} items/s, "
        f"indexed (every vector in) {b['indexed_items_per_s']:,} items/s; embedders alone: the bench's "
        f"{e['bench_embedder_items_per_s']:,} items/s, memlane's fake:384 "
        f"{e['memlane_fake384_items_per_s']:,} items/s; "
        f"store {fmt_bytes(res['store_bytes'])}, vectors {fmt_bytes(res['vectors_bytes'])}"
    )
    lines.append(
        f"update: {u['items']:,} new items written at {u['write_items_per_s']:,} items/s, indexed at "
        f"{u['indexed_items_per_s']:,} items/s; the next vector search {u['first_vector_search_after_ms']:.1f} ms "
        f"(found the newest item: {'yes' if u['found_the_new_item'] else 'NO'}), "
        f"the next hybrid {u['next_hybrid_search_ms']:.1f} ms"
    )
    fs = res["first_search"]
    parts = []
    for ch, f in fs.items():
        if "error" in f:
            parts.append(f"{ch}: {f['error']}")
        else:
            parts.append(
                f"{ch} {f['first_ms']:,.1f} ms (then {f['then_median_ms']:,.1f} ms; "
                f"import+open {f['import_open_ms']:,.0f} ms)"
            )
    lines.append("first search in a fresh process: " + "; ".join(parts))
    for s in res.get("serve", []):
        if "error" in s:
            lines.append(f"serve --workers {s['workers']}: {s['error']}")
            continue
        per = s["per_worker"]
        growth = [w["private_growth"] for w in per]
        pss = [w["pss_growth"] for w in per]
        vb = res["vectors_bytes"]
        lines.append(
            f"serve --workers {s['workers']} ({s['found_workers']} found): first search over HTTP "
            f"{s['first_search_ms']:,.1f} ms; {s['searches']} searches, p50 {s['concurrent_p50_ms']} ms with "
            f"{2 * s['workers']} clients; per worker private growth {', '.join(fmt_bytes(g) for g in growth)} "
            f"(max {max(growth) / vb:.2f}x the vectors' bytes), Pss growth {', '.join(fmt_bytes(g) for g in pss)}; "
            f"CPU ticks searching {[w['cpu_ticks_searching'] for w in per]}"
        )
    lines.append("goals: " + "; ".join(goals(res)))
    return "\n".join(lines)


def goals(res: dict[str, Any]) -> list[str]:
    lat, rec = res["latency_us"], res["recall_at_10"]
    p50, p99 = lat["memlane hybrid"]["p50_us"] / 1000, lat["memlane hybrid"]["p99_us"] / 1000
    if res["backend"] == "sqlite":
        g = [Goal("hybrid p50 <= 20 ms", 20), Goal("hybrid p99 <= 100 ms", 100)]
    else:
        g = [Goal("hybrid p50 <= 30 ms", 30), Goal("hybrid p99 <= 150 ms", 150)]
    out = [f"{g[0].label}: {p50:.1f} {g[0].status(p50)}", f"{g[1].label}: {p99:.1f} {g[1].status(p99)}"]
    r = Goal("recall@10 >= 0.95", 0.95, higher_is_better=True)
    out.append(f"{r.label}: " + ", ".join(f"{k} {v:.3f} {r.status(v)}" for k, v in rec.items()))
    if res["backend"] == "sqlite":
        f = res["first_search"]["hybrid"].get("first_ms")
        if f is not None:
            out.append(f"first search <= 200 ms: {f:,.0f} {Goal('', 200).status(f)}")
        grow = [w["private_growth"] for s in res.get("serve", []) for w in s.get("per_worker", [])]
        if grow:
            share = max(grow) / res["vectors_bytes"]
            out.append(f"worker growth <= 0.25x vectors: {share:.2f}x {Goal('', 0.25).status(share)}")
    return out


def summary_table(runs: list[dict[str, Any]]) -> str:
    rows = []
    for r in runs:
        lat = r["latency_us"]
        rows.append(
            [
                f"{r['backend']} {r['n']:,}",
                *(
                    f"{_ms(lat[s]['p50_us'])} / {_ms(lat[s]['p99_us'])}"
                    for s in ("memlane lexical", "memlane vector", "memlane hybrid", "memlane hybrid, team prefix")
                ),
                f"{r['recall_at_10']['unscoped']:.3f} / {r['recall_at_10']['team prefix (10%)']:.3f}",
            ]
        )
    return format_table(
        ["store", "lexical p50/p99", "vector p50/p99", "hybrid p50/p99", "hybrid, team p50/p99", "recall@10 all/team"],
        rows,
        title="summary (ms)",
    )


def scale_main(args: argparse.Namespace) -> int:
    sizes = args.n or [100_000]
    info = machine_info()
    print(
        f"machine: {info['cpu_model']}, {info['cpu_count']} CPUs ({info['cpu_usable']} usable), "
        f"{fmt_bytes(info['memory_total_bytes'])} RAM; Python {info['python']}; numpy {np.__version__}; "
        f"SQLite {info['sqlite']}; load {info['loadavg_1_5_15']}"
    )
    print(f"command: python bench/search.py {' '.join(args.argv)}\n", flush=True)
    check_same_as_fake(ScaleCorpus(args.seed, args.namespaces))
    runs: list[dict[str, Any]] = []
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    for backend in backends:
        pg_dir = str(Path(args.reuse) / "pgdata") if args.reuse else None
        with contextlib.ExitStack() as stack:
            admin = stack.enter_context(postgres_server_kept(pg_dir)) if backend == "postgres" else None
            if admin is not None:
                import psycopg

                with psycopg.connect(admin, autocommit=True) as conn:
                    row: Any = conn.execute(
                        "SELECT current_setting('server_version'), "
                        "(SELECT default_version FROM pg_available_extensions WHERE name = 'vector')"
                    ).fetchone()
                print(f"PostgreSQL {row[0]}, pgvector {row[1]}", flush=True)
            for n in sizes:
                place = Place(backend, n, args, admin)
                try:
                    res = run_scale(place, args)
                finally:
                    place.finish()
                res["machine_load_end"] = machine_info()["loadavg_1_5_15"]
                runs.append(res)
                if args.build_only:
                    print(f"{backend} N={n:,}: built {res['build']}", flush=True)
                    continue
                print(report_scale(res), flush=True)
                print(flush=True)
    if not args.build_only:
        print(summary_table(runs), flush=True)
    if args.json:
        write_json(args.json, {"benchmark": "search at scale (#36)", "machine": info, "runs": runs})
        print(f"wrote {args.json}")
    return 0


def verify_main(args: argparse.Namespace) -> int:
    """``--verify-bulk``: the bulk-built store against the indexer-built one, at each ``--n``."""
    check_same_as_fake(ScaleCorpus(args.seed, args.namespaces))
    failed = 0
    with postgres_server() as admin:
        for n in args.n or [20_000]:
            t0 = time.perf_counter()
            problems = verify_bulk(admin, n, args.seed, args.namespaces, min(args.queries, 100), args.batch)
            took = time.perf_counter() - t0
            if problems:
                failed += 1
                print(f"postgres N={n:,}: the bulk build DIFFERS from the indexer's ({took:,.0f} s):", flush=True)
                for p in problems:
                    print(f"  - {p}", flush=True)
            else:
                print(
                    f"postgres N={n:,}: bulk build = indexer build (vectors, index definition, items, marks, embedder, "
                    f"top 10 of {3 * 3 * min(args.queries, 100)} searches; {took:,.0f} s)",
                    flush=True,
                )
    return 1 if failed else 0


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
    ap.add_argument("--n", type=int, action="append", help="items (repeatable); default 100000")
    ap.add_argument("--queries", type=int, default=300, help="timed questions per subject")
    ap.add_argument("--recall-queries", type=int, default=100, help="questions for recall@10 (per scope)")
    ap.add_argument("--namespaces", type=int, default=1000, help="namespaces the items are spread over")
    ap.add_argument("--batch", type=int, default=5000, help="records per put_many call")
    ap.add_argument("--rounds", type=int, default=4, help="alternating blocks per measurement")
    ap.add_argument("--update", type=int, default=2000, help="items written into the built store (update rate)")
    ap.add_argument(
        "--serve-workers",
        default="1,2,4",
        help="memlane serve --workers for the memory figures, comma-separated; '' to skip",
    )
    ap.add_argument("--serve-searches", type=int, default=40, help="searches over HTTP per worker")
    ap.add_argument("--seed", type=int, default=20240607)
    ap.add_argument(
        "--backend",
        choices=("sqlite", "postgres", "both"),
        default="sqlite",
        help="sqlite (default), postgres ($MEMLANE_TEST_PG_URL or a pgserver) or both",
    )
    ap.add_argument(
        "--reuse",
        "--keep",
        metavar="DIR",
        help="keep built stores in DIR (SQLite files, a pgserver data directory) and reuse them on later runs",
    )
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    ap.add_argument("--build-only", action="store_true", help="build (or find) the stores under --reuse, then stop")
    ap.add_argument(
        "--pg-build",
        choices=("indexer", "bulk"),
        default="indexer",
        help="PostgreSQL: build through the write-behind indexer (default) or in bulk: put_many, the vectors "
        "in one COPY, the HNSW index made once (the same store, hours sooner at 1M)",
    )
    ap.add_argument(
        "--verify-bulk",
        action="store_true",
        help="PostgreSQL: build each --n both ways on a throwaway server, compare vectors, index, marks and "
        "search results, and exit 1 on any difference",
    )
    ap.add_argument(
        "--common",
        action="store_true",
        help="only the common-word case: 'value <i> text' over N items whose every text has 'value' and 'text'",
    )
    args = ap.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    if args.common:
        return common_main(args)
    args.serve_workers = [int(w) for w in args.serve_workers.split(",") if w.strip()]
    if args.verify_bulk:
        return verify_main(args)
    return scale_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
