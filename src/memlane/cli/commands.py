"""The commands for people that are operations of the table: what each declares beside its operation.

Everything else (types, defaults, help of each parameter, ``--json``, ``--url``/``--token``, errors) comes from the
operation's declaration (:mod:`memlane.cli.made`).
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Annotated, Any

import typer

import memlane
import memlane.cli.render as show

from .base import EXIT_INVALID, _fail, _option, _value, namespace_hint
from .made import Call, made

PREFIX = {"namespace_prefix": ("--prefix",)}
ENTITY = {"entity_ids": ("--entity", "-e")}
AS_TEXT = _option("--string", help="Store VALUE as a string even if it parses as JSON.", kind=bool)
LENIENT = {"value": "JSON if it parses, else a string (--string: always); - reads stdin.",
           "key": "Taxonomy key, e.g. preferences.ui.theme."}  # fmt: skip


def _interactive() -> bool:
    return sys.stdin.isatty()


def _lenient(name: str) -> Any:
    def prepare(c: Call) -> None:  # JSON if it parses, else a string; an entity id as it is
        raw = c.args[name]
        c.args[name] = raw if name == "object" and raw.startswith("ent_") else _value(raw, c.own["string"])

    return prepare


def _put(c: Call) -> Any:
    stored = c.mem.put(**c.args)
    hint = namespace_hint(str(c.args["namespace"]))
    if hint is not None:
        typer.echo(f"Note: {hint}", err=True)
    return stored


PUT = made("put", "put", aliases=("set",),
    args=("namespace", "key", "value"), kinds={"value": "text"}, helps=LENIENT, own={"string": AS_TEXT},
    prepare=_lenient("value"), call=_put, render=show.stored,
    example="memlane put user/123 preferences.ui.theme dark\nmemlane put user/123 profile.python 3.12 --string\n"
    "memlane put cache/web page.home '{\"html\": \"...\"}' --no-index\n"
    "echo \"long text\" | memlane put user/1 notes.today -",
)  # fmt: skip
made("note", "put",
    args=("namespace", "value"), kinds={"value": "text"}, helps=LENIENT, hide=("key",), own={"string": AS_TEXT},
    prepare=_lenient("value"), call=_put, render=show.stored, example='memlane note user/123 "prefers short answers"',
    summary="Store a value under a generated key (a note: searchable, still addressable).")  # fmt: skip
made("delete", "delete", args=("namespace", "key"), render=show.deleted,
     summary="Delete one item (kept in history); exit code 1 when there is none.",
     example="memlane delete user/123 preferences.ui.theme")  # fmt: skip


def _confirm(c: Call) -> None:
    prefix = c.args.get("namespace_prefix", "")
    if not c.own["yes"]:
        if not _interactive():
            _fail(f"clear deletes every item under {prefix!r}; pass --yes to confirm", EXIT_INVALID)
        typer.confirm(f"Delete every item under {prefix!r}?", abort=True)


YES = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
made("clear", "clear", args=("namespace_prefix",), own={"yes": YES}, prepare=_confirm, render=show.cleared,
     example="memlane clear user/123 --yes")  # fmt: skip
made("get", "get", args=("namespace", "key"), render=show.item,
     own={"value_only": _option("--value", help="Print only the value as JSON.", kind=bool)},
     summary="The item at an address, value and details; exit code 1 when there is none.",
     example="memlane get user/123 preferences.ui.theme\n"
     "memlane get user/123 preferences.ui.theme --value")  # fmt: skip


def _every_page(c: Call) -> Any:
    page = c.mem.list(**c.args)
    found = list(page.items)
    while c.own["every"] and page.next_cursor:
        page = c.mem.list(**(c.args | {"cursor": page.next_cursor}))
        found += page.items
    return memlane.Page(found, page.next_cursor)


made("list", "list", args=("namespace_prefix",), call=_every_page, render=show.items,
     own={"every": _option("--all", help="Page through everything (--limit is then the page size).", kind=bool)},
     example="memlane list user/123 --key-prefix preferences --limit 20\nmemlane list --all --json")  # fmt: skip
made("fact assert", "assert_fact",
     args=("namespace", "subject", "predicate", "object"), kinds={"object": "text"}, own={"string": AS_TEXT},
     helps={"object": "An entity id (ent_...), or a value: JSON if it parses, else a string."},
     prepare=_lenient("object"), example='memlane fact assert team/acme ent_0123 "works on" ent_4567')  # fmt: skip

# The commands that declare no more than their arguments, example, flags and rendering.
SIMPLE: list[tuple[str, str, tuple[str, ...], str, dict[str, Any]]] = [
    ("fetch", "fetch", ("key",), "fetch preferences.ui.theme --prefix user", {"flags": PREFIX, "render": show.items}),
    ("namespaces", "namespaces", ("prefix",), "namespaces user --max-depth 2", {"render": show.namespaces}),
    ("summarize", "summarize", ("namespace_prefix",), "summarize user/123 --depth 1", {"render": show.summary}),
    ("history", "history", ("namespace", "key"), "history user/123 preferences.ui.theme", {"render": show.versions}),
    ("entity add", "add_entity", ("namespace", "name"), "entity add team/acme Ravi --kind person --alias RK",
     {"flags": {"aliases": ("--alias",)}}),
    ("entity alias", "add_alias", ("entity_id", "alias"), 'entity alias ent_0123 "Ravi K"', {}),
    ("entity merge", "merge_entities", ("survivor", "merged"), "entity merge ent_0123 ent_4567", {}),
    ("entity resolve", "resolve_entity", ("name",), "entity resolve Ravi --prefix team/acme",
     {"flags": PREFIX, "render": show.context}),
    ("fact retract", "retract_fact", ("fact_id",), "fact retract fact_0123", {}),
    ("fact end", "end_fact", ("fact_id", "valid_to"), "fact end fact_0123 2026-06-30", {}),
    ("doc neighbours", "neighbours", ("chunk_id",), "doc neighbours chunk_0123 --before 2", {"render": show.chunks}),
    ("claim add", "add_claim", ("namespace", "text"), 'claim add team/acme "The cutover moves to April" --speaker Ravi',
     {}),
    ("claim supersede", "supersede_claim", ("claim_id",), "claim supersede claim_0123", {}),
    ("retention set", "set_retention", ("prefix",), "retention set counters --keep-versions 10",
     {"render": show.rule, "embedder": False}),
    ("retention list", "retention_rules", (), "retention list", {"render": show.rules, "embedder": False}),
]  # fmt: skip
for _path, _op, _args, _example, _more in SIMPLE:
    made(_path, _op, args=_args, example=f"memlane {_example}", **_more)

SEARCH = {"channels": "csv", "where": "json"}
made("search", "search", args=("query",), flags=PREFIX, kinds=SEARCH, render=show.envelope,
     example="memlane search \"editor theme\" --prefix user/123 --limit 5\nmemlane search kitten --channels vector\n"
     "memlane search editor --where '{\"metadata.source\": \"chat\"}'")  # fmt: skip
CHOOSER = _option("--chooser-model", metavar="MODEL", help="Chat model that picks addresses in single/tiered mode, "
                  "via an OpenAI-compatible API ($MEMLANE_CHAT_BASE_URL or $OPENAI_BASE_URL; key $MEMLANE_CHAT_API_KEY "
                  "or $OPENAI_API_KEY).")  # fmt: skip


def _chooser(c: Call) -> None:
    if c.args.get("key") is None and not c.args.get("query", "").strip():
        raise memlane.ValidationError("query", "give a QUERY to search for, or --key KEY for the keyed recall")
    model = c.own["chooser_model"]
    if model is not None:
        if c.args.get("key") is not None or c.args.get("mode", "hybrid") not in ("single", "tiered"):
            raise memlane.ValidationError(
                "chooser-model", "is only used by --mode single or tiered (and not with --key)"
            )
        c.args["chooser"] = memlane.OpenAIChooser(model)


made("recall", "recall", args=("query",), flags=PREFIX, kinds=SEARCH, own={"chooser_model": CHOOSER},
     prepare=_chooser, render=show.envelope, example="memlane recall \"what editor theme?\" --prefix user/123\n"
     "memlane recall --key preferences.ui.theme --prefix user")  # fmt: skip

# -- the facts layer

WHEN = {"valid_at": _option("--valid-at", help="Ask what held in the world at this ISO time."),
        "believed_at": _option("--believed-at", help="Ask what memlane believed at this ISO time.")}  # fmt: skip


def _time(c: Call) -> None:
    c.args["time"] = {k: c.own[k] for k in WHEN if c.own[k] is not None} or "current"


def _context(path: str, op: str, example: str, timed: bool = True, **kw: Any) -> None:
    made(path, op, flags=kw.pop("flags", PREFIX | ENTITY), hide=("time",) * timed, own=WHEN if timed else {},
         prepare=_time if timed else None, render=show.context, example=example, **kw)  # fmt: skip


_context("fact context", "facts_context", 'memlane fact context "what is Ravi working on" --entity ent_0123',
         args=("query",), defaults={"query": ""})  # fmt: skip
_context("fact traverse", "traverse", "memlane fact traverse ent_0123 --hops 2", args=("entity_ids",))
TOP_K: Any = {"args": ("query",), "defaults": {"k": 10}, "flags": PREFIX | ENTITY | {"k": ("-k",)}}
_context("claim context", "claims_and_sources_context", 'memlane claim context "when is the cutover" -k 5',
         timed=False, **TOP_K)  # fmt: skip
_context("context", "combined_context", 'memlane context "when is the billing cutover" --entity ent_0123', **TOP_K)
CURRENT = _option("--current", help="Only what is current (hydrate).", kind=bool)
made("lookup", "lookup", args=("ids",), own={"current": CURRENT}, render=show.records,
     call=lambda c: (c.mem.hydrate if c.own["current"] else c.mem.lookup)(**c.args),
     example="memlane lookup ent_0123 fact_4567 --json")  # fmt: skip


def _clear_rule(c: Call) -> Any:  # history retention: the owner's settings, opened without an embedder
    if not c.mem.clear_retention(**c.args):
        _fail(f"no retention rule at {show.rule_prefix(c.args['prefix'])!r}; `memlane retention list` lists them")
    return True


made("retention clear", "clear_retention", args=("prefix",), call=_clear_rule, render=show.rule_cleared,
     embedder=False, example="memlane retention clear counters")  # fmt: skip

# -- operations whose input is a file (or stdin): the command reads it, the operation takes its content


def _json_lines(path: str, nothing: str) -> tuple[list[Any], list[int]]:
    """Each non-blank line of a JSON Lines file, and its line number; a bad line is named by its number."""
    from .hand import _JsonLines  # here: the commands made from the table register before the hand-written ones

    with open(path, "rb") if path != "-" else contextlib.nullcontext(sys.stdin.buffer) as stream:
        lines = _JsonLines(stream, nothing=nothing)
        return list(lines), lines.lines


def _file(help: str) -> Any:
    return Annotated[str, typer.Argument(help=help, show_default=False, metavar="FILE")]


def _messages(c: Call) -> None:
    c.args["messages"], c.own["lines"] = _json_lines(c.own["file"], "stored")


def _conversation(c: Call) -> Any:
    try:
        return c.mem.add_conversation(**c.args)
    except memlane.ValidationError as e:  # the core names a message by position: say which line of the file
        found, lines = re.match(r"messages\[(\d+)\](?:\.(\w+))?", e.field), c.own["lines"]
        if found is None or int(found.group(1)) >= len(lines):
            raise
        where = f"line {lines[int(found.group(1))]}" + (f" ({found.group(2)})" if found.group(2) else "")
        raise memlane.ValidationError(where, str(e).split(": ", 1)[1] + "; nothing was stored") from e


made("ingest", "add_conversation", flags={"namespace": ("--namespace", "-n")}, hide=("messages",),
     own={"file": _file("JSONL file, one message per line; - for stdin.")}, prepare=_messages, call=_conversation,
     render=show.turns, summary="Store a conversation: one item per turn, searchable with its neighbouring turns.",
     example="memlane ingest chat.jsonl --namespace user/123 --session 2026-03-01")  # fmt: skip


def _document(c: Call) -> None:
    path = c.own["path"]
    with open(path, encoding="utf-8") if path != "-" else contextlib.nullcontext(sys.stdin) as f:
        text = f.read()
    c.args["text"] = [line for line in text.splitlines() if line.strip()] if c.own["lines"] else text
    if path != "-":
        c.args.setdefault("source", path)


made("doc add", "add_document", args=("namespace", "title"), hide=("text",), prepare=_document, render=show.document,
     own={"path": _file("A text file, or - for stdin."),
          "lines": _option("--lines", help="One chunk per non-blank line (turns, messages).", kind=bool)},
     example='memlane doc add team/acme "Standup 5 Jan" notes.txt --source meeting:standup')  # fmt: skip
made("claim add-many", "add_claims", args=("namespace",), hide=("claims",), render=show.claims,
     prepare=lambda c: c.args.__setitem__("claims", _json_lines(c.own["path"], "recorded")[0]),
     own={"path": _file("A JSON Lines file of claims ({text, speaker, ...} per line); - for stdin.")},
     example="memlane claim add-many team/acme claims.jsonl")  # fmt: skip
