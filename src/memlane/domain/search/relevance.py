"""Why a hit is there, and the relevance decision: does its evidence make it an answer?

Every confirmed hit is judged from the evidence it actually has, never from
the shape of the query's words:

* ``similarity``: the cosine of its vector to the query's, read on the
  reference scale (the embedder's own :class:`Scale`, measured on
  :data:`REFERENCE_TEXTS`, mapped onto MiniLM's), then as the excess over the
  noise level there (the cosine that unrelated texts reach by chance,
  :data:`REFERENCE_NOISE`), ``(s - noise) / (1 - noise)``. A hit is read at
  its own similarity when it is among the query's :data:`PROFILE_K` nearest
  in scope, else at the lowest of them (an upper bound on its own), whatever
  ``candidate_k`` is.
* ``coverage``: the share of the query's content words (not stop words, not
  words of one or two letters) that the hit holds in its text or key (not its
  namespace: where an item is kept is not what it says), each word weighted
  by its inverse document frequency *in the searched scope* (BM25's IDF), so
  a word most items hold counts little and a rare one much; in a scope of
  fewer than :data:`IDF_MIN_ROWS` items every content word weighs the same,
  except one every item holds, which weighs nothing (unless all of them do).
* ``rarity``: how rare the rarest query word it holds is in the scope,
  ``1 - log(1 + df) / log(1 + N)``.
* ``standout``: how far its similarity stands above the mean similarity of
  the query's PROFILE_K nearest (read as above): the answer to a
  question stands out from the rest of the scope, while a question the memory
  cannot answer meets a flat field of look-alikes.
* ``absent``: the IDF-weighted share of the query's content words that occur
  nowhere in the scope: what the query asks about that the memory never
  mentions. It is scaled by how much the scope says (``log(1 + N)`` against a
  scope of :data:`SCOPE_REFERENCE` items): in a handful of notes most words of
  any question are absent, in a long conversation an absent word is telling.

A logistic model (:data:`VECTOR_MODEL` when the vector channel ran,
:data:`LEXICAL_MODEL` otherwise) turns the evidence into a probability of
relevance; a hit is relevant when it reaches the model's threshold, or when
it holds every content word of the query (whatever its vector says).
With the vector channel, the two models are blended by how far the store's
embedder can be trusted (:attr:`Scale.trust`, measured once per store on
:data:`REFERENCE_PARAPHRASES`): an embedder that puts paraphrases no nearer
than unrelated texts (word hashing) is judged on its words alone, one that
separates them as MiniLM does by the vector model, one between by a blend of
the two on the log-odds scale (:meth:`Model.blend`). Its ``standout`` counts
for a name (below) in the same measure.

One rule stands beside the model: **a name the scope never mentions**. A
query that writes a word as a name (a capital inside a sentence:
:func:`memlane.domain.search.rank.names`) asks about that someone or
something; when no item in scope holds it, a hit about the same activity by
someone else is no answer, however near its vector ("When did Maya go
hiking?" over a chat where only Ana hikes). Such a hit stays relevant only
with evidence of its own for the name: it holds another of the query's names,
or a word rare in the scope (``rarity`` at least :data:`NAME_RARITY`: fewer
than about sqrt(N) items hold it, as a variant spelling's neighbours do), or
its vector singles it out of the scope (``standout`` at least
:data:`NAME_STANDOUT`, as "Iceland" finds the one note about Reykjavik). An
absent everyday word ("see" for "saw", "pet" for "cat") is not such evidence:
it is how paraphrases look, and the model weighs it as before. A query
without capitals (or all in them) has no names, and is judged as before; so
is any query in a scope of fewer than :data:`IDF_MIN_ROWS` items. The
coefficients and thresholds were fitted by ``bench/relevance.py fit`` on
development data only (LoCoMo conversations conv-26, conv-30 and conv-41 written
through ``add_conversation``, and the development split of memlane's paraphrase
set), and checked on data they were not fitted on (conv-42 and conv-43, the
paraphrase held-out split, SciFact); docs/benchmarks.md has the figures.

Word matching here is for explanation and evidence only (the index does the
searching); it compares light stems, so "travelling" matches "travel", and a
stem of four letters or more also matches a longer word it begins
("inhibit" / "inhibition"): erring towards support, never against it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from ...values.errors import StoreError
from ...values.model import Hit, Item
from ...values.stopwords import ENGLISH
from .embedders import embedder_spec, embedder_version, known_dimension

_WORD = re.compile(r"\w+", re.UNICODE)

# Cosine similarity that unrelated texts reach by chance, per embedder name: the 99th percentile of the
# similarity between a question and a random document of a corpus it has nothing to do with (LoCoMo questions
# against SciFact abstracts and SciFact claims against LoCoMo turns, the higher of the two; shared/data,
# `bench/retrieval.py noise`, docs/benchmarks.md). Unknown embedders get DEFAULT_NOISE.
NOISE: dict[str, float] = {"minilm": 0.15, "minilm-numpy": 0.15, "fake": 0.42}
DEFAULT_NOISE = 0.30
# The embedder's own scale. Each embedder places unrelated texts at its own level of cosine (MiniLM near 0.05, an
# older API model near 0.75): the decision reads a similarity on MiniLM's scale, where it was fitted. An embedder's
# scale is measured once, on its own vectors of REFERENCE_TEXTS (short texts about unrelated things): the mean and
# spread of their pairwise cosines (Scale). A similarity s is then read as
# REFERENCE_SCALE.mean + (s - scale.mean) * REFERENCE_SCALE.spread / scale.spread, so an embedder whose cosines are
# MiniLM's moved or stretched (a shared direction added to every vector) is read as MiniLM. Measuring costs one
# embedding batch (32 texts, paid ones with an API embedder), so it is done once per store and embedder and kept in
# the store's meta table (stored_scale): every process and worker reads it there, and an embedder of another spec or
# version (after `reindex`) is measured anew.
REFERENCE_TEXTS: tuple[str, ...] = (
    "I booked a table for two at the Italian place on Friday.",
    "The quarterly report is due to the finance team next week.",
    "My cat keeps knocking glasses off the kitchen counter.",
    "We hiked up the ridge trail and camped by the lake.",
    "The deploy failed because the database migration timed out.",
    "She is learning to play the cello in an evening class.",
    "Tomatoes need at least six hours of sun a day.",
    "The train to the airport leaves every twenty minutes.",
    "He prefers dark roast coffee without sugar.",
    "Our landlord is raising the rent in March.",
    "The museum has a new exhibition of Japanese prints.",
    "Remember to renew the car insurance before it lapses.",
    "The kids built a sandcastle with a moat at the beach.",
    "Protein folding depends on hydrophobic interactions.",
    "The match went to penalties after a goalless draw.",
    "I am allergic to peanuts and shellfish.",
    "The new phone has a better camera but a weaker battery.",
    "Grandma's recipe uses buttermilk instead of milk.",
    "The committee postponed the vote until the next session.",
    "A storm knocked out power across the valley overnight.",
    "He volunteers at the animal shelter on weekends.",
    "The invoice lists the wrong billing address.",
    "Jupiter has dozens of moons, the largest is Ganymede.",
    "We painted the nursery a pale shade of green.",
    "The library extended its opening hours for exams.",
    "My knee hurts after running more than ten kilometres.",
    "The startup raised a seed round from two angel investors.",
    "Inflation slowed for the third month in a row.",
    "The bakery on the corner sells sourdough on Saturdays.",
    "Please water the ferns while I am away.",
    "The violinist tuned her instrument before the concert.",
    "Vaccines train the immune system to recognise a pathogen.",
)
# Does the embedder place related texts nearer than unrelated ones at all? Each of these says what the reference text
# of the same position says, in other words (no content word shared with it). Where an embedder puts these pairs,
# against where it puts unrelated texts, is how far its vectors can be trusted as evidence (Scale.trust): a model of
# meaning (MiniLM) puts them 6.4 spreads above unrelated pairs; word hashing (the `fake` test embedder, hashed
# character trigrams) 0.4-0.7, because the pairs share no words. Measured in the same batch as REFERENCE_TEXTS.
REFERENCE_PARAPHRASES: tuple[str, ...] = (
    "We have a dinner reservation for a couple at that pasta restaurant at the end of the week.",
    "Accounting expects the three-month summary document in a few days.",
    "The kitten always pushes cups onto the floor when I cook.",
    "Our walk climbed the mountain path, and we pitched a tent near the water.",
    "Releasing the software broke since the schema change took too long.",
    "Every night after work, she takes lessons on a string instrument.",
    "These vegetable plants must get plenty of direct light to grow.",
    "Rail service to the terminal for flights departs three times an hour.",
    "His favourite drink is a strong black brew, unsweetened.",
    "The apartment owner will charge us more for housing starting in spring.",
    "The gallery just opened a show of woodblock art from Tokyo.",
    "Don't forget to extend the vehicle's coverage policy so it stays valid.",
    "The children made a fortress out of sand by the sea, with a ditch around it.",
    "How amino acid chains take their shape is driven by water-repelling forces.",
    "The football game ended level at zero, so it was decided by shootout.",
    "Nuts and seafood give me a bad reaction, so I avoid them.",
    "My latest mobile takes nicer pictures, though its charge runs out sooner.",
    "My grandmother's cooking instructions call for a soured dairy drink rather than the regular kind.",
    "The panel delayed its ballot to a later meeting.",
    "Bad weather caused an electricity outage throughout the area during the night.",
    "On Saturdays and Sundays he helps out unpaid at the pet rescue.",
    "The bill shows an incorrect location for payment.",
    "The biggest planet is orbited by many satellites.",
    "The baby's room got a soft mint colour on its walls.",
    "Students can study later at the book lending building during test season.",
    "Jogging long distances leaves my leg joint sore.",
    "The young company got early funding from a couple of private backers.",
    "Price increases eased again, continuing a trend that began last year.",
    "The local bread shop offers tangy loaves at the weekend.",
    "Could you keep my plants from drying out during my trip?",
    "Ahead of the performance, the fiddle player adjusted the strings.",
    "Immunisation teaches the body's defences to spot germs.",
)
# what a store's embedder is asked once (stored_scale): the unrelated texts, then their paraphrases
CALIBRATION_TEXTS: tuple[str, ...] = REFERENCE_TEXTS + REFERENCE_PARAPHRASES
# Trust in an embedder's vectors (Scale.trust) from its separation d' = (related - mean) / spread, where related is
# the mean cosine of REFERENCE_PARAPHRASES to their texts: none at TRUST_NONE spreads or less (paraphrases no nearer
# than chance pairs: word hashing scores 0.4-0.7), full from TRUST_FULL (MiniLM 6.4, and an embedder moved to
# another scale keeps its separation: shifted MiniLM 6.4), linear between.
TRUST_NONE = 1.0
TRUST_FULL = 4.0
# an embedder whose cosines over REFERENCE_TEXTS' pairs spread less than this (or that puts most of them at one
# point, measure_scale) has no scale to measure
MIN_SPREAD = 1e-4
# the vector channel's fusion weight is multiplied by trust, but never by less than this: with an untrusted embedder
# its nominations still break the lexical channel's ties and follow its hits, and a search of that channel alone
# keeps its order
FUSION_TRUST_FLOOR = 0.1
# MiniLM's scale on REFERENCE_TEXTS (`bench/relevance.py scale`): the scale the coefficients below were fitted on
REFERENCE_SCALE_MEAN = 0.041402
REFERENCE_SCALE_SPREAD = 0.081204
# the noise level of the reference scale (NOISE["minilm"]): the decision's similarity is the excess over it
REFERENCE_NOISE = 0.15


@dataclass(frozen=True, slots=True)
class Scale:
    """Where an embedder puts unrelated texts (the mean and spread of its cosines over REFERENCE_TEXTS' pairs), and
    related ones (``related``: the mean cosine of each reference text to its paraphrase, ``None`` when not measured)."""

    mean: float
    spread: float
    related: float | None = None

    def read(self, similarity: float) -> float:
        """``similarity`` on the reference scale (MiniLM's), at most 1."""
        spread = max(self.spread, 1e-3)
        return min(1.0, REFERENCE_SCALE_MEAN + (similarity - self.mean) * REFERENCE_SCALE_SPREAD / spread)

    @property
    def measured(self) -> bool:
        """Whether there is a scale at all: an embedder that puts (most of) the reference texts at one point (a
        test double that knows only its own test's texts) has none, and is read as it is, at full trust."""
        return self.spread >= MIN_SPREAD

    @property
    def separation(self) -> float | None:
        """How many spreads above unrelated pairs the embedder puts paraphrases (``None``: not measured)."""
        if self.related is None or not self.measured:
            return None
        return (self.related - self.mean) / max(self.spread, 1e-3)

    @property
    def trust(self) -> float:
        """How far its vectors count as evidence, 0 to 1 (see :data:`TRUST_NONE`, :data:`TRUST_FULL`); 1 when
        the separation was not measured."""
        separation = self.separation
        if separation is None:
            return 1.0
        return max(0.0, min(1.0, (separation - TRUST_NONE) / (TRUST_FULL - TRUST_NONE)))


def _units(vectors: Sequence[Sequence[float]]) -> list[list[float]]:
    units = []
    for vec in vectors:
        norm = math.sqrt(sum(x * x for x in vec)) or 1.0
        units.append([x / norm for x in vec])
    return units


def _cosine(u: Sequence[float], w: Sequence[float]) -> float:
    return sum(a * b for a, b in zip(u, w, strict=False))


def measure_scale(vectors: Sequence[Sequence[float]], paraphrases: Sequence[Sequence[float]] = ()) -> Scale:
    """The :class:`Scale` of an embedder from its vectors of :data:`REFERENCE_TEXTS` and, for ``related``, of
    :data:`REFERENCE_PARAPHRASES` in the same order (any vectors: they are normalised here). An embedder that puts
    most of the reference texts at one point has spread 0: nothing to measure."""
    units = _units(vectors)
    sims = [_cosine(u, w) for i, u in enumerate(units) for w in units[i + 1 :]]
    if not sims:
        return Scale(REFERENCE_SCALE_MEAN, REFERENCE_SCALE_SPREAD)
    mean = sum(sims) / len(sims)
    spread = math.sqrt(sum((x - mean) ** 2 for x in sims) / len(sims))
    if 2 * sum(x > 1.0 - 1e-6 for x in sims) > len(sims):
        spread = 0.0  # most of them at one point: the embedder does not know these texts, there is no scale
    pairs = [_cosine(u, p) for u, p in zip(units, _units(paraphrases), strict=False)]
    related = round(sum(pairs) / len(pairs), 6) if pairs else None
    return Scale(round(mean, 6), round(spread, 6), related)


def calibrate(embedder: Any) -> Scale:
    """``embedder``'s :class:`Scale`, measured on one batch of :data:`CALIBRATION_TEXTS`."""
    vectors = embedder.embed_batch(list(CALIBRATION_TEXTS))
    return measure_scale(vectors[: len(REFERENCE_TEXTS)], vectors[len(REFERENCE_TEXTS) :])


class Meta(Protocol):
    """Where a store keeps named texts: its ``meta`` table (:meth:`memlane.store.base.Store.get_meta`)."""

    def get_meta(self, name: str) -> str | None: ...

    def set_meta(self, name: str, value: str) -> None: ...


# what a stored scale was measured on: other reference texts (a later release) make it stale
_REFERENCE_DIGEST = hashlib.sha256("\n".join(CALIBRATION_TEXTS).encode()).hexdigest()[:16]


def scale_key(embedder: Any) -> str:
    """The meta name of ``embedder``'s stored :class:`Scale`: what makes its vectors (spec, dimension, version).

    An embedder that learns its dimension from its first response is asked
    for its scale after the query's embedding, so the dimension is known then.
    """
    dimension, version = known_dimension(embedder), embedder_version(embedder)
    return (
        f"relevance_scale:{embedder_spec(embedder)}"
        + ("" if dimension is None else f"/{dimension}")
        + ("" if version is None else f"@{version}")
    )


def stored_scale(meta: Meta, embedder: Any) -> Scale | None:
    """``embedder``'s :class:`Scale` as the store keeps it; measured and stored at the first need.

    Measured once per store, embedder spec and version, and reference texts
    (one batch of :data:`CALIBRATION_TEXTS`), then read by every process that
    opens the store. A store that may not be written (a read-only role) keeps
    nothing: the scale is measured and used. An embedder that fails here
    gives ``None``, and nothing is kept: measured again at the next need.
    One that puts the reference texts at one point gives a scale that is not
    :attr:`~Scale.measured`, kept like any other.
    """
    key = scale_key(embedder)
    raw = meta.get_meta(key)
    if raw is not None:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            kept = json.loads(raw)
            if kept["reference"] == _REFERENCE_DIGEST:
                return Scale(float(kept["mean"]), float(kept["spread"]), float(kept["related"]))
    try:
        scale = calibrate(embedder)
    except Exception:  # the query's embedding will say what is wrong with the embedder
        return None
    value = {
        "reference": _REFERENCE_DIGEST,
        "mean": scale.mean,
        "spread": scale.spread,
        "related": scale.related,
        "name": embedder.name,
    }
    with contextlib.suppress(StoreError):  # a store this role may not write: measured again by the next process
        meta.set_meta(key, json.dumps(value, sort_keys=True))
    return scale


# rows of the scope counted at most, and rows counted per word at most: the counts cost a search about 0.3 ms at
# these bounds (100k rows, SQLite); beyond them a scope's IDF is an estimate, and the fitting data lies within them
SCOPE_LIMIT = 5_000
DF_LIMIT = 1_000
# a scope this large makes an absent word full evidence; a smaller one proportionally less (log scale)
SCOPE_REFERENCE = 1_000
# below this many items a scope is too small for IDF: every content word weighs the same (a plain share of them),
# except a word every item holds, which weighs nothing (unless every content word is such a word)
IDF_MIN_ROWS = 20
# the query's similarity profile: its PROFILE_K best similarities in scope, whatever `candidate_k` is, so the
# verdict of a hit never depends on how many candidates a channel was asked for
PROFILE_K = 50
# a hit's companions (see Judge.settle) may stand beside it when a relevant hit is among the first HEAD_K of a
# channel's nominations (a set that depends on neither `candidate_k` nor `limit`)
HEAD_K = 20
# A name the scope never mentions (module docstring): a hit answers it only holding a word at least this rare in the
# scope (rarity 0.5: (1 + df)^2 <= 1 + N, a word fewer than about sqrt(N) items hold) ...
NAME_RARITY = 0.5
# ... or standing this far out of the query's profile on the reference scale: above the best standout of all but one
# of the 512 questions asked where nothing answers them in the fitting data (LoCoMo conv-26, 30, 41 asked in another
# conversation and the paraphrase development set's unrelated questions: 99th percentile 0.21, 99.5th 0.24, the one
# above 0.34), below the names said in other words there ("trip to Germany" for a note on Berlin: 0.42, 0.52);
# docs/benchmarks.md, "#38 abstention beyond LoCoMo"
NAME_STANDOUT = 0.30


@dataclass(frozen=True, slots=True)
class Model:
    """A fitted logistic decision: ``p = 1 / (1 + exp(-(bias + sum(weights[f] * evidence[f]))))``.

    Attributes:
        bias: the intercept.
        weights: one coefficient per evidence feature (see the module docstring).
        threshold: the probability from which a hit is relevant on its own: an
            answer holds something relevant when one of its hits reaches it.
        companion: the probability from which another hit of such an answer is
            kept beside it (the answer's context); below it a hit is dropped.
    """

    bias: float
    weights: Mapping[str, float]
    threshold: float
    companion: float = 0.0

    def probability(self, evidence: Mapping[str, float]) -> float:
        """The probability of relevance this model gives the evidence."""
        z = self.bias + sum(w * evidence.get(name, 0.0) for name, w in self.weights.items())
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))

    def blend(self, other: Model, share: float) -> Model:
        """This model weighed ``share`` against ``other`` (``1 - share``), on the log-odds scale.

        The blend's log-odds are the weighted sum of the two models' (so are its
        thresholds'), so a hit passes it when its margins over the two thresholds,
        so weighed, sum to at least 0. ``share`` 1 is this model, 0 ``other``.
        """
        if share >= 1.0:
            return self
        if share <= 0.0:
            return other
        names = dict.fromkeys([*self.weights, *other.weights])
        return Model(
            bias=share * self.bias + (1 - share) * other.bias,
            weights={n: share * self.weights.get(n, 0.0) + (1 - share) * other.weights.get(n, 0.0) for n in names},
            threshold=_mix(self.threshold, other.threshold, share),
            companion=_mix(self.companion, other.companion, share),
        )


