"""Agents, rooms, grants and the visibility rule: on every backend."""

from __future__ import annotations

import pytest

from memlane import ConflictError, ForbiddenError, NotFoundError, ValidationError
from memlane.core.access import Access

pytestmark = pytest.mark.embedded


@pytest.fixture
def access(mem):
    acc = Access(mem)
    acc.create_agent("alice")
    acc.create_agent("bob")
    acc.create_room("eng")
    acc.add_member("eng", "alice")
    mem.put("agent/alice", "notes.todo", "alice private plan about billing")
    mem.put("agent/bob", "notes.todo", "bob private plan about billing")
    mem.put("room/eng", "session-digest", "eng digest about billing")
    mem.put("room/ops", "session-digest", "ops digest about billing")
    mem.put("project/x", "status", "project x billing status")
    return acc


def test_tokens_authenticate_and_are_stored_hashed(mem):
    acc = Access(mem)
    agent, token = acc.create_agent("carol")
    assert acc.authenticate(token) == agent
    assert acc.authenticate("ml_wrong") is None and acc.authenticate(None) is None
    dumped = "".join(str(r) for r in mem.export_records())
    assert token not in dumped
    new = acc.rotate_token("carol")
    assert acc.authenticate(token) is None and acc.authenticate(new).name == "carol"
    with pytest.raises(ConflictError, match="already exists"):
        acc.create_agent("carol")
    assert acc.authenticate(new).name == "carol"  # the refused creation issued no working token


def test_scope_is_own_namespace_rooms_and_grants(access):
    alice = access.agent("alice")
    assert alice.rooms == ("eng",)
    view = access.view(alice)
    assert view.get("agent/alice", "notes.todo") is not None
    assert view.get("room/eng", "session-digest") is not None
    for ns in ("agent/bob", "room/ops", "project/x"):
        with pytest.raises(ForbiddenError):
            view.get(ns, "notes.todo")
    # access records are no items: the reserved root is refused for everyone, with a reason
    with pytest.raises(ValidationError, match="reserved"):
        view.get("_memlane/agents", "alice")


def test_every_read_path_covers_exactly_what_is_visible(access):
    view = access.view(access.agent("alice"))
    visible = {("agent", "alice"), ("room", "eng")}
    assert set(view.namespaces()) == visible
    assert {i.namespace for i in view.list().items} == visible
    assert set(view.summarize()) == {"agent/alice", "room/eng"}
    assert {h.namespace for h in view.search("billing").hits} == visible
    assert {h.namespace for h in view.recall("billing").hits} == visible
    assert [i.namespace for i in view.fetch("session-digest")] == [("room", "eng")]
    keyed = view.recall("digest", key="session-digest")
    assert [h.namespace for h in keyed.hits] == [("room", "eng")]


def test_explicit_namespace_outside_scope_is_refused_before_lookup(access):
    view = access.view(access.agent("alice"))
    for call in (
        lambda: view.list("room/ops"),
        lambda: view.search("billing", namespace_prefix="project"),
        lambda: view.fetch("session-digest", namespace_prefix="room/ops"),
        lambda: view.recall("x", key="session-digest", namespace_prefix="agent/bob"),
        lambda: view.summarize("agent/bob"),
        lambda: view.history("agent/bob", "notes.todo"),
        lambda: view.get_many([("agent/alice", "notes.todo"), ("agent/bob", "notes.todo")]),
        lambda: view.put("room/ops", "k", 1),
        lambda: view.delete("agent/bob", "notes.todo"),
    ):
        with pytest.raises(ForbiddenError):
            call()
    # a broader prefix narrows to what is visible under it
    assert {i.namespace for i in view.list("room").items} == {("room", "eng")}


def test_writes_record_the_agent_as_author(access, mem):
    view = access.view(access.agent("alice"))
    item = view.put("room/eng", "decision", "ship friday")
    assert item.author == "alice" and mem.author is None
    assert view.put_many([{"namespace": "agent/alice", "key": "k", "value": 1}])[0].author == "alice"


def test_grants_and_membership_changes(access):
    access.grant("bob", "project", "read")
    bob = access.view(access.agent("bob"))
    assert bob.get("project/x", "status") is not None
    with pytest.raises(ForbiddenError):
        bob.put("project/x", "status", "changed")
    access.grant("bob", "project", "write")
    access.view(access.agent("bob")).put("project/x", "status", "changed")
    access.revoke("bob", "project")
    with pytest.raises(ForbiddenError):
        access.view(access.agent("bob")).get("project/x", "status")
    access.add_member("eng", "bob")
    assert access.view(access.agent("bob")).get("room/eng", "session-digest") is not None
    access.remove_member("eng", "bob")
    with pytest.raises(ForbiddenError):
        access.view(access.agent("bob")).get("room/eng", "session-digest")
    with pytest.raises(ValidationError):
        access.grant("bob", "_memlane", "read")
    with pytest.raises(ValidationError):
        access.grant("bob", "project", "admin")
    with pytest.raises(NotFoundError):
        access.add_member("nope", "bob")


def test_admin_sees_everything(mem):
    acc = Access(mem)
    admin, _ = acc.create_agent("root", admin=True)
    mem.put("anything/at/all", "k", "v")
    view = acc.view(admin)
    assert view.get("anything/at/all", "k").value == "v"
    assert ("anything", "at", "all") in view.namespaces()


def test_list_pages_across_several_prefixes(access):
    view = access.view(access.agent("alice"))
    for i in range(7):
        view.put("agent/alice", f"p.{i}", i)
        view.put("room/eng", f"p.{i}", i)
    seen, cursor = [], None
    while True:
        page = view.list(key_prefix="p", limit=3, cursor=cursor)
        seen += [(i.namespace, i.key) for i in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == 14 and seen == sorted(seen, key=lambda a: ("/".join(a[0]), a[1]))


def test_deleting_an_agent_takes_its_rooms_grants_and_token_in_one_logged_change(access, mem):
    """On PostgreSQL a change in a read-only session is refused: this runs the delete on every backend."""
    _, token = access.create_agent("carol")
    access.add_member("eng", "carol")
    access.grant("carol", "project/x", "read")
    assert access.delete_agent("carol") is True
    assert access.authenticate(token) is None
    assert "carol" not in access.create_room("eng")["members"]
    with pytest.raises(NotFoundError):
        access.agent("carol")
    log = [(c.action, c.room) for c in access.history(agent="carol")]
    assert log[-2:] == [("remove_member", "eng"), ("delete_agent", None)]
    assert access.delete_agent("carol") is False  # nothing left to delete
    assert mem.get("agent/alice", "notes.todo") is not None  # other agents' items untouched


def test_activity_counts_only_what_the_agent_may_see(access, mem):
    alice = access.view(access.agent("alice"))
    bob = access.view(access.agent("bob"))
    bob.search("billing", namespace_prefix="agent/bob")  # bob's recall of his own namespace
    alice.search("billing")
    rows = alice.activity()["rows"]
    assert {r["namespace"] for r in rows} == {"agent/alice", "room/eng"}
    assert all(r["recalls"] == 1 for r in rows)
    owner = {r["namespace"]: r for r in mem.activity()["rows"]}
    assert set(owner) == {"agent/alice", "agent/bob", "room/eng", "room/ops", "project/x"}
    assert owner["agent/bob"]["recalls"] == 1 and owner["room/ops"]["recalls"] == 0
    with pytest.raises(ForbiddenError):
        alice.activity("room/ops")
