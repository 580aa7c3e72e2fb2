"""How far an embedder's vectors are trusted (issue #38): measured once per store from where the embedder puts
paraphrases against unrelated texts (``relevance.Scale.trust``), and weighed into the decision and the fusion.

An embedder whose similarities are noise (the built-in ``fake`` one hashes words; paraphrases share none) must not
outvote the words: a hit the words alone find stays found. One that separates them keeps the vector model, on any
scale. Real SQLite files; the embedders are plain classes, as a caller writes them, so these run on a base install.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane.domain.search import rank, relevance
from memlane.domain.search.embedders import FakeEmbedder

SLOW = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


class Topics:
    """A caller's embedder that knows what texts mean: each calibration text and its paraphrase share a topic
    direction (with some noise), any other text gets a direction of its own from its words' topics."""

    name = "topics"

    def __init__(self, dimension: int = 96, noise: float = 0.3, shift: float = 0.0, seed: int = 7) -> None:
        self.dimension, self.noise, self.shift = dimension, noise, shift
        self._rng = random.Random(seed)
        self._topics: dict[int, list[float]] = {}

    def _topic(self, n: int) -> list[float]:
        if n not in self._topics:
            self._topics[n] = [self._rng.gauss(0, 1) for _ in range(self.dimension)]
        return self._topics[n]

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        pairs = len(relevance.REFERENCE_TEXTS)
        for text in texts:
            if text in relevance.CALIBRATION_TEXTS:
                base = self._topic(relevance.CALIBRATION_TEXTS.index(text) % pairs)
            else:
                base = self._topic(1000 + sum(map(ord, text)) % 50)
            noise = random.Random(text)
            vec = [b + self.noise * noise.gauss(0, 1) + self.shift for b in base]
            norm = math.sqrt(sum(x * x for x in vec))
            out.append([x / norm for x in vec])
        return out


def test_an_embedder_that_puts_paraphrases_near_is_trusted_and_word_hashing_is_not() -> None:
    meaning = relevance.calibrate(Topics())
    hashing = relevance.calibrate(FakeEmbedder(64))
    assert meaning.separation is not None and meaning.separation >= relevance.TRUST_FULL and meaning.trust == 1.0
    assert hashing.separation is not None and hashing.separation <= relevance.TRUST_NONE and hashing.trust == 0.0
    # a scale measured without paraphrases (an older stored entry) does not know: full trust, as before
    assert relevance.Scale(0.1, 0.1).trust == 1.0 and relevance.Scale(0.1, 0.1).separation is None


@given(shift=st.floats(0.0, 3.0), noise=st.floats(0.05, 3.0))
@settings(max_examples=25, deadline=None)
def test_trust_is_read_on_the_embedders_own_scale_and_falls_with_its_noise(shift: float, noise: float) -> None:
    """Moving every vector along one shared direction changes the scale, not the trust; noise lowers it."""
    plain = relevance.calibrate(Topics(noise=noise))
    moved = relevance.calibrate(Topics(noise=noise, shift=shift / math.sqrt(96)))
    assert abs(moved.trust - plain.trust) <= 0.2
    assert relevance.calibrate(Topics(noise=noise * 3)).trust <= plain.trust + 0.05
    assert 0.0 <= plain.trust <= 1.0


@pytest.mark.parametrize(("share", "expected"), [(0.0, "lexical"), (1.0, "vector")])
def test_a_blend_at_either_end_is_that_model(share: float, expected: str) -> None:
    blend = relevance.VECTOR_MODEL.blend(relevance.LEXICAL_MODEL, share)
    assert blend == (relevance.LEXICAL_MODEL if expected == "lexical" else relevance.VECTOR_MODEL)


