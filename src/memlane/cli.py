"""The ``memlane`` command line: a thin shell over :class:`memlane.Memory`.

Every command parses its arguments, opens the memory, calls one ``Memory``
method and renders the answer: rich tables and trees for people, ``--json``
(one JSON document on stdout) for scripts. Errors are mapped in one place,
:func:`_command`: a :class:`~memlane.MemlaneError` becomes one ``Error: ...``
line on stderr and exit code 2 (invalid input) or 1 (anything else).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Annotated, Any, NoReturn, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.json import JSON
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

import memlane

from .model import Item, namespace_text

EXIT_FAILURE = 1
EXIT_INVALID = 2

app = typer.Typer(
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

F = TypeVar("F", bound=Callable[..., Any])


def main() -> None:
    """Run the ``memlane`` command line."""
    app()


def _fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    typer.echo(f"Error: {' '.join(message.splitlines())}", err=True)
    raise typer.Exit(code)


def _command(name: str) -> Callable[[F], F]:
    """Register a command named ``name`` whose expected errors end in one line on stderr."""

    def register(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
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

        app.command(name=name)(run)
        return fn

    return register


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


def _items_table(items: list[Item]) -> Table:
    """The table every item listing uses (list, fetch)."""
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("namespace", overflow="fold")
    table.add_column("key", overflow="fold")  # never truncated: people copy addresses
    for name in ("type", "value", "v", "updated (UTC)"):
        table.add_column(name, justify="right" if name == "v" else "left")
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
    namespace: str,
    key: str | None,
    value: Any,
    text: str | None,
    metadata: str | None,
    ttl: float | None,
    as_json: bool,
) -> None:
    meta = _metadata(metadata)
    with memlane.open(db) as mem:
        item = mem.put(namespace, key, value, text=text, metadata=meta, ttl=ttl)
    if as_json:
        _print_json(item.to_dict())
    else:  # the value is not echoed: it may be a secret, and the caller already has it
        address = f"{namespace_text(item.namespace)} key {item.key!r}"
        _console().print(Text(f"Stored {address} ({item.value_type}, version {item.version})"))


@_command("set")
def set_item(
    namespace: NamespaceArg,
    key: KeyArg,
    value: ValueArg,
    string: ForceString = False,
    text: SearchText = None,
    metadata: Metadata = None,
    ttl: Ttl = None,
    db: Db = None,
    as_json: AsJson = False,
) -> None:
    """Write (upsert) a value at NAMESPACE KEY; a replaced value goes to history.

    VALUE is stored as JSON when it parses as JSON (3.12, true, {"a": 1}) and as a
    string otherwise; --string forces a string. Put -- before a VALUE that starts
    with a dash.

    Example:
        memlane set user/123 preferences.ui.theme dark
        memlane set user/123 profile.python 3.12 --string
        memlane set user/123 profile.langs '["python", "go"]' --ttl 86400
        echo "long text" | memlane set user/123 notes.today -
    """
    _put(db, namespace, key, _value(value, string), text, metadata, ttl, as_json)


@_command("note")
def note(
    namespace: NamespaceArg,
    value: ValueArg,
    string: ForceString = False,
    text: SearchText = None,
    metadata: Metadata = None,
    ttl: Ttl = None,
    db: Db = None,
    as_json: AsJson = False,
) -> None:
    """Store a value under a generated key (a note: searchable, still addressable).

    VALUE is parsed as for `set`; the generated key is printed.

    Example:
        memlane note user/123 "prefers short answers"
    """
    _put(db, namespace, None, _value(value, string), text, metadata, ttl, as_json)


@_command("delete")
def delete_item(
    namespace: NamespaceArg,
    key: KeyArg,
    db: Db = None,
    as_json: AsJson = False,
) -> None:
    """Delete the item at NAMESPACE KEY (its last version is kept in history).

    Exits with code 1 when there is no such item.

    Example:
        memlane delete user/123 preferences.ui.theme
    """
    with memlane.open(db) as mem:
        deleted = mem.delete(namespace, key)
    if not deleted:
        _fail(f"no item at {namespace} key {key!r}")
    if as_json:
        _print_json({"deleted": True, "namespace": namespace, "key": key})
    else:
        _console().print(Text(f"Deleted {namespace} key {key!r}"))


@_command("clear")
def clear(
    prefix: Annotated[str, typer.Argument(help="Namespace prefix, e.g. user/123.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    db: Db = None,
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
    with memlane.open(db) as mem:
        count = mem.clear(prefix)
    if as_json:
        _print_json({"cleared": count, "namespace_prefix": prefix})
    else:
        _console().print(Text(f"Cleared {count} item{'s' * (count != 1)} under {prefix}"))


def _interactive() -> bool:
    return sys.stdin.isatty()


@_command("cleanup")
def cleanup(db: Db = None, as_json: AsJson = False) -> None:
    """Physically remove expired items (they are already invisible to reads).

    Prints how many were removed.

    Example:
        memlane cleanup
    """
    with memlane.open(db) as mem:
        count = mem.cleanup()
    if as_json:
        _print_json({"removed": count})
    else:
        _console().print(f"Removed {count} expired item{'s' * (count != 1)}")


# -- exact reads --------------------------------------------------------------


@_command("get")
def get_item(
    namespace: NamespaceArg,
    key: KeyArg,
    value_only: Annotated[bool, typer.Option("--value", help="Print only the value as JSON.")] = False,
    db: Db = None,
    as_json: AsJson = False,
) -> None:
    """Read the item at NAMESPACE KEY; exits with code 1 when there is none.

    Shows the value as JSON and a table of its details; --value prints only the
    value, for scripts.

    Example:
        memlane get user/123 preferences.ui.theme
        memlane get user/123 preferences.ui.theme --value
    """
    with memlane.open(db) as mem:
        item = mem.get(namespace, key)
    if item is None:
        _fail(f"no item at {namespace} key {key!r}")
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


@_command("fetch")
def fetch(
    key: Annotated[str, typer.Argument(help="The exact key to recall.")],
    prefix: Prefix = "",
    limit: Annotated[int, typer.Option("--limit", help="At most this many items.")] = 10,
    db: Db = None,
    as_json: AsJson = False,
) -> None:
    """Recall every item stored under exactly KEY, across namespaces, newest first.

    No ranking: the same answer every time for the same state.

    Example:
        memlane fetch preferences.ui.theme --prefix user
    """
    with memlane.open(db) as mem:
        items = mem.fetch(key, namespace_prefix=prefix, limit=limit)
    if as_json:
        _print_json([i.to_dict() for i in items])
    else:
        _show_items(items)


@_command("list")
def list_items(
    prefix: PrefixArg = "",
    key_prefix: KeyPrefix = "",
    limit: Annotated[int, typer.Option("--limit", help="Items per page.")] = 100,
    cursor: Annotated[str | None, typer.Option("--cursor", help="Continue from a previous page.")] = None,
    every: Annotated[bool, typer.Option("--all", help="Page through everything.")] = False,
    db: Db = None,
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
    with memlane.open(db) as mem:
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


@_command("namespaces")
def namespaces(
    prefix: PrefixArg = "",
    max_depth: Annotated[int | None, typer.Option("--max-depth", help="Cut namespaces to N segments.")] = None,
    db: Db = None,
    as_json: AsJson = False,
) -> None:
    """List the namespaces that hold live items.

    --max-depth N cuts each namespace to its first N segments.

    Example:
        memlane namespaces user --max-depth 2
    """
    with memlane.open(db) as mem:
        found = mem.namespaces(prefix, max_depth=max_depth)
    if as_json:
        _print_json([list(ns) for ns in found])
        return
    table = Table("namespace")
    for ns in found:
        table.add_row(Text(namespace_text(ns)))
    _console().print(table if found else "No namespaces.")


@_command("summarize")
def summarize(
    prefix: PrefixArg = "",
    depth: Annotated[int, typer.Option("--depth", help="Cut keys to N taxonomy segments.")] = 3,
    key_prefix: KeyPrefix = "",
    db: Db = None,
    as_json: AsJson = False,
) -> None:
    """Show the taxonomy map: per namespace, key paths with item counts.

    Drill down by passing a path back as --key-prefix with a larger --depth.

    Example:
        memlane summarize user/123 --depth 1
        memlane summarize user/123 --key-prefix preferences --depth 2
    """
    with memlane.open(db) as mem:
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


@_command("history")
def history(
    namespace: NamespaceArg,
    key: KeyArg,
    db: Db = None,
    as_json: AsJson = False,
) -> None:
    """Show past versions of NAMESPACE KEY (replaced, deleted, cleared), newest first.

    The live item itself is read with `get`.

    Example:
        memlane history user/123 preferences.ui.theme
    """
    with memlane.open(db) as mem:
        versions = mem.history(namespace, key)
    if as_json:
        _print_json([ver.to_dict() for ver in versions])
        return
    table = Table("version", "change", "changed (UTC)", "changed by", "type", "value", box=box.SIMPLE_HEAD)
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
def stats(db: Db = None, as_json: AsJson = False) -> None:
    """Show counts (active and expired items, namespaces, history) and size.

    Expired items count until `cleanup` removes them.

    Example:
        memlane stats --json
    """
    with memlane.open(db) as mem:
        result = mem.stats()
    if as_json:
        _print_json(result.to_dict())
        return
    table = Table("field", "value")
    for name, shown in result.to_dict().items():
        table.add_row(name, Text(f"{shown:,}" if isinstance(shown, int) else str(shown)))
    _console().print(table)


# -- ranked reads -------------------------------------------------------------


@_command("search")
def search(
    query: Annotated[str, typer.Argument(help="Words to search for.")],
    prefix: Prefix = "",
    limit: Annotated[int, typer.Option("--limit", help="At most this many results.")] = 10,
    db: Db = None,
    as_json: AsJson = False,
) -> None:
    """Search item text by topic, best first.

    The query is plain words, never index syntax. Scores order the hits of one
    search; they are not comparable across searches.

    Example:
        memlane search "editor theme" --prefix user/123 --limit 5
    """
    with memlane.open(db) as mem:
        envelope = mem.search(query, namespace_prefix=prefix, limit=limit)
    if as_json:
        _print_json(envelope.to_dict())
        return
    console = _console()
    table = Table("#", box=box.SIMPLE_HEAD)
    table.add_column("namespace", overflow="fold")
    table.add_column("key", overflow="fold")
    for name in ("score", "ranks", "text"):
        table.add_column(name)
    for n, hit in enumerate(envelope.hits, 1):
        ranks = " ".join(f"{ch}:{r}" for ch, r in hit.ranks.items())
        table.add_row(
            str(n),
            Text(namespace_text(hit.namespace)),
            Text(hit.key),
            f"{hit.score:.4f}",
            ranks,
            _squeezable(_brief(hit.text, 80)),
        )
    console.print(table if envelope.hits else "No results.")
    for note_text in envelope.notes:
        console.print(Text(f"Note: {note_text}"))
    if envelope.truncated:
        console.print("More results exist; raise --limit to see them.")


# -- moving data --------------------------------------------------------------


@_command("export")
def export(
    file: Annotated[str, typer.Argument(help="Output JSONL file; - or omitted for stdout.")] = "-",
    db: Db = None,
) -> None:
    """Write every stored row (items, then history) as JSON Lines.

    The record count goes to stderr, so stdout holds only the data.

    Example:
        memlane export backup.jsonl
        memlane export | gzip > backup.jsonl.gz
    """
    with memlane.open(db) as mem:
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
    """The records of a JSONL stream; ``line`` is the number of the line last read."""

    def __init__(self, stream: IO[bytes], advance: Callable[[int], Any]) -> None:
        self._stream = stream
        self._advance = advance
        self.line = 0

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
            yield record


@_command("import")
def import_records(
    file: Annotated[str, typer.Argument(help="JSONL file written by `memlane export`; - for stdin.")],
    db: Db = None,
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
        disable=not sys.stderr.isatty(),
    )
    try:
        with progress, memlane.open(db) as mem:
            task = progress.add_task("import", total=total)
            lines = _JsonLines(stream, lambda n: progress.advance(task, n))
            try:
                count = mem.import_records(lines)
            except _BadLine:
                raise
            except memlane.ValidationError as e:
                # The store reads one record at a time, so the line last read is the culprit.
                raise memlane.ValidationError(f"line {lines.line}", str(e)) from e
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if as_json:
        _print_json({"imported": count})
    else:
        _console().print(f"Imported {count} record{'s' * (count != 1)}")
