"""memlane's MCP server: the memory as tools for AI agents, on the official MCP SDK (v2).

Ten item tools, one per verb an agent needs: ``memory_get``, ``memory_get_many``,
``memory_put``, ``memory_delete``, ``memory_list``, ``memory_summarize``,
``memory_search``, ``memory_recall``, ``memory_history`` and ``memory_add_conversation``,
two by an item's id (``memory_get_by_id``, ``memory_delete_by_id``), eighteen for the facts
layer (:class:`FactTools`: resolve, the assured reads, primitives, writes) and two for the
query space. A server offers a *profile* of them (:data:`PROFILES`, :func:`tool_selection`):
by default the nine item tools an agent uses every turn, so that ``tools/list`` stays small
in the agent's context; conversations, ids, facts and the query space are added on request
(``memlane mcp --tools default,facts``, ``/mcp?tools=all``).

The item and facts tools are made from the operations table (:mod:`memlane.values.operations`): an
:class:`Offer` names the operation and the parameters an agent sees; their defaults are the
core's and their descriptions the table's. The two query-space tools are written out, since
each answers for several operations. Like every interface, they are thin: parse the
arguments, call the core, render the answer as the service does (as structured content, and
the same JSON as text), and turn a
:class:`~memlane.values.errors.MemlaneError` into an MCP tool error carrying memlane's
message (the type and field in structured content), never a traceback.

Two transports:

* **stdio** (``memlane mcp``, :func:`run_stdio`): single owner; the tools call
  the :class:`~memlane.core.memory.Memory` directly, with full access.
* **streamable HTTP** at ``/mcp`` on the service (:func:`mount_mcp`): every HTTP
  request must carry ``Authorization: Bearer <token>`` (401 before any MCP
  handling otherwise), and every tool call runs on that agent's
  :class:`~memlane.core.access.AgentView`, so MCP sees exactly what the ``/v1`` API
  sees. The endpoint is stateless (a plain JSON response per POST), so service
  replicas behind a load balancer need no sticky sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import re
import typing
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import INVALID_REQUEST, CallToolResult, ErrorData, JSONRPCError, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError
from starlette.responses import Response

from .values import wire
from .values.errors import MemlaneError, UnauthorizedError, ValidationError
from .values.operations import ANSWERS, MEANINGS, OPERATION, REQUIRED, wire_default

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from .core.access import Access, Agent, AgentView
    from .core.memory import Memory

    Backend = Memory | AgentView

SERVER_NAME = "memlane"
# The server's instructions, a line per situation, each kept only when every tool it names is offered.
GUIDE: list[str] = [
    "memlane is your durable memory. Items live at addresses: a namespace (text such as user/123, or a list of "
    "segments) and a key, ideally a dotted taxonomy path such as preferences.ui.theme. Values are JSON and keep "
    "their type.",
    "Which tool to use:",
    "- You know the address (namespace + key): memory_get.",
    "- You know several addresses: memory_get_many, in one call.",
    "- You know the key but not the namespace, or want the newest value filed under a key: memory_recall with key "
    "(or with query, for a topic).",
    "- You know a topic, not a name: memory_search.",
    "- The store is unfamiliar: memory_summarize first (the map of namespaces and key paths with counts), then read "
    "what it shows.",
    "- Page through a namespace in key order: memory_list.",
    "- Write with memory_put (replaces an existing address; the old version is kept).",
    "- Earlier versions of an address, and who wrote them: memory_history.",
    "- Remove an item with memory_delete.",
    "- You have an item's id (a hit's id): memory_get_by_id reads it, memory_delete_by_id removes it.",
    "- A chat or meeting to remember turn by turn: memory_add_conversation.",
    "- What is true about a person or project: memory_resolve_entity, then memory_facts_context.",
    "- What sources said about it: memory_claims_and_sources_context.",
    '- A question over many records (counts, joins, "which documents mention X and Y?"): memory_query_space to '
    "see the SQL views, then memory_query with one read-only SELECT.",
]
_TOOL_NAME = re.compile(r"\bmemory_[a-z_]+")


def instructions(tools: Iterable[str]) -> str:
    """The server's instructions for the tools it offers: no line names a tool that is not offered."""
    offered = set(tools)
    return "\n".join(line for line in GUIDE if set(_TOOL_NAME.findall(line)) <= offered) + "\n"


INSTRUCTIONS = instructions(n for line in GUIDE for n in _TOOL_NAME.findall(line))  # every tool offered

# -- inputs --------------------------------------------------------------------------

NamespaceIn = Annotated[str | list[str], Field(description=MEANINGS["namespace"])]
KeyIn = Annotated[str, Field(description=MEANINGS["key"])]


class Address(BaseModel):
    # one address for memory_get_many (a comment, not a docstring: pydantic would send it in the schema)

    model_config = ConfigDict(extra="forbid")

    namespace: NamespaceIn
    key: KeyIn


AddressIn = Address | Annotated[list[Any], Field(min_length=2, max_length=2)]
ToolResult = Annotated[CallToolResult, dict[str, Any]]

# -- descriptions: each tells an agent when to use it rather than another -------------

