"""The operations every interface offers: one table, with parameters declared by the core's own signatures.

:data:`OPERATIONS` names each :class:`~memlane.core.memory.Memory` method that the
wire carries, the shape of its answer and a one-line summary. Each method's
signature and docstring are the statement of its parameters, defaults and
meaning; :data:`DECLARED` (``operations.json``, beside this module) holds them as
:func:`declare` reads them from ``Memory``, so that a surface made from the table
(the Client, the service, ``AgentView``) has them without importing the core:
``tests/test_operations.py`` fails when it is not what ``Memory`` declares now
(``python scripts/declare.py`` writes it again). The HTTP service builds every
``POST /v1/<operation>`` (request model, handler, ``GET /v1/operations``) from
this table; the tests hold the MCP tools and the Client's typed methods to it.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any

from .errors import NotFoundError
from .validate import RECORD_FIELDS

REQUIRED: Any = inspect.Parameter.empty
DECLARED = os.path.join(os.path.dirname(__file__), "operations.json")  # os.path: pathlib would cost the Client


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


def declare(owner: type) -> dict[str, Any]:
    """What :data:`DECLARED` holds: each operation's signature (defaults as Python literals) and docstring on
    ``owner`` (``Memory``)."""
    declared = {}
    for op in OPERATIONS:
        method = getattr(owner, op.name)
        sig = inspect.signature(method)
        params = []
        for p in sig.parameters.values():
            param = {"name": p.name, "kind": p.kind.name}
            if p.annotation is not p.empty:
                param["annotation"] = str(p.annotation)
            if p.default is not p.empty:
                param["default"] = repr(p.default)
            params.append(param)
        returns = None if sig.return_annotation is sig.empty else str(sig.return_annotation)
        declared[op.name] = {"params": params, "returns": returns, "doc": inspect.getdoc(method)}
    return declared


@cache
def _declared() -> Mapping[str, Any]:
    with open(DECLARED, encoding="utf-8") as declared:
        return json.load(declared)  # type: ignore[no-any-return]


@cache
def signature(name: str) -> inspect.Signature:
    """``Memory.<name>``'s signature, ``self`` included, as :data:`DECLARED` holds it."""
    try:
        declared = _declared()[name]
    except KeyError:  # an operation added to the table but not yet declared: say how to declare it
        raise RuntimeError(f"{DECLARED} has no {name!r}: run python scripts/declare.py") from None
    return inspect.Signature(
        [
            inspect.Parameter(
                p["name"],
                getattr(inspect.Parameter, p["kind"]),
                default=ast.literal_eval(p["default"]) if "default" in p else REQUIRED,
                annotation=p.get("annotation", REQUIRED),
            )
            for p in declared["params"]
        ],
        return_annotation=inspect.Signature.empty if declared["returns"] is None else declared["returns"],
    )


def doc(name: str) -> str | None:
    """``Memory.<name>``'s docstring, as :data:`DECLARED` holds it."""
    return _declared()[name]["doc"]  # type: ignore[no-any-return]


@cache
def params(method: str) -> tuple[Param, ...]:
    """The parameters of ``Memory.<method>``, in order, without ``self``."""
    return tuple(
        Param(p.name, p.default)
        for p in signature(method).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    )


# parameters no wire can carry: a Python object
UNSENDABLE = frozenset({"chooser", "extractor"})


def _address(a: Any) -> Any:
    if isinstance(a, list):
        return tuple(a)
    if isinstance(a, dict) and a.keys() == {"namespace", "key"}:
        return (a["namespace"], a["key"])
    return a  # refused by the core, naming its position


def _addresses(args: dict[str, Any]) -> dict[str, Any]:
    # JSON has no tuples: an address arrives as a [namespace, key] list, or as {"namespace", "key"} (MCP's shape)
    if isinstance(args.get("addresses"), list):
        args["addresses"] = [_address(a) for a in args["addresses"]]
    return args