@given(
    share=st.floats(0.01, 0.99),
    evidence=st.fixed_dictionaries(
        {
            "coverage": st.floats(0, 1),
            "rarity": st.floats(0, 1),
            "absent": st.floats(0, 1),
            "similarity": st.floats(-1, 1),
            "standout": st.floats(-0.5, 0.5),
            "absent_similarity": st.floats(-1, 1),
        }
    ),
)
def test_a_blend_passes_a_hit_when_its_weighed_margins_over_both_thresholds_sum_to_zero_or_more(
    share: float, evidence: dict[str, float]
) -> None:
    vec, lex = relevance.VECTOR_MODEL, relevance.LEXICAL_MODEL
    blend = vec.blend(lex, share)

    def margin(model: relevance.Model) -> float:
        p = model.probability(evidence)
        return math.log(p / (1 - p)) - math.log(model.threshold / (1 - model.threshold))

    weighed = share * margin(vec) + (1 - share) * margin(lex)
    if abs(weighed) > 1e-6:
        assert (blend.probability(evidence) >= blend.threshold) == (weighed > 0)
    assert min(vec.threshold, lex.threshold) <= blend.threshold <= max(vec.threshold, lex.threshold)


WORDS = ["harbour", "crane", "ledger", "violin", "glacier", "pepper", "orbit", "tunnel", "saddle", "lantern"]


@given(
    notes=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), min_size=3, max_size=24),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
)
@SLOW
def test_with_an_untrusted_embedder_every_verdict_is_the_words_alone(
    tmp_path_factory: pytest.TempPathFactory, notes: list[list[str]], query: list[str]
) -> None:
    """Word hashing is trusted 0: each hit the words find is judged exactly as a words-only search judges it."""
    path = tmp_path_factory.mktemp("trust") / "m.db"
    with memlane.open(str(path), embedder="fake", indexing="sync") as mem:
        for i, words in enumerate(notes):
            mem.put("notes", f"n{i}", " ".join(words) + " today")
        text = "where is the " + " ".join(query) + "?"
        words_only = {h.key: (h.relevant, h.relevance) for h in mem.search(text, channels=["lexical"], limit=50).hits}
        hybrid = mem.search(text, limit=50)
        for hit in hybrid.hits:
            if hit.key in words_only:
                assert (hit.relevant, hit.relevance) == words_only[hit.key], hit.why
            else:  # nominated by the vector alone: it holds no query word, so nothing vouches for it
                assert not hit.relevant, hit.why
        assert (hybrid.status == "found") == any(r for r, _ in words_only.values())


NOTES = {
    "keys": "The spare keys are in the blue bowl by the front door.",
    "dentist": "Dentist appointment moved to the 14th at 3pm.",
    "passport": "Passport expires in 2031, kept in the desk drawer.",
    "wifi": "The guest wifi password is on the fridge magnet.",
    "plants": "Water the ferns twice a week, the cactus once a month.",
}


def test_a_note_holding_the_rare_word_asked_about_is_found_with_an_untrusted_embedder(tmp_path: Path) -> None:
    """The names probe's fault: with `fake`, "keys" (held by one note of 25) was judged not relevant because the
    noise-level similarity of its vector outvoted the word; words alone found it."""
    with memlane.open(str(tmp_path / "m.db"), embedder="fake", indexing="sync") as mem:
        for key, text in NOTES.items():
            mem.put("notes", key, text)
        for i in range(20):
            mem.put("notes", f"log{i}", f"Walked {i + 2} kilometres along the canal before lunch.")
        env = mem.recall("Where are the Honda keys?")
        assert [h.key for h in env.hits][:1] == ["keys"], [(h.key, h.why) for h in mem.search("Honda keys").hits]
        assert env.status == "found" and "vectors weighed 0.00" in (env.hits[0].why or "")
        assert mem.recall("Where is the spare wifi password?").hits[0].key == "wifi"