DESCRIPTIONS = {
    "memory_get": """\
Read the item at an exact address (namespace + key): use it when you know the address.
Returns {found, item}; found is false if nothing is stored there. Know only the key?
memory_recall with key. Only a topic? memory_search.""",
    "memory_get_many": """\
Read several exact addresses in one call, in input order (null where nothing is stored).
Use it instead of repeated memory_get, e.g. on keys memory_summarize or memory_list showed.""",
    "memory_put": """\
Write (upsert) a JSON value at namespace + key: use it to remember anything for later. An
existing address is replaced (memory_history keeps old versions). Values keep their JSON
type ("3.12" stays a string). Prefer dotted taxonomy keys (preferences.ui.theme) so
memory_summarize maps them and memory_get reads them back; omit key for a free-form note.""",
    "memory_add_conversation": """\
Store a conversation so later searches find the exact turn. Use it to remember what was
said in a chat or meeting: pass the messages in order, each {speaker or role, text,
at?, id?}. Each turn becomes an item at key <session>.t<turn> (t00001, t00002...) with
value {speaker, text, at, session, turn}, searchable together with the turns around it,
so memory_search and memory_recall answer who said what and when. Pass session to add
later turns to the same conversation (numbering continues); omit it to start a new one
(its name is in each returned item's value). at: the time of messages without one.""",
    "memory_delete": """\
Delete the item at an exact address: use it when a memory is wrong or unwanted
(memory_history still shows it). Returns {deleted: false} if nothing was there.""",
    "memory_get_by_id": """\
Read the item with an id (the id of a memory_search or memory_recall hit, or of any item
you were given): returns {found, item}, the item with its namespace and key (memory_put
there updates it). found is false if no item you may read has that id.""",
    "memory_delete_by_id": """\
Delete the item with an id (memory_history still shows it). Returns {deleted: false} if no
item you may read has that id.""",
    "memory_list": """\
Items with their values under a namespace prefix (and key prefix), a page at a time: pass
next_cursor back as cursor. order "recent": what changed lately first. For an overview use
memory_summarize, for a topic memory_search.""",
    "memory_summarize": """\
The map of the memory: per namespace, its key paths cut at depth segments, with counts
(no values). Use it FIRST on an unfamiliar store; drill down with key_prefix and a larger
depth.""",
    "memory_search": """\
Find items about a topic when you don't know their address, e.g. "what do I know about the
user's editor?" (full-text and vector).
Know the address? memory_get; the key? memory_recall with key. Scores only order the hits.""",
    "memory_recall": """\
With key, every item filed under exactly that key in any
namespace you may see, newest first, unranked (the key known, not the namespace);
without key, a search like memory_search.""",
    "memory_history": """\
Past versions of an exact address, newest first: earlier values, who wrote them, when, and
what ended them. Use it for "what was this before?".""",
}

DESCRIPTIONS = {name: " ".join(text.split()) for name, text in DESCRIPTIONS.items()}  # one paragraph each

