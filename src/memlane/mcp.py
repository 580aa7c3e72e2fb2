"""memlane's MCP server: the memory as tools for AI agents, on the official MCP SDK (v2).

Nine item tools, one per verb an agent needs: ``memory_get``, ``memory_get_many``,
``memory_set``, ``memory_delete``, ``memory_list``, ``memory_summarize``,
``memory_search``, ``memory_recall`` and ``memory_history``, and eighteen for the
facts layer (:class:`FactTools`: resolve, the assured reads, primitives, writes). Like every
interface, they are thin: parse the arguments, call the core, render
``to_dict()`` as structured content (and the same JSON as text), and turn a
:class:`~memlane.errors.MemlaneError` into an MCP tool error carrying memlane's
message (the type and field in structured content), never a traceback.

Two transports:

* **stdio** (``memlane mcp``, :func:`run_stdio`): single owner; the tools call
  the :class:`~memlane.memory.Memory` directly, with full access.
* **streamable HTTP** at ``/mcp`` on the service (:func:`mount_mcp`): every HTTP
  request must carry ``Authorization: Bearer <token>`` (401 before any MCP
  handling otherwise), and every tool call runs on that agent's
  :class:`~memlane.access.AgentView`, so MCP sees exactly what the ``/v1`` API
  sees. The endpoint is stateless (a plain JSON response per POST), so service
  replicas behind a load balancer need no sticky sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
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

from . import wire
from .conversation import DEFAULT_WINDOW
from .errors import MemlaneError, UnauthorizedError, ValidationError
from .model import Namespace

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from .access import Access, Agent, AgentView
    from .memory import Memory

    Backend = Memory | AgentView

SERVER_NAME = "memlane"
INSTRUCTIONS = """\
memlane is your durable memory. Items live at addresses: a namespace (text such as
user/123, or a list of segments) and a key, ideally a dotted taxonomy path such as
preferences.ui.theme. Values are JSON and keep their type.

Which tool to use:
- You know the address (namespace + key): memory_get (or memory_get_many for several).
- You know the key but not the namespace, or want the newest value filed under a key:
  memory_recall with key.
- You know a topic, not a name: memory_search (or memory_recall with query).
- The store is unfamiliar: memory_summarize first (the map of namespaces and key paths
  with counts), then memory_get / memory_get_many / memory_list on what it shows.
- Write with memory_set (replaces an existing address; memory_history keeps the old
  versions), remove with memory_delete.
- A question over many records (counts, joins, "which documents mention X and Y?"):
  memory_query_space to see the SQL views, then memory_query with one read-only SELECT.
"""

# -- inputs --------------------------------------------------------------------------

NamespaceIn = Annotated[
    str | list[str],
    Field(description="e.g. 'user/123' or ['user', '123']."),
]
PrefixIn = Annotated[
    str | list[str],
    Field(
        description="Only namespaces under this prefix, in whole segments ('user' holds 'user/123', not "
        "'users'); '' means all you may see."
    ),
]
KeyIn = Annotated[str, Field(description="The item's key, e.g. 'preferences.ui.theme'.")]
KeyPrefixIn = Annotated[
    str, Field(description="Only keys under this taxonomy path (whole segments), e.g. 'preferences.ui'.")
]
LimitIn = Annotated[int, Field(description="At most this many results.")]
FloorIn = Annotated[
    bool, Field(description="Drop hits with no real support (true); false returns the best matches however weak.")
]


class Address(BaseModel):
    """One address for ``memory_get_many``."""

    model_config = ConfigDict(extra="forbid")

    namespace: NamespaceIn
    key: KeyIn


AddressIn = Address | Annotated[list[Any], Field(min_length=2, max_length=2)]
ToolResult = Annotated[CallToolResult, dict[str, Any]]

# -- descriptions: each tells an agent when to use it rather than another -------------

DESCRIPTIONS = {
    "memory_get": """\
Read the one item stored at an exact address (namespace + key). Use it when you know
the address, e.g. you filed something under user/123 with key preferences.ui.theme:
exact and deterministic, no ranking, no guessing. Returns {found, item}; found is false
when nothing lives there (or it expired). Know only the key? Use memory_recall with key.
Know only a topic? Use memory_search. Don't know what is stored? Use memory_summarize
first, then come back here.""",
    "memory_get_many": """\
