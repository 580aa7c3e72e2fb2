"""The hot path of the service: every ``POST /v1/<operation>`` of the table, served as plain ASGI.

FastAPI builds the service's OpenAPI, its docs page, the administration routes
and the rest; the operations of :data:`memlane.values.operations.OPERATIONS` (every
get, put, search...) are answered here instead, because a request's own work
is often a few tens of microseconds and FastAPI's generic machinery (dependency
solving, a worker-thread hop per dependency, ``jsonable_encoder``) cost thirty
times that (docs/benchmarks.md, "Where a request's time goes"). The contract is
the same, and the tests hold both to it: the same request models (pydantic,
strict, unknown fields ignored), the same error shape and statuses, the same
answers.

Per request: the body is read (the :class:`~memlane.server.app.BodyLimit`
middleware in front caps it), parsed and validated in one pass by the
operation's request model, then one hop to a worker thread authenticates the
caller, calls the method on its view and encodes the answer (orjson), so the
event loop never waits on the store.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic import ValidationError as PydanticError

from ..core.access import Access, AgentView
from ..core.memory import Memory
from ..values import errors, validate, wire
from ..values.operations import ANSWERS, OPERATIONS, Operation, compact
from .routes import bodies

JSON_HEADERS = [(b"content-type", b"application/json")]
NOT_JSON = f"could not be parsed as JSON (malformed, or nested more than {validate.MAX_DEPTH} levels deep)"

Prepare = Callable[[dict[str, Any]], dict[str, Any]]


def _fallback(obj: Any) -> Any:
    # what orjson does not know natively (a Decimal, a set, a model): FastAPI's rules, as before
    from fastapi.encoders import jsonable_encoder

    return jsonable_encoder(obj)


def encode(obj: Any) -> bytes:
    """An answer as compact UTF-8 JSON; integers past 64 bits, which orjson refuses, through the json module."""
    try:
        return orjson.dumps(obj, default=_fallback, option=orjson.OPT_SERIALIZE_NUMPY)
    except orjson.JSONEncodeError:
        return json.dumps(obj, default=_fallback, ensure_ascii=False, allow_nan=False).encode()


def error_answer(exc: errors.MemlaneError) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """Status, body and headers of the one error shape for a memlane error."""
    headers = list(JSON_HEADERS)
    if isinstance(exc, (errors.BusyError, errors.StoreUnavailableError)):
        headers.append((b"retry-after", str(exc.retry_after).encode()))
    return wire.kind_of(exc).status, encode({"error": wire.encode(exc)}), headers


def _json_content(scope: Any) -> bool:
    """Whether the request's body is JSON by its Content-Type (none given counts as JSON)."""
    for name, value in scope.get("headers") or ():
        if name == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return kind == b"application/json" or kind.endswith(b"+json")
    return True


