"""The command line against a running service (--url, --token, $MEMLANE_URL, $MEMLANE_TOKEN): the same
commands print the same output as on the local file the service holds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import memlane
from memlane import cli
from memlane.core.access import Access


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    """A SQLite file, a live service over it and an admin agent's token."""
    from live import LiveServer
    from memlane.server import create_app

    db = tmp_path / "served.db"
    mem = memlane.open(str(db), embedder="fake", indexing="sync")
    _, token = Access(mem).create_agent("admin", admin=True)
    mem.put("user/1", "preferences.editor", "vim keybindings, dark theme", metadata={"source": "chat"})
    mem.put("user/1", "preferences.editor", "helix keybindings, dark theme")
    mem.put("user/1", "profile.langs", ["python", "go"])
    mem.put("user/2", "preferences.editor", "emacs")
    server = LiveServer(create_app(mem))
    yield db, server.url, token
    server.stop()
    mem.close()


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner(env={"COLUMNS": "200", **(env or {})}).invoke(cli.app, list(args))


READS = [
    ("get", "user/1", "preferences.editor"),
    ("get", "user/1", "preferences.editor", "--json"),
    ("get", "user/1", "profile.langs", "--value"),
    ("fetch", "preferences.editor", "--json"),
    ("list", "user", "--json"),
    ("list", "user"),
    ("namespaces", "--json"),
    ("summarize", "--json"),
    ("history", "user/1", "preferences.editor", "--json"),
    ("search", "keybindings", "--json"),
    ("recall", "keybindings", "--json"),
    ("op", "get", "user/1", "preferences.editor"),
    ("op", "list", "--namespace-prefix", "user/1"),
]


@pytest.mark.parametrize("command", READS, ids=" ".join)
def test_a_read_prints_the_same_locally_and_through_the_service(served: tuple[Path, str, str], command: Any) -> None:
    db, url, token = served
    local = run(*command, "--db", str(db))
    remote = run(*command, "--url", url, "--token", token)
    assert local.exit_code == 0, local.output
    assert remote.exit_code == 0, remote.output
    assert _untimed(remote.stdout) == _untimed(local.stdout)


def _untimed(output: str) -> Any:
    """A search's JSON without its timings (each call measures its own); any other output as it is."""
    if not output.startswith("{"):
        return output
    answer = json.loads(output)
    answer.pop("timings", None)
    return answer


def test_the_environment_names_the_service_and_the_token(served: tuple[Path, str, str]) -> None:
    db, url, token = served
    local = run("get", "user/2", "preferences.editor", "--value", "--db", str(db))
    remote = run("get", "user/2", "preferences.editor", "--value", env={"MEMLANE_URL": url, "MEMLANE_TOKEN": token})
    assert remote.exit_code == 0 and remote.stdout == local.stdout == '"emacs"\n'
    # --db wins over $MEMLANE_URL: a local file named on the command line is the one meant
    both = run("get", "user/2", "preferences.editor", "--value", "--db", str(db), env={"MEMLANE_URL": "http://x"})
    assert both.exit_code == 0 and both.stdout == '"emacs"\n'


def test_writes_go_to_the_service_and_missing_items_fail_the_same_way(served: tuple[Path, str, str]) -> None:
    db, url, token = served
    remote = ("--url", url, "--token", token)
    stored = run("put", "user/3", "notes.today", "standup at 10", *remote)
    assert stored.exit_code == 0 and stored.stdout == "Stored user/3 key 'notes.today' (string, version 1)\n"
    assert run("get", "user/3", "notes.today", "--value", "--db", str(db)).stdout == '"standup at 10"\n'
    item = json.loads(run("op", "get", "user/3", "notes.today", *remote).stdout)
    assert json.loads(run("op", "get_by_id", item["id"], "--db", str(db)).stdout) == item
    assert json.loads(run("op", "delete_by_id", item["id"], *remote).stdout) == {"deleted": True}
    for where in (remote, ("--db", str(db))):
        missing = run("get", "user/3", "notes.today", *where)
        assert missing.exit_code == 1, where
        gone = run("op", "get_by_id", item["id"], *where)
        assert gone.exit_code == 1 and "no item with id" in gone.stderr, where
    assert (
        run("get", "user/3", "notes.today", *remote).stderr
        == run("get", "user/3", "notes.today", "--db", str(db)).stderr
    )