Read several exact addresses in one call; items come back in input order, null where
nothing is stored. Use it instead of repeated memory_get when you know several
addresses, e.g. keys that memory_summarize or memory_list showed you. Each address is
{"namespace": "user/123", "key": "preferences.ui.theme"} (or a [namespace, key] pair).""",
    "memory_set": """\
Write (upsert) a JSON value at namespace + key. Use it to remember anything you will
need later. Writing an existing address replaces the value (the old version stays in
memory_history). The value keeps its JSON type: the string "3.12" stays a string, the
number 3.12 stays a number, objects and lists stay structured. Prefer dotted taxonomy
keys (preferences.ui.theme, project.deadline) so memory_summarize can map the store and
memory_get can read it back exactly; omit key to file a free-form note (an id is
generated; find it later with memory_search). Optional: text (what search indexes
instead of the value), metadata (a JSON object), ttl (seconds until the item expires), index=false (for a
cache entry or a blob: search never returns it; memory_get and memory_list still do).""",
    "memory_add_conversation": """\
Store a conversation so later searches find the exact turn. Use it to remember what was
said in a chat or meeting: pass the messages in order, each {speaker or role, text,
at?, id?}. Each turn becomes an item at key <session>.t<turn> (t00001, t00002...) with
value {speaker, text, at, session, turn}, searchable together with the turns around it,
so memory_search and memory_recall answer who said what and when. Pass session to add
later turns to the same conversation (numbering continues); omit it to start a new one
(its name is in each returned item's value). at: the time of messages without one.""",
    "memory_delete": """\
Delete the item at an exact address (namespace + key). Use it when a memory is wrong or
no longer wanted; the deleted value stays readable in memory_history. Returns
{deleted: false} when nothing live was stored there.""",
    "memory_list": """\
List items (with values) in address order under a namespace prefix and optional key
prefix, one page at a time: pass next_cursor back as cursor for the next page (it is
null on the last one). Use it to read everything in a small, known area. For an
overview of a large or unfamiliar store use memory_summarize first (no values, just the
map); for a topic use memory_search.""",
    "memory_summarize": """\
The map of the memory: for each namespace, its taxonomy key paths cut at `depth`
segments, with item counts (no values). Use it FIRST when the store is unfamiliar or you
don't know which keys exist, then drill down: pass a path back as key_prefix with a
larger depth, and read exact items with memory_get / memory_get_many (or memory_list).
Cheap and deterministic.""",
    "memory_search": """\
Find items about a topic when you don't know their address: full-text (BM25) and vector
similarity, fused with Reciprocal Rank Fusion and re-checked against the live rows, so
nothing expired, deleted or hidden comes back. Use it for questions such as "what do I
know about the user's editor setup?". If you know the exact namespace + key, use
memory_get instead (exact, no ranking); if you know the key, memory_recall with key.
Returns an envelope: hits (address, value, score, per-channel ranks), counts per
channel, notes. Scores order the hits; they are not calibrated relevance.""",
    "memory_recall": """\
The one-call entry point to memory. With `key`: the keyed recall, i.e. every item stored
under exactly that key in any namespace you may see (or under `namespace`), newest first,
mode "keyed", no ranking and no index; use it when you know the key (taxonomy path) but
not the namespace, or want the latest value filed under a key. Without `key`: searches
`query` by topic like memory_search (mode hybrid by default, or lexical / vector). Know
the full address? memory_get is the exact lookup. Returns the same envelope as
memory_search.""",
    "memory_history": """\
Past versions of an exact address, newest first: each earlier value with who wrote it,
when, and what ended it (replace, delete, clear, expire). Use it to answer "what was this
before?" or "who changed this?"; for the current value use memory_get.""",
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


def _ns(namespace: str | list[str]) -> Namespace | str:
    """A namespace argument for the core: text as it is, a list of segments as a tuple."""
    return tuple(namespace) if isinstance(namespace, list) else namespace


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


# one template per tool function: building a tool's argument model and schema costs about 7 ms,
# and every server (one per service, one per test) would otherwise build all of them again
_TEMPLATES: dict[Callable[..., Any], Tool] = {}


def _tool(fn: Callable[..., Any], annotations: ToolAnnotations) -> Tool:
    """The tool for a bound tool method: the function's cached template, bound to this instance."""
    template = _TEMPLATES.get(fn.__func__)  # type: ignore[attr-defined]
    if template is None:
        template = _TEMPLATES[fn.__func__] = _template(fn, annotations)  # type: ignore[attr-defined]
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


class MemoryTools(_Tools):
    """The ten item tools."""

    def tools(self) -> list[Tool]:
        """The tools, ready for ``MCPServer(tools=...)``."""
        # not idempotent: a memory_set without key files a new note each time
        write = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
        delete = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True)
        return [
            _tool(self.memory_get, READ),
            _tool(self.memory_get_many, READ),
            _tool(self.memory_set, write),
            _tool(self.memory_add_conversation, write),
            _tool(self.memory_delete, delete),
            _tool(self.memory_list, READ),
            _tool(self.memory_summarize, READ),
            _tool(self.memory_search, READ),
            _tool(self.memory_recall, READ),
            _tool(self.memory_history, READ),
        ]

    def memory_get(self, namespace: NamespaceIn, key: KeyIn, ctx: Context) -> ToolResult:
        def op(m: Backend) -> dict[str, Any]:
            item = m.get(_ns(namespace), key)
            if item is None:
                return {
                    "found": False,
                    "item": None,
                    "message": f"nothing is stored at namespace {_text(namespace)!r} key {key!r} (or it expired); "
                    "memory_recall with key finds the key in any namespace, memory_search finds by topic, "
                    "memory_summarize shows which keys exist",
                }
            return {"found": True, "item": item.to_dict()}

        return self._run(ctx, op)

    def memory_get_many(
        self,
        addresses: Annotated[
            list[AddressIn],
            Field(description='Addresses to read, e.g. [{"namespace": "user/123", "key": "preferences.ui.theme"}].'),
        ],
        ctx: Context,
    ) -> ToolResult:
        pairs: list[tuple[Any, Any]] = [
            (_ns(a.namespace), a.key) if isinstance(a, Address) else (a[0], a[1]) for a in addresses
        ]

        def op(m: Backend) -> dict[str, Any]:
            return {"items": [None if i is None else i.to_dict() for i in m.get_many(pairs)]}

        return self._run(ctx, op)

    def memory_set(
        self,
        namespace: NamespaceIn,
        value: Annotated[Any, Field(description="Any JSON value; its type is kept exactly.")],
        ctx: Context,
        key: Annotated[
            str | None,
            Field(description="Taxonomy key such as 'preferences.ui.theme'; omit for a note with a generated id."),
        ] = None,
        text: Annotated[
            str | None, Field(description="What search indexes, instead of the value (or its JSON).")
        ] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="A JSON object stored beside the value.")] = None,
        ttl: Annotated[
            float | None, Field(description="Seconds until the item expires and disappears from every read.")
        ] = None,
        index: Annotated[
            bool, Field(description="false: search never returns it (a cache entry, a blob); get and list still do.")
        ] = True,
    ) -> ToolResult:
        def op(m: Backend) -> dict[str, Any]:
            item = m.put(_ns(namespace), key, value, text=text, metadata=metadata, ttl=ttl, index=index)
            return {"item": item.to_dict()}

        return self._run(ctx, op)

    def memory_add_conversation(
        self,
        namespace: NamespaceIn,
        messages: Annotated[
            list[dict[str, Any]],
            Field(
                description='The turns in order, e.g. [{"speaker": "Kim", "text": "...", "at": "2026-03-01T09:00Z"}].'
            ),
        ],
        ctx: Context,
        session: Annotated[
            str | None, Field(description="The conversation to add to; omit to start a new one.")
        ] = None,
        at: Annotated[str | None, Field(description="ISO time of messages that carry none; now if omitted.")] = None,
        window: Annotated[int, Field(description="Turns each side searched with a turn (0-10).")] = DEFAULT_WINDOW,
    ) -> ToolResult:
        def op(m: Backend) -> dict[str, Any]:
            items = m.add_conversation(_ns(namespace), messages, session=session, at=at, window=window)
            return {"items": [i.to_dict() for i in items]}

        return self._run(ctx, op)

    def memory_delete(self, namespace: NamespaceIn, key: KeyIn, ctx: Context) -> ToolResult:
        def op(m: Backend) -> dict[str, Any]:
            return {"deleted": m.delete(_ns(namespace), key), "namespace": _text(namespace), "key": key}

        return self._run(ctx, op)

    def memory_list(
        self,
        ctx: Context,
        namespace_prefix: PrefixIn = "",
        key_prefix: KeyPrefixIn = "",
        limit: LimitIn = 100,
        cursor: Annotated[
            str | None, Field(description="next_cursor from the previous page; omit for the first page.")
        ] = None,
    ) -> ToolResult:
        def op(m: Backend) -> dict[str, Any]:
            return m.list(_ns(namespace_prefix), key_prefix=key_prefix, limit=limit, cursor=cursor).to_dict()

        return self._run(ctx, op)

    def memory_summarize(
        self,
        ctx: Context,
        namespace_prefix: PrefixIn = "",
        depth: Annotated[
            int, Field(description="Key path segments to keep: depth 2 cuts preferences.ui.theme to preferences.ui.")
        ] = 3,
        key_prefix: KeyPrefixIn = "",
    ) -> ToolResult:
        def op(m: Backend) -> dict[str, Any]:
            return {"summary": m.summarize(_ns(namespace_prefix), depth=depth, key_prefix=key_prefix)}

        return self._run(ctx, op)

    def memory_search(
        self,
        query: Annotated[str, Field(description="What you are looking for, in plain words.")],
        ctx: Context,
        namespace_prefix: PrefixIn = "",
        limit: LimitIn = 10,
        channels: Annotated[
            list[Literal["lexical", "vector"]] | None,
            Field(description="Channels to use: 'lexical' (BM25) and/or 'vector'; both by default."),
        ] = ["lexical", "vector"],  # noqa: B006 - pydantic copies defaults; the schema shows this one
        floor: FloorIn = True,
    ) -> ToolResult:
        extra: dict[str, Any] = {} if channels is None else {"channels": channels}

        def op(m: Backend) -> dict[str, Any]:
            return m.search(query, namespace_prefix=_ns(namespace_prefix), limit=limit, floor=floor, **extra).to_dict()

        return self._run(ctx, op)

    def memory_recall(
        self,
        ctx: Context,
        query: Annotated[str, Field(description="A topic to search for; not needed with key.")] = "",
        key: Annotated[
            str | None,
            Field(description="Exact key: return every item filed under it (newest first) instead of searching."),
        ] = None,
        namespace_prefix: PrefixIn = "",
        limit: LimitIn = 10,
        mode: Annotated[
            Literal["hybrid", "lexical", "vector"],
            Field(description="Search mode without key: hybrid (default), lexical or vector."),
        ] = "hybrid",
        floor: FloorIn = True,
    ) -> ToolResult:
        def op(m: Backend) -> dict[str, Any]:
            if key is None and not query.strip():
                raise ValidationError("query", "give a query to search for, or a key for the keyed recall")
            ns = _ns(namespace_prefix)
            return m.recall(query, key=key, namespace_prefix=ns, limit=limit, mode=mode, floor=floor).to_dict()

        return self._run(ctx, op)

    def memory_history(self, namespace: NamespaceIn, key: KeyIn, ctx: Context) -> ToolResult:
        def op(m: Backend) -> dict[str, Any]:
            return {"versions": [v.to_dict() for v in m.history(_ns(namespace), key)]}

        return self._run(ctx, op)


