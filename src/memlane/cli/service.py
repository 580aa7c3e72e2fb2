"""Commands that are not operations of the memory: the service, its agents, rooms and grants."""

from __future__ import annotations

import errno
import socket
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

import memlane

from ..values.model import namespace_text
from . import (
    EXIT_FAILURE,
    NO_EMBEDDER,
    AsJson,
    Db,
    EmbedderName,
    _command,
    _console,
    _db_url,
    _fail,
    _open,
    _print_json,
    _sqlite_file,
    agent_app,
    room_app,
)


def _access(mem: memlane.Memory) -> Any:
    from ..core.access import Access

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
