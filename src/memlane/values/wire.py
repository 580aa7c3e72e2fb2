"""Errors on the wire: one table of kinds, one encoding, one decoding, for every interface.

The HTTP service, the MCP tools and the Client all speak the same error shape::

    {"type": "validation_error", "message": "must be ...", "field": "ttl"}

plus ``reason`` and ``part`` for a refused query and ``retry_after`` when busy.
:func:`encode` makes it from a :class:`~memlane.values.errors.MemlaneError`,
:func:`decode` makes the same exception again on the other side, and
:func:`refusal` turns a pydantic validation failure at a boundary into the
:class:`~memlane.values.errors.ValidationError` a Python caller would have got.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import errors


@dataclass(frozen=True)
class Kind:
    """One error kind: its class, its ``type`` on the wire, its HTTP status and its MCP label."""

    cls: type[errors.MemlaneError]
    name: str
    status: int
    label: str


# most specific first: the first class an exception is an instance of decides
KINDS: tuple[Kind, ...] = (
    Kind(errors.ValidationError, "validation_error", 400, "Invalid input"),
    Kind(errors.QueryRefused, "query_refused", 400, "Query refused"),
    Kind(errors.UnauthorizedError, "unauthorized", 401, "Unauthorized"),
    Kind(errors.ForbiddenError, "forbidden", 403, "Forbidden"),
    Kind(errors.NotFoundError, "not_found", 404, "Not found"),
    Kind(errors.ConflictError, "conflict", 409, "Conflict"),
    Kind(errors.EmbedderMismatchError, "embedder_mismatch", 409, "Embedder mismatch"),
    Kind(errors.BusyError, "busy", 429, "Busy"),
    Kind(errors.BackendUnavailableError, "unavailable", 501, "Unavailable"),
    Kind(errors.EmbedderError, "embedder_error", 502, "Embedder error"),
    Kind(errors.ChooserError, "chooser_error", 502, "Chooser error"),
    Kind(errors.StorageFullError, "storage_full", 507, "Storage full"),
    Kind(errors.StoreUnavailableError, "store_unavailable", 503, "Store unavailable"),
    Kind(errors.StoreError, "store_error", 503, "Store error"),
    Kind(errors.MemlaneError, "error", 500, "Error"),
)
_BY_NAME = {kind.name: kind for kind in KINDS}
# the type of a 404 for a path that no route serves (distinct from not_found: nothing at an address)
NO_SUCH_ROUTE = "no_such_route"
# the answers that carry no error body of ours (a proxy, an old server): the status alone decides
_BY_STATUS = {
    400: errors.ValidationError,
    401: errors.UnauthorizedError,
    403: errors.ForbiddenError,
    404: errors.NotFoundError,
    409: errors.ConflictError,
    413: errors.ValidationError,
    429: errors.BusyError,
    500: errors.MemlaneError,
    501: errors.BackendUnavailableError,
    502: errors.EmbedderError,
    503: errors.StoreError,
    507: errors.StorageFullError,
}


def kind_of(exc: errors.MemlaneError) -> Kind:
    """The kind an exception travels as."""
    return next(kind for kind in KINDS if isinstance(exc, kind.cls))


def message_of(exc: errors.MemlaneError) -> str:
    """The message without the ``field: `` prefix a ValidationError's text starts with, on one line."""
    message = " ".join(str(exc).splitlines())
    field = getattr(exc, "field", None)
    if field and message.startswith(field + ": "):
        message = message[len(field) + 2 :]
    return message


def encode(exc: errors.MemlaneError) -> dict[str, Any]:
    """The error object (the value under ``"error"``) for an exception."""
    body: dict[str, Any] = {"type": kind_of(exc).name, "message": message_of(exc)}
    for name in ("field", "reason", "part", "retry_after"):
        value = getattr(exc, name, None)
        if value is not None:
            body[name] = value
    return body


def error_body(kind: str, message: str, field: str | None = None) -> dict[str, Any]:
    """The one error shape, for an error that is no memlane exception (an unknown path, a body too large)."""
    err: dict[str, Any] = {"type": kind, "message": message}
    if field is not None:
        err["field"] = field
    return {"error": err}


def decode(error: Any, status: int, *, suffix: str = "") -> errors.MemlaneError:
    """The exception an error object (or, without one, a status) stands for.

    ``suffix`` (e.g. ``" (HTTP 404 from http://...)"``) is added to messages of
    every kind but the input errors, whose text names the field as in Python.
    """
    error = error if isinstance(error, Mapping) else {}
    message = str(error.get("message") or f"HTTP {status}")
    if status == 404 and error.get("type") in (None, NO_SUCH_ROUTE):
        # a route nobody serves (a base URL with /v1 or /api appended, a misspelt operation) or no memlane service
        # at all (no error shape of ours): the URL is wrong, which must never read as "no such item"
        if error.get("type") is None:
            message = "the answer is not a memlane service's: is the URL the service root (where GET /v1/health is)?"
        return errors.ValidationError("url", message + suffix)
    kind = _BY_NAME.get(str(error.get("type", "")))
    cls = kind.cls if kind is not None else _BY_STATUS.get(status, errors.StoreError)
    if cls is errors.ValidationError:
        return errors.ValidationError(str(error.get("field") or "request"), message)
    if cls is errors.QueryRefused:
        return errors.QueryRefused(
            message, reason=_text_or_none(error.get("reason")), part=_text_or_none(error.get("part"))
        )
    if cls is errors.BusyError or cls is errors.StoreUnavailableError:
        wait = error.get("retry_after")
        return cls(message + suffix, retry_after=wait if isinstance(wait, int) and wait > 0 else 1)
    return cls(message + suffix)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


# -- pydantic's complaints, in memlane's words ---------------------------------------------

_SAYS = {
    "missing": "is required",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "literal_error": "must be one of",
    "enum": "must be one of",
    "extra_forbidden": "is not a known field",
    "too_short": "is too short",
    "too_long": "is too long",
    "greater_than_equal": "is too small",
    "less_than_equal": "is too large",
}
NOT_JSON = "send the request body as a JSON object, with the header Content-Type: application/json"


def refusal(problems: Iterable[Mapping[str, Any]], *, body: bool = True) -> errors.ValidationError:
    """A ValidationError naming the first field pydantic refused, in plain words (no pydantic links).

    ``body``: the problems come from an HTTP request body, whose location starts with ``"body"``.
    """
    first = next(iter(problems), {})
    loc = [str(part) for part in first.get("loc", ())]
    if body and loc[:1] == ["body"]:
        loc = loc[1:]
    kind = str(first.get("type", ""))
    if body and not loc:  # the body itself: absent, not JSON, or not an object
        return errors.ValidationError("body", f"is missing or not a JSON object; {NOT_JSON}")
    said = _SAYS.get(kind)
    ctx = first.get("ctx") or {}
    if said in ("must be one of",) and "expected" in ctx:
        said = f"must be one of {ctx['expected']}"
    elif said in ("is too short", "is too long", "is too small", "is too large"):
        bound = ctx.get("min_length", ctx.get("max_length", ctx.get("ge", ctx.get("le"))))
        said = said if bound is None else f"{said} (limit {bound})"
    if said is None:
        said = str(first.get("msg") or "is not valid").rstrip(".")
        said = said[0].lower() + said[1:] if said else said
    if kind not in ("missing", "extra_forbidden") and "input" in first:
        said += f", got {_shown(first['input'])}"
    if len(loc) > 1:  # inside a list or object: the field is the parameter, the place is in the message
        said = f"{said} (at {'.'.join(loc)})"
    return errors.ValidationError(loc[0] if loc else "request", said)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
