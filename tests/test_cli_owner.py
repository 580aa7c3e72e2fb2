"""The owner's commands (agents, rooms, grants, the access log) on a store file: what each changes, prints and
takes. They are made from one table (``memlane.cli.hand._owner``), so each row is checked here by its effect."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import memlane
from memlane import cli
from memlane.core.access import Access


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner(env={"COLUMNS": "200", **(env or {})}).invoke(cli.app, list(args))


def ok(db: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = run(*args, "--db", str(db), env=env)
    assert done.exit_code == 0, done.output
    return str(done.stdout)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "owner.db"


OWNER_COMMANDS = [
    ("agent", "create", "planner"),
    ("agent", "token", "planner"),
    ("agent", "list"),
    ("agent", "log"),
    ("room", "create", "eng"),
    ("room", "add", "eng", "planner"),
    ("room", "list"),
    ("room", "remove", "eng", "planner"),
    ("grant", "planner", "project/x", "read"),
    ("revoke", "planner", "project/x"),
    ("retention", "set", "counters", "--keep-versions", "3"),
    ("retention", "list"),
    ("agent", "delete", "planner"),
]


def test_the_owners_settings_need_no_embedder(db: Path) -> None:
    """An embedder that cannot be loaded ($MEMLANE_EMBEDDER names none there is) stops a command that embeds, never
    one that changes who may do what: those open the store without vectors."""
    broken = {"MEMLANE_EMBEDDER": "no-such-embedder"}
    refused = run("put", "a/b", "k", "v", "--db", str(db), env=broken)
    assert refused.exit_code == 1 and "no-such-embedder" in refused.output
    for command in OWNER_COMMANDS:
        ok(db, *command, env=broken)


def test_agent_create_admin_and_the_agent_list_table(db: Path) -> None:
    ok(db, "agent", "create", "root", "--admin")
    ok(db, "agent", "create", "planner")
    ok(db, "room", "create", "eng")
    ok(db, "room", "add", "eng", "planner")
    ok(db, "grant", "planner", "project/x", "read")
    ok(db, "grant", "planner", "project/y", "write")
    listed = {a["name"]: a for a in json.loads(ok(db, "agent", "list", "--json"))}
    assert listed["root"]["admin"] is True and listed["planner"]["admin"] is False
    assert listed["planner"]["grants"] == [
        {"prefix": "project/x", "mode": "read"},
        {"prefix": "project/y", "mode": "write"},
    ]
    table = {line.split()[0]: line.split() for line in ok(db, "agent", "list").splitlines()[2:] if line.strip()}
    assert table["root"][1] == "yes" and "yes" not in table["planner"]
    row = " ".join(table["planner"])
    assert "eng" in row and "read project/x, write project/y" in row, row


def test_agent_token_prints_a_new_working_token(db: Path) -> None:
    created = ok(db, "agent", "create", "planner").splitlines()[-1].split()[-1]
    said = ok(db, "agent", "token", "planner")
    assert said.startswith("New token for 'planner' (shown once): ml_"), said
    new = said.split()[-1]
    assert new != created
    with memlane.open(str(db), embedder=None) as mem:
        assert Access(mem).authenticate(new).name == "planner"
        assert Access(mem).authenticate(created) is None


def test_room_remove_removes_the_member(db: Path) -> None:
    ok(db, "agent", "create", "planner")
    ok(db, "room", "create", "eng")
    assert ok(db, "room", "add", "eng", "planner") == "Room 'eng': members planner\n"
    assert ok(db, "room", "remove", "eng", "planner") == "Room 'eng': members (none)\n"
    assert json.loads(ok(db, "room", "list", "--json")) == [{"name": "eng", "members": []}]


def test_grant_gives_the_mode_asked_and_says_each_grant(db: Path) -> None:
    ok(db, "agent", "create", "planner")
    assert ok(db, "grant", "planner", "project/x", "read") == "Agent 'planner' grants: read project/x\n"
    assert ok(db, "grant", "planner", "project/x", "write") == "Agent 'planner' grants: write project/x\n"
    assert ok(db, "revoke", "planner", "project/x") == "Agent 'planner' grants: (none)\n"


def test_agent_log_shows_every_change_and_filters_by_agent_room_and_limit(db: Path) -> None:
    for command in (
        ("agent", "create", "a"),
        ("agent", "create", "b"),
        ("room", "create", "eng"),
        ("room", "add", "eng", "a"),
        ("room", "add", "eng", "b"),
        ("grant", "a", "p/x", "read"),
    ):
        ok(db, *command)
    log = json.loads(ok(db, "agent", "log", "--json"))
    assert [c["action"] for c in log] == [
        "create_agent",
        "create_agent",
        "create_room",
        "add_member",
        "add_member",
        "grant",
    ]
    granted = log[-1]
    assert (granted["agent"], granted["prefix"], granted["mode"], granted["actor"]) == ("a", "p/x", "read", None)
    assert all(datetime.fromisoformat(c["at"]).tzinfo is not None for c in log)
    assert [c["seq"] for c in json.loads(ok(db, "agent", "log", "--json", "--limit", "2"))] == [
        c["seq"] for c in log[:2]
    ]
    assert [c["agent"] for c in json.loads(ok(db, "agent", "log", "--json", "--agent", "b"))] == ["b", "b"]
    in_room = json.loads(ok(db, "agent", "log", "--json", "--room", "eng"))
    assert [(c["action"], c["agent"]) for c in in_room] == [
        ("create_room", None),
        ("add_member", "a"),
        ("add_member", "b"),
    ]
    table = ok(db, "agent", "log").splitlines()
    assert sum("add_member" in line for line in table) == 2 and any("read" in line and "p/x" in line for line in table)


@pytest.mark.parametrize(
    "command",
    [
        ("agent", "token", "planner"),
        ("agent", "delete", "planner"),
        ("room", "add", "eng", "planner"),
        ("grant", "planner", "p/x", "read"),
    ],
)
def test_json_is_offered_only_where_the_answer_has_a_json_body(db: Path, command: tuple[str, ...]) -> None:
    """A command whose answer is one line (a token, a confirmation) takes no --json: asked for, it is a usage error
    rather than a line of text a script would try to parse."""
    ok(db, "agent", "create", "planner")
    ok(db, "room", "create", "eng")
    done = run(*command, "--json", "--db", str(db))
    assert done.exit_code == 2 and "--json" in done.output, done.output


def test_room_list_shows_every_room_past_one_page(db: Path) -> None:
    """``room list`` reads the rooms a page (10,000) at a time and shows them all."""
    with memlane.open(str(db), embedder=None) as mem:
        access = Access(mem)
        for n in range(10_001):
            access.create_room(f"r{n:05d}")
    listed = json.loads(ok(db, "room", "list", "--json"))
    assert [r["name"] for r in listed] == [f"r{n:05d}" for n in range(10_001)]


@pytest.mark.parametrize(
    ("path", "summary"),
    [
        ("agent create", "Create an agent and print its token"),
        ("agent log", "Show the access log"),
        ("room add", "Add an agent to a room"),
        ("grant", "Give an agent read or write"),
    ],
)
def test_each_owner_command_says_what_it_does_then_an_example_of_itself(path: str, summary: str) -> None:
    shown = run(*path.split(), "--help").stdout
    said, example = shown.split("Example:")
    assert summary in " ".join(said.split())
    assert " ".join(example.split()).startswith(f"memlane {path} ")


def test_empty_listings_still_show_their_columns(db: Path) -> None:
    ok(db, "migrate")
    assert ok(db, "agent", "list").split()[:4] == ["agent", "admin", "rooms", "grants"]
    assert ok(db, "room", "list").split()[:2] == ["room", "members"]
    assert ok(db, "agent", "log").split()[:3] == ["#", "at", "by"]