def _logit(p: float) -> float:
    p = max(1e-9, min(1 - 1e-9, p))
    return math.log(p / (1 - p))


def _mix(p: float, q: float, share: float) -> float:
    """``p`` and ``q`` mixed ``share`` to ``1 - share`` on the log-odds scale."""
    return 1.0 / (1.0 + math.exp(-(share * _logit(p) + (1 - share) * _logit(q))))


# Fitted by `bench/relevance.py fit` (docs/benchmarks.md, "Relevance decision"): weighted logistic regression
# (L2 1.0) on the fitting rows, then the thresholds chosen on the same rows (LoCoMo hit@10 may lose at most 0.015;
# within that the most abstention and paraphrases found). `absent_similarity` = absent * similarity: a query whose
# words the scope lacks can still be answered by a paraphrase, and then by its similarity alone.
VECTOR_MODEL = Model(
    bias=-1.549,
    weights={
        "similarity": 8.943,
        "standout": 16.153,
        "coverage": 6.988,
        "rarity": -2.256,
        "absent": -5.681,
        "absent_similarity": 3.175,
    },
    threshold=0.80,
    companion=0.20,
)
# without the vector channel (mode="lexical", or no embedder) the words are all the evidence there is
LEXICAL_MODEL = Model(
    bias=-2.038,
    weights={"coverage": 13.473, "rarity": 1.369, "absent": -6.016},
    threshold=0.34,
    companion=0.10,
)

