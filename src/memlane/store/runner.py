"""Running checked statements: layers two to four of the query space's fence, one runner per backend.

Layer one (:mod:`memlane.store.fence`) checked and rendered the statement. The
layers here hold even if it had not:

2. **A connection that can only read the views.** SQLite: a second connection
   opened ``mode=ro`` with ``PRAGMA query_only``, and an authorizer that allows
   reading a base table only from inside a ``memory_v1`` view (the views are
   TEMP views of that connection), reading the views themselves, and calling
   the allowed functions; everything else (``sqlite_master``, ``ATTACH``,
   pragmas, any write) is denied by SQLite itself. PostgreSQL: a ``READ ONLY``
   transaction as the NOLOGIN role ``memlane_query``, which may only ``SELECT``
   the views (the views read the base tables with their owner's rights), with
   ``search_path`` set to ``memory_v1``.
3. **Bounds.** A time cap (SQLite: a progress handler that interrupts the
   statement; PostgreSQL: ``statement_timeout``), a row cap and a result size
   cap, both applied while fetching (rows are streamed: a server-side cursor on
   PostgreSQL), so nothing is read past them. The result says what was cut.
4. **Visibility inside the views.** The views read the caller's clock and
   readable prefixes from per-statement context (a TEMP table on SQLite,
   transaction-local settings on PostgreSQL) and drop the reserved
   ``_memlane`` namespace unconditionally, so no join, subquery or function
   can reach a row the caller could not read through ``get``.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import decimal
import hashlib
import json
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Sequence
from itertools import chain
from typing import Any

from ..values.errors import QueryRefused, StoreError
from ..values.model import Namespace
from . import fence
from . import query_space as space
from ._common import ns_text

MAX_TIMEOUT_MS = 60_000
MAX_BYTES = 16 * 1024 * 1024
TEMP_FILE_LIMIT = "256MB"  # PostgreSQL temporary files per statement, when the connecting role may set it
SQLITE_CONNECTIONS = 4  # read-only connections per SQLite store, opened as statements need them
_VALUE_LIMIT = 96 * 1024 * 1024  # SQLite: no value built by a query may pass this (16 Mi 4-byte characters fit)
_FETCH = 2000  # rows per fetch at most (fewer when rows are large: see _Fetch.batch)
_WORD = re.compile(r"\w+")
_PLAIN = frozenset({str, int, float, bool, type(None)})

Scope = Sequence[Namespace] | None  # None: everything except the reserved namespace


def _value(v: Any) -> Any:
    """A database value as JSON-ready data: JSON stays text, times stay ISO text."""
    if v is None or isinstance(v, str | bool | int | float):
        return v
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() and abs(v) < 2**63 else float(v)
    if isinstance(v, _dt.datetime | _dt.date | _dt.time):
        return v.isoformat()
    if isinstance(v, _dt.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v).hex()
    try:
        return json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(v)


def fts_query(words: Any) -> str:
    """``text_match``'s words as an FTS5 query: every word quoted (never syntax), all required."""
    found = _WORD.findall(str(words or "").lower())
    if not found:
        return '""'  # matches nothing
    return " ".join('"' + w.replace('"', '""') + '"' for w in dict.fromkeys(found))


