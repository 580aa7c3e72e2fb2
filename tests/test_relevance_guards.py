"""The relevance decision's edges (#35): what the model reads for a hit the vector channel did not nominate,
the cap on what an absent word weighs beyond a scope of 1,000 items, a query of stop words only, and the
bounds the scope's counts are asked with.

The decision is :class:`memlane.domain.search.relevance.Judge`; most tests drive it with a made-up scope (a
``counts`` function), one runs a real search on SQLite and recomputes its verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

import memlane
from memlane.domain.search import relevance
from memlane.values.model import Hit, Item


def _hit(matched: list[str], *, similarity: float | None = None) -> Hit:
    item = Item("id", ("n",), "k", "v", "string", "v", {}, None, None, None, None, 1)  # type: ignore[arg-type]
    return Hit(item, 0.5, {"lexical": 1}, {}, matched, similarity)


def _counts(rows: int, docs: dict[str, int], asked: list[tuple[tuple[str, ...], int]] | None = None) -> Any:
    """A scope of ``rows`` items, ``docs[word]`` of them holding each word; records what it was asked."""

    def counts(words: Any, limit: int) -> tuple[int, dict[str, int]]:
        if asked is not None:
            asked.append((tuple(words), limit))
        return min(rows, limit), {w: min(docs[w], limit) for w in words if w in docs}

    return counts


def _judge(rows: int, docs: dict[str, int], terms: list[str], sims: Sequence[float] = ()) -> relevance.Judge:
    """The decision over a made-up scope; the vector channel ran when it nominated ``sims``."""
    return relevance.Judge(_counts(rows, docs), terms, "minilm", vector_ran=bool(sims), vector_scores=list(sims))


# -- a hit the vector channel did not nominate ----------------------------------------------------------


def test_a_hit_the_vector_channel_did_not_nominate_is_judged_at_the_lowest_nominated_similarity() -> None:
    sims = [0.7, 0.55, 0.4]
    judge = _judge(300, {"orchid": 4, "garden": 60}, ["orchid", "garden"], sims)
    unnominated = _hit(["orchid"], similarity=None)
    at_floor = _hit(["orchid"], similarity=0.4)
    noise, mean = relevance.NOISE["minilm"], sum(sims) / 3
    evidence = judge.evidence(unnominated)
    assert evidence["similarity"] == round((0.4 - noise) / (1 - noise), 4) > 0
    assert evidence["standout"] == round((0.4 - mean) / (1 - noise), 4) < 0
    assert evidence == judge.evidence(at_floor)
    assert judge.judge(unnominated).probability == judge.judge(at_floor).probability
    # it is the bound, not the best: a hit at the top of the channel scores higher
    assert judge.judge(_hit(["orchid"], similarity=0.7)).probability > judge.judge(unnominated).probability
    assert "not among the query's nearest vectors" in judge.judge(unnominated).why
    assert "similarity 0.40" in judge.judge(at_floor).why


def test_an_absent_word_weighs_with_the_floor_similarity_of_an_unnominated_hit() -> None:
    judge = _judge(2000, {"group": 5}, ["melanie", "group"], [0.6, 0.5])
    evidence = judge.evidence(_hit(["group"]))
    excess = (0.5 - relevance.NOISE["minilm"]) / (1 - relevance.NOISE["minilm"])
    assert evidence["absent"] > 0
    absent = judge._query_weights()[2]  # unrounded
    assert evidence["absent_similarity"] == round(absent * excess, 4) > 0


def test_without_nominations_a_vector_run_gives_no_similarity_and_no_standout() -> None:
    # the vector channel ran and nominated nothing (an empty scope of vectors): nothing to bound a hit by
    judge = relevance.Judge(_counts(10, {"a1": 1}), ["a1"], "minilm", vector_ran=True, vector_scores=[])
    evidence = judge.evidence(_hit(["a1"]))
    assert evidence["similarity"] == 0.0 and evidence["standout"] == 0.0 and evidence["absent_similarity"] == 0.0
    assert judge.model is relevance.VECTOR_MODEL


def test_in_a_real_search_a_hit_the_vector_channel_did_not_nominate_is_judged_on_its_own_similarity(
    tmp_path: Any,
) -> None:
    """Hybrid search on SQLite where the query's words and its vector point at different items: a hit only the
    lexical channel nominated still has its similarity read (never "no similarity"), and its verdict is the one
    it gets when the vector channel nominates it too (candidate_k changes no verdict)."""
    from memlane.domain.search.embedders import FakeEmbedder

    with memlane.open(str(tmp_path / "m.db"), embedder="fake", indexing="sync") as mem:
        mem.put("n", "near", "harbour crane lifts containers at dawn")
        mem.put("n", "word", "a crane")
        mem.put_many([{"namespace": "n", "key": f"f{i}", "value": f"filler note {i}"} for i in range(20)])
        vector = FakeEmbedder().embed_batch(["filler note 3"])[0]
        narrow = {h.key: h for h in mem.search("crane", embedding=vector, candidate_k=2).hits}
        wide = {h.key: h for h in mem.search("crane", embedding=vector, candidate_k=50).hits}
        for key in ("near", "word"):
            missed = narrow[key]
            assert "vector" not in missed.ranks and missed.similarity is None
            assert "not among the query's nearest vectors" not in (missed.why or "")
            assert "similarity " in (missed.why or "")
            assert "vector" in wide[key].ranks
            assert (missed.relevance, missed.relevant) == (wide[key].relevance, wide[key].relevant)


# -- the absent-word cap ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [1, 10, 100, 500, 999])
def test_below_the_reference_scope_an_absent_word_weighs_with_the_log_of_the_scope(rows: int) -> None:
    # every content word absent: the absent evidence is the scope weight itself
    judge = _judge(rows, {}, ["zanzibar", "quokka"])
    weight = math.log1p(rows) / math.log1p(relevance.SCOPE_REFERENCE)
    assert judge.evidence(_hit([]))["absent"] == round(weight, 4) < 1.0


@pytest.mark.parametrize("rows", [1000, 1001, 1500, 4999, 5000, 50_000])
def test_from_the_reference_scope_on_an_absent_word_is_full_evidence_and_no_more(rows: int) -> None:
    judge = _judge(rows, {}, ["zanzibar", "quokka"])
    assert judge.evidence(_hit([]))["absent"] == 1.0
    # half the query's weight absent (two words of equal rarity, one held nowhere): half the evidence
    half = _judge(rows, {"quokka": 1}, ["zanzibar", "quokka"])
    idf_absent = math.log(1 + (min(rows, 5000) + 0.5) / 0.5)
    idf_held = math.log(1 + (min(rows, 5000) - 1 + 0.5) / 1.5)
    assert half.evidence(_hit(["quokka"]))["absent"] == round(idf_absent / (idf_absent + idf_held), 4) < 1.0


def test_the_scope_is_counted_once_within_its_bounds() -> None:
    asked: list[tuple[tuple[str, ...], int]] = []
    judge = relevance.Judge(_counts(20_000, {"alpha": 3000}, asked), ["alpha", "the"], None, vector_ran=False)
    assert asked == []  # nothing counted until a hit is judged
    for _ in range(3):
        judge.judge(_hit(["alpha"]))
    assert asked == [((), relevance.SCOPE_LIMIT), (("alpha",), relevance.DF_LIMIT)]
    assert (relevance.SCOPE_LIMIT, relevance.DF_LIMIT) == (5_000, 1_000)
    # counts stopped at their bounds: 5,000 rows, 1,000 holding the word
    assert judge.scope() == (5000, {"alpha": 1000})


# -- a query of stop words only -----------------------------------------------------------------------------


def test_a_query_of_stop_words_only_is_judged_by_those_words() -> None:
    """rank.terms searches such a query by its stop words, so they are its content: a hit holding them all
    covers the whole query and is relevant on words alone."""
    terms = memlane.domain.search.rank.terms("Who is it?")
    assert terms == ["who", "is", "it"]
    judge = _judge(50, {"who": 2, "is": 30, "it": 20}, terms)
    assert judge.content == ["who", "is", "it"]
    full = judge.judge(_hit(["who", "is", "it"]))
    assert judge.evidence(_hit(["who", "is", "it"]))["coverage"] == 1.0
    assert full.relevant and "holds 3 of 3 query words (who, is, it)" in full.why
    none = judge.judge(_hit([]))
    assert not none.relevant and "holds 0 of 3 query words" in none.why


def test_stop_words_beside_content_words_are_left_out_of_the_evidence() -> None:
    judge = _judge(50, {"who": 2, "orchid": 1}, ["who", "orchid"])
    assert judge.content == ["orchid"]
    assert judge.evidence(_hit(["who"]))["coverage"] == 0.0
    assert judge.evidence(_hit(["orchid"]))["coverage"] == 1.0


def test_a_lexical_recall_of_stop_words_only_finds_the_item_that_holds_them(tmp_path: Any) -> None:
    with memlane.open(str(tmp_path / "m.db"), embedder=None) as mem:
        mem.put("music", "band", "The Who played at the festival")
        mem.put_many([{"namespace": "music", "key": f"n{i}", "value": f"drum solo number {i}"} for i in range(10)])
        env = mem.recall("the who", mode="lexical")
        assert [h.key for h in env.hits] == ["band"]
        assert env.hits[0].relevant and env.status == "found"


# -- the model and its parts ---------------------------------------------------------------------------------


def test_the_model_reads_a_missing_feature_as_zero_and_clamps_far_tails() -> None:
    lexical = relevance.LEXICAL_MODEL
    assert lexical.probability({}) == 1.0 / (1.0 + math.exp(-lexical.bias))
    z = lexical.bias + lexical.weights["coverage"]
    assert lexical.probability({"coverage": 1.0}) == 1.0 / (1.0 + math.exp(-z))
    # beyond |z| = 50 the probability is held where it is at 50: no overflow, and the same answer for any larger z
    low, high = relevance.Model(-500.0, {}, 0.5), relevance.Model(500.0, {}, 0.5)
    assert low.probability({}) == 1.0 / (1.0 + math.exp(50.0))
    assert high.probability({}) == 1.0 / (1.0 + math.exp(-50.0))
    assert relevance.Model(-50.0, {}, 0.5).probability({}) == low.probability({})


def test_a_hit_exactly_at_the_threshold_is_relevant() -> None:
    judge = _judge(10, {"alpha": 1}, ["alpha"])
    judge.model = relevance.Model(0.0, {}, 0.5)  # p = 0.5 for every hit
    verdict = judge.judge(_hit([]))  # holding no query word: the model alone decides
    assert verdict.probability == 0.5 and verdict.relevant
    assert verdict.why.startswith("relevant (p=0.50, threshold 0.50): ")
    judge.model = relevance.Model(0.0, {}, 0.51)
    verdict = judge.judge(_hit([]))
    assert not verdict.relevant and verdict.why.startswith("not relevant (p=0.50, threshold 0.51): ")


def test_idf_is_bm25s_and_never_negative() -> None:
    assert relevance._idf(50, 100) == math.log(1.0 + 50.5 / 50.5)
    assert relevance._idf(0, 100) == math.log(1.0 + 100.5 / 0.5)
    assert relevance._idf(100, 100) == math.log(1.0 + 0.5 / 100.5) > 0
    # a word in half the scope weighs a third of the query when the other word is in a tenth of it
    judge = _judge(100, {"half": 50, "tenth": 10}, ["half", "tenth"])
    half, tenth = math.log(2.0), math.log(1.0 + 90.5 / 10.5)
    assert judge.evidence(_hit(["half"]))["coverage"] == round(half / (half + tenth), 4)


def test_item_words_are_the_stems_of_its_text_key_and_namespace() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    item = Item("i", ("Lab", "Notes"), "pets.Cat", "x", "text", "Travelling THEMES Straße", {}, None, now, now, None, 1)
    # lowercased, never uppercased first: "ß" would become "SS"
    assert relevance.item_words(item) == {"travel", "them", "straß", "pet", "cat", "lab", "not"}


# -- the search around the decision -------------------------------------------------------------------------


def _notes_store(tmp_path: Any) -> Any:
    """Notes that each hold one of "harbour" and "crane", none both."""
    mem = memlane.open(str(tmp_path / "m.db"), embedder="fake", indexing="sync")
    words = ("harbour", "crane")
    mem.put_many([{"namespace": "n", "key": f"k{i}", "value": f"{words[i % 2]} note {i}"} for i in range(8)])
    return mem


def test_an_answer_whose_hits_stay_only_as_context_has_nothing_relevant_and_is_not_truncated(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every hit reaches the companion probability and none the threshold: with the decision on, the answer
    drops them all (counted below the floor), is not truncated, and says why without inventing absent words."""
    flat = relevance.Model(0.0, {}, threshold=0.9, companion=0.2)
    monkeypatch.setattr(relevance, "VECTOR_MODEL", flat)
    monkeypatch.setattr(relevance, "LEXICAL_MODEL", flat)  # the store's `fake` embedder is judged on its words
    with _notes_store(tmp_path) as mem:
        kept = mem.search("harbour crane", limit=3)
        assert len(kept.hits) == 3 and kept.truncated and all(h.relevance == 0.5 for h in kept.hits)
        assert kept.status == "nothing_relevant" and not any(h.relevant for h in kept.hits)
        env = mem.search("harbour crane", limit=3, floor=True)
        assert env.hits == [] and env.below_floor == 3 and env.truncated is False
        assert env.status == "nothing_relevant"
        assert env.notes[-1] == "nothing relevant: none of 3 candidates passed the relevance decision"
        absent = mem.search("harbour crane zanzibar", limit=3, floor=True)
        assert absent.notes[-1].endswith("passed the relevance decision; nothing in scope mentions zanzibar")


