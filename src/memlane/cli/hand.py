"""The commands that are no operation of the table, each saying why: the store's upkeep, files in and out, the
service, MCP, and the owner's agents, rooms and grants. Their longer help is in docs/cli.md."""

from __future__ import annotations

import errno
import inspect
import json
import os
import socket
import sys
from collections.abc import Callable, Iterator
from typing import IO, Annotated, Any

import typer
from rich import box
from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

import memlane
import memlane.cli.base as b

from ..values.model import namespace_text

BatchSize = Annotated[int, typer.Option("--batch-size", help="Texts embedded per batch.")]


def _progress_visible() -> bool:
    return sys.stderr.isatty()


def _progress(label: str, done: Any) -> Progress:
    """A progress bar on stderr, shown only on a terminal."""
    bar = (TextColumn(label), BarColumn(), done, TimeRemainingColumn())
    return Progress(*bar, console=b._console(stderr=True), transient=True, disable=not _progress_visible())


def _need_embedder(mem: Any, verb: str) -> None:
    if mem.embedder is None:
        raise memlane.EmbedderError(
            f"no embedder to {verb} with ($MEMLANE_EMBEDDER is none, or the store records none "
            "and the default is not installed); pass --embedder NAME, e.g. --embedder minilm"
        )


# Not an operation: the store's own upkeep (expired rows, history past retention), no agent calls it.
@b._command("cleanup", remote=True)
def cleanup(db: b.Db = None, embedder: b.EmbedderName = None, as_json: b.AsJson = False) -> None:
    """Physically remove expired items (they are already invisible to reads); prints how many.

    Example:
        memlane cleanup
    """
    with b._open(db, embedder) as mem:
        count = mem.cleanup()
    b._answer(as_json, {"removed": count}, lambda: b._say(f"Removed {b._plural(count, 'expired item')}"))


# Not an operation: counts of the whole store (the service answers GET /v1/stats), outside the table.
@b._command("stats", remote=True)
def stats(db: b.Db = None, embedder: b.EmbedderName = None, as_json: b.AsJson = False) -> None:
    """Show counts (items, namespaces, history, vectors), size and the embedder in use (see docs/cli.md).

    Example:
        memlane stats --json
        memlane stats --embedder none
    """
    with b._open(db, embedder) as mem:
        result = mem.stats().to_dict()
    shown = result | {"embedder": result["embedder"] or "none (lexical only)"}
    rows = [(k, Text(f"{v:,}" if isinstance(v, int) else str(v))) for k, v in shown.items()]
    b._answer(as_json, result, lambda: b._show(["field", "value"], rows, box=box.HEAVY_HEAD))


# Not an operation: the schema of the database file itself; it opens without migrating.
@b._command("migrate")
def migrate(
    db: b.Db = None,
    status: Annotated[bool, typer.Option("--status", help="Only show which migrations are applied.")] = False,
    as_json: b.AsJson = False,
) -> None:
    """Apply pending schema migrations, or show their status (see docs/cli.md).

    Example:
        memlane migrate --status
        memlane migrate --db postgresql://me@db.internal/memory
    """
    with b._open_db(db, reads=status, migrate=False) as mem:
        applied = [] if status else mem.migrate()
        rows = mem.migration_status()
    if as_json:
        b._print_json({"applied_now": applied, "migrations": rows})
        return
    b._show(["migration", "applied at"], [(row["name"], row["applied_at"] or "pending") for row in rows])
    if not status:
        b._say(f"Applied {len(applied)} migration(s).")


