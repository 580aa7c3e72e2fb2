"""Commands that are not one operation of the table: files in and out, the store's own upkeep."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Annotated, Any

import typer
from rich import box
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

import memlane

from ..domain.conversation import DEFAULT_WINDOW
from ..values.facts_text import DEFAULT_CHUNK_CHARS
from ..values.model import namespace_text
from . import (
    NO_EMBEDDER,
    AsJson,
    Db,
    EmbedderName,
    NamespaceArg,
    _command,
    _console,
    _open,
    _open_db,
    _print_json,
    _progress_visible,
    claim_app,
    doc_app,
)


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