def test_a_search_states_the_parameters_it_ran_with(tmp_path: Any) -> None:
    with _notes_store(tmp_path) as mem:
        env = mem.search("crane", namespace_prefix="n", limit=3, rrf_k=7, candidate_k=20, embedding=[0.1] * 64)
        expected = {
            "query": "crane",
            "namespace_prefix": "n",
            "limit": 3,
            "channels": ["lexical", "vector"],
            "candidate_k": 20,
            "rrf_k": 7,
            "weights": {"lexical": 1.0, "vector": 0.5},
            "embedding": "given",
            "floor": False,
            "min_score": None,
        }
        assert {k: env.params.get(k, "missing") for k in expected} == expected
        assert mem.search("crane").params["embedding"] is None


@pytest.mark.parametrize(
    ("argument", "value"),
    [("limit", 0), ("limit", 1001), ("candidate_k", 0), ("candidate_k", 10_001), ("rrf_k", 0), ("rrf_k", 100_001)],
)
def test_a_search_refuses_a_bad_bound_naming_it(tmp_path: Any, argument: str, value: int) -> None:
    with _notes_store(tmp_path) as mem, pytest.raises(memlane.ValidationError) as refused:
        mem.search("crane", **{argument: value})
    assert refused.value.field == argument


def test_rarity_in_a_scope_of_one_item_and_to_four_places() -> None:
    one = _judge(1, {"alpha": 1}, ["alpha"])
    assert one.evidence(_hit(["alpha"]))["rarity"] == 0.0  # the only item holds it: nothing rarer
    empty = _judge(0, {}, ["alpha"])
    assert empty.evidence(_hit(["alpha"]))["rarity"] == 1.0
    judge = _judge(500, {"alpha": 2}, ["alpha"])
    exact = 1.0 - math.log1p(2) / math.log1p(500)
    assert judge.evidence(_hit(["alpha"]))["rarity"] == round(exact, 4) != round(exact, 5)