# Not an operation: it changes the store's embedder and rewrites every vector, on the file only.
@b._command("reindex")
def reindex(
    embedder: Annotated[str | None, typer.Option("--embedder", metavar="NAME", show_default=False, help="Rebuild "
        "every vector with this embedder and record it as the store's (minilm, fake, openai:<model>). Default: the "
        "embedder the store uses; only missing vectors are made.")] = None,
    batch_size: BatchSize = 64,
    db: b.Db = None,
    as_json: b.AsJson = False,
) -> None:  # fmt: skip
    """Bring every item's vector up to date, or switch the store to another embedder (see docs/cli.md).

    Example:
        memlane reindex
        memlane reindex --embedder minilm --batch-size 128
    """
    if embedder == b.NO_EMBEDDER:
        raise memlane.ValidationError(
            "embedder", "reindex needs an embedder to make vectors with; name one, e.g. --embedder minilm"
        )
    # A named embedder may differ from the recorded one: open without vectors so the mismatch check cannot refuse
    # the very store we are about to rebuild.
    with b._open_db(db, embedder=None) if embedder else b._open(db, None, hint=False) as mem:
        if embedder is None:
            _need_embedder(mem, "reindex")
        with _progress("Embedding", MofNCompleteColumn()) as progress:
            task = progress.add_task("reindex", total=None)
            count = mem.reindex(
                embedder,
                batch_size=batch_size,
                progress=lambda done, total: progress.update(task, completed=done, total=total),
            )
        result = mem.stats()
    body = {"embedded": count, "embedder": result.embedder, "vectors": result.vectors,
            "vectors_missing": result.vectors_missing}  # fmt: skip
    said = f"Embedded {b._plural(count, 'item')}; the store's embedder is {result.embedder} "
    b._answer(as_json, body, lambda: b._say(f"{said}({result.vectors:,} vectors, {result.vectors_missing:,} missing)"))


# Not an operation: a long-running indexer that drains write-behind marks until stopped.
@b._command("index")
def index(
    watch: Annotated[bool, typer.Option("--watch", help="Keep running: embed new writes as they come, until "
                                        "interrupted.")] = False,
    batch_size: BatchSize = 64,
    db: b.Db = None,
    embedder: b.EmbedderName = None,
    as_json: b.AsJson = False,
) -> None:  # fmt: skip
    """Embed the items writes marked for the vector channel (write-behind indexing), in batches (see docs/cli.md).

    Example:
        memlane index
        memlane index --watch --batch-size 128
    """
    with b._open(db, embedder) as mem:
        _need_embedder(mem, "index")
        done = [0]
        try:
            mem.index(watch=watch, batch_size=batch_size, progress=lambda n: done.__setitem__(0, n))
        except KeyboardInterrupt:  # how --watch ends: the batches finished so far are kept
            pass
        result = mem.stats()
    body = {"embedded": done[0], "vectors": result.vectors, "vectors_missing": result.vectors_missing}
    said = f"Embedded {b._plural(done[0], 'item')}; {result.vectors:,} vectors, {result.vectors_missing:,} missing"
    b._answer(as_json, body, lambda: b._say(said))


# -- moving data --------------------------------------------------------------


# Not an operation: a stream of every row to a file (the Client's export_records), not one answer.
@b._command("export", remote=True)
def export(
    file: Annotated[str, typer.Argument(help="Output JSONL file; - or omitted for stdout.")] = "-",
    db: b.Db = None,
    embedder: b.EmbedderName = None,
) -> None:
    """Write every stored row (items, then history) as JSON Lines; the record count goes to stderr.

    Example:
        memlane export backup.jsonl
        memlane export | gzip > backup.jsonl.gz
    """

    def write(out: IO[str]) -> int:
        count = 0
        for count, record in enumerate(mem.export_records(), 1):  # noqa: B007 (the last count is the result)
            out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        return count

    with b._open(db, embedder) as mem:
        if file == "-":
            count = write(sys.stdout)
        else:  # beside the target, then renamed: a failed export never leaves a truncated file to import
            with open(f"{file}.partial", "w", encoding="utf-8") as out:
                count = write(out)
            os.replace(f"{file}.partial", file)
    typer.echo(f"Exported {b._plural(count, 'record')} to {'stdout' if file == '-' else file}", err=True)


class _BadLine(memlane.ValidationError):
    """A line of an import file that is not a JSON object."""