def test_with_an_untrusted_embedder_the_words_lead_the_fusion(tmp_path: Path) -> None:
    """By default the vector channel weighs its trust (never under a tenth): noise cannot push the one item that
    holds the query's word below notes that only look near; a caller's own weights are kept as given."""
    with memlane.open(str(tmp_path / "m.db"), embedder="fake", indexing="sync") as mem:
        for key, text in NOTES.items():
            mem.put("notes", key, text)
        env = mem.search("passport")
        assert env.hits[0].key == "passport"
        assert env.params["weights"] == {"lexical": 1.0, "vector": 0.5 * relevance.FUSION_TRUST_FLOOR}
        given_weights = mem.search("passport", weights={"vector": 0.5})
        assert given_weights.params["weights"] == {"lexical": 1.0, "vector": 0.5}
        alone = mem.search("passport", channels=["vector"])  # one channel: its own order, whatever its weight
        assert alone.params["weights"] == {"vector": 0.5} and len(alone.hits) == len(NOTES)
    with memlane.open(str(tmp_path / "t.db"), embedder=Topics(), indexing="sync") as mem:
        for key, text in NOTES.items():
            mem.put("notes", key, text)
        assert mem.search("passport").params["weights"] == {"lexical": 1.0, "vector": 0.5}


def test_with_words_only_a_hit_holding_no_query_word_is_not_kept_as_context(tmp_path: Path) -> None:
    """The lexical channel nominates on the address too: a note found only by its namespace holds none of the
    query's words, so it is no context for the note that answers (the model's bias alone passed it before)."""
    with memlane.open(str(tmp_path / "m.db"), embedder=None) as mem:
        mem.put(("lisbon",), "trip", "Flying to Lisbon in May for my sister's wedding.")
        mem.put(("lisbon",), "tea", "Green tea every morning.")
        env = mem.recall("when is the Lisbon trip?", mode="lexical")
        assert [h.key for h in env.hits] == ["trip"], [(h.key, h.why) for h in mem.search("lisbon trip").hits]


class Handmade:
    """A test double as callers write them: vectors for its own test's texts, one point for every other text."""

    name = "handmade"
    dimension = 3
    KNOWN = {"cat": [1.0, 0.0, 0.0], "feline": [0.95, 0.3, 0.0], "tax": [0.0, 1.0, 0.0]}

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            known = [vec for word, vec in self.KNOWN.items() if word in text.lower()]
            out.append(known[0] if known else [0.0, 0.0, 1.0])
        return out


def test_an_embedder_that_puts_every_calibration_text_at_one_point_is_read_as_it_is(tmp_path: Path) -> None:
    """Nothing to measure (every reference text and paraphrase at one point): no scale, full trust, its own
    similarities; so the double's "feline" finds its "cat" note, as its author meant."""
    assert relevance.calibrate(Handmade()).spread < relevance.MIN_SPREAD
    with memlane.open(str(tmp_path / "m.db"), embedder=Handmade(), indexing="sync") as mem:
        mem.put("pets", "cat", "Our cat sleeps on the radiator all afternoon.")
        mem.put("pets", "tax", "The tax return is due at the end of January.")
        for i in range(25):
            mem.put("pets", f"n{i}", f"Note {i} about the weekly shopping list.")
        kept = relevance.stored_scale(mem.store, Handmade())
        assert kept is not None and not kept.measured and kept.trust == 1.0
        env = mem.recall("anything about a feline?")
        assert [h.key for h in env.hits][:1] == ["cat"], [(h.key, h.why) for h in mem.search("feline").hits[:3]]
        assert mem.search("feline").params["weights"] == {"lexical": 1.0, "vector": 0.5}


@pytest.mark.parametrize(("related", "trust"), [(0.1, 0.0), (0.2, 1 / 3), (0.35, 2.5 / 3), (0.5, 1.0)])
def test_trust_rises_linearly_between_its_two_separations(related: float, trust: float) -> None:
    # unrelated pairs at 0.0 +- 0.1: separations 1, 2, 3.5 and 5 spreads
    scale = relevance.Scale(0.0, 0.1, related)
    assert scale.trust == pytest.approx(trust)


def _name_judge(scale: relevance.Scale) -> tuple[relevance.Judge, Any]:
    from memlane.values.model import Hit, Item

    question = "When did Maya go hiking?"
    docs = {"hiking": 70}
    judge = relevance.Judge(
        lambda words, limit: (300, {w: docs.get(w, 0) for w in words}),
        rank.terms(question),
        "minilm",
        vector_ran=True,
        vector_scores=[0.9] + [0.1] * 49,
        vector_ids=["a"] + [f"o{i}" for i in range(49)],
        scale=scale,
        names=rank.names(question),
    )
    item = Item("a", ("chat",), "a", "v", "string", "v", {}, None, None, None, None, 1)  # type: ignore[arg-type]
    return judge, Hit(item, 0.5, {"vector": 1}, {}, ["hiking"], 0.9)


