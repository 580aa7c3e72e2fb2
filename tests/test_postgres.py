"""PostgreSQL-only behaviour: pgvector presence, concurrent processes, migrations, URLs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import memlane
from memlane import BackendUnavailableError, StoreError
from memlane.store import _common as c
from memlane.store import postgres as pg
from memlane.store import sqlite as lite


@pytest.fixture
def pg_url(postgres):  # type: ignore[no-untyped-def]
    url = postgres.create()
    yield url
    postgres.drop(url)


def test_migration_names_match_sqlite(pg_url):
    assert [name for name, _ in pg.MIGRATIONS] == [name for name, _ in lite.MIGRATIONS]
    with memlane.open(pg_url, embedder=None) as mem:
        applied = [name for name, _ in mem.store.migrations()]  # type: ignore[attr-defined]
        assert applied == [name for name, _ in lite.MIGRATIONS]


def test_vector_search_uses_an_hnsw_index(pg_url, postgres):
    with memlane.open(pg_url, embedder="fake") as mem:
        mem.put_many([{"namespace": "a", "key": f"k{i}", "value": f"note number {i}"} for i in range(50)])
        assert mem.wait_indexed(60)
        assert mem.search("note number 7", channels=["vector"]).hits
    import psycopg

    with psycopg.connect(pg_url) as conn:
        names = [r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'item_vectors'")]
    assert "item_vectors_hnsw_64" in names


def test_database_without_pgvector_works_except_the_vector_channel(postgres):
    postgres.execute("DO $$ BEGIN CREATE ROLE memlane_plain LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    url = postgres.create(owner="memlane_plain")
    parts = urlsplit(url)
    plain = urlunsplit(parts._replace(netloc=parts.netloc.replace("postgres:", "memlane_plain:", 1)))
    try:
        with memlane.open(plain, embedder="fake") as mem:
            mem.put("a", "k", "orchids need humid air")  # vectors are still stored, as bytea
            assert mem.get("a", "k").value == "orchids need humid air"
            assert [h.key for h in mem.search("orchids", channels=["lexical"]).hits] == ["k"]
            with pytest.raises(BackendUnavailableError, match="pgvector"):
                mem.search("orchids", channels=["vector"])
            # the facts layer keeps its vectors as bytea and ranks them in process: all of it works
            kim = mem.add_entity("a", "Kim")
            mem.add_claim("a", "Kim grows orchids", about=[kim.id])
            said = mem.claims_and_sources_context("orchids")
            assert said["claims"][0].text == "Kim grows orchids" and said.counts["claims_vector"] == 1
    finally:
        postgres.drop(url)


WRITER = """
import sys, memlane
url, tag = sys.argv[1], sys.argv[2]
with memlane.open(url, embedder=None) as mem:
    for i in range(500):
        mem.put(("writer", tag), f"item.{i}", {"i": i})
        mem.put("shared", "counter", {"by": tag, "i": i})
