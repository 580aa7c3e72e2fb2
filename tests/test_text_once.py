"""An item's text is stored once: not again when it is the value's own text (issue #13).

The ``text`` column holds NULL when the text is what memlane would derive from the value (the
string itself, or the canonical JSON of any other value), and every read rebuilds it: get, list,
search (lexical index, hydrate), history, export/import, the query space's views and the indexer.
Runs on SQLite and PostgreSQL (``mem`` / ``store_url``), and the round trip over HTTP (``client``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from conformance.indexed import indexed
from memlane.store import _common as c

NS = "t/once"

# (key, value, text given or None, whether the text column may be left empty)
CASES: list[tuple[str, Any, str | None, bool]] = [
    ("s.plain", "plain words zebra", None, True),
    ("s.escapes", 'line\nbreak "quoted" back\\slash\ttab é 😀 quokka ' + "".join(map(chr, range(1, 32))), None, True),
    ("s.nul", "nul\x00inside wombat", None, False),  # the text has a space for the NUL
    ("s.same", "explicit same ibex", "explicit same ibex", True),
    ("s.other", "value okapi", "different text narwhal", False),
    ("s.quoted", "tapir", '"tapir"', False),  # the value's JSON is not a string's own text
    ("s.empty", "", None, True),
    ("o.object", {"b": [1, 2.5], "a": "axolotl"}, None, True),
    ("o.number", 42, None, True),
    ("o.null", None, None, True),
    ("o.explicit", {"a": 1}, "caracal words", False),
    ("o.json_given", [1, "gecko"], '[1,"gecko"]', True),
]


def own_text(value: Any) -> str:
    if isinstance(value, str):
        return value.replace("\x00", " ")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def expected(value: Any, text: str | None) -> str:
    return own_text(value) if text is None else text


def put_cases(mem: Any) -> None:
    for key, value, text, _ in CASES:
        mem.put(NS, key, value, text=text)


def stored_column(mem: Any, table: str = "items") -> dict[str, str | None]:
    with mem.store.session() as s:
        rows = s.rows(f"SELECT key, text FROM {table} WHERE namespace = ?", (NS,))
    return dict(rows)


def test_every_read_sees_the_full_text(mem):
    put_cases(mem)
    want = {key: expected(value, text) for key, value, text, _ in CASES}
    for key, value, _, _ in CASES:
        item = mem.get(NS, key)
        assert (item.value, item.text) == (value, want[key]), key
    assert {i.key: i.text for i in mem.list(NS, limit=100).items} == want
    assert {i.key: i.text for i in mem.get_many([(NS, k) for k in want]) if i} == want
    for key, word in [("s.plain", "zebra"), ("s.escapes", "quokka"), ("s.nul", "wombat"), ("s.same", "ibex"),
                      ("s.other", "narwhal"), ("o.object", "axolotl"), ("o.explicit", "caracal"),
                      ("o.json_given", "gecko")]:  # fmt: skip
        hits = mem.search(word, channels=["lexical"]).hits
        assert [(h.key, h.text) for h in hits] == [(key, want[key])], word
    assert mem.search("okapi", channels=["lexical"]).hits == []  # its text is another
    assert mem.search("tapir", channels=["lexical"]).hits[0].text == '"tapir"'


def test_replaced_versions_keep_their_full_text_in_history(mem):
    put_cases(mem)
    for key, _, _, _ in CASES:
        mem.put(NS, key, "replacement")
    for key, value, text, _ in CASES:
        [old] = mem.history(NS, key)
        assert (old.value, old.text) == (value, expected(value, text)), key
        assert mem.get(NS, key).text == "replacement"
    assert mem.search("zebra", channels=["lexical"]).hits == []  # the index forgot the old text
    assert len(mem.search("replacement", channels=["lexical"], limit=50).hits) == len(CASES)
    mem.delete(NS, "s.plain")
    assert [v.text for v in mem.history(NS, "s.plain")] == ["replacement", "plain words zebra"]


def test_the_query_space_shows_the_full_text(mem):
    put_cases(mem)
    want = {key: expected(value, text) for key, value, text, _ in CASES}
    rows = mem.query("SELECT key, text FROM items WHERE namespace = 't/once'").rows
    assert dict(rows) == want
    matched = mem.query("SELECT key FROM items WHERE text_match(text, 'quokka')").rows
    assert matched == [["s.escapes"]]
    for key, _, _, _ in CASES:
        mem.put(NS, key, "replacement")
    rows = mem.query("SELECT key, text FROM item_history WHERE namespace = 't/once'").rows
    assert dict(rows) == want


@pytest.mark.embedded
def test_the_text_is_stored_only_when_it_is_not_the_values_own(mem):
    put_cases(mem)
    column = stored_column(mem)
    for key, value, text, elided in CASES:
        assert column[key] == (None if elided else expected(value, text)), key
    for key, _, _, _ in CASES:
        mem.put(NS, key, {"replaced": key})
    history = stored_column(mem, "item_history")
    assert {k for k, t in history.items() if t is None} == {k for k, _, _, elided in CASES if elided}
    assert all(t is None for t in stored_column(mem).values())


@pytest.mark.embedded
def test_export_and_import_round_trip_the_text(mem, request, backend, tmp_path):
    put_cases(mem)
    for key, _, _, _ in CASES[:4]:
        mem.put(NS, key, f"second {key}")
    exported = list(mem.export_records())
    texts = {(r["record"], r["key"]): r["text"] for r in exported}
    for key, value, text, _ in CASES[4:]:
        assert texts[("item", key)] == expected(value, text)
    for key, value, text, _ in CASES[:4]:
        assert texts[("version", key)] == expected(value, text)
    if backend == "postgres":
        server = request.getfixturevalue("postgres")
        url = server.create()
        request.addfinalizer(lambda: server.drop(url))
    else:
        url = str(tmp_path / "copy.db")
    with memlane.open(url, embedder=None) as copy:
        assert copy.import_records(exported) == len(exported)
        assert list(copy.export_records()) == exported
        assert copy.import_records(exported) == 0  # idempotent: the stored rows compare equal
        assert stored_column(copy) == stored_column(mem)
        assert stored_column(copy, "item_history") == stored_column(mem, "item_history")
        assert [h.key for h in copy.search("axolotl", channels=["lexical"]).hits] == ["o.object"]
        assert [h.key for h in copy.search("second", channels=["lexical"], limit=10).hits] != []


@pytest.mark.embedded
def test_the_indexer_embeds_the_full_text(mem):
    put_cases(mem)
    indexed(mem)
    mem.store.drop_vectors()
    backlog = {ref: text for ref, _, text in mem.store.vector_backlog(100)}
    want = {expected(value, text) for _, value, text, _ in CASES if expected(value, text)}
    assert set(backlog.values()) == want  # the empty text is no work
    assert mem.store.count_vectors() == (0, len(want))
    assert mem.store.mark_missing() == len(want)
    claimed = mem.store.claim_pending(100, "me", 60.0)
    assert {text for _, _, text, _ in claimed} == want
    mem.store.release_pending("me")
    indexed(mem)
    assert mem.store.count_vectors() == (len(want), 0)
    assert [h.key for h in mem.search("plain words zebra", channels=["vector"], limit=1).hits] == ["s.plain"]


@pytest.mark.background_indexing
def test_background_indexing_finds_items_with_rebuilt_text(mem):
    put_cases(mem)
    indexed(mem)
    assert [h.key for h in mem.search("explicit same ibex", channels=["vector"], limit=1).hits] == ["s.same"]


# -- an existing database ----------------------------------------------------------------------------


def test_a_database_from_before_m010_is_migrated_and_reads_the_same(backend, old_store_url, monkeypatch):
    with memlane.open(old_store_url, embedder="fake", indexing="sync") as old:
        put_cases(old)
        for key, _, _, _ in CASES[:6]:
            old.put(NS, key, f"second {key}")
        old.delete(NS, "o.number")
        assert all(t is not None for t in stored_column(old).values())  # the writers of then
        assert "m010_text_once" not in [m["name"] for m in old.migration_status() if m["applied_at"]]
        before = (
            [old.get(NS, k) for k, _, _, _ in CASES],
            [old.history(NS, k) for k, _, _, _ in CASES],
            list(old.export_records()),
            old.query("SELECT key, text FROM items ORDER BY key").rows,
        )
        stats = old.stats()
    monkeypatch.undo()
    with memlane.open(old_store_url, embedder="fake", indexing="sync") as new:
        assert "m010_text_once" in [m["name"] for m in new.migration_status() if m["applied_at"]]
        after = (
            [new.get(NS, k) for k, _, _, _ in CASES],
            [new.history(NS, k) for k, _, _, _ in CASES],
            list(new.export_records()),
            new.query("SELECT key, text FROM items ORDER BY key").rows,
        )
        assert after == before
        now = new.stats()
        assert (now.active_items, now.history_versions, now.vectors, now.vectors_missing) == (
            stats.active_items, stats.history_versions, stats.vectors, 0,
        )  # fmt: skip
        column = stored_column(new)
        for key, value, text, elided in CASES[6:]:
            if key != "o.number":
                assert column[key] == (None if elided else expected(value, text)), key
        history = stored_column(new, "item_history")
        for key, value, text, elided in CASES[:6]:  # the first versions, now in history
            assert history[key] == (None if elided else expected(value, text)), key
        assert [h.key for h in new.search("axolotl", channels=["lexical"]).hits] == ["o.object"]
        assert [h.key for h in new.search("second", channels=["lexical"], limit=10).hits] != []
        # the index keeps step with writes over the migrated rows
        new.put(NS, "o.object", "now a string kinkajou")
        new.delete(NS, "s.empty")
        new.put(NS, "s.fresh", "fresh pangolin")
        assert new.search("axolotl", channels=["lexical"]).hits == []
        assert [h.key for h in new.search("kinkajou", channels=["lexical"]).hits] == ["o.object"]
        assert [h.key for h in new.search("pangolin", channels=["lexical"]).hits] == ["s.fresh"]
        if backend == "sqlite":
            with new.store.session(write=True) as s:
                s.run("INSERT INTO items_fts (items_fts, rank) VALUES ('integrity-check', 1)")


# -- any value and text ------------------------------------------------------------------------------

_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
_strings = st.text(max_size=40) | st.sampled_from(["", '"', "\\", "\\n", "\\u0000", "a\x00b", "\u2028", "😀"])
_values = st.recursive(
    _scalars | _strings,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def value_and_text(draw: Any) -> tuple[Any, str | None]:
    value = draw(_values)
    own = own_text(value)
    json_text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = draw(st.sampled_from([None, own, json_text, "other"]) | st.text(max_size=20).map(lambda t: t or None))
    return value, None if text is None else text.replace("\x00", "")


@pytest.mark.embedded
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(value_and_text(), min_size=1, max_size=6))
def test_any_value_and_text_round_trip_exactly(mem, backend, pairs):
    records = [{"namespace": "p", "key": f"k{n}", "value": v, "text": t} for n, (v, t) in enumerate(pairs)]
    mem.put_many(records)
    full = c.text_sql(backend, "")
    with mem.store.session() as s:
        rows = {k: (t, f) for k, t, f in s.rows(f"SELECT key, text, {full} FROM items WHERE namespace = 'p'")}
    for rec in records:
        want = expected(rec["value"], rec["text"])
        item = mem.get("p", rec["key"])
        assert (item.value, item.text) == (rec["value"], want)
        stored, rebuilt = rows[rec["key"]]
        assert rebuilt == want  # the SQL the index, views and indexer read gives the same text
        value = rec["value"]
        own = value if isinstance(value, str) else own_text(value)
        assert (stored is None) == (want == own)  # left out exactly when the value rebuilds it
    mem.put_many([{**r, "value": "x", "text": None} for r in records])  # the pairs go to history
    for rec in records:
        assert mem.history("p", rec["key"])[0].text == expected(rec["value"], rec["text"])