def test_an_answer_of_unjudged_hits_holds_nothing_relevant() -> None:
    judge = _judge(20, {"alpha": 1}, ["alpha"])
    unjudged = _hit(["alpha"])
    assert unjudged.relevance is None
    assert judge.settle([unjudged], drop=True) == ([], 1)
    assert judge.settle([unjudged], drop=False) == ([unjudged], 0) and unjudged.relevant is False
    # an unjudged hit does not count as the answer's relevant one: a context-strength hit beside it goes too
    context = _hit(["alpha"])
    context.relevance, context.relevant, context.why = (
        0.2,
        False,
        "not relevant (p=0.20): x",
    )  # kept beside a relevant one
    assert judge.settle([context, unjudged], drop=True) == ([], 2) and not context.relevant


def test_why_names_what_a_hit_holds_and_what_the_scope_lacks_in_plain_lists() -> None:
    judge = _judge(100, {"orchid": 3, "garden": 9}, ["orchid", "garden", "melanie", "zanzibar"])
    assert judge.judge(_hit(["orchid", "garden"])).why.endswith(
        "holds 2 of 4 query words (orchid, garden); nothing in scope mentions melanie, zanzibar"
    )
    assert "holds 0 of 4 query words; nothing" in judge.judge(_hit([])).why
    full = _judge(100, {"orchid": 3}, ["orchid"])
    assert full.judge(_hit([])).why.endswith("holds 0 of 1 query words")


