"""``memlane retention``: set, list and clear history retention rules; ``memlane cleanup`` applies them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

import memlane
from memlane import cli


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    with memlane.open(str(path), embedder=None) as mem:
        for i in range(6):
            mem.put("counters", "hits", i)
            mem.put("counters-old", "hits", i)
    return path


def run(db: Path, *args: str) -> Result:
    return CliRunner(env={"COLUMNS": "200"}).invoke(cli.app, [*args, "--db", str(db)])


def ok(db: Path, *args: str) -> Result:
    result = run(db, *args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def as_json(db: Path, *args: str) -> Any:
    return json.loads(ok(db, *args, "--json").stdout)


def test_set_list_cleanup_clear(db: Path) -> None:
    out = ok(db, "retention", "set", "counters", "--keep-versions", "2")
    assert out.stdout == "Retention for counters: keep the newest 2 versions of history\n"
    out = ok(db, "retention", "set", "", "--keep-versions", "1", "--keep-days", "30")
    assert out.stdout == "Retention for (every namespace): keep the newest 1 version and 30 days of history\n"
    out = ok(db, "retention", "set", "daily", "--keep-days", "1")
    assert out.stdout == "Retention for daily: keep 1 day of history\n"
    ok(db, "retention", "clear", "daily")
    rules = as_json(db, "retention", "list")["rules"]  # the HTTP body
    assert [(r["prefix"], r["keep_versions"], r["keep_days"]) for r in rules] == [
        ("", 1, 30.0),
        ("counters", 2, None),
    ]
    table = ok(db, "retention", "list").stdout
    assert "(every namespace)" in table and "counters" in table

    # the existing cleanup command applies the rules: 5 - 2 under counters, 5 - 1 under counters-old
    assert as_json(db, "cleanup") == {"removed": 3 + 4}
    with memlane.open(str(db), embedder=None) as mem:
        assert [v.value for v in mem.history("counters", "hits")] == [4, 3]
        assert [v.value for v in mem.history("counters-old", "hits")] == [4]
        assert mem.get("counters", "hits").value == 5

    assert as_json(db, "retention", "clear", "counters") == {"cleared": True}  # the HTTP body
    assert ok(db, "retention", "clear", "").stdout == "Cleared the retention rule for (every namespace)\n"
    assert ok(db, "retention", "list").stdout == "No retention rules: history keeps every version\n"
    assert as_json(db, "retention", "list") == {"rules": []}


def test_clearing_a_missing_rule_exits_1(db: Path) -> None:
    result = run(db, "retention", "clear", "nothing/here")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: no retention rule at 'nothing/here'")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["counters"], "--keep-versions: give --keep-versions, --keep-days or both"),
        (["counters", "--keep-versions", "-1"], "--keep-versions: must be between 0 and"),
        (["counters", "--keep-days", "0"], "--keep-days: must be a positive"),
        (["counters", "--keep-days", "inf"], "--keep-days: must be a positive"),
        (["a//b", "--keep-versions", "1"], "prefix: has an empty segment"),
    ],
)
def test_bad_rules_exit_2_and_store_nothing(db: Path, args: list[str], fragment: str) -> None:
    result = run(db, "retention", "set", *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == "" and fragment in result.stderr and "Traceback" not in result.output
    assert as_json(db, "retention", "list") == {"rules": []}


def test_a_non_integer_version_count_is_a_usage_error(db: Path) -> None:
    result = run(db, "retention", "set", "counters", "--keep-versions", "1.5")
    assert result.exit_code == 2 and "--keep-versions" in result.stderr
