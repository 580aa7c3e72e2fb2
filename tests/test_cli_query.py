"""``memlane query``: SQL over the memory_v1 views from the shell, with tables, JSON, CSV and saved queries."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

import memlane
from test_cli import ok, run


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    db = tmp_path / "memory.db"
    with memlane.open(str(db), embedder=None) as mem:
        mem.put("user/1", "preferences.ui.theme", "dark")
        mem.put("user/2", "preferences.ui.theme", "light")
        mem.put("room/eng", "notes.standup", 'said "hi", then left')
    return db


def test_query_prints_a_table_by_default(filled: Path) -> None:
    result = ok(filled, "query", "SELECT namespace, key FROM items ORDER BY namespace")
    lines = [line.split() for line in result.stdout.splitlines() if line.strip() and "─" not in line]
    assert lines[0] == ["namespace", "key"]
    assert lines[1:] == [
        ["room/eng", "notes.standup"],
        ["user/1", "preferences.ui.theme"],
        ["user/2", "preferences.ui.theme"],
    ]
    assert "3 row(s)" in result.stderr


def test_query_json_and_csv(filled: Path) -> None:
    out = json.loads(ok(filled, "query", "SELECT key, version FROM items WHERE namespace = 'user/1'", "--json").stdout)
    assert out["columns"] == ["key", "version"] and out["rows"] == [["preferences.ui.theme", 1]]
    assert out["truncated"] is False and out["limits"]["max_rows"] == 1000
    text = ok(filled, "query", "SELECT namespace, value FROM items ORDER BY namespace", "--csv").stdout
    assert list(csv.reader(io.StringIO(text))) == [
        ["namespace", "value"],
        ["room/eng", '"said \\"hi\\", then left"'],
        ["user/1", '"dark"'],
        ["user/2", '"light"'],
    ]


def test_query_parameters_named_and_positional(filled: Path) -> None:
    named = ok(filled, "query", "SELECT namespace FROM items WHERE namespace = :ns", "-p", "ns=user/2", "--json")
    assert json.loads(named.stdout)["rows"] == [["user/2"]]
    positional = ok(filled, "query", "SELECT count(*) FROM items WHERE version = ?", "--param", "1", "--json")
    assert json.loads(positional.stdout)["rows"] == [[3]]


def test_query_row_cap_is_reported(filled: Path) -> None:
    result = ok(filled, "query", "SELECT key FROM items", "--max-rows", "1", "--json")
    out = json.loads(result.stdout)
    assert out["truncated_by"] == "max_rows" and len(out["rows"]) == 1
    table = ok(filled, "query", "SELECT key FROM items", "--max-rows", "1")
    assert "(--max-rows)" in table.stderr


def test_refused_statement_exits_2_with_the_reason(filled: Path) -> None:
    result = run(filled, "query", "DELETE FROM items")
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: query refused: ") and "DELETE" in result.stderr
    assert "Traceback" not in result.stderr
    with memlane.open(str(filled), embedder=None) as mem:
        assert len(mem.list().items) == 3


def test_explain_shows_validity_views_and_plan(filled: Path) -> None:
    result = ok(filled, "query", "--explain", "SELECT namespace, count(*) FROM items GROUP BY namespace")
    assert "valid" in result.stdout and "views: items" in result.stdout and "plan:" in result.stdout
    refused = run(filled, "query", "--explain", "SELECT * FROM sqlite_master")
    assert refused.exit_code == 2 and "sqlite_master" in refused.stderr
    out = json.loads(run(filled, "query", "--explain", "SELECT * FROM sqlite_master", "--json").stdout)
    assert out["valid"] is False and out["reason"] == "unknown_view"


def test_describe_lists_views_and_searches(filled: Path) -> None:
    text = ok(filled, "query", "describe").stdout
    assert "claims_live" in text and "claim_text" in text and "text_match" in text
    data = json.loads(ok(filled, "query", "describe", "--json").stdout)
    assert data["schema"] == "memory_v1" and data["dialect"] == "sqlite"
    found = json.loads(ok(filled, "query", "describe", "--search", "valid time", "--json").stdout)
    assert found[0]["view"] == "facts" and found[0]["column"] in ("valid_from", "valid_to")


def test_saved_queries_from_the_shell(filled: Path) -> None:
    saved = ok(
        filled, "query", "save", "themes", "SELECT namespace FROM items WHERE key = :key", "-d", "who likes what"
    )
    assert "themes" in saved.stdout and ":key" in saved.stdout
    listed = json.loads(ok(filled, "query", "saved", "--json").stdout)["queries"]  # the HTTP body
    assert [(q["name"], q["parameters"], q["description"]) for q in listed] == [("themes", [":key"], "who likes what")]
    rows = json.loads(ok(filled, "query", "run", "themes", "-p", "key=preferences.ui.theme", "--json").stdout)["rows"]
    assert rows == [["user/1"], ["user/2"]]
    refused = run(filled, "query", "save", "bad", "DROP TABLE items")
    assert refused.exit_code == 2 and "DROP" in refused.stderr
    ok(filled, "query", "delete", "themes")
    missing = run(filled, "query", "run", "themes")
    assert missing.exit_code == 1 and "no saved query named 'themes'" in missing.stderr


def test_statement_from_stdin(filled: Path) -> None:
    result = ok(filled, "query", "-", "--json", input="SELECT count(*) AS n FROM items\n")
    assert json.loads(result.stdout)["rows"] == [[3]]


def test_query_help_lists_the_subcommands() -> None:
    from typer.testing import CliRunner

    from memlane import cli

    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli.app, ["query", "--help"])
    assert result.exit_code == 0
    for sub in ("sql", "describe", "save", "run", "saved", "delete"):
        assert sub in result.stdout


def test_saved_queries_listing_shows_the_statement_and_a_query_without_parameters(filled: Path) -> None:
    sql = "SELECT namespace, key FROM items WHERE namespace LIKE 'user/%' ORDER BY key DESC"
    assert len(sql) == 80  # the longest the listing shows whole
    saved = ok(filled, "query", "save", "users", sql, "-d", "every user item")
    assert saved.stdout == "Saved query 'users' (no parameters)\n"
    listed = ok(filled, "query", "saved").stdout
    assert sql in listed and "every user item" in listed


def test_csv_writes_null_as_an_empty_cell_and_numbers_as_json(filled: Path) -> None:
    text = ok(
        filled,
        "query",
        "SELECT key, NULL AS empty, version, 1.5 AS half FROM items WHERE namespace = 'user/1'",
        "--csv",
    ).stdout
    assert list(csv.reader(io.StringIO(text))) == [
        ["key", "empty", "version", "half"],
        ["preferences.ui.theme", "", "1", "1.5"],
    ]


def test_parameters_may_come_before_the_statement_but_not_mixed(filled: Path) -> None:
    sql = "SELECT namespace FROM items WHERE key = :key ORDER BY namespace"
    before = ok(filled, "query", "-p", "key=preferences.ui.theme", sql, "--json").stdout
    assert json.loads(before)["rows"] == [["user/1"], ["user/2"]]
    # a value before the statement is the option's, even when it is a subcommand's name
    assert json.loads(ok(filled, "query", "-p", "saved", "SELECT ? AS word", "--json").stdout)["rows"] == [["saved"]]
    mixed = run(filled, "query", sql, "-p", "key=preferences.ui.theme", "-p", "dark")
    assert mixed.exit_code == 2 and "NAME=VALUE for every --param or bare values for every one" in mixed.stderr
