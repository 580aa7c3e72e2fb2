"""SQLite-only behaviour: concurrency between processes, crash safety, the file itself."""

from __future__ import annotations

import os
import queue
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

import memlane
from memlane import SchemaVersionError, StoreError


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


WRITER = """
import sys, memlane
path, tag = sys.argv[1], sys.argv[2]
with memlane.open(path, embedder=None) as mem:
    print("ready", flush=True)
    sys.stdin = None
    for i in range(2000):
        mem.put(("writer", tag), f"item.{i}", {"i": i, "tag": tag})
"""


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "shared.db")
    memlane.open(path, embedder=None).close()  # create the schema first, like a deployed store
    procs = [_python(WRITER, path, tag) for tag in ("a", "b")]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    with memlane.open(path, embedder=None) as mem:
        assert mem.stats().active_items == 4000
        for tag in ("a", "b"):
            page = mem.list(("writer", tag), limit=5000)
            assert sorted(i.value["i"] for i in page.items) == list(range(2000))


def _line(proc: subprocess.Popen[str], timeout: float = 240) -> str:
    """The child's next line on stdout; a generous bound only so that a broken child fails instead of hanging."""
    assert proc.stdout is not None
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: got.put(proc.stdout.readline()), daemon=True).start()  # type: ignore[union-attr]
    try:
        return got.get(timeout=timeout)
    except queue.Empty:
        proc.kill()
        pytest.fail(f"no line from the child in {timeout} s")


KILLED = """
import os, sys, time, memlane
from memlane.store import sqlite as backend
path, stop = sys.argv[1], sys.argv[2]
mem = memlane.open(path, embedder=None)
mem.put_many([{"namespace": "before", "key": f"k{i}", "value": i} for i in range(100)])
wal = path + "-wal"
committed_wal = os.path.getsize(wal)
original = backend.SqliteStore._put_segment
def held(self, conn, *a, **kw):
    out = original(self, conn, *a, **kw)
    if stop == "mid-transaction":
        # inside put_many's one transaction, its first segment written, COMMIT not reached: say so and
        # wait for the SIGKILL (should it never come, exit without committing)
        written = conn.execute("SELECT count(*) FROM items WHERE namespace = 'batch'").fetchone()[0]
        print("written", written, int(conn.in_transaction), committed_wal, os.path.getsize(wal), flush=True)
        time.sleep(600)
        os._exit(3)
    return out
backend.SqliteStore._put_segment = held
# the repeated address splits the batch into segments inside ONE transaction
records = [{"namespace": "batch", "key": f"k{i}", "value": "x" * 200} for i in range(60000)]
records += [{"namespace": "batch", "key": "k0", "value": "again"}] * 3
mem.put_many(records)
print("committed", flush=True)
time.sleep(600)  # put_many returned: the SIGKILL lands after the commit, before any close
os._exit(3)
"""


def _kill_during_put_many(path: str, stop: str) -> str:
    """Run :data:`KILLED` until it reports reaching ``stop``, SIGKILL it there; the line it reported."""
    proc = _python(KILLED, path, stop)
    try:
        line = _line(proc)
        assert line.strip(), proc.stderr.read() if proc.stderr else ""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        return line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _check_file(path: str) -> None:
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    raw.execute("INSERT INTO items_fts (items_fts) VALUES ('integrity-check')")
    raw.close()


def test_sigkill_mid_put_many_leaves_file_consistent(tmp_path):
    path = str(tmp_path / "crash.db")
    word, written, in_transaction, committed_wal, wal = _kill_during_put_many(path, "mid-transaction").split()
    # the kill provably landed inside the transaction, its rows written and spilled into the WAL, uncommitted
    assert (word, int(written), int(in_transaction)) == ("written", 60000, 1)
    assert int(wal) > int(committed_wal) + 1_000_000, "the batch should reach the WAL before COMMIT"
    _check_file(path)
    with memlane.open(path, embedder=None) as mem:
        assert len(mem.list("before", limit=1000).items) == 100
        assert mem.list("batch").items == []
        assert mem.search("x" * 200, channels=["lexical"]).hits == []
        mem.put("after", "k", "writable")
        assert mem.get("after", "k").value == "writable"


