"""Commands that are not operations of the memory: the service, its agents, rooms and grants."""

from __future__ import annotations

import errno
import socket
from typing import Annotated, Any

import typer

import memlane

from ..values.model import namespace_text
from .base import (
    EXIT_FAILURE,
    AsJson,
    Db,
    EmbedderName,
    _answer,
    _command,
    _console,
    _db_url,
    _fail,
    _open,
    _say,
    _show,
    _sqlite_file,
    agent_app,
    room_app,
)


def _access(mem: Any) -> Any:
    """What changes agents, rooms and grants: the Client itself on a service (over /v1/admin), else the store's."""
    if isinstance(mem, memlane.Client):
        return mem
    from ..core.access import Access

    return Access(mem)


# Not an operation: it starts the HTTP service over the store.
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

    from ..server import create_app
    from ..server.workers import default_workers
    from ..server.workers import pool_size as worker_pool
    from ..server.workers import run as run_workers
    from ..server.workers import single as single_server

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
        from ..server.workers import shared_port

        address = sock.getsockname()  # the port the system chose for --port 0
        sock.close()
        try:
            return shared_port(family, address)
        except OSError as e:
            _fail(f"cannot listen on {host}:{port}: {e.strerror or e}; check --host and --port")
    sock.listen(2048)  # uvicorn's backlog
    return sock


# Not an operation: it serves the MCP tools on stdin/stdout.
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
    from ..mcp import run_stdio, tool_selection

    offered = tool_selection(tools)  # a typo fails here, before the store is opened
    with _open(db, embedder) as mem:
        run_stdio(mem, offered)


# -- agents, rooms and grants: the owner's settings (Access; on a service the Client, over /v1/admin). Not
# operations of the memory: the table holds what an agent does, these say who may.

Name = Annotated[str, typer.Argument(help="An agent's name; its namespace is agent/<name>.", show_default=False)]
Room = Annotated[str, typer.Argument(help="A room's name; its namespace is room/<name>.", show_default=False)]
Prefix = Annotated[str, typer.Argument(help="A namespace prefix, e.g. project/billing.", show_default=False)]


def _settings(path: str, example: str) -> Any:
    """Register an owner's command at ``path``: it opens the store without an embedder, or the service."""
    *group, name = path.split()

    def register(fn: Any) -> Any:
        fn.__doc__ = f"{fn.__doc__}\n\nExample:\n    {example}"
        return _command(name, {"agent": agent_app, "room": room_app}[group[0]] if group else None, remote=True)(fn)

    return register


def _tell(text: str) -> None:
    _say(text, soft_wrap=True)  # a script reads a token from its line


def _owner(db: str | None, change: Any) -> Any:
    with _open(db, None, vectors=False) as mem:
        return change(_access(mem))


@_settings("agent create", "memlane agent create planner")
def agent_create(
    name: Name,
    db: Db = None,
    admin: Annotated[bool, typer.Option("--admin", help="May read and change everything.")] = False,
    as_json: AsJson = False,
) -> None:
    """Create an agent and print its token, once (only a hash is stored)."""
    agent, token = _owner(db, lambda access: access.create_agent(name, admin=admin))
    said = f"Created agent {agent.name!r} (namespace agent/{agent.name}).\nToken (shown once): {token}"
    _answer(as_json, {"agent": agent.to_dict(), "token": token}, lambda: _tell(said))


@_settings("agent token", "memlane agent token admin")
def agent_token(name: Name, db: Db = None) -> None:
    """Issue a new token for an agent; the old one stops working at once."""
    _tell(f"New token for {name!r} (shown once): {_owner(db, lambda access: access.rotate_token(name))}")


@_settings("agent list", "memlane agent list --json")
def agent_list(db: Db = None, as_json: AsJson = False) -> None:
    """List agents with their rooms and grants."""
    agents = _owner(db, lambda access: access.agents())
    rows = [(a.name, "yes" if a.admin else "", ", ".join(a.rooms), _grants(a)) for a in agents]
    _answer(as_json, [a.to_dict() for a in agents], lambda: _show(["agent", "admin", "rooms", "grants"], rows))


