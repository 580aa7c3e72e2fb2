"""Nominate, fuse, confirm: the ranked read pipeline.

1. *Nominate*: each channel proposes up to ``candidate_k`` item ids with a raw
   score and the item version it scored, over the caller's whole scope at once.
2. *Fuse*: Reciprocal Rank Fusion, ``score = sum(1 / (rrf_k + rank))`` over the
   channels that found an item. RRF orders results; its scores are not
   calibrated relevance and are only comparable inside one answer, which is why
   there is one ranking per search, never a merge of several.
3. *Confirm*: candidates are re-read by id from the live rows inside the scope,
   best first, in chunks, until ``limit + 1`` survive (the extra one tells
   whether the answer was truncated). Whatever is expired, deleted, replaced
   since it was scored or outside the scope is dropped and counted: an index
   can cost recall, never put a stale or forbidden answer in front of the caller.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...values.model import Hit, Item
from ...values.stopwords import ENGLISH
from . import relevance

_WORD = re.compile(r"\w+", re.UNICODE)
# a word, or what ends a sentence (the next word opens one, and its capital says nothing)
_WORD_OR_STOP = re.compile(r"\w+|[.?!]", re.UNICODE)
MAX_TERMS = 64


def terms(query: str) -> list[str]:
    """Plain lowercase word tokens of a query, de-duplicated, in order, without stop words.

    Only word characters survive, so quotes, ``AND``/``NEAR`` operators, ``*``
    and parentheses can never be parsed as index syntax: a backend quotes each
    term and ORs them. English stop words are dropped unless the query has
    nothing else (``"who is it"`` still searches for its words).
    """
    seen: dict[str, None] = {}
    for tok in _WORD.findall(query.lower()):
        if tok not in seen:
            seen[tok] = None
            if len(seen) >= MAX_TERMS:
                break
    content = [t for t in seen if t not in ENGLISH]
    return content or list(seen)


def names(query: str) -> frozenset[str]:
    """The words (lowercased) a query writes with a capital inside a sentence: "Maya", "NYC", "Leviviridae".

    The word opening a sentence says nothing, and neither does a query whose
    case carries no information: one without a lowercase word (all capitals,
    Title Case) or without a capital past its first word.
    """
    tokens = _WORD_OR_STOP.findall(query)
    words = [t for t in tokens if t not in ".?!"]
    if not any(w[:1].islower() for w in words) or not any(w[:1].isupper() for w in words[1:]):
        return frozenset()
    found: set[str] = set()
    opening = True
    for tok in tokens:
        if tok in ".?!":
            opening = True
            continue
        if not opening and tok[:1].isupper():
            found.add(tok.lower())
        opening = False
    return frozenset(found)


@dataclass(slots=True)
class Candidate:
    """A fused candidate: the item id plus what each channel said about it."""

    ref: Any
    score: float = 0.0
    ranks: dict[str, int] = field(default_factory=dict)
    channel_scores: dict[str, float] = field(default_factory=dict)
    # version each channel saw when it indexed the item; None = always current
    versions: dict[str, int] = field(default_factory=dict)


def fuse(
    nominations: Mapping[str, Sequence[tuple[Any, float] | tuple[Any, float, int]]],
    *,
    rrf_k: int = 60,
    weights: Mapping[str, float] | None = None,
) -> list[Candidate]:
    """Reciprocal Rank Fusion of per-channel nominations (best first).

    A nomination is ``(ref, raw_score)``, or ``(ref, raw_score, version)``
    when the channel's index may lag the item (vectors): the confirm step then
    drops the candidate unless the live item still has that version.
    ``weights`` scale each channel's ``1 / (rrf_k + rank)`` (default 1.0).
    Ties in fused score are broken by the ref so results are deterministic.
    """
    by_ref: dict[Any, Candidate] = {}
    for channel, hits in nominations.items():
        weight = 1.0 if weights is None else weights.get(channel, 1.0)
        for rank, nomination in enumerate(hits, 1):
            ref, raw = nomination[0], nomination[1]
            cand = by_ref.get(ref)
            if cand is None:
                cand = by_ref[ref] = Candidate(ref)
            cand.score += weight / (rrf_k + rank)
            cand.ranks[channel] = rank
            cand.channel_scores[channel] = raw
            if len(nomination) > 2:
                cand.versions[channel] = nomination[2]  # type: ignore[misc]
    return sorted(by_ref.values(), key=lambda c: (-c.score, c.ref))


def confirm(
    candidates: Sequence[Candidate],
    hydrate: Callable[[Sequence[Any]], Mapping[Any, Item]],
    limit: int,
) -> tuple[list[Hit], int, bool]:
    """Re-read candidates best first until ``limit`` + 1 are confirmed (no decision).

    Returns:
        ``(hits, dropped, truncated)``; see :func:`confirm_relevant`.
    """
    hits, dropped, truncated, _ = confirm_relevant(candidates, hydrate, limit)
    return hits, dropped, truncated


def confirm_relevant(
    candidates: Sequence[Candidate],
    hydrate: Callable[[Sequence[Any]], Mapping[Any, Item]],
    limit: int,
    *,
    terms: Sequence[str] = (),
    accept: Callable[[Hit], bool] | None = None,
) -> tuple[list[Hit], int, bool, int]:
    """Re-read candidates best first until ``limit`` + 1 are confirmed and accepted.

    ``hydrate`` maps candidate ids to live items the caller may see (one read,
    liveness and scope applied in it); a candidate whose item is missing there,
    or whose version differs from what a channel scored, is dropped. Each
    confirmed hit is explained (the ``terms`` it contains, its vector
    similarity) and then offered to ``accept`` (the relevance decision, which
    records its verdict on the hit); a refused one is counted, not returned.

    Returns:
        ``(hits, dropped, truncated, refused)``.
    """
    hits: list[Hit] = []
    dropped = refused = 0
    want = limit + 1
    pos = 0
    while pos < len(candidates) and len(hits) < want:
        chunk = candidates[pos : pos + max(want - len(hits), 8)]
        pos += len(chunk)
        live = hydrate([cand.ref for cand in chunk])
        for cand in chunk:
            item = live.get(cand.ref)
            if item is None or any(v != item.version for v in cand.versions.values()):
                dropped += 1
                continue
            hit = Hit(
                item,
                round(cand.score, 10),
                cand.ranks,
                cand.channel_scores,
                relevance.matched(terms, item),
                cand.channel_scores.get("vector"),
            )
            if accept is not None and not accept(hit):
                refused += 1
                continue
            hits.append(hit)
    truncated = len(hits) > limit
    return hits[:limit], dropped, truncated, refused
