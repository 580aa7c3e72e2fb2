"""An optional extractor: a caller's model turns conversation turns into entities, facts and claims.

memlane never runs a language model itself. A caller passes an
:class:`Extractor` to ``add_conversation(..., extractor=...)`` (or calls
:func:`run` on turns already stored); memlane hands it the turns just written
and files what it answers through the facts API:

* each entity is resolved by name in the namespace, or created;
* each fact is asserted once per turn it cites, with the turn's address
  (``"<namespace>#<session>.t<turn>"``) as its evidence source, so ten turns
  saying the same thing give one fact with ``evidence_count`` 10;
* each claim keeps its turn's speaker and time, and cites the passage of its
  turn: the turns read are also filed as a document, one chunk per turn, so
  ``claims_and_sources_context`` and ``neighbours`` return the turn and its
  neighbours beside the claim.

:class:`OpenAIExtractor` asks an OpenAI-compatible ``/chat/completions``
endpoint for that answer as JSON. It uses only the standard library.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..values import chat
from ..values.errors import ExtractorError, ValidationError
from ..values.facts import Claim, Document, Fact
from ..values.model import Item, Namespace, namespace_text
from .conversation import Turn, turn_key

MAX_EXTRACTED = 10_000  # entities + facts + claims from one call


@dataclass(frozen=True, slots=True)
class EntityDraft:
    """An entity the model found: its name, kind and other names."""

    name: str
    kind: str = "thing"
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FactDraft:
    """``subject predicate object`` from the turns numbered in ``turns``.

    ``subject`` names an entity; ``object`` is an entity's name (when it names
    one of the extraction's entities) or any JSON value.
    """

    subject: str
    predicate: str
    object: Any
    turns: tuple[int, ...] = ()
    valid_from: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimDraft:
    """What a turn said, in one sentence, and the entities (by name) it is about."""

    text: str
    turns: tuple[int, ...] = ()
    about: tuple[str, ...] = ()
    speaker: str | None = None


@dataclass(frozen=True, slots=True)
class Extraction:
    """An extractor's answer; turn numbers refer to :attr:`Turn.turn` of the turns it was given."""

    entities: tuple[EntityDraft, ...] = ()
    facts: tuple[FactDraft, ...] = ()
    claims: tuple[ClaimDraft, ...] = ()

    @classmethod
    def from_dict(cls, d: Any) -> Extraction:
        """Read the JSON shape ``{entities: [...], facts: [...], claims: [...]}``; bad shapes raise ExtractorError."""
        if not isinstance(d, Mapping):
            raise ExtractorError(f"an extraction is a JSON object with entities, facts and claims, not {d!r:.80}")
        try:
            entities = tuple(
                EntityDraft(
                    _text(e["name"]), _text(e.get("kind") or "thing"), tuple(map(_text, e.get("aliases") or ()))
                )
                for e in _list(d, "entities")
            )
            facts = tuple(
                FactDraft(
                    _text(f["subject"]),
                    _text(f["predicate"]),
                    f["object"],
                    _turns(f.get("turns")),
                    None if f.get("valid_from") is None else _text(f["valid_from"]),
                )
                for f in _list(d, "facts")
            )
            claims = tuple(
                ClaimDraft(
                    _text(c["text"]),
                    _turns(c.get("turns")),
                    tuple(map(_text, c.get("about") or ())),
                    None if c.get("speaker") is None else _text(c["speaker"]),
                )
                for c in _list(d, "claims")
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ExtractorError(
                f"the extraction has a malformed entry ({e!r}); see memlane.domain.extract.PROMPT"
            ) from None
        if len(entities) + len(facts) + len(claims) > MAX_EXTRACTED:
            raise ExtractorError(f"the extraction has more than {MAX_EXTRACTED:,} entries; extract fewer turns at once")
        return cls(entities, facts, claims)


def _list(d: Mapping[str, Any], name: str) -> list[Any]:
    raw = d.get(name) or []
    if not isinstance(raw, list) or not all(isinstance(x, Mapping) for x in raw):
        raise TypeError(f"{name} must be a list of objects")
    return raw


def _text(raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"expected non-empty text, got {raw!r:.80}")
    return raw.strip()


def _turns(raw: Any) -> tuple[int, ...]:
    if raw is None:
        return ()
    if isinstance(raw, int) and not isinstance(raw, bool):
        return (raw,)
    if not isinstance(raw, list) or any(isinstance(n, bool) or not isinstance(n, int) for n in raw):
        raise TypeError(f"turns must be a list of turn numbers, not {raw!r:.80}")
    return tuple(raw)


@runtime_checkable
class Extractor(Protocol):
    """Turns conversation turns into entities, facts and claims (a caller's model)."""

    def extract(self, turns: Sequence[Turn]) -> Extraction:
        """Read ``turns`` (in order; each has ``turn``, ``speaker``, ``text``, ``at``) and say what they establish."""
        ...


@dataclass
class Extracted:
    """What :func:`run` filed: entity ids by name, the facts and claims written, the turns' document."""

    entities: dict[str, str] = field(default_factory=dict)
    facts: list[Fact] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    document: Document | None = None


def source(namespace: Namespace, turn: Turn) -> str:
    """A turn's address as a fact's evidence source: ``"<namespace>#<session>.t<turn>"``."""
    return f"{namespace_text(namespace)}#{turn_key(turn.session, turn.turn)}"


def _line(turn: Turn) -> str:
    when = "" if turn.at is None else f" ({turn.at.date().isoformat()})"
    return f"{turn.speaker}{when}: {turn.text}"


def run(target: Any, namespace: Namespace, items: Sequence[Item], extractor: Extractor) -> Extracted:
    """Ask ``extractor`` about the turn items ``items`` and file its answer through ``target``'s facts API.

    ``target`` is a :class:`~memlane.Memory` or a :class:`~memlane.Client`. The
    turns stay written whatever the extractor does; an extractor that fails or
    answers nonsense raises :class:`ExtractorError` and files nothing.
    """
    turns = [Turn.from_value(i.value) for i in items]
    if not turns:
        return Extracted()
    try:
        answer = extractor.extract(turns)
    except ExtractorError:
        raise
    except Exception as e:  # a plug-in failed: say which, keep the cause
        raise ExtractorError(f"extractor {type(extractor).__name__} failed: {e}") from e
    if isinstance(answer, Mapping):
        answer = Extraction.from_dict(answer)
    if not isinstance(answer, Extraction):
        raise ExtractorError(f"extractor {type(extractor).__name__} returned {type(answer).__name__}, not Extraction")
    return apply(target, namespace, turns, answer)


def apply(target: Any, namespace: Namespace, turns: Sequence[Turn], extraction: Extraction) -> Extracted:
    """File ``extraction`` about ``turns`` (already stored in ``namespace``) through ``target``'s facts API."""
    by_number = {t.turn: t for t in turns}

    def cited(numbers: Sequence[int], what: str) -> list[Turn]:
        unknown = [n for n in numbers if n not in by_number]
        if unknown:
            raise ExtractorError(
                f"{what} cites turns {unknown} the extractor was not given; it had {sorted(by_number)}"
            )
        return [by_number[n] for n in dict.fromkeys(numbers)]

    # check every citation before anything is filed
    for f in extraction.facts:
        cited(f.turns, f"fact {f.subject} {f.predicate}")
    for c in extraction.claims:
        cited(c.turns, f"claim {c.text[:40]!r}")

    out = Extracted()
    kinds = {e.name: e for e in extraction.entities}

    def entity(name: str) -> str:
        if name not in out.entities:
            found = target.resolve_entity(name, namespace_prefix=namespace)
            same = [c.entity for c in found.sections.get("entities", []) if tuple(c.entity.namespace) == namespace]
            if found.status == "resolved" and same:
                out.entities[name] = same[0].id
            else:
                draft = kinds.get(name, EntityDraft(name))
                out.entities[name] = target.add_entity(namespace, name, kind=draft.kind, aliases=list(draft.aliases)).id
        return out.entities[name]

    for e in extraction.entities:
        entity(e.name)
    for f in extraction.facts:
        subject = entity(f.subject)
        obj = entity(f.object) if isinstance(f.object, str) and f.object in kinds else f.object
        sources: list[str | None] = [source(namespace, t) for t in cited(f.turns, "fact")] or [None]
        for src in sources:  # one assertion per cited turn: each is evidence
            out.facts.append(
                target.assert_fact(namespace, subject, f.predicate, obj, valid_from=f.valid_from, source=src)
            )
    if extraction.claims:
        first = turns[0]
        out.document = target.add_document(
            namespace,
            f"conversation {first.session} turns {turns[0].turn}-{turns[-1].turn}",
            [_line(t) for t in turns],
            source=f"{namespace_text(namespace)}#{first.session}",
            created_at=first.at,
            chunk_chars=100_000,
        )
        # one chunk per turn unless a turn was too long for one
        chunk_of = (
            dict(zip((t.turn for t in turns), out.document.chunk_ids, strict=True))
            if len(out.document.chunk_ids) == len(turns)
            else {}
        )
        records = []
        for c in extraction.claims:
            at = cited(c.turns, "claim")
            records.append(
                {
                    "text": c.text,
                    "speaker": c.speaker or (at[0].speaker if at else None),
                    "asserted_at": at[0].at if at else None,
                    "chunk": chunk_of.get(at[0].turn) if at else None,
                    "about": [entity(name) for name in c.about],
                }
            )
        out.claims = list(target.add_claims(namespace, records))
    return out


PROMPT = """You extract durable knowledge from a conversation for an agent's memory.
You get numbered turns: "[turn] speaker (date): text". Answer with one JSON object only:
{"entities": [{"name": "...", "kind": "person|place|project|thing|...", "aliases": ["..."]}],
 "facts": [{"subject": "<entity name>", "predicate": "<verb_phrase>", "object": "<entity name or value>",
            "turns": [<turn numbers>], "valid_from": "<ISO date or null>"}],
 "claims": [{"text": "<one self-contained sentence, names and dates resolved>", "speaker": "<who said it>",
             "turns": [<turn numbers>], "about": ["<entity name>", ...]}]}
Only state what the turns say. Resolve relative dates ("yesterday") against the turn's date.
Leave a list empty when there is nothing for it."""


class OpenAIExtractor:
    """An extractor backed by an OpenAI-compatible ``/chat/completions`` endpoint, answering JSON.

    Args:
        model: the chat model name.
        base_url: defaults to ``$MEMLANE_CHAT_BASE_URL``, ``$OPENAI_BASE_URL``
            or ``https://api.openai.com/v1``.
        api_key: defaults to ``$MEMLANE_CHAT_API_KEY`` or ``$OPENAI_API_KEY``.
        timeout: seconds per request.
        prompt: the system prompt (:data:`PROMPT` by default).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60,
        prompt: str = PROMPT,
    ) -> None:
        if not model:
            raise ValidationError("model", "name the chat model to use")
        self.model = model
        self.base_url = (
            base_url
            or os.environ.get("MEMLANE_CHAT_BASE_URL")
            or os.environ.get("OPENAI_BASE_URL")
            or "https://api.openai.com/v1"
        ).rstrip("/")
        self._api_key = api_key or os.environ.get("MEMLANE_CHAT_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout
        self.prompt = prompt

    def __repr__(self) -> str:  # never the key
        return f"OpenAIExtractor(model={self.model!r}, base_url={self.base_url!r})"

    def extract(self, turns: Sequence[Turn]) -> Extraction:
        """Ask the model for the extraction as a JSON object and read it."""
        lines = "\n".join(f"[{t.turn}] {_line(t)}" for t in turns)
        body = {
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": self.prompt}, {"role": "user", "content": lines}],
        }
        content = chat.complete(self.base_url, self._api_key, body, self.timeout, ExtractorError)
        return Extraction.from_dict(_json_object(content))


def _json_object(content: Any) -> Any:
    if not isinstance(content, str):
        raise ExtractorError("the chat model's reply has no text")
    match = re.search(r"\{.*\}", content, re.S)  # some models wrap the object in prose or a code fence
    try:
        return json.loads(match.group(0) if match else content)
    except ValueError:
        raise ExtractorError(
            "the chat model did not reply with a JSON object; try a model that supports JSON mode"
        ) from None


__all__ = [
    "PROMPT",
    "ClaimDraft",
    "EntityDraft",
    "Extracted",
    "Extraction",
    "Extractor",
    "ExtractorError",
    "FactDraft",
    "OpenAIExtractor",
    "apply",
    "run",
]
