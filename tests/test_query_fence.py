"""The query space's fence, attacked: every layer refuses, nothing changes, and visibility holds.

* the attack list (writes, attachments, pragmas, extension loading, file
  functions, catalogs, multi-statements, statements smuggled in CTEs,
  look-alike keywords, a 10 MB statement), each refused with its reason, on
  SQLite and PostgreSQL, with the stored state compared before and after;
* the time cap stops a recursive CTE that never ends and a cross join of
  large views;
* layer two alone: statements that skip the validator and go straight to the
  read-only connection are still refused by SQLite's authorizer or the
  PostgreSQL role;
* visibility: an agent cannot reach another agent's rows (or the reserved
  namespace) by any join, subquery, function or saved query, embedded and
  through the live service.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import memlane
from memlane import QueryRefused
from memlane.core.access import Access
from memlane.domain.query import run
from memlane.store import fence
from memlane.store import query_space as space
from memlane.store import runner as qrunner

pytestmark = pytest.mark.embedded

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _plant_reserved(mem, key: str, value: str) -> None:
    """A row under the old _memlane root, as a store from before m006_access could still hold (no verb writes one)."""
    with mem.store.session(write=True) as s:
        s.run(
            "INSERT INTO items (id, namespace, key, value, value_type, text, metadata, created_at, updated_at, "
            "version) VALUES (?, '_memlane/agents', ?, ?, 'object', '', '{}', '2026-01-01T00:00:00+00:00', "
            "'2026-01-01T00:00:00+00:00', 1)",
            ("legacy" + key, key, value),
        )
        if s.dialect == "sqlite":  # as put would: an external-content FTS row per item
            s.run("INSERT INTO items_fts (rowid, text) SELECT rowid, text FROM items WHERE id = ?", ("legacy" + key,))


@pytest.fixture
def filled(mem, clock):
    """A memory with items (one expiring), history, a reserved record, facts and claims."""
    mem.put("user/1", "preferences.ui.theme", "dark")
    mem.put("user/1", "preferences.ui.theme", "light")
    mem.put("room/eng", "digest", "billing ships Friday", ttl=3600)
    _plant_reserved(mem, "root", '{"admin": true}')
    dana = mem.add_entity("team/acme", "Dana", kind="person")
    mem.assert_fact("team/acme", dana.id, "works_on", "billing", source="standup")
    mem.add_claim("team/acme", "the billing migration slips", speaker="Dana", about=[dana.id])
    mem.save_query("kept", "SELECT count(*) FROM items")
    return mem


def state(mem: Any) -> str:
    """Everything stored, the facts layer and saved queries included: equal before and after an attack."""
    rows = list(mem.export_records())
    with mem.store.session() as s:
        counts = [
            s.rows(f"SELECT count(*) FROM {t}")[0][0]
            for t in ("items", "item_history", "entities", "facts", "evidence", "claims", "saved_queries")
        ]
        tables = s.rows(
            "SELECT count(*) FROM sqlite_master"
            if s.dialect == "sqlite"
            else "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
        )[0][0]
    return json.dumps([rows, counts, tables, [q.to_dict() for q in mem.saved_queries()]], sort_keys=True, default=str)


# (statement, the reasons it may be refused with): every one is refused on both backends
ATTACKS: list[tuple[str, set[str]]] = [
    ("INSERT INTO items (id, namespace, key) VALUES ('x', 'a', 'k')", {"not_select"}),
    ("UPDATE items SET value = '\"pwned\"'", {"not_select"}),
    ("DELETE FROM items", {"not_select"}),
    ("DROP TABLE items", {"not_select"}),
    ("DROP VIEW memory_v1.items", {"not_select"}),
    ("CREATE TABLE stolen AS SELECT * FROM items", {"not_select"}),
    ("CREATE TEMP VIEW items AS SELECT 1", {"not_select"}),
    ("ATTACH DATABASE '/tmp/memlane-attack.db' AS attack", {"not_select", "parse_error"}),
    ("PRAGMA writable_schema = 1", {"not_select"}),
    ("PRAGMA query_only = 0", {"not_select"}),
    ("VACUUM INTO '/tmp/memlane-attack.db'", {"not_select"}),
    ("SELECT load_extension('/tmp/evil.so')", {"function_not_allowed"}),
    ("SELECT readfile('/etc/passwd')", {"function_not_allowed"}),
    ("SELECT writefile('/tmp/memlane-attack', 'x')", {"function_not_allowed"}),
    ("SELECT edit('x')", {"function_not_allowed"}),
    ("SELECT * FROM sqlite_master", {"unknown_view"}),
    ("SELECT sql FROM sqlite_schema", {"unknown_view"}),
    ("SELECT name FROM main.sqlite_master", {"outside_query_space"}),
    ("SELECT * FROM temp.memlane_scope", {"outside_query_space"}),
    ("SELECT * FROM memlane_ctx", {"unknown_view"}),
    ("SELECT * FROM memlane_match_items", {"unknown_view"}),
    ("SELECT * FROM pragma_table_info('items')", {"table_function"}),
    ("SELECT * FROM main.items", {"outside_query_space"}),
    ("SELECT * FROM public.items", {"outside_query_space"}),
    ("SELECT * FROM meta", {"unknown_view"}),
    ("SELECT * FROM pg_catalog.pg_authid", {"outside_query_space"}),
    ("SELECT * FROM pg_class", {"unknown_view"}),
    ("SELECT * FROM information_schema.tables", {"outside_query_space"}),
    ("SELECT pg_read_file('/etc/passwd')", {"function_not_allowed"}),
    ("SELECT pg_sleep(30)", {"function_not_allowed"}),
    ("SELECT set_config('memlane.scope', '*', false)", {"function_not_allowed"}),
    ("SELECT current_setting('memlane.scope')", {"function_not_allowed"}),
    ("COPY items TO '/tmp/memlane-attack'", {"not_select"}),
    ("COPY (SELECT * FROM items) TO PROGRAM 'id'", {"not_select", "parse_error"}),
    ("SELECT * FROM dblink('host=evil', 'SELECT 1') AS t(a int)", {"table_function"}),
    ("SELECT dblink_exec('host=evil', 'DROP TABLE items')", {"function_not_allowed"}),
    ("SELECT lo_import('/etc/passwd')", {"function_not_allowed"}),
    ("SELECT pg_catalog.lower(key) FROM items", {"function_not_allowed"}),
    ("SELECT 'pg_authid'::regclass", {"cast_not_allowed"}),
    ("SELECT * FROM generate_series(1, 10)", {"table_function"}),
    ("SELECT * FROM items, json_each(items.value)", {"table_function"}),
    ("SET ROLE postgres", {"not_select"}),
    ("DO $$ BEGIN DELETE FROM items; END $$", {"not_select", "parse_error"}),
    # more than one statement, the separator hidden in comments and strings
    ("SELECT 1; DROP TABLE items", {"multiple_statements"}),
    ("SELECT 1 /* ; */ ; DELETE FROM items", {"multiple_statements"}),
    ("SELECT ';' ; DELETE FROM items", {"multiple_statements"}),
    ("SELECT 1 -- comment\n; DELETE FROM items", {"multiple_statements"}),
    ("SELECT 1;\nSELECT 2", {"multiple_statements"}),
    # statements smuggled in CTEs and clauses
    ("WITH x AS (DELETE FROM items RETURNING *) SELECT * FROM x", {"not_read_only", "parse_error"}),
    ("WITH x AS (INSERT INTO items (id) VALUES ('x') RETURNING id) SELECT * FROM x", {"not_read_only", "parse_error"}),
    ("WITH x AS (UPDATE items SET key = 'k' RETURNING key) SELECT * FROM x", {"not_read_only", "parse_error"}),
    ("WITH items AS (SELECT 1 AS key) SELECT key FROM items", {"cte_shadows_view"}),
    ("SELECT * INTO stolen FROM items", {"not_read_only", "not_select"}),
    ("SELECT * FROM items FOR UPDATE", {"not_read_only"}),
    # unicode look-alikes and invisible characters
    ("ＳＥＬＥＣＴ * FROM items", {"parse_error"}),
    ("SELECT * FROM іtems", {"unknown_view"}),  # Cyrillic і
    ("DЕLETE FROM items", {"parse_error", "not_select"}),  # Cyrillic Е
    ("SEL\u200bECT * FROM items", {"invisible_character"}),
    ("SELECT * FROM items\u202e", {"invisible_character"}),
    ("SELECT 1\x00; DROP TABLE items", {"invisible_character"}),
    # nesting no parser survives
    ("SELECT " + "(" * 3000 + "1" + ")" * 3000, {"too_complex", "parse_error"}),
    ("", {"empty"}),
]


def _id(text: str) -> str:
    """A test id that names the statement and that a command line can pass back (mutmut does):
    its first words in plain ASCII, and a short hash telling apart statements alike in those."""
    import hashlib
    import re

    words = re.sub(r"[^A-Za-z0-9_]+", "_", text.encode("ascii", "replace").decode())[:40].strip("_")
    return f"{words}-{hashlib.sha1(text.encode('utf-8', 'surrogatepass')).hexdigest()[:6]}"


@pytest.mark.parametrize("attack", ATTACKS, ids=[_id(sql) for sql, _ in ATTACKS])
def test_attack_is_refused_with_a_reason_and_nothing_changes(filled, attack):
    sql, reasons = attack
    before = state(filled)
    with pytest.raises(QueryRefused) as e:
        filled.query(sql)
    assert e.value.reason in reasons, (e.value.reason, str(e.value))
    assert str(e.value) and "Traceback" not in str(e.value)
    plan = filled.explain_query(sql)
    assert not plan.valid and plan.reason in reasons
    assert state(filled) == before


def test_separators_inside_strings_and_comments_are_data(filled):
    before = state(filled)
    result = filled.query("SELECT 'a;b' AS x, ';DROP TABLE items' AS y /* ; DELETE FROM items */ -- ; DROP\n")
    assert result.rows == [["a;b", ";DROP TABLE items"]]
    assert state(filled) == before


def test_a_10_mb_statement_is_refused_before_parsing(filled):
    before = state(filled)
    started = time.monotonic()
    with pytest.raises(QueryRefused) as e:
        filled.query("SELECT '" + "x" * (10 * 1024 * 1024) + "'")
    assert e.value.reason == "too_long" and "characters" in str(e.value)
    assert time.monotonic() - started < 30  # refused by its length, not by parsing ten megabytes
    assert state(filled) == before


def test_recursive_cte_that_never_ends_is_stopped_by_the_time_cap(filled):
    before = state(filled)
    started = time.monotonic()
    with pytest.raises(QueryRefused) as e:
        filled.query(
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r", timeout_ms=300
        )
    assert e.value.reason == "time_cap" and "300 ms" in str(e.value)
    assert time.monotonic() - started < 30
    assert state(filled) == before
    # the same statement read row by row stops at the row cap instead
    rows = filled.query("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r", max_rows=5)
    assert rows.rows == [[1], [2], [3], [4], [5]] and rows.truncated_by == "max_rows"


def test_cross_join_of_large_views_is_stopped_by_the_time_cap(filled):
    filled.put_many([{"namespace": "bulk", "key": f"k{i}", "value": i} for i in range(400)])
    before = state(filled)
    with pytest.raises(QueryRefused) as e:
        # 400 ** 4 rows: more than any machine counts in 300 ms, so the cap, not the count, ends it
        filled.query("SELECT count(*) FROM items a, items b, items c, items d, item_history e", timeout_ms=300)
    assert e.value.reason == "time_cap"
    assert state(filled) == before
    # the memory is still usable at once
    assert filled.query("SELECT count(*) FROM items WHERE namespace = 'bulk'").rows == [[400]]


class HeldClock:
    """The query runner's clock (stands in for ``run.time``): it stands still until the test moves it.

    A time cap then fires exactly when the test says, however slow or loaded the machine. ``calls`` counts
    its readings: the runner reads it once for a statement's deadline, then (SQLite) its progress handler
    reads it every thousand steps while the statement runs.
    """

    perf_counter = staticmethod(time.perf_counter)

    def __init__(self) -> None:
        self.now = 0.0
        self.calls = 0
        self._read = threading.Condition()

    def monotonic(self) -> float:
        with self._read:
            self.calls += 1
            self._read.notify_all()
        return self.now

    def wait_calls(self, n: int, timeout: float = 60) -> bool:
        """Whether the clock was read ``n`` times within ``timeout`` real seconds (a bound, not a race)."""
        with self._read:
            return self._read.wait_for(lambda: self.calls >= n, timeout)


@pytest.fixture
def held_clock(monkeypatch: pytest.MonkeyPatch) -> HeldClock:
    clock = HeldClock()
    monkeypatch.setattr(qrunner, "time", clock)
    return clock


def _pg_admin(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The PostgreSQL server's admin URL and the name of this test's database."""
    from urllib.parse import urlsplit

    return request.getfixturevalue("postgres").admin_url, urlsplit(request.getfixturevalue("store_url")).path[1:]