def test_a_service_needs_a_token_and_not_a_db_beside_it(served: tuple[Path, str, str]) -> None:
    db, url, _ = served
    no_token = run("get", "user/1", "k", "--url", url)
    assert no_token.exit_code == 2 and "MEMLANE_TOKEN" in no_token.stderr
    both = run("get", "user/1", "k", "--url", url, "--db", str(db), "--token", "t")
    assert both.exit_code == 2 and "not both" in both.stderr
    wrong = run("get", "user/1", "k", "--url", url, "--token", "ml_wrong")
    assert wrong.exit_code == 1 and "token" in wrong.stderr.lower()


def test_every_command_on_a_memory_takes_url(served: tuple[Path, str, str], tmp_path: Path) -> None:
    """The facts, agent, room, grant, retention, import and ingest commands work through a service as on the file
    (#37): each talks to it through memlane.Client, never opening the database."""
    db, url, token = served
    remote = ("--url", url, "--token", token)
    ent = json.loads(run("entity", "add", "team/x", "Ravi", "--kind", "person", "--json", *remote).stdout)
    fact = run("fact", "assert", "team/x", ent["id"], "works on", "billing", "--json", *remote)
    assert fact.exit_code == 0, fact.output
    looked = ("lookup", ent["id"], json.loads(fact.stdout)["id"], "--json")
    assert json.loads(run(*looked, *remote).stdout) == json.loads(run(*looked, "--db", str(db)).stdout)
    created = run("agent", "create", "planner", *remote)
    assert created.exit_code == 0 and "Token (shown once): ml_" in created.stdout, created.output
    assert run("room", "create", "eng", *remote).exit_code == 0
    assert run("room", "add", "eng", "planner", *remote).stdout == "Room 'eng': members planner\n"
    assert run("grant", "planner", "user/1", "read", *remote).exit_code == 0
    for listing in (("agent", "list", "--json"), ("room", "list", "--json")):
        assert run(*listing, *remote).stdout == run(*listing, "--db", str(db)).stdout, listing
    assert "grant" in run("agent", "log", *remote).stdout
    assert run("retention", "set", "user", "--keep-versions", "3", *remote).exit_code == 0
    rules = ("retention", "list", "--json")
    assert run(*rules, *remote).stdout == run(*rules, "--db", str(db)).stdout
    assert json.loads(run("stats", "--json", *remote).stdout)["active_items"] >= 3
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"speaker": "Kim", "text": "the cutover is in April"}\n')
    ingested = run("ingest", str(chat), "--namespace", "user/9", "--session", "s1", *remote)
    assert ingested.stdout == "Stored 1 turn in user/9 session 's1': keys s1.t00001 .. s1.t00001\n", ingested.output
    # import through the service: what a fresh file exported goes in, all or nothing
    other = tmp_path / "other.db"
    assert run("put", "moved/1", "k", "v", "--db", str(other)).exit_code == 0
    backup = tmp_path / "backup.jsonl"
    assert run("export", str(backup), "--db", str(other)).exit_code == 0
    imported = run("import", str(backup), *remote)
    assert imported.exit_code == 0 and imported.stdout == "Imported 1 record\n", imported.output
    assert run("get", "moved/1", "k", "--value", "--db", str(db)).stdout == '"v"\n'


def test_an_import_over_the_services_body_cap_says_to_split_the_file_or_import_locally(tmp_path: Path) -> None:
    """`import --url` sends the whole file in one request: over the service's body cap it is refused (413) as a
    whole, and the command says what to do instead of only that the body is too large."""
    from live import LiveServer
    from memlane.server import create_app

    source = tmp_path / "source.db"
    for n in range(40):
        assert run("put", "moved/1", f"k{n}", "x" * 200, "--db", str(source), "--embedder", "none").exit_code == 0
    backup = tmp_path / "backup.jsonl"
    assert run("export", str(backup), "--db", str(source)).exit_code == 0
    with memlane.open(str(tmp_path / "served.db"), embedder="fake", indexing="sync") as mem:
        _, token = Access(mem).create_agent("admin", admin=True)
        server = LiveServer(create_app(mem, max_body_bytes=backup.stat().st_size // 2), fresh=True)
        try:
            refused = run("import", str(backup), "--url", server.url, "--token", token)
        finally:
            server.stop()
        assert mem.list("moved").items == []  # all or nothing: nothing went in
    assert refused.exit_code == 2, refused.output
    said = refused.stderr
    assert said.startswith("Error: ") and said.count("\n") == 1, said
    assert "one request" in said and "split" in said and "--db" in said, said
    assert "request: " not in said, said  # the service's field name ("request") is not echoed before its message
    assert "Traceback" not in refused.output