"""


def test_processes_writing_through_separate_pools_lose_nothing(pg_url):
    memlane.open(pg_url, embedder=None).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(WRITER), pg_url, tag], stderr=subprocess.PIPE, text=True
        )
        for tag in ("a", "b", "c")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    with memlane.open(pg_url, embedder=None) as mem:
        for tag in ("a", "b", "c"):
            assert len(mem.list(("writer", tag), limit=1000).items) == 500
        shared = mem.get("shared", "counter")
        history = mem.history("shared", "counter")
        # 1,500 writes to one address: one live version and 1,499 in history, numbered without gaps
        assert shared.version == 1500 and len(history) == 1499
        assert sorted(v.version for v in history) == list(range(1, 1500))


def test_location_hides_the_password():
    assert pg.redact("postgresql://me:s3cret@db:5432/x") == "postgresql://me:***@db:5432/x"
    with pytest.raises(StoreError) as e:
        memlane.open("postgresql://me:s3cret@127.0.0.1:1/nothing?connect_timeout=1")
    assert "s3cret" not in str(e.value)


def test_cli_export_from_sqlite_import_into_postgres_and_back(tmp_path, pg_url, monkeypatch):
    from typer.testing import CliRunner

    from memlane import cli

    monkeypatch.setenv("MEMLANE_EMBEDDER", "fake")
    runner = CliRunner()
    lite_db, back_db = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    with memlane.open(lite_db) as mem:
        mem.put("user/1", "preferences.ui.theme", "dark", metadata={"m": 1})
        mem.put("user/1", "preferences.ui.theme", {"mode": "light"})
        mem.put("room/x", None, "a note about the billing cutover", ttl=3600)
        mem.put("room/x", "gone", 3.12)
        mem.delete("room/x", "gone")
        kim = mem.add_entity("room/x", "Kim", aliases=["K"])
        billing = mem.add_entity("room/x", "Billing")
        mem.retract_fact(mem.assert_fact("room/x", kim.id, "owns", billing.id, source="n1").id)
        doc = mem.add_document("room/x", "notes", ["Kim: cutover in April."])
        mem.add_claim("room/x", "The cutover is in April", speaker="Kim", chunk=doc.chunk_ids[0], about=[billing.id])
    first, second, third = (str(tmp_path / f"{n}.jsonl") for n in ("1", "2", "3"))
    steps = [
        ["export", first, "--db", lite_db],
        ["import", first, "--db", pg_url],
        ["export", second, "--db", pg_url],
        ["import", second, "--db", back_db],
        ["export", third, "--db", back_db],
    ]
    for args in steps:
        result = runner.invoke(cli.app, args)
        assert result.exit_code == 0, (args, result.output)
    text = open(first).read()
    assert text == open(second).read() == open(third).read()
    with memlane.open(pg_url) as mem:
        assert mem.stats().vectors == 2  # recomputed on import
        assert mem.search("billing cutover").hits[0].value == "a note about the billing cutover"
        assert mem.resolve_entity("K").status == "resolved"
        said = mem.claims_and_sources_context("cutover", entity_ids=[billing.id])
        assert said["claims"][0].claims[0].chunk_id == doc.chunk_ids[0] and said.counts["claims_vector"] == 1


def _reference_lexical(url: str, terms: list[str], within: list[tuple[str, ...]], k: int) -> list[tuple[str, float]]:
    """The ranking spelled out step by step (one count per lexeme), as memlane did before it was one statement.

    ``within`` is a list of namespace prefixes (``[()]``: everything), spelled out as OR-ed ranges.
    """
    import math

    import psycopg

    prefix = () if any(not p for p in within) else within
    scope, scope_params = "", []
    if prefix:
        ranges = []
        for p in within:
            ns = "/".join(p)
            ranges.append("(namespace = %s OR (namespace >= %s AND namespace < %s))")
            scope_params += [ns, ns + "/", ns + "0"]
        scope = " AND (" + " OR ".join(ranges) + ")"
    with psycopg.connect(url, autocommit=True) as conn:
        words = sorted(
            {r[0] for r in conn.execute("SELECT lexeme FROM unnest(to_tsvector('memlane', %s))", (" ".join(terms),))}
        )
        if prefix:
            total = conn.execute("SELECT count(*) FROM items WHERE true" + scope, scope_params).fetchone()[0]
        else:
            total = conn.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = 'items'::regclass").fetchone()[0]
            if total < 1:
                total = conn.execute("SELECT count(*) FROM items").fetchone()[0]
        weights = {}
        for w in words:
            n = conn.execute(
                "SELECT count(*) FROM items WHERE tsv @@ to_tsquery('simple', quote_literal(%s))" + scope,
                (w, *scope_params),
            ).fetchone()[0]
            if n:
                weights[w] = math.log(1 + (max(total, n) - n + 0.5) / (n + 0.5))
        if not weights:
            return []
        # address words (label C) weigh 0.25 against the text's 1 (store.postgres.ADDRESS_WEIGHT)
        rank = "ts_rank('{1, 0.25, 1, 1}', tsv, to_tsquery('simple', quote_literal(%s)), 1)"
        score = " + ".join([f"%s * {rank}"] * len(weights))
        rows = conn.execute(
            f"SELECT id, {score} AS s FROM items WHERE tsv @@ to_tsquery('simple', %s){scope} "
            "ORDER BY s DESC, ref LIMIT %s",
            (
                *[x for w, idf in weights.items() for x in (idf, w)],
                " | ".join(f"'{w}'" for w in weights),
                *scope_params,
                k,
            ),
        ).fetchall()
    return [(ref, float(s)) for ref, s in rows]


def test_lexical_ranking_is_one_statement_with_per_scope_idf(pg_url, clock):
    """The one-statement ranking gives the step-by-step ranking's order and scores, per scope."""
    import random

    rng = random.Random(7)
    vocab = "orchid humid greenhouse billing cutover friday migration schema index vector ranking agent".split()
    rare = [f"rare{i}" for i in range(40)]
    records = []
    for i in range(120):
        words = rng.choices(vocab, k=rng.randint(3, 12)) + rng.sample(rare, k=2)
        if i % 10 == 0:  # long texts: their tsvectors are stored out of line (TOAST)
            words += [f"filler{j}x{i}" for j in range(600)]
        ns = ("team", "a") if i % 3 == 0 else ("team", "b") if i % 3 == 1 else ("other",)
        records.append({"namespace": ns, "key": f"note.{i}", "value": " ".join(words)})
    with memlane.open(pg_url, embedder=None, clock=clock) as mem:
        mem.put_many(records)
        mem.put(("team", "a"), "gone", "orchid billing orchid", ttl=60)  # expired rows still count in IDF
        clock.advance(120)
        store = mem.store
        queries = [["orchid"], ["orchid", "billing"], ["rare3", "agent", "humid"], ["rare7"], vocab, ["nothing"]]
        for terms in queries:
            scopes = [[()], [("team",)], [("team", "a")], [("other",)], [("none",)], [("team", "a"), ("other",)]]
            for within in scopes:
                got = store.lexical(terms, within, 15)
                want = _reference_lexical(pg_url, terms, within, 15)
                assert [r for r, _, _ in got] == [r for r, _ in want], (terms, within)
                assert [s for _, s, _ in got] == pytest.approx([s for _, s in want], rel=1e-6), (terms, within)
        # the rare word wins over common ones, and scope changes IDF: 'orchid' is rarer in team/a
        hit = mem.search("rare5 orchid", channels=["lexical"], limit=1).hits[0]
        assert "rare5" in hit.value
        # words that are no lexemes, quotes, backslashes and tsquery syntax are data, never errors
        assert store.lexical(["_", "!"], [()], 10) == []
        # ("a" and "b" would now match the address words of team/a and team/b)
        assert store.lexical(["o'brien", "q\\w", "x|y", "(z", "&", "'"], [()], 10) == []


