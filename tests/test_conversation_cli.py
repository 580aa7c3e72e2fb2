"""``memlane ingest FILE.jsonl``: a conversation from the command line, all or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memlane
from test_cli import as_json, assert_one_line_error, ok, run

LINES = [
    {"speaker": "Caroline", "text": "I went to the LGBTQ support group yesterday.", "at": "2023-05-08T13:56:00Z"},
    {"speaker": "Melanie", "text": "How did it feel?", "id": "m2"},
    {"role": "user", "text": "It was powerful."},
]


@pytest.fixture(autouse=True)
def _fake_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLANE_EMBEDDER", "fake")


def jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n\n")
    return path


def test_ingest_stores_one_item_per_line_and_continues_a_session(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    chat = jsonl(tmp_path / "chat.jsonl", LINES)
    out = ok(db, "ingest", str(chat), "--namespace", "user/1", "--session", "day1").stdout
    assert "Stored 3 turns in user/1 session 'day1': keys day1.t00001 .. day1.t00003" in " ".join(out.split())
    more = as_json(db, "ingest", "-", "--namespace", "user/1", "--session", "day1", input=json.dumps(LINES[1]) + "\n")
    assert [i["key"] for i in more["items"]] == ["day1.t00004"]
    with memlane.open(str(db), embedder=None) as m:
        first = m.get("user/1", "day1.t00001")
        assert first is not None and first.value["speaker"] == "Caroline"
        assert m.get("user/1", "day1.t00002").metadata == {"message_id": "m2"}  # type: ignore[union-attr]
        assert m.get("user/1", "day1.t00003").value["at"] is not None  # type: ignore[union-attr]
    hits = as_json(db, "search", "support group", "--prefix", "user/1", "--channels", "lexical")["hits"]
    assert {h["key"] for h in hits} >= {"day1.t00001", "day1.t00002"}


def test_a_bad_line_is_named_by_its_line_number_and_nothing_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    bad = jsonl(tmp_path / "bad.jsonl", [LINES[0], "", LINES[1], {"speaker": "x", "txt": "typo"}])
    result = run(db, "ingest", str(bad), "--namespace", "user/1")
    assert_one_line_error(result, 2, "line 4: ")
    assert "unknown fields ['txt']" in result.stderr and "nothing was stored" in result.stderr
    broken = jsonl(tmp_path / "broken.jsonl", [LINES[0], '{"speaker": "x", oops'])
    assert_one_line_error(run(db, "ingest", str(broken), "--namespace", "user/1"), 2, "line 2: not valid JSON")
    dated = jsonl(tmp_path / "dated.jsonl", [LINES[0], {"speaker": "x", "text": "y", "at": "yesterday"}])
    assert_one_line_error(run(db, "ingest", str(dated), "--namespace", "user/1"), 2, "line 2 (at): ")
    if db.exists():
        with memlane.open(str(db), embedder=None) as m:
            assert m.list("user/1").items == []


def test_ingest_needs_a_namespace_and_refuses_a_bad_session(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    chat = jsonl(tmp_path / "chat.jsonl", LINES)
    assert run(db, "ingest", str(chat)).exit_code == 2
    assert_one_line_error(run(db, "ingest", str(chat), "-n", "user/1", "--session", "a.b"), 2, "session: ")
