"""Shared fixtures: a fake clock and a ``mem`` fixture parametrized over backends.

Tests under ``tests/conformance`` take only ``mem`` (and ``clock``), so the same
file runs against every backend that the parametrization lists.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import memlane


def fast_dir() -> str | None:
    """A folder in memory (``/dev/shm``) with room to spare, for the tests' files and PostgreSQL; else ``None``.

    The suite writes thousands of small databases, each synced to disk at every commit: on a shared or slow disk
    that wait was most of a PostgreSQL test's time (0.4 to 2 s to copy the template database, 0.1 s in memory).
    ``MEMLANE_TEST_TMP`` names another folder; ``MEMLANE_TEST_TMP=`` (empty) keeps the system's temporary folder.
    """
    chosen = os.environ.get("MEMLANE_TEST_TMP", "/dev/shm")
    if not chosen or not os.path.isdir(chosen) or not os.access(chosen, os.W_OK):
        return None
    if chosen == "/dev/shm":
        stats = os.statvfs(chosen)
        if stats.f_bavail * stats.f_frsize < 4 * 2**30:  # a container's 64 MiB /dev/shm: the disk it is
            return None
    return chosen


@pytest.hookimpl(tryfirst=True)  # before pytest's own tmp_path set-up reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    sys._called_from_test = True  # type: ignore[attr-defined]
    # tmp_path in memory: the controller of an xdist run (or a plain run) makes the folder, workers get a part of it
    if config.option.basetemp is None and not hasattr(config, "workerinput") and (where := fast_dir()):
        config.option.basetemp = tempfile.mkdtemp(prefix="memlane-tests-", dir=where)
        config.stash[_MADE_BASETEMP] = config.option.basetemp


_MADE_BASETEMP = pytest.StashKey[str]()


def pytest_unconfigure(config: pytest.Config) -> None:
    made = config.stash.get(_MADE_BASETEMP, None)
    if made:  # it is memory: not kept for the next run as pytest's own folders are
        shutil.rmtree(made, ignore_errors=True)


class FakeClock:
    """A settable clock: ``clock()`` returns ``clock.now``; ``advance`` moves it."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# "client": SQLite behind a live service; "async": AsyncMemory over SQLite; "async_client": AsyncClient to a
# service; "async_postgres": AsyncMemory over PostgreSQL (its exact reads on psycopg's async connections)
BACKENDS = ["sqlite", "postgres", "client", "async", "async_client", "async_postgres"]
SURFACES = ("client", "async", "async_client", "async_postgres")  # a surface over a memory, not a backend
ON_POSTGRES = ("postgres", "async_postgres")
# AsyncClient's every method is the Client's, run in a worker thread (memlane.aio, core/surface.py's off_loop): the
# `client` run drives that Client with the same arguments on every conformance file. `async_client` runs these files,
# whose tests call each of AsyncClient's 43 methods that the whole suite calls (recorded over every file on
# 2026-12-07: docs/testing.md, "How the suite runs"); the other files on it ran the same code a second time.
ASYNC_CLIENT_FILES = {
    f"tests/conformance/test_{name}.py" for name in ("ttl", "facts", "query", "unindexed", "reads", "limits")
}


class Blocking:
    """An async memlane object (AsyncMemory, AsyncClient) driven from a synchronous test, on its own loop.

    Each coroutine method becomes a call that waits for its answer; anything
    else (a property) is the async object's own. What the async class lacks
    is an AttributeError, as it would be for its users.
    """

    def __init__(self, target: Any) -> None:
        import asyncio
        import threading

        self.target = target
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def __getattr__(self, name: str) -> Any:
        import asyncio
        import inspect

        attr = getattr(self.target, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(attr(*args, **kwargs), self._loop).result()

        return call

    def stop(self) -> None:
        self.call_close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def call_close(self) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self.target.close(), self._loop).result()