def test_lexical_setting_does_not_leak_into_the_pool(pg_url):
    """The ranking statement's planner settings end with it; they never stay on a connection."""
    store = pg.PostgresStore(pg_url, min_size=1, max_size=1)
    try:
        assert store.lexical(["anything"], [("a",)], 5) == []
        assert store.document_counts(["anything"], [("a",)], 5) == (0, {"anything": 0})
        with store._read() as reader, store._conn() as pooled:  # lexical ran on one of these two
            # the read connection's own setting (it plans its point reads and listings once), never the ranking's
            for conn, plans in ((reader, "force_generic_plan"), (pooled, "auto")):
                assert conn.execute("SHOW enable_seqscan").fetchone()[0] == "on"
                assert conn.execute("SHOW plan_cache_mode").fetchone()[0] == plans
                assert conn.info.transaction_status == 0  # idle: the implicit transaction ended
    finally:
        store.close()


def test_lexical_skips_the_index_scan_of_a_word_in_nearly_every_row(pg_url, monkeypatch):
    """A GIN scan reads every posting of its word before LIMIT applies; a word in >= 90 % of the rows is not
    scanned while the query has a rarer one, and the ranking of the rows holding the rarer word stays."""
    monkeypatch.setattr(pg, "LEXICAL_CAP", 5)
    with memlane.open(pg_url, embedder=None) as mem:
        mem.put_many([{"namespace": "n", "key": f"k{i}", "value": f"value {i} text"} for i in range(60)])
        mem.put("n", "other", "something else entirely")
        store = mem.store
        with store._conn() as conn:
            conn.execute("ANALYZE items")

        def index_scans(terms: list[str]) -> int:
            """How many times the statement ran the per-word scan of the items (the ``capped`` lateral)."""
            params = {"text": " ".join(terms), "k": 3, "cap": 5, "common": pg.COMMON_SHARE}
            with store._conn() as conn:
                (plan,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + pg._LEXICAL_ALL, params).fetchone()
            (capped,) = [n for n in plan[0]["Plan"]["Plans"] if n.get("Subplan Name") == "CTE capped"]
            (scan,) = [n for n in capped["Plans"] if n["Parent Relationship"] == "Inner"]
            return int(scan["Actual Loops"])

        assert index_scans(["value", "17", "text"]) == 1  # only the rare word's postings are read
        assert index_scans(["value", "text"]) == 2  # nothing rarer: both are scanned (bounded by the cap)
        top = store.lexical(["value", "17", "text"], [("n",)], 3)
        assert [r for r, _, _ in top] == [mem.get("n", "k17").id]
        assert len(store.lexical(["value", "text"], [()], 3)) == 3


