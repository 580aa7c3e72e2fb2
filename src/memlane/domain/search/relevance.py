"""Why a hit is there, and the relevance decision: does its evidence make it an answer?

Every confirmed hit is judged from the evidence it actually has, never from
the shape of the query's words:

* ``similarity``: the cosine of its vector to the query's, calibrated per
  embedder as the excess over the embedder's *noise level* (the cosine that
  unrelated texts reach by chance, :data:`NOISE`), ``(s - noise) / (1 - noise)``.
  A hit the vector channel ran for but did not nominate is given the lowest
  similarity the channel nominated (an upper bound on its own).
* ``coverage``: the share of the query's content words (not stop words) that
  the hit holds in its text, key or namespace, each word weighted by its
  inverse document frequency *in the searched scope* (BM25's IDF), so a word
  most items hold counts little and a rare one much.
* ``rarity``: how rare the rarest query word it holds is in the scope,
  ``1 - log(1 + df) / log(1 + N)``.
* ``standout``: how far its similarity stands above the mean similarity of
  the vector channel's candidates (calibrated as above): the answer to a
  question stands out from the rest of the scope, while a question the memory
  cannot answer meets a flat field of look-alikes.
* ``absent``: the IDF-weighted share of the query's content words that occur
  nowhere in the scope: what the query asks about that the memory never
  mentions. It is scaled by how much the scope says (``log(1 + N)`` against a
  scope of :data:`SCOPE_REFERENCE` items): in a handful of notes most words of
  any question are absent, in a long conversation an absent word is telling.

A logistic model (:data:`VECTOR_MODEL` when the vector channel ran,
:data:`LEXICAL_MODEL` otherwise) turns the evidence into a probability of
relevance; a hit is relevant when it reaches the model's threshold. The
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

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ...values.model import Hit, Item
from ...values.stopwords import ENGLISH

_WORD = re.compile(r"\w+", re.UNICODE)

# Cosine similarity that unrelated texts reach by chance, per embedder name: the 99th percentile of the
# similarity between a question and a random document of a corpus it has nothing to do with (LoCoMo questions
# against SciFact abstracts and SciFact claims against LoCoMo turns, the higher of the two; shared/data,
# `bench/retrieval.py noise`, docs/benchmarks.md). Unknown embedders get DEFAULT_NOISE.
NOISE: dict[str, float] = {"minilm": 0.15, "minilm-numpy": 0.15, "fake": 0.42}
DEFAULT_NOISE = 0.30
# rows of the scope counted at most, and rows counted per word at most: the counts cost a search about 0.3 ms at
# these bounds (100k rows, SQLite); beyond them a scope's IDF is an estimate, and the fitting data lies within them
SCOPE_LIMIT = 5_000
DF_LIMIT = 1_000
# a scope this large makes an absent word full evidence; a smaller one proportionally less (log scale)
SCOPE_REFERENCE = 1_000


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
    """The query terms (in query order) that occur in the item's text, key or namespace."""
    if not terms:
        return []
    pattern, stems = _prefixes(tuple(terms))
    text = " ".join((item.text, item.key, *item.namespace)).lower()
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
    """Terms that are not stop words."""
    return [t for t in terms if t not in ENGLISH]


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
        embedder_name: the embedder that made the vectors (its noise level), or ``None``.
        vector_ran: whether the vector channel nominated for this search.
        vector_scores: the similarities the vector channel nominated: their
            lowest is the bound given to hits it did not nominate, their mean
            what a hit must stand out from.
    """

    def __init__(
        self,
        counts: Counts,
        terms: Sequence[str],
        embedder_name: str | None,
        *,
        vector_ran: bool,
        vector_scores: Sequence[float] = (),
    ) -> None:
        self._counts = counts
        # a query of stop words only is searched by them (rank.terms), so they are its content then
        self.content = content_terms(terms) or list(terms)
        self.noise = noise_level(embedder_name)
        self.vector_ran = vector_ran
        self.vector_floor = min(vector_scores, default=None)
        self.vector_mean = sum(vector_scores) / len(vector_scores) if vector_scores else None
        self.model = VECTOR_MODEL if vector_ran else LEXICAL_MODEL
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

    def _query_weights(self) -> tuple[dict[str, float], float, float, list[str]]:
        """What depends on the query and the scope only, worked out once: each content word's IDF, their sum,
        the evidence of the absent words, and those words."""
        if self._weights is None:
            rows, dfs = self.scope()
            idf = {w: _idf(dfs.get(w, 0), rows) for w in self.content}
            total = sum(idf.values()) or 1.0
            missing = [w for w in self.content if dfs.get(w, 0) == 0]
            weight = min(1.0, math.log1p(rows) / math.log1p(SCOPE_REFERENCE))
            self._weights = (idf, total, weight * sum(idf[w] for w in missing) / total, missing)
        return self._weights

    def evidence(self, hit: Hit) -> dict[str, float]:
        """The features the decision reads for ``hit`` (see the module docstring)."""
        rows, dfs = self.scope()
        idf, total, absent, _ = self._query_weights()
        held = [w for w in hit.matched if w in idf]
        coverage = sum(idf[w] for w in held) / total
        rarity = max((1.0 - math.log1p(dfs.get(w, 0)) / math.log1p(max(rows, 1)) for w in held), default=0.0)
        out = {"coverage": round(coverage, 4), "rarity": round(max(0.0, rarity), 4), "absent": round(absent, 4)}
        if self.vector_ran:
            sim = hit.similarity if hit.similarity is not None else self.vector_floor
            excess = 0.0 if sim is None else (sim - self.noise) / (1.0 - self.noise)
            mean = self.vector_mean
            standout = 0.0 if sim is None or mean is None else (sim - mean) / (1.0 - self.noise)
            out["similarity"] = round(excess, 4)
            out["standout"] = round(standout, 4)
            out["absent_similarity"] = round(absent * excess, 4)
        return out

    def judge(self, hit: Hit) -> Verdict:
        """Decide on one hit on its own evidence, saying why in words (see :meth:`settle` for the answer)."""
        p = self.model.probability(self.evidence(hit))
        relevant = p >= self.model.threshold
        return Verdict(relevant, round(p, 4), self._why(hit, p, relevant))

    def keeps(self, hit: Hit) -> bool:
        """Whether a judged hit may stay in an answer that holds a relevant hit (see :meth:`settle`)."""
        return hit.relevance is not None and hit.relevance >= self.model.companion

    def settle(self, hits: Sequence[Hit], *, drop: bool) -> tuple[list[Hit], int]:
        """The decision on a whole answer: its judged hits, and how many were dropped.

        An answer holds something relevant when one of its hits is relevant on
        its own; its other hits are then kept as context when they reach the
        model's ``companion`` probability, and pass the decision too. An answer
        without a relevant hit has nothing relevant: with ``drop`` every hit
        goes, else every hit stays, marked as not passing.
        """
        best = max((h.relevance or 0.0 for h in hits), default=0.0)
        found = best >= self.model.threshold
        kept: list[Hit] = []
        for hit in hits:
            passes = found and self.keeps(hit)
            if passes and not hit.relevant:
                hit.relevant = True
                hit.why = (
                    f"relevant beside a stronger hit (p={hit.relevance:.2f}, kept from {self.model.companion:.2f}; "
                    f"the answer's best {best:.2f})" + (hit.why or "").split(")", 1)[-1]
                )
            elif not passes:
                hit.relevant = False
            if passes or not drop:
                kept.append(hit)
        return kept, len(hits) - len(kept)

    def _why(self, hit: Hit, p: float, relevant: bool) -> str:
        parts = []
        if self.vector_ran:
            if hit.similarity is not None:
                parts.append(f"similarity {hit.similarity:.2f} (noise {self.noise:.2f})")
            else:
                parts.append("not among the vector channel's candidates")
        held = [w for w in hit.matched if w in self.content]
        if self.content:
            parts.append(
                f"holds {len(held)} of {len(self.content)} query words" + (f" ({', '.join(held)})" if held else "")
            )
        absent = self.absent_words()
        if absent:
            parts.append(f"nothing in scope mentions {', '.join(absent)}")
        verdict = "relevant" if relevant else "not relevant"
        return f"{verdict} (p={p:.2f}, threshold {self.model.threshold:.2f}): " + "; ".join(parts)
