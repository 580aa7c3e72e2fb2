"""The memlane HTTP service: a versioned ``/v1`` JSON API over one :class:`Memory`.

Thin by design: each route parses its body, asks :class:`~memlane.core.access.Access`
who is calling, calls the same method on that agent's
:class:`~memlane.core.access.AgentView`, and renders ``to_dict()``. One table maps
memlane errors to HTTP statuses, with one JSON error shape::

    {"error": {"type": "validation_error", "message": "...", "field": "ttl"}}

The API is additive: request models ignore unknown fields, optional fields a
client leaves out keep their defaults, and responses omit optional fields that
are unset (``author``, ``expires_at``...), so a newer server answers an older
client the same way.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from functools import cache
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..core.access import Access, Agent, AgentView
from ..core.memory import Memory
from ..values import errors, validate, wire
from ..values.gate import DEFAULT_CAPACITY, DEFAULT_MAX_WAIT, DEFAULT_PER_AGENT, Gate
from ..values.operations import OPERATIONS, compact
from ..values.wire import error_body
from .dispatch import JSON_HEADERS, NOT_JSON, Dispatch, Prepare, encode, error_answer, send_answer
from .routes import Body, register

API_VERSION = "v1"
MAX_BODY_BYTES = 4 * validate.MAX_VALUE_CHARS + 6 * validate.MAX_TEXT_CHARS + 4 * validate.MAX_METADATA_CHARS + 2**20


def _unkeyed(args: dict[str, Any]) -> dict[str, Any]:
    # an older server's recall, which ignores ``key``
    args.pop("key", None)
    return args


class ErrorDetail(BaseModel):
    type: str = Field(description="validation_error, unauthorized, forbidden, not_found, conflict, busy, ...")
    message: str = Field(description="What went wrong and what to do next.")
    field: str | None = Field(default=None, description="The parameter refused, for input errors.")
    reason: str | None = Field(default=None, description="For query_refused: a short code such as not_select.")
    part: str | None = Field(default=None, description="For query_refused: the offending part of the statement.")
    path: str | None = Field(default=None, description="For no_such_route: the path that no route serves.")


class ErrorOut(BaseModel):
    """The one error shape of every answer that is not 200."""

    error: ErrorDetail


# the answers a /v1 operation can give besides 200, as documented in OpenAPI (FastAPI's 422 never occurs:
# input errors are 400)
ERROR_ANSWERS: dict[str, dict[str, Any]] = {
    str(status): {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
    }
    for status, description in (
        (400, "Input refused (validation_error, naming the field) or a refused query (query_refused)."),
        (401, "No valid bearer token."),
        (403, "The agent may not read or write there."),
        (404, "Nothing at that address, or no such record (not_found); or no such route (no_such_route)."),
        (409, "A conditional write found the address taken, or the embedder differs."),
        (413, "The request body is too large."),
        (429, "Too much expensive work at once; retry after the Retry-After seconds."),
        (503, "The store failed, or the database is unreachable (store_unavailable, with Retry-After)."),
        (507, "The disk holding the database is full (storage_full); nothing was written."),
    )
}
UNAUTHENTICATED = frozenset({f"/{API_VERSION}/health", f"/{API_VERSION}/ready"})


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema with the bearer scheme declared and its never-given 422 answers taken out."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schema.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "An agent's token (memlane agent create)."}
        }
        error_schema = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas = schema["components"].setdefault("schemas", {})
        schemas.update(error_schema.pop("$defs", {}))
        schemas["ErrorOut"] = error_schema
        for path, methods in schema.get("paths", {}).items():
            for operation in methods.values():
                answers = operation.setdefault("responses", {})
                answers.pop("422", None)
                if path.startswith(f"/{API_VERSION}/") and path not in UNAUTHENTICATED:
                    operation["security"] = [{"bearer": []}]
                    answers.update({k: v for k, v in ERROR_ANSWERS.items() if k not in answers})
        for unused in ("HTTPValidationError", "ValidationError"):
            schema["components"].get("schemas", {}).pop(unused, None)
        app.openapi_schema = schema
    return app.openapi_schema


# -- administration bodies (the data operations' bodies are built from the table: routes.py) --


class AgentBody(Body):
    name: str
    admin: bool = False


class RoomBody(Body):
    name: str


class MemberBody(Body):
    agent: str


class GrantBody(Body):
    agent: str
    prefix: Any
    mode: str


class RevokeBody(Body):
    agent: str
    prefix: Any


class _TooLarge(BaseException):  # noqa: N818
    """Raised from ``receive``; a BaseException so body parsers that catch Exception let it through."""


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413, declared or streamed.

    ``Content-Length`` is checked before anything is read; a chunked body is
    counted as it arrives and cut off at the limit, so no upload can make the
    service buffer more than ``limit`` bytes.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def _refuse(self, send: Any) -> None:
        body = json.dumps(error_body("payload_too_large", f"request body is over {self.limit:,} bytes")).encode()
        await send_answer(send, 413, body, list(JSON_HEADERS))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        received = 0
        started = False

        async def counted() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge
            return message

        async def tracked(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await self._refuse(send)


# routes whose work can take long (ranked reads, the query space): each agent has a share of them
EXPENSIVE = frozenset(f"/{API_VERSION}/{op.route}" for op in OPERATIONS if op.expensive)


class WorkGate:
    """Pass each caller's expensive requests through the fair :class:`~memlane.values.gate.Gate`, on the event loop.

    A request waits for its turn without holding a worker thread, and one
    refused (429 with ``Retry-After``) never takes a worker thread, reads the
    store or authenticates, so an agent retrying at once cannot crowd the worker
    pool that other agents' point reads need. The caller is told apart by its
    token's hash (one token per agent); a bad token is counted too and then
    refused with 401 as usual.
    """

    def __init__(self, app: Any, gate: Gate) -> None:
        self.app = app
        self.gate = gate

    @staticmethod
    def key_of(token: str) -> str:
        """The gate's name for the caller sending ``Authorization: Bearer <token>``."""
        return hashlib.sha256(f"Bearer {token}".encode()).hexdigest()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in EXPENSIVE:
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        caller = hashlib.sha256(header).hexdigest()
        try:
            await self.gate.acquire(caller)
        except errors.BusyError as e:
            await send_answer(send, *error_answer(e))
            return
        started = time.monotonic()
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.gate.release(caller, time.monotonic() - started)

        async def send_then_release(message: Any) -> None:
            # free the share before the last byte leaves: a caller who has read its answer may send the next
            # request at once, and must not find its own finished request still counted
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                release()
            await send(message)

        try:
            await self.app(scope, receive, send_then_release)
        finally:
            release()


@cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema, built once per process (read-only: it is only rendered)."""
    return model.model_json_schema()


class Service:
    """The service as one ASGI application: memlane's own layers in front of the FastAPI application.

    Requests pass the body cap (:class:`BodyLimit`), the fair gate on expensive
    work (:class:`WorkGate`) and :class:`~memlane.server.dispatch.Dispatch`,
    which answers the table's operations itself; everything else (OpenAPI and
    its docs page, administration, export, MCP, the inspector) goes on to the
    FastAPI application, :attr:`api`, whose attributes (``state``,
    ``openapi()``...) the service shows as its own.
    """

    def __init__(self, api: FastAPI, front: Any) -> None:
        self.api = api
        self._front = front

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._front(scope, receive, send)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    def add_middleware(self, middleware_class: Any, *args: Any, **kwargs: Any) -> None:
        """Wrap the whole service in an ASGI middleware, outermost: it sees every request, the table's
        operations too (FastAPI's own ``add_middleware`` would see only what reaches FastAPI)."""
        self._front = middleware_class(self._front, *args, **kwargs)


def create_app(
    mem: Memory,
    *,
    keyed_recall: bool = True,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_agent_work: int = DEFAULT_PER_AGENT,
    max_work: int = DEFAULT_CAPACITY,
    max_wait: float = DEFAULT_MAX_WAIT,
    index: bool = True,
) -> Service:
    """Build the service over ``mem``.

    Args:
        mem: the memory every request reads and writes.
        keyed_recall: answer ``key`` in ``/v1/recall`` (``False`` emulates an
            older server that ignores it; clients must stay correct).
        max_body_bytes: larger request bodies get 413.
        max_agent_work: an agent's fair share of ranked reads and query-space
            statements (running and waiting) while other agents wait: more get
            429 with ``Retry-After`` (see :class:`~memlane.values.gate.Gate`).
        max_work: ranked reads and query-space statements running at once in
            this process (below the worker pool's 40 threads, so point reads
            always find a free one); more wait for their turn, round robin
            between agents.
        max_wait: seconds such a request may wait for its turn before 429.
        index: run the write-behind indexer in this process (``False`` in the
            workers of ``memlane serve --workers N``, whose supervisor runs
            the one indexer of the store).
    """
    # the docs UI's scripts come from a package (fastapi-offline), not a CDN: /docs works offline
    app = FastAPIOffline(
        title="memlane",
        version=API_VERSION,
        description="Durable memory for AI agents: exact keyed lookup and confirmed hybrid search. "
        "Every /v1 operation needs `Authorization: Bearer <token>` (Authorize, above).",
        redoc_url=None,
    )
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    # one gate for the whole service: HTTP requests pass it on the event loop (WorkGate), MCP tool calls in
    # the agent's view; an HTTP route's view is ungated, so no request counts twice
    gate = Gate(max_agent_work, max_work, max_wait=max_wait)
    access = Access(mem, gate=gate)
    if index:
        mem.start_indexing()  # the service embeds what its writes (and others') marked, in the background
    app.state.memory = mem
    app.state.access = access
    operations: list[dict[str, Any]] = []

    # -- plumbing ---------------------------------------------------------

    @app.exception_handler(errors.MemlaneError)
    async def memlane_error(request: Request, exc: errors.MemlaneError) -> Response:
        status, body, headers = error_answer(exc)
        return Response(body, status_code=status, headers={k.decode(): v.decode() for k, v in headers})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        kinds = {404: "not_found", 405: "method_not_allowed", 400: "validation_error", 413: "payload_too_large"}
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        field = None
        if exc.status_code == 404:  # no route: not "no such item", so a client with a wrong base URL can tell
            root = str(request.base_url).rstrip("/")
            body = error_body(
                wire.NO_SUCH_ROUTE,
                f"nothing is served at {request.method} {request.url.path}: the operations are "
                f"POST /{API_VERSION}/<operation> (GET /{API_VERSION}/operations lists them), and a client's base "
                f"URL is the service root, such as {root}, without /{API_VERSION}, /api or /docs",
            )
            body["error"]["path"] = request.url.path
            return JSONResponse(body, status_code=404, headers=exc.headers)
        if exc.status_code == 400:  # the body did not parse; a JSON decoder gives up on deep nesting too
            message = NOT_JSON
            field = "body"
        return JSONResponse(
            error_body(kinds.get(exc.status_code, "error"), message, field),
            status_code=exc.status_code,
            headers=exc.headers,
        )

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        problems = exc.errors()
        if problems and problems[0].get("type") == "json_invalid":
            return JSONResponse(error_body("validation_error", "is not valid JSON", "body"), status_code=400)
        return JSONResponse({"error": wire.encode(wire.refusal(problems))}, status_code=400)

    def caller(request: Request) -> Agent:
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header[:7].lower() == "bearer " else None
        agent = access.authenticate(token)
        if agent is None:
            raise errors.UnauthorizedError("a valid token is required: send 'Authorization: Bearer <token>'")
        return agent

    def view(agent: Agent = Depends(caller)) -> AgentView:  # noqa: B008 - FastAPI's dependency idiom
        return access.view(agent, gated=False)

    def admin(agent: Agent = Depends(caller)) -> Agent:  # noqa: B008
        if not agent.admin:
            raise errors.ForbiddenError("this operation needs an admin agent")
        return agent

    def changer(agent: Agent = Depends(admin)) -> Access:  # noqa: B008
        # changes are logged with the admin who made them
        return Access(mem, actor=agent.name)

    def route(
        path: str, body: type[BaseModel], result: type[BaseModel], summary: str
    ) -> Callable[[Callable[..., Any]], Any]:
        """Register a POST operation and list it, with both schemas, in /v1/operations."""

        def register(fn: Callable[..., Any]) -> Any:
            operations.append(
                {
                    "name": path,
                    "method": "POST",
                    "path": f"/{API_VERSION}/{path}",
                    "summary": summary,
                    "params": _schema(body),
                    "result": _schema(result),
                }
            )
            answers: dict[int | str, dict[str, Any]] = {200: {"model": result}}  # errors: added once, in _openapi
            return app.post(f"/{API_VERSION}/{path}", summary=summary, name=path, responses=answers)(fn)

        return register

    def ok(obj: Any) -> Response:
        return Response(encode(compact(obj)), media_type="application/json")

    # every POST /v1/<operation> of the table (memlane.values.operations), declared for OpenAPI and /v1/operations;
    # the Dispatch middleware answers them
    register(route)

    @app.get(f"/{API_VERSION}/export", summary="Every item the caller may see, as JSON lines.")
    def export(v: AgentView = Depends(view)) -> PlainTextResponse:  # noqa: B008
        lines = []
        cursor = None
        while True:
            page = v.list(limit=1000, cursor=cursor)
            lines += [json.dumps({"record": "item", **i.to_dict()}, ensure_ascii=False) for i in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
        return PlainTextResponse("\n".join(lines) + ("\n" if lines else ""), media_type="application/x-ndjson")

    @app.get(f"/{API_VERSION}/me", summary="Who the token belongs to and what it may see.")
    def me(agent: Agent = Depends(caller)) -> Response:  # noqa: B008
        scope = access.scope(agent)
        return ok(
            agent.to_dict() | {"read": ["/".join(p) for p in scope.read], "write": ["/".join(p) for p in scope.write]}
        )

    @app.post(f"/{API_VERSION}/cleanup", summary="Physically delete expired rows (admin).")
    def cleanup(_: Agent = Depends(admin)) -> Response:  # noqa: B008
        return ok({"deleted": mem.cleanup()})

    @app.get(f"/{API_VERSION}/stats", summary="Counts and size of the whole store (admin).")
    def stats(_: Agent = Depends(admin)) -> Response:  # noqa: B008
        return ok(mem.stats().to_dict() | {"access_records": access.count()})

    # -- administration ---------------------------------------------------

    @app.post(f"/{API_VERSION}/admin/agents", summary="Create an agent; its token is returned once.")
    def create_agent(body: AgentBody, a: Access = Depends(changer)) -> Response:  # noqa: B008
        agent, token = a.create_agent(body.name, admin=body.admin)
        return ok({"agent": agent.to_dict(), "token": token})

    @app.get(f"/{API_VERSION}/admin/agents", summary="Agents with their rooms and grants, a page at a time.")
    def list_agents(limit: int = 1000, cursor: str | None = None, _: Agent = Depends(admin)) -> Response:  # noqa: B008
        page = access.agent_page(limit=limit, cursor=cursor)
        return ok({"agents": [a.to_dict() for a in page.entries], "next_cursor": page.next_cursor})

    @app.get(f"/{API_VERSION}/admin/agents/{{name}}", summary="An agent with its rooms and grants.")
    def get_agent(name: str, _: Agent = Depends(admin)) -> Response:  # noqa: B008
        return ok(access.agent(name).to_dict())

    @app.post(f"/{API_VERSION}/admin/agents/{{name}}/token", summary="A new token for an agent; the old one stops.")
    def rotate_token(name: str, a: Access = Depends(changer)) -> Response:  # noqa: B008
        return ok({"token": a.rotate_token(name)})

    @app.delete(f"/{API_VERSION}/admin/agents/{{name}}", summary="Delete an agent, its memberships and grants.")
    def delete_agent(name: str, a: Access = Depends(changer)) -> Response:  # noqa: B008
        return ok({"deleted": a.delete_agent(name)})

    @app.post(f"/{API_VERSION}/admin/rooms", summary="Create a room.")
    def create_room(body: RoomBody, a: Access = Depends(changer)) -> Response:  # noqa: B008
        return ok(a.create_room(body.name))

    @app.get(f"/{API_VERSION}/admin/rooms", summary="Rooms with their members, a page at a time.")
    def list_rooms(limit: int = 1000, cursor: str | None = None, _: Agent = Depends(admin)) -> Response:  # noqa: B008
        page = access.room_page(limit=limit, cursor=cursor)
        return ok({"rooms": page.entries, "next_cursor": page.next_cursor})

    @app.post(f"/{API_VERSION}/admin/rooms/{{room}}/members", summary="Add an agent to a room.")
    def add_member(room: str, body: MemberBody, a: Access = Depends(changer)) -> Response:  # noqa: B008
        return ok(a.add_member(room, body.agent))

    @app.delete(f"/{API_VERSION}/admin/rooms/{{room}}/members/{{agent}}", summary="Remove an agent from a room.")
    def remove_member(room: str, agent: str, a: Access = Depends(changer)) -> Response:  # noqa: B008
        return ok(a.remove_member(room, agent))

    @app.post(f"/{API_VERSION}/admin/grants", summary="Give an agent read or write on a namespace prefix.")
    def grant(body: GrantBody, a: Access = Depends(changer)) -> Response:  # noqa: B008
        return ok(a.grant(body.agent, body.prefix, body.mode).to_dict())

    @app.post(f"/{API_VERSION}/admin/revoke", summary="Remove an agent's grant on a namespace prefix.")
    def revoke(body: RevokeBody, a: Access = Depends(changer)) -> Response:  # noqa: B008
        return ok(a.revoke(body.agent, body.prefix).to_dict())

    @app.get(f"/{API_VERSION}/admin/log", summary="The access log: who changed agents, rooms and grants, and when.")
    def access_log(
        agent: str | None = None,
        room: str | None = None,
        after: int = 0,
        limit: int = 1000,
        _: Agent = Depends(admin),  # noqa: B008
    ) -> Response:
        changes = access.history(agent=agent, room=room, after=after, limit=limit)
        return ok({"changes": [c.to_dict() for c in changes]})

    @app.get(f"/{API_VERSION}/query/space", summary="The memory_v1 views with their columns, functions and limits.")
    def query_space_get(v: AgentView = Depends(view)) -> Response:  # noqa: B008
        return ok(v.describe_query_space())

    # async: served on the event loop, so they answer even while every worker thread is busy
    @app.get(f"/{API_VERSION}/operations", summary="Every operation with its parameter JSON schema.")
    async def list_operations() -> Response:
        return JSONResponse({"version": API_VERSION, "operations": operations})

    @app.get(f"/{API_VERSION}/health", summary="Liveness: whether the service process answers (no token needed).")
    async def health() -> Response:  # declared for OpenAPI: Dispatch answers it, in front of FastAPI
        raise RuntimeError("GET /v1/health is answered by memlane.server.dispatch, in front of FastAPI")

    @app.get(
        f"/{API_VERSION}/ready",
        summary="Readiness: whether the service can read its store now; 503 while the database is unreachable.",
        responses={503: ERROR_ANSWERS["503"]},
    )
    async def ready() -> Response:  # declared for OpenAPI: Dispatch answers it, in front of FastAPI
        raise RuntimeError("GET /v1/ready is answered by memlane.server.dispatch, in front of FastAPI")

    from ..mcp import mount_mcp
    from .inspector import mount_inspector

    mount_mcp(app, mem, access, max_body_bytes=max_body_bytes)
    mount_inspector(app)
    # the table's operations never pass FastAPI's layers (routing, dependencies, its middleware): dispatch.py
    prepare: dict[str, Prepare] = {} if keyed_recall else {"recall": _unkeyed}
    dispatch = Dispatch(app, mem=mem, access=access, prefix=f"/{API_VERSION}", prepare=prepare)
    return Service(app, BodyLimit(WorkGate(dispatch, gate=gate), limit=max_body_bytes))