EntityIdsIn = Annotated[list[str], Field(description="Entity ids (ent_...), e.g. from memory_resolve_entity.")]
TimeIn = Annotated[
    str | dict[str, str],
    Field(description='"current", or {"valid_at": ISO time, "believed_at": ISO time} (either may be left out).'),
]
HopsIn = Annotated[int, Field(description="Graph steps to expand from the entities (0-3).")]


class FactTools(_Tools):
    """The facts layer's tools: resolve, the assured reads, primitives and writes."""

    def tools(self) -> list[Tool]:
        """The tools, ready for ``MCPServer(tools=...)``."""
        write = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
        reads: list[Callable[..., Any]] = [
            self.memory_resolve_entity,
            self.memory_facts_context,
            self.memory_claims_and_sources_context,
            self.memory_combined_context,
            self.memory_traverse,
            self.memory_lookup,
            self.memory_hydrate,
            self.memory_neighbours,
        ]
        writes: list[Callable[..., Any]] = [
            self.memory_add_entity,
            self.memory_add_alias,
            self.memory_merge_entities,
            self.memory_assert_fact,
            self.memory_retract_fact,
            self.memory_end_fact,
            self.memory_add_document,
            self.memory_add_claim,
            self.memory_add_claims,
            self.memory_supersede_claim,
        ]
        return [_tool(fn, READ) for fn in reads] + [_tool(fn, write) for fn in writes]

    # -- reads ------------------------------------------------------------

    def memory_resolve_entity(
        self,
        name: Annotated[str, Field(description="The name as you heard it.")],
        ctx: Context,
        namespace_prefix: PrefixIn = "",
    ) -> ToolResult:
        return self._run(ctx, lambda m: m.resolve_entity(name, namespace_prefix=_ns(namespace_prefix)).to_dict())

    def memory_facts_context(
        self,
        query: Annotated[str, Field(description="The question, in plain words.")],
        ctx: Context,
        entity_ids: EntityIdsIn | None = None,
        hops: HopsIn = 1,
        predicate: Annotated[str | None, Field(description="Only facts with this predicate.")] = None,
        time: TimeIn = "current",
        limit: LimitIn = 20,
        namespace_prefix: PrefixIn = "",
    ) -> ToolResult:
        return self._run(
            ctx,
            lambda m: m.facts_context(
                query,
                entity_ids=entity_ids,
                hops=hops,
                predicate=predicate,
                time=time,
                limit=limit,
                namespace_prefix=_ns(namespace_prefix),
            ).to_dict(),
        )

    def memory_claims_and_sources_context(
        self,
        query: Annotated[str, Field(description="The question, in plain words.")],
        ctx: Context,
        entity_ids: EntityIdsIn | None = None,
        k: Annotated[int, Field(description="Claim groups and passages to return (at most 100).")] = 50,
        namespace_prefix: PrefixIn = "",
    ) -> ToolResult:
        return self._run(
            ctx,
            lambda m: m.claims_and_sources_context(
                query, entity_ids=entity_ids, k=k, namespace_prefix=_ns(namespace_prefix)
            ).to_dict(),
        )

    def memory_combined_context(
        self,
        query: Annotated[str, Field(description="The question, in plain words.")],
        ctx: Context,
        entity_ids: EntityIdsIn | None = None,
        hops: HopsIn = 1,
        time: TimeIn = "current",
        k: Annotated[int, Field(description="Results per list (at most 100).")] = 50,
        namespace_prefix: PrefixIn = "",
    ) -> ToolResult:
        return self._run(
            ctx,
            lambda m: m.combined_context(
                query, entity_ids=entity_ids, hops=hops, time=time, k=k, namespace_prefix=_ns(namespace_prefix)
            ).to_dict(),
        )

    def memory_traverse(
        self, entity_ids: EntityIdsIn, ctx: Context, hops: HopsIn = 2, time: TimeIn = "current"
    ) -> ToolResult:
        return self._run(ctx, lambda m: m.traverse(entity_ids, hops=hops, time=time).to_dict())

    def memory_lookup(
        self, ids: Annotated[list[str], Field(description="Ids: ent_, fact_, doc_, chunk_ or claim_...")], ctx: Context
    ) -> ToolResult:
        return self._run(ctx, lambda m: {"records": [None if r is None else r.to_dict() for r in m.lookup(ids)]})

    def memory_hydrate(
        self, ids: Annotated[list[str], Field(description="Ids: ent_, fact_, doc_, chunk_ or claim_...")], ctx: Context
    ) -> ToolResult:
        return self._run(ctx, lambda m: {"records": [None if r is None else r.to_dict() for r in m.hydrate(ids)]})

    def memory_neighbours(
        self,
        chunk_id: Annotated[str, Field(description="A chunk id (chunk_...).")],
        ctx: Context,
        before: Annotated[int, Field(description="Passages before it.")] = 1,
        after: Annotated[int, Field(description="Passages after it.")] = 1,
    ) -> ToolResult:
        return self._run(ctx, lambda m: {"chunks": [c.to_dict() for c in m.neighbours(chunk_id, before, after)]})

    # -- writes -----------------------------------------------------------

    def memory_add_entity(
        self,
        namespace: NamespaceIn,
        name: Annotated[str, Field(description="The entity's canonical name.")],
        ctx: Context,
        kind: Annotated[str, Field(description="person, project, team, place, ...")] = "thing",
        aliases: Annotated[list[str], Field(description="Other names it goes by.")] = [],  # noqa: B006
        profile: Annotated[str, Field(description="A short description that tells it apart.")] = "",
    ) -> ToolResult:
        return self._run(
            ctx, lambda m: m.add_entity(_ns(namespace), name, kind=kind, aliases=aliases, profile=profile).to_dict()
        )

    def memory_add_alias(
        self, entity_id: Annotated[str, Field(description="ent_...")], alias: str, ctx: Context
    ) -> ToolResult:
        return self._run(ctx, lambda m: m.add_alias(entity_id, alias).to_dict())

    def memory_merge_entities(
        self,
        survivor: Annotated[str, Field(description="The entity id that stays.")],
        merged: Annotated[str, Field(description="The duplicate entity id merged into it.")],
        ctx: Context,
    ) -> ToolResult:
        return self._run(ctx, lambda m: m.merge_entities(survivor, merged).to_dict())

    def memory_assert_fact(
        self,
        namespace: NamespaceIn,
        subject: Annotated[str, Field(description="The subject's entity id (ent_...).")],
        predicate: Annotated[str, Field(description="The relation, e.g. 'works on', 'cutover date'.")],
        object: Annotated[Any, Field(description="An entity id (ent_...) or any JSON value.")],  # noqa: A002
        ctx: Context,
        valid_from: Annotated[str | None, Field(description="ISO time it became true.")] = None,
        valid_to: Annotated[str | None, Field(description="ISO time it stopped being true.")] = None,
        source: Annotated[str | None, Field(description="Where you learned it (evidence).")] = None,
        supersedes: Annotated[str | None, Field(description="A fact id this one corrects.")] = None,
    ) -> ToolResult:
        return self._run(
            ctx,
            lambda m: m.assert_fact(
                _ns(namespace),
                subject,
                predicate,
                object,
                valid_from=valid_from,
                valid_to=valid_to,
                source=source,
                supersedes=supersedes,
            ).to_dict(),
        )

    def memory_retract_fact(self, fact_id: Annotated[str, Field(description="fact_...")], ctx: Context) -> ToolResult:
        return self._run(ctx, lambda m: m.retract_fact(fact_id).to_dict())

    def memory_end_fact(
        self,
        fact_id: Annotated[str, Field(description="fact_...")],
        valid_to: Annotated[str, Field(description="ISO time it stopped being true.")],
        ctx: Context,
    ) -> ToolResult:
        return self._run(ctx, lambda m: m.end_fact(fact_id, valid_to).to_dict())

    def memory_add_document(
        self,
        namespace: NamespaceIn,
        title: str,
        text: Annotated[str | list[str], Field(description="The text, or a list of passages (one chunk each).")],
        ctx: Context,
        source: Annotated[str | None, Field(description="Where it comes from (URL, file, meeting).")] = None,
        created_at: Annotated[str | None, Field(description="ISO time the source was written.")] = None,
    ) -> ToolResult:
        return self._run(
            ctx, lambda m: m.add_document(_ns(namespace), title, text, source=source, created_at=created_at).to_dict()
        )

    def memory_add_claim(
        self,
        namespace: NamespaceIn,
        text: Annotated[str, Field(description="What was said, as one statement.")],
        ctx: Context,
        speaker: str | None = None,
        asserted_at: Annotated[str | None, Field(description="ISO time it was said.")] = None,
        chunk: Annotated[str | None, Field(description="The chunk id it came from.")] = None,
        about: Annotated[list[str], Field(description="Entity ids it is about.")] = [],  # noqa: B006
    ) -> ToolResult:
        return self._run(
            ctx,
            lambda m: m.add_claim(
                _ns(namespace), text, speaker=speaker, asserted_at=asserted_at, chunk=chunk, about=about
            ).to_dict(),
        )

    def memory_add_claims(
        self,
        namespace: NamespaceIn,
        claims: Annotated[
            list[dict[str, Any]],
            Field(description='Claims, e.g. [{"text": "...", "speaker": "Kim", "chunk": "chunk_...", "about": []}].'),
        ],
        ctx: Context,
    ) -> ToolResult:
        return self._run(ctx, lambda m: {"claims": [c.to_dict() for c in m.add_claims(_ns(namespace), claims)]})

    def memory_supersede_claim(
        self,
        claim_id: Annotated[str, Field(description="claim_...")],
        ctx: Context,
        by: Annotated[str | None, Field(description="The claim id that replaces it.")] = None,
    ) -> ToolResult:
        return self._run(ctx, lambda m: m.supersede_claim(claim_id, by).to_dict())


