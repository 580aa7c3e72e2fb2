"""The relevance decision with any embedder (issue #38): calibrated on the embedder's own scale, honest about
words, and the same verdict for a hit whatever ``candidate_k`` and ``limit`` are.

Real SQLite files; the embedders are the built-in fake one and callers' own (plain classes, as a caller writes
them), so these run on a base install.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane.domain.search import relevance
from memlane.domain.search.embedders import FakeEmbedder

NOTES = {
    "car": "I drive a blue Subaru Outback, bought second hand in 2019.",
    "coffee": "Dark roast coffee, no sugar, first thing every morning.",
    "trip": "Flying to Lisbon in May for my sister's wedding.",
    "cat": "Our cat Miso is scared of the vacuum cleaner.",
    "job": "Started as a backend engineer at a logistics startup in March.",
    "allergy": "Allergic to peanuts, carry an epinephrine pen.",
    "gym": "Gym on Mondays and Thursdays, mostly squats and rows.",
    "book": "Reading a history of the Byzantine empire, halfway through.",
}
UNRELATED = [
    "what is the boiling point of mercury?",
    "who won the chess olympiad?",
    "how tall is kilimanjaro?",
    "which planet has rings?",
    "explain quantum tunnelling",
    "best recipe for ramen broth",
    "how do volcanoes erupt?",
    "when was the printing press invented?",
]


class Shifted:
    """A caller's embedder whose similarities sit high: another embedder's vectors plus one shared direction
    (different texts score far above zero, as older API embedders do)."""

    def __init__(self, inner: Any, weight: float = 1.6) -> None:
        self.inner, self.weight = inner, weight
        self.name = f"shifted-{inner.name}"
        self.dimension = inner.dimension

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        shared = [1.0 / math.sqrt(self.dimension)] * self.dimension
        out = []
        for vec in self.inner.embed_batch(texts):
            moved = [x + self.weight * s for x, s in zip(vec, shared, strict=True)]
            norm = math.sqrt(sum(x * x for x in moved))
            out.append([x / norm for x in moved])
        return out


def _notes(path: Path, embedder: Any) -> Any:
    mem = memlane.open(str(path), embedder=embedder, indexing="sync")
    for key, text in NOTES.items():
        mem.put(("user", "u1"), key, text)
    return mem


def test_an_embedder_whose_similarities_sit_high_still_abstains(tmp_path: Path) -> None:
    shifted = Shifted(FakeEmbedder(64))
    probe = shifted.embed_batch(["alpha beta", "gamma delta"])
    assert sum(a * b for a, b in zip(*probe, strict=True)) > 0.6  # unrelated texts score high on its scale
    base = _notes(tmp_path / "fake.db", FakeEmbedder(64))
    high = _notes(tmp_path / "shifted.db", shifted)
    for question in UNRELATED:
        assert base.recall(question, namespace_prefix="user/u1").status == "nothing_relevant", question
        env = high.recall(question, namespace_prefix="user/u1")
        assert env.status == "nothing_relevant", (question, [(h.key, h.why) for h in env.hits])
    # and what the notes hold is found under both
    for mem in (base, high):
        assert [h.key for h in mem.recall("which car do I drive?", namespace_prefix="user/u1").hits][:1] == ["car"]
    base.close()
    high.close()


def test_the_scale_reads_a_shifted_embedder_as_the_one_it_moves() -> None:
    fake = FakeEmbedder(64)
    texts = list(relevance.REFERENCE_TEXTS)
    own = relevance.measure_scale(fake.embed_batch(texts))
    moved = relevance.measure_scale(Shifted(fake).embed_batch(texts))
    assert moved.mean > own.mean + 0.5
    a, b = Shifted(fake).embed_batch(["Flying to Lisbon in May", "a trip to Lisbon"])
    x, y = fake.embed_batch(["Flying to Lisbon in May", "a trip to Lisbon"])
    raw = sum(p * q for p, q in zip(x, y, strict=True))
    shifted = sum(p * q for p, q in zip(a, b, strict=True))
    assert abs(moved.read(shifted) - own.read(raw)) < 0.1


class Planted:
    """A caller's embedder that places chosen texts: the query and a decoy together, the answer far away.

    It is trusted fully (each calibration text and its paraphrase share a direction of their own), so its
    vector is weighed in full against the words.
    """

    name = "planted"
    dimension = 3 + len(relevance.REFERENCE_TEXTS)

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        pairs = len(relevance.REFERENCE_TEXTS)
        for text in texts:
            vec = [0.0] * self.dimension
            if text in relevance.CALIBRATION_TEXTS:
                vec[3 + relevance.CALIBRATION_TEXTS.index(text) % pairs] = 1.0
            elif "deploy" in text.lower() and "friday" in text.lower():
                vec[1] = 1.0  # the only note holding the word: far from the query
            elif text.lower().startswith("deploy") or "release train" in text.lower():
                vec[0] = 1.0  # the query and the near decoy
            else:
                vec[0], vec[2] = 0.6, 0.8
            out.append(vec)
        return out


def test_a_query_word_the_hit_holds_is_evidence_whatever_its_vector(tmp_path: Path) -> None:
    mem = memlane.open(str(tmp_path / "m.db"), embedder=Planted(), indexing="sync")
    mem.put("ops", "deploy", "We deploy the billing service every Friday after noon.")
    mem.put("ops", "train", "The release train leaves on the second Tuesday.")
    for i in range(6):
        mem.put("ops", f"n{i}", f"Routine note number {i} about the office plants.")
    env = mem.recall("deploy")
    assert "deploy" in [h.key for h in env.hits], [(h.key, h.why) for h in mem.search("deploy").hits]
    hit = next(h for h in env.hits if h.key == "deploy")
    assert hit.relevant and "every query word" in (hit.why or "")
    mem.close()


def test_a_namespace_word_is_not_a_content_match(tmp_path: Path) -> None:
    mem = memlane.open(str(tmp_path / "m.db"), embedder=None)  # as on a base install: no vectors
    for key, text in NOTES.items():
        mem.put(("user", "u1"), key, text)
    env = mem.recall("user", mode="lexical")
    assert env.status == "nothing_relevant" and env.hits == []
    assert mem.recall("user", mode="lexical", floor=False).hits  # the index still finds the address word
    mem.close()


def test_short_function_words_neither_help_nor_hurt_on_a_base_install(tmp_path: Path) -> None:
    # the first Conversations example of docs/python-api.md, as a new user runs it (no `vectors`)
    chats = memlane.open(str(tmp_path / "chats.db"), embedder=None)
    chats.add_conversation(
        "user/42/chat",
        [
            {"speaker": "Caroline", "text": "I went to the LGBTQ support group yesterday.", "id": "D1:3"},
            {"speaker": "Melanie", "text": "How did it feel?"},
            {"speaker": "Caroline", "text": "Powerful. Everyone shared their stories."},
        ],
        session="2023-05-08",
        at="2023-05-08T13:56:00Z",
    )
    env = chats.recall("when did Caroline go to the support group?", namespace_prefix="user/42/chat")
    assert env.hits and env.hits[0].key == "2023-05-08.t00001", env.notes
    assert relevance.content_terms(["caroline", "go", "do", "42", "support"]) == ["caroline", "42", "support"]
    chats.close()


def test_a_scope_too_small_for_idf_weighs_every_word_the_same_but_one_all_items_hold() -> None:
    def counts(words: Any, limit: int) -> tuple[int, dict[str, int]]:
        return 3, {"caroline": 3, "support": 1, "feel": 2}

    judge = relevance.Judge(counts, ["caroline", "support", "feel", "group"], None, vector_ran=False)
    idf, total, _, missing = judge._query_weights()
    assert idf == {"caroline": 0.0, "support": 1.0, "feel": 1.0, "group": 1.0} and missing == ["group"]
    only_common = relevance.Judge(counts, ["caroline"], None, vector_ran=False)
    assert only_common._query_weights()[0] == {"caroline": 1.0}


# -- the same verdict whatever candidate_k and limit ------------------------------------------------------------

_VOCAB = ["apple", "river", "stone", "garden", "piano", "engine", "winter", "castle", "cloud", "ticket"]


def _store(tmp: Path) -> Any:
    mem = memlane.open(str(tmp / "p.db"), embedder=FakeEmbedder(64), indexing="sync")
    for i in range(70):
        words = [_VOCAB[(i * 7 + j * 3) % len(_VOCAB)] for j in range(1 + i % 4)]
        mem.put("p", f"k{i:02d}", f"note {i}: " + " ".join(words))
    return mem


def test_a_hits_verdict_does_not_depend_on_candidate_k_or_limit(tmp_path_factory: Any) -> None:
    mem = _store(tmp_path_factory.mktemp("verdict"))
    seen: dict[tuple[str, str], tuple[bool | None, float | None]] = {}

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        query=st.lists(st.sampled_from([*_VOCAB, "zebra", "go"]), min_size=1, max_size=3).map(" ".join),
        candidate_k=st.integers(1, 120),
        limit=st.integers(1, 30),
        floor=st.booleans(),
    )
    def check(query: str, candidate_k: int, limit: int, floor: bool) -> None:
        env = mem.search(query, candidate_k=candidate_k, limit=limit, floor=floor)
        for hit in env.hits:
            verdict = (hit.relevant, hit.relevance)
            assert seen.setdefault((query, hit.key), verdict) == verdict, (query, hit.key, candidate_k, limit)

    check()
    mem.close()


def test_the_scale_is_measured_again_when_reindex_changes_the_embedder(tmp_path: Path) -> None:
    mem = _notes(tmp_path / "m.db", FakeEmbedder(64))
    assert mem.recall(UNRELATED[0], namespace_prefix="user/u1").status == "nothing_relevant"
    before = mem._scale_for_relevance()
    mem.reindex(Shifted(FakeEmbedder(64)))
    after = mem._scale_for_relevance()
    assert before is not None and after is not None and after.mean > before.mean + 0.5
    for question in UNRELATED:
        assert mem.recall(question, namespace_prefix="user/u1").status == "nothing_relevant", question
    mem.close()