FACT_DESCRIPTIONS = {
    "memory_resolve_entity": """\
Find which entity (person, project, thing) a name refers to, before asking about it.
Tries the exact name, then aliases, then a normalised match (case, accents, punctuation).
Returns status resolved (one entity), ambiguous (several candidates, each with its kind,
namespace, profile, aliases and a few facts that tell them apart: ask the user or pick by
context) or none. Pass the chosen entity id to memory_facts_context / memory_traverse.""",
    "memory_facts_context": """\
What is TRUE about something: structured facts (subject, predicate, object) with their
dates and evidence counts. With entity_ids (from memory_resolve_entity) it first expands
the graph `hops` steps out (hops=1: the entity's projects and people) and searches fact
text inside that neighbourhood, so "what is Ravi working on" reaches the project's facts.
time is "current" or {"valid_at": ..., "believed_at": ...} to ask what held, or what was
believed, at a moment. For what people SAID use memory_claims_and_sources_context.""",
    "memory_claims_and_sources_context": """\
What was SAID about a topic: current claims grouped when they say the same thing (with a
corroboration count and who said it, when, from which passage), and the source passages
themselves, in two separate lists. Use it to quote or weigh testimony; superseded claims
are left out. For structured facts use memory_facts_context; for both use
memory_combined_context.""",
    "memory_combined_context": """\
memory_facts_context and memory_claims_and_sources_context for one question, run
independently and returned side by side (facts, claims, passages): use it when you want
both what is recorded as true and what sources said.""",
    "memory_traverse": """\
Paths through the entity graph from given entity ids, up to `hops` edges (facts linking
two entities). A path is returned whole or not at all: if any edge on it does not hold at
the requested time, the path is dropped and counted. Use it to answer "how is A connected
to B?".""",
    "memory_lookup": """\
Read entities, facts, documents, chunks or claims by id (ids start with ent_, fact_,
doc_, chunk_, claim_), in input order, null where unknown or not visible. Use it when an
earlier answer gave you ids and you need the full records.""",
    "memory_hydrate": """\
Like memory_lookup but only what is current: facts believed and valid now, claims not
superseded, entities not merged away; everything else comes back null. Use it to check
that ids you kept from earlier still hold before relying on them.""",
    "memory_neighbours": """\
A passage (chunk id) with the passages just before and after it in its document: use it
to read around a passage that memory_claims_and_sources_context returned.""",
    "memory_add_entity": """\
Create an entity (kind: person, project, team, ...) with optional aliases and a profile.
Use it for someone or something you will record facts or claims about. Check
memory_resolve_entity first so you don't create a duplicate; two entities may share
a name, the profile tells them apart.""",
    "memory_add_alias": """\
Give an entity another name (nickname, handle, abbreviation) that memory_resolve_entity
will match. Use it when you learn that a name you could not resolve means a known entity.""",
    "memory_merge_entities": """\
Merge a duplicate entity into the one that survives; the merged-away id keeps resolving
to the survivor and its facts and claims follow. Use it when two entities turn out to be
the same person or thing.""",
    "memory_assert_fact": """\
Record that subject predicate object is true (subject: an entity id; object: an entity id
or any JSON value), optionally with valid_from / valid_to and a source. Asserting a fact
that already holds adds the source as evidence instead of a duplicate. To correct a
value (a date that moved), pass the old fact's id as supersedes. Use it for what you know
to be true about an entity; for what someone merely said, use memory_add_claim.""",
    "memory_retract_fact": """\
Withdraw belief in a fact that was recorded wrongly. It disappears from current answers
but stays readable at earlier believed_at times. If the fact was true and stopped being
true, use memory_end_fact instead.""",
    "memory_end_fact": """\
Record that a fact stopped being true in the world at valid_to (a job ended, a project
closed). The fact stays readable for times before valid_to. Use memory_retract_fact
instead when it was never true.""",
    "memory_add_document": """\
Store a source (meeting notes, a message thread, a document) split into ordered passages:
text as one string (split at paragraphs) or a list of strings (one passage each). Returns
the chunk ids to cite in memory_add_claim. Use it to keep the exact words a claim or fact
came from.""",
    "memory_add_claim": """\
Record what a source said: the statement, the speaker, when, the chunk it came from and
the entity ids it is about. Claims are testimony, not facts: several claims saying the
same thing are counted as corroboration. Use it when you want to keep who said what,
rather than decide what is true.""",
    "memory_add_claims": """\
Record many claims at once (one transaction, all or nothing): use it after reading a
document, to keep everything its speakers said in one call instead of many
memory_add_claim calls. Each claim is {"text": ..., "speaker"?, "asserted_at"?, "chunk"?,
"about"?: [entity ids]}.""",
    "memory_supersede_claim": """\
Mark a claim as no longer current testimony, optionally naming the claim that replaces
it. Use it when the speaker corrected or withdrew what they said.""",
}
DESCRIPTIONS.update({name: " ".join(text.split()) for name, text in FACT_DESCRIPTIONS.items()})

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def _text(namespace: Any) -> str:
    return "/".join(namespace) if isinstance(namespace, list | tuple) else str(namespace)


# -- results and errors ----------------------------------------------------------------


def _ok(data: dict[str, Any]) -> CallToolResult:
    text = json.dumps(data, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def tool_error(exc: MemlaneError) -> CallToolResult:
    """An MCP tool error (``isError``) for a memlane error: its message, type and field."""
    # the text keeps the whole message, the field first ("ttl: must be ..."); the structure splits them
    text = f"{wire.kind_of(exc).label}: {' '.join(str(exc).splitlines())}"
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content={"error": wire.encode(exc)}, is_error=True
    )


class _Checked(Tool):
    """A tool whose refused arguments are a memlane tool error naming the field, as the core's are.

    The SDK would answer with pydantic's own text and links ("Error executing tool ...").
    """

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        try:
            self.fn_metadata.validate_arguments(arguments)
        except PydanticValidationError as e:
            return tool_error(wire.refusal(e.errors(include_url=False), body=False))
        return await super().run(arguments, context, convert_result)


# earlier argument names, still accepted where the tool takes the new one
ALIASES = {"namespace": "namespace_prefix"}


class _AsSent(FuncMetadata):
    """Tool arguments exactly as the client sent them.

    The SDK's default pre-parse turns JSON found inside strings into values (so a
    stored string ``"true"`` or ``'{"a": 1}'`` would arrive as a boolean or an
    object); memlane keeps every value's JSON type, so it validates arguments as sent.
    """

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        data = dict(data)
        for old, new in ALIASES.items():
            if old in data and new not in data and new in self.arg_model.model_fields:
                data[new] = data.pop(old)
        return data


