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
