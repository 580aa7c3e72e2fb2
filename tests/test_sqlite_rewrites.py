"""The SQLite store's code rewritten for #35 and #37, where its mutants showed nothing guarded it: a full disk's
message, the common-word cut at its exact share, the filtered vector search past its window, a scoped claim of
the indexer's marks, and import's record numbers beside facts records."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import memlane
from memlane.store import sqlite as sqlite_store
from memlane.store.sqlite import COMMON_SHARE, disk_full_message


def test_a_full_disks_message_names_the_folder_and_its_free_space(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    message = disk_full_message(path, sqlite3.OperationalError("database or disk is full"))
    free = re.search(r"the disk holding '(.*)': ([\d,]+) bytes free there;", message)
    assert free is not None and free.group(1) == str(tmp_path), message
    assert abs(int(free.group(2).replace(",", "")) - shutil.disk_usage(tmp_path).free) < 1 << 30
    assert "SQLite: database or disk is full" in message and repr(path) in message


def test_a_full_memory_stores_message_names_no_disk() -> None:
    message = disk_full_message(":memory:", sqlite3.OperationalError("database or disk is full"))
    assert "the disk holding 'memory': no room left;" in message


@pytest.fixture
def plain(tmp_path: Path) -> Any:
    mem = memlane.open(str(tmp_path / "m.db"), embedder=None)
    yield mem
    mem.close()


def test_a_word_in_exactly_its_common_share_of_the_rows_is_common(plain: Any) -> None:
    # rows 1..10; "alpha" in all but row 9: its first 9 matches reach row 10, a share of exactly COMMON_SHARE
    for i in range(1, 11):
        plain.put("docs", f"k{i}", "beta gamma" if i == 9 else "alpha gamma")
    store = plain.store
    with store._lock:
        assert 9 == COMMON_SHARE * 10
        assert store._bounded(["alpha"], 9) == (["alpha"], True)  # every term common: all ranked, flagged
        assert store._bounded(["alpha"], 10) == (["alpha"], False)  # fewer matches than the cap: rare
        assert store._bounded(["alpha", "beta"], 9) == (["beta"], False)  # the rare one only


@pytest.fixture
def many(tmp_path: Path) -> Any:
    mem = memlane.open(str(tmp_path / "v.db"), embedder="fake", indexing="sync")
    rows = [
        {"namespace": ("many", f"n{i % 2}"), "key": f"k{i:04}", "value": {"text": f"rocket {i}", "kind": str(i % 3)}}
        for i in range(sqlite_store._FILTER_WINDOW + 200)
    ]
    mem.put_many(rows)
    yield mem
    mem.close()


def test_a_filtered_vector_search_over_more_vectors_than_its_window_keeps_the_best_that_match(many: Any) -> None:
    for where, prefix in (({"kind": "1"}, ()), ({"kind": "2"}, ("many", "n0")), ({"kind": "9"}, ())):
        env = many.search("rocket 7", limit=5, channels=["vector"], where=where, namespace_prefix=prefix)
        every = many.search("rocket 7", limit=1000, channels=["vector"], namespace_prefix=prefix)
        best = [h.similarity for h in every.hits if h.item.value["kind"] == where["kind"]][:5]
        assert all(h.item.value["kind"] == where["kind"] for h in env.hits)
        assert [h.similarity for h in env.hits] == best, where  # the best that match (ties in any order)
        assert len(best) == (0 if where["kind"] == "9" else 5)


def test_a_scoped_claim_takes_only_the_marks_inside_it(tmp_path: Path) -> None:
    mem = memlane.open(str(tmp_path / "i.db"), embedder="fake", indexing="external")
    try:
        mem.put("a/x", "k1", "first")
        mem.put("b/y", "k2", "second")
        claimed = mem.store.claim_pending(10, "me", 60.0, within=[("b",)])
        assert [text for _, _, text, _ in claimed] == ["second"]
        assert mem.store.claim_pending(10, "me", 60.0, within=[("b",)]) == []  # leased now
        assert [text for _, _, text, _ in mem.store.claim_pending(10, "me", 60.0)] == ["first"]
    finally:
        mem.close()


def test_a_bad_item_record_after_a_facts_record_is_named_by_its_place_in_the_input(tmp_path: Path) -> None:
    src = memlane.open(str(tmp_path / "a.db"), embedder=None)
    dst = memlane.open(str(tmp_path / "b.db"), embedder=None)
    try:
        src.add_entity(("people",), "Kim")
        src.put("docs", "k", "v")
        records = list(src.export_records())
        facts = [r for r in records if r["record"] not in ("item", "version")]
        (item,) = [r for r in records if r["record"] == "item"]
        assert facts
        bad = dict(item, version=True)
        with pytest.raises(memlane.ValidationError, match=rf"record {len(facts) + 1}: "):
            dst.import_records([*facts, bad])
    finally:
        src.close()
        dst.close()


# A directory this process cannot write: simulated, as the tests may run as root (who can write anywhere)


def test_in_a_directory_it_cannot_write_a_file_is_writable_only_with_both_sidecars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "m.db")
    memlane.open(path, embedder=None).close()
    monkeypatch.setattr(sqlite_store, "_dir_writable", lambda _path: False)
    for name in ("m.db-wal", "m.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    assert sqlite_store.read_only_reason(path) == "its directory is not writable"
    (tmp_path / "m.db-wal").touch()
    assert sqlite_store.read_only_reason(path) == "its directory is not writable"  # no -shm to map
    (tmp_path / "m.db-shm").touch()
    assert sqlite_store.read_only_reason(path) is None  # both there and writable: SQLite needs no new file


def test_a_read_only_store_in_a_directory_it_cannot_write_is_immutable_only_without_a_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "m.db")
    with memlane.open(path, embedder=None) as mem:
        mem.put("docs", "k", "v")
    with memlane.open(path, embedder=None, read_only=True) as mem:
        store: Any = mem.store
        assert not store._ro_uri().endswith("&immutable=1")  # the directory is writable
        monkeypatch.setattr(sqlite_store, "_dir_writable", lambda _path: False)
        for name in ("m.db-wal", "m.db-shm"):
            (tmp_path / name).unlink(missing_ok=True)
        assert store._ro_uri().endswith("?mode=ro&immutable=1")
        (tmp_path / "m.db-wal").touch()
        assert store._ro_uri().endswith("?mode=ro&immutable=1")  # a WAL index it cannot make
        (tmp_path / "m.db-shm").touch()
        assert store._ro_uri().endswith("?mode=ro")  # both there: a WAL someone may be writing is read