def test_lexical_finds_the_rows_of_a_scope_of_several_prefixes_through_their_index(pg_url):
    """An agent's namespace and its rooms: a word common in the table is tested on the scope's rows, which the
    (namespace, key) index finds, one range a prefix. Found through the prefix sets, the scope's rows were the
    whole table's (the full-text index read as a list of every row: 180 ms at 100,000 rows for 450 in scope)."""
    with memlane.open(pg_url, embedder=None) as mem:
        mem.put_many(
            [
                {"namespace": f"n{i % 6}", "key": f"k{i}", "value": f"value {i} text {'odd' * (i % 2)}"}
                for i in range(180)
            ]
        )
        store = mem.store
        with store._conn() as conn:
            conn.execute("ANALYZE items")
        within = [("n1",), ("n4",)]
        params: dict[str, Any] = {"text": "value text", "k": 5, "cap": pg.LEXICAL_CAP, "common": pg.COMMON_SHARE}
        for i, prefix in enumerate(within):
            params.update(zip((f"r{i}", f"r{i}_lo", f"r{i}_hi"), c.ns_range(prefix), strict=True))
        with store._conn() as conn, conn.transaction():
            conn.execute(pg._LEXICAL_SETTINGS)
            (plan,) = conn.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + pg._lexical_in_prefixes((), len(within)), params
            ).fetchone()
        gin = []

        def walk(node: Any) -> None:
            if node.get("Index Name") == "items_tsv" and node.get("Actual Loops", 0):
                gin.append(node)
            for child in node.get("Plans", []):
                walk(child)

        walk(plan[0]["Plan"])
        assert gin == []  # 60 rows in scope, 180 postings a word: row by row, never the postings or every row
        for terms in (["value", "text"], ["value", "17", "text"], ["odd", "text"]):
            got = store.lexical(terms, within, 15)
            want = _reference_lexical(pg_url, terms, within, 15)
            assert [r for r, _, _ in got] == [r for r, _ in want], terms
            assert [s for _, s, _ in got] == pytest.approx([s for _, s in want], rel=1e-6), terms


def test_an_empty_batch_of_vectors_changes_nothing(pg_url):
    with memlane.open(pg_url, embedder=None) as mem:
        store = mem.store
        assert store.put_vectors([]) == 0
        mem.put("n", "k", "text")
        assert store.put_vectors([]) == 0 and mem.get("n", "k") is not None


def test_lexical_reads_a_small_scope_row_by_row_for_a_word_common_in_the_table(pg_url):
    """A scope smaller than the cap, a word with more postings in the table than the scope has rows: the scope's
    rows are tested one by one (never the whole posting list), and the ranking is the reference's."""
    with memlane.open(pg_url, embedder=None) as mem:
        mem.put_many(
            [
                {"namespace": f"n{i % 3}", "key": f"k{i}", "value": f"value {i} text {'odd' * (i % 2)}"}
                for i in range(90)
            ]
        )
        store = mem.store
        with store._conn() as conn:
            conn.execute("ANALYZE items")

        def scans(terms: list[str], within: tuple[str, ...]) -> dict[str, int]:
            """How often each way of finding a word's rows ran: the GIN index, or the scope's rows one by one."""
            params = {"text": " ".join(terms), "k": 5, "cap": pg.LEXICAL_CAP, "common": pg.COMMON_SHARE}
            params.update(zip(("ns", "ns_lo", "ns_hi"), c.ns_range(within), strict=True))
            with store._conn() as conn:
                (plan,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + pg._LEXICAL_IN_PREFIX, params).fetchone()
            found = {"gin": 0, "row by row": 0}

            def walk(node: Any) -> None:
                loops = int(node.get("Actual Loops", 0))
                if node.get("Index Name") == "items_tsv":
                    found["gin"] += loops
                if "''::tsvector" in str(node.get("Filter", "")) and node.get("Actual Rows", 0):
                    found["row by row"] += loops
                for child in node.get("Plans", []):
                    walk(child)

            walk(plan[0]["Plan"])
            return found

        # 30 rows in scope, 3,000 postings for each word: both words are read row by row, never by their postings
        assert scans(["value", "text"], ("n1",)) == {"gin": 0, "row by row": 2}
        for terms in (["value", "text"], ["value", "17", "text"], ["odd", "text"]):
            for within in ([("n1",)], [("n2",)]):
                got = store.lexical(terms, within, 15)
                want = _reference_lexical(pg_url, terms, within, 15)
                assert [r for r, _, _ in got] == [r for r, _ in want], (terms, within)
                assert [s for _, s, _ in got] == pytest.approx([s for _, s in want], rel=1e-6), (terms, within)


