"""Text helpers of the facts layer: name normalisation and document chunking."""

from __future__ import annotations

import re
import unicodedata

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)
_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
DEFAULT_CHUNK_CHARS = 1200


def normalise(text: str) -> str:
    """A name or claim reduced for matching: compatibility forms, no accents, casefolded, words only.

    ``"José  O'Neil"`` and ``"jose o neil"`` normalise alike; no stemming, no
    synonyms, so two different names never collide by accident of language.
    """
    decomposed = unicodedata.normalize("NFKD", text)
    bare = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return _NON_WORD.sub(" ", bare.casefold()).strip()


def _hard_split(text: str, limit: int) -> list[str]:
    pieces: list[str] = []
    while len(text) > limit:
        cut = text.rfind(" ", 0, limit)
        cut = cut if cut > limit // 2 else limit
        pieces.append(text[:cut].strip())
        text = text[cut:].strip()
    if text:
        pieces.append(text)
    return pieces


def _bounded(paragraph: str, limit: int) -> list[str]:
    """A paragraph as sentences packed under ``limit`` (long sentences cut at spaces)."""
    if len(paragraph) <= limit:
        return [paragraph]
    parts: list[str] = []
    for sentence in _SENTENCE.split(paragraph):
        parts.extend(_hard_split(sentence, limit))
    return _pack(parts, limit, " ")


def _pack(parts: list[str], limit: int, joiner: str) -> list[str]:
    out: list[str] = []
    for part in parts:
        if out and len(out[-1]) + len(joiner) + len(part) <= limit:
            out[-1] = out[-1] + joiner + part
        else:
            out.append(part)
    return out


def chunk(text: str | list[str], limit: int = DEFAULT_CHUNK_CHARS) -> list[str]:
    """Ordered passages of at most ``limit`` characters.

    A string is split at blank lines, small paragraphs are packed together and
    long ones split at sentence ends. A list is taken as already split: one
    passage per element (an element over the limit is still split).
    """
    if isinstance(text, list):
        return [piece for part in text if part.strip() for piece in _bounded(part.strip(), limit)]
    paragraphs = [p.strip() for p in _PARAGRAPH.split(text) if p.strip()]
    pieces = [piece for p in paragraphs for piece in _bounded(p, limit)]
    return _pack(pieces, limit, "\n\n")


# How much of the neighbouring passages a chunk is indexed with, in characters each side. Chunks of a list
# (one per turn, paragraph or line) are short, so a side usually holds several; a long chunk's neighbours
# are cut to their nearest words. Measured on shared/data LoCoMo (bench/retrieval.py locomo --facts): see
# docs/benchmarks.md, "Documents indexed with their context".
CONTEXT_CHARS = 400
# How much of that a chunk's vector is made with, each side: none, the title only. Neighbouring chunks share
# most of their windows, so with them their vectors blur together (BM25 weighs the context down instead). On the
# same LoCoMo run with MiniLM, passages hit@10 / MRR@20: 0.854 / 0.546 with 0, 0.856 / 0.548 with 150 (2.2x the
# word pieces embedded), 0.844 / 0.492 with 400 (4x).
VECTOR_CONTEXT_CHARS = 0


def _edge(text: str, room: int, *, tail: bool) -> str:
    """At most ``room`` characters of ``text``: its end (``tail``) or its start, cut at a space when one is near."""
    if len(text) <= room:
        return text
    if tail:
        piece = text[len(text) - room :]
        cut = piece.find(" ")
        return piece[cut + 1 :] if 0 <= cut < room // 2 else piece
    piece = text[:room]
    cut = piece.rfind(" ")
    return piece[:cut] if cut > room // 2 else piece


def _side(pieces: list[str], *, tail: bool, budget: int) -> str:
    """Neighbours nearest first, whole while they fit, the last one cut; returned in document order."""
    taken: list[str] = []
    room = budget
    for piece in pieces:
        if room <= 0:
            break
        part = _edge(piece, room, tail=tail)
        if part:
            taken.append(part)
        room -= len(part) + 1
    return " ".join(reversed(taken) if tail else taken)


def context(title: str, pieces: list[str], i: int, budget: int = CONTEXT_CHARS) -> str:
    """What ``pieces[i]`` is indexed with besides its own text: the title, then up to ``budget`` characters of the
    passages before it and ``budget`` of those after it, one line each (a title never holds a line break).

    Bounded whatever the chunk sizes: at most ``len(title) + 2 * budget + 2`` characters.
    """
    before = _side(pieces[i - 1 :: -1] if i else [], tail=True, budget=budget)
    after = _side(pieces[i + 1 :], tail=False, budget=budget)
    return "\n".join((title, before, after))


def embedded(text: str, context: str | None, budget: int = VECTOR_CONTEXT_CHARS) -> str:
    """What a chunk's vector is made from: the title, the chunk, then up to ``budget`` characters of its
    neighbours each side (their ends nearest the chunk).

    The chunk comes before the neighbours so that an embedder that truncates long input (MiniLM reads 256
    word pieces) keeps it; a chunk without context (stored before migration m011_chunk_context) is embedded alone.
    """
    if not context:
        return text
    title, _, around = context.partition("\n")
    before, _, after = around.partition("\n")
    near = (_edge(before, budget, tail=True), _edge(after, budget, tail=False)) if budget > 0 else ()
    return "\n".join(part for part in (title, text, *near) if part)
