"""Filtered search speed: ``Memory.search(where=...)`` against the same search without a filter (#37).

Usage::

    python bench/filter.py [--n 100000] [--queries 40] [--json OUT]
    python bench/filter.py --sqlite PATH [--sqlite PATH ...] [--postgres DIR] [--queries 60] [--json OUT]

Without a store named, builds N synthetic items in a temporary directory (``bench/search.py``'s corpus and its
random-unit 384-dimension embedder), each with ``metadata.bucket = i % 1000``, so
``{"metadata.bucket": {"$lt": t}}`` matches 0.1 %, 1 %, 10 % or 50 % of the store.

``--sqlite PATH`` and ``--postgres DIR`` measure the stores ``bench/search.py --reuse`` keeps (items of 10-30
Zipf words, ``fake:384`` vectors): SQLite opened read-only; PostgreSQL in the pgserver data directory ``DIR``,
database ``memlane_search_<--pg-n>_s<seed>_ns<namespaces>``, through the same public API, and nothing written
to it. Those items carry no metadata and no author, so the filters are what they hold:

* ``value`` ranges: ``{"value": {"$gte": lo, "$lt": hi}}`` with ``lo`` and ``hi`` two stored texts picked
  from the sorted texts so that the range holds 0.1 %, 1 %, 10 % or 50 % of the items (a JSON test per row);
* ``created_at`` ranges where the build's batches allow that share exactly (a column test per row).

For each channel (lexical, vector, hybrid; ``limit=10``, query vectors passed as ``embedding=``) the search
without a filter and with each filter are timed on the same questions, interleaved in rotating blocks
(``_util.time_calls_interleaved``), unscoped (the scope is the store). Every filtered search is checked:
its hits are counted against ``min(limit, relevant)``, where relevant is the items meeting the filter that
are candidates (for the lexical channel: hold a query term or address word, exact words in Python, so a lower
bound of what the stemmed index matches; for vector and hybrid: every item meeting it); and each hit must meet
the filter. "short" is the searches that found fewer than that (the goal: none), "wrong" the hits that do
not meet the filter. On SQLite, "SQL/search" is the statements one search ran on the store's connection
(its trace callback; warm-up questions not counted). ``--channels vector`` times that channel alone.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import memlane
from _util import (
    format_table,
    machine_info,
    pg_url_for,
    postgres_server_kept,
    progress,
    summarize,
    time_calls_interleaved,
    write_json,
)
from memlane.domain.search import rank
from search import Corpus, FakeVectors, RandomUnitEmbedder, ScaleCorpus

SELECTIVITY = {"0.1%": 0.001, "1%": 0.01, "10%": 0.1, "50%": 0.5}
CHANNELS = {"lexical": ("lexical",), "vector": ("vector",), "hybrid": ("lexical", "vector")}
LIMIT = 10
_ADDRESS = re.compile(r"\w+")


@dataclass
class Filter:
    """One ``where`` and which items meet it (``mask``, a row of the bench's own item list each)."""

    name: str
    where: dict[str, Any]
    mask: np.ndarray
    meets: Callable[[Any], bool]  # a hit's item meets it (checked on every hit)


@dataclass
class Items:
    """What the bench knows of the store's items: each one's words (text and address) and its filters."""

    words: list[set[str]]
    filters: list[Filter]


def query_postings(items: Items, questions: list[str]) -> dict[str, np.ndarray]:
    """For each query term, the items whose words hold it (only the questions' terms: a million items fit)."""
    wanted = {t for q in questions for t in rank.terms(q)}
    lists: dict[str, list[int]] = {t: [] for t in wanted}
    for i, ws in enumerate(items.words):
        for t in ws & wanted:
            lists[t].append(i)
    return {t: np.asarray(v, dtype=np.int64) for t, v in lists.items()}


def relevant_counts(items: Items, questions: list[str]) -> dict[tuple[str, str], int]:
    """``(question, filter)`` -> items meeting the filter that hold a question term (capped at ``LIMIT``)."""
    post = query_postings(items, questions)
    out = {}
    for q in questions:
        arrays = [post[t] for t in rank.terms(q)]
        rows = np.unique(np.concatenate(arrays)) if arrays else np.zeros(0, dtype=np.int64)
        for f in items.filters:
            out[(q, f.name)] = min(LIMIT, int(f.mask[rows].sum()))
    return out


def measure(
    mem: Any,
    items: Items,
    questions: list[str],
    vectors: list[list[float]],
    rounds: int,
    warmup: int,
    channels: Sequence[str] = tuple(CHANNELS),
) -> tuple[dict[str, Any], list[list[Any]]]:
    """Time every channel without a filter and with each one; count short pages and wrong hits."""
    checked = set(questions[warmup:])
    lexical_need = relevant_counts(items, sorted(checked))
    statements = _statement_counter(mem)
    result: dict[str, Any] = {}
    rows: list[list[Any]] = []
    for channel, chosen in CHANNELS.items():
        if channel not in channels:
            continue
        subjects: dict[str, Any] = {}
        checks: dict[str, dict[str, int]] = {}
        for f in [None, *items.filters]:
            name = "none" if f is None else f.name
            tally = checks.setdefault(name, {"searches": 0, "short": 0, "wrong": 0, "hits": 0, "calls": 0, "sql": 0})
            everyone = LIMIT if f is None else min(LIMIT, int(f.mask.sum()))

            def call(
                q: str,
                vec: list[float],
                f: Filter | None = f,
                name: str = name,
                tally: dict[str, int] = tally,
                everyone: int = everyone,
                lexical: bool = channel == "lexical",
                chosen: tuple[str, ...] = chosen,
            ) -> None:
                before = statements[0]
                env = mem.search(q, limit=LIMIT, channels=chosen, embedding=vec, where=None if f is None else f.where)
                if q not in checked:  # a warm-up question
                    return
                tally["calls"] += 1
                tally["sql"] += statements[0] - before
                if f is None:
                    return
                need = lexical_need[(q, name)] if lexical else everyone
                tally["searches"] += 1
                tally["hits"] += len(env.hits)
                tally["short"] += len(env.hits) < need
                tally["wrong"] += sum(1 for h in env.hits if not f.meets(h.item))

            subjects[name] = (call, list(zip(questions, vectors, strict=True)))
        timed = time_calls_interleaved(subjects, rounds=rounds, warmup=warmup)
        base = summarize(timed["none"]).p50_us
        per: dict[str, Any] = {}
        for name, samples in timed.items():
            s = summarize(samples)
            t = checks[name]
            per[name] = {
                "p50_ms": round(s.p50_us / 1000, 2),
                "p99_ms": round(s.p99_us / 1000, 2),
                "ratio": round(s.p50_us / base, 2),
                **t,
            }
            if statements[1]:
                per[name]["statements_per_search"] = round(t["sql"] / max(1, t["calls"]), 1)
            shown = f"{t['short']}/{t['searches']}" if name != "none" else ""
            rows.append([channel, name, per[name]["p50_ms"], per[name]["p99_ms"], per[name]["ratio"], shown,
                         t["wrong"] if name != "none" else "", per[name].get("statements_per_search", "")])  # fmt: skip
        result[channel] = per
    return result, rows


def _statement_counter(mem: Any) -> list[int]:
    """``[statements run so far, 1]`` on a SQLite store's connection (counted by its trace callback), else
    ``[0, 0]``."""
    counter = [0, 0]
    conn = getattr(mem.store, "_conn", None)
    if isinstance(conn, sqlite3.Connection):
        counter[1] = 1

        def seen(_: str) -> None:
            counter[0] += 1

        conn.set_trace_callback(seen)
    return counter


# -- the synthetic store (metadata.bucket) ----------------------------------------------------------------


def synthetic(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    corpus = Corpus(args.seed, 100)
    embedder = RandomUnitEmbedder()
    n = args.n
    with tempfile.TemporaryDirectory() as tmp:
        mem = memlane.open(str(Path(tmp) / "filter.db"), embedder=embedder)
        progress(f"N={n:,}: building")
        t0 = time.perf_counter()
        words: list[set[str]] = []
        for start in range(0, n, args.batch):
            rows = corpus.batch(start, min(n, start + args.batch))
            for i, row in enumerate(rows, start):
                row["metadata"] = {"bucket": i % 1000}
                words.append(set(rank.terms(row["value"])) | _address_words(row["namespace"], row["key"]))
            mem.put_many(rows)
        mem.wait_indexed()
        progress(f"  built and indexed in {time.perf_counter() - t0:,.1f} s")
        bucket = np.arange(n) % 1000
        filters = []
        for name, share in SELECTIVITY.items():
            t = round(share * 1000)
            filters.append(
                Filter(name, {"metadata.bucket": {"$lt": t}}, bucket < t, lambda item, t=t: item.metadata["bucket"] < t)
            )
        queries = corpus.queries("natural", args.queries + args.warmup)
        vectors = [v.tolist() for v in embedder.embed_batch(queries)]
        mem.search("warm", channels=("vector",), embedding=vectors[0], limit=10)  # loads the vector cache
        res, rows_out = measure(mem, Items(words, filters), queries, vectors, args.rounds, args.warmup, args.channels)
        mem.close()
    title = f"synthetic SQLite store, N={n:,}, metadata.bucket filters, limit 10, {args.queries} queries"
    return {"store": "synthetic", "n": n, "channels": res}, _table(rows_out, title)


# -- the kept stores of bench/search.py ------------------------------------------------------------------


def _address_words(namespace: Any, key: str) -> set[str]:
    ns = namespace if isinstance(namespace, str) else "/".join(namespace)
    return {w.lower() for w in _ADDRESS.findall(f"{ns} {key}")}


def kept_items(rows: Iterator[tuple[str, str, str, str]], n: int) -> Items:
    """The items of a kept store (``namespace, key, value JSON, created_at``) and the filters over them."""
    words: list[set[str]] = []
    texts: list[str] = []
    created: list[str] = []
    for namespace, key, value, created_at in rows:
        text = json.loads(value)
        texts.append(text)
        created.append(created_at)
        words.append(set(rank.terms(text)) | _address_words(namespace, key))
    if len(texts) != n:
        raise SystemExit(f"bench/filter.py: the store holds {len(texts):,} items, not {n:,}")
    ordered = sorted(texts)
    as_array = np.asarray(texts, dtype=object)
    filters = []
    for name, share in SELECTIVITY.items():
        # a range of the sorted texts holding that share of them; it starts three tenths in, away from the ends
        start = int(0.3 * n)
        lo, hi = ordered[start], ordered[start + round(share * n)]
        mask = (as_array >= lo) & (as_array < hi)
        filters.append(
            Filter(
                f"value {name}",
                {"value": {"$gte": lo, "$lt": hi}},
                mask.astype(bool),
                lambda item, lo=lo, hi=hi: lo <= item.value < hi,
            )  # fmt: skip
        )
    times = sorted(set(created))
    per_time = {t: 0 for t in times}
    for t in created:
        per_time[t] += 1
    created_array = np.asarray(created, dtype=object)
    for name, share in SELECTIVITY.items():
        # consecutive batches (one created_at each) from three tenths in, where they hold that share exactly
        want = round(share * n)
        first = bisect.bisect_left(times, times[int(0.3 * len(times))])
        total, last = 0, first
        while last < len(times) and total < want:
            total += per_time[times[last]]
            last += 1
        if total != want or last >= len(times):
            continue
        lo, hi = times[first], times[last]
        mask = (created_array >= lo) & (created_array < hi)
        filters.append(
            Filter(
                f"created_at {name}",
                {"created_at": {"$gte": lo, "$lt": hi}},
                mask.astype(bool),
                lambda item, lo=lo, hi=hi: lo <= _iso(item.created_at) < hi,
            )  # fmt: skip
        )
    return Items(words, filters)


def _iso(t: Any) -> str:
    return t if isinstance(t, str) else t.isoformat(timespec="microseconds")


def run_kept(label: str, url: str, rows: Iterator[tuple[str, str, str, str]], n: int, args: argparse.Namespace,
             **open_args: Any) -> tuple[dict[str, Any], str]:  # fmt: skip
    progress(f"{label}: reading the items")
    t0 = time.perf_counter()
    items = kept_items(rows, n)
    progress(f"  {n:,} items and {len(items.filters)} filters in {time.perf_counter() - t0:,.1f} s")
    questions = ScaleCorpus(args.seed, args.namespaces).questions(args.queries + args.warmup)
    vectors = [v.tolist() for v in FakeVectors().matrix(questions).astype(np.float32)]
    mem = memlane.open(url, embedder=FakeVectors(), indexing="external", **open_args)
    try:
        load_start = machine_info()["loadavg_1_5_15"]
        progress(f"{label}: timing {args.queries} questions x {1 + len(items.filters)} subjects x 3 channels")
        res, rows_out = measure(mem, items, questions, vectors, args.rounds, args.warmup, args.channels)
    finally:
        mem.close()
    load_end = machine_info()["loadavg_1_5_15"]
    title = (
        f"{label}, N={n:,}, unscoped, limit 10, {args.queries} questions (+{args.warmup} warm-up); "
        f"load {load_start} -> {load_end}"
    )
    out = {"store": label, "n": n, "load_start": load_start, "load_end": load_end, "channels": res}
    out["filters"] = {f.name: {"where": f.where, "matching": int(f.mask.sum())} for f in items.filters}
    return out, _table(rows_out, title)


def vector_probe(path: str, n: int, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The store's filtered vector nomination alone (``SqliteStore.vector``, ``k`` = ``--probe-k``): p50, the
    statements it runs, which path answered (the graph, or the exact ranking of the index), and its recall
    against the exact filtered answer (a second store on the file with the shared index off: every vector ranked).
    """
    import os
    import statistics

    from memlane.store.sqlite import SqliteStore
    from memlane.values import where as where_rules

    items = kept_items(sqlite_rows(path), n)
    k = args.probe_k
    vectors = FakeVectors().matrix(ScaleCorpus(args.seed, args.namespaces).questions(args.queries)).astype(np.float32)
    store = SqliteStore(path, read_only=True)
    saved = os.environ.get("MEMLANE_VECTOR_INDEX")
    os.environ["MEMLANE_VECTOR_INDEX"] = "0"  # read when a store first searches
    exact = SqliteStore(path, read_only=True)
    exact.vector(vectors[0].tolist(), [()], 1)
    if saved is None:
        del os.environ["MEMLANE_VECTOR_INDEX"]
    else:
        os.environ["MEMLANE_VECTOR_INDEX"] = saved
    statements = [0]
    store._conn.set_trace_callback(lambda _: statements.__setitem__(0, statements[0] + 1))
    store.vector(vectors[0].tolist(), [()], k)  # opens the shared index
    shared = store._vectors
    rows, out = [], {}
    try:
        for f in [None, *items.filters]:
            name = "none" if f is None else f.name
            conditions = [] if f is None else where_rules.conditions(f.where)
            times, sql, graph, recall = [], 0, 0, 0.0
            for v in vectors:  # timed first, all of them, then the exact answers (their scans disturb the timing)
                q, before, answered = v.tolist(), statements[0], shared.approximate_searches
                t0 = time.perf_counter()
                store.vector(q, [()], k, conditions)
                times.append(time.perf_counter() - t0)
                sql += statements[0] - before
                graph += shared.approximate_searches - answered
            for v in vectors:
                got = {h[0] for h in store.vector(v.tolist(), [()], k, conditions)}
                want = {h[0] for h in exact.vector(v.tolist(), [()], k, conditions)}
                recall += len(got & want) / max(1, len(want))
            p50 = statistics.median(times) * 1000
            out[name] = {"p50_ms": round(p50, 2), "statements": sql / len(vectors), "graph": graph,
                         "recall": round(recall / len(vectors), 3)}  # fmt: skip
            rows.append([name, round(p50, 2), round(p50 / out["none"]["p50_ms"], 2), round(sql / len(vectors), 1),
                         f"{graph}/{len(vectors)}", round(recall / len(vectors), 3)])  # fmt: skip
    finally:
        store.close()
        exact.close()
    headers = ["filter", "p50 ms", "p50 / none", "SQL/search", "graph answered", f"recall@{k}"]
    title = f"SQLite store.vector, N={n:,}, unscoped, k={k}, {len(vectors)} questions"
    return {"store": "SQLite store.vector", "n": n, "k": k, "filters": out}, format_table(headers, rows, title=title)


def sqlite_rows(path: str) -> Iterator[tuple[str, str, str, str]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        yield from conn.execute("SELECT namespace, key, value, created_at FROM items ORDER BY rowid")
    finally:
        conn.close()


@contextlib.contextmanager
def kept_postgres(datadir: str, dbname: str) -> Iterator[str]:
    with postgres_server_kept(datadir) as admin:
        yield pg_url_for(admin, dbname)


def postgres_rows(url: str) -> Iterator[tuple[str, str, str, str]]:
    import psycopg

    with psycopg.connect(url) as conn:
        cur = conn.execute("SELECT namespace, key, value, created_at FROM items ORDER BY ref")
        for namespace, key, value, created_at in cur:
            yield namespace, key, value, _iso(created_at)


def _table(rows: list[list[Any]], title: str) -> str:
    headers = ["channel", "filter", "p50 ms", "p99 ms", "p50 / none", "short/checked", "wrong hits", "SQL/search"]
    return format_table(headers, rows, title=title)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="items of the synthetic store")
    parser.add_argument("--sqlite", action="append", default=[], help="a kept SQLite store of bench/search.py")
    parser.add_argument("--postgres", metavar="DIR", help="the pgserver data directory of bench/search.py --reuse")
    parser.add_argument("--pg-n", type=int, default=100_000, help="which kept PostgreSQL store (its N)")
    parser.add_argument("--queries", type=int, default=40, help="timed questions per subject")
    parser.add_argument("--warmup", type=int, default=5, help="untimed questions per subject first")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=None, help="7 (synthetic) or 20240607 (kept stores)")
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--json", default=None)
    parser.add_argument("--probe-k", type=int, default=0, help="with --sqlite: the store's vector call alone, this k")
    parser.add_argument("--channels", nargs="+", choices=list(CHANNELS), default=list(CHANNELS))
    args = parser.parse_args(argv)
    info = machine_info()
    print(f"machine: {info['cpu_model']}, {info['cpu_usable']} usable CPUs; SQLite {info['sqlite']}; "
          f"load {info['loadavg_1_5_15']}", flush=True)  # fmt: skip
    print(f"command: python bench/filter.py {' '.join(sys.argv[1:] if argv is None else argv)}\n", flush=True)
    runs = []
    if not args.sqlite and not args.postgres:
        args.seed = 7 if args.seed is None else args.seed
        res, table = synthetic(args)
        runs.append(res)
        print(table, flush=True)
    args.seed = 20240607 if args.seed is None else args.seed
    for path in args.sqlite:
        n = int(re.search(r"search-(\d+)-", Path(path).name).group(1))  # type: ignore[union-attr]
        if args.probe_k:
            res, table = vector_probe(path, n, args)
        else:
            res, table = run_kept("SQLite", path, sqlite_rows(path), n, args, read_only=True)
        runs.append(res)
        print(table + "\n", flush=True)
    if args.postgres:
        dbname = f"memlane_search_{args.pg_n}_s{args.seed}_ns{args.namespaces}"
        with kept_postgres(args.postgres, dbname) as url:
            res, table = run_kept("PostgreSQL", url, postgres_rows(url), args.pg_n, args)
        runs.append(res)
        print(table + "\n", flush=True)
    if args.json:
        write_json(args.json, {"benchmark": "filtered search (#37)", "machine": info, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