def _known_fields(args: dict[str, Any]) -> dict[str, Any]:
    # the API is additive: a record field this version does not know is ignored, as in every body
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
        from_wire: turns JSON's shapes into the core's (a list where the core takes a tuple), for every surface
            that parses JSON (HTTP, MCP, ``memlane op``).
        additive: what only a request over the network gets: fields this version does not know dropped, so a
            newer client is answered by an older service (``memlane op`` refuses them, as the core does).
        safe: it only reads, so sending it again changes nothing: a client may repeat it after a lost
            connection (a write may have been applied before the connection broke, so it is never repeated).
        point: a read by address of at most ``limit`` rows (``recall`` with a key): the service may answer it on
            its event loop when the store is free at once.
        expensive: its work can take long (ranked reads, the query space): each agent has a fair share of it.
        meanings: what this operation's parameters mean, where :data:`MEANINGS` says it otherwise or not at all.
    """

    name: str
    result: str
    summary: str
    path: str = ""
    admin: bool = False
    optional: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    from_wire: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    additive: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    safe: bool = False
    point: bool = False
    expensive: bool = False
    meanings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def route(self) -> str:
        return self.path or self.name

    def params(self) -> tuple[Param, ...]:
        """The parameters the wire carries, with the defaults it states."""
        return tuple(
            Param(p.name, self.optional.get(p.name, p.default)) for p in params(self.name) if p.name not in UNSENDABLE
        )

    def meaning(self, param: str) -> str | None:
        """What ``param`` means, as every surface that describes it says it; ``None`` if it goes without saying."""
        return self.meanings.get(param, MEANINGS.get(param))


# What a parameter means, said once for every surface that describes parameters (today the MCP tools' schemas,
# which an agent reads). An operation's own ``meanings`` win; a parameter in neither goes without a description.
MEANINGS: Mapping[str, str] = MappingProxyType({
    "namespace": "e.g. 'user/123' or ['user', '123'].",
    "namespace_prefix": "Whole segments: 'user' holds 'user/123'; '' is all you may see.",
    "key": "e.g. 'preferences.ui.theme'.",
    "key_prefix": "Only keys under this taxonomy path (whole segments), e.g. 'preferences.ui'.",
    "limit": "At most this many results.",
    "cursor": "next_cursor of the previous page; omit for the first.",
    "floor": "true: only the hits judged relevant; false: the k nearest.",
    "where": 'e.g. {"metadata.src": "chat", "created_at": {"$gte": "-7d"}}',
    "query": "The question, in plain words.",
    "entity_ids": "Entity ids (ent_...), e.g. from memory_resolve_entity.",
    "hops": "Graph steps to expand from the entities (0-3).",
    "time": '"current", or {"valid_at": ISO time, "believed_at": ISO time} (either may be left out).',
    "ids": "Ids: ent_, fact_, doc_, chunk_ or claim_...",
    "entity_id": "ent_...",
    "fact_id": "fact_...",
    "claim_id": "claim_...",
    "valid_to": "ISO time it stopped being true.",
    "sql": "One SELECT over the memory_v1 views, e.g. 'SELECT claim_text FROM claims_live'.",
    "params": "Values for ? (a list, in order) or :name (an object) placeholders.",
    "max_rows": "At most this many rows (1-100000).",
    "timeout_ms": "Stop the statement after this long (1-60000).",
})  # fmt: skip


def _op(name: str, result: str, summary: str, **kw: Any) -> Operation:
    for mapping in ("optional", "aliases", "meanings"):
        if mapping in kw:
            kw[mapping] = MappingProxyType(kw[mapping])
    return Operation(name, result, summary, **kw)


OPERATIONS: tuple[Operation, ...] = (
    # -- items: exact addresses, then ranked reads
    _op("put", "item", "Write (upsert) one value at (namespace, key).", optional={"key": None}, meanings={
        "key": "e.g. 'preferences.ui.theme'; omit for a note with a generated id.",
        "value": "Any JSON value; its type is kept exactly.",
        "text": "What search indexes instead of the value.",
        "metadata": "A JSON object kept beside the value.",
        "ttl": "Seconds until the item expires.",
        "index": "false: search never returns it (a cache entry).",
    }),
    _op("put_many", "items", "Write many records in one transaction.", additive=_known_fields),
    _op("add_conversation", "items",
        "Store a conversation: one item per turn (<session>.t<turn>), indexed with its neighbouring turns.",
        meanings={
            "messages": 'The turns in order, e.g. [{"speaker": "Kim", "text": "...", "at": "2026-03-01T09:00Z"}].',
            "session": "The conversation to add to; omit to start a new one.",
            "at": "ISO time of messages that carry none; now if omitted.",
            "window": "Turns each side searched with a turn (0-10).",
        }),
    _op("get", "found", "Exact lookup of one address; 404 when missing.", safe=True, point=True),
    _op("exists", "exists", "Whether a live item is at an address, without its value.", safe=True, point=True),
    _op("get_many", "items", "Exact lookup of many addresses, in input order (null where missing).",
        from_wire=_addresses, safe=True, point=True,
        meanings={"addresses": 'e.g. [{"namespace": "user/123", "key": "preferences.ui.theme"}].'}),
    _op("fetch", "items", "Every visible item under exactly this key, newest first.", safe=True, point=True),
    _op("delete", "gone", "Delete one item (kept in history); 404 when missing."),
    _op("get_by_id", "found", "The item with this id (any hit's id); 404 when missing or not yours to read.",
        safe=True, point=True, meanings={"item_id": "An item's id, e.g. a search hit's id."}),
    _op("delete_by_id", "gone", "Delete the item with this id (kept in history); 404 when missing or not yours.",
        meanings={"item_id": "An item's id, e.g. a search hit's id."}),
    _op("clear", "deleted", "Delete every item under a writable namespace prefix."),
    _op("list", "page", "Items in address order, one page at a time.", safe=True),
    _op("namespaces", "namespaces", "Namespaces the caller may see.", safe=True),
    _op("select", "items", "Items under a prefix whose value meets field conditions (in SQL), newest first, paged.",
        safe=True),
    _op("summarize", "summary", "The taxonomy map: key paths cut at depth, with counts, per namespace.", safe=True,
        meanings={"depth": "Key segments to keep: 2 cuts preferences.ui.theme to preferences.ui."}),
    _op("history", "versions", "Past versions of an address, newest first.", safe=True),
    _op("activity", "activity", "Writes, deletes, facts and recalls per namespace and hour or day (a timeline).",
        safe=True, expensive=True, meanings={
            "bucket": "hour or day.",
            "days": "How many days back from now (1-366).",
        }),
    _op("search", "envelope", "Ranked search: nominate, fuse (RRF), confirm against live rows.",
        from_wire=_default_channels, safe=True, expensive=True,
        meanings={"query": "What you look for, in plain words.", "channels": "lexical (BM25) and/or vector."}),
    _op("recall", "envelope", "The agent's entry point: with key, the exact keyed fetch; without, search.",
        optional={"query": ""}, aliases={"namespace": "namespace_prefix"}, safe=True, point=True, expensive=True,
        meanings={
            "query": "A topic to search for (not needed with key).",
            "key": "Exact key: every item filed under it, newest first, instead of searching.",
            "mode": "Search mode without key.",
            "floor": "true: only the hits judged relevant; null: so, except a vector recall with an embedding.",
            "where": "As search's.",
        }),
    # -- the facts layer
    _op("add_entity", "record", "Create an entity (person, project, thing); names need not be unique.", meanings={
        "name": "The entity's canonical name.",
        "kind": "person, project, team, place, ...",
        "aliases": "Other names it goes by.",
        "profile": "A short description that tells it apart.",
    }),
    _op("add_alias", "record", "Give an entity another name."),
    _op("merge_entities", "record",
        "Merge one entity into another; the merged-away id keeps resolving to the survivor.",
        meanings={"survivor": "The entity id that stays.", "merged": "The duplicate entity id merged into it."}),
    _op("assert_fact", "record", "Assert subject-predicate-object; a fact that already holds gains evidence instead.",
        meanings={
            "subject": "The subject's entity id (ent_...).",
            "predicate": "The relation, e.g. 'works on', 'cutover date'.",
            "object": "An entity id (ent_...) or any JSON value.",
            "valid_from": "ISO time it became true.",
            "source": "Where you learned it (evidence).",
            "supersedes": "A fact id this one corrects.",
        }),
    _op("retract_fact", "record", "End belief in a fact (still readable at earlier believed_at)."),
    _op("end_fact", "record", "Record that a fact stopped holding in the world."),
    _op("add_document", "record", "Store a source split into ordered chunks.", meanings={
        "text": "The text, or a list of passages (one chunk each).",
        "source": "Where it comes from (URL, file, meeting).",
        "created_at": "ISO time the source was written.",
    }),
    _op("add_claim", "record", "Record what a source said, from which chunk, about which entities.", meanings={
        "text": "What was said, as one statement.",
        "asserted_at": "ISO time it was said.",
        "chunk": "The chunk id it came from.",
        "about": "Entity ids it is about.",
    }),
    _op("add_claims", "claims",
        "Record many claims in one transaction: each {text, speaker?, asserted_at?, chunk?, about?}.",
        meanings={"claims": 'Claims, e.g. [{"text": "...", "speaker": "Kim", "chunk": "chunk_...", "about": []}].'}),
    _op("supersede_claim", "record", "Mark a claim as no longer current testimony.",
        meanings={"by": "The claim id that replaces it."}),
    _op("resolve_entity", "context",
        "A name to one entity, several candidates (with what tells them apart), or none.", safe=True, expensive=True,
        meanings={"name": "The name as you heard it."}),
    _op("facts_context", "context", "What is true at a time, searched inside the entities' graph neighbourhood.",
        safe=True, expensive=True, meanings={"predicate": "Only facts with this predicate."}),
    _op("claims_and_sources_context", "context",
        "What was said: grouped claims with corroboration, and passages, kept apart.", safe=True, expensive=True,
        meanings={"k": "Claim groups and passages to return (at most 100)."}),
    _op("combined_context", "context", "facts_context and claims_and_sources_context side by side, never blended.",
        safe=True, expensive=True, meanings={"k": "Results per list (at most 100)."}),
    _op("lookup", "records", "Entities, facts, documents, chunks and claims by id (null if unseen).", safe=True),
    _op("hydrate", "records", "lookup keeping only what is current now.", safe=True),
    _op("traverse", "context", "Paths of entity-to-entity facts, whole or not at all.", safe=True, expensive=True),
    _op("neighbours", "chunks", "A chunk with its neighbouring passages.", safe=True, meanings={
        "chunk_id": "A chunk id (chunk_...).", "before": "Passages before it.", "after": "Passages after it.",
    }),
    # -- history retention: an owner setting
    _op("set_retention", "retention_rule", "Keep N history versions and/or D days under a prefix.", admin=True),
    _op("retention_rules", "retention_rules", "Every history retention rule (admin).", admin=True, safe=True),
    _op("clear_retention", "cleared", "Remove the retention rule at exactly a prefix (admin).", admin=True),
    # -- moving data: an owner setting (exact ids, times and authors)
    _op("import_records", "imported", "Write exported records back exactly, all or nothing (admin).",
        admin=True, meanings={
            "records": "Records as export writes them (one JSON object each); large imports go in several calls.",
        }),
    # -- the query space (memlane.domain.query)
    _op("query", "query_result", "Run one read-only SELECT over the memory_v1 views, bounded.", safe=True,
        expensive=True),
    _op("explain_query", "query_plan", "Whether a statement passes the fence, what it reads, its plan.",
        path="query/explain", safe=True, expensive=True),
    _op("describe_query_space", "query_space", "The memory_v1 views with their columns, functions and limits.",
        path="query/space", safe=True),
    _op("search_query_space", "space_matches", "Views and columns matching some words.", path="query/space/search",
        safe=True, meanings={"text": "Only views and columns whose name or meaning has these words."}),
    _op("save_query", "saved_query", "Check a statement and save it under a name.", path="query/save"),
    _op("run_saved_query", "query_result", "Run a saved query by name with parameters.", path="query/run", safe=True,
        expensive=True),
    _op("saved_queries", "saved_queries", "Every saved query with the parameters it takes.", path="query/saved",
        safe=True),
    _op("delete_saved_query", "deleted", "Delete a saved query (its author or an admin).", path="query/delete"),
)  # fmt: skip
OPERATION: Mapping[str, Operation] = MappingProxyType({op.name: op for op in OPERATIONS})


def _dicts(key: str) -> Callable[[Any, dict[str, Any]], Any]:
    return lambda rs, args: {key: [r.to_dict() for r in rs]}


def _nullable(key: str) -> Callable[[Any, dict[str, Any]], Any]:
    return lambda rs, args: {key: [None if r is None else r.to_dict() for r in rs]}


def _as_dict(r: Any, args: dict[str, Any]) -> Any:
    return r.to_dict()


def _missing(args: dict[str, Any]) -> NotFoundError:
    if "item_id" in args:  # one answer for an id never written and one the caller may not read
        return NotFoundError(f"no item with id {args['item_id']!r}")
    return NotFoundError(f"no item at {args.get('namespace')!r} key {args.get('key')!r}")


def _found(item: Any, args: dict[str, Any]) -> Any:
    if item is None:
        raise _missing(args)
    return item.to_dict()


def _gone(deleted: bool, args: dict[str, Any]) -> Any:
    if not deleted:
        raise _missing(args)
    return {"deleted": True}


# result shape: how the core's answer reads as JSON, given the call's arguments (the service's bodies, and what
# the Client decodes); ``server.routes.RESULTS`` documents each shape
ANSWERS: Mapping[str, Callable[[Any, dict[str, Any]], Any]] = MappingProxyType(
    {
        "item": _as_dict,
        "found": _found,
        "items": _nullable("items"),
        "page": _as_dict,
        "gone": _gone,
        "exists": lambda found, args: {"exists": found},
        "deleted": lambda n, args: {"deleted": n},
        "namespaces": lambda nss, args: {"namespaces": [list(ns) for ns in nss]},
        "summary": lambda s, args: {"summary": s},
        "activity": lambda a, args: a,
        "versions": _dicts("versions"),
        "envelope": _as_dict,
        "record": _as_dict,
        "records": _nullable("records"),
        "context": _as_dict,
        "claims": _dicts("claims"),
        "chunks": _dicts("chunks"),
        "retention_rule": _as_dict,
        "retention_rules": _dicts("rules"),
        "cleared": lambda cleared, args: {"cleared": cleared},
        "imported": lambda n, args: {"imported": n},
        "query_result": _as_dict,
        "query_plan": _as_dict,
        "query_space": lambda space, args: space,
        "space_matches": lambda matches, args: {"matches": matches},
        "saved_query": _as_dict,
        "saved_queries": _dicts("queries"),
    }
)


# optional answer fields left out when unset, so a newer server answers an older client the same way
OPTIONAL = frozenset(
    {
        "author",
        "expires_at",
        "changed_by",
        "next_cursor",
        "embedding",
        "pending_vectors",
        "relevant",
        "relevance",
        "why",
    }
)


# answer fields that hold the caller's own JSON (a value, metadata, the query space's rows): passed through
# whole, a null in them is data (``{"author": null}`` stays)
CALLERS_DATA = frozenset({"value", "metadata", "rows"})


def compact(obj: Any) -> Any:
    """Drop unset optional fields (``None``) from answer objects, recursively, never inside the caller's data.

    The request's parameters echoed in an envelope (``params``) lose their own unset fields (``embedding``),
    not the caller's JSON inside them (a ``where`` that matches a null).
    """
    kind = type(obj)  # exact types: the answers are plain dicts and lists, and this runs on every value
    if kind is dict:
        return {
            k: v if k in CALLERS_DATA else _shallow(v) if k == "params" else compact(v)
            for k, v in obj.items()
            if v is not None or k not in OPTIONAL
        }
    if kind is list:
        return [compact(v) for v in obj]
    return obj


def _shallow(obj: Any) -> Any:
    if type(obj) is not dict:
        return obj
    return {k: v for k, v in obj.items() if v is not None or k not in OPTIONAL}