# -- the query space (memlane.query) -----------------------------------------------------

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
            Field(description="One SELECT over the memory_v1 views, e.g. 'SELECT claim_text FROM claims_live'."),
        ] = None,
        params: Annotated[
            list[Any] | dict[str, Any] | None,
            Field(description="Values for ? (a list, in order) or :name (an object) placeholders."),
        ] = None,
        saved: Annotated[str | None, Field(description="Run this saved query instead of sql.")] = None,
        max_rows: Annotated[int, Field(description="At most this many rows (1-100000).")] = 1000,
        timeout_ms: Annotated[int, Field(description="Stop the statement after this long (1-60000).")] = 2000,
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
        search: Annotated[
            str | None, Field(description="Only views and columns whose name or meaning has these words.")
        ] = None,
    ) -> ToolResult:
        def op(m: Backend) -> dict[str, Any]:
            if search is not None:
                return {"matches": m.search_query_space(search)}
            return m.describe_query_space() | {"saved_queries": [q.to_dict() for q in m.saved_queries()]}

        return self._run(ctx, op)


def build_server(resolve: Callable[[Context], Backend]) -> MCPServer:
    """An :class:`MCPServer` with the memory tools over ``resolve(ctx)``."""
    from . import __version__

    return MCPServer(
        SERVER_NAME,
        title="memlane",
        description="Durable memory for AI agents: exact keyed lookup and confirmed hybrid search.",
        instructions=INSTRUCTIONS,
        version=__version__,
        tools=MemoryTools(resolve).tools() + FactTools(resolve).tools() + QueryTools(resolve).tools(),
        log_level="WARNING",
    )


