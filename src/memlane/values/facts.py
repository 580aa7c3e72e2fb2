"""Records of the facts layer and the envelope its assured reads return.

Every record is a plain snapshot with ``to_dict``/``from_dict`` (times as
ISO-8601 text on the wire), like :mod:`memlane.values.model`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from .model import Namespace

R = TypeVar("R", bound="Record")


def _parse_ns(raw: Any) -> Namespace:
    return tuple(raw.split("/")) if isinstance(raw, str) else tuple(raw)


class Record:
    """Shared JSON mapping: datetimes as ISO text, namespaces as lists of segments (like items)."""

    _TIMES: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif f.name == "namespace":
                value = list(value)
            elif isinstance(value, Record):
                value = value.to_dict()
            elif isinstance(value, list) and value and isinstance(value[0], Record):
                value = [x.to_dict() for x in value]
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls: type[R], d: dict[str, Any]) -> R:
        """Rebuild from ``to_dict()`` output (unknown fields ignored)."""
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in d:
                continue
            value = d[f.name]
            if f.name in cls._TIMES and isinstance(value, str):
                value = datetime.fromisoformat(value)
            elif f.name == "namespace":
                value = _parse_ns(value)
            kwargs[f.name] = value
        return cls(**kwargs)


@dataclass(slots=True)
class Entity(Record):
    """A person, project or thing. ``merged_into`` is set once it was merged away."""

    _TIMES: ClassVar[tuple[str, ...]] = ("created_at",)

    id: str
    namespace: Namespace
    kind: str
    name: str
    aliases: list[str] = field(default_factory=list)
    profile: str = ""
    merged_into: str | None = None
    created_at: datetime | None = None


@dataclass(slots=True)
class Fact(Record):
    """``subject predicate object`` with valid time and belief time.

    ``object`` is an entity id or None; ``value`` the JSON object otherwise.
    ``evidence_count`` counts distinct sources as of the read's belief time.
    """

    _TIMES: ClassVar[tuple[str, ...]] = ("valid_from", "valid_to", "recorded_at", "retracted_at")

    id: str
    version: int
    namespace: Namespace
    subject: str
    subject_name: str
    predicate: str
    object: str | None
    object_name: str | None
    value: Any
    text: str
    valid_from: datetime | None
    valid_to: datetime | None
    recorded_at: datetime
    retracted_at: datetime | None
    evidence_count: int = 0
    sources: list[str] = field(default_factory=list)
    score: float | None = None
    ranks: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Document(Record):
    """A source split into ordered chunks."""

    _TIMES: ClassVar[tuple[str, ...]] = ("created_at", "recorded_at")

    id: str
    namespace: Namespace
    title: str
    source: str | None
    created_at: datetime | None
    recorded_at: datetime
    chunk_count: int
    chunk_ids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Chunk(Record):
    """One ordered passage of a document."""

    id: str
    document_id: str
    namespace: Namespace
    position: int
    text: str
    document_title: str = ""
    score: float | None = None
    ranks: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Claim(Record):
    """What a source said. Superseded claims are not current testimony."""

    _TIMES: ClassVar[tuple[str, ...]] = ("asserted_at", "recorded_at", "superseded_at")

    id: str
    namespace: Namespace
    text: str
    speaker: str | None
    asserted_at: datetime | None
    chunk_id: str | None
    about: list[str]
    recorded_at: datetime
    superseded_by: str | None = None
    superseded_at: datetime | None = None


@dataclass(slots=True)
class ClaimGroup(Record):
    """Current claims that say the same thing; ``corroboration`` counts them."""

    text: str
    corroboration: int
    claims: list[Claim]
    score: float = 0.0
    ranks: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClaimGroup:
        """Rebuild from ``to_dict()`` output."""
        return cls(
            d["text"],
            d["corroboration"],
            [Claim.from_dict(c) for c in d["claims"]],
            d.get("score", 0.0),
            d.get("ranks") or {},
        )


@dataclass(slots=True)
class Path(Record):
    """Entities joined by facts, start first; returned whole or not at all."""

    entities: list[str]
    names: list[str]
    facts: list[Fact]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Path:
        """Rebuild from ``to_dict()`` output."""
        return cls(d["entities"], d["names"], [Fact.from_dict(f) for f in d["facts"]])


@dataclass(slots=True)
class Candidate(Record):
    """One entity a name may refer to, with what sets it apart from the others."""

    entity: Entity
    matched: str
    facts: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Candidate:
        """Rebuild from ``to_dict()`` output."""
        return cls(Entity.from_dict(d["entity"]), d["matched"], d.get("facts") or [])


SECTIONS: dict[str, type[Record]] = {
    "entities": Candidate,
    "facts": Fact,
    "claims": ClaimGroup,
    "passages": Chunk,
    "paths": Path,
}


@dataclass(slots=True)
class Context:
    """The envelope of the facts layer's reads: results kept in named sections.

    Attributes:
        operation: the verb (``facts_context``, ``resolve_entity``...).
        params: the effective parameters.
        sections: results by kind (``facts``, ``claims``, ``passages``,
            ``entities``, ``paths``), each best first, never blended.
        counts: candidates per channel and section, neighbourhood sizes.
        dropped: what the confirm step or the time rule removed, by reason.
        truncated: sections where more results existed than were returned.
        timings: milliseconds per phase.
        notes: anything the caller should know.
        status: ``resolve_entity`` only: ``resolved``, ``ambiguous`` or ``none``.
    """

    operation: str
    params: dict[str, Any]
    sections: dict[str, list[Any]]
    counts: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    truncated: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    status: str | None = None

    def __getitem__(self, section: str) -> list[Any]:
        return self.sections[section]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "operation": self.operation,
            "params": self.params,
            "status": self.status,
            "sections": {name: [r.to_dict() for r in rows] for name, rows in self.sections.items()},
            "counts": self.counts,
            "dropped": self.dropped,
            "truncated": self.truncated,
            "timings": self.timings,
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Context:
        """Rebuild from ``to_dict()`` output."""
        return cls(
            operation=d["operation"],
            params=d.get("params") or {},
            sections={
                name: [SECTIONS[name].from_dict(r) for r in rows] for name, rows in (d.get("sections") or {}).items()
            },
            counts=d.get("counts") or {},
            dropped=d.get("dropped") or {},
            truncated=d.get("truncated") or [],
            timings=d.get("timings") or {},
            notes=d.get("notes") or [],
            status=d.get("status"),
        )


KINDS: dict[str, type[Record]] = {"ent": Entity, "fact": Fact, "doc": Document, "chunk": Chunk, "claim": Claim}


def record_from_dict(d: dict[str, Any] | None) -> Record | None:
    """Rebuild a ``lookup`` result from its ``to_dict()`` form, by its id's prefix."""
    if d is None:
        return None
    return KINDS[d["id"].split("_", 1)[0]].from_dict(d)