def _pg_fetching(admin: tuple[str, str], timeout: float = 60) -> int:
    """The backend pid running a FETCH from the query runner's cursor in this test's database, once one does."""
    import psycopg

    url, dbname = admin
    with psycopg.connect(url, autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        while True:
            found = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND state = 'active' "
                "AND query LIKE 'FETCH%%memlane_query%%'",
                (dbname,),
            ).fetchall()
            if found:
                return int(found[0][0])
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
    pytest.fail(f"no statement of the query runner was running after {timeout} s")


def _pg_cancel(admin: tuple[str, str], pid: int) -> None:
    """Cancel a backend's statement, as its ``statement_timeout`` would."""
    import psycopg

    with psycopg.connect(admin[0], autocommit=True) as conn:
        conn.execute("SELECT pg_cancel_backend(%s)", (pid,))


# 300 ** 5 rows to count, in constant memory (a recursive CTE spills to temporary files on PostgreSQL until
# their limit ends it): it runs until it is stopped
NEVER_ENDS = "SELECT count(*) FROM items a, items b, items c, items d, items e"


def test_a_slow_statement_does_not_hold_up_a_quick_one(filled, backend, held_clock, request):
    """A statement that runs until the test stops it; a quick one must finish while it still runs.

    Nothing here races the machine: the slow statement's time cap fires only when the test moves the
    runner's clock (SQLite) or cancels it as the server's ``statement_timeout`` would (PostgreSQL). Should
    the quick statement wait for the slow one, a watchdog stops the slow one after 30 s and the test fails.
    """
    filled.put_many([{"namespace": "bulk", "key": f"k{i}", "value": i} for i in range(300)])
    outcome: list[Any] = []

    def slow() -> None:
        try:
            filled.query(NEVER_ENDS, timeout_ms=run.MAX_TIMEOUT_MS)
        except QueryRefused as e:
            outcome.append(e.reason)

    worker = threading.Thread(target=slow, daemon=True)
    worker.start()
    stopped = threading.Event()
    if backend == "sqlite":
        # read once for the deadline, then by the progress handler: the statement is running
        assert held_clock.wait_calls(2), "the slow statement never started"

        def running() -> bool:
            return held_clock.wait_calls(held_clock.calls + 1, timeout=10)  # its progress handler still reads

        def stop() -> None:
            stopped.set()
            held_clock.now = 3600.0  # past the cap: the progress handler interrupts the statement
    else:
        admin = _pg_admin(request)
        pid = _pg_fetching(admin)

        def running() -> bool:
            return _pg_fetching(admin, timeout=10) == pid

        def stop() -> None:
            stopped.set()
            _pg_cancel(admin, pid)

    watchdog = threading.Timer(30, stop)  # well inside the cap: only the test stops the slow statement
    watchdog.start()
    try:
        assert filled.query("SELECT count(*) FROM items WHERE namespace = 'bulk'").rows == [[300]]
        assert not stopped.is_set(), "the quick statement waited for the slow one"
        assert worker.is_alive() and running()  # the slow statement still runs: the quick one did not wait
    finally:
        watchdog.cancel()
        stop()
        worker.join(60)
    assert not worker.is_alive()
    assert outcome == ["time_cap"]