def _compact(schema: Any) -> Any:
    """A tool's JSON schema as few characters as it takes to say the same, since every character of every
    tool's schema is in the agent's context on every turn: no pydantic ``title`` (it repeats the name), an
    optional ``X | None`` as ``"type": [X, "null"]`` rather than an ``anyOf``, and no ``"default": null``
    (leaving an optional argument out means just that)."""
    if isinstance(schema, list):
        return [_compact(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: {name: _compact(p) for name, p in v.items()} if k == "properties" else _compact(v)
        for k, v in schema.items()
        if k != "title"
    }
    branches = out.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
        (other,) = [b for b in branches if b != {"type": "null"}]
        if isinstance(other.get("type"), str) and not set(other) & set(out):
            del out["anyOf"]
            out = {**other, **out, "type": [other["type"], "null"]}
    if "default" in out and out["default"] is None:
        del out["default"]
    return out


# one template per tool: building a tool's argument model and schema costs about 7 ms,
# and every server (one per service, one per test) would otherwise build all of them again
_TEMPLATES: dict[str, Tool] = {}


def _tool(fn: Callable[..., Any], annotations: ToolAnnotations) -> Tool:
    """The tool for a tool function bound to one server's resolver: the tool's cached template, calling ``fn``."""
    template = _TEMPLATES.get(fn.__name__)
    if template is None:
        template = _TEMPLATES[fn.__name__] = _template(fn, annotations)
    return template.model_copy(update={"fn": fn, "annotations": annotations})


def _template(fn: Callable[..., Any], annotations: ToolAnnotations) -> Tool:
    name = fn.__name__
    tool = _Checked.from_function(fn, name=name, description=DESCRIPTIONS[name], annotations=annotations)
    tool.parameters = _compact(tool.parameters)
    meta = tool.fn_metadata
    tool.fn_metadata = _AsSent(
        arg_model=meta.arg_model,
        # no output schema: every tool answers a JSON object (structured content), which the schema
        # ({"type": "object"}) said in about 85 characters per tool of the agent's context
        output_schema=None,
        output_model=None,
        wrap_output=False,
    )
    return tool


# -- the tools -------------------------------------------------------------------------


class _Tools:
    """Tools over whatever ``resolve(ctx)`` returns for a call: the Memory or an AgentView.

    Tool functions are synchronous: the SDK runs them on a worker thread, so
    storage never blocks the event loop. A memlane error becomes a tool error.
    """

    def __init__(self, resolve: Callable[[Context], Backend]) -> None:
        self._resolve = resolve

    def _run(self, ctx: Context, op: Callable[[Backend], Any]) -> CallToolResult:
        try:
            return _ok(op(self._resolve(ctx)))
        except MemlaneError as e:
            return tool_error(e)


# the JSON shape an agent sends for each parameter (the core's annotations are Python's: a namespace is a tuple)
SHAPES: dict[str, Any] = {
    "namespace": str | list[str],
    "namespace_prefix": str | list[str],
    "key": str,
    "key_prefix": str,
    "limit": int,
    "cursor": str,
    "order": str,
    "floor": bool,
    "where": dict[str, Any] | None,
    "query": str,
    "value": Any,
    "text": str,
    "metadata": dict[str, Any],
    "ttl": float,
    "index": bool,
    "messages": list[dict[str, Any]],
    "session": str,
    "at": str,
    "window": int,
    "addresses": list[AddressIn],
    "depth": int,
    "channels": list[Literal["lexical", "vector"]] | None,  # null: both, as on HTTP (the table's from_wire)
    "mode": Literal["hybrid", "lexical", "vector"],  # the chooser's modes need a Python object
    "name": str,
    "entity_ids": list[str],
    "hops": int,
    "predicate": str,
    "time": str | dict[str, str],
    "k": int,
    "ids": list[str],
    "chunk_id": str,
    "item_id": str,
    "before": int,
    "after": int,
    "kind": str,
    "aliases": list[str],
    "profile": str,
    "entity_id": str,
    "alias": str,
    "survivor": str,
    "merged": str,
    "subject": str,
    "object": Any,
    "valid_from": str,
    "valid_to": str,
    "source": str,
    "supersedes": str,
    "title": str,
    "created_at": str,
    "speaker": str,
    "asserted_at": str,
    "chunk": str,
    "about": list[str],
    "claims": list[dict[str, Any]],
    "claim_id": str,
    "fact_id": str,
    "by": str,
}


@dataclass(frozen=True)
class Offer:
    """An MCP tool made from one operation of the table (:mod:`memlane.values.operations`).

    Its parameters' defaults are the core's and their descriptions the table's; what it says about
    itself is in :data:`DESCRIPTIONS`, and its hints follow from the operation (a safe read, a delete,
    another write).

    Attributes:
        operation: the core method it calls; the tool is ``memory_<operation>``.
        params: what it offers an agent, in order. The core's other parameters keep their defaults: every
            parameter's schema is in the agent's context on every turn, so expert knobs stay out.
        shapes: a parameter's JSON shape where this tool's differs from :data:`SHAPES`.
        answer: how the core's answer reads to an agent, where it differs from the service's body.
        prepare: the validated arguments as the core takes them (and a refusal the core would not make).
    """

    operation: str
    params: tuple[str, ...]
    shapes: dict[str, Any] = field(default_factory=dict)
    answer: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @property
    def name(self) -> str:
        return f"memory_{self.operation}"

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        """The tool function's signature, which the SDK reads to build the argument model and the schema."""
        op = OPERATION[self.operation]
        defaults = {p.name: p.default for p in op.params()}
        parameters = []
        for name in self.params:
            shape = self.shapes.get(name, SHAPES[name])
            default = defaults[name]
            if default is None and shape is not Any and not _nullable(shape):
                shape = shape | None
            meaning = op.meaning(name)
            if meaning is not None:
                shape = Annotated[shape, Field(description=meaning)]
            if default is REQUIRED:
                default = inspect.Parameter.empty
            elif name == "namespace_prefix" and default == ():
                default = ""  # the everything-prefix, as an agent writes it
            else:
                default = wire_default(default)
            parameters.append(
                inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=shape)
            )
        parameters.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
        return inspect.Signature(parameters, return_annotation=ToolResult)

    def hints(self) -> ToolAnnotations:
        op = OPERATION[self.operation]
        if op.safe:
            return READ
        if op.result == "gone":
            return DELETE
        return WRITE  # not idempotent: a memory_put without key files a new note each time


