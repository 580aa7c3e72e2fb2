"""Documents keep their chunks with their context: a chunk is found on its title and neighbouring passages
(lexically and by vector), while the hit stays the chunk's own text. On every backend, and on a store made
before migration ``m011_chunk_context``.
"""

from __future__ import annotations

from typing import Any

import pytest

import memlane
from memlane.values import facts_text as t

NS = "team/acme"
# about 300 characters each: a chunk's context holds the passage next to it and a bit of the one beyond,
# not the first words of the first passage nor the last words of the last
_MORE = " and the steps are checked twice" * 8
PASSAGES = [
    "The database is copied to the standby host first" + _MORE + ".",
    "Then traffic moves over during the quiet window" + _MORE + ".",
    "Finally" + _MORE + " before the old primary is retired.",
]


def _passages(mem: Any, query: str) -> list[Any]:
    return mem.claims_and_sources_context(query, namespace_prefix=NS)["passages"]


def test_a_chunk_is_found_by_its_neighbours_and_its_title(mem: Any) -> None:
    doc = mem.add_document(NS, "Zephyr cutover runbook", PASSAGES)
    first, middle, last = doc.chunk_ids
    # "standby" is only in the first passage: the middle one is found on it as context, ranked below
    hits = _passages(mem, "standby")
    lexical = {h.id: h.ranks["lexical"] for h in hits if "lexical" in h.ranks}
    assert set(lexical) == {first, middle}
    assert lexical[first] < lexical[middle]
    # "retired" is only in the last passage: found by the middle one too
    lexical = {h.id: h.ranks["lexical"] for h in _passages(mem, "retired") if "lexical" in h.ranks}
    assert set(lexical) == {last, middle} and lexical[last] < lexical[middle]
    # a title word finds every chunk of the document; each hit is its chunk's own text, nothing added
    hits = _passages(mem, "zephyr")
    assert {h.id for h in hits if "lexical" in h.ranks} == set(doc.chunk_ids)
    assert {h.id: h.text for h in hits} == dict(zip(doc.chunk_ids, PASSAGES, strict=True))
    assert all(h.document_title == "Zephyr cutover runbook" for h in hits)
    # lookup and neighbours read the chunk alone too
    assert [c.text for c in mem.lookup(list(doc.chunk_ids))] == PASSAGES
    assert [c.text for c in mem.neighbours(middle, 1, 1)] == PASSAGES


def test_the_context_is_bounded_so_far_words_of_a_long_neighbour_do_not_reach(mem: Any) -> None:
    far = "Quokka " + "filler " * 300  # 2,107 characters: its first word lies far from the next chunk
    doc = mem.add_document(NS, "notes", [far + "nearword.", "The second passage."], chunk_chars=5000)
    lexical = {h.id for h in _passages(mem, "nearword") if "lexical" in h.ranks}
    assert lexical == set(doc.chunk_ids)  # the end of the long neighbour is context
    lexical = {h.id for h in _passages(mem, "quokka") if "lexical" in h.ranks}
    assert lexical == {doc.chunk_ids[0]}  # its start is not


def test_a_chunk_is_found_by_vector_on_its_title(mem: Any) -> None:
    # with the fake embedder, texts sharing words are near: chunks whose own words say nothing of the query
    # are nearer it than another document's chunk when their title holds its words
    doc = mem.add_document(NS, "Zephyr cutover runbook", ["one", "two"])
    other = mem.add_document(NS, "Quasar notes", ["three"])
    hits = _passages(mem, "zephyr cutover runbook")
    vector = {h.id: h.ranks["vector"] for h in hits if "vector" in h.ranks}
    assert max(vector[c] for c in doc.chunk_ids) < vector.get(other.chunk_ids[0], 99)
    assert {h.id: h.text for h in hits if h.id in doc.chunk_ids} == dict(
        zip(doc.chunk_ids, ["one", "two"], strict=True)
    )


def test_context_text() -> None:
    assert t.context("T", ["a", "b", "c"], 1) == "T\na\nc"
    assert t.context("T", ["a", "b"], 0) == "T\n\nb"
    assert t.context("T", ["a"], 0) == "T\n\n"
    # several short neighbours fill a side, nearest first, kept in document order
    assert t.context("T", ["p1", "p2", "p3", "x", "n1", "n2"], 3, budget=5) == "T\np2 p3\nn1 n2"
    # a long one is cut at a word boundary on the side nearest the chunk
    long = " ".join(f"w{i}" for i in range(1000))
    ctx = t.context("T", [long, "x", long], 1, budget=50)
    _, before, after = ctx.split("\n")
    assert before.endswith("w999") and after.startswith("w0 ") and len(before) <= 50 and len(after) <= 50
    assert before.split()[0] in long.split() and after.split()[-1] in long.split()  # whole words
    assert len(t.context("T", [long] * 3, 1)) <= 1 + 2 * t.CONTEXT_CHARS + 2
    # a vector is made from the title, the chunk and VECTOR_CONTEXT_CHARS of the neighbours nearest it
    assert t.embedded("chunk", "Title\nbefore\nafter", budget=100) == "Title\nchunk\nbefore\nafter"
    assert t.embedded("chunk", "Title\nsaid before\nsaid after", budget=6) == "Title\nchunk\nbefore\nsaid"
    assert t.embedded("chunk", "Title\nbefore\nafter", budget=0) == "Title\nchunk"
    assert t.embedded("chunk", "Title\n\n") == "Title\nchunk"
    assert t.embedded("chunk", None) == "chunk"