@pytest.mark.parametrize("when", ["between_batches", "mid_batch"])
def test_time_cap_during_fetch_returns_what_was_read(filled, backend, held_clock, request, monkeypatch, when):
    """The cap passes once the first batch of rows is in: those rows come back, marked as cut by the time cap.

    ``between_batches``: every row would come at once, but the cap has passed when the runner checks it after
    the first batch, so it stops there. ``mid_batch``: the cap passes while the next batch is read, in a cross
    join behind the first rows that takes forever: SQLite's progress handler interrupts it (PostgreSQL: the
    test cancels it, as the server's ``statement_timeout`` would), and the rows already read are kept.
    """
    filled.put_many([{"namespace": "bulk", "key": f"k{i}", "value": i} for i in range(600)])
    keys = {r[0] for r in filled.query("SELECT key FROM items", max_rows=10_000).rows}
    admin = _pg_admin(request) if backend == "postgres" else None
    take = qrunner._Fetch.take
    batches: list[int] = []

    def first_batch_then_the_cap(self: Any, batch: Any) -> bool:
        batches.append(len(batch))
        if when == "between_batches":
            held_clock.now = 3600.0
            return take(self, batch)
        more = take(self, batch)
        if len(batches) == 1:
            held_clock.now = 3600.0
            if admin is not None:
                threading.Thread(target=lambda: _pg_cancel(admin, _pg_fetching(admin)), daemon=True).start()
        return more

    monkeypatch.setattr(qrunner._Fetch, "take", first_batch_then_the_cap)
    sql = "SELECT a.key FROM items a"
    if when == "mid_batch":
        sql += " UNION ALL SELECT CAST(count(*) AS text) FROM items a, items b, items c, items d"
    # on PostgreSQL the server's own cap must not fire first: only the runner's clock and the test decide
    timeout_ms = 300 if backend == "sqlite" else run.MAX_TIMEOUT_MS
    result = filled.query(sql, timeout_ms=timeout_ms, max_rows=100_000)
    assert result.truncated and result.truncated_by == "timeout"
    assert len(batches) == 1 and len(result.rows) == batches[0] < len(keys)  # the first batch, whole
    assert {r[0] for r in result.rows} <= keys  # rows of the first part only: the count never came
    assert any(f"time cap ({timeout_ms:,} ms)" in n for n in result.notes), result.notes