def test_a_vector_standing_out_answers_for_a_name_only_as_far_as_the_embedder_is_trusted() -> None:
    """The same hit standing far out of the query's profile: evidence for "Maya" from a trusted embedder, none from
    one whose vectors are noise."""
    mean, spread = relevance.REFERENCE_SCALE_MEAN, relevance.REFERENCE_SCALE_SPREAD
    judge, hit = _name_judge(relevance.Scale(mean, spread, mean + 5 * spread))
    assert judge.evidence(hit)["standout"] >= relevance.NAME_STANDOUT
    assert judge.unanswered_names(hit, judge.evidence(hit)) == []
    judge, hit = _name_judge(relevance.Scale(mean, spread, mean))  # trust 0
    assert judge.unanswered_names(hit, judge.evidence(hit)) == ["maya"]


class Flaky:
    """A remote embedder whose first large batch fails (a rate limit, a timeout), as the scale's batch may."""

    name = "flaky"
    dimension = 64

    def __init__(self) -> None:
        self.inner, self.failures = FakeEmbedder(64), 1

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        if len(texts) >= len(relevance.CALIBRATION_TEXTS) and self.failures:
            self.failures -= 1
            raise TimeoutError("the embedding service timed out")
        return self.inner.embed_batch(texts)


def test_a_scale_that_failed_to_be_measured_is_measured_again_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memlane.core import memory

    monkeypatch.setattr(memory, "SCALE_RETRY_S", 1.0)
    embedder = Flaky()
    with memlane.open(str(tmp_path / "m.db"), embedder=embedder, indexing="sync") as mem:
        mem.put("notes", "keys", "The spare keys are in the blue bowl.")
        key = relevance.scale_key(embedder)
        assert mem.search("keys").hits and mem.store.get_meta(key) is None  # failed: searched unscaled
        mem.search("keys")
        assert mem.store.get_meta(key) is None  # not asked again at once
        time.sleep(1.1)
        mem.search("keys")  # asked again, kept
        assert mem.store.get_meta(key) is not None and mem._scale_for_relevance() is not None


def test_the_indexer_measures_the_scale_so_a_search_only_reads_it(tmp_path: Path) -> None:
    embedder = Flaky()
    embedder.failures = 0
    with memlane.open(str(tmp_path / "m.db"), embedder=embedder, indexing="background") as mem:
        mem.put("notes", "keys", "The spare keys are in the blue bowl.")
        assert mem.wait_indexed(timeout=60)
        deadline = time.monotonic() + 30
        while mem.store.get_meta(relevance.scale_key(embedder)) is None and time.monotonic() < deadline:
            time.sleep(0.02)  # no search: only the indexer, after its batch, can have measured it
        assert mem.store.get_meta(relevance.scale_key(embedder)) is not None


def test_a_store_failing_as_the_indexer_measures_the_scale_leaves_its_batch_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scale is extra work after a stored batch: a store that fails there does not fail `index()`, whose
    items are already indexed; a later search measures the scale itself."""
    from memlane.values.errors import StoreUnavailableError

    with memlane.open(str(tmp_path / "m.db"), embedder="fake", indexing="external") as mem:
        mem.put_many([{"namespace": "n", "key": f"k{i}", "value": f"note {i} about keys"} for i in range(5)])

        read = mem.store.get_meta

        def gone(name: str) -> str | None:  # the database lost just as the scale is looked up
            if name.startswith("relevance_scale:"):
                raise StoreUnavailableError("the database cannot be reached")
            return read(name)

        monkeypatch.setattr(mem.store, "get_meta", gone)
        assert mem.index() == 5
        monkeypatch.undo()
        assert mem.stats().vectors_missing == 0
        assert mem.search("keys").hits and mem.store.get_meta(relevance.scale_key(mem.embedder)) is not None
