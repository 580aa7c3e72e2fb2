"""LangGraph store benchmark: memlane's ``MemlaneStore`` against LangGraph's own ``SqliteStore`` / ``PostgresStore``.

Usage::

    python bench/langgraph.py [--n 5000] [--queries 300] [--backend sqlite|postgres|both] [--json OUT]

Both stores get the same items (``--n`` values in 50 namespaces, put through ``batch`` in chunks of 500), the
same deterministic fake embedding (word hashing, 64 dimensions, the same Python function for both), and the same
requests in the same run, timed call by call and interleaved in blocks (``_util.time_calls_interleaved``) so a
busy machine slows both alike. Reported: p50 latency of each and the ratio memlane / LangGraph (below 1.0:
memlane is faster) for ``put`` (one new item), ``batch`` puts of 25 new items (indexed, and with
``index=False``: no embedding on either side, and no full-text entry in memlane), ``get``, ``search``
with a filter (equality and ``$gte``) in one namespace, and a selective one (kind and score: 1 item in 100) over
all 50, ``search`` newest first without a filter, vector ``search`` (a query) alone and with each filter over
all namespaces, and ``list_namespaces``. For every search, the hits of each request are counted on both sides:
memlane must never return fewer than LangGraph (``--searches-only`` times the searches alone).

LangGraph's ``SqliteStore`` does vector search through the ``sqlite-vec`` extension, which needs
``sqlite3`` extension loading; when this Python lacks it, LangGraph's store gets a ``pysqlite3`` connection
(``pysqlite3-binary``, in the dev extra: its own, newer SQLite; memlane keeps this Python's), and without that
either the SQLite rows compare everything but vector search and memlane's vector search is reported alone.
PostgreSQL comes from ``$MEMLANE_TEST_PG_URL`` or a pgserver started here (as the tests do); LangGraph's
``PostgresStore`` uses pgvector.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

# this file's name is the package's: import the package, not this script, then the sibling helpers
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
from langgraph.store.base import PutOp  # noqa: E402

from memlane.langgraph import MemlaneStore  # noqa: E402

sys.path.insert(0, _HERE)
from _util import format_table, machine_info, summarize, time_calls_interleaved  # noqa: E402

DIMS = 64
WORDS = [f"w{i}" for i in range(400)]
KINDS = ["fact", "preference", "event", "task", "note"]
NAMESPACES = 50
BATCH = 25  # items per timed batch put


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic word hashing: each word adds 1 to one of 64 dimensions; L2-normalised."""
    out = []
    for text in texts:
        vec = [0.0] * DIMS
        for word in text.split():
            vec[int(hashlib.blake2b(word.encode(), digest_size=2).hexdigest(), 16) % DIMS] += 1.0
        norm = math.sqrt(sum(x * x for x in vec)) or 1.0
        out.append([x / norm for x in vec])
    return out


def item(i: int, rng: random.Random) -> tuple[tuple[str, ...], str, dict[str, Any]]:
    text = " ".join(rng.choice(WORDS) for _ in range(12))
    value = {"text": text, "kind": KINDS[i % 5], "score": i % 100, "meta": {"year": 2000 + i % 25}}
    return ("users", f"u{i % NAMESPACES}", "memories"), f"m{i}", value


def _sqlite_module() -> Any:
    """A ``sqlite3`` that loads extensions: this Python's, else ``pysqlite3`` (the dev extra) when installed."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        import pysqlite3.dbapi2 as lite  # type: ignore[import-not-found]
    except ImportError:
        return sqlite3
    return lite


def sqlite_vec_loads() -> bool:
    conn = _sqlite_module().connect(":memory:")
    try:
        conn.enable_load_extension(True)
        import sqlite_vec  # type: ignore[import-not-found]

        sqlite_vec.load(conn)
        return True
    except Exception:
        return False
    finally:
        conn.close()


@contextmanager
def langgraph_sqlite(path: str, index: Any) -> Iterator[Any]:
    """LangGraph's ``SqliteStore`` on a connection of :func:`_sqlite_module` (as its ``from_conn_string`` opens it)."""
    from langgraph.store.sqlite import SqliteStore

    conn = _sqlite_module().connect(path, check_same_thread=False, isolation_level=None)
    try:
        yield SqliteStore(conn, index=index)
    finally:
        conn.close()