# -- layer two alone: the read-only connection refuses what the validator would have --------


SKIPPING_THE_VALIDATOR = {
    "sqlite": [
        "SELECT * FROM main.items",
        "SELECT * FROM sqlite_master",
        "SELECT * FROM main.meta",
        "SELECT * FROM main.saved_queries",
        "SELECT * FROM main.claim_fts_content",
        # a CTE named like a view is reported to the authorizer as that view: still refused
        "WITH items AS (SELECT * FROM main.items) SELECT * FROM items",
        "WITH claims AS (SELECT * FROM temp.memlane_scope) SELECT * FROM claims",
        "SELECT load_extension('/tmp/evil.so')",
        "SELECT randomblob(1000000000)",
        "INSERT INTO temp.memlane_scope VALUES ('_memlane', '', '')",
        "DELETE FROM main.items",
        "UPDATE temp.memlane_ctx SET everything = 1",
        "ATTACH DATABASE ':memory:' AS attack",
        "PRAGMA query_only = 0",
        "CREATE TEMP TABLE stolen AS SELECT * FROM items",
        "DROP VIEW temp.items",
    ],
    "postgres": [
        "SELECT * FROM public.items",
        "SELECT * FROM public.meta",
        "SELECT * FROM public.saved_queries",
        "SELECT pg_read_file('/etc/passwd')",
        "SELECT lo_import('/etc/passwd')",
        "DELETE FROM public.items",
        "UPDATE memory_v1.items SET key = 'x'",
        "CREATE TABLE memory_v1.stolen (a int)",
        "SELECT nextval('public.items_ref_seq')",
    ],
}