# not idempotent: a memory_put without key files a new note each time
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
DELETE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True)


def _nullable(shape: Any) -> bool:
    return type(None) in typing.get_args(shape)


def _found_or_where_to_look(item: Any, args: dict[str, Any]) -> dict[str, Any]:
    if item is None:
        namespace, key = _text(args["namespace"]), args["key"]
        return {
            "found": False,
            "item": None,
            "message": f"nothing is stored at namespace {namespace!r} key {key!r} (or it expired); "
            "memory_recall with key finds the key in any namespace, memory_search finds by topic, "
            "memory_summarize shows which keys exist",
        }
    return {"found": True, "item": item.to_dict()}


def _deleted(deleted: bool, args: dict[str, Any]) -> dict[str, Any]:
    # no error when nothing was there: an agent reads {deleted: false} and moves on
    return {"deleted": deleted, "namespace": _text(args["namespace"]), "key": args["key"]}


def _found_by_id(item: Any, args: dict[str, Any]) -> dict[str, Any]:
    if item is None:  # one answer for an id never written and one this agent may not read
        return {
            "found": False,
            "item": None,
            "message": f"no item you may read has id {args['item_id']!r} (or it was deleted or expired); "
            "memory_search finds items by topic",
        }
    return {"found": True, "item": item.to_dict()}


def _deleted_by_id(deleted: bool, args: dict[str, Any]) -> dict[str, Any]:
    return {"deleted": deleted, "item_id": args["item_id"]}


def _pairs(args: dict[str, Any]) -> dict[str, Any]:
    addresses = [(a.namespace, a.key) if isinstance(a, Address) else (a[0], a[1]) for a in args["addresses"]]
    return {"addresses": addresses}


def _query_or_key(args: dict[str, Any]) -> dict[str, Any]:
    if args["key"] is None and not args["query"].strip():
        raise ValidationError("query", "give a query to search for, or a key for the keyed recall")
    return args


ITEM_OFFERS = (
    Offer("get", ("namespace", "key"), answer=_found_or_where_to_look),
    Offer("get_many", ("addresses",), prepare=_pairs),
    Offer("put", ("namespace", "value", "key", "text", "metadata", "ttl", "index"),
          answer=lambda item, args: {"item": item.to_dict()}),
    Offer("add_conversation", ("namespace", "messages", "session", "at", "window")),
    Offer("delete", ("namespace", "key"), answer=_deleted),
    Offer("list", ("namespace_prefix", "key_prefix", "limit", "cursor", "order")),
    Offer("summarize", ("namespace_prefix", "depth", "key_prefix")),
    Offer("search", ("query", "namespace_prefix", "limit", "channels", "floor", "where")),
    Offer("recall", ("query", "key", "namespace_prefix", "limit", "mode", "floor", "where"), prepare=_query_or_key),
    Offer("history", ("namespace", "key")),
    Offer("get_by_id", ("item_id",), answer=_found_by_id),
    Offer("delete_by_id", ("item_id",), answer=_deleted_by_id),
)  # fmt: skip
FACT_OFFERS = (
    # reads
    Offer("resolve_entity", ("name", "namespace_prefix")),
    Offer("facts_context", ("query", "entity_ids", "hops", "predicate", "time", "limit", "namespace_prefix")),
    Offer("claims_and_sources_context", ("query", "entity_ids", "k", "namespace_prefix")),
    Offer("combined_context", ("query", "entity_ids", "hops", "time", "k", "namespace_prefix")),
    Offer("traverse", ("entity_ids", "hops", "time")),
    Offer("lookup", ("ids",)),
    Offer("hydrate", ("ids",)),
    Offer("neighbours", ("chunk_id", "before", "after")),
    # writes
    Offer("add_entity", ("namespace", "name", "kind", "aliases", "profile")),
    Offer("add_alias", ("entity_id", "alias")),
    Offer("merge_entities", ("survivor", "merged")),
    Offer("assert_fact",
          ("namespace", "subject", "predicate", "object", "valid_from", "valid_to", "source", "supersedes")),
    Offer("retract_fact", ("fact_id",)),
    Offer("end_fact", ("fact_id", "valid_to")),
    Offer("add_document", ("namespace", "title", "text", "source", "created_at"), shapes={"text": str | list[str]}),
    Offer("add_claim", ("namespace", "text", "speaker", "asserted_at", "chunk", "about")),
    Offer("add_claims", ("namespace", "claims")),
    Offer("supersede_claim", ("claim_id", "by")),
)  # fmt: skip