_SUFFIXES = ("ations", "ation", "ings", "ing", "ies", "ied", "edly", "ed", "es", "ly", "s")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light English stem (``travelling`` -> ``travel``, ``themes`` -> ``theme``), for explanation only."""
    w = word.lower()
    stripped = ""
    for suffix in _SUFFIXES:
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w, stripped = w[: -len(suffix)], suffix
            if suffix in ("ies", "ied"):
                w += "y"
            break
    if stripped in ("ing", "ed", "edly") and len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiou":
        w = w[:-1]  # travell(ing) -> travel, while "cell" stays
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]  # theme / them(es) -> them, share / shar(ing) -> shar
    return w


def item_words(item: Item) -> set[str]:
    """Stems of the words of an item's text, key and namespace."""
    text = " ".join((item.text, item.key, *item.namespace))
    return {stem(w) for w in _WORD.findall(text.lower())}


@lru_cache(maxsize=256)
def _prefixes(terms: tuple[str, ...]) -> tuple[re.Pattern[str], dict[str, str]]:
    # a word whose stem equals a term's starts with that stem minus its last letter (see stem), so one
    # regex pass finds every word worth stemming, however long the text
    stems = {t: stem(t) for t in terms}
    heads = sorted({st[:-1] or st for st in stems.values()}, key=len, reverse=True)
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(h) for h in heads) + r")\w*", re.UNICODE)
    return pattern, stems