def test_layer_two_alone_refuses_statements_that_skip_the_validator(filled, backend):
    before = state(filled)
    runner = run.runner(filled)
    for sql in SKIPPING_THE_VALIDATOR[backend]:
        unchecked = fence.Checked(sql, [], [], [])
        with pytest.raises(QueryRefused) as e:
            runner.run(unchecked, "2026-01-01T12:00:00.000000+00:00", None, 10, 2000)
        assert e.value.reason in ("guard", "database_error"), (sql, str(e.value))
    assert state(filled) == before


def test_layer_four_alone_hides_the_reserved_namespace_and_unreadable_rows(filled, backend):
    runner = run.runner(filled)
    now = "2026-01-01T12:00:00.000000+00:00"
    view = "memory_v1.items" if backend == "postgres" else "items"

    def rows(sql: str, scope: Any) -> list[Any]:
        return runner.run(fence.Checked(sql, [], [], []), now, scope, 100, 2000)[1].rows

    everything = rows(f"SELECT namespace FROM {view} ORDER BY namespace", None)
    assert everything == [["room/eng"], ["user/1"]]  # never _memlane, even for the owner
    assert rows(f"SELECT namespace FROM {view}", [("user",)]) == [["user/1"]]
    assert rows(f"SELECT namespace FROM {view}", [("_memlane",)]) == []
    assert rows(f"SELECT namespace FROM {view}", []) == []


