"""HTTP operations of the facts layer, generated from one table.

Each row names an AgentView method, how to render its result, and a summary;
its parameters (which are required, what the others default to) are read from
the core's signature by :mod:`memlane.operations`. Bodies stay loose (``Any``):
the core validates every value once and names the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends
from pydantic import BaseModel, ConfigDict, create_model

from .. import operations
from ..access import AgentView

# name: (result, summary); the parameters, required and optional with their defaults, are the core's own
# (memlane.operations reads them from Memory's signatures)
OPERATIONS: dict[str, tuple[str, str]] = {
    "add_entity": ("record", "Create an entity (person, project, thing); names need not be unique."),
    "add_alias": ("record", "Give an entity another name."),
    "merge_entities": ("record", "Merge one entity into another; the merged-away id keeps resolving to the survivor."),
    "assert_fact": ("record", "Assert subject-predicate-object; a fact that already holds gains evidence instead."),
    "retract_fact": ("record", "End belief in a fact (still readable at earlier believed_at)."),
    "end_fact": ("record", "Record that a fact stopped holding in the world."),
    "add_document": ("record", "Store a source split into ordered chunks."),
    "add_claim": ("record", "Record what a source said, from which chunk, about which entities."),
    "add_claims": (
        "claims",
        "Record many claims in one transaction: each {text, speaker?, asserted_at?, chunk?, about?}.",
    ),
    "supersede_claim": ("record", "Mark a claim as no longer current testimony."),
    "resolve_entity": ("context", "A name to one entity, several candidates (with what tells them apart), or none."),
    "facts_context": ("context", "What is true at a time, searched inside the entities' graph neighbourhood."),
    "claims_and_sources_context": (
        "context",
        "What was said: grouped claims with corroboration, and passages, kept apart.",
    ),
    "combined_context": ("context", "facts_context and claims_and_sources_context side by side, never blended."),
    "lookup": ("records", "Entities, facts, documents, chunks and claims by id (null if unseen)."),
    "hydrate": ("records", "lookup keeping only what is current now."),
    "traverse": ("context", "Paths of entity-to-entity facts, whole or not at all."),
    "neighbours": ("chunks", "A chunk with its neighbouring passages."),
}


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RecordOut(_Loose):
    """An entity, fact, document, chunk or claim (see docs/python-api.md)."""

    model_config = ConfigDict(extra="allow")
    id: str


class ContextOut(BaseModel):
    operation: str
    params: dict[str, Any]
    status: str | None = None
    sections: dict[str, list[dict[str, Any]]]
    counts: dict[str, int]
    dropped: dict[str, int]
    truncated: list[str]
    timings: dict[str, float]
    notes: list[str]


class RecordsOut(BaseModel):
    records: list[RecordOut | None]


class ClaimsOut(BaseModel):
    claims: list[RecordOut]


class ChunksOut(BaseModel):
    chunks: list[RecordOut]


_RESULTS: dict[str, tuple[type[BaseModel], Callable[[Any], Any]]] = {
    "record": (RecordOut, lambda r: r.to_dict()),
    "context": (ContextOut, lambda c: c.to_dict()),
    "records": (RecordsOut, lambda rs: {"records": [None if r is None else r.to_dict() for r in rs]}),
    "claims": (ClaimsOut, lambda cs: {"claims": [c.to_dict() for c in cs]}),
    "chunks": (ChunksOut, lambda cs: {"chunks": [c.to_dict() for c in cs]}),
}


def body_model(name: str) -> type[BaseModel]:
    """The request body of one operation: required fields, then optional ones with the core's defaults."""
    fields: dict[str, Any] = {f: (Any, ...) for f in operations.required(name)}
    fields.update({f: (Any, default) for f, default in operations.defaults(name).items()})
    return create_model(f"{name.title().replace('_', '')}Body", __base__=_Loose, **fields)


def _handler(name: str, body: type[BaseModel], render: Callable[[Any], Any], view: Any, ok: Any) -> Any:
    def handler(body, v=Depends(view)):  # type: ignore[no-untyped-def]  # noqa: B008 - FastAPI's dependency idiom
        return ok(render(getattr(v, name)(**body.model_dump(exclude_unset=True))))

    # real classes, not strings: FastAPI reads them to parse the body and inject the view
    handler.__annotations__ = {"body": body, "v": AgentView}
    handler.__name__ = name
    return handler


def register(route: Callable[..., Any], view: Callable[..., AgentView], ok: Callable[[Any], Any]) -> None:
    """Add every facts-layer operation to the app through its ``route`` decorator."""
    for name, (result, summary) in OPERATIONS.items():
        body = body_model(name)
        out, render = _RESULTS[result]
        route(name, body, out, summary)(_handler(name, body, render, view, ok))