@_settings("agent delete", "memlane agent delete planner")
def agent_delete(name: Name, db: Db = None) -> None:
    """Delete an agent with its memberships and grants; its token stops working (its items stay)."""
    if not _owner(db, lambda access: access.delete_agent(name)):
        _fail(f"no agent named {name!r}; see `memlane agent list`")
    _tell(f"Deleted agent {name!r}; its items under agent/{name} stay.")


@_settings("agent log", "memlane agent log --room eng")
def agent_log(
    db: Db = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only changes to this agent.")] = None,
    room: Annotated[str | None, typer.Option("--room", help="Only changes to this room.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many changes.")] = 1000,
    as_json: AsJson = False,
) -> None:
    """Show the access log: who created, deleted, added, removed, granted and revoked what, and when."""

    def log(access: Any) -> Any:
        read = access.access_log if isinstance(access, memlane.Client) else access.history
        return read(agent=agent, room=room, limit=limit)

    changes = _owner(db, log)
    cells = [(c.seq, c.at.isoformat(), c.actor or "(owner)", c.action, c.agent, c.room,
              "" if c.prefix is None else namespace_text(c.prefix), c.mode) for c in changes]  # fmt: skip
    rows = [[str(cell or "") for cell in row] for row in cells]
    columns = ["#", "at", "by", "change", "agent", "room", "prefix", "mode"]
    _answer(as_json, [c.to_dict() for c in changes], lambda: _show(columns, rows))


def _show_room(room: dict[str, Any]) -> None:
    _tell(f"Room {room['name']!r}: members {', '.join(room['members']) or '(none)'}")


@_settings("room create", "memlane room create eng")
def room_create(name: Room, db: Db = None) -> None:
    """Create a room."""
    _show_room(_owner(db, lambda access: access.create_room(name)))


@_settings("room list", "memlane room list --json")
def room_list(db: Db = None, as_json: AsJson = False) -> None:
    """List rooms with their members."""

    def every(access: Any) -> list[Any]:  # every page: the CLI shows the whole list
        rooms, cursor = [], None
        while True:
            page = access.room_page(limit=10_000, cursor=cursor)
            rooms += page.entries
            if page.next_cursor is None:
                return rooms
            cursor = page.next_cursor

    rooms = _owner(db, every)
    _answer(as_json, rooms, lambda: _show(["room", "members"], [(r["name"], ", ".join(r["members"])) for r in rooms]))


@_settings("room add", "memlane room add eng planner")
def room_add(room: Room, agent: Name, db: Db = None) -> None:
    """Add an agent to a room: it may then read and write room/<name>."""
    _show_room(_owner(db, lambda access: access.add_member(room, agent)))


@_settings("room remove", "memlane room remove eng planner")
def room_remove(room: Room, agent: Name, db: Db = None) -> None:
    """Remove an agent from a room."""
    _show_room(_owner(db, lambda access: access.remove_member(room, agent)))


def _grants(agent: Any) -> str:
    return ", ".join(f"{g.mode} {namespace_text(g.prefix)}" for g in agent.grants)


@_settings("grant", "memlane grant planner project/billing read")
def grant(
    agent: Name,
    prefix: Prefix,
    mode: Annotated[str, typer.Argument(help="read or write (write includes read).", show_default=False)],
    db: Db = None,
) -> None:
    """Give an agent read or write on a namespace prefix."""
    result = _owner(db, lambda access: access.grant(agent, prefix, mode))
    _tell(f"Agent {result.name!r} grants: {_grants(result)}")


@_settings("revoke", "memlane revoke planner project/billing")
def revoke(agent: Name, prefix: Prefix, db: Db = None) -> None:
    """Remove an agent's grant on a namespace prefix."""
    result = _owner(db, lambda access: access.revoke(agent, prefix))
    _tell(f"Agent {result.name!r} grants: {_grants(result) or '(none)'}")