def test_sqlite_caps_the_size_of_any_value_a_query_builds(filled, backend):
    if backend != "sqlite":
        pytest.skip("a SQLite connection limit")
    before = state(filled)
    with pytest.raises(QueryRefused) as e:
        # doubling a string reaches a gigabyte in 30 steps; the connection refuses it long before
        filled.query("WITH RECURSIVE r(s, n) AS (SELECT 'x', 0 UNION ALL SELECT s || s, n + 1 FROM r WHERE n < 40) "
                     "SELECT max(length(s)) FROM r", timeout_ms=20_000)  # fmt: skip
    assert e.value.reason == "database_error" and "too big" in str(e.value)
    assert state(filled) == before


def test_postgres_scope_set_by_the_statement_itself_counts_for_nothing(filled, backend):
    if backend != "postgres":
        pytest.skip("PostgreSQL's transaction-local settings")
    runner = run.runner(filled)
    now = "2026-01-01T12:00:00.000000+00:00"
    forged = [
        # skipping the validator: set the settings the views read, then read the views
        "WITH f AS MATERIALIZED (SELECT set_config('memlane.scope', E'\\t', true) AS s) "
        "SELECT i.namespace FROM f, memory_v1.items i",
        "SELECT i.namespace FROM (SELECT set_config('memlane.scope', 'room', true)) f, memory_v1.items i",
        "SELECT i.namespace FROM (SELECT set_config('memlane.now', '2000', true)) f, memory_v1.items i",
    ]
    for sql in forged:
        rows = runner.run(fence.Checked(sql, [], [], []), now, [("user",)], 100, 2000)[1].rows
        assert all(r[0] == "user/1" for r in rows), (sql, rows)
    # the views believe the settings only with the runner's signature
    with filled.store.session() as s:
        s.run("SELECT set_config('memlane.scope', 'user', true), set_config('memlane.now', ?, true)", (now,))
        assert s.rows("SELECT count(*) FROM memory_v1.items")[0][0] == 0