@pytest.mark.embedded
def test_vectors_and_embed_missing_use_the_context(mem: Any) -> None:
    doc = mem.add_document(NS, "runbook", PASSAGES)
    with mem.store.session() as s:
        rows = s.rows("SELECT id, text, context FROM chunks ORDER BY position")
        before = dict(s.rows("SELECT ref, vector FROM graph_vectors WHERE kind = 'chunk'"))
    assert [r[0] for r in rows] == doc.chunk_ids and [r[2] for r in rows] == [
        t.context("runbook", PASSAGES, i) for i in range(3)
    ]
    wanted = mem._embed([t.embedded(text, ctx) for _, text, ctx in rows])
    assert [bytes(before[r[0]]) for r in rows] == [bytes(b) for b in wanted]
    with mem.store.session(write=True) as s:
        s.run("DELETE FROM graph_vectors WHERE kind = 'chunk'")
    assert mem.reindex() == 3
    with mem.store.session() as s:
        after = dict(s.rows("SELECT ref, vector FROM graph_vectors WHERE kind = 'chunk'"))
    assert {k: bytes(v) for k, v in after.items()} == {k: bytes(v) for k, v in before.items()}


@pytest.mark.embedded  # the client exports items only
def test_export_carries_the_context_and_an_older_export_imports_without_it(mem: Any, tmp_path: Any) -> None:
    doc = mem.add_document(NS, "runbook", PASSAGES)
    exported = list(mem.export_records())
    chunks = sorted((r for r in exported if r["record"] == "chunk"), key=lambda r: r["position"])
    assert [r["context"] for r in chunks] == [t.context("runbook", PASSAGES, i) for i in range(3)]
    with memlane.open(str(tmp_path / "copy.db"), embedder=None) as copy:
        copy.import_records(exported)
        assert list(copy.export_records()) == exported
        assert {h.id for h in _passages(copy, "standby")} == set(doc.chunk_ids[:2])
    # an export written before chunks had a context: imported as it was, found on its own words only
    older = [{k: v for k, v in r.items() if k != "context"} for r in exported]
    with memlane.open(str(tmp_path / "older.db"), embedder=None) as copy:
        copy.import_records(older)
        assert [r.get("context") for r in copy.export_records() if r["record"] == "chunk"] == [None] * 3
        hits = _passages(copy, "standby")
        assert [(h.id, h.text) for h in hits] == [(doc.chunk_ids[0], PASSAGES[0])]


# the chunks' schema as it was before m011_chunk_context: no context column, text alone indexed
_OLD_SCHEMA = {
    "sqlite": [
        "DROP TABLE chunk_fts",
        "CREATE VIRTUAL TABLE chunk_fts USING fts5(text, ref UNINDEXED, namespace UNINDEXED, "
        "tokenize = 'porter unicode61')",
        "INSERT INTO chunk_fts (ref, namespace, text) SELECT id, namespace, text FROM chunks",
        "ALTER TABLE chunks DROP COLUMN context",
        "DELETE FROM _memlane_migrations WHERE name = 'm011_chunk_context'",
        "DELETE FROM meta WHERE name = 'chunk_context'",
    ],
    "postgres": [
        "DROP INDEX chunks_tsv",
        "ALTER TABLE chunks DROP COLUMN tsv",
        "ALTER TABLE chunks DROP COLUMN context",
        "ALTER TABLE chunks ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('memlane'::regconfig, text)) "
        "STORED",
        "CREATE INDEX chunks_tsv ON chunks USING gin (tsv)",
        "DELETE FROM _memlane_migrations WHERE name = 'm011_chunk_context'",
        "DELETE FROM meta WHERE name = 'chunk_context'",
    ],
}


def test_a_store_made_before_the_migration_opens_and_searches(backend: str, store_url: str) -> None:
    with memlane.open(store_url, embedder=None) as before:
        old = before.add_document(NS, "Zephyr cutover runbook", PASSAGES)
        with before.store.session(write=True) as s:
            for statement in _OLD_SCHEMA[backend]:
                s.conn.execute(statement)
    with memlane.open(store_url, embedder="fake") as after:
        assert "m011_chunk_context" in [m["name"] for m in after.migration_status() if m["applied_at"]]
        # the first open after the migration gave the old chunks their context, once: found by the title now
        assert [(h.id, h.text) for h in _passages(after, "standby") if "lexical" in h.ranks][0] == (
            old.chunk_ids[0],
            PASSAGES[0],
        )
        assert {h.id for h in _passages(after, "zephyr") if "lexical" in h.ranks} == set(old.chunk_ids)
        assert after.store.get_meta("chunk_context") == "complete"
        assert after._facts.backfill_context() == 0  # recorded as done
        assert after.reindex() == 3
        assert {h.id for h in _passages(after, "standby") if "vector" in h.ranks} >= {old.chunk_ids[0]}
        # a document added after the migration is found with its context
        new = after.add_document(NS, "Quasar runbook", ["Keep the pager on.", "Call the vendor."])
        assert {h.id for h in _passages(after, "quasar") if "lexical" in h.ranks} == set(new.chunk_ids)
        assert {h.id for h in _passages(after, "pager") if "lexical" in h.ranks} == set(new.chunk_ids)
        exported = [r for r in after.export_records() if r["record"] == "chunk"]
        assert [r["context"] is None for r in exported] == [False] * 5