class _JsonLines:
    """The records of a JSONL stream; ``line`` is the number of the line last read, ``lines`` each record's line."""

    def __init__(self, stream: IO[bytes], advance: Callable[[int], Any] = lambda n: None, nothing: str = "imported"):
        self._stream, self._advance, self._nothing = stream, advance, nothing  # nothing: what a bad line leaves undone
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
@b._command("import", remote=True)
def import_records(
    file: Annotated[str, typer.Argument(help="JSONL file written by `memlane export`; - for stdin.")],
    db: b.Db = None,
    embedder: b.EmbedderName = None,
    as_json: b.AsJson = False,
) -> None:
    """Write exported records back exactly (ids, times, versions), all or nothing; an existing address is replaced.

    Example:
        memlane import backup.jsonl --db restored.db
    """
    stream = sys.stdin.buffer if file == "-" else open(file, "rb")  # closed below
    progress = _progress("Importing", DownloadColumn())
    try:
        with progress, b._open(db, embedder) as mem:
            task = progress.add_task("import", total=os.path.getsize(file) if os.path.isfile(file) else None)
            lines = _JsonLines(stream, lambda n: progress.advance(task, n))
            remote = isinstance(mem, memlane.Client)
            try:  # a service takes the records in one body: all or nothing there too
                count = mem.import_records(list(lines) if remote else lines)
            except _BadLine:
                raise
            except memlane.ValidationError as e:
                if remote and e.field == "request":  # the body as a whole was refused: over the service's cap
                    said = str(e).removeprefix("request: ")
                    raise memlane.ValidationError("import", f"the service refused the file as one request ({said}); "
                        "split it into smaller files and import each, or import into the database file itself with "
                        "--db") from e  # fmt: skip
                # the core names the record by its number; without one, the line last read is the culprit
                record = getattr(e, "record", None)
                line = lines.lines[record - 1] if record and record <= len(lines.lines) else lines.line
                said = str(e).removeprefix("record: ").removeprefix(f"record {record}: ")  # the line says which
                raise memlane.ValidationError(f"line {line}", said) from e
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    b._answer(as_json, {"imported": count}, lambda: b._say(f"Imported {b._plural(count, 'record')}"))


# -- the service -------------------------------------------------------------------


def _access(mem: Any) -> Any:
    """What changes agents, rooms and grants: the Client itself on a service (over /v1/admin), else the store's."""
    if isinstance(mem, memlane.Client):
        return mem
    from ..core.access import Access

    return Access(mem)


# Not an operation: it starts the HTTP service over the store.
@b._command("serve")
def serve(
    db: b.Db = None,
    embedder: b.EmbedderName = None,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8420,
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="Worker processes answering requests (one "
        "Python process uses one core). Default on Linux: one per CPU this process may use (elsewhere 1).")] = None,
    pool_size: Annotated[int | None, typer.Option("--pool-size", min=1, help="PostgreSQL connections per process. "
        "Default: 10 in one process, fewer per worker so that 16 workers stay under PostgreSQL's default "
        "max_connections (100).")] = None,
) -> None:  # fmt: skip
    """Serve the memory over HTTP (/v1 JSON API, OpenAPI at /docs, MCP at /mcp, inspector at /); see docs/cli.md.

    Example:
        memlane serve --db memlane.db --port 8420
        memlane serve --db postgresql://memlane@db/memlane --host 0.0.0.0 --workers 8
    """
    import uvicorn  # noqa: F401  (first: without the server extra, fail before the store is opened)

    from ..server import create_app
    from ..server.workers import default_workers, single
    from ..server.workers import pool_size as worker_pool
    from ..server.workers import run as run_workers

    if not 0 <= port <= 65535:  # the system would take it modulo 65536 and serve elsewhere
        b._fail(f"--port {port}: a port must be 1-65535, or 0 for a free one the system chooses (then printed)")
    url = b._db_url(db)
    postgres = b._sqlite_file(url) is None
    count = workers or default_workers(postgres=postgres)
    listener = _listen(host, port, shared=count > 1)  # first: a taken port fails before anything is created or said
    port = listener.getsockname()[1]  # the port the system chose for --port 0
    pool = pool_size or (worker_pool(count) if count > 1 and postgres else None)
    started, err = False, b._console(stderr=True)
    try:
        with b._open(db, embedder, pool_size=pool) as mem:
            access = _access(mem)
            if not access.has_admin():
                try:
                    _, token = access.create_agent("admin", admin=True)
                    err.print(f"Created agent 'admin'. Its token (shown once, keep it safe): {token}", soft_wrap=True)
                except memlane.ConflictError:  # another replica created it first
                    pass
            serving = f"memlane serving {mem.store.location} at http://{host}:{port} (workers: {count})"
            if count > 1:

                def ready() -> None:  # once a worker listens: a request sent then is answered
                    err.print(serving, soft_wrap=True)

                started = run_workers(mem, url, listener, workers=count, pool=pool, options={}, ready=ready)
            else:  # the app is built and the socket listens before "serving" is said: a request then is queued
                server = single(create_app(mem), host, port)
                err.print(serving, soft_wrap=True)
                server.run(sockets=[listener])
                started = server.started
    finally:
        listener.close()
    if not started:
        raise typer.Exit(b.EXIT_FAILURE)


