"""The ``memlane`` command line, driven as a user would against real SQLite files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from memlane import cli

# The console script installed beside the interpreter running the tests.
MEMLANE = Path(sys.executable).with_name("memlane")
if not MEMLANE.exists():
    MEMLANE = Path(shutil.which("memlane") or MEMLANE)


@pytest.fixture(autouse=True)
def _no_db_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMLANE_DB", raising=False)


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
    assert as_json(db, "stats")["active_items"] == 0


def test_read_validation_errors_exit_2(db: Path) -> None:
    assert_one_line_error(run(db, "list", "--limit", "0"), 2, "limit")
    assert_one_line_error(run(db, "list", "--cursor", "not-a-cursor"), 2, "cursor")
    assert_one_line_error(run(db, "get", "user//1", "k"), 2, "namespace")


def test_unsupported_backend_exits_1_without_echoing_the_url(db: Path) -> None:
    result = CliRunner().invoke(cli.app, ["stats", "--db", "postgresql://me:hunter2@host/db"])
    assert_one_line_error(result, 1, "PostgreSQL is not supported")
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
        if page["next_cursor"] is None:
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
    assert everything["next_cursor"] is None
    assert [i["key"] for i in as_json(db, "list", "user", "--key-prefix", "k4")["items"]] == ["k4"]


def test_list_empty(db: Path) -> None:
    assert ok(db, "list").stdout.strip() == "No items."


def test_fetch_across_namespaces_newest_first(db: Path) -> None:
    ok(db, "set", "user/1", "prefs.theme", "dark")
    ok(db, "set", "user/2", "prefs.theme", "light")
    ok(db, "set", "team/1", "prefs.theme", "blue")
    found = as_json(db, "fetch", "prefs.theme", "--prefix", "user")
    assert [(i["namespace"], i["value"]) for i in found] == [(["user", "2"], "light"), (["user", "1"], "dark")]
    assert len(as_json(db, "fetch", "prefs.theme", "--limit", "1")) == 1
    out = ok(db, "fetch", "prefs.theme").stdout
    assert out.index("blue") < out.index("light") < out.index("dark")


def test_namespaces(db: Path) -> None:
    ok(db, "set", "user/1/a", "k", "1")
    ok(db, "set", "user/2", "k", "1")
    ok(db, "set", "team/x", "k", "1")
    assert as_json(db, "namespaces") == [["team", "x"], ["user", "1", "a"], ["user", "2"]]
    assert as_json(db, "namespaces", "user", "--max-depth", "1") == [["user"]]
    out = ok(db, "namespaces", "user").stdout
    assert "user/1/a" in out and "user/2" in out and "team/x" not in out


def test_summarize_tree_and_json(db: Path) -> None:
    for key in ("prefs.ui.theme", "prefs.ui.font", "prefs.editor", "profile.name"):
        ok(db, "set", "user/1", key, "1")
    ok(db, "set", "user/2", "prefs.ui.theme", "1")
    assert as_json(db, "summarize", "user/1", "--depth", "1") == {"user/1": {"prefs": 3, "profile": 1}}
    assert as_json(db, "summarize", "--key-prefix", "prefs.ui", "--depth", "3") == {
        "user/1": {"prefs.ui.font": 1, "prefs.ui.theme": 1},
        "user/2": {"prefs.ui.theme": 1},
    }
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
    versions = as_json(db, "history", "user/1", "k")
    assert [(v["change"], v["value"], v["version"]) for v in versions] == [("delete", "b", 2), ("replace", "a", 1)]
    out = ok(db, "history", "user/1", "k").stdout
    assert out.index("delete") < out.index("replace")
    assert "No history for user/1 key 'none'." in ok(db, "history", "user/1", "none").stdout


def test_delete(db: Path) -> None:
    ok(db, "set", "user/1", "k", "v")
    assert as_json(db, "delete", "user/1", "k") == {"deleted": True, "namespace": "user/1", "key": "k"}
    assert run(db, "get", "user/1", "k").exit_code == 1
    assert_one_line_error(run(db, "delete", "user/1", "k"), 1, "no item at user/1 key 'k'")


def test_clear_requires_yes_when_not_interactive(db: Path) -> None:
    ok(db, "set", "user/1", "a", "1")
    ok(db, "set", "user/1/x", "b", "1")
    ok(db, "set", "user/2", "c", "1")
    assert_one_line_error(run(db, "clear", "user/1"), 2, "pass --yes")
    assert as_json(db, "stats")["active_items"] == 3
    assert as_json(db, "clear", "user/1", "--yes") == {"cleared": 2, "namespace_prefix": "user/1"}
    assert [i["key"] for i in as_json(db, "list")["items"]] == ["c"]
    assert ok(db, "clear", "user/2", "-y").stdout == "Cleared 1 item under user/2\n"


def test_clear_asks_when_interactive(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_interactive", lambda: True)
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
    first = next(line for line in rows if line.strip().startswith("1 "))
    assert "prefs.food" in first and "lexical:1" in first and "likes spicy noodles" in first


def test_search_snippet_is_truncated(db: Path) -> None:
    ok(db, "set", "user/1", "long", "needle " + "word " * 100)
    out = ok(db, "search", "needle").stdout
    assert "needle word" in out and "…" in out and "word " * 30 not in out


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
        "set", "note", "get", "fetch", "list", "delete", "clear", "cleanup", "stats",
        "namespaces", "summarize", "history", "search", "export", "import",
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