class _Offered(_Tools):
    """Tools made from :class:`Offer` entries."""

    OFFERS: tuple[Offer, ...] = ()

    def tools(self) -> list[Tool]:
        """The tools, ready for ``MCPServer(tools=...)``."""
        return [_tool(self._function(offer), offer.hints()) for offer in self.OFFERS]

    def _function(self, offer: Offer) -> Callable[..., Any]:
        op = OPERATION[offer.operation]
        answer = offer.answer or ANSWERS[op.result]

        def call(ctx: Context, **args: Any) -> CallToolResult:
            def run(m: Backend) -> dict[str, Any]:
                sent = offer.prepare(dict(args)) if offer.prepare else dict(args)
                if op.from_wire is not None:
                    sent = op.from_wire(sent)
                return answer(getattr(m, op.name)(**sent), sent)

            return self._run(ctx, run)

        signature = offer.signature  # worked out once per process, not per server
        call.__name__ = call.__qualname__ = offer.name
        call.__signature__ = signature  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        return call


class MemoryTools(_Offered):
    """The ten item tools."""

    OFFERS = ITEM_OFFERS


class FactTools(_Offered):
    """The facts layer's tools: resolve, the assured reads, primitives and writes."""

    OFFERS = FACT_OFFERS


# -- the query space (memlane.domain.query) ----------------------------------------------

QUERY_DESCRIPTIONS = {
    "memory_query": """\
Answer a question no other tool anticipates with one read-only SQL SELECT over the
memory_v1 views (items, item_history, namespaces, entities, entity_aliases, facts,
facts_current, evidence, documents, chunks, claims, claims_live, claim_entities), e.g.
"which documents mention both Dana and the billing migration, newest first?" or "how many
items per namespace?". Use memory_query_space FIRST to see the views, their columns and
the functions you may call. Only SELECT (WITH allowed) over those views is accepted;
anything else is refused with the reason. Pass values as params (? with a list, :name with
an object), or run a saved query by name with `saved`. Rows are capped (max_rows, default
1000) and time-capped; the result says what was cut. You only ever see rows you may read.
For a known address use memory_get; for a topic, memory_search.""",
    "memory_query_space": """\
Use it before writing a memory_query: it describes the SQL query space, every memory_v1 view with its
columns (type and meaning), the functions allowed, the limits, and the saved queries you can
run by name. Pass `search` to find the views and columns about some words (e.g. "who said",
"valid time") instead of the whole map.""",
}
DESCRIPTIONS.update({name: " ".join(text.split()) for name, text in QUERY_DESCRIPTIONS.items()})


class QueryTools(_Tools):
    """The query space's two tools: run (or check) a statement, and describe the views."""

    def tools(self) -> list[Tool]:
        """The tools, ready for ``MCPServer(tools=...)``."""
        return [_tool(self.memory_query, READ), _tool(self.memory_query_space, READ)]

    def memory_query(
        self,
        ctx: Context,
        sql: Annotated[
            str | None,
            Field(description=OPERATION["query"].meaning("sql")),
        ] = None,
        params: Annotated[
            list[Any] | dict[str, Any] | None,
            Field(description=OPERATION["query"].meaning("params")),
        ] = None,
        saved: Annotated[str | None, Field(description="Run this saved query instead of sql.")] = None,
        max_rows: Annotated[int, Field(description=OPERATION["query"].meaning("max_rows"))] = 1000,
        timeout_ms: Annotated[int, Field(description=OPERATION["query"].meaning("timeout_ms"))] = 2000,
        explain: Annotated[
            bool, Field(description="Only check the statement and show its plan; nothing runs.")
        ] = False,
    ) -> ToolResult:
        def op(m: Backend) -> dict[str, Any]:
            if (sql is None) == (saved is None):
                raise ValidationError("sql", "give either sql (a SELECT) or saved (the name of a saved query)")
            if saved is not None:
                return m.run_saved_query(saved, params, max_rows=max_rows, timeout_ms=timeout_ms).to_dict()
            if explain:
                return m.explain_query(sql, params).to_dict()  # type: ignore[arg-type]
            return m.query(sql, params, max_rows=max_rows, timeout_ms=timeout_ms).to_dict()  # type: ignore[arg-type]

        return self._run(ctx, op)

    def memory_query_space(
        self,
        ctx: Context,
        search: Annotated[str | None, Field(description=OPERATION["search_query_space"].meaning("text"))] = None,
    ) -> ToolResult:
        def op(m: Backend) -> dict[str, Any]:
            if search is not None:
                return {"matches": m.search_query_space(search)}
            return m.describe_query_space() | {"saved_queries": [q.to_dict() for q in m.saved_queries()]}

        return self._run(ctx, op)


# -- profiles: which tools a server offers ------------------------------------------------