def matched(terms: Sequence[str], item: Item) -> list[str]:
    """The query terms (in query order) that occur in the item's text, key or namespace (what a hit shows)."""
    return _matched(terms, " ".join((item.text, item.key, *item.namespace)))


def content_matched(terms: Sequence[str], item: Item) -> list[str]:
    """The query terms (in query order) that occur in the item's text or key: the decision's word evidence.

    Not its namespace: the namespace says whose or where an item is, not what
    it says (a note under ``("user", ...)`` is no answer to "user"; a
    conversation's turns under ``("locomo", "conv-26")`` do not all hold "locomo").
    """
    return _matched(terms, f"{item.text} {item.key}")


def _matched(terms: Sequence[str], text: str) -> list[str]:
    if not terms:
        return []
    pattern, stems = _prefixes(tuple(terms))
    text = text.lower()
    found = {stem(w) for w in pattern.findall(text)}
    return [t for t in terms if _found(stems[t], found)]


def _found(st: str, found: set[str]) -> bool:
    # the light stemmer knows fewer suffixes than the index's (porter, snowball): "inhibits" and
    # "inhibition" must meet, so a stem of 4+ letters also matches a longer one it begins (or ends) with
    if st in found:
        return True
    return len(st) >= 4 and any(f.startswith(st) or (len(f) >= 4 and st.startswith(f)) for f in found)