def test_postgres_without_the_role_queries_still_run_read_only(request, backend):
    """A database owned by a login role that may not use memlane_query: the fence still holds, and says so."""
    if backend != "postgres":
        pytest.skip("a PostgreSQL role")
    from urllib.parse import urlsplit, urlunsplit

    server = request.getfixturevalue("postgres")
    server.execute("DO $$ BEGIN CREATE ROLE memlane_plain LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    url = server.create(owner="memlane_plain")
    parts = urlsplit(url)
    plain = urlunsplit(parts._replace(netloc=parts.netloc.replace("postgres:", "memlane_plain:", 1)))
    try:
        with memlane.open(plain, embedder=None) as m:
            m.put("a", "k", "v")
            _plant_reserved(m, "x", '"hidden"')
            result = m.query("SELECT namespace, key FROM items")
            assert result.rows == [["a", "k"]]
            assert any("memlane_query" in n for n in result.notes)
            runner = run.runner(m)
            assert not runner.role
            with pytest.raises(QueryRefused):  # a cursor runs only a SELECT
                runner.run(fence.Checked("DELETE FROM public.items", [], [], []), "2026", None, 10, 2000)
            with pytest.raises(QueryRefused) as e:
                runner.run(fence.Checked("SELECT nextval('public.items_ref_seq')", [], [], []), "2026", None, 10, 2000)
            assert e.value.reason == "guard", str(e.value)  # the READ ONLY transaction
            assert m.get("a", "k") is not None
    finally:
        server.drop(url)


def test_a_namespace_named_like_a_wildcard_is_just_a_namespace(mem):
    acc = Access(mem)
    acc.create_agent("carol")
    mem.put("*", "k", "in the namespace named *")
    mem.put("other", "k", "elsewhere")
    acc.grant("carol", "*", "read")
    carol = acc.view(acc.agent("carol"))
    assert carol.query("SELECT namespace FROM items ORDER BY namespace").rows == [["*"]]


def test_postgres_queries_run_as_the_read_only_role(filled, backend):
    if backend != "postgres":
        pytest.skip("a PostgreSQL role")
    runner = run.runner(filled)
    assert isinstance(runner, qrunner.PostgresRunner) and runner.role
    got = runner.run(fence.Checked("SELECT current_user, current_setting('transaction_read_only')", [], [], []),
                     "2026", None, 10, 2000)[1].rows  # fmt: skip
    assert got == [[space.QUERY_ROLE, "on"]]


# -- visibility: another agent's rows are out of reach ---------------------------------------


@pytest.fixture
def agents(mem):
    """alice and bob with items, entities, facts, documents and claims of their own; a shared room."""
    acc = Access(mem)
    acc.create_agent("alice")
    acc.create_agent("bob")
    acc.create_room("eng")
    acc.add_member("eng", "alice")
    mem.put("agent/alice", "notes.plan", "alice plans the orchid launch")
    mem.put("agent/bob", "notes.plan", "bob plans the orchid heist")
    mem.put("agent/bob", "notes.plan", "bob plans the orchid heist, v2")
    mem.put("room/eng", "digest", "eng digest about orchids")
    mem.put("agent/alice-corp", "notes.plan", "a look-alike namespace about orchids")
    bob_person = mem.add_entity("agent/bob", "Mallory", kind="person", aliases=["M."])
    alice_person = mem.add_entity("agent/alice", "Carol", kind="person")
    # a fact of alice's whose object is bob's entity (written by the owner)
    mem.assert_fact("agent/alice", alice_person.id, "knows", bob_person.id)
    mem.assert_fact("agent/bob", bob_person.id, "secretly_owns", "the orchid farm")
    doc = mem.add_document("agent/bob", "Bob's diary", "The orchid heist is on Friday.")
    mem.add_claim("agent/bob", "the orchid heist is on Friday", speaker="Bob", about=[bob_person.id])
    mem.add_claim("agent/alice", "orchids need light", speaker="Alice", about=[bob_person.id])
    del doc
    bob = acc.view(acc.agent("bob"))
    bob.save_query("mine", "SELECT namespace, key, value FROM items ORDER BY namespace, key")
    return acc


REACHES = [
    "SELECT namespace, key, value, text FROM items",
    "SELECT namespace FROM item_history",
    "SELECT namespace FROM namespaces",
    "SELECT namespace, name FROM entities",
    "SELECT namespace, alias FROM entity_aliases",
    "SELECT namespace, subject_name, object_name, object_value FROM facts",
    "SELECT namespace FROM facts_current",
    "SELECT namespace, source FROM evidence",
    "SELECT namespace, title FROM documents",
    "SELECT namespace, chunk_text FROM chunks",
    "SELECT namespace, claim_text FROM claims",
    "SELECT namespace FROM claims_live",
    "SELECT namespace, entity_id FROM claim_entities",
    # joins, subqueries, set operations, recursion and functions
    "SELECT a.namespace FROM items a JOIN items b ON b.key = a.key",
    "SELECT namespace FROM items WHERE key IN (SELECT key FROM items WHERE namespace = 'agent/bob')",
    "SELECT (SELECT group_concat(text, ',') FROM items WHERE namespace LIKE 'agent/bob%') AS namespace",
    "SELECT namespace FROM items UNION SELECT namespace FROM entities UNION SELECT namespace FROM claims",
    "WITH RECURSIVE r(namespace, n) AS (SELECT namespace, 1 FROM items UNION ALL "
    "SELECT namespace, n + 1 FROM r WHERE n < 3) SELECT DISTINCT namespace FROM r",
    "SELECT namespace FROM items WHERE text_match(text, 'orchid heist')",
    "SELECT namespace FROM claims WHERE text_match(claim_text, 'heist friday')",
    "SELECT namespace FROM chunks WHERE text_match(chunk_text, 'heist')",
    "SELECT namespace FROM facts WHERE text_match(fact_text, 'farm')",
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM items WHERE namespace = 'agent/bob') THEN 'agent/bob' END AS namespace",
]