class PostgresServer:
    """A PostgreSQL server for the test session: ``$MEMLANE_TEST_PG_URL`` or a pgserver one.

    pgserver (PyPI) bundles PostgreSQL 16 with pgvector and runs as root, so
    ``make test`` needs nothing installed by hand. Each test gets a fresh database.
    """

    def __init__(self, base_dir: str) -> None:
        import psycopg

        self._psycopg = psycopg
        self._server = None
        url = os.environ.get("MEMLANE_TEST_PG_URL")
        if not url:
            import pgserver

            self._server = pgserver.get_server(base_dir, cleanup_mode="stop")
            url = self._server.get_uri()
        self.admin_url = url
        self._count = 0

    def _url_for(self, dbname: str) -> str:
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(self.admin_url)
        return urlunsplit(parts._replace(path="/" + dbname))

    def create(self, owner: str | None = None) -> str:
        """A new empty database; copied from a migrated template unless it needs another owner."""
        self._count += 1
        name = f"memlane_test_{os.getpid()}_{self._count}"
        with self._psycopg.connect(self.admin_url, autocommit=True) as conn:
            if owner:
                conn.execute(f'CREATE DATABASE "{name}" OWNER "{owner}"')
            else:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self._template()}"')
        return self._url_for(name)

    def _template(self) -> str:
        # copying a migrated database is several times faster than migrating each one
        name = f"memlane_template_{os.getpid()}"
        if not getattr(self, "_template_ready", False):
            with self._psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
                conn.execute(f'CREATE DATABASE "{name}"')
            memlane.open(self._url_for(name), embedder=None).close()
            self._template_ready = True
        return name

    def drop(self, url: str) -> None:
        from urllib.parse import urlsplit

        name = urlsplit(url).path.lstrip("/")
        with self._psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def execute(self, sql: str) -> None:
        with self._psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    # not under pytest's tmp_path: pytest makes that 0700 and prunes old runs,
    # and pgserver's postgres process runs as another user
    base = tempfile.mkdtemp(prefix="memlane-pg-", dir=fast_dir())
    os.chmod(base, 0o755)
    server = PostgresServer(base)
    yield server
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The async surfaces run the conformance suite; other tests that take ``mem`` want a Memory or a Client.

    A conformance test that opens the store itself (no ``mem``) runs on ``sqlite`` and ``postgres`` only: on a
    surface it would open the same store the same way. Under pytest-xdist (``make test``) the slowest units of
    work come first, so that no worker is left with a long file at the end (:func:`_cost`).
    """
    keep, drop = [], []
    for item in items:
        param = getattr(getattr(item, "callspec", None), "params", {}).get("backend")
        if param in SURFACES and ("conformance" not in item.nodeid or "mem" not in item.fixturenames):
            drop.append(item)
        elif param == "async_client" and item.nodeid.partition("::")[0] not in ASYNC_CLIENT_FILES:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike, so their collections agree
        costs: dict[str, float] = {}
        for item in items:
            unit = work_unit(item.nodeid)
            costs[unit] = costs.get(unit, 0.0) + _cost(item.nodeid)
        items.sort(key=lambda item: -costs[work_unit(item.nodeid)])  # stable: a unit's tests keep their order


# How the suite is spread over pytest-xdist's workers (`make test`: -n auto --dist loadfile). A unit of work is a
# file, so a file's module fixtures (a browser, a service, fresh venvs) are made once; a conformance file is one
# unit per backend, as its backends share nothing. Seconds a test takes, roughly, for
# the files measured slow (docs/testing.md, "How the suite runs"); any other test counts 0.05 s. Measured on
# 2026-12-07 with -n 2 on a shared machine (seconds per test; the comment: tests, seconds in all).
SLOW_FILES: dict[str, float] = {
    "tests/test_cli_setup.py": 3.74,  # 82 tests, 307 s
    "tests/test_docs.py": 3.39,  # 67 tests, 227 s
    "tests/test_cli.py": 2.85,  # 76 tests, 217 s
    "tests/test_workers.py": 13.53,  # 15 tests, 203 s
    "tests/test_query_fence.py": 0.54,  # 201 tests, 108 s
    "tests/conformance/test_limits.py[async_postgres]": 5.35,  # 20 tests, 107 s
    "tests/test_service.py": 0.42,  # 248 tests, 104 s
    "tests/conformance/test_limits.py[postgres]": 3.77,  # 22 tests, 83 s
    "tests/test_scope_scale.py": 1.49,  # 53 tests, 79 s
    "tests/test_sharing.py": 2.23,  # 30 tests, 67 s
    "tests/conformance/test_validation.py[client]": 1.01,  # 54 tests, 55 s
    "tests/test_mcp.py": 4.31,  # 12 tests, 52 s
    "tests/test_embedder_onnx.py": 2.61,  # 18 tests, 47 s
    "tests/test_store.py": 0.56,  # 81 tests, 45 s
    "tests/test_first_hour.py": 1.81,  # 24 tests, 43 s
    "tests/test_architecture.py": 2.23,  # 16 tests, 36 s
    "tests/test_vector_scope.py": 2.47,  # 12 tests, 30 s
    "tests/test_postgres.py": 1.80,  # 16 tests, 29 s
    "tests/test_indexing.py": 0.92,  # 30 tests, 28 s
    "tests/conformance/test_limits.py[client]": 1.23,  # 20 tests, 25 s
    "tests/test_answers.py": 0.32,  # 70 tests, 23 s
    "tests/conformance/test_limits.py[async_client]": 1.12,  # 20 tests, 22 s
    "tests/test_sqlite.py": 1.46,  # 15 tests, 22 s
    "tests/test_rules_property.py": 3.58,  # 6 tests, 21 s
    "tests/test_search_rules.py": 0.37,  # 55 tests, 20 s
    "tests/conformance/test_retention.py[postgres]": 0.45,  # 45 tests, 20 s
    "tests/test_langgraph.py": 0.22,  # 88 tests, 20 s
    "tests/conformance/test_retention.py[client]": 0.43,  # 45 tests, 19 s
    "tests/test_boundary.py": 0.46,  # 42 tests, 19 s
    "tests/test_facts_rules.py": 0.14,  # 134 tests, 19 s
    "tests/conformance/test_retention.py[async_postgres]": 0.41,  # 45 tests, 18 s
    "tests/conformance/test_validation.py[postgres]": 0.32,  # 55 tests, 17 s
    "tests/conformance/test_items.py[client]": 0.42,  # 41 tests, 17 s
    "tests/test_text_once.py": 0.91,  # 18 tests, 16 s
    "tests/conformance/test_items.py[async_postgres]": 0.37,  # 41 tests, 15 s
    "tests/test_client_retry.py": 0.41,  # 37 tests, 15 s
    "tests/conformance/test_query.py[client]": 1.01,  # 15 tests, 15 s
    "tests/test_inspector.py": 2.50,  # 6 tests, 15 s
    "tests/test_async_memory.py": 1.34,  # 11 tests, 15 s
    "tests/conformance/test_validation.py[async_postgres]": 0.27,  # 54 tests, 15 s
    "tests/test_namespaces_speed.py": 3.61,  # 4 tests, 14 s
    "tests/test_mcp_budget.py": 0.50,  # 26 tests, 13 s
    "tests/conformance/test_items.py[postgres]": 0.30,  # 41 tests, 12 s
    "tests/test_cli_op.py": 0.93,  # 13 tests, 12 s
    "tests/test_validate.py": 0.03,  # 387 tests, 12 s
    "tests/conformance/test_facts.py[async_postgres]": 0.48,  # 25 tests, 12 s
    "tests/test_conversation.py": 0.18,  # 67 tests, 12 s
    "tests/conformance/test_facts.py[client]": 0.43,  # 25 tests, 11 s
    "tests/conformance/test_facts.py[async_client]": 0.43,  # 25 tests, 11 s
    "tests/test_access.py": 0.15,  # 69 tests, 11 s
    "tests/test_bench.py": 5.19,  # 2 tests, 10 s
    "tests/test_langgraph_guards.py": 0.23,  # 44 tests, 10 s
    "tests/conformance/test_facts.py[postgres]": 0.40,  # 25 tests, 10 s
    "tests/conformance/test_limits_property.py[postgres]": 1.12,  # 9 tests, 10 s
    "tests/conformance/test_reads.py[async_client]": 0.46,  # 21 tests, 10 s
    "tests/conformance/test_recall.py[postgres]": 0.44,  # 22 tests, 10 s
    "tests/conformance/test_recall.py[async_postgres]": 0.73,  # 13 tests, 10 s
    "tests/test_facts_lexical.py": 3.15,  # 3 tests, 9 s
    "tests/conformance/test_limits.py[sqlite]": 0.43,  # 22 tests, 9 s
    "tests/test_langgraph_rules.py": 0.45,  # 20 tests, 9 s
    "tests/conformance/test_reads.py[postgres]": 0.42,  # 21 tests, 9 s
    "tests/conformance/test_search.py[async_postgres]": 0.41,  # 21 tests, 9 s
    "tests/conformance/test_query.py[async_postgres]": 0.57,  # 15 tests, 9 s
    "tests/conformance/test_query.py[async_client]": 0.54,  # 15 tests, 8 s
    # files added after that measure, guessed from runs of each alone on the same shared machine
    "tests/test_faults.py": 12.0,  # 13 tests, services killed and databases cut
    "tests/test_serve_embedder.py": 10.0,  # 2 tests, each a memlane serve with 2 workers
    "tests/test_cli_remote.py": 1.5,  # 16 tests over a live service
    "tests/test_first_hour_again.py": 1.0,
    "tests/test_embedder_record.py": 1.0,
    "tests/test_relevance_calibrated.py": 1.0,
}


def work_unit(nodeid: str) -> str:
    """The unit of work ``nodeid`` belongs to: its file, or for a conformance test its file and backend."""
    path, _, rest = nodeid.partition("::")
    if path.startswith("tests/conformance/") and rest.endswith("]"):
        for part in rest[rest.index("[") + 1 : -1].split("-"):
            if part in BACKENDS:
                return f"{path}[{part}]"
    return path


def _cost(nodeid: str) -> float:
    path = nodeid.partition("::")[0]
    unit = work_unit(nodeid)
    return SLOW_FILES.get(unit, SLOW_FILES.get(path, 0.05))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with :func:`work_unit`'s units, in the order the workers collected them (slowest first)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False
    return Units(config, log)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Which backend a conformance test runs on; ``client`` is SQLite behind a live service."""
    if request.param in SURFACES and "mem" not in request.fixturenames:
        pytest.skip("opens the store directly; the sqlite run covers it")
    return str(request.param)


