"""The facts-layer commands (entity, fact, doc, claim, context, lookup) against a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from memlane import cli


@pytest.fixture(autouse=True)
def _fake_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLANE_EMBEDDER", "fake")


def run(db: Path, *args: str, input: str | None = None) -> Result:
    """``memlane GROUP COMMAND ... --db DB``, with a wide terminal so tables don't wrap."""
    return CliRunner(env={"COLUMNS": "200"}).invoke(cli.app, [*args, "--db", str(db)], input=input)


def ok(db: Path, *args: str, input: str | None = None) -> Result:
    result = run(db, *args, input=input)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def js(db: Path, *args: str, input: str | None = None) -> dict:
    return json.loads(ok(db, *args, "--json", input=input).stdout)


def test_the_scenario_from_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    ravi = js(db, "entity", "add", "team", "Ravi", "--kind", "person", "--alias", "RK", "--profile", "billing")["id"]
    js(db, "entity", "add", "team", "Ravi", "--kind", "person", "--profile", "designer")
    proj = js(db, "entity", "add", "team", "Billing migration", "--kind", "project")["id"]
    shown = ok(db, "entity", "resolve", "Ravi").stdout
    assert "status: ambiguous" in shown and "designer" in shown
    assert js(db, "entity", "resolve", "rk")["status"] == "resolved"
    for n in range(3):
        fact = js(db, "fact", "assert", "team", ravi, "works on", proj, "--source", f"note:{n}")
    assert fact["evidence_count"] == 3 and fact["object"] == proj
    old = js(db, "fact", "assert", "team", proj, "cutover date", "2026-03-01", "--string")
    assert old["value"] == "2026-03-01"
    js(db, "fact", "assert", "team", proj, "cutover date", "2026-04-15", "--string", "--supersedes", old["id"])
    table = ok(db, "fact", "context", "what is Ravi working on", "--entity", ravi).stdout
    assert "Ravi works on Billing migration" in table and "2026-04-15" in table and "2026-03-01" not in table
    earlier = js(db, "fact", "context", "cutover", "--entity", proj, "--believed-at", old["recorded_at"])
    assert [f["value"] for f in earlier["sections"]["facts"] if f["predicate"] == "cutover_date"] == ["2026-03-01"]
    doc = js(db, "doc", "add", "team", "standup", "-", "--lines", input="Ravi: cutover moves to April.\nDana: ok.\n")
    assert doc["chunk_count"] == 2
    claim = js(db, "claim", "add", "team", "The cutover moves to April", "--speaker", "Ravi", "--chunk",
               doc["chunk_ids"][0], "--about", proj)  # fmt: skip
    said = ok(db, "claim", "context", "cutover", "--entity", proj).stdout
    assert "The cutover moves to April" in said and "Ravi: cutover moves to April." in said
    both = js(db, "context", "cutover", "--entity", proj)
    assert set(both["sections"]) == {"facts", "claims", "passages"}
    assert "Ravi → Billing migration" in ok(db, "fact", "traverse", ravi, "--hops", "1").stdout
    assert "[1] Dana: ok." in ok(db, "doc", "neighbours", doc["chunk_ids"][0]).stdout
    ended = js(db, "fact", "end", fact["id"], "2026-01-01T00:00:00Z")
    assert ended["valid_to"].startswith("2026-01-01")
    again = run(db, "fact", "retract", old["id"])  # the superseded date was retracted with it
    assert again.exit_code == 1 and "already retracted" in again.stderr
    assert js(db, "claim", "supersede", claim["id"])["superseded_at"]
    records = js(db, "lookup", claim["id"], "ent_" + "0" * 32)["records"]
    assert records[0]["text"] == "The cutover moves to April" and records[1] is None
    assert js(db, "lookup", "--current", claim["id"])["records"] == [None]
    assert "not found" in ok(db, "lookup", "ent_" + "0" * 32).stdout
    merged = js(db, "entity", "merge", ravi, js(db, "entity", "add", "team", "R. K.")["id"])
    assert "R. K." in merged["aliases"]
    assert "RKay" in js(db, "entity", "alias", ravi, "RKay")["aliases"]