def bearer(scope: Any) -> str | None:
    """The token of an ``Authorization: Bearer`` header, or ``None``."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            text = value.decode("latin-1")
            return text[7:].strip() if text[:7].lower() == "bearer " else None
    return None


Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]
Parsed = tuple[BaseModel | None, errors.ValidationError | None, bool]
"""A parsed body, or why it was refused and whether it was not JSON at all."""

# bounded reads by address (recall only with a key: without one it is a search), answered on the event loop
# when the store is free and they ask for few rows (the loop serves every connection: a 1,000-row fetch
# goes to a thread)
POINT_READS = frozenset(op.name for op in OPERATIONS if op.point)
INLINE_BODY = 64 * 1024
INLINE_ROWS = 10
# worker threads per process: requests mostly wait (the store's lock, PostgreSQL), so as many as Starlette's
THREADS = 40


def _parse(model: type[BaseModel], raw: bytes) -> Parsed:
    """Parse and validate a body in one pass (pydantic-core).

    A body pydantic's parser refuses is read again by Python's own, as the API
    always did, so that what Python reads is refused by field, not as "not
    JSON": a value nested deeper than pydantic goes (200 levels) is refused by
    the core like one nested 101, a number pydantic cannot carry or a lone
    UTF-16 surrogate escape (``"\\ud800"``) by the field that holds it.
    """
    try:
        return model.model_validate_json(raw or b"null"), None, False
    except PydanticError as e:
        problems = e.errors(include_url=False)
    if problems and problems[0].get("type") == "json_invalid":
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            return None, errors.ValidationError("body", "is not valid JSON"), True
        except (ValueError, RecursionError):  # JSON past what any parser carries (depth, a number's digits)
            return None, errors.ValidationError("body", NOT_JSON), True
        try:
            return model.model_validate(body), None, False
        except PydanticError as again:
            problems = again.errors(include_url=False)
    # the same words as FastAPI's refusals, whose locations start at the body
    return None, wire.refusal([{**p, "loc": ("body", *p.get("loc", ()))} for p in problems]), False


def _few_rows(operation: str, body: BaseModel | None) -> bool:
    """Whether a parsed point read asks for at most :data:`INLINE_ROWS` rows (a recall only with a key)."""
    if body is None:
        return True  # refused before any read
    if operation == "recall" and getattr(body, "key", None) is None:
        return False
    addresses = getattr(body, "addresses", None)
    if isinstance(addresses, list) and len(addresses) > INLINE_ROWS:
        return False
    limit = getattr(body, "limit", None)
    return not (isinstance(limit, int) and limit > INLINE_ROWS)


@functools.cache
def _threads() -> ThreadPoolExecutor:
    """The process's threads for the table's operations (one pool, whatever the number of apps): a hop to one
    costs a thread wake-up and the interpreter's lock, and none of anyio's bookkeeping."""
    return ThreadPoolExecutor(THREADS, thread_name_prefix="memlane-request")


async def send_answer(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    """Send a whole answer: its status, headers with its length, and its body."""
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Dispatch:
    """ASGI middleware answering the table's operations; everything else goes on to ``app``.

    Args:
        app: the FastAPI application behind (docs, administration, MCP, inspector).
        mem: the memory the operations run on.
        access: resolves tokens to agents and hands out their views.
        prefix: the API's path prefix (``/v1``).
        prepare: per operation, a change to its arguments before the call (a service option).
    """

    def __init__(
        self,
        app: Any,
        *,
        mem: Memory,
        access: Access,
        prefix: str,
        prepare: dict[str, Prepare] | None = None,
    ) -> None:
        self.app = app
        self.mem = mem
        self.access = access
        models = bodies()
        self.routes: dict[str, tuple[Operation, type[BaseModel], Prepare | None]] = {
            f"{prefix}/{op.route}": (op, models[op.name], (prepare or {}).get(op.name)) for op in OPERATIONS
        }
        self.health_path = f"{prefix}/health"
        self.ready_path = f"{prefix}/ready"
        self.health = encode({"status": "ok", "version": prefix.strip("/"), "backend": mem.store.backend})
        self.ready = encode({"status": "ready", "version": prefix.strip("/"), "backend": mem.store.backend})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        route = self.routes.get(scope.get("path", "")) if scope["type"] == "http" else None
        if route is None or scope["method"] != "POST":
            if scope["type"] == "http" and scope["method"] == "GET":
                if scope["path"] == self.health_path:
                    # liveness, the lightest answer of the stack: the process serves (bench/serve.py's floor)
                    await send_answer(send, 200, self.health, list(JSON_HEADERS))
                    return
                if scope["path"] == self.ready_path:
                    # readiness: one indexed read of the store, so a load balancer polling it sees the database
                    await send_answer(send, *(await self._in_thread(self._readiness)))
                    return
            await self.app(scope, receive, send)
            return
        op, model, prepare = route
        chunks = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw, token = b"".join(chunks), bearer(scope)
        if not _json_content(scope):
            raw = b""  # as FastAPI does: a body declared as something else is no JSON object (400, saying so)
        answer = None
        if op.name in POINT_READS and len(raw) <= INLINE_BODY:
            # a point read costs tens of microseconds, a hop to a worker thread more: answer it here when the
            # store is free at once (never while it waits on anything), else in a thread like the rest
            parsed = _parse(model, raw)
            if _few_rows(op.name, parsed[0]):
                with self.mem.store.at_hand() as free:
                    if free:
                        answer = self._answer(op, parsed, prepare, token)
            if answer is None:
                answer = await self._in_thread(self._answer, op, parsed, prepare, token)
        else:
            answer = await self._in_thread(self._parse_and_answer, op, model, raw, prepare, token)
        await send_answer(send, *answer)

    def _readiness(self) -> Answer:
        """200 while the store answers a read; its error otherwise (503 with ``Retry-After`` while the database
        is unreachable)."""
        try:
            self.mem.store.access_head()
        except errors.MemlaneError as e:
            return error_answer(e)
        except Exception:
            logging.getLogger("uvicorn.error").exception("memlane: the readiness check failed")
            return error_answer(errors.StoreError("the store could not be read; the service's log has the details"))
        return 200, self.ready, list(JSON_HEADERS)

    async def _in_thread(self, fn: Callable[..., Answer], *args: Any) -> Answer:
        return await asyncio.get_running_loop().run_in_executor(_threads(), fn, *args)

    def _parse_and_answer(
        self, op: Operation, model: type[BaseModel], raw: bytes, prepare: Prepare | None, token: str | None
    ) -> Answer:
        return self._answer(op, _parse(model, raw), prepare, token)

    def _answer(self, op: Operation, parsed: Parsed, prepare: Prepare | None, token: str | None) -> Answer:
        """Authenticate, call and render one operation whose body was parsed.

        The order of refusals is FastAPI's, which the API has always had: a body
        that is not JSON (400), then the token (401), then an admin operation for
        another agent (403), then the body's fields (400).
        """
        body, refused, not_json = parsed
        try:
            if refused is not None and not_json:
                raise refused
            agent = self.access.authenticate(token)
            if agent is None:
                raise errors.UnauthorizedError("a valid token is required: send 'Authorization: Bearer <token>'")
            if op.admin and not agent.admin:
                raise errors.ForbiddenError("this operation needs an admin agent")
            if refused is not None or body is None:
                raise refused or errors.ValidationError("body", "is missing")
            # what the wire may leave out although the core requires it, then what was sent
            args = {**op.optional, **body.model_dump(exclude_unset=True)}
            if op.additive is not None:
                args = op.additive(args)
            if op.from_wire is not None:
                args = op.from_wire(args)
            if prepare is not None:
                args = prepare(args)
            view = self.access.view(agent, gated=False)
            # an owner setting (retention) runs on the core as the admin who asked: its name is recorded, as in
            # the access log
            target: Memory | AgentView = view._as_author() if op.admin else view
            answer = ANSWERS[op.result](getattr(target, op.name)(**args), args)
        except errors.MemlaneError as e:
            return error_answer(e)
        except Exception:
            # a bug: the caller learns nothing of it (no traceback, no exception text), the log has it all
            logging.getLogger("uvicorn.error").exception("memlane: %s failed", op.name)
            return error_answer(errors.MemlaneError("internal error in the service; its log has the details"))
        return 200, encode(compact(answer)), list(JSON_HEADERS)