# -- stdio: the single owner -------------------------------------------------------------


def run_stdio(mem: Memory) -> None:
    """Serve ``mem`` over MCP on stdin/stdout until the client closes it (full access)."""
    build_server(lambda ctx: mem).run("stdio")


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

    The session manager needs a running task group. It is started on the first
    request in the serving event loop (so it also works under servers run with
    lifespan off) and stopped by the app's lifespan shutdown, when there is one.
    """

    def __init__(self, access: Access, *, max_body_bytes: int) -> None:
        self._access = access
        self._max_body_bytes = max_body_bytes
        self.server = build_server(lambda ctx: access.view(_agent_of(ctx)))
        self._running: _Running | None = None

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
        manager = await self._manager()
        await manager.handle_request({**scope, _AGENT: agent}, receive, send)

    async def _manager(self) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        run = self._running
        if run is None or run.loop is not loop or run.task.done():
            run = self._running = self._start(loop)  # no await before this: one start per loop
        await run.ready.wait()
        if run.task.done():
            run.task.result()  # raises why the manager stopped
            raise RuntimeError("the MCP session manager stopped")
        return run.manager

    def _start(self, loop: asyncio.AbstractEventLoop) -> _Running:
        # A session manager runs once; each event loop gets a new one.
        self.server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            max_request_body_size=self._max_body_bytes,
            # every request carries a bearer token, which a DNS-rebinding page cannot
            # know; the Host check would only refuse legitimate non-loopback names
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = self.server.session_manager
        ready = asyncio.Event()

        async def serve() -> None:
            async with manager.run():
                ready.set()
                await asyncio.Event().wait()  # until cancelled (shutdown)

        task = loop.create_task(serve(), name="memlane-mcp-session-manager")
        task.add_done_callback(lambda _: ready.set())
        return _Running(loop, manager, task, ready)

    async def aclose(self) -> None:
        """Stop the session manager, if it runs in this event loop."""
        run, self._running = self._running, None
        if run is None or run.loop is not asyncio.get_running_loop():
            return
        run.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run.task


def mount_mcp(app: Any, mem: Memory, access: Access, *, max_body_bytes: int) -> None:
    """Mount the streamable-HTTP MCP endpoint at ``/mcp`` on the service.

    Tool calls run on the calling agent's view of ``mem`` (``access`` wraps the
    same memory), with the visibility of the ``/v1`` API; request bodies over
    ``max_body_bytes`` (the service's own limit) are refused; the endpoint is
    also kept as ``app.state.mcp``.
    """
    from starlette.routing import Route

    endpoint = McpEndpoint(access, max_body_bytes=max_body_bytes)
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