@pytest.mark.parametrize("read", ["lexical", "document_counts"])
def test_a_scope_too_large_for_one_pipeline_message_is_read_in_a_transaction(pg_url: str, read: str) -> None:
    """psycopg's pipeline can wait forever on a message larger than the socket's buffer (psycopg#685): the
    statements of a search over 50,000 long room prefixes (about 1 MB each) must answer, and answer right.
    In a process of its own, so that a hang fails this test instead of holding the suite."""
    script = textwrap.dedent(
        f"""
        import memlane
        from memlane.store.base import EVERYTHING

        with memlane.open({pg_url!r}, embedder=None) as mem:
            mem.put("room/r00007-abcdefgh", "k", "zebra crossing")
            mem.put("elsewhere", "k", "zebra")
            within = [("room", f"r{{i:05d}}-abcdefgh") for i in range(50_000)]
            if {read!r} == "lexical":
                found = [n[0] for n in mem.store.lexical(["zebra"], within, 10)]
                assert found == [mem.get("room/r00007-abcdefgh", "k").id], found
            else:
                counts = mem.store.document_counts(["zebra"], within, 100)
                assert counts == (1, {{"zebra": 1}}), counts
            assert mem.store.document_counts(["zebra"], EVERYTHING, 100) == (2, {{"zebra": 2}})
        print("answered")
        """
    )
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{read} over a large scope never answered")
    assert done.returncode == 0 and done.stdout.strip() == "answered", done.stderr


def test_ids_are_indexed_whole_and_a_partial_index_from_m013_is_made_whole(pg_url: str) -> None:
    """Every read by id (the query space's WHERE id = ..., an import's check) uses the unique index on ids,
    whatever the row's index=False; a store whose first m013 made the index partial has it whole again."""
    import psycopg

    def plan(mem: Any) -> str:
        with psycopg.connect(pg_url) as conn:
            conn.execute("SET enable_seqscan = off")  # a small table: ask whether the index can serve at all
            rows = conn.execute("EXPLAIN SELECT * FROM items WHERE id = %s", (mem.get("a", "off").id,)).fetchall()
        return "\n".join(r[0] for r in rows)

    with memlane.open(pg_url, embedder=None) as mem:
        mem.put("a", "off", 1, index=False)
        assert "items_id" in plan(mem)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP INDEX items_id")
            conn.execute("CREATE UNIQUE INDEX items_id ON items (id) WHERE indexed")
        assert "items_id" not in plan(mem)
    with memlane.open(pg_url, embedder=None) as mem:
        assert "items_id" in plan(mem)


def test_marks_in_a_scope_are_counted_through_the_scopes_ranges(pg_url: str) -> None:
    """A small scope's waiting marks, counted from its index ranges (planned for their values): look-alike
    namespaces (``a-b``, ``a0`` beside ``a``) left out, a larger scope and everything counted as before."""
    namespaces = [("a",), ("a", "x"), ("a-b",), ("a0",), ("b",), ("b", "a")] + [(f"r{i}",) for i in range(20)]
    with memlane.open(pg_url, embedder="fake", indexing="external") as mem:  # marks stay
        mem.put_many(
            [
                {"namespace": ns, "key": f"k{i}", "value": f"note {i}", "index": i % 3 != 0}  # a third: no mark
                for ns in namespaces
                for i in range(6)
            ]
        )
        big = [(f"r{i}",) for i in range(20)]  # past the small-scope line: the prefix sets
        for scope in ([("a",)], [("a", "x")], [("a-b",), ("b",)], [("a0",), ("b", "a"), ("c",)], big, [()]):
            inside = [ns for ns in namespaces if any(ns[: len(p)] == p for p in scope)]
            assert mem.store.count_pending(scope) == 4 * len(inside), scope