class _Fetch:
    """Rows fetched under the row, size and time caps."""

    def __init__(self, max_rows: int, deadline: float) -> None:
        self.max_rows = max_rows
        self.deadline = deadline
        self.rows: builtins.list[builtins.list[Any]] = []
        self.size = 0
        self.cut: str | None = None

    def batch(self) -> int:
        """How many rows to fetch next: about what still fits under the size cap (a row may be megabytes)."""
        if not self.rows:
            return 50
        average = max(1, self.size // len(self.rows))
        return max(1, min(_FETCH, self.max_rows + 1 - len(self.rows), (MAX_BYTES - self.size) // average))

    def drain(self, cursor: Any) -> None:
        """Fetch from ``cursor`` in batches until it is spent or a cap is reached (either driver's cursor)."""
        while True:
            want = self.batch()
            batch = cursor.fetchmany(want)
            if not batch or not self.take(batch) or len(batch) < want:
                return

    def take(self, batch: Sequence[Sequence[Any]]) -> bool:
        """Add a batch; ``False`` once a cap is reached (the rows that fit are kept)."""
        room = self.max_rows - len(self.rows)
        if len(batch) > room:
            batch, self.cut = batch[:room], "max_rows"
        if not set(map(type, chain.from_iterable(batch))) <= _PLAIN:
            batch = [[_value(v) for v in r] for r in batch]
        total = len(repr(batch))  # one C call; rows are measured one by one only near the cap
        if self.size + total > MAX_BYTES:
            keep = 0
            for n in map(len, map(repr, batch)):
                if self.size + n > MAX_BYTES:
                    break
                self.size += n
                keep += 1
            self.rows.extend(map(list, batch[:keep]))
            self.cut = "max_bytes"
            return False
        self.size += total
        self.rows.extend(map(list, batch))
        if self.cut is None and time.monotonic() > self.deadline:
            self.cut = "timeout"
        return self.cut is None


def _public_plan(rows: Sequence[tuple[int, int, str]]) -> builtins.list[str]:
    """SQLite's plan rows ``(node, parent, detail)`` as indented lines, without the visibility rule's steps.

    The steps that read the caller's scope and clock go, with their subqueries once nothing else is left
    in them; every other line is shown in the query space's own words (:func:`space.public`).
    """
    children: dict[int, builtins.list[int]] = {}
    for node, parent, _ in rows:
        children.setdefault(parent, []).append(node)
    detail = {node: text for node, _, text in rows}
    hidden: set[int] = set()

    def hide(node: int) -> None:
        hidden.add(node)
        for child in children.get(node, ()):
            hide(child)

    for node, _, text in rows:
        if space.public(text) is None:
            hide(node)
    for node, _, _ in reversed(rows):  # children come after their parents: subqueries emptied by the above
        kids = children.get(node, ())
        if kids and all(k in hidden for k in kids) and "SUBQUERY" in detail[node]:
            hidden.add(node)
    depth: dict[int, int] = {0: -1}
    lines = []
    for node, parent, text in rows:
        depth[node] = depth.get(parent, -1) + 1
        if node not in hidden:
            lines.append("  " * depth[node] + str(space.public(text)))
    return lines


def _public_error(e: QueryRefused) -> QueryRefused:
    """``e`` with its message and part in the query space's own words (a database's message may name more)."""
    message, part = space.public(str(e)), None if e.part is None else space.public(e.part)
    if message is not None and (part is not None or e.part is None):
        return e if (message, part) == (str(e), e.part) else QueryRefused(message, reason=e.reason, part=part)
    return QueryRefused(
        "the database refused the statement; its message named the query space's internals and is withheld: "
        "check the statement against describe_query_space()",
        reason=e.reason,
    )


def _time_cap(timeout_ms: int) -> QueryRefused:
    return QueryRefused(
        f"the statement was stopped by the time cap after {timeout_ms:,} ms before it returned a row; "
        "narrow it (a WHERE on namespace or time, fewer joins), or raise timeout_ms (at most "
        f"{MAX_TIMEOUT_MS:,})",
        reason="time_cap",
    )


def _db_error(message: str) -> QueryRefused:
    first = " ".join(str(message).split())
    return QueryRefused(
        f"the database refused the statement: {first}; check names with describe_query_space()",
        reason="database_error",
        part=first,
    )


# -- SQLite ----------------------------------------------------------------------------------


class _SqliteConnection:
    """One read-only connection of the query space, with its TEMP views and authorizer.

    The authorizer and the progress handler are installed once and read the
    runner's state: setting an authorizer again would expire every prepared
    statement, and re-preparing a statement over the views costs more than
    running a small one.
    """

    def __init__(self, store: Any) -> None:
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection = store.query_connection()
        self._scope_key: Any = object()
        self._now = ""
        self._deadline = float("inf")
        self._mode = "internal"  # internal (our own statements), strict, or lenient (see below)
        token = secrets.token_hex(8)
        self._tag = f" /* memlane {token} */"  # our statements' text: no query can hit their cached plans
        conn = self._conn
        try:
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _VALUE_LIMIT)
            conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 4 * fence.MAX_SQL_CHARS + 65_536)
            statements, inner_of = space.sqlite_setup(token)
            conn.create_function("memlane_head", 2, space.sqlite_head, deterministic=True)  # the views use it
            for sql in statements:
                conn.execute(sql)
            conn.create_function("memlane_fts_query", 1, fts_query, deterministic=True)
            conn.create_function("memlane_now", 0, lambda: self._now)
            conn.execute("PRAGMA query_only = 1")
        except sqlite3.Error as e:
            conn.close()
            raise StoreError(f"cannot set up the query space on {store.location!r}: {e}; run `memlane migrate`") from e
        outer = frozenset(inner_of)  # what statements name: the views and the text_match helpers
        inner = frozenset(inner_of.values())  # what holds the bodies: the only readers of the base tables
        context = ("memlane_ctx", "memlane_scope")
        functions = fence.allowed("sqlite").sqlite_names | {"memlane_now", "memlane_head"}  # the views call them
        base = space.BASE_TABLES
        shadows = tuple(f"{t}_" for t in ("items_fts", "fact_fts", "claim_fts", "chunk_fts"))
        ok, deny = sqlite3.SQLITE_OK, sqlite3.SQLITE_DENY
        reading, selecting = sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT
        calling, recursive = sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE
        pragma = sqlite3.SQLITE_PRAGMA

        def strict(action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
            if action == selecting or action == recursive:
                return ok
            if action == reading:
                if db is None:
                    return ok  # a CTE or subquery of the statement itself, not a database object
                if db == "temp":
                    if arg1 in outer:
                        return ok
                    if arg1 in inner and (source in outer or source in inner):
                        return ok
                    if arg1 in context and source in inner:
                        return ok
                    return deny
                if db == "main" and source in inner and arg1 in base:
                    return ok
                return deny
            if action == calling:
                return ok if arg2 is not None and arg2.lower() in functions else deny
            return deny

        def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
            mode = self._mode
            if mode == "internal":
                return ok
            if mode == "lenient":
                # only after the same statement was prepared under ``strict``: the full-text
                # index then reads its own shadow tables (and items, its content) from
                # statements it prepares itself while the query runs
                if action == reading and db == "main" and source is None and arg1 is not None:
                    if arg1 in base or arg1.startswith(shadows):
                        return ok
                if action == pragma and arg1 == "data_version" and arg2 is None:
                    return ok  # FTS5 checks whether its cached structure is stale
            return strict(action, arg1, arg2, db, source)

        conn.set_authorizer(authorize)
        conn.set_progress_handler(lambda: time.monotonic() > self._deadline, 1000)

    def close(self) -> None:
        """Close the read-only connection."""
        with self._lock:
            self._conn.close()

    def _set_context(self, now: str, scope: Scope) -> None:
        """The clock for the next statement; the readable prefixes, written only when they change."""
        self._now = now
        key = None if scope is None else tuple(scope)
        if key == self._scope_key:
            return
        conn, tag = self._conn, self._tag
        self._mode = "internal"
        conn.execute("PRAGMA query_only = 0" + tag)  # TEMP tables only: the file itself is opened read-only
        try:
            conn.execute(
                "UPDATE temp.memlane_ctx SET everything = ?, depths = ?" + tag,
                (int(scope is None), space.scope_depths(scope or ())),
            )
            conn.execute("DELETE FROM temp.memlane_scope" + tag)
            rows = [(ns_text(p),) for p in scope or ()]
            conn.executemany("INSERT OR IGNORE INTO temp.memlane_scope (prefix) VALUES (?)" + tag, rows)
        finally:
            conn.execute("PRAGMA query_only = 1" + tag)
        self._scope_key = key

    def _error(self, e: sqlite3.Error, timeout_ms: int) -> QueryRefused:
        text = str(e)
        if "interrupted" in text:
            return _time_cap(timeout_ms)
        if "not authorized" in text or "authorization denied" in text or "prohibited" in text:
            return QueryRefused(
                f"the read-only connection's guard refused the statement ({text}); only the memory_v1 views "
                "and the allowed functions can be read",
                reason="guard",
            )
        if "no such table: main." in text:
            return QueryRefused(
                f"this memory's schema predates a view's tables ({text}); run `memlane migrate` "
                "(Python: Memory.migrate())",
                reason="database_error",
            )
        return _db_error(text)

    def run(
        self, checked: fence.Checked, now: str, scope: Scope, max_rows: int, timeout_ms: int
    ) -> tuple[builtins.list[str], _Fetch]:
        """Run a checked statement under the caps; ``(columns, fetched)``."""
        with self._lock:
            self._set_context(now, scope)
            conn = self._conn
            fetched = _Fetch(max_rows, time.monotonic() + timeout_ms / 1000)
            cursor = None
            columns: builtins.list[str] = []
            try:
                self._mode = "strict"
                self._deadline = fetched.deadline
                if checked.uses_match:
                    conn.execute("EXPLAIN " + checked.sql, checked.params).fetchall()
                    self._mode = "lenient"
                cursor = conn.execute(checked.sql, checked.params)
                columns = [d[0] for d in cursor.description or ()]
                fetched.drain(cursor)
            except sqlite3.Error as e:
                if "interrupted" in str(e) and fetched.rows:
                    fetched.cut = "timeout"
                    return columns, fetched
                raise self._error(e, timeout_ms) from None
            finally:
                if cursor is not None:
                    cursor.close()
                self._mode = "internal"
                self._deadline = float("inf")
            return columns, fetched

    def explain(self, checked: fence.Checked, now: str, scope: Scope, timeout_ms: int) -> builtins.list[str]:
        """``EXPLAIN QUERY PLAN`` lines, indented by depth."""
        with self._lock:
            self._set_context(now, scope)
            try:
                self._mode = "strict"
                self._deadline = time.monotonic() + timeout_ms / 1000
                rows = self._conn.execute("EXPLAIN QUERY PLAN " + checked.sql, checked.params).fetchall()
            except sqlite3.Error as e:
                raise self._error(e, timeout_ms) from None
            finally:
                self._mode = "internal"
                self._deadline = float("inf")
        return _public_plan([(node, parent, str(detail)) for node, parent, _, detail in rows])


class SqliteRunner:
    """The query space of one SQLite store: up to :data:`SQLITE_CONNECTIONS` read-only connections.

    A statement borrows a free connection (opening one if none is free and the
    limit allows), so a slow statement does not hold up the others; under WAL
    readers never block the writer.
    """

    dialect = "sqlite"
    tsconfig = "memlane"

    def __init__(self, store: Any) -> None:
        self._store = store
        self._lock = threading.Condition()
        self._free: builtins.list[_SqliteConnection] = [_SqliteConnection(store)]
        self._count = 1
        self._closed = False

    def _borrow(self) -> _SqliteConnection:
        with self._lock:
            while not self._free:
                if self._closed:
                    raise StoreError("this memory is closed; open it again with memlane.open()")
                if self._count < SQLITE_CONNECTIONS:
                    self._count += 1
                    break
                self._lock.wait()
            else:
                return self._free.pop()
        try:
            return _SqliteConnection(self._store)
        except BaseException:
            with self._lock:
                self._count -= 1
                self._lock.notify()
            raise

    def _give_back(self, conn: _SqliteConnection) -> None:
        with self._lock:
            if self._closed:
                conn.close()
                return
            self._free.append(conn)
            self._lock.notify()

    def run(
        self, checked: fence.Checked, now: str, scope: Scope, max_rows: int, timeout_ms: int
    ) -> tuple[builtins.list[str], _Fetch]:
        """Run a checked statement under the caps on a free connection; ``(columns, fetched)``."""
        conn = self._borrow()
        try:
            return conn.run(checked, now, scope, max_rows, timeout_ms)
        finally:
            self._give_back(conn)

    def explain(self, checked: fence.Checked, now: str, scope: Scope, timeout_ms: int) -> builtins.list[str]:
        """``EXPLAIN QUERY PLAN`` lines, indented by depth."""
        conn = self._borrow()
        try:
            return conn.explain(checked, now, scope, timeout_ms)
        finally:
            self._give_back(conn)

    def close(self) -> None:
        """Close every connection (those in use close when they are given back)."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
            self._lock.notify_all()
        for conn in free:
            conn.close()


# -- PostgreSQL --------------------------------------------------------------------------------


class PostgresRunner:
    """The query space of one PostgreSQL store: pooled connections, a READ ONLY transaction per statement."""

    dialect = "postgres"

    def __init__(self, store: Any) -> None:
        self._store = store
        with store.session() as s:
            schema = s.rows("SELECT to_regnamespace(?)::text", (space.SCHEMA,))[0][0]
            if schema is None:
                raise StoreError(
                    f"{store.location} has no {space.SCHEMA} schema; run `memlane migrate` (migration m004_query_space)"
                )
            exists = s.rows("SELECT 1 FROM pg_roles WHERE rolname = ?", (space.QUERY_ROLE,))
            member = bool(exists) and bool(
                s.rows("SELECT pg_has_role(current_user, ?, 'MEMBER')", (space.QUERY_ROLE,))[0][0]
            )
            found = s.rows(
                "SELECT n.nspname FROM pg_ts_config c JOIN pg_namespace n ON n.oid = c.cfgnamespace "
                "WHERE c.cfgname = 'memlane' ORDER BY n.nspname = current_schema() DESC LIMIT 1"
            )
            self._generic = int(s.rows("SELECT current_setting('server_version_num')::int")[0][0]) >= 160000
            self._secret = str(s.rows("SELECT secret FROM memlane_query_secret")[0][0])
            # a sort or hash of a huge join spills to temporary files; cap them where this role may
            self._temp_cap = bool(s.rows("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")[0][0])
        self.role = member
        self.tsconfig = f"{found[0][0]}.memlane" if found else "english"
        self.notes = (
            []
            if member
            else [
                f"queries run as the connecting role, not {space.QUERY_ROLE} (it is missing or this role may not "
                "use it); the read-only transaction and the fence still apply"
            ]
        )

    def close(self) -> None:
        """Nothing to close: statements borrow the store's pool."""

    def _sign(self, prefixes: str, now: str, pid: int) -> str:
        """The signature ``memory_v1.visible_scope()`` checks before the views believe the settings."""
        message = space.scope_message(prefixes, now, pid).encode()
        inner = hashlib.sha256(self._secret.encode() + message).hexdigest()
        return hashlib.sha256((self._secret + inner).encode()).hexdigest()

    def _begin(self, conn: Any, now: str, scope: Scope, timeout_ms: int) -> None:
        prefixes = space.EVERYTHING if scope is None else "\n".join(dict.fromkeys(ns_text(p) for p in scope))
        signature = self._sign(prefixes, now, conn.info.backend_pid)
        settings = [("memlane.now", now), ("memlane.scope", prefixes), ("memlane.sig", signature)]
        settings.append(("memlane.depths", space.scope_depths(scope or ())))
        settings.append(("statement_timeout", str(timeout_ms)))
        settings += [("search_path", space.SCHEMA), ("lock_timeout", str(timeout_ms))]
        if self._temp_cap:
            settings.append(("temp_file_limit", TEMP_FILE_LIMIT))
        if self.role:
            settings.append(("role", space.QUERY_ROLE))
        conn.execute(
            "SELECT " + ", ".join("set_config(%s, %s, true)" for _ in settings),
            [x for pair in settings for x in pair],
        )

    def _error(self, e: Exception, timeout_ms: int) -> QueryRefused:
        import psycopg

        if isinstance(e, psycopg.errors.QueryCanceled):
            return _time_cap(timeout_ms)
        if isinstance(e, psycopg.errors.InsufficientPrivilege | psycopg.errors.ReadOnlySqlTransaction):
            return QueryRefused(
                f"the read-only role's guard refused the statement ({' '.join(str(e).split())}); only the "
                "memory_v1 views can be read",
                reason="guard",
            )
        return _db_error(getattr(getattr(e, "diag", None), "message_primary", None) or str(e))

    def run(
        self, checked: fence.Checked, now: str, scope: Scope, max_rows: int, timeout_ms: int
    ) -> tuple[builtins.list[str], _Fetch]:
        """Run a checked statement through a server-side cursor under the caps."""
        import psycopg

        deadline = time.monotonic() + timeout_ms / 1000
        fetched = _Fetch(max_rows, deadline)
        with self._store.session() as s:  # REPEATABLE READ, READ ONLY
            conn = s.conn
            columns: builtins.list[str] = []
            try:
                self._begin(conn, now, scope, timeout_ms)
                cursor = psycopg.RawServerCursor(conn, "memlane_query")
                cursor.execute(checked.sql, checked.params)
                columns = [d.name for d in cursor.description or ()]
                fetched.drain(cursor)
                # the cursor ends with the transaction: no CLOSE round trip
            except psycopg.Error as e:
                if isinstance(e, psycopg.errors.QueryCanceled) and fetched.rows:
                    fetched.cut = "timeout"
                    return columns, fetched
                raise self._error(e, timeout_ms) from None
        return columns, fetched

    def explain(self, checked: fence.Checked, now: str, scope: Scope, timeout_ms: int) -> builtins.list[str]:
        """``EXPLAIN`` lines (a generic plan when the statement has parameters, on PostgreSQL 16+)."""
        import psycopg

        with self._store.session() as s:
            conn = s.conn
            try:
                self._begin(conn, now, scope, timeout_ms)
                generic = checked.parameters and self._generic
                sql = ("EXPLAIN (GENERIC_PLAN) " if generic else "EXPLAIN ") + checked.sql
                cursor = psycopg.RawCursor(conn)
                rows = cursor.execute(sql, None if generic else checked.params).fetchall()
            except psycopg.Error as e:
                raise self._error(e, timeout_ms) from None
        return [line for line in (space.public(str(r[0])) for r in rows) if line is not None]