def _listen(host: str, port: int, *, shared: bool = False) -> socket.socket:
    """A socket bound to ``host:port`` for the service; a port in use is one line naming it, and --port.

    ``shared``: for several workers, a socket that holds the port without listening, which each worker's own socket
    binds too (:mod:`memlane.server.workers`); the port is checked free by a plain bind first, so a port another
    service holds is refused even when that service shares its own.
    """
    sock = None
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = found[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restart right after a stop
        sock.bind(address)
        if not shared:
            sock.listen(2048)  # uvicorn's backlog
            return sock
        from ..server.workers import shared_port

        address = sock.getsockname()  # the port the system chose for --port 0
        sock.close()
        return shared_port(family, address)
    except (OSError, OverflowError) as e:  # socket.gaierror is an OSError
        if sock is not None:
            sock.close()
        if getattr(e, "errno", None) == errno.EADDRINUSE:
            b._fail(f"port {port} on {host} is taken: another process is listening at {host}:{port}; choose another "
                    f"port with --port, e.g. --port {port + 1 if port < 65535 else 8420}")  # fmt: skip
        b._fail(f"cannot listen on {host}:{port}: {getattr(e, 'strerror', None) or e}; check --host and --port")


# Not an operation: it serves the MCP tools on stdin/stdout.
@b._command("mcp")
def mcp_stdio(
    db: b.Db = None,
    embedder: b.EmbedderName = None,
    tools: Annotated[str, typer.Option("--tools", metavar="LIST", help="Tools to offer, comma-separated: profiles "
        "(default, conversations, facts, query, all) and tool names; -NAME takes one away.")] = "default",
) -> None:  # fmt: skip
    """Serve the memory to one AI agent over MCP on stdin/stdout (full access); see docs/cli.md.

    Example:
        memlane mcp --db memlane.db
        memlane mcp --db memlane.db --tools default,facts
        memlane mcp --db /data/agent.db --embedder none --tools default,-memory_delete
    """
    from ..mcp import run_stdio, tool_selection

    offered = tool_selection(tools)  # a typo fails here, before the store is opened
    with b._open(db, embedder) as mem:
        run_stdio(mem, offered)


# -- agents, rooms and grants: the owner's settings (Access; on a service the Client, over /v1/admin). Not operations
# of the memory: the table holds what an agent does, these say who may.

NAME = Annotated[str, typer.Argument(help="An agent's name; its namespace is agent/<name>.", show_default=False)]
ROOM = Annotated[str, typer.Argument(help="A room's name; its namespace is room/<name>.", show_default=False)]
PREFIX = Annotated[str, typer.Argument(help="A namespace prefix, e.g. project/billing.", show_default=False)]
MODE = Annotated[str, typer.Argument(help="read or write (write includes read).", show_default=False)]


def _owner(path: str, summary: str, params: dict[str, Any], change: Callable[..., Any], say: Callable[..., Any],
           body: Callable[[Any], Any] | None = None) -> None:  # fmt: skip
    """Register the owner's command ``path``: it opens the store without an embedder (or the service), passes
    ``change`` the Access and its ``params`` (name: annotation, or (annotation, default)), and prints what ``say``
    returns (one line a script can read a token from) or, with ``body``, ``--json`` of it."""
    *group, name = path.split()
    summary, example = summary.split("\n")

    def run(db: str | None = None, as_json: bool = False, **given: Any) -> None:
        with b._open(db, None, vectors=False) as mem:
            result = change(_access(mem), **given)
        if as_json and body is not None:
            b._print_json(body(result))
        elif (said := say(result, **given)) is not None:
            b._say(said, soft_wrap=True)

    declared = [(n, *p) if isinstance(p, tuple) else (n, p, inspect.Parameter.empty) for n, p in params.items()]
    options = [("db", b.Db, None), *([("as_json", b.AsJson, False)] * (body is not None)), ("url", b.Url, None),
               ("token", b.Token, None)]  # fmt: skip
    b._sign(run, [b._keyword(*p) for p in declared + options])
    run.__doc__ = f"{summary}\n\nExample:\n    memlane {example}"
    b._command(name, b.GROUPS[group[0]] if group else None)(run)


def _grants(agent: Any) -> str:
    return ", ".join(f"{g.mode} {namespace_text(g.prefix)}" for g in agent.grants)


def _log(access: Any, **given: Any) -> Any:
    return (access.access_log if isinstance(access, memlane.Client) else access.history)(**given)


def _rooms(access: Any) -> list[Any]:
    rooms: list[Any] = []
    cursor = None
    while True:  # every page: the command shows the whole list
        page = access.room_page(limit=10_000, cursor=cursor)
        rooms, cursor = rooms + page.entries, page.next_cursor
        if cursor is None:
            return rooms


def _room(found: dict[str, Any], **_: Any) -> str:
    return f"Room {found['name']!r}: members {', '.join(found['members']) or '(none)'}"


def _deleted(gone: bool, name: str) -> str:
    if not gone:
        b._fail(f"no agent named {name!r}; see `memlane agent list`")
    return f"Deleted agent {name!r}; its items under agent/{name} stay."


ADMIN = Annotated[bool, typer.Option("--admin", help="May read and change everything.")]
_owner("agent create", "Create an agent and print its token, once (only a hash is stored).\nagent create planner",
       {"name": NAME, "admin": (ADMIN, False)}, lambda a, name, admin: a.create_agent(name, admin=admin),
       lambda r, **_: f"Created agent {r[0].name!r} (namespace agent/{r[0].name}).\nToken (shown once): {r[1]}",
       body=lambda r: {"agent": r[0].to_dict(), "token": r[1]})  # fmt: skip
_owner("agent token", "Issue a new token for an agent; the old one stops working at once.\nagent token admin",
       {"name": NAME}, lambda a, name: a.rotate_token(name),
       lambda token, name: f"New token for {name!r} (shown once): {token}")  # fmt: skip
_owner("agent list", "List agents with their rooms and grants.\nagent list --json", {}, lambda a: a.agents(),
       lambda agents: b._show(["agent", "admin", "rooms", "grants"], [
           (a.name, "yes" if a.admin else "", ", ".join(a.rooms), _grants(a)) for a in agents]),
       body=lambda agents: [a.to_dict() for a in agents])  # fmt: skip
_owner("agent delete", "Delete an agent with its memberships and grants; its token stops working (its items stay)."
       "\nagent delete planner", {"name": NAME}, lambda a, name: a.delete_agent(name), _deleted)  # fmt: skip
_owner("agent log", "Show the access log: who created, deleted, added, removed, granted and revoked what, and when."
       "\nagent log --room eng", {
           "agent": (b._option("--agent", help="Only changes to this agent."), None),
           "room": (b._option("--room", help="Only changes to this room."), None),
           "limit": (Annotated[int, typer.Option("--limit", help="At most this many changes.")], 1000)},
       _log, lambda changes, **_: b._show(["#", "at", "by", "change", "agent", "room", "prefix", "mode"], [
           [str(cell or "") for cell in (c.seq, c.at.isoformat(), c.actor or "(owner)", c.action, c.agent, c.room,
            "" if c.prefix is None else namespace_text(c.prefix), c.mode)] for c in changes]),
       body=lambda changes: [c.to_dict() for c in changes])  # fmt: skip
_owner("room create", "Create a room.\nroom create eng", {"name": ROOM}, lambda a, name: a.create_room(name), _room)
_owner("room list", "List rooms with their members.\nroom list --json", {}, _rooms,
       lambda rooms: b._show(["room", "members"], [(r["name"], ", ".join(r["members"])) for r in rooms]),
       body=lambda rooms: rooms)  # fmt: skip
_owner("room add", "Add an agent to a room: it may then read and write room/<name>.\nroom add eng planner",
       {"room": ROOM, "agent": NAME}, lambda a, room, agent: a.add_member(room, agent), _room)  # fmt: skip
_owner("room remove", "Remove an agent from a room.\nroom remove eng planner", {"room": ROOM, "agent": NAME},
       lambda a, room, agent: a.remove_member(room, agent), _room)  # fmt: skip
_owner("grant", "Give an agent read or write on a namespace prefix.\ngrant planner project/billing read",
       {"agent": NAME, "prefix": PREFIX, "mode": MODE}, lambda a, agent, prefix, mode: a.grant(agent, prefix, mode),
       lambda r, **_: f"Agent {r.name!r} grants: {_grants(r)}")  # fmt: skip
_owner("revoke", "Remove an agent's grant on a namespace prefix.\nrevoke planner project/billing",
       {"agent": NAME, "prefix": PREFIX}, lambda a, agent, prefix: a.revoke(agent, prefix),
       lambda r, **_: f"Agent {r.name!r} grants: {_grants(r) or '(none)'}")  # fmt: skip
