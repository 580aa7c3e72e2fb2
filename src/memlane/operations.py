"""The operations every interface offers: one table, with parameters read from the core's own signatures.

:data:`OPERATIONS` names each :class:`~memlane.memory.Memory` method that the
wire carries, the shape of its answer and a one-line summary. :func:`params`
reads which parameters are required and what the others default to from the
method itself, so a default is stated once. The HTTP service builds every
``POST /v1/<operation>`` (request model, handler, ``GET /v1/operations``) from
this table; the tests hold the MCP tools and the Client's typed methods to it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any

REQUIRED: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    """One parameter of a core operation: its name and default (:data:`REQUIRED` if none)."""

    name: str
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def wire_default(value: Any) -> Any:
    """A default as JSON carries it (a tuple is a list)."""
    if isinstance(value, tuple):
        return [wire_default(v) for v in value]
    return value


@cache
def params(method: str) -> tuple[Param, ...]:
    """The parameters of ``Memory.<method>``, in order, without ``self``."""
    from .memory import Memory

    signature = inspect.signature(getattr(Memory, method))
    return tuple(
        Param(p.name, p.default)
        for p in signature.parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    )


# parameters no wire can carry: a Python object
UNSENDABLE = frozenset({"chooser", "extractor"})


def _addresses(args: dict[str, Any]) -> dict[str, Any]:
    # JSON has no tuples: an address arrives as a [namespace, key] list
    if isinstance(args.get("addresses"), list):
        args["addresses"] = [tuple(a) if isinstance(a, list) else a for a in args["addresses"]]
    return args


def _known_fields(args: dict[str, Any]) -> dict[str, Any]:
    # the API is additive: a record field this version does not know is ignored, as in every body
    from .memory import RECORD_FIELDS

    if isinstance(args.get("records"), list):
        args["records"] = [
            {k: v for k, v in r.items() if k in RECORD_FIELDS} if isinstance(r, dict) else r for r in args["records"]
        ]
    return args


def _default_channels(args: dict[str, Any]) -> dict[str, Any]:
    # null has always meant "both channels" on the wire
    if args.get("channels", ()) is None:
        del args["channels"]
    return args


@dataclass(frozen=True)
class Operation:
    """One core operation as the wire carries it.

    Attributes:
        name: the ``Memory`` method (and ``AgentView`` method) that does the work.
        result: the shape of the answer, rendered by each interface.
        summary: one line for listings, OpenAPI and help.
        path: the HTTP path under ``/v1``; ``name`` by default.
        admin: an owner setting: only an admin agent may call it, on the whole memory.
        optional: parameters the core requires that the wire may leave out, with what the core then gets.
        aliases: earlier wire names still accepted, to the parameter they now fill.
        from_wire: turns JSON's shapes into the core's (a list where the core takes a tuple).
        safe: it only reads, so sending it again changes nothing: a client may repeat it after a lost
            connection (a write may have been applied before the connection broke, so it is never repeated).
        point: a read by address of at most ``limit`` rows (``recall`` with a key): the service may answer it on
            its event loop when the store is free at once.
        expensive: its work can take long (ranked reads, the query space): each agent has a fair share of it.
    """

    name: str
    result: str
    summary: str
    path: str = ""
    admin: bool = False
    optional: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    from_wire: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    safe: bool = False
    point: bool = False
    expensive: bool = False

    @property
    def route(self) -> str:
        return self.path or self.name

    def params(self) -> tuple[Param, ...]:
        """The parameters the wire carries, with the defaults it states."""
        return tuple(
            Param(p.name, self.optional.get(p.name, p.default)) for p in params(self.name) if p.name not in UNSENDABLE
        )


def _op(name: str, result: str, summary: str, **kw: Any) -> Operation:
    for mapping in ("optional", "aliases"):
        if mapping in kw:
            kw[mapping] = MappingProxyType(kw[mapping])
    return Operation(name, result, summary, **kw)


OPERATIONS: tuple[Operation, ...] = (
    # -- items: exact addresses, then ranked reads
    _op("put", "item", "Write (upsert) one value at (namespace, key).", optional={"key": None}),
    _op("put_many", "items", "Write many records in one transaction.", from_wire=_known_fields),
    _op("add_conversation", "items",
        "Store a conversation: one item per turn (<session>.t<turn>), indexed with its neighbouring turns."),
    _op("get", "found", "Exact lookup of one address; 404 when missing.", safe=True, point=True),
    _op("exists", "exists", "Whether a live item is at an address, without its value.", safe=True, point=True),
    _op("get_many", "items", "Exact lookup of many addresses, in input order (null where missing).",
        from_wire=_addresses, safe=True, point=True),
    _op("fetch", "items", "Every visible item under exactly this key, newest first.", safe=True, point=True),
    _op("delete", "gone", "Delete one item (kept in history); 404 when missing."),
    _op("clear", "deleted", "Delete every item under a writable namespace prefix."),
    _op("list", "page", "Items in address order, one page at a time.", safe=True),
    _op("namespaces", "namespaces", "Namespaces the caller may see.", safe=True),
    _op("select", "items", "Items under a prefix whose value meets field conditions (in SQL), newest first, paged.",
        safe=True),
    _op("summarize", "summary", "The taxonomy map: key paths cut at depth, with counts, per namespace.", safe=True),
    _op("history", "versions", "Past versions of an address, newest first.", safe=True),
    _op("search", "envelope", "Ranked search: nominate, fuse (RRF), confirm against live rows.",
        from_wire=_default_channels, safe=True, expensive=True),
    _op("recall", "envelope", "The agent's entry point: with key, the exact keyed fetch; without, search.",
        optional={"query": ""}, aliases={"namespace": "namespace_prefix"}, safe=True, point=True, expensive=True),
    # -- the facts layer
    _op("add_entity", "record", "Create an entity (person, project, thing); names need not be unique."),
    _op("add_alias", "record", "Give an entity another name."),
    _op("merge_entities", "record",
        "Merge one entity into another; the merged-away id keeps resolving to the survivor."),
    _op("assert_fact", "record", "Assert subject-predicate-object; a fact that already holds gains evidence instead."),
    _op("retract_fact", "record", "End belief in a fact (still readable at earlier believed_at)."),
    _op("end_fact", "record", "Record that a fact stopped holding in the world."),
    _op("add_document", "record", "Store a source split into ordered chunks."),
    _op("add_claim", "record", "Record what a source said, from which chunk, about which entities."),
    _op("add_claims", "claims",
        "Record many claims in one transaction: each {text, speaker?, asserted_at?, chunk?, about?}."),
    _op("supersede_claim", "record", "Mark a claim as no longer current testimony."),
    _op("resolve_entity", "context",
        "A name to one entity, several candidates (with what tells them apart), or none.", safe=True, expensive=True),
    _op("facts_context", "context", "What is true at a time, searched inside the entities' graph neighbourhood.",
        safe=True, expensive=True),
    _op("claims_and_sources_context", "context",
        "What was said: grouped claims with corroboration, and passages, kept apart.", safe=True, expensive=True),
    _op("combined_context", "context", "facts_context and claims_and_sources_context side by side, never blended.",
        safe=True, expensive=True),
    _op("lookup", "records", "Entities, facts, documents, chunks and claims by id (null if unseen).", safe=True),
    _op("hydrate", "records", "lookup keeping only what is current now.", safe=True),
    _op("traverse", "context", "Paths of entity-to-entity facts, whole or not at all.", safe=True, expensive=True),
    _op("neighbours", "chunks", "A chunk with its neighbouring passages.", safe=True),
    # -- history retention: an owner setting
    _op("set_retention", "retention_rule", "Keep N history versions and/or D days under a prefix.", admin=True),
    _op("retention_rules", "retention_rules", "Every history retention rule (admin).", admin=True, safe=True),
    _op("clear_retention", "cleared", "Remove the retention rule at exactly a prefix (admin).", admin=True),
    # -- the query space (memlane.query)
    _op("query", "query_result", "Run one read-only SELECT over the memory_v1 views, bounded.", safe=True,
        expensive=True),
    _op("explain_query", "query_plan", "Whether a statement passes the fence, what it reads, its plan.",
        path="query/explain", safe=True, expensive=True),
    _op("describe_query_space", "query_space", "The memory_v1 views with their columns, functions and limits.",
        path="query/space", safe=True),
    _op("search_query_space", "space_matches", "Views and columns matching some words.", path="query/space/search",
        safe=True),
    _op("save_query", "saved_query", "Check a statement and save it under a name.", path="query/save"),
    _op("run_saved_query", "query_result", "Run a saved query by name with parameters.", path="query/run", safe=True,
        expensive=True),
    _op("saved_queries", "saved_queries", "Every saved query with the parameters it takes.", path="query/saved",
        safe=True),
    _op("delete_saved_query", "deleted", "Delete a saved query (its author or an admin).", path="query/delete"),
)  # fmt: skip