def test_errors_are_one_line_with_the_field(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    run(db, "migrate")
    bad = run(db, "fact", "context", "x", "--hops", "9")
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: hops") and "Traceback" not in bad.stderr
    missing = run(db, "fact", "retract", "fact_" + "0" * 32)
    assert missing.exit_code == 1 and "no fact" in missing.stderr
    no_file = run(db, "doc", "add", "team", "t", str(tmp_path / "absent.txt"))
    assert no_file.exit_code == 1 and "absent.txt" in no_file.stderr


@pytest.mark.parametrize("group", ["entity", "fact", "doc", "claim"])
def test_every_facts_command_has_help_with_an_example(group: str) -> None:
    typer_group = next(g.typer_instance for g in cli.app.registered_groups if g.name == group)
    for command in typer_group.registered_commands:
        result = CliRunner().invoke(cli.app, [group, str(command.name), "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0 and "Example:" in result.stdout, (group, command.name)
        assert f"memlane {group} {command.name}" in result.stdout


def test_claims_from_a_jsonl_file(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    lines = '{"text": "Kim owns payments", "speaker": "Dana"}\n\n{"text": "Payments ship in May"}\n'
    assert ok(db, "claim", "add-many", "team", "-", input=lines).stdout.strip() == "Recorded 2 claims"
    said = ok(db, "claim", "context", "payments").stdout
    rows = {line.split()[1]: line.split() for line in said.splitlines() if line.split()[:1] in (["1"], ["2"])}
    assert rows["Payments"][-2] == "?" and rows["Kim"][-2] == "Dana"  # said by: a claim without a speaker is "?"
    bad = run(db, "claim", "add-many", "team", "-", input='{"text": "ok"}\nnot json\n')
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: line 2")


def test_lookup_renders_each_record_by_its_kind(tmp_path: Path) -> None:
    """``lookup`` shows an entity as the entity table, a fact as the facts table (its text, validity and id), a
    claim field by field, and says which ids it did not find (with --current: or are not current)."""
    db = tmp_path / "m.db"
    ravi = js(db, "entity", "add", "team", "Ravi", "--kind", "person", "--alias", "RK")["id"]
    proj = js(db, "entity", "add", "team", "Billing", "--kind", "project")["id"]
    fact = js(db, "fact", "assert", "team", ravi, "works on", proj, "--valid-from", "2026-01-02T00:00:00Z")
    claim = js(db, "claim", "add", "team", "The cutover moves to April", "--speaker", "Dana")
    shown = ok(db, "lookup", ravi, fact["id"], claim["id"]).stdout
    entity_header = next(line for line in shown.splitlines() if "aliases" in line)
    assert entity_header.split() == ["id", "name", "kind", "namespace", "aliases", "profile"]
    fact_header = next(line for line in shown.splitlines() if "evidence" in line)
    assert fact_header.split()[:2] == ["fact", "valid"] and fact["id"] in shown
    assert "Ravi works on Billing" in shown and "2026-01-02 00:00:00 → …" in shown
    assert "speaker" in shown and "Dana" in shown and "The cutover moves to April" in shown
    js(db, "claim", "supersede", claim["id"])
    assert ok(db, "lookup", "--current", claim["id"]).stdout == f"{claim['id']}: not found or not current\n"
    assert ok(db, "lookup", "fact_" + "0" * 32).stdout == f"fact_{'0' * 32}: not found\n"


def test_a_retracted_fact_says_when_it_was_retracted(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    ravi = js(db, "entity", "add", "team", "Ravi")["id"]
    fact = js(db, "fact", "assert", "team", ravi, "likes", "tea", "--string")
    assert "retracted" not in ok(db, "lookup", fact["id"]).stdout
    retracted = js(db, "fact", "retract", fact["id"])
    shown = ok(db, "lookup", fact["id"]).stdout
    assert f"(retracted {retracted['retracted_at'][:10]}" in shown, shown
