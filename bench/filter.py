"""Filtered search speed: ``Memory.search(where=...)`` against the same search without a filter (#37).

Usage::

    python bench/filter.py [--n 100000] [--queries 40] [--json OUT]

Builds N synthetic items (``bench/search.py``'s corpus and its random-unit 384-dimension embedder), each with
``metadata.bucket = i % 1000``, so ``{"metadata.bucket": {"$lt": t}}`` matches 0.1 %, 1 %, 10 % or 50 % of
the store. Then, all vectors made and warm, for each channel (lexical, vector, hybrid; ``limit=10``, query
vectors passed as ``embedding=``), times the search without a filter and with each filter, interleaved in
rotating blocks, and counts the "short pages": searches that returned fewer than ``limit`` hits although at
least ``limit`` items meet the filter and are candidates (for the lexical channel: hold a query term, worked
out in Python from the corpus; for the vector channel: every item). The goal is none. SQLite only; files
live in a temporary directory removed afterwards.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import memlane
from _util import format_table, machine_info, progress, summarize, time_calls_interleaved, write_json
from memlane.domain.search import rank
from search import Corpus, RandomUnitEmbedder

SELECTIVITY = {"0.1%": 1, "1%": 10, "10%": 100, "50%": 500}  # metadata.bucket < t, bucket = i % 1000
CHANNELS = {"lexical": ("lexical",), "vector": ("vector",), "hybrid": ("lexical", "vector")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    corpus = Corpus(args.seed, 100)
    embedder = RandomUnitEmbedder()
    result: dict[str, Any] = {"n": args.n, "machine": machine_info(), "channels": {}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "filter.db"
        mem = memlane.open(str(path), embedder=embedder)
        progress(f"N={args.n:,}: building")
        t0 = time.perf_counter()
        words: dict[int, set[str]] = {}  # the terms of every item a filter can match (bucket < 500)
        for start in range(0, args.n, args.batch):
            rows = corpus.batch(start, min(args.n, start + args.batch))
            for i, row in enumerate(rows, start):
                row["metadata"] = {"bucket": i % 1000}
                if i % 1000 < 500:
                    words[i] = set(rank.terms(row["value"]))
            mem.put_many(rows)
        mem.wait_indexed()
        progress(f"  built and indexed in {time.perf_counter() - t0:,.1f} s")
        queries = corpus.queries("natural", args.queries)
        # per query and filter: can a page of 10 be filled? (lexical: 10 matching items hold a query term)
        full = {
            (q, t): sum(1 for i, ws in words.items() if i % 1000 < t and ws & set(rank.terms(q))) >= 10
            for q in queries
            for t in SELECTIVITY.values()
        }
        vectors = [v.tolist() for v in embedder.embed_batch(queries)]
        mem.search("warm", channels=("vector",), embedding=vectors[0], limit=10)  # loads the vector cache
        rows_out = []
        for channel, chosen in CHANNELS.items():
            subjects: dict[str, Any] = {}
            short: dict[str, int] = {}
            for name, t in {"none": None, **SELECTIVITY}.items():
                where = None if t is None else {"metadata.bucket": {"$lt": t}}

                def call(
                    q: str,
                    vec: list[float],
                    where: Any = where,
                    name: str = name,
                    t: Any = t,
                    chosen: Any = chosen,
                    lexical: bool = channel == "lexical",
                    short: dict[str, int] = short,
                ) -> None:
                    env = mem.search(q, limit=10, channels=chosen, embedding=vec, where=where)
                    fillable = t is None or not lexical or full[(q, t)]
                    if len(env.hits) < 10 and fillable:
                        short[name] = short.get(name, 0) + 1

                subjects[name] = (call, list(zip(queries, vectors, strict=True)))
            timed = time_calls_interleaved(subjects, rounds=4, warmup=2)
            base = summarize(timed["none"]).p50_us
            per: dict[str, Any] = {}
            for name, samples in timed.items():
                s = summarize(samples)
                per[name] = {"p50_ms": round(s.p50_us / 1000, 2), "p99_ms": round(s.p99_us / 1000, 2),
                             "ratio": round(s.p50_us / base, 2), "short_pages": short.get(name, 0)}  # fmt: skip
                rows_out.append([channel, name, per[name]["p50_ms"], per[name]["p99_ms"], per[name]["ratio"],
                                 per[name]["short_pages"]])  # fmt: skip
            result["channels"][channel] = per
        mem.close()
    print(format_table(["channel", "filter", "p50 ms", "p99 ms", "p50 / none", "short pages"], rows_out,
                       title=f"filtered search, N={args.n:,}, limit 10, {args.queries} queries"))  # fmt: skip
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