def test_a_query_without_words_counts_only_the_scopes_rows() -> None:
    asked: list[tuple[tuple[str, ...], int]] = []
    judge = relevance.Judge(_counts(40, {}, asked), [], None, vector_ran=False)
    verdict = judge.judge(_hit([]))
    assert asked == [((), relevance.SCOPE_LIMIT)] and judge.scope() == (40, {})
    assert not verdict.relevant and "query words" not in verdict.why


def test_without_pairs_to_measure_the_scale_is_the_reference_one() -> None:
    reference = relevance.Scale(relevance.REFERENCE_SCALE_MEAN, relevance.REFERENCE_SCALE_SPREAD)
    assert relevance.measure_scale([]) == reference
    assert relevance.measure_scale([[1.0, 0.0]]) == reference


def test_a_scaled_judge_reads_the_profiles_mean_on_the_reference_scale_too() -> None:
    scale = relevance.Scale(0.5, 0.2)
    sims = [0.9, 0.7, 0.6]
    judge = relevance.Judge(
        _counts(50, {"alpha": 2}), ["alpha"], "fake", vector_ran=True, vector_scores=sims, scale=scale
    )
    noise = relevance.REFERENCE_NOISE
    standout = (scale.read(0.6) - scale.read(sum(sims) / 3)) / (1 - noise)
    evidence = judge.evidence(_hit(["alpha"], similarity=0.6))
    assert evidence["standout"] == round(standout, 4)
    assert evidence["similarity"] == round((scale.read(0.6) - noise) / (1 - noise), 4)
