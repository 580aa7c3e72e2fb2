"""Every public memlane exception, under one root.

Each class also subclasses the builtin whose meaning it shares, so callers that
already catch ``ValueError`` or ``KeyError`` keep working. Messages say what to
do next.
"""

from __future__ import annotations


class MemlaneError(Exception):
    """Root of every error memlane raises on purpose."""


class ValidationError(MemlaneError, ValueError):
    """Input was refused at the boundary; nothing was written.

    ``field`` names the offending argument (``namespace``, ``key``, ``ttl``...);
    ``record`` the 1-based number of the offending record of an import, if any.
    """

    def __init__(self, field: str, message: str, *, record: int | None = None) -> None:
        self.field = field
        self.record = record
        super().__init__(f"{field}: {message}")


class NotFoundError(MemlaneError, KeyError):
    """The addressed item, version or object does not exist (or has expired)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "not found"


class ConflictError(MemlaneError):
    """A conditional write found the address taken (HTTP 409)."""


class StoreError(MemlaneError):
    """The storage backend failed; the underlying driver error is chained."""


class SchemaVersionError(StoreError):
    """The database was written by a newer memlane than this one."""


class StoreUnavailableError(StoreError):
    """The database cannot be reached now (a server down or restarting, a connection lost); nothing was done
    that was not acknowledged (HTTP 503 with ``Retry-After``).

    ``retry_after`` is the number of seconds to wait before trying again. A read may be retried at once
    elsewhere; a write whose answer was lost may or may not have committed.
    """

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class StorageFullError(StoreError):
    """The disk (or the database's quota) is full: the write was refused and nothing of it was written
    (HTTP 507). Reads still work; free space, then write again."""


class BackendUnavailableError(MemlaneError, NotImplementedError):
    """A URL named a backend, or a feature, this installation cannot serve."""


class EmbedderError(MemlaneError):
    """An embedder could not be loaded, or failed while embedding."""


class EmbedderMismatchError(EmbedderError):
    """The store's vectors were made by a different embedder than the one requested."""


class ForbiddenError(MemlaneError, PermissionError):
    """The calling agent may not read or write that namespace (HTTP 403)."""


class UnauthorizedError(MemlaneError, PermissionError):
    """No valid token was presented (HTTP 401)."""


class BusyError(MemlaneError):
    """The agent already runs as much expensive work (ranked reads, the query space) as it may (HTTP 429).

    Nothing ran. ``retry_after`` is the number of seconds to wait before trying again.
    """

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class ChooserError(MemlaneError):
    """A recall chooser failed: its service errored or answered nonsense."""


class ExtractorError(MemlaneError):
    """A conversation extractor failed: its service errored, or its answer was malformed or cited unknown turns.

    Raised in the caller's process only (an extractor never travels over the
    wire), so it has no HTTP answer of its own; ``memlane.domain.extract`` exports it.
    """


class QueryRefused(MemlaneError, ValueError):
    """A query-space statement was refused or stopped (HTTP 400); nothing ran or nothing changed.

    ``reason`` is a short code (``not_select``, ``unknown_view``,
    ``function_not_allowed``, ``time_cap``...) and ``part`` the offending part
    of the statement, when there is one; the message names both and says what
    to do instead.
    """

    def __init__(self, message: str, *, reason: str | None = None, part: str | None = None) -> None:
        self.reason = reason
        self.part = part
        super().__init__(message)


__all__ = [
    "BackendUnavailableError",
    "BusyError",
    "ChooserError",
    "ConflictError",
    "EmbedderError",
    "EmbedderMismatchError",
    "ForbiddenError",
    "MemlaneError",
    "NotFoundError",
    "QueryRefused",
    "SchemaVersionError",
    "StorageFullError",
    "StoreError",
    "StoreUnavailableError",
    "UnauthorizedError",
    "ValidationError",
]