@contextmanager
def postgres_urls() -> Iterator[tuple[str, str]]:
    """Two fresh databases (memlane's and LangGraph's) on one server."""
    import psycopg

    server = None
    url = os.environ.get("MEMLANE_TEST_PG_URL")
    base = tempfile.mkdtemp(prefix="memlane-bench-pg-")
    if not url:
        import pgserver

        os.chmod(base, 0o755)
        server = pgserver.get_server(base, cleanup_mode="stop")
        url = server.get_uri()
    names = [f"bench_lg_{os.getpid()}_{who}" for who in ("memlane", "langgraph")]
    with psycopg.connect(url, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    try:
        yield tuple(urlunsplit(parts._replace(path="/" + n)) for n in names)  # type: ignore[misc]
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if server is not None:
            server.cleanup()


def _counted(fn: Callable[..., Any], hits: dict[int, int]) -> Callable[..., Any]:
    """``fn`` taking the request's number first, recording how many results each request got."""

    def call(j: int, *args: Any) -> Any:
        out = fn(*args)
        if isinstance(out, list):
            hits[j] = len(out)
        return out

    return call


def run(backend: str, n: int, queries: int, stack: ExitStack, searches_only: bool = False) -> dict[str, Any]:
    rng = random.Random(7)
    index = {"dims": DIMS, "embed": embed, "fields": ["text"]}
    directory = stack.enter_context(tempfile.TemporaryDirectory())
    theirs_index: dict[str, Any] | None = index
    opener: Callable[[], AbstractContextManager[Any]]
    if backend == "sqlite":
        if not sqlite_vec_loads():
            theirs_index = None
        ours = stack.enter_context(MemlaneStore.from_conn_string(os.path.join(directory, "m.db"), index=index))

        def opener() -> AbstractContextManager[Any]:
            return langgraph_sqlite(os.path.join(directory, "lg.db"), theirs_index)
    else:
        from langgraph.store.postgres import PostgresStore

        ours_url, theirs_url = stack.enter_context(postgres_urls())
        ours = stack.enter_context(MemlaneStore.from_conn_string(ours_url, index=index))

        def opener() -> AbstractContextManager[Any]:
            return PostgresStore.from_conn_string(theirs_url, index=index)  # type: ignore[arg-type]

    theirs = stack.enter_context(opener())
    theirs.setup()
    data = [item(i, rng) for i in range(n)]
    for store in (ours, theirs):
        for start in range(0, n, 500):
            store.batch([PutOp(ns, key, value) for ns, key, value in data[start : start + 500]])

    fresh = [item(n + i, rng) for i in range(queries)]
    gets = [(data[rng.randrange(n)][0], data[rng.randrange(n)][1]) for _ in range(queries)]
    gets = [(data[j][0], data[j][1]) for j in (rng.randrange(n) for _ in range(queries))]
    prefixes = [("users", f"u{rng.randrange(NAMESPACES)}") for _ in range(queries)]
    filters = [{"kind": KINDS[rng.randrange(5)], "score": {"$gte": rng.randrange(100)}} for _ in range(queries)]
    texts = [" ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(queries)]

    def subjects(call: Callable[[Any], Callable[..., Any]], args: list[tuple[Any, ...]]) -> dict[str, Any]:
        return {"memlane": (call(ours), args), "langgraph": (call(theirs), args)}

    def batches(tag: str, index: Any) -> list[tuple[list[PutOp]]]:
        """``queries`` batches of ``BATCH`` new items each (one ``batch`` call apiece), keys tagged per subject."""
        return [([PutOp(ns, f"{tag}{b}.{k}", v, index=index) for ns, k, v in fresh[:BATCH]],) for b in range(queries)]

    ops: dict[str, dict[str, Any]] = {
        "put (one new item)": {
            "memlane": (ours.put, [(ns, "o" + k, v) for ns, k, v in fresh]),
            "langgraph": (theirs.put, [(ns, "t" + k, v) for ns, k, v in fresh]),
        },
        f"batch put of {BATCH} new items": {
            "memlane": (ours.batch, batches("ob", None)),
            "langgraph": (theirs.batch, batches("tb", None)),
        },
        f"batch put of {BATCH}, index=False": {
            "memlane": (ours.batch, batches("on", False)),
            "langgraph": (theirs.batch, batches("tn", False)),
        },
        "get": subjects(lambda s: s.get, gets),
        "search, filter": subjects(
            lambda s: lambda p, f: s.search(p, filter=f, limit=10), list(zip(prefixes, filters, strict=True))
        ),
        "search, newest first": subjects(lambda s: lambda p: s.search(p, limit=10), [(p,) for p in prefixes]),
        "list_namespaces": subjects(
            lambda s: lambda p: s.list_namespaces(prefix=p, limit=100), [(("users",),)] * queries
        ),
    }
    vector_args = [(("users",), t) for t in texts]
    # a selective filter over every namespace (kind and score: 1 item in 100), alone and with a query (#37)
    selective = [{"kind": KINDS[s % 5], "score": s} for s in (rng.randrange(100) for _ in range(queries))]
    ops["search, selective filter, all namespaces"] = subjects(
        lambda s: lambda p, f: s.search(p, filter=f, limit=10), [(("users",), f) for f in selective]
    )
    if theirs_index is not None:
        ops["search, vector"] = subjects(lambda s: lambda p, q: s.search(p, query=q, limit=10), vector_args)
        for label, fs in (("filter", filters), ("selective filter", selective)):
            ops[f"search, vector + {label}, all namespaces"] = subjects(
                lambda s: lambda p, q, where: s.search(p, query=q, filter=where, limit=10),
                [(("users",), t, each) for t, each in zip(texts, fs, strict=True)],
            )
    if searches_only:
        ops = {name: subject for name, subject in ops.items() if name.startswith("search")}
    rows = []
    for name, subject in ops.items():
        hits: dict[str, dict[int, int]] = {who: {} for who in subject}
        counted = {
            who: (_counted(fn, hits[who]), [(j, *a) for j, a in enumerate(args)]) for who, (fn, args) in subject.items()
        }
        timed = time_calls_interleaved(counted, rounds=4, warmup=min(20, queries // 10))
        ours_p50 = summarize(timed["memlane"]).p50_us
        theirs_p50 = summarize(timed["langgraph"]).p50_us
        row = {"op": name, "memlane_p50_us": ours_p50, "langgraph_p50_us": theirs_p50}
        if name.startswith("search"):  # the hits of each request: memlane must never find fewer
            ours_hits, theirs_hits = hits["memlane"], hits["langgraph"]
            row["memlane_hits"] = sum(ours_hits.values())
            row["langgraph_hits"] = sum(theirs_hits.values())
            row["memlane_fewer"] = sum(1 for j, h in ours_hits.items() if h < theirs_hits[j])
        rows.append(row)
    if theirs_index is None:
        timed = time_calls_interleaved(
            {"memlane": (lambda p, q: ours.search(p, query=q, limit=10), vector_args)}, rounds=4, warmup=20
        )
        rows.append({"op": "search, vector", "memlane_p50_us": summarize(timed["memlane"]).p50_us})
    return {"backend": backend, "n": n, "queries": queries, "langgraph_vectors": theirs_index is not None, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--searches-only", action="store_true", help="time the searches only (#37's filters)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    results = []
    for backend in ["sqlite", "postgres"] if args.backend == "both" else [args.backend]:
        with ExitStack() as stack:
            result = run(backend, args.n, args.queries, stack, args.searches_only)
        results.append(result)
        table = []
        for row in result["rows"]:
            theirs = row.get("langgraph_p50_us")
            ratio = f"{row['memlane_p50_us'] / theirs:.2f}" if theirs else "n/a"
            found = f"{row['memlane_hits']} / {row['langgraph_hits']}" if "memlane_hits" in row else ""
            fewer = str(row["memlane_fewer"]) if "memlane_fewer" in row else ""
            table.append(
                [row["op"], f"{row['memlane_p50_us']:.0f}", "n/a" if theirs is None else f"{theirs:.0f}", ratio,
                 found, fewer]
            )  # fmt: skip
        title = f"{backend}: {args.n} items, {args.queries} requests per op (p50 us; ratio < 1: memlane faster)"
        print(format_table(["op", "memlane", "langgraph", "ratio", "hits (memlane / langgraph)", "memlane fewer"],
                           table, title=title))  # fmt: skip
        if not result["langgraph_vectors"]:
            print("  LangGraph's SqliteStore: no vector search here (sqlite-vec needs extension loading)")
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_info(), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