def test_sigkill_right_after_put_many_commits_keeps_the_whole_batch(tmp_path):
    path = str(tmp_path / "crash.db")
    assert _kill_during_put_many(path, "after-commit").strip() == "committed"
    _check_file(path)
    with memlane.open(path, embedder=None) as mem:
        assert len(mem.list("before", limit=1000).items) == 100
        assert mem.stats().active_items == 60100
        assert mem.get("batch", "k0").value == "again"  # the later segments, in the same transaction
        assert mem.get("batch", "k59999").value == "x" * 200
        assert mem.search("x" * 200, channels=["lexical"]).hits
        mem.put("after", "k", "writable")
        assert mem.get("after", "k").value == "writable"


def test_wal_and_busy_timeout(tmp_path):
    with memlane.open(str(tmp_path / "m.db")) as mem:
        conn = mem.store.connection  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000


def test_migrations_are_recorded_and_newer_schema_refused(tmp_path):
    path = str(tmp_path / "m.db")
    with memlane.open(path) as mem:
        applied = [name for name, _ in mem.store.migrations()]  # type: ignore[attr-defined]
        assert applied == list(mem.store.migration_names) and applied[:2] == ["m001_initial", "m002_vectors"]
    raw = sqlite3.connect(path)
    raw.execute("INSERT INTO _memlane_migrations VALUES ('m999_future', '2030-01-01')")
    raw.commit()
    raw.close()
    with pytest.raises(SchemaVersionError, match="upgrade memlane"):
        memlane.open(path)


