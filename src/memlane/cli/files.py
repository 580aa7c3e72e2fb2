"""Commands that are not one operation of the table: files in and out, the store's own upkeep."""

from __future__ import annotations

import json
import os
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
from rich.text import Text

import memlane

from .base import (
    NO_EMBEDDER,
    AsJson,
    Db,
    EmbedderName,
    _answer,
    _command,
    _console,
    _open,
    _open_db,
    _plural,
    _print_json,
    _progress_visible,
    _say,
    _show,
)

BatchSize = Annotated[int, typer.Option("--batch-size", help="Texts embedded per batch.")]


def _progress(label: str, done: Any) -> Progress:
    """A progress bar on stderr, shown only on a terminal."""
    bar = (TextColumn(label), BarColumn(), done, TimeRemainingColumn())
    return Progress(*bar, console=_console(stderr=True), transient=True, disable=not _progress_visible())


def _need_embedder(mem: Any, verb: str) -> None:
    if mem.embedder is None:
        raise memlane.EmbedderError(
            f"no embedder to {verb} with ($MEMLANE_EMBEDDER is none, or the store records none and the default "
            "is not installed); pass --embedder NAME, e.g. --embedder minilm"
        )


# Not an operation: the store's own upkeep (expired rows, history past retention), no agent calls it.
@_command("cleanup", remote=True)
def cleanup(db: Db = None, embedder: EmbedderName = None, as_json: AsJson = False) -> None:
    """Physically remove expired items (they are already invisible to reads).

    Prints how many were removed.

    Example:
        memlane cleanup
    """
    with _open(db, embedder) as mem:
        count = mem.cleanup()
    _answer(as_json, {"removed": count}, lambda: _say(f"Removed {count} expired item{'s' * (count != 1)}"))


# Not an operation: counts of the whole store (the service answers GET /v1/stats), outside the table.
@_command("stats", remote=True)
def stats(db: Db = None, embedder: EmbedderName = None, as_json: AsJson = False) -> None:
    """Show counts (items, namespaces, history, vectors), size and the embedder in use.

    Expired items count until `cleanup` removes them. vectors_missing counts
    items without a current vector from the embedder in use; `reindex` makes them.

    Example:
        memlane stats --json
        memlane stats --embedder none
    """
    with _open(db, embedder) as mem:
        result = mem.stats().to_dict()
    shown = result | {"embedder": result["embedder"] or "none (lexical only)"}
    rows = [(k, Text(f"{v:,}" if isinstance(v, int) else str(v))) for k, v in shown.items()]
    _answer(as_json, result, lambda: _show(["field", "value"], rows, box=box.HEAVY_HEAD))


# Not an operation: the schema of the database file itself; it opens without migrating.
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
    _show(["migration", "applied at"], [(row["name"], row["applied_at"] or "pending") for row in rows])
    if not status:
        _say(f"Applied {len(applied)} migration(s).")


# Not an operation: it changes the store's embedder and rewrites every vector, on the file only.
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
    batch_size: BatchSize = 64,
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
        if embedder is None:
            _need_embedder(mem, "reindex")
        progress = _progress("Embedding", MofNCompleteColumn())
        with progress:
            task = progress.add_task("reindex", total=None)
            count = mem.reindex(
                embedder,
                batch_size=batch_size,
                progress=lambda done, total: progress.update(task, completed=done, total=total),
            )
        result = mem.stats()
    body = {"embedded": count, "embedder": result.embedder, "vectors": result.vectors,
            "vectors_missing": result.vectors_missing}  # fmt: skip
    said = f"Embedded {_plural(count, 'item')}; the store's embedder is {result.embedder} "
    _answer(as_json, body, lambda: _say(f"{said}({result.vectors:,} vectors, {result.vectors_missing:,} missing)"))


# -- moving data --------------------------------------------------------------


# Not an operation: a stream of every row to a file (the Client's export_records), not one answer.
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
    typer.echo(f"Exported {_plural(count, 'record')} to {where}", err=True)


def _write_jsonl(records: Iterable[dict[str, Any]], out: IO[str]) -> int:
    count = 0
    for count, record in enumerate(records, 1):  # noqa: B007 (the last count is the result)
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
    return count


class _BadLine(memlane.ValidationError):
    """A line of an import file that is not a JSON object."""


class _JsonLines:
    """The records of a JSONL stream; ``line`` is the number of the line last read, ``lines`` each record's line."""

    def __init__(
        self, stream: IO[bytes], advance: Callable[[int], Any] = lambda n: None, nothing: str = "imported"
    ) -> None:
        self._stream = stream
        self._advance = advance
        self._nothing = nothing  # what a bad line leaves undone
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
                raise _BadLine(f"line {self.line}", f"not valid JSON ({e}); nothing was {self._nothing}") from None
            if not isinstance(record, dict):
                raise _BadLine(f"line {self.line}", f"is not a JSON object; nothing was {self._nothing}")
            self.lines.append(self.line)
            yield record


# import_records with a file streamed line by line, a progress bar and errors named by line number.
@_command("import", remote=True)
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
    progress = _progress("Importing", DownloadColumn())
    try:
        with progress, _open(db, embedder) as mem:
            task = progress.add_task("import", total=total)
            lines = _JsonLines(stream, lambda n: progress.advance(task, n))
            try:
                # a service takes the records in one body: all or nothing there too
                count = mem.import_records(list(lines) if isinstance(mem, memlane.Client) else lines)
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
    _answer(as_json, {"imported": count}, lambda: _say(f"Imported {_plural(count, 'record')}"))


# Not an operation: a long-running indexer that drains write-behind marks until stopped.
@_command("index")
def index(
    watch: Annotated[
        bool, typer.Option("--watch", help="Keep running: embed new writes as they come, until interrupted.")
    ] = False,
    batch_size: BatchSize = 64,
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
        _need_embedder(mem, "index")
        done = [0]
        try:
            mem.index(watch=watch, batch_size=batch_size, progress=lambda n: done.__setitem__(0, n))
        except KeyboardInterrupt:  # how --watch ends: the batches finished so far are kept
            pass
        result = mem.stats()
    body = {"embedded": done[0], "vectors": result.vectors, "vectors_missing": result.vectors_missing}
    said = f"Embedded {_plural(done[0], 'item')}; {result.vectors:,} vectors, {result.vectors_missing:,} missing"
    _answer(as_json, body, lambda: _say(said))


# -- every operation of the table: memlane op NAME ---------------------------------------------------
#
# The commands above are written for people: positional arguments, tables, hints. `memlane op` has one command
# per operation of the table (memlane.values.operations), made from Memory's signature and the table's meanings, that
# prints the JSON the HTTP API answers: a new operation is a command here with nothing written for it.
