"""Every ``POST /v1/<operation>`` of the service, built from one table (:data:`memlane.values.operations.OPERATIONS`).

Each operation's request model is made from the core's signature (required
fields have no default, optional ones the core's default; ``bool`` fields are
strict, the rest stay loose because the core validates every value once and
names the field), and one handler calls the method on the caller's view and
renders the answer by the operation's result shape. The result models below
document those shapes in OpenAPI and ``GET /v1/operations``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, create_model

from ..values.operations import OPERATIONS, Operation, wire_default

REQUIRED = ...


class Body(BaseModel):
    """Base of every request body: unknown fields are ignored (additive API); types are strict.

    A field the core requires has no default here, so leaving it out (or mistyping
    its name) is a 400 naming it, never a default written over stored data. Typed
    fields are strict: ``"yes"`` is not a boolean and ``"5"`` not an integer.
    """

    model_config = ConfigDict(extra="ignore", strict=True)


# -- result shapes, for /v1/operations and OpenAPI ---------------------------------


class RetentionRuleOut(BaseModel):
    prefix: str
    keep_versions: int | None
    keep_days: float | None
    updated_at: str
    updated_by: str | None


class RetentionRulesOut(BaseModel):
    rules: list[RetentionRuleOut]


class ClearedOut(BaseModel):
    cleared: bool


class ImportedOut(BaseModel):
    imported: int


class QueryResultOut(BaseModel):
    columns: list[str]
    rows: list[list[Any]]
    row_count: int
    truncated: bool
    truncated_by: str | None
    limits: dict[str, int]
    elapsed_ms: float
    views: list[str]
    notes: list[str]


class QueryPlanOut(BaseModel):
    valid: bool
    sql: str
    runs: str | None
    views: list[str]
    functions: list[str]
    parameters: list[str]
    plan: list[str]
    reason: str | None
    message: str | None
    part: str | None


class QuerySpaceOut(BaseModel):
    schema_: str = Field(alias="schema")
    dialect: str
    views: list[dict[str, Any]]
    functions: dict[str, list[str]]
    casts: list[str]
    parameters: str
    limits: str
    notes: list[str]


class SpaceMatchesOut(BaseModel):
    matches: list[dict[str, Any]]


class SavedQueryOut(BaseModel):
    name: str
    sql: str
    description: str
    parameters: list[str]
    author: str | None = None
    created_at: str
    updated_at: str


class SavedQueriesOut(BaseModel):
    queries: list[SavedQueryOut]


class ItemOut(BaseModel):
    id: str
    namespace: list[str]
    key: str
    value: Any = None
    value_type: str
    text: str
    metadata: dict[str, Any]
    author: str | None = None
    created_at: str
    updated_at: str
    expires_at: str | None = None
    version: int
    indexed: bool = Field(default=True, description="false: written with index=false, no search returns it")


class VersionOut(ItemOut):
    id: str | None = None  # type: ignore[assignment]
    item_id: str
    change: str
    changed_at: str
    changed_by: str | None = None


class HitOut(ItemOut):
    score: float
    ranks: dict[str, int]
    channel_scores: dict[str, float]
    matched: list[str] = []
    similarity: float | None = None
    relevant: bool | None = None
    relevance: float | None = None
    why: str | None = None


class EnvelopeOut(BaseModel):
    operation: str
    params: dict[str, Any]
    hits: list[HitOut]
    counts: dict[str, int]
    dropped_by_hydration: int
    truncated: bool
    timings: dict[str, float]
    notes: list[str]
    pending_vectors: int | None = None
    below_floor: int = 0
    status: str = "found"


class ItemsOut(BaseModel):
    items: list[ItemOut | None]


class PageOut(BaseModel):
    items: list[ItemOut]
    next_cursor: str | None = None


class VersionsOut(BaseModel):
    versions: list[VersionOut]


class NamespacesOut(BaseModel):
    namespaces: list[list[str]]


class SummaryOut(BaseModel):
    summary: dict[str, dict[str, int]]


class ActivityRowOut(BaseModel):
    namespace: str
    at: str
    writes: int
    deletes: int
    facts: int
    recalls: int


class ActivityOut(BaseModel):
    namespace_prefix: str
    bucket: str
    since: str
    until: str
    recalls_since: str
    series: list[str]
    rows: list[ActivityRowOut]


class ExistsOut(BaseModel):
    exists: bool


class DeletedOut(BaseModel):
    deleted: bool | int


class RecordOut(BaseModel):
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
    pending_vectors: int = 0


class RecordsOut(BaseModel):
    records: list[RecordOut | None]


class ClaimsOut(BaseModel):
    claims: list[RecordOut]


class ChunksOut(BaseModel):
    chunks: list[RecordOut]


# result shape: its model, documenting what :data:`memlane.values.operations.ANSWERS` makes of the core's answer
RESULTS: dict[str, type[BaseModel]] = {
    "item": ItemOut,
    "found": ItemOut,
    "items": ItemsOut,
    "page": PageOut,
    "gone": DeletedOut,
    "exists": ExistsOut,
    "deleted": DeletedOut,
    "namespaces": NamespacesOut,
    "summary": SummaryOut,
    "activity": ActivityOut,
    "versions": VersionsOut,
    "envelope": EnvelopeOut,
    "record": RecordOut,
    "records": RecordsOut,
    "context": ContextOut,
    "claims": ClaimsOut,
    "chunks": ChunksOut,
    "retention_rule": RetentionRuleOut,
    "retention_rules": RetentionRulesOut,
    "cleared": ClearedOut,
    "imported": ImportedOut,
    "query_result": QueryResultOut,
    "query_plan": QueryPlanOut,
    "query_space": QuerySpaceOut,
    "space_matches": SpaceMatchesOut,
    "saved_query": SavedQueryOut,
    "saved_queries": SavedQueriesOut,
}


def _field_type(annotation: Any) -> Any:
    # the signatures' annotations are strings (from __future__ import annotations)
    text = str(annotation)
    if text == "bool":
        return bool
    if text.startswith("Iterable["):
        return list[Any]
    return Any


def body_model(op: Operation) -> type[BaseModel]:
    """The request body of one operation: required fields, then optional ones with the core's defaults."""
    import inspect

    from ..core.memory import Memory

    annotations = {p.name: p.annotation for p in inspect.signature(getattr(Memory, op.name)).parameters.values()}
    fields: dict[str, Any] = {}
    for param in op.params():
        kind = _field_type(annotations[param.name])
        old = [wire for wire, name in op.aliases.items() if name == param.name]
        default = REQUIRED if param.required else wire_default(param.default)
        if old:
            names = ", ".join(repr(o) for o in old)
            default = Field(
                default=default,
                validation_alias=AliasChoices(param.name, *old),
                description=f"{names} is accepted as its earlier name",
            )
        fields[param.name] = (kind, default)
    title = "".join(part.title() for part in op.route.replace("/", "_").split("_"))
    return create_model(f"{title}Body", __base__=Body, **fields)


@cache
def bodies() -> dict[str, type[BaseModel]]:
    # the table's request models depend on nothing but the table: made once per process, not per app
    return {op.name: body_model(op) for op in OPERATIONS}


def _declared(op: Operation, body: type[BaseModel]) -> Any:
    """The FastAPI endpoint of one operation: it declares the body for OpenAPI; :mod:`.dispatch` answers it."""

    def handler(body):  # type: ignore[no-untyped-def]
        raise RuntimeError(f"POST /v1/{op.route} is answered by memlane.server.dispatch, in front of FastAPI")

    # a real class, not a string: FastAPI reads it to document the body
    handler.__annotations__ = {"body": body}
    handler.__name__ = op.name
    return handler


Route = Callable[[str, type[BaseModel], type[BaseModel], str], Callable[[Callable[..., Any]], Any]]


def register(route: Route) -> None:
    """Declare every operation of the table through the app's ``route`` decorator (OpenAPI, /v1/operations)."""
    for op in OPERATIONS:
        body = bodies()[op.name]
        route(op.route, body, RESULTS[op.result], op.summary)(_declared(op, body))
