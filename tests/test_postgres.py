"""PostgreSQL-only behaviour: pgvector presence, concurrent processes, migrations, URLs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from urllib.parse import urlsplit, urlunsplit

import pytest

import memlane
from memlane import BackendUnavailableError, StoreError
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
