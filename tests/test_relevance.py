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
from memlane.domain.search import relevance
from memlane.values.errors import ValidationError

SLOW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _texts(env: Any) -> list[str]:
    return [h.text for h in env.hits]


def test_each_hit_says_which_words_matched_and_its_similarity(mem: Any) -> None:
    mem.put("notes", "trip", "Travelling to Lisbon in May")
    mem.put("notes", "tea", "Green tea every morning")
    env = mem.search("when is the Lisbon trip?")
    hit = env.hits[0]
    assert hit.key == "trip" and hit.relevant and env.status == "found"
    assert [h.key for h in mem.recall("when is the Lisbon trip?").hits] == ["trip"]
    assert hit.matched == ["lisbon", "trip"]  # "trip" is the key
    assert hit.similarity == pytest.approx(hit.channel_scores["vector"])
    assert 0 < hit.similarity <= 1
    as_json = env.to_dict()["hits"][0]
    assert as_json["matched"] == ["lisbon", "trip"] and as_json["similarity"] == pytest.approx(hit.similarity)
    lexical = mem.search("lisbon", channels=["lexical"])
    assert lexical.hits[0].similarity is None and lexical.hits[0].matched == ["lisbon"]


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
def test_on_words_alone_a_hit_holding_every_word_of_the_question_is_relevant(
    mem: Any, filler: list[str], rare: str, common: str
) -> None:
    # (with vectors the similarity counts too: the fake embedder's hashed words can cancel out in a query's
    # vector, and a hit far from it is then rightly doubted)
    mem.clear("p")
    for i, word in enumerate(filler):
        mem.put("p", f"k{i}", f"{word} {common} note")
    mem.put("p", "target", f"{rare} {common} entry")
    env = mem.recall(f"{common} {rare}", limit=50, mode="lexical")
    target = [h for h in env.hits if h.key == "target"]
    assert target and target[0].relevant and env.status == "found"


@SLOW
@given(segments=st.lists(_WORDS, min_size=1, max_size=4, unique=True), pick=st.data())
def test_every_key_segment_finds_its_item(mem: Any, segments: list[str], pick: Any) -> None:
    # namespace, values and the other key are words no segment drawn (five letters or more) can be, nor stem to
    mem.clear("n0")
    key = ".".join(segments)
    mem.put("n0", key, "v1")
    mem.put("n0", "k0", "v2")
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
        # in two thirds of the scope's rows: not so common that it is left out (as a word in nearly all would be)
        mem.put_many([{"namespace": "n", "key": f"o{i}", "value": f"other {i}"} for i in range(20)])
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
        mem.put_many([{"namespace": "m", "key": f"f{i}", "value": "filler"} for i in range(40)])
        mem.put("m", "both", "other 17 value")
        ranked = store.lexical(["other", "17"], [("m",)], 5)
        assert len(ranked) == 5  # "other" (in 83 % of the scope's rows) still nominates
        assert {r for r, _, _ in ranked[:2]} == {mem.get("m", "j17").id, mem.get("m", "both").id}


def test_matching_errs_towards_support() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    item = memlane.Item("i", ("lab",), "n1", "x", "text", "Inhibition of cellular growth", {}, None, now, now, None, 1)
    assert relevance.matched(["inhibits", "cell", "growth", "tea"], item) == ["inhibits", "cell", "growth"]


def _hit(matched: list[str], *, similarity: float | None = None, lexical: bool = True) -> Any:
    from memlane.values.model import Hit, Item

    item = Item("id", ("n",), "k", "v", "string", "v", {}, None, None, None, None, 1)  # type: ignore[arg-type]
    return Hit(item, 0.5, {"lexical": 1} if lexical else {}, {}, matched, similarity)


def _counts(rows: int, docs: dict[str, int]) -> Any:
    """A scope of ``rows`` items in which each word occurs in ``docs[word]`` of them (absent words: nowhere)."""

    def counts(words: Any, limit: int) -> tuple[int, dict[str, int]]:
        return min(rows, limit), {w: min(docs[w], limit) for w in words if w in docs}

    return counts


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


# -- the relevance decision --------------------------------------------------------------------------------------


def _judge(rows: int, docs: dict[str, int], terms: list[str], *, embedder: str | None = "minilm", sims=()) -> Any:
    return relevance.Judge(_counts(rows, docs), terms, embedder, vector_ran=bool(sims), vector_scores=list(sims))


def test_a_word_counts_by_its_rarity_in_the_searched_scope() -> None:
    # "orchid" in 2 of 500 items is strong support; in 400 of them it is weak; the same hit, the same words
    hit = _hit(["orchid"])
    rare = _judge(500, {"orchid": 2, "zebra": 0}, ["orchid", "zebra"])
    common = _judge(500, {"orchid": 400, "zebra": 0}, ["orchid", "zebra"])
    assert rare.evidence(hit)["coverage"] > common.evidence(hit)["coverage"]
    assert rare.evidence(hit)["rarity"] > common.evidence(hit)["rarity"]
    assert rare.judge(hit).probability > common.judge(hit).probability


def test_what_the_scope_never_mentions_counts_against_and_weighs_with_the_scope() -> None:
    hit = _hit(["group"], similarity=0.35)
    known = _judge(600, {"group": 5, "melanie": 40}, ["melanie", "group"], sims=[0.35, 0.2, 0.1])
    unknown = _judge(600, {"group": 5}, ["melanie", "group"], sims=[0.35, 0.2, 0.1])
    assert unknown.absent_words() == ["melanie"] and known.absent_words() == []
    assert unknown.judge(hit).probability < known.judge(hit).probability
    assert "nothing in scope mentions melanie" in unknown.judge(hit).why
    # five notes say less about what is absent than six hundred turns do
    few = _judge(5, {"group": 1}, ["melanie", "group"], sims=[0.35, 0.2, 0.1])
    assert 0 < few.evidence(hit)["absent"] < unknown.evidence(hit)["absent"]


