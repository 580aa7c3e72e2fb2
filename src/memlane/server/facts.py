"""HTTP operations of the facts layer, generated from one table.

Each row names an AgentView method, its required and optional parameters
(defaults as the core's), how to render its result, and a summary. Bodies stay
loose (``Any``): the core validates every value once and names the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends
from pydantic import BaseModel, ConfigDict, create_model

from ..access import AgentView

_CONTEXT: dict[str, Any] = {"entity_ids": None, "namespace_prefix": []}
_TIME: dict[str, Any] = {"hops": 1, "predicate": None, "time": "current"}

# name: (required, optional with defaults, result, summary)
OPERATIONS: dict[str, tuple[list[str], dict[str, Any], str, str]] = {
    "add_entity": (
        ["namespace", "name"],
        {"kind": "thing", "aliases": [], "profile": ""},
        "record",
        "Create an entity (person, project, thing); names need not be unique.",
    ),
    "add_alias": (["entity_id", "alias"], {}, "record", "Give an entity another name."),
    "merge_entities": (
        ["survivor", "merged"],
        {},
        "record",
        "Merge one entity into another; the merged-away id keeps resolving to the survivor.",
    ),
    "assert_fact": (
        ["namespace", "subject", "predicate", "object"],
        {"valid_from": None, "valid_to": None, "source": None, "supersedes": None},
        "record",
        "Assert subject-predicate-object; a fact that already holds gains evidence instead.",
    ),
    "retract_fact": (["fact_id"], {}, "record", "End belief in a fact (still readable at earlier believed_at)."),
    "end_fact": (["fact_id", "valid_to"], {}, "record", "Record that a fact stopped holding in the world."),
    "add_document": (
        ["namespace", "title", "text"],
        {"source": None, "created_at": None, "chunk_chars": 1200},
        "record",
        "Store a source split into ordered chunks.",
    ),
    "add_claim": (
        ["namespace", "text"],
        {"speaker": None, "asserted_at": None, "chunk": None, "about": []},
        "record",
        "Record what a source said, from which chunk, about which entities.",
    ),
    "add_claims": (
        ["namespace", "claims"],
        {},
        "records",
        "Record many claims in one transaction: each {text, speaker?, asserted_at?, chunk?, about?}.",
    ),
    "supersede_claim": (["claim_id"], {"by": None}, "record", "Mark a claim as no longer current testimony."),
    "resolve_entity": (
        ["name"],
        {"namespace_prefix": []},
        "context",
        "A name to one entity, several candidates (with what tells them apart), or none.",
    ),
    "facts_context": (
        ["query"],
        {**_CONTEXT, **_TIME, "limit": 20},
        "context",
        "What is true at a time, searched inside the entities' graph neighbourhood.",
    ),
    "claims_and_sources_context": (
        ["query"],
        {**_CONTEXT, "k": 50, "candidate_k": 200},
        "context",
        "What was said: grouped claims with corroboration, and passages, kept apart.",
    ),
    "combined_context": (
        ["query"],
        {**_CONTEXT, **_TIME, "k": 50},
        "context",
        "facts_context and claims_and_sources_context side by side, never blended.",
    ),
    "lookup": (["ids"], {}, "records", "Entities, facts, documents, chunks and claims by id (null if unseen)."),
    "hydrate": (["ids"], {}, "records", "lookup keeping only what is current now."),
    "traverse": (
        ["entity_ids"],
        {"hops": 2, "time": "current"},
        "context",
        "Paths of entity-to-entity facts, whole or not at all.",
    ),
    "neighbours": (["chunk_id"], {"before": 1, "after": 1}, "chunks", "A chunk with its neighbouring passages."),
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


class ChunksOut(BaseModel):
    chunks: list[RecordOut]


_RESULTS: dict[str, tuple[type[BaseModel], Callable[[Any], Any]]] = {
    "record": (RecordOut, lambda r: r.to_dict()),
    "context": (ContextOut, lambda c: c.to_dict()),
    "records": (RecordsOut, lambda rs: {"records": [None if r is None else r.to_dict() for r in rs]}),
    "chunks": (ChunksOut, lambda cs: {"chunks": [c.to_dict() for c in cs]}),
}


def body_model(name: str) -> type[BaseModel]:
    """The request body of one operation: required fields, then optional ones with the core's defaults."""
    required, optional, _, _ = OPERATIONS[name]
    fields: dict[str, Any] = {f: (Any, ...) for f in required}
    fields.update({f: (Any, default) for f, default in optional.items()})
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
    for name, (_, _, result, summary) in OPERATIONS.items():
        body = body_model(name)
        out, render = _RESULTS[result]
        route(name, body, out, summary)(_handler(name, body, render, view, ok))
