"""``memlane op NAME``: every operation of the table as a command, made from the table and Memory's signature.

Each prints the JSON the HTTP API answers for the same call, so a script can use the CLI and the service alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from starlette.testclient import TestClient
from typer.testing import CliRunner, Result

import memlane
from memlane import cli
from memlane.core.access import Access
from memlane.server import create_app
from memlane.values import operations


@pytest.fixture(autouse=True)
def _lexical(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMLANE_DB", raising=False)
    monkeypatch.setenv("MEMLANE_EMBEDDER", "fake")


def op(db: Path, name: str, *args: str) -> Result:
    return CliRunner(env={"COLUMNS": "200"}).invoke(cli.app, ["op", name, *args, "--db", str(db)])


def answer(db: Path, name: str, *args: str) -> Any:
    result = op(db, name, *args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def test_every_operation_is_a_command_with_the_wires_parameters() -> None:
    """Required parameters are arguments, in the core's order; the others are options; nothing more but --db,
    --embedder, --url and --token. A new operation of the table is a command here with nothing written for it."""
    for spec in operations.OPERATIONS:
        command = cli._operation_command(spec)
        arguments = [p.name for p in command.params if p.param_type_name == "argument"]
        options = {p.name for p in command.params if p.param_type_name == "option"}
        assert arguments == [p.name for p in spec.params() if p.required], spec.name
        assert options == {p.name for p in spec.params() if not p.required} | {"db", "embedder", "url", "token"}, (
            spec.name
        )
        assert command.help is not None and command.help.startswith(spec.summary)
        for param in command.params:
            meaning = spec.meaning(param.name) if param.name not in ("db", "embedder", "url", "token") else None
            if meaning is not None:
                assert meaning in (param.help or ""), (spec.name, param.name)


def test_the_commands_are_made_only_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's start-up builds none of the operations' commands (each costs Typer's conversion)."""
    made: list[str] = []
    real = cli.made._operation_command
    monkeypatch.setattr(cli.made, "_operation_command", lambda spec: made.append(spec.name) or real(spec))
    root = typer.main.get_command(cli.app)
    assert CliRunner().invoke(cli.app, ["--help"]).exit_code == 0 and made == []
    group = root.commands["op"]  # type: ignore[attr-defined]
    assert group.commands == {}
    assert group.list_commands(None) == [o.name for o in operations.OPERATIONS]
    assert group.get_command(None, "get-many").name == "get_many"
    assert made == ["get_many"]  # the one asked for
    assert group.get_command(None, "nope") is None


def test_what_a_command_prints_is_what_the_service_answers(tmp_path: Path) -> None:
    db = tmp_path / "op.db"
    put = answer(db, "put", "user/1", '{"theme": "dark"}', "--key", "prefs.ui")
    assert put["key"] == "prefs.ui" and put["value"] == {"theme": "dark"} and put["version"] == 1
    assert answer(db, "exists", "user/1", "prefs.ui") == {"exists": True}
    with memlane.open(db, embedder=None) as mem, TestClient(create_app(mem)) as http:
        token = Access(mem).create_agent("root", admin=True)[1]
        served = http.post(
            "/v1/get", json={"namespace": "user/1", "key": "prefs.ui"}, headers={"Authorization": f"Bearer {token}"}
        )
    expected = served.json()  # unset optional fields (author, expires_at) left out, as the service does
    assert "author" not in expected and answer(db, "get", "user/1", "prefs.ui") == expected
    many = answer(db, "get_many", '[["user/1", "prefs.ui"], ["user/1", "nothing"]]')
    assert many["items"][0] == expected and many["items"][1] is None
    shown = answer(db, "get_many", '[{"namespace": "user/1", "key": "prefs.ui"}]')  # the form --help shows
    assert shown["items"] == [expected]
    hits = answer(db, "search", "dark", "--limit", "3", "--channels", '["lexical"]', "--no-floor")
    assert [h["key"] for h in hits["hits"]] == ["prefs.ui"] and hits["params"]["channels"] == ["lexical"]
    note = answer(db, "put", "user/1", '"a note without a key"')
    assert note["key"] == note["id"]  # key left out: a note under a fresh id, as on the wire
    assert answer(db, "delete", "user/1", "prefs.ui") == {"deleted": True}


def test_a_read_never_creates_the_database_and_a_write_does(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    result = op(db, "exists", "user/1", "k")
    assert result.exit_code == 1 and "no database at" in result.stderr and not db.exists()
    assert answer(db, "put", "user/1", "1", "--key", "k")["value"] == 1 and db.exists()


def test_json_or_text_parameters_take_either(tmp_path: Path) -> None:
    db = tmp_path / "op.db"
    one = answer(db, "add_document", "docs", "Notes", "First passage.\n\nSecond passage.")
    two = answer(db, "add_document", "docs", "Passages", '["one", "two", "three"]')
    bracketed = answer(db, "add_document", "docs", "Draft", "[draft] notes: text that starts with a bracket")
    assert bracketed["chunk_count"] == 1
    assert len(one["chunk_ids"]) >= 1 and len(two["chunk_ids"]) == 3
    ent = answer(db, "add_entity", "people", "Kim", "--kind", "person", "--aliases", '["K"]')
    fact = answer(db, "assert_fact", "people", ent["id"], "works on", '"billing"')
    at = answer(db, "facts_context", "billing", "--time", '{"valid_at": "2999-01-01T00:00:00Z"}')
    assert fact["id"] in json.dumps(at)
    assert answer(db, "facts_context", "billing", "--time", "current")["operation"] == "facts_context"


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("put", "user/1", "dark", "--key", "k"), 2, "value: must be JSON, not 'dark'"),  # a text value is quoted
        (("get_many", "not json"), 2, "addresses: must be JSON"),
        (("get", "user/1", "missing"), 1, "no item at 'user/1' key 'missing'"),
        (("put", "user//1", "1", "--key", "k"), 2, "namespace"),
        # a local command refuses a misspelt record field, as the core does (only the wire drops unknown ones)
        (("put_many", '[{"namespace": "a", "key": "k", "value": 1, "tll": 5}]'), 2, "unknown fields ['tll']"),
        (("put", "user/1", "[" * 50_000 + "]" * 50_000, "--key", "deep"), 2, "value: is nested more than"),
        (("put", "user/1", "NaN", "--key", "nan"), 2, "value: must be JSON, not 'NaN'"),
        (("list", "--limit", "lots"), 2, "Invalid value for '--limit'"),  # Typer's usage error, as `memlane list`'s
    ],
)
def test_bad_input_is_a_one_line_error_naming_it(tmp_path: Path, args: tuple[str, ...], code: int, says: str) -> None:
    db = tmp_path / "op.db"
    answer(db, "put", "user/1", "1", "--key", "there")
    result = op(db, *args)
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert says in result.stderr and result.stdout == ""