def test_similarity_is_calibrated_per_embedder() -> None:
    hit = _hit([], similarity=0.35, lexical=False)
    sims = [0.35, 0.1, 0.05]
    minilm = _judge(50, {}, ["x"], embedder="minilm", sims=sims).evidence(hit)["similarity"]
    unknown = _judge(50, {}, ["x"], embedder="someone-else", sims=sims).evidence(hit)["similarity"]
    fake = _judge(50, {}, ["x"], embedder="fake:64", sims=sims).evidence(hit)["similarity"]
    assert minilm == pytest.approx((0.35 - 0.15) / 0.85, abs=1e-3)
    assert minilm > unknown > 0 > fake  # 0.35 is well above MiniLM's noise, below the fake embedder's


@SLOW
@given(low=st.floats(-0.2, 0.9), gain=st.floats(0.01, 0.3), held=st.integers(0, 2))
def test_more_similarity_never_lowers_the_probability(low: float, gain: float, held: int) -> None:
    words = ["alpha", "bravo"]
    judge = _judge(200, {"alpha": 3, "bravo": 50}, words, sims=[low + gain, low, 0.0])
    weak, strong = _hit(words[:held], similarity=low), _hit(words[:held], similarity=low + gain)
    assert judge.judge(strong).probability >= judge.judge(weak).probability


def test_an_answer_is_found_by_one_relevant_hit_and_keeps_its_context() -> None:
    judge = _judge(20, {"alpha": 1}, ["alpha"], sims=[0.9, 0.2, 0.0])
    strong, context, noise = _hit(["alpha"], similarity=0.9), _hit([], similarity=0.2), _hit([], similarity=-0.3)
    for hit, p in ((strong, 0.95), (context, 0.5), (noise, 0.01)):
        hit.relevance, hit.relevant, hit.why = p, p >= judge.model.threshold, "x (p): y"
    kept, dropped = judge.settle([strong, context, noise], drop=True)
    assert kept == [strong, context] and dropped == 1
    assert context.relevant and context.why.startswith("relevant beside a stronger hit") and not noise.relevant
    # without a relevant hit nothing passes: dropped with the decision on, kept (marked) without it
    for hit in (context, noise):
        hit.relevant = False
    assert judge.settle([context, noise], drop=True) == ([], 2)
    assert judge.settle([context, noise], drop=False) == ([context, noise], 0)
    assert not context.relevant and not noise.relevant


def test_the_decision_does_not_read_the_shape_of_words(mem: Any) -> None:
    """Capitals, or their absence, change nothing for words the scope holds: the same words give the same verdicts
    (a name the scope never mentions is another matter: tests/test_relevance_names.py)."""
    mem.put("conv", "t1", "Caroline: I went to the support group yesterday")
    mem.put("conv", "t2", "Melanie: painting sunsets calms me")
    for query in ("When did Caroline go to the support group?", "when did caroline go to the support group?"):
        env = mem.search(query, namespace_prefix="conv")
        assert [(h.key, h.relevant) for h in env.hits][0] == ("t1", True)
    a = mem.search("When did Melanie paint SUNSETS?", namespace_prefix="conv").hits
    b = mem.search("when did melanie paint sunsets?", namespace_prefix="conv").hits
    assert [(h.key, h.relevance) for h in a] == [(h.key, h.relevance) for h in b]


# -- paraphrase and abstention with the default embedder (MiniLM) ----------------------------------------------


@pytest.fixture
def minilm_mem(tmp_path: Any) -> Any:
    from memlane.domain.search.embedders import default_available

    if not default_available():
        pytest.skip("the default embedder (memlane[vectors]) is not installed")
    with memlane.open(str(tmp_path / "notes.db"), embedder="minilm") as mem:  # background indexing, the default
        yield mem


def test_a_note_is_found_when_asked_in_other_words(minilm_mem: Any) -> None:
    mem = minilm_mem
    mem.put(("user", "1"), "travel.next", "flying to Berlin in March")
    env = mem.search("trip to Germany")  # a country for its city, right after the write
    (hit,) = env.hits
    assert hit.key == "travel.next" and hit.relevant and env.status == "found", hit.why
    assert mem.recall("trip to Germany").hits[0].key == "travel.next"


def test_a_users_notes_answer_other_words_and_nothing_else(minilm_mem: Any) -> None:
    """From the development half of bench/data/paraphrase.json (the held-out half is for the benchmark only)."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).parents[1] / "bench" / "data" / "paraphrase.json").read_text())
    user = data["splits"]["dev"][0]
    ns = tuple(user["namespace"])
    mem = minilm_mem
    mem.put_many([{"namespace": ns, "key": n["key"], "value": n["text"]} for n in user["notes"]])
    for q in ("trip to Germany", "What kind of animal do I own?", "Where does my sibling live now?"):
        answer = next(x["answer"] for x in user["queries"] if x["q"] == q)
        env = mem.recall(q, namespace_prefix=ns)
        assert answer in [h.key for h in env.hits[:3]], (q, [(h.key, h.why) for h in env.hits[:3]])
    for q in ("Who is my dentist?", "What's my passport number?", "Which political party do I vote for?"):
        env = mem.recall(q, namespace_prefix=ns)
        assert env.hits == [] and env.status == "nothing_relevant", (q, [(h.key, h.why) for h in env.hits])
        assert any(n.startswith("nothing relevant") for n in env.notes)
        # the ranked search still shows the nearest, each saying it did not pass
        assert all(h.relevant is False for h in mem.search(q, namespace_prefix=ns).hits)