def test_not_a_database_is_a_clear_error(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("this is not sqlite " * 100)
    with pytest.raises(StoreError, match="notes.txt"):
        memlane.open(str(path))
    assert path.read_text().startswith("this is not sqlite")


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        memlane.open(str(tmp_path / "nope" / "m.db"))


def test_urls_and_default_path(tmp_path, monkeypatch):
    with memlane.open(f"sqlite:///{tmp_path}/u.db") as mem:
        mem.put("a", "k", 1)
    assert (tmp_path / "u.db").exists()
    monkeypatch.setenv("MEMLANE_DB", str(tmp_path / "env.db"))
    with memlane.open() as mem:
        mem.put("a", "k", 1)
    assert (tmp_path / "env.db").exists()
    monkeypatch.delenv("MEMLANE_DB")
    monkeypatch.chdir(tmp_path)
    with memlane.open() as mem:
        assert mem.store.location == "memlane.db"
    with pytest.raises(memlane.BackendUnavailableError):
        memlane.open("mysql://x")


def test_closed_memory_refuses_work(tmp_path):
    mem = memlane.open(str(tmp_path / "m.db"))
    mem.close()
    mem.close()
    with pytest.raises(StoreError, match="closed"):
        mem.get("a", "k")


def test_threads_share_one_memory(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    with memlane.open(str(tmp_path / "m.db"), embedder="fake") as mem:

        def work(t: int) -> None:
            for i in range(200):
                mem.put(("t", str(t)), f"k{i}", i)
                assert mem.get(("t", str(t)), f"k{i}").value == i

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(work, range(4)))
        assert mem.stats().active_items == 800


def test_a_scoped_fetch_of_a_key_many_namespaces_hold_reads_the_scope_and_answers_the_same(tmp_path, monkeypatch):
    """A key in 1,200 namespaces, fetched inside one: the (namespace, key) range serves it, same answer."""
    from datetime import UTC, datetime, timedelta

    from memlane.store import sqlite as store_module

    now = [datetime(2026, 3, 1, tzinfo=UTC)]
    with memlane.open(str(tmp_path / "f.db"), embedder=None, clock=lambda: now[0]) as mem:
        mem.put_many([{"namespace": ("users", f"u{i:04d}"), "key": "profile", "value": i} for i in range(1200)])
        inside = [("users", "u0007"), ("users", "u0007", "a"), ("users", "u0007", "b"), ("users", "u0007", "c")]
        for n, ns in enumerate(inside):  # newer, each one second apart; one expires
            now[0] += timedelta(seconds=1)
            mem.put(ns, "profile", f"inside {n}", ttl=0.5 if n == 2 else None)
        now[0] += timedelta(seconds=1)
        mem.put(("users", "u0007-old"), "profile", "a look-alike name, outside the scope")
        mem.put(("users", "u0007"), "other", "another key, same scope")
        chosen = []
        real = store_module.SqliteStore._fetch_by_namespace
        monkeypatch.setattr(
            store_module.SqliteStore,
            "_fetch_by_namespace",
            staticmethod(lambda *a: chosen.append(real(*a)) or chosen[-1]),
        )
        statements: list[str] = []
        mem.store._conn.set_trace_callback(statements.append)
        got = mem.fetch("profile", namespace_prefix=("users", "u0007"), limit=10)
        mem.store._conn.set_trace_callback(None)
        everywhere = mem.fetch("profile", limit=3)
        monkeypatch.undo()
        (read,) = [s for s in statements if "ORDER BY updated_at DESC" in s]  # with its parameters, as run
        plan = " ".join(r[3] for r in mem.store._conn.execute("EXPLAIN QUERY PLAN " + read).fetchall())
        assert "items_key" not in plan and "(namespace>? AND namespace<?)" in plan, plan  # the scope's range
        assert isinstance(store_module.SqliteStore.__dict__["_fetch_by_namespace"], staticmethod)  # as it was
        assert chosen == [True]  # the common key, the small scope: the namespace range
        assert [(i.namespace, i.value) for i in got] == [
            (("users", "u0007", "c"), "inside 3"),  # newest first; b expired
            (("users", "u0007", "a"), "inside 1"),
            (("users", "u0007"), "inside 0"),
        ]
        assert [i.value for i in everywhere] == ["a look-alike name, outside the scope", "inside 3", "inside 1"]


def test_checkpoints_run_beside_the_writers_and_stop_with_the_store(tmp_path):
    from memlane.store.sqlite import CHECKPOINT_BACKSTOP_PAGES

    path = str(tmp_path / "c.db")
    with memlane.open(path, embedder=None) as mem:
        store = mem.store
        checkpointer = store._checkpointer
        assert checkpointer is not None and checkpointer._thread is None  # no write yet, no thread
        # the commit checkpoints only as a backstop, far past SQLite's 1,000 pages
        assert store.connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == CHECKPOINT_BACKSTOP_PAGES
        mem.put_many([{"namespace": "c", "key": f"k{i}", "value": "x" * 2000} for i in range(300)])
        assert checkpointer.ran.wait(30)
        busy, frames, copied = checkpointer.last  # type: ignore[misc]
        assert busy == 0 and frames > 100 and copied == frames  # the thread copied every page of the write
        thread = checkpointer._thread
        assert thread is not None and thread.is_alive() and thread.name == f"memlane-checkpoint {path}"
    assert not thread.is_alive()  # close() ended it
    assert not os.path.exists(path + "-wal")  # and the last close checkpointed and removed the WAL, as before
    with memlane.open(path, embedder=None) as again:
        assert again.stats().active_items == 300
    with memlane.open(path, embedder=None, read_only=True) as reader:
        assert reader.store._checkpointer is None  # a read-only store never checkpoints


def test_an_in_memory_store_runs_no_checkpoint_thread():
    with memlane.open(":memory:", embedder=None) as mem:
        mem.put("a", "k", 1)
        assert mem.store._checkpointer is None


@pytest.mark.parametrize("long_backlog", [1, 10**9])
def test_marks_in_a_scope_are_counted_alike_from_either_side(tmp_path, monkeypatch, long_backlog):
    """Marks first for a short backlog, the scope's rows first for a long one: the same counts, look-alike
    namespaces (``a-b``, ``a0`` beside ``a``) left out either way."""
    from memlane.store import sqlite as store_module

    monkeypatch.setattr(store_module, "_LONG_BACKLOG", long_backlog)
    namespaces = [("a",), ("a", "x"), ("a-b",), ("a0",), ("b",), ("b", "a")]
    with memlane.open(str(tmp_path / "p.db"), embedder="fake", indexing="external") as mem:  # marks stay
        mem.put_many(
            [
                {"namespace": ns, "key": f"k{i}", "value": f"note {i}", "index": i % 3 != 0}  # a third: no mark
                for ns in namespaces
                for i in range(6)
            ]
        )
        for scope in ([("a",)], [("a", "x")], [("a-b",), ("b",)], [("a0",), ("b", "a"), ("c",)], [()]):
            inside = [ns for ns in namespaces if any(ns[: len(p)] == p for p in scope)]
            assert mem.store.count_pending(scope) == 4 * len(inside), scope
