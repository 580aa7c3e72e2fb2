"""The query space's operations: run, explain and save read-only statements over the views.

Layer one of the fence (:mod:`memlane.store.fence`) checks and renders a
statement; the runners of :mod:`memlane.store.runner` hold layers two to four
(a connection that can only read the views, the bounds, visibility inside the
views), one per backend.
"""

from __future__ import annotations

import builtins
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...store import fence
from ...store import query_space as space
from ...store import saved as saved_rows
from ...store._common import ts
from ...store.runner import MAX_BYTES, MAX_TIMEOUT_MS, PostgresRunner, Scope, SqliteRunner, _public_error
from ...values import validate
from ...values.errors import (
    BackendUnavailableError,
    ForbiddenError,
    NotFoundError,
    QueryRefused,
    ValidationError,
)
from ...values.query import QueryPlan, QueryResult, SavedQuery

if TYPE_CHECKING:
    from ..ports import Core

DEFAULT_MAX_ROWS = 1000
MAX_ROWS = 100_000
DEFAULT_TIMEOUT_MS = 2000
_SAVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # fullmatch: $ would let a trailing newline through


def _limit(raw: Any, field: str, maximum: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValidationError(field, f"must be an integer, not {type(raw).__name__}")
    if not 1 <= raw <= maximum:
        raise ValidationError(field, f"must be between 1 and {maximum:,}, got {raw}")
    return raw


def runner(mem: Core) -> SqliteRunner | PostgresRunner:
    """The runner of ``mem``'s store (made on first use, closed with the store)."""
    store = mem.store
    make = getattr(store, "query_runner", None)
    if make is None:
        raise BackendUnavailableError(f"the {store.backend} backend has no query space")
    return make()  # type: ignore[no-any-return]


# -- the operations -------------------------------------------------------------------------------


def query(
    mem: Core,
    sql: Any,
    params: Any = None,
    *,
    scope: Scope = None,
    max_rows: Any = DEFAULT_MAX_ROWS,
    timeout_ms: Any = DEFAULT_TIMEOUT_MS,
) -> QueryResult:
    """Check and run one statement as a caller who may read ``scope`` (``None``: everything but ``_memlane``)."""
    started = time.perf_counter()
    max_rows = _limit(max_rows, "max_rows", MAX_ROWS)
    timeout_ms = _limit(timeout_ms, "timeout_ms", MAX_TIMEOUT_MS)
    run = runner(mem)
    checked = fence.check(sql, run.dialect, params, tsconfig=run.tsconfig)
    try:
        columns, fetched = run.run(checked, ts(mem._now()), _scope(scope), max_rows, timeout_ms)
    except QueryRefused as e:
        raise _public_error(e) from None
    notes = list(getattr(run, "notes", []))
    if fetched.cut == "timeout":
        notes.append(f"stopped by the time cap ({timeout_ms:,} ms) after {len(fetched.rows):,} rows")
    elif fetched.cut == "max_rows":
        notes.append(f"more rows exist: only the first {max_rows:,} are returned (max_rows)")
    elif fetched.cut == "max_bytes":
        notes.append(f"the result passed the size cap ({MAX_BYTES:,} bytes); select fewer or shorter columns")
    return QueryResult(
        columns,
        fetched.rows,
        fetched.cut is not None,
        fetched.cut,
        {"max_rows": max_rows, "timeout_ms": timeout_ms, "max_bytes": MAX_BYTES},
        round((time.perf_counter() - started) * 1000, 3),
        checked.views,
        notes,
    )


def explain(mem: Core, sql: Any, params: Any = None, *, scope: Scope = None) -> QueryPlan:
    """Whether ``sql`` passes the fence, the views and functions it touches, and the database's plan."""
    run = runner(mem)
    text = sql if isinstance(sql, str) else repr(sql)
    try:
        checked = fence.check(sql, run.dialect, params, bind=params is not None, tsconfig=run.tsconfig)
    except QueryRefused as e:
        return QueryPlan(False, text, reason=e.reason, message=str(e), part=e.part)
    try:
        plan = run.explain(checked, ts(mem._now()), _scope(scope), DEFAULT_TIMEOUT_MS)
    except QueryRefused as e:
        raise _public_error(e) from None
    return QueryPlan(True, text, checked.shown, checked.views, checked.functions, checked.parameters, plan)


def _scope(scope: Scope) -> Scope:
    if scope is None or any(not p for p in scope):
        return None
    return [tuple(p) for p in scope]


def describe(mem: Core) -> dict[str, Any]:
    """The query space of ``mem``'s backend: views, columns, functions, limits."""
    return space.describe(mem.store.backend)


def search(mem: Core, text: Any) -> builtins.list[dict[str, Any]]:
    """Views and columns matching ``text``."""
    if not isinstance(text, str):
        raise ValidationError("text", f"must be a string, not {type(text).__name__}")
    return space.search(text, mem.store.backend)


# -- saved queries ----------------------------------------------------------------------------------


def _saved(row: Sequence[Any], dialect: str) -> SavedQuery:
    try:
        params = fence.parameters(row[1], dialect)
    except QueryRefused:
        params = []
    return SavedQuery(row[0], row[1], row[2], params, row[3], row[4], row[5])


def save(mem: Core, name: Any, sql: Any, description: Any = "", *, author: str | None, may_replace: Any) -> SavedQuery:
    """Save ``sql`` under ``name`` after checking it; ``may_replace(existing_author)`` guards replacing."""
    if not isinstance(name, str) or not _SAVED_NAME.fullmatch(name):
        raise ValidationError(
            "name", f"{name!r} is not a saved query name: 1-64 letters, digits, '_', '.', '-', starting alphanumeric"
        )
    if not isinstance(description, str) or len(description) > 2000:
        raise ValidationError("description", "must be a string of at most 2,000 characters")
    # as any stored text: no NUL (PostgreSQL cannot hold it), no lone surrogate (no UTF-8 carries it)
    description = validate.text(description, "description")
    fence.check(sql, mem.store.backend, bind=False)  # refuse now what could never run
    now = ts(mem._now())
    with mem.store.session(write=True) as s:
        found = saved_rows.owner(s, name)
        if found is not None:
            if not may_replace(found[0]):
                raise ForbiddenError(f"the saved query {name!r} belongs to {found[0]!r}; save yours under another name")
            saved_rows.update(s, name, sql, description, author, now)
            created = found[1]
        else:
            saved_rows.insert(s, name, sql, description, author, now)
            created = now
    return SavedQuery(name, sql, description, fence.parameters(sql, mem.store.backend), author, created, now)


def saved(mem: Core) -> builtins.list[SavedQuery]:
    """Every saved query, by name."""
    with mem.store.session() as s:
        rows = saved_rows.rows(s)
    return [_saved(r, mem.store.backend) for r in rows]


def get_saved(mem: Core, name: Any) -> SavedQuery:
    """One saved query, or :class:`NotFoundError` naming how to list them."""
    if not isinstance(name, str):
        raise ValidationError("name", f"must be a string, not {type(name).__name__}")
    if not _SAVED_NAME.fullmatch(name):  # no query was saved under it, and no driver need bind it
        raise NotFoundError(f"no saved query named {name!r}; saved_queries() lists them")
    with mem.store.session() as s:
        rows = saved_rows.rows(s, name)
    if not rows:
        raise NotFoundError(f"no saved query named {name!r}; saved_queries() lists them")
    return _saved(rows[0], mem.store.backend)


def delete_saved(mem: Core, name: Any, *, may_replace: Any) -> bool:
    """Delete a saved query; ``False`` if there was none."""
    if not isinstance(name, str):
        raise ValidationError("name", f"must be a string, not {type(name).__name__}")
    if not _SAVED_NAME.fullmatch(name):
        return False
    with mem.store.session(write=True) as s:
        found = saved_rows.owner(s, name)
        if found is None:
            return False
        if not may_replace(found[0]):
            raise ForbiddenError(f"the saved query {name!r} belongs to {found[0]!r}; only its author may delete it")
        saved_rows.delete(s, name)
    return True