ITEM_TOOLS = (
    "memory_get", "memory_get_many", "memory_put", "memory_delete", "memory_list", "memory_summarize",
    "memory_search", "memory_recall", "memory_history",
)  # fmt: skip
PROFILES: dict[str, tuple[str, ...]] = {
    # what an agent needs on every turn: read, write, find and map its memory (under 10 tools, 8,000 characters)
    "default": ITEM_TOOLS,
    "conversations": ("memory_add_conversation",),
    "facts": tuple(FACT_DESCRIPTIONS),
    "query": tuple(QUERY_DESCRIPTIONS),
    "ids": ("memory_get_by_id", "memory_delete_by_id"),
}
PROFILES["all"] = tuple(dict.fromkeys(name for names in PROFILES.values() for name in names))
# earlier tool names, still answered (not listed) where the tool they name is offered
TOOL_ALIASES = {"memory_set": "memory_put"}


def tool_selection(spec: str | Iterable[str] | None = None) -> tuple[str, ...]:
    """The tools a ``--tools`` (or ``/mcp?tools=``) value offers, in :data:`PROFILES` ``"all"``'s order.

    ``spec`` is comma-separated (or a list of) profile names (``default``, ``conversations``, ``facts``,
    ``query``, ``all``) and tool names (``memory_get``, or ``get``); ``-name`` takes a tool or profile away
    (``default,-memory_delete``). ``None`` or ``""`` is the ``default`` profile.

    Raises:
        ValidationError: (field ``tools``) an unknown name, with the nearest ones; or nothing left.
    """
    import difflib

    words = [w.strip() for w in (spec.split(",") if isinstance(spec, str) else spec or ()) if w.strip()]
    chosen: dict[str, None] = {}
    for word in words or ["default"]:
        name = word.lstrip("-").strip()
        full = name if name in PROFILES or name.startswith("memory_") else f"memory_{name}"
        full = TOOL_ALIASES.get(full, full)  # an earlier name (set, memory_set) is the tool's
        if full in PROFILES:
            names = PROFILES[full]
        elif full in PROFILES["all"]:
            names = (full,)
        else:
            known = [*PROFILES, *PROFILES["all"]]
            near = difflib.get_close_matches(name, known, n=2) or difflib.get_close_matches(full, known, n=2)
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            raise ValidationError(
                "tools",
                f"{name!r} is neither a profile ({', '.join(PROFILES)}) nor a memlane tool (memory_get, ...){hint}",
            )
        for n in names:
            if word.startswith("-"):
                chosen.pop(n, None)
            else:
                chosen[n] = None
    if not chosen:
        raise ValidationError("tools", f"{spec!r} leaves no tool to offer")
    return tuple(n for n in PROFILES["all"] if n in chosen)


class _Server(MCPServer):
    """memlane's MCP server: answers a tool's earlier name (:data:`TOOL_ALIASES`) as the tool."""

    @functools.cached_property
    def _tool_names(self) -> frozenset[str]:
        # read at the first call, once every tool is added (build_server adds them all before serving)
        return frozenset(t.name for t in self._tool_manager.list_tools())

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if name not in self._tool_names:
            name = TOOL_ALIASES.get(name, name)
        return await super().call_tool(name, arguments, context)


def build_server(resolve: Callable[[Context], Backend], tools: str | Iterable[str] | None = None) -> MCPServer:
    """An :class:`MCPServer` offering the tools ``tools`` selects (:func:`tool_selection`) over ``resolve(ctx)``."""
    from . import __version__

    names = tool_selection(tools)
    every = MemoryTools(resolve).tools() + FactTools(resolve).tools() + QueryTools(resolve).tools()
    by_name = {tool.name: tool for tool in every}
    return _Server(
        SERVER_NAME,
        title="memlane",
        description="Durable memory for AI agents: exact keyed lookup and confirmed hybrid search.",
        instructions=instructions(names),
        version=__version__,
        tools=[by_name[n] for n in names],
        log_level="WARNING",
    )


# -- stdio: the single owner -------------------------------------------------------------


def run_stdio(mem: Memory, tools: str | Iterable[str] | None = None) -> None:
    """Serve ``mem`` over MCP on stdin/stdout until the client closes it (full access), offering ``tools``."""
    build_server(lambda ctx: mem, tools).run("stdio")


# -- streamable HTTP on the service ------------------------------------------------------

_AGENT = "memlane.agent"  # the ASGI scope key where the endpoint leaves the authenticated agent


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            header = value.decode("latin-1")
            return header[7:].strip() if header[:7].lower() == "bearer " else None
    return None


def _agent_of(ctx: Context) -> Agent:
    request = ctx.request_context.request
    agent = None if request is None else getattr(request, "scope", {}).get(_AGENT)
    if agent is None:  # only reachable if the endpoint is bypassed
        raise UnauthorizedError("a valid token is required: send 'Authorization: Bearer <token>'")
    return agent  # type: ignore[no-any-return]


def _refuse(status: int, message: str, **headers: str) -> Response:
    """An HTTP refusal with a JSON-RPC error body, so MCP clients show memlane's message."""
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=INVALID_REQUEST, message=message))
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _unauthorized() -> Response:
    message = "Unauthorized: a valid token is required: send 'Authorization: Bearer <token>'"
    return _refuse(401, message, **{"WWW-Authenticate": 'Bearer realm="memlane"'})


@dataclass
class _Running:
    loop: asyncio.AbstractEventLoop
    manager: StreamableHTTPSessionManager
    task: asyncio.Task[None]
    ready: asyncio.Event


