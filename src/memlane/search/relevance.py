"""Why a hit is there, and the relevance floor that drops hits with no real support.

A hit is explained by the query words it contains (in its text, key or
namespace: ``matched``) and by the cosine similarity of its vector to the
query's (``similarity``). The floor keeps a hit when either is real evidence:

* its similarity reaches the embedder's *noise level*: the cosine that
  unrelated texts reach by chance (``NOISE``, measured per embedder, see
  docs/benchmarks.md, "Relevance floor"); or
* it contains two or more of the query's content words (not stop words), or
  one content word that is not *common* in the searched scope (a query of
  stop words only is answered by them). A word is
  common when at least ``COMMON_SHARE`` of the items in scope (and at least
  ``COMMON_MIN_DOCS`` of them) contain it; a query of one content word makes
  every word it matched sufficient, whatever its frequency.

Everything else (only stop words, only one common word, a vector similarity
at noise level) is dropped and counted in the envelope's ``below_floor``.

Names decide what a question is about: when a query names someone or
something (a capitalised word past its first, such as "Caroline" or "LGBTQ")
and none of its names occurs anywhere in the searched scope, the memory holds
nothing about it, and only hits at ``STRONG`` similarity or more, or holding
``ABSENT_NAME_WORDS`` of its other words, are kept.
Word matching here is for explanation and the floor only (the index does the
searching); it compares light stems, so "travelling" matches "travel", and a
stem of four letters or more also matches a longer word it begins
("inhibit" / "inhibition"): erring towards support, never against it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache

from ..model import Hit, Item
from .stopwords import ENGLISH

_WORD = re.compile(r"\w+", re.UNICODE)

# Cosine similarity that unrelated texts reach by chance, per embedder name: the 99th percentile of the
# similarity between a question and a random document of a corpus it has nothing to do with (LoCoMo questions
# against SciFact abstracts and SciFact claims against LoCoMo turns, the higher of the two; shared/data,
# `bench/retrieval.py noise`, docs/benchmarks.md). Unknown embedders get DEFAULT_NOISE.
NOISE: dict[str, float] = {"minilm": 0.15, "minilm-numpy": 0.15, "fake": 0.42}
DEFAULT_NOISE = 0.30
# a word in at least this share of the items in scope is common (calibrated on LoCoMo, bench/retrieval.py floor)
COMMON_SHARE = 0.05
COMMON_MIN_DOCS = 3
# rows of the scope counted at most (a word in COMMON_SHARE of this many is common in any larger scope)
SCOPE_LIMIT = 20_000

# the similarity of a clear paraphrase, kept even when the query's names occur nowhere in scope
STRONG = 0.6
# ... and the query words that are as good: a SciFact claim naming a gene the abstracts spell otherwise still
# matches three or more of its other words in the right abstract, a LoCoMo question asked in another
# conversation rarely does (bench/retrieval.py --abstention)
ABSENT_NAME_WORDS = 3
_NOT_NAMES = frozenset(
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday would could might shall".split()
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


def names(query: str) -> list[str]:
    """The names in a query, lowercased: capitalised words past the first that are not stop words, months or days."""
    words = _WORD.findall(query)
    found = [
        w.lower()
        for w in words[1:]
        if w[:1].isupper() and not w.isdigit() and w.lower() not in ENGLISH and w.lower() not in _NOT_NAMES
    ]
    return list(dict.fromkeys(found))


def noise_level(embedder_name: str | None) -> float:
    """The cosine similarity at which an embedder's matches are noise (see ``NOISE``)."""
    if embedder_name is None:
        return DEFAULT_NOISE
    return NOISE.get(embedder_name, NOISE.get(embedder_name.split(":", 1)[0], DEFAULT_NOISE))


def content_terms(terms: Iterable[str]) -> list[str]:
    """Terms that are not stop words."""
    return [t for t in terms if t not in ENGLISH]


def clears(
    hit: Hit,
    content: Sequence[str],
    noise: float,
    is_common: Callable[[str], bool],
) -> bool:
    """Whether a hit has support beyond stop words, one common word, or noise-level similarity.

    ``content`` are the query's content words; ``is_common(word)`` answers
    from the scope's document frequencies (called only when it decides).
    """
    if hit.similarity is not None and hit.similarity >= noise:
        return True
    # a query of stop words only (rank.terms searches them then) is answered by them
    words = [w for w in hit.matched if w not in ENGLISH] if content else list(hit.matched)
    if not words:
        # the index found it lexically but the light stemmer saw no word: trust the index
        return "lexical" in hit.ranks and not hit.matched and bool(content)
    if len(words) >= 2 or len(content) <= 1:
        return True
    return not is_common(words[0])


Counts = Callable[[Sequence[str], int], tuple[int, Mapping[str, int]]]


def floor(
    counts: Counts,
    query: str,
    terms: Sequence[str],
    embedder_name: str | None,
    *,
    enabled: bool = True,
    min_score: float | None = None,
    notes: list[str] | None = None,
) -> Callable[[Hit], bool] | None:
    """The test one confirmed hit must pass: the relevance floor (``enabled``) and ``min_score``.

    ``counts(words, limit)`` returns the rows in the searched scope and, per
    word, the rows containing it, each count stopping at ``limit``; it is
    asked whether the query's names occur at all, and about a word that alone
    supports a hit, once per word. ``notes`` receives what the caller should
    know. ``None`` when there is nothing to test.
    """
    if not enabled and min_score is None:
        return None
    content = content_terms(terms)
    noise = noise_level(embedder_name)
    named = names(query) if enabled else []
    absent = bool(named) and not any(counts(named, 1)[1].values())
    if absent and notes is not None:
        notes.append(f"no item in scope mentions {', '.join(named)}; only close paraphrases are kept")
    common: dict[str, bool] = {}
    scope: list[int] = []

    def is_common(word: str) -> bool:
        if word not in common:
            if not scope:
                scope.append(counts((), SCOPE_LIMIT)[0])
            most = max(COMMON_MIN_DOCS, math.ceil(COMMON_SHARE * scope[0]))
            common[word] = counts((word,), most)[1].get(word, 0) >= most
        return common[word]

    def accept(hit: Hit) -> bool:
        if min_score is not None and hit.score < min_score:
            return False
        if enabled and absent:  # only a close paraphrase, or many of the query's other words, are support enough
            if hit.similarity is not None and hit.similarity >= max(noise, STRONG):
                return True
            return sum(1 for w in hit.matched if w in content) >= ABSENT_NAME_WORDS
        return not enabled or clears(hit, content, noise, is_common)

    return accept