@pytest.fixture
def store_url(request: pytest.FixtureRequest, backend: str, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """The URL of a fresh, empty database on each backend."""
    if backend not in ON_POSTGRES:
        yield str(tmp_path / "memory.db")
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    url = server.create()
    yield url
    server.drop(url)


@pytest.fixture
def old_store_url(request: pytest.FixtureRequest, backend: str, tmp_path, monkeypatch) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A database as memlane left it before ``m010_text_once``, and the writers of then.

    While the test runs, memlane opens stores without ``m010_text_once`` and
    stores every item's text (as it did before it);
    the test calls ``monkeypatch.undo()`` to get today's memlane, which migrates it.
    """
    from memlane.store import _common, postgres, sqlite

    for module in (sqlite, postgres):
        # the facts layer of today needs its own later migrations (m011_chunk_context): only m010 is held back
        migrations = [m for m in module.MIGRATIONS if m[0] != "m010_text_once"]
        monkeypatch.setattr(module, "MIGRATIONS", migrations)
    monkeypatch.setattr(_common, "stored_text", lambda value_json, value_type, text: text)
    if backend not in ON_POSTGRES:
        yield str(tmp_path / "old.db")
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    server._count += 1
    name = f"memlane_old_{os.getpid()}_{server._count}"
    server.execute(f'CREATE DATABASE "{name}"')
    url = server._url_for(name)
    yield url
    server.drop(url)


@pytest.fixture
def mem(request: pytest.FixtureRequest, backend: str, store_url: str, clock: FakeClock) -> Iterator[Any]:
    """A fresh memory on each backend, driven by the fake clock.

    On ``client`` it is a :class:`memlane.Client` with an admin token, talking
    over loopback HTTP to a live service that holds the memory. Tests marked
    ``embedded`` reach past the public API and do not run there.

    Vectors are made before a write returns (``indexing="sync"``), so a test's
    vector results never depend on how fast a background indexer is; tests
    marked ``background_indexing`` get the default write-behind indexer instead.
    """
    indexing = "background" if request.node.get_closest_marker("background_indexing") else "sync"
    m = memlane.open(store_url, clock=clock, embedder="fake", indexing=indexing)
    if backend not in SURFACES:
        yield m
        m.close()
        return
    if request.node.get_closest_marker("embedded"):
        m.close()
        pytest.skip("reaches into the embedded store; not an operation of this surface")
    if backend in ("async", "async_postgres"):
        driven = Blocking(memlane.AsyncMemory(m))
        yield driven
        driven.stop()  # closes the memory
        return
    from live import LiveServer
    from memlane.core.access import Access
    from memlane.server import create_app

    _, token = Access(m).create_agent("tester", admin=True)
    server = LiveServer(create_app(m))
    if backend == "async_client":
        driven = Blocking(memlane.AsyncClient(server.url, token))
        yield driven
        driven.stop()
    else:
        client = memlane.Client(server.url, token)
        yield client
        client.close()
    server.stop()
    m.close()


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("MEMLANE_DB", raising=False)
    monkeypatch.delenv("MEMLANE_EMBEDDER", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def graph_corpus_template(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The 6,000-item corpus with its HNSW graph (tests/graphcorpus.py), built once per test process."""
    pytest.importorskip("usearch")
    import graphcorpus
    from memlane.store import vector_index as vi

    folder = str(tmp_path_factory.mktemp("graph-corpus"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vi, "GRAPH_MIN", graphcorpus.GRAPH_AT)
        graphcorpus.build(folder)
    return folder


@pytest.fixture
def graph_corpus(graph_corpus_template: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A copy of that corpus for one test, opened, with the graph asked at its size (``APPROX_MIN``)."""
    import graphcorpus
    from memlane.store import vector_index as vi

    monkeypatch.setattr(vi, "GRAPH_MIN", graphcorpus.GRAPH_AT)
    monkeypatch.setattr(vi, "APPROX_MIN", graphcorpus.GRAPH_AT)
    opened = graphcorpus.open_copy(graph_corpus_template, str(tmp_path))
    yield opened
    opened.mem.close()