class McpEndpoint:
    """The ASGI app at ``/mcp``: authenticate, then hand the request to the SDK's session manager.

    Every HTTP request is authenticated with :meth:`Access.authenticate`; without
    a valid bearer token the answer is 401, with a JSON-RPC error body that MCP
    clients show as memlane's message, and the MCP layer never sees the request.
    The agent rides in the ASGI scope, which the SDK hands to each tool call as
    ``ctx.request_context.request``, so each call runs on that agent's view,
    re-read per request like the ``/v1`` routes. The endpoint is stateless: POST
    only (GET and DELETE, for session streams, are 405).

    The tools offered are ``tools`` (a profile selection, :func:`tool_selection`), or what the
    request's ``?tools=`` asks for: each selection is its own server, built once.

    A session manager needs a running task group. Each is started on the first
    request in the serving event loop (so it also works under servers run with
    lifespan off) and stopped by the app's lifespan shutdown, when there is one.
    """

    MAX_SELECTIONS = 32  # distinct ?tools= selections kept running; the least recently used stops first

    def __init__(self, access: Access, *, max_body_bytes: int, tools: str | Iterable[str] | None = None) -> None:
        self._access = access
        self._max_body_bytes = max_body_bytes
        self._default = tool_selection(tools)
        self.server = self._build(self._default)
        self._running: dict[tuple[str, ...], _Running] = {}

    def _build(self, names: tuple[str, ...]) -> MCPServer:
        return build_server(lambda ctx: self._access.view(_agent_of(ctx)), names)

    def _selection(self, scope: Scope) -> tuple[str, ...]:
        from urllib.parse import parse_qs

        asked = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("tools")
        return self._default if not asked else tool_selection(",".join(asked))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # pragma: no cover - the route only receives HTTP
            return
        agent = await anyio.to_thread.run_sync(self._access.authenticate, _bearer(scope))
        if agent is None:
            await _unauthorized()(scope, receive, send)
            return
        if scope["method"] != "POST":
            # stateless: no session to stream to (GET) or to end (DELETE); an idle GET
            # stream would only hold a connection (and a shutdown) open
            await _refuse(405, "this endpoint is stateless: POST one JSON-RPC message per request", Allow="POST")(
                scope, receive, send
            )
            return
        try:
            names = self._selection(scope)
        except ValidationError as e:
            await _refuse(400, f"Bad request: ?{e}")(scope, receive, send)
            return
        manager = await self._manager(names)
        await manager.handle_request({**scope, _AGENT: agent}, receive, send)

    async def _manager(self, names: tuple[str, ...]) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        run = self._running.pop(names, None)  # re-inserted last: the most recently used
        if run is None or run.loop is not loop or run.task.done():
            run = self._start(loop, names)  # no await before this: one start per loop and selection
        self._running[names] = run
        if len(self._running) > self.MAX_SELECTIONS:
            self._running.pop(next(iter(self._running))).task.cancel()
        await run.ready.wait()
        if run.task.done():
            run.task.result()  # raises why the manager stopped
            raise RuntimeError("the MCP session manager stopped")
        return run.manager

    def _start(self, loop: asyncio.AbstractEventLoop, names: tuple[str, ...]) -> _Running:
        # A session manager runs once; each event loop gets a new server and manager.
        server = self._build(names)
        if names == self._default:
            self.server = server
        server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            max_request_body_size=self._max_body_bytes,
            # every request carries a bearer token, which a DNS-rebinding page cannot
            # know; the Host check would only refuse legitimate non-loopback names
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = server.session_manager
        ready = asyncio.Event()

        async def serve() -> None:
            async with manager.run():
                ready.set()
                await asyncio.Event().wait()  # until cancelled (shutdown)

        task = loop.create_task(serve(), name="memlane-mcp-session-manager")
        task.add_done_callback(lambda _: ready.set())
        return _Running(loop, manager, task, ready)

    async def aclose(self) -> None:
        """Stop the session managers that run in this event loop."""
        loop = asyncio.get_running_loop()
        mine = [names for names, run in self._running.items() if run.loop is loop]
        for names in mine:
            run = self._running.pop(names)
            run.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run.task


def mount_mcp(
    app: Any, mem: Memory, access: Access, *, max_body_bytes: int, tools: str | Iterable[str] | None = None
) -> None:
    """Mount the streamable-HTTP MCP endpoint at ``/mcp`` on the service.

    Tool calls run on the calling agent's view of ``mem`` (``access`` wraps the
    same memory), with the visibility of the ``/v1`` API; request bodies over
    ``max_body_bytes`` (the service's own limit) are refused; the endpoint is
    also kept as ``app.state.mcp``. It offers ``tools`` (:func:`tool_selection`;
    the ``default`` profile when ``None``), or what a request's ``?tools=`` asks for.
    """
    from starlette.routing import Route

    endpoint = McpEndpoint(access, max_body_bytes=max_body_bytes, tools=tools)
    app.state.mcp = endpoint
    app.router.routes.append(Route("/mcp", endpoint=endpoint))  # every method: 401 comes first
    original = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with original(a) as state:
            try:
                yield state
            finally:
                await endpoint.aclose()

    app.router.lifespan_context = lifespan
