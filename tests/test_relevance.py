"""Relevance you can act on: hits say why they are there, a floor drops the unsupported, keys are words.

Real stores on every backend (the ``mem`` fixture: SQLite, PostgreSQL, HTTP
client), the fake embedder (its noise level is ``relevance.NOISE["fake"]``).
"""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane.errors import ValidationError
from memlane.search import relevance

SLOW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _texts(env: Any) -> list[str]:
    return [h.text for h in env.hits]


def test_each_hit_says_which_words_matched_and_its_similarity(mem: Any) -> None:
    mem.put("notes", "trip", "Travelling to Lisbon in May")
    mem.put("notes", "tea", "Green tea every morning")
    env = mem.search("when is the Lisbon trip?")
    (hit,) = env.hits
    assert hit.key == "trip"
    assert hit.matched == ["lisbon", "trip"]  # "trip" is the key
    assert hit.similarity == pytest.approx(hit.channel_scores["vector"])
    assert 0 < hit.similarity <= 1
    as_json = env.to_dict()["hits"][0]
    assert as_json["matched"] == ["lisbon", "trip"] and as_json["similarity"] == pytest.approx(hit.similarity)
    lexical = mem.search("lisbon", channels=["lexical"])
    assert lexical.hits[0].similarity is None and lexical.hits[0].matched == ["lisbon"]


def test_nothing_relevant_is_an_empty_answer_that_says_so(mem: Any) -> None:
    mem.put("prefs", "mode", "dark")
    env = mem.search("billing migration")
    assert env.hits == []
    assert env.below_floor == 1
    assert any("nothing relevant" in n for n in env.notes)
    assert env.to_dict()["below_floor"] == 1
    off = mem.search("billing migration", floor=False)
    assert _texts(off) == ["dark"] and off.below_floor == 0
    assert off.params["floor"] is False
    recalled = mem.recall("billing migration")
    assert recalled.hits == [] and recalled.below_floor == 1
    assert _texts(mem.recall("billing migration", floor=False)) == ["dark"]


def test_one_common_word_is_not_support(mem: Any) -> None:
    for key, text in [
        ("p1", "User prefers short answers"),
        ("p2", "User drinks green tea"),
        ("p3", "User works at a bakery"),
        ("p4", "Travelling to Lisbon next week"),
    ]:
        mem.put("prefs", key, text)
    env = mem.search("where is the user travelling?")
    assert _texts(env) == ["Travelling to Lisbon next week"]
    assert env.below_floor == 3
    # without the floor the common word brings them all back
    assert len(mem.search("where is the user travelling?", floor=False).hits) == 4
    # a query of that one word is fully answered by it
    assert len(mem.search("user", channels=["lexical"]).hits) == 3


def test_stop_words_alone_are_not_support(mem: Any) -> None:
    mem.put("a", "k1", "it is what it is")
    mem.put("a", "k2", "Lisbon in spring")
    env = mem.search("what about the budget review")
    assert env.hits == [] and env.below_floor == 2
    # shared stop words are not searched words: the vector channel found them, below its noise level
    off = mem.search("what about the budget review", floor=False)
    assert [h.matched for h in off.hits] == [[], []]
    assert all(h.similarity is not None and h.similarity < relevance.NOISE["fake"] for h in off.hits)
    # a query of stop words only searches them, and they answer it
    assert _texts(mem.search("what is it", channels=["lexical"])) == ["it is what it is"]


def test_min_score_drops_low_fused_scores(mem: Any) -> None:
    for i in range(5):
        mem.put("a", f"k{i}", f"lisbon note {i}" + " padding" * i)
    everything = mem.search("lisbon note", floor=False)
    cut = everything.hits[2].score
    env = mem.search("lisbon note", floor=False, min_score=cut)
    assert [h.key for h in env.hits] == [h.key for h in everything.hits[:3]]
    assert env.below_floor == 2
    with pytest.raises(ValidationError):
        mem.search("lisbon", min_score="high")


def test_keys_and_namespaces_are_searchable_words(mem: Any) -> None:
    mem.put("users/u1", "preferences.ui.theme", "dark")
    mem.put("users/u1", "profile.name", "Ada")
    assert [h.key for h in mem.search("theme", channels=["lexical"]).hits] == ["preferences.ui.theme"]
    assert [h.key for h in mem.search("ui theme", channels=["lexical"]).hits] == ["preferences.ui.theme"]
    assert mem.search("ui theme").hits[0].matched == ["ui", "theme"]
    # a namespace segment is a word too
    assert {h.key for h in mem.search("u1", channels=["lexical"]).hits} == {"preferences.ui.theme", "profile.name"}