def noise_level(embedder_name: str | None) -> float:
    """The cosine similarity at which an embedder's matches are noise (see ``NOISE``)."""
    if embedder_name is None:
        return DEFAULT_NOISE
    return NOISE.get(embedder_name, NOISE.get(embedder_name.split(":", 1)[0], DEFAULT_NOISE))


def content_terms(terms: Iterable[str]) -> list[str]:
    """Terms that carry content: not stop words, and not words of one or two letters ("go", "do", "it").

    Numbers are content whatever their length ("5", "42").
    """
    return [t for t in terms if t not in ENGLISH and not (len(t) <= 2 and t.isalpha())]


Counts = Callable[[Sequence[str], int], tuple[int, Mapping[str, int]]]


def _idf(df: int, rows: int) -> float:
    # BM25's IDF, never negative
    return math.log(1.0 + (rows - df + 0.5) / (df + 0.5))


@dataclass(frozen=True, slots=True)
class Verdict:
    """The decision on one hit: relevant or not, its probability, and why in words."""

    relevant: bool
    probability: float
    why: str


class Judge:
    """The relevance decision for the hits of one search.

    Args:
        counts: ``counts(words, limit)`` returns the rows in the searched scope
            and, per word, the rows containing it, each count stopping at
            ``limit`` (asked twice at most, and only if a hit is judged).
        terms: the query's searched words (:func:`memlane.domain.search.rank.terms`).
        embedder_name: the embedder that made the vectors (its noise level when
            no ``scale`` is given), or ``None``.
        vector_ran: whether the vector channel nominated for this search.
        vector_scores: the query's similarity profile, best first: the
            similarities of its :data:`PROFILE_K` nearest items in scope
            (more are cut). Their lowest is the bound given to a hit outside
            them, their mean what a hit must stand out from.
        vector_ids: the item ids of ``vector_scores``, in the same order: a
            hit among them is judged on its similarity there, whether or not
            the vector channel nominated it for ranking.
        scale: the embedder's :class:`Scale`, read onto the reference scale
            before the decision, and its ``trust`` weighing the vector model
            against the lexical one; ``None`` reads similarities as they are,
            with the noise level of ``embedder_name``, at full trust.
        names: the words the query writes as names
            (:func:`memlane.domain.search.rank.names`): a name no item in scope
            holds needs evidence of its own (:meth:`unanswered_names`).
    """

    def __init__(
        self,
        counts: Counts,
        terms: Sequence[str],
        embedder_name: str | None,
        *,
        vector_ran: bool,
        vector_scores: Sequence[float] = (),
        vector_ids: Sequence[str] = (),
        scale: Scale | None = None,
        names: Collection[str] = (),
    ) -> None:
        self._counts = counts
        # a query of stop words only is searched by them (rank.terms), so they are its content then
        self.content = content_terms(terms) or list(terms)
        # the content words the query writes as names (rank.names)
        self.names = [w for w in self.content if w in names]
        # an embedder with no measurable scale is read as it is, with its name's noise level, at full trust
        self.scale = scale if scale is not None and scale.measured else None
        self.noise = REFERENCE_NOISE if self.scale is not None else noise_level(embedder_name)
        self.vector_ran = vector_ran
        profile = list(vector_scores)[:PROFILE_K]
        self._profile = dict(zip(vector_ids, profile, strict=False))
        self.vector_floor = min(profile, default=None)
        self.vector_mean = sum(profile) / len(profile) if profile else None
        # an embedder whose vectors barely tell related texts from unrelated ones is weighed accordingly: its
        # similarity is noise, and noise must not outvote the words (Scale.trust)
        self.trust = 1.0 if self.scale is None else self.scale.trust
        self.model = VECTOR_MODEL.blend(LEXICAL_MODEL, self.trust) if vector_ran else LEXICAL_MODEL
        self._scope: tuple[int, dict[str, int]] | None = None
        self._weights: tuple[dict[str, float], float, float, list[str]] | None = None

    def scope(self) -> tuple[int, dict[str, int]]:
        """``(rows in scope, {word: rows holding it})`` for the query's content words, counted once."""
        if self._scope is None:
            rows = self._counts((), SCOPE_LIMIT)[0]
            dfs = dict(self._counts(self.content, DF_LIMIT)[1]) if self.content else {}
            self._scope = (rows, dfs)
        return self._scope

    def absent_words(self) -> list[str]:
        """The query's content words that no item in scope holds."""
        return self._query_weights()[3]

    def missing_names(self) -> list[str]:
        """The query's names (words it writes with a capital inside a sentence) that no item in scope holds."""
        if not self.names:
            return []
        dfs = self.scope()[1]
        return [w for w in self.names if dfs.get(w, 0) == 0]

    def unanswered_names(self, hit: Hit, evidence: Mapping[str, float]) -> list[str]:
        """The names the scope never mentions that ``hit`` has no evidence for (empty: the rule does not apply).

        The hit has evidence when it holds another of the query's names, a word
        rare in the scope (``rarity`` >= :data:`NAME_RARITY`), or a vector that
        stands out of the query's profile (``standout`` >= :data:`NAME_STANDOUT`).
        A scope of fewer than :data:`IDF_MIN_ROWS` items is too small to tell
        either (one note stands out of nothing): the rule does not apply there.
        """
        missing = self.missing_names()
        if not missing or self.scope()[0] < IDF_MIN_ROWS:
            return []  # too few items to tell a rare word or a standing-out vector: the model decides alone
        if set(self.names) & set(self.held(hit)) or evidence.get("rarity", 0.0) >= NAME_RARITY:
            return []
        if self.vector_ran and self.trust * evidence.get("standout", 0.0) >= NAME_STANDOUT:
            return []
        return missing

    def _query_weights(self) -> tuple[dict[str, float], float, float, list[str]]:
        """What depends on the query and the scope only, worked out once: each content word's IDF, their sum,
        the evidence of the absent words, and those words."""
        if self._weights is None:
            rows, dfs = self.scope()
            if rows < IDF_MIN_ROWS:
                # too few items for IDF to say how rare a word is: each counts the same, except a word every item
                # holds, which tells them apart no more than a stop word (unless every word is one)
                idf = {w: 0.0 if dfs.get(w, 0) >= rows else 1.0 for w in self.content}
                if not any(idf.values()):
                    idf = dict.fromkeys(self.content, 1.0)
            else:
                idf = {w: _idf(dfs.get(w, 0), rows) for w in self.content}
            total = sum(idf.values()) or 1.0
            missing = [w for w in self.content if dfs.get(w, 0) == 0]
            weight = min(1.0, math.log1p(rows) / math.log1p(SCOPE_REFERENCE))
            self._weights = (idf, total, weight * sum(idf[w] for w in missing) / total, missing)
        return self._weights

    def similarity(self, hit: Hit) -> float | None:
        """The similarity the decision reads for ``hit`` (raw, before its scale): its own when it is among the
        query's profile, else the profile's lowest (an upper bound on its own)."""
        sim = self._profile.get(hit.item.id) if self._profile else hit.similarity
        if sim is None or (self.vector_floor is not None and sim < self.vector_floor):
            return self.vector_floor
        return sim

    def held(self, hit: Hit) -> list[str]:
        """The query's content words the hit's text or key holds (not its namespace: see content_matched)."""
        held = [w for w in hit.matched if w in self.content]
        in_namespace = set(_matched(held, " ".join(hit.item.namespace))) if held and hit.item.namespace else set()
        if in_namespace:  # a word the namespace holds counts only if the text or key holds it too
            in_content = set(content_matched(sorted(in_namespace), hit.item))
            held = [w for w in held if w not in in_namespace or w in in_content]
        return held

    def holds_all(self, hit: Hit) -> bool:
        """Whether the hit holds every content word of the query (strong evidence on its own)."""
        held = set(self.held(hit))
        return bool(self.content) and all(w in held for w in self.content)

    def evidence(self, hit: Hit) -> dict[str, float]:
        """The features the decision reads for ``hit`` (see the module docstring)."""
        rows, dfs = self.scope()
        idf, total, absent, _ = self._query_weights()
        held = [w for w in self.held(hit) if w in idf]
        coverage = sum(idf[w] for w in held) / total
        rarity = max((1.0 - math.log1p(dfs.get(w, 0)) / math.log1p(max(rows, 1)) for w in held), default=0.0)
        out = {"coverage": round(coverage, 4), "rarity": round(max(0.0, rarity), 4), "absent": round(absent, 4)}
        if self.vector_ran:
            sim = self.similarity(hit)
            mean = self.vector_mean
            if self.scale is not None:
                sim = None if sim is None else self.scale.read(sim)
                mean = None if mean is None else self.scale.read(mean)
            excess = 0.0 if sim is None else (sim - self.noise) / (1.0 - self.noise)
            standout = 0.0 if sim is None or mean is None else (sim - mean) / (1.0 - self.noise)
            out["similarity"] = round(excess, 4)
            out["standout"] = round(standout, 4)
            out["absent_similarity"] = round(absent * excess, 4)
        return out

    def judge(self, hit: Hit) -> Verdict:
        """Decide on one hit on its own evidence, saying why in words (see :meth:`settle` for the answer).

        A hit whose text holds every content word of the query is relevant
        whatever its vector says; otherwise the model's probability decides.
        Either way, a hit with no evidence for a name of the query that the
        scope never mentions is not (:meth:`unanswered_names`).
        """
        evidence = self.evidence(hit)
        p = self.model.probability(evidence)
        relevant = p >= self.model.threshold or self.holds_all(hit)
        unanswered = self.unanswered_names(hit, evidence) if relevant else []
        if unanswered:
            relevant = False
        return Verdict(relevant, round(p, 4), self._why(hit, p, relevant, unanswered))

    def keeps(self, hit: Hit) -> bool:
        """Whether a judged hit may stay in an answer that holds a relevant hit (see :meth:`settle`).

        A hit that holds none of the query's content words is context only by
        its vector: judged on words alone (no vector channel, or an embedder
        not trusted at all) it has no evidence, whatever the model's bias gives.
        """
        if hit.relevant:
            return True
        if hit.relevance is None or hit.relevance < self.model.companion:
            return False
        return (self.vector_ran and self.trust > 0.0) or bool(self.held(hit))

    def settle(self, hits: Sequence[Hit], *, drop: bool, found: bool | None = None) -> tuple[list[Hit], int]:
        """The decision on a whole answer: its judged hits, and how many were dropped.

        A hit relevant on its own passes. The others are the answer's context:
        they pass when they reach the model's ``companion`` probability and the
        search ``found`` a relevant hit among the first :data:`HEAD_K`
        nominations of its channels (a set that depends on neither
        ``candidate_k`` nor ``limit``, so neither changes a verdict); without
        ``found``, among ``hits``. A hit that does not pass goes with ``drop``,
        else stays, marked as not passing.
        """
        if found is None:
            found = any(h.relevant for h in hits)
        kept: list[Hit] = []
        for hit in hits:
            own = bool(hit.relevant)
            passes = own or (found and self.keeps(hit))
            if passes and not own:
                hit.relevant = True
                hit.why = (
                    f"relevant beside a stronger hit (p={hit.relevance:.2f}, kept from {self.model.companion:.2f} "
                    "when a relevant hit leads a channel)" + (hit.why or "").split(")", 1)[-1]
                )
            elif not passes:
                hit.relevant = False
            if passes or not drop:
                kept.append(hit)
        return kept, len(hits) - len(kept)

    def _why(self, hit: Hit, p: float, relevant: bool, unanswered: Sequence[str] = ()) -> str:
        parts = []
        if self.vector_ran:
            sim = self._profile.get(hit.item.id) if self._profile else hit.similarity
            if sim is not None:
                ref = sim if self.scale is None else self.scale.read(sim)
                read = f", {ref:.2f} on the reference scale" if abs(ref - sim) >= 0.005 else ""
                parts.append(f"similarity {sim:.2f}{read} (noise {self.noise:.2f})")
            else:
                parts.append("not among the query's nearest vectors")
            if self.trust < 1.0 and self.scale is not None:
                parts.append(
                    f"vectors weighed {self.trust:.2f}: this embedder puts paraphrases "
                    f"{self.scale.separation or 0.0:.1f} spreads above unrelated texts "
                    f"(full weight from {TRUST_FULL:.0f})"
                )
        held = self.held(hit)
        if self.content:
            parts.append(
                f"holds {len(held)} of {len(self.content)} query words" + (f" ({', '.join(held)})" if held else "")
            )
        absent = self.absent_words()
        if absent:
            parts.append(f"nothing in scope mentions {', '.join(absent)}")
        verdict = "relevant" if relevant else "not relevant"
        if relevant and p < self.model.threshold:
            verdict = "relevant (holds every query word)"
        if unanswered:
            verdict = f"not relevant (asks about {', '.join(unanswered)}, which nothing in scope mentions)"
            parts.append(
                "no other name of the query, no word rare in scope"
                + (" and no vector standing out" if self.vector_ran else "")
                + " to answer for it"
            )
        return f"{verdict} (p={p:.2f}, threshold {self.model.threshold:.2f}): " + "; ".join(parts)