def _leaks(rows: list[list[Any]]) -> list[Any]:
    text = json.dumps(rows)
    return [w for w in ("agent/bob", "heist", "Mallory", "M.", "farm", "diary", "_memlane", "alice-corp") if w in text]


@pytest.mark.parametrize("sql", REACHES, ids=[_id(sql) for sql in REACHES])
def test_an_agent_cannot_reach_another_agents_rows(mem, agents, sql):
    alice = agents.view(agents.agent("alice"))
    result = alice.query(sql, max_rows=1000)
    assert _leaks(result.rows) == [], (sql, result.rows)


def test_what_an_agent_sees_is_exactly_its_scope(mem, agents):
    alice = agents.view(agents.agent("alice"))
    items = alice.query("SELECT namespace, key FROM items ORDER BY namespace").rows
    assert items == [["agent/alice", "notes.plan"], ["room/eng", "digest"]]
    # alice's own fact names bob's entity: the id is opaque, the name stays hidden
    fact = alice.query("SELECT subject_name, predicate, object_id IS NOT NULL, object_name FROM facts").rows
    assert fact[0][0] == "Carol" and fact[0][1] == "knows" and fact[0][3] is None
    # bob's saved query runs with alice's eyes
    assert alice.run_saved_query("mine").rows == [
        ["agent/alice", "notes.plan", '"alice plans the orchid launch"'],
        ["room/eng", "digest", '"eng digest about orchids"'],
    ]
    with pytest.raises(memlane.ForbiddenError, match="bob"):
        alice.save_query("mine", "SELECT 1")
    bob = agents.view(agents.agent("bob"))
    assert bob.query("SELECT count(*) FROM claims WHERE text_match(claim_text, 'heist')").rows == [[1]]
    assert bob.query("SELECT name FROM entities").rows == [["Mallory"]]
    admin = agents.view(agents.create_agent("root", admin=True)[0])
    seen = {r[0] for r in admin.query("SELECT DISTINCT namespace FROM items").rows}
    assert "agent/bob" in seen and not any(ns.startswith("_memlane") for ns in seen)


def test_through_the_live_service_an_agent_sees_only_its_rows(tmp_path: Path):
    from live import LiveServer
    from memlane.server import create_app

    mem = memlane.open(str(tmp_path / "svc.db"), embedder="fake")
    acc = Access(mem)
    _, alice_token = acc.create_agent("alice")
    acc.create_agent("bob")
    mem.put("agent/alice", "k", "alice orchid")
    mem.put("agent/bob", "k", "bob orchid heist")
    server = LiveServer(create_app(mem))
    try:
        with memlane.Client(server.url, alice_token) as alice:
            assert alice.query("SELECT namespace, key FROM items").rows == [["agent/alice", "k"]]
            for sql in REACHES:
                assert _leaks(alice.query(sql).rows) == [], sql
            with pytest.raises(QueryRefused, match="DELETE"):
                alice.query("DELETE FROM items")
            refused = alice.explain_query("SELECT * FROM sqlite_master")
            assert not refused.valid and refused.reason == "unknown_view"
        import httpx

        with httpx.Client(base_url=server.url, timeout=30) as http:
            body = {"sql": "SELECT namespace FROM items"}
            assert http.post("/v1/query", json=body).status_code == 401  # no token: nothing runs
            auth = {"Authorization": f"Bearer {alice_token}"}
            got = http.post("/v1/query", json=body, headers=auth)
            assert got.status_code == 200 and got.json()["rows"] == [["agent/alice"]]
            bad = http.post("/v1/query", json={"sql": "DROP TABLE items"}, headers=auth)
            assert bad.status_code == 400 and bad.json()["error"]["type"] == "query_refused"
            assert (
                set(bad.json()["error"]) == {"type", "message", "reason", "part"}
                and "DROP" in bad.json()["error"]["message"]
            )
            space_get = http.get("/v1/query/space", headers=auth).json()
            assert space_get["schema"] == "memory_v1" and space_get["dialect"] == "sqlite"
            ops = {op["name"] for op in http.get("/v1/operations").json()["operations"]}
            assert {"query", "query/explain", "query/space", "query/space/search", "query/save", "query/run"} <= ops
        assert mem.get("agent/bob", "k").value == "bob orchid heist"
    finally:
        server.stop()
        mem.close()