def test_text_matches_rank_above_address_matches(mem: Any) -> None:
    mem.put("settings", "display.theme", "dark with blue accents")
    mem.put("notes", "n1", "the theme of the party is pirates")
    hits = mem.search("theme", channels=["lexical"]).hits
    assert [h.key for h in hits] == ["n1", "display.theme"]


# the lexical index as it was before m009_lexical_address (text only)
_OLD_INDEX = {
    "sqlite": [
        "DROP TRIGGER items_fts_delete",
        "DROP TRIGGER items_fts_update",
        "DROP TABLE items_fts",
        "DROP VIEW items_lexical",
        "CREATE VIRTUAL TABLE items_fts USING fts5(text, content='items', content_rowid='rowid', "
        "tokenize='porter unicode61 remove_diacritics 2')",
        "CREATE TRIGGER items_fts_delete AFTER DELETE ON items BEGIN "
        "INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', old.rowid, old.text); END",
        "CREATE TRIGGER items_fts_update AFTER UPDATE OF text ON items WHEN old.text IS NOT new.text BEGIN "
        "INSERT INTO items_fts (items_fts, rowid, text) VALUES ('delete', old.rowid, old.text); "
        "INSERT INTO items_fts (rowid, text) VALUES (new.rowid, new.text); END",
        "INSERT INTO items_fts (items_fts) VALUES ('rebuild')",
        "DELETE FROM _memlane_migrations WHERE name = 'm009_lexical_address'",
    ],
    "postgres": [
        "DROP INDEX items_tsv",
        "ALTER TABLE items DROP COLUMN tsv",
        "ALTER TABLE items ADD COLUMN tsv tsvector GENERATED ALWAYS AS "
        "(to_tsvector('memlane', left(text, 200000))) STORED",
        "CREATE INDEX items_tsv ON items USING gin (tsv)",
        "DELETE FROM _memlane_migrations WHERE name = 'm009_lexical_address'",
    ],
}


def test_an_existing_database_gains_address_words_by_migration(
    backend: str, old_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_url = old_store_url  # made before m010_text_once, which the second open applies after m009
    with memlane.open(store_url, embedder=None) as before:
        before.put("users/u1", "preferences.ui.theme", "dark mode")
        with before.store.session(write=True) as s:
            for statement in _OLD_INDEX[backend]:
                s.conn.execute(statement)
    with memlane.open(store_url, embedder=None, migrate=False) as old:
        assert old.search("theme", channels=["lexical"]).hits == []
        assert "m009_lexical_address" not in [m["name"] for m in old.migration_status() if m["applied_at"]]
    monkeypatch.undo()
    with memlane.open(store_url, embedder=None) as after:
        assert "m009_lexical_address" in [m["name"] for m in after.migration_status() if m["applied_at"]]
        assert [h.key for h in after.search("theme", channels=["lexical"]).hits] == ["preferences.ui.theme"]
        assert [h.key for h in after.search("dark", channels=["lexical"]).hits] == ["preferences.ui.theme"]
        after.put("users/u1", "preferences.ui.font", "serif")
        after.delete("users/u1", "preferences.ui.theme")
        assert [h.key for h in after.search("ui", channels=["lexical"]).hits] == ["preferences.ui.font"]


_WORDS = st.text(alphabet=string.ascii_lowercase, min_size=5, max_size=9)


@SLOW
@given(
    filler=st.lists(st.sampled_from(["alpha", "bravo", "charlie", "delta"]), min_size=3, max_size=12),
    rare=_WORDS,
    common=st.sampled_from(["alpha", "bravo"]),
)
def test_floor_never_drops_a_hit_with_a_rare_matched_word(mem: Any, filler: list[str], rare: str, common: str) -> None:
    mem.clear("p")
    for i, word in enumerate(filler):
        mem.put("p", f"k{i}", f"{word} {common} note")
    mem.put("p", "target", f"{rare} {common} entry")
    env = mem.search(f"{common} {rare}", limit=50)
    assert "target" in [h.key for h in env.hits]
    assert all(h.matched for h in env.hits)


@SLOW
@given(segments=st.lists(_WORDS, min_size=1, max_size=4, unique=True), pick=st.data())
def test_every_key_segment_finds_its_item(mem: Any, segments: list[str], pick: Any) -> None:
    mem.clear("keys")
    key = ".".join(segments)
    mem.put("keys", key, "some value")
    mem.put("keys", "other", "another value")
    word = pick.draw(st.sampled_from(segments))
    hits = mem.search(word, channels=["lexical"]).hits
    assert [h.key for h in hits] == [key]
    assert hits[0].matched == [word]


def test_noise_levels_are_known_for_the_built_in_embedders() -> None:
    assert relevance.noise_level("minilm") == relevance.NOISE["minilm"]
    assert relevance.noise_level("fake") == relevance.NOISE["fake"]
    assert relevance.noise_level("something-else") == relevance.DEFAULT_NOISE


@pytest.mark.parametrize(
    ("word", "other"),
    [("travelling", "travel"), ("themes", "theme"), ("shared", "sharing"), ("users", "user"), ("parties", "party")],
)
def test_light_stems_match_inflections(word: str, other: str) -> None:
    assert relevance.stem(word) == relevance.stem(other)


def test_postgres_ranks_a_bounded_number_of_rows_per_common_word(
    backend: str, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend != "postgres":
        pytest.skip("the PostgreSQL lexical statement's per-word cap")
    from memlane.store import postgres

    monkeypatch.setattr(postgres, "LEXICAL_CAP", 5)
    with memlane.open(store_url, embedder=None) as mem:
        mem.put_many([{"namespace": "n", "key": f"k{i}", "value": f"common word filler{i}"} for i in range(40)])
        mem.put("n", "target", "common word rare")
        store: Any = mem.store
        top = store.lexical(["common", "rare"], [("n",)], 3)
        assert len(top) == 3 and top[0][0] == mem.get("n", "target").id
        assert len(store.lexical(["common", "word"], [("n",)], 3)) == 3


def test_sqlite_leaves_common_words_out_when_rarer_ones_exist(
    backend: str, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend != "sqlite":
        pytest.skip("the SQLite lexical statement's common-word bound")
    from memlane.store import sqlite

    monkeypatch.setattr(sqlite, "LEXICAL_CAP", 5)
    with memlane.open(store_url, embedder=None) as mem:
        mem.put_many([{"namespace": "n", "key": f"k{i}", "value": f"value {i} text"} for i in range(40)])
        store: Any = mem.store
        top = store.lexical(["value", "17", "text"], [("n",)], 3)
        assert [r for r, _, _ in top] == [mem.get("n", "k17").id]  # only the rare word nominates
        everywhere = store.lexical(["value", "text"], [()], 3)
        # all words common: BM25 cannot tell rows apart, the newest are nominated
        assert [r for r, _, _ in everywhere] == [mem.get("n", f"k{i}").id for i in (39, 38, 37)]
        assert store.lexical(["value", "absent"], [()], 3) != []
        # a word in many rows but far from all of them is still ranked: it tells rows apart
        mem.put_many([{"namespace": "m", "key": f"j{i}", "value": f"other {i}"} for i in range(200)])
        mem.put("m", "both", "other 17 value")
        ranked = store.lexical(["other", "17"], [("m",)], 5)
        assert len(ranked) == 5  # "other" (in 83 % of the rows) still nominates
        assert {r for r, _, _ in ranked[:2]} == {mem.get("m", "j17").id, mem.get("m", "both").id}


def test_matching_errs_towards_support() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    item = memlane.Item("i", ("lab",), "n1", "x", "text", "Inhibition of cellular growth", {}, None, now, now, None, 1)
    assert relevance.matched(["inhibits", "cell", "growth", "tea"], item) == ["inhibits", "cell", "growth"]


def test_a_question_about_a_name_the_scope_never_mentions_finds_nothing(mem: Any) -> None:
    mem.put("conv", "t1", "Caroline: I went to the support group yesterday")
    mem.put("conv", "t2", "Caroline: painting sunsets calms me")
    env = mem.search("When did Melanie go to the support group?")
    assert env.hits == [] and env.below_floor >= 1
    assert any("melanie" in n for n in env.notes)
    # the same question about a name the scope knows is answered
    assert mem.search("When did Caroline go to the support group?").hits[0].key == "t1"
    # three or more of the question's other words are support enough even so
    assert [h.key for h in mem.search("Did Melanie go to the support group yesterday?").hits] == ["t1"]
    assert relevance.names("When did Melanie go to the LGBTQ group in May?") == ["melanie", "lgbtq"]


def _hit(matched: list[str], *, similarity: float | None = None, lexical: bool = True) -> Any:
    from memlane.model import Hit, Item

    item = Item("id", ("n",), "k", "v", "string", "v", {}, None, None, None, None, 1)  # type: ignore[arg-type]
    return Hit(item, 0.5, {"lexical": 1} if lexical else {}, {}, matched, similarity)


def _counts(rows: int, docs: dict[str, int]) -> Any:
    """A scope of ``rows`` items in which each word occurs in ``docs[word]`` of them (absent words: nowhere)."""

    def counts(words: Any, limit: int) -> tuple[int, dict[str, int]]:
        return min(rows, limit), {w: min(docs[w], limit) for w in words if w in docs}

    return counts


def test_a_lexical_hit_whose_words_the_light_stemmer_missed_is_trusted() -> None:
    assert relevance.clears(_hit([]), ["inhibition"], 0.15, lambda w: True)
    assert not relevance.clears(_hit([], lexical=False), ["inhibition"], 0.15, lambda w: True)


def test_a_word_is_common_from_exactly_its_share_of_the_scope() -> None:
    # 100 items: common from ceil(0.05 * 100) = 5 of them; "rare" is in 4, "usual" in 5, "gone" in none
    accept = relevance.floor(_counts(100, {"rare": 4, "usual": 5}), "rare", ["rare", "x"], "minilm")
    assert accept is not None
    assert accept(_hit(["rare"]))
    accept = relevance.floor(_counts(100, {"rare": 4, "usual": 5}), "usual", ["usual", "x"], "minilm")
    assert accept is not None and not accept(_hit(["usual"]))
    accept = relevance.floor(_counts(100, {}), "gone", ["gone", "x"], "minilm")
    assert accept is not None and accept(_hit(["gone"]))  # a word the counts never saw is rare, not an error


def test_the_floor_uses_the_embedders_own_noise_level() -> None:
    # minilm's noise is 0.15: a similarity of 0.2 is support for it, not for an unknown embedder (0.30)
    hit = _hit([], similarity=0.2, lexical=False)
    for name, kept in (("minilm", True), ("minilm:int8", True), ("someone-else", False), (None, False)):
        accept = relevance.floor(_counts(10, {}), "x", ["x"], name)
        assert accept is not None and accept(hit) is kept, name
    assert relevance.noise_level("fake:64") == relevance.NOISE["fake"]


def test_names_are_found_from_the_second_word_and_listed_in_the_note() -> None:
    assert relevance.names("Is Caroline happy?") == ["caroline"]
    assert relevance.names("Caroline is happy") == []  # the first word is capitalised anyway
    notes: list[str] = []
    relevance.floor(_counts(10, {}), "Did Caroline meet Melanie?", ["caroline", "meet", "melanie"], None, notes=notes)
    assert notes == ["no item in scope mentions caroline, melanie; only close paraphrases are kept"]


def test_sqlite_reads_only_the_newest_k_when_every_word_is_common(
    backend: str, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its cost must not grow with the rows holding the words: 10x the matching rows, about the same work."""
    if backend != "sqlite":
        pytest.skip("the SQLite lexical statement's cost")
    from memlane.store import sqlite

    monkeypatch.setattr(sqlite, "LEXICAL_CAP", 5)
    with memlane.open(store_url, embedder=None) as mem:
        store: Any = mem.store
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        def work(within: Any) -> int:
            store._conn.set_progress_handler(count, 1)  # one call per virtual machine instruction
            try:
                steps[0] = 0
                assert len(store.lexical(["value", "text"], within, 4)) == 4
                return steps[0]
            finally:
                store._conn.set_progress_handler(None, 1)

        def fill(start: int, stop: int) -> None:
            mem.put_many(
                [{"namespace": f"n{i % 3}", "key": f"k{i}", "value": f"value {i} text"} for i in range(start, stop)]
            )

        fill(0, 150)
        small = {name: work(within) for name, within in (("everything", [()]), ("one namespace", [("n1",)]))}
        fill(150, 1500)
        large = {name: work(within) for name, within in (("everything", [()]), ("one namespace", [("n1",)]))}
        for name in small:
            assert large[name] < 2 * small[name], (name, small[name], large[name])


def test_a_words_frequency_is_counted_in_the_searched_scope(mem: Any) -> None:
    """'orchid' fills another namespace but is rare in this one: here it is support, and a hit it alone supports
    stays; over everything it is common and the same hit goes."""
    mem.put_many([{"namespace": "other", "key": f"o{i}", "value": f"orchid filler {i}"} for i in range(60)])
    mem.put_many([{"namespace": "mine", "key": f"m{i}", "value": f"note {i}"} for i in range(40)])
    mem.put("mine", "garden", "orchid garden")
    scoped = mem.search("orchid zebra", namespace_prefix="mine", channels=["lexical"])
    assert [h.key for h in scoped.hits] == ["garden"]
    everywhere = mem.search("orchid zebra", channels=["lexical"])
    assert "garden" not in [h.key for h in everywhere.hits] and everywhere.below_floor > 0
    assert [h.key for h in mem.search("garden zebra", channels=["lexical"]).hits] == ["garden"]  # rare everywhere
