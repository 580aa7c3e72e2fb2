"""The access module's public behaviour: agents, tokens, rooms, grants, the visibility rule and AgentView.

What is guarded here (sqlite, embedded, no service):

* the visibility rule as a model: ``Scope.can_read`` / ``can_write`` / ``narrow`` and
  every AgentView read and write are compared with a brute-force reference of what an
  agent may see, over random rooms, grants and namespaces, segment boundaries included
  (``room/a`` is not ``room/ab``);
* agents and tokens: creation, validation (the exact ``ValidationError.field``),
  authentication, rotation, and the JSON forms of ``Agent`` and ``Grant``;
* rooms and grants: idempotence, membership, replacement, revocation, refusals that
  change nothing;
* AgentView: every read narrowed to the scope and merged across readable prefixes
  (order, limits, cursors, envelope fields), every explicit namespace refused with
  ``ForbiddenError`` before any lookup, writes recorded with the agent as author;
* the facts layer and the query space through an AgentView (read-only records refused,
  hidden records unknown, saved queries owned by their author).

Adapted to the access tables (issue "shared memory that cannot leak"):

* the reference model: an admin's ``narrow`` is ``[prefix]`` (``()``: everything) and its
  scope is ``Scope((), (), admin=True)``; the ``_memlane`` root is no longer a namespace an
  agent may read but not write: every verb refuses it with ``ValidationError`` (admins too),
  so the model test checks that refusal instead of ``can_read``/``can_write`` there (``Scope``
  on its own still never writes it);
* access records are not items: the tests of their ``text == ""`` items and of an admin
  listing ``_memlane/agents`` became "access changes never create an item" (stats, list,
  namespaces, search unchanged); ``state()`` now also compares the agents, rooms and
  access log, so a refusal that logs or changes an access row is caught;
* grants are listed by prefix (the table's order), not in the order they were made;
* the merged-reads tests (``AgentView._merge`` is gone) now pin the one-statement reads
  over several prefixes: one address order with cursors, one ranking, the envelope's
  ``searched_prefixes``; the strict xfail on one ranking over the scope passes and is a
  plain test now;
* new: delete_agent, the access log (history, members_at, actor), agent_page/room_page
  cursors, has_admin, count, the token cache, and the Gate.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memlane
from memlane import ConflictError, ForbiddenError, NotFoundError, ValidationError
from memlane.core.access import Access, Agent, AgentView, Grant, Scope
from memlane.values.model import namespace_text

pytestmark = pytest.mark.embedded

WORD = "orchid"


class Clock:
    """A settable clock, so "newest first" is decided by the test."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float = 1.0) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def mem(tmp_path: Path, clock: Clock) -> Any:
    m = memlane.open(str(tmp_path / "access.db"), embedder=None, clock=clock)
    yield m
    m.close()


@pytest.fixture
def acc(mem: Any) -> Access:
    return Access(mem)


FACTS_VIEWS = ("entities", "entity_aliases", "facts", "evidence", "documents", "chunks", "claims")


def state(mem: Any) -> list[Any]:
    """Everything the owner can see, access records and the facts layer included: equal before and after a refusal."""
    items = [i.to_dict() for i in mem.list((), limit=10_000).items]
    facts = [mem.query(f"SELECT * FROM {view} ORDER BY 1, 2").rows for view in FACTS_VIEWS]
    acc = Access(mem)
    access = [[a.to_dict() for a in acc.agents()], acc.rooms(), [c.to_dict() for c in acc.history(limit=10_000)]]
    return [items, mem.stats().history_versions, facts, access]


# -- the reference model of the rule ----------------------------------------------------


def covers(prefix: tuple[str, ...], ns: tuple[str, ...]) -> bool:
    """Brute force on the text form: ``prefix`` covers ``ns`` on a segment boundary."""
    p, n = "/".join(prefix), "/".join(ns)
    return p == "" or n == p or n.startswith(p + "/")


class Model:
    """What one agent may read and write, kept independently of the module."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rooms: set[str] = set()
        self.grants: dict[tuple[str, ...], str] = {}

    def readable(self) -> set[tuple[str, ...]]:
        return {("agent", self.name), *(("room", r) for r in self.rooms), *self.grants}

    def writable(self) -> set[tuple[str, ...]]:
        own = {("agent", self.name), *(("room", r) for r in self.rooms)}
        return own | {p for p, m in self.grants.items() if m == "write"}

    def can_read(self, ns: tuple[str, ...]) -> bool:
        return any(covers(p, ns) for p in self.readable())

    def can_write(self, ns: tuple[str, ...]) -> bool:
        return any(covers(p, ns) for p in self.writable())

    def narrow(self, prefix: tuple[str, ...]) -> set[tuple[str, ...]] | None:
        """The prefixes to search for ``prefix``; ``None`` means refused."""
        if self.can_read(prefix) and prefix:
            return {prefix}
        below = {p for p in self.readable() if covers(prefix, p)}
        if not below:
            return None
        return {p for p in below if not any(q != p and covers(q, p) for q in below)}


def minimal(prefixes: set[tuple[str, ...]]) -> set[tuple[str, ...]]:
    return {p for p in prefixes if not any(q != p and covers(q, p) for q in prefixes)}


ROOMS = ["a", "ab", "b", "a-b"]
GRANT_PREFIXES = [
    ("proj",),
    ("proj", "x"),
    ("proj", "xy"),
    ("proj", "x", "y"),
    ("room", "b"),
    ("room", "a", "deep"),
    ("room",),
    ("agent", "other"),
    ("team", "s"),
]
OTHER_NS = [
    ("proj",),
    ("proj", "x"),
    ("proj", "x", "y"),
    ("proj", "xy"),
    ("proj", "x-internal"),
    ("room", "a"),
    ("room", "ab"),
    ("room", "a", "deep"),
    ("room", "a-b"),
    ("room", "b"),
    ("room", "c"),
    ("agent", "other"),
    ("agent", "other", "sub"),
    ("team", "s"),
    ("team", "secret"),
    ("zeta",),
]
QUERY_PREFIXES = [(), ("proj",), ("proj", "x"), ("proj", "x", "y"), ("room",), ("room", "a"), ("room", "ab")]
QUERY_PREFIXES += [("agent",), ("team",), ("zeta",), ("nowhere",), ("room", "a", "deep", "er")]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.sampled_from(ROOMS)),
        st.tuples(st.just("leave"), st.sampled_from(ROOMS)),
        st.tuples(st.just("grant"), st.sampled_from(GRANT_PREFIXES), st.sampled_from(["read", "write"])),
        st.tuples(st.just("revoke"), st.sampled_from(GRANT_PREFIXES)),
    ),
    max_size=8,
)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One store for the model test: every namespace holds an item with the same key and word."""
    m = memlane.open(str(tmp_path_factory.mktemp("model") / "model.db"), embedder=None)
    acc = Access(m)
    for r in ROOMS:
        acc.create_room(r)
    for n in OTHER_NS:
        m.put(n, "topic", f"{WORD} notes in {namespace_text(n)}")
    yield acc, itertools.count()
    m.close()


@settings(max_examples=30, deadline=None)
@given(steps=ops)
def test_scope_and_view_match_the_reference_rule(shared: Any, steps: list[tuple[Any, ...]]) -> None:
    acc, counter = shared
    mem = acc.mem
    name = f"u{next(counter)}"
    acc.create_agent(name)
    model = Model(name)
    for step in steps:
        if step[0] == "join":
            acc.add_member(step[1], name)
            model.rooms.add(step[1])
        elif step[0] == "leave":
            acc.remove_member(step[1], name)
            model.rooms.discard(step[1])
        elif step[0] == "grant":
            acc.grant(name, step[1], step[2])
            model.grants[step[1]] = step[2]
        else:
            acc.revoke(name, step[1])
            model.grants.pop(step[1], None)
    own = [("agent", name), ("agent", name, "sub"), ("agent", name + "x")]
    for n in own:
        mem.put(n, "topic", f"{WORD} notes in {namespace_text(n)}")
    universe = OTHER_NS + own

    agent = acc.agent(name)
    assert set(agent.rooms) == model.rooms and list(agent.rooms) == sorted(agent.rooms)
    assert {g.prefix: g.mode for g in agent.grants} == model.grants
    scope = acc.scope(agent)
    assert not scope.admin
    assert set(scope.read) == model.readable() and len(scope.read) == len(set(scope.read))
    assert set(scope.write) == model.writable() and len(scope.write) == len(set(scope.write))
    for n in universe:
        assert scope.can_read(n) == model.can_read(n), n
        assert scope.can_write(n) == model.can_write(n), n
    for q in QUERY_PREFIXES + universe:
        want = model.narrow(q)
        if want is None:
            with pytest.raises(ForbiddenError, match="outside what this agent may read"):
                scope.narrow(q)
        else:
            got = scope.narrow(q)
            assert set(got) == want and len(got) == len(want), q

    view = acc.view(agent)
    visible = {n for n in universe if model.can_read(n)}
    assert set(view.namespaces()) == visible and view.namespaces() == sorted(visible)
    assert {i.namespace for i in view.list(limit=1000).items} == visible
    assert {i.namespace for i in view.fetch("topic", limit=100)} == visible
    assert {h.namespace for h in view.search(WORD, limit=100).hits} == visible
    assert set(view.summarize()) == {namespace_text(n) for n in visible}
    for q in QUERY_PREFIXES:
        if model.narrow(q) is None:
            with pytest.raises(ForbiddenError):
                view.list(q)
        else:
            assert {i.namespace for i in view.list(q, limit=1000).items} == {n for n in visible if covers(q, n)}, q
    for n in universe:
        if model.can_read(n):
            assert view.get(n, "topic") is not None and view.exists(n, "topic") is True
        else:
            with pytest.raises(ForbiddenError, match="outside what this agent may read"):
                view.get(n, "topic")
            with pytest.raises(ForbiddenError, match="outside what this agent may read"):
                view.exists(n, "topic")
        if model.can_write(n):
            assert view.put(n, "written", 1).author == name
        else:
            with pytest.raises(ForbiddenError, match="outside what this agent may write"):
                view.put(n, "written", 1)
    # the reserved root is no namespace at all: refused by validation, whatever the grants
    for reserved in (("_memlane",), ("_memlane", "agents")):
        for call in (lambda r=reserved: view.get(r, "topic"), lambda r=reserved: view.put(r, "k", 1)):
            with pytest.raises(ValidationError, match="is reserved") as e:
                call()
            assert e.value.field == "namespace"
        with pytest.raises(ValidationError, match="is reserved") as e:
            view.list(reserved)
        assert e.value.field == "namespace_prefix"


# -- Scope on its own -----------------------------------------------------------------

segments = st.sampled_from(["a", "ab", "b", "a-b", "_memlane"])
namespaces = st.lists(segments, min_size=1, max_size=3).map(tuple)


@settings(max_examples=200, deadline=None)
@given(
    read=st.lists(namespaces, max_size=4),
    extra_write=st.lists(namespaces, max_size=2),
    ns=namespaces,
    prefix=st.one_of(st.just(()), namespaces),
    admin=st.booleans(),
)
def test_scope_methods_match_the_reference(read, extra_write, ns, prefix, admin) -> None:
    write = tuple(dict.fromkeys(extra_write))
    read_t = tuple(dict.fromkeys([*write, *read]))
    scope = Scope(read_t, write, admin=admin)
    if admin:
        assert scope.can_read(ns) and scope.can_write(ns)
        assert scope.narrow(prefix) == [prefix]  # () stays (): everything
        return
    assert scope.can_read(ns) == any(covers(p, ns) for p in read_t)
    assert scope.can_write(ns) == (ns[0] != "_memlane" and any(covers(p, ns) for p in write))
    below = {p for p in read_t if covers(prefix, p)}
    if prefix and any(covers(p, prefix) for p in read_t):
        assert scope.narrow(prefix) == [prefix]
    elif prefix and not below:
        with pytest.raises(ForbiddenError) as e:
            scope.narrow(prefix)
        assert str(e.value) == f"namespace {namespace_text(prefix)!r} is outside what this agent may read"
    else:
        got = scope.narrow(prefix)
        assert set(got) == minimal(below) and len(got) == len(set(got))
        assert got == [p for p in read_t if p in minimal(below)]  # in the scope's own order


def test_scope_defaults_to_not_admin_and_never_writes_the_reserved_namespace() -> None:
    scope = Scope(read=(("_memlane",), ("a",)), write=(("_memlane",), ("a",)))
    assert scope.admin is False
    assert scope.can_read(("_memlane", "agents")) and not scope.can_write(("_memlane", "agents"))
    assert scope.can_write(("a", "b")) and not scope.can_write(("ab",))
    assert Scope((), ()).narrow(()) == []
    assert Scope((), (), admin=True).can_write(("_memlane", "agents"))
    assert Scope((), (), admin=True).narrow(()) == [()]


# -- agents and tokens ----------------------------------------------------------------


def test_create_agent_returns_the_agent_and_a_fresh_token(acc: Access) -> None:
    agent, token = acc.create_agent("alice")
    assert agent == Agent("alice", False, (), ())
    assert re.fullmatch(r"ml_[A-Za-z0-9_-]{43}", token)  # 32 random bytes, url-safe
    other, token2 = acc.create_agent("bob", admin=True)
    assert other == Agent("bob", True, (), ()) and token2 != token
    assert acc.authenticate(token) == agent and acc.authenticate(token2) == other
    assert acc.agent("bob").admin is True and acc.agent("alice").admin is False


def test_agent_defaults_and_namespace() -> None:
    a = Agent("kim")
    assert (a.admin, a.grants, a.rooms, a.namespace) == (False, (), (), ("agent", "kim"))


def test_create_agent_refuses_bad_and_taken_names_and_changes_nothing(acc: Access, mem: Any) -> None:
    acc.create_agent("alice")
    before = state(mem)
    for bad in ("", "a/b", "x" * 300, 5):
        with pytest.raises(ValidationError) as e:
            acc.create_agent(bad)  # type: ignore[arg-type]
        assert e.value.field == "name"
    with pytest.raises(ConflictError) as c:
        acc.create_agent("alice", admin=True)
    assert str(c.value) == "agent 'alice' already exists; pick another name"
    assert c.value.__cause__ is None and c.value.__context__ is None  # no database error chained
    assert state(mem) == before
    assert acc.agent("alice").admin is False


def test_agent_and_agents_read_rooms_and_grants(acc: Access) -> None:
    for n in ("carol", "alice", "bob"):
        acc.create_agent(n)
    for r in ("zed", "eng", "ops"):
        acc.create_room(r)
        acc.add_member(r, "alice")
    acc.grant("alice", "project/x", "read")
    acc.grant("alice", ["team", "s"], "write")
    alice = acc.agent("alice")
    assert alice.rooms == ("eng", "ops", "zed")
    assert alice.grants == (Grant(("project", "x"), "read"), Grant(("team", "s"), "write"))
    assert [a.name for a in acc.agents()] == ["alice", "bob", "carol"]
    assert acc.agents()[0] == alice
    assert acc.agent("bob").rooms == () and acc.agent("bob").grants == ()


def test_unknown_agent_is_not_found_and_a_bad_name_names_the_field(acc: Access) -> None:
    for call in (
        lambda: acc.agent("ghost"),
        lambda: acc.rotate_token("ghost"),
        lambda: acc.grant("ghost", "p", "read"),
        lambda: acc.revoke("ghost", "p"),
    ):
        with pytest.raises(NotFoundError) as e:
            call()
        assert str(e.value) == "no agent named 'ghost'; create it with `memlane agent create ghost`"
    with pytest.raises(ValidationError) as v:
        acc.agent("a/b")
    assert v.value.field == "agent"


def test_to_dict_forms_carry_every_field_and_never_the_token(acc: Access) -> None:
    _, token = acc.create_agent("alice")
    acc.create_room("eng")
    acc.add_member("eng", "alice")
    acc.grant("alice", "project/x", "write")
    d = acc.agent("alice").to_dict()
    assert d == {
        "name": "alice",
        "admin": False,
        "namespace": "agent/alice",
        "rooms": ["eng"],
        "grants": [{"prefix": "project/x", "mode": "write"}],
    }
    assert token not in str(d)
    assert Grant(("a", "b", "c"), "read").to_dict() == {"prefix": "a/b/c", "mode": "read"}
    assert Agent("root", True).to_dict() == {
        "name": "root",
        "admin": True,
        "namespace": "agent/root",
        "rooms": [],
        "grants": [],
    }


def test_authenticate_refuses_anything_but_a_current_token(acc: Access) -> None:
    alice, token = acc.create_agent("alice")
    assert acc.authenticate(token) == alice
    for bad in (None, "", "ml_wrong", token + "x", token[:-1], "x" * 201, token + " " * 200):
        assert acc.authenticate(bad) is None


class Recording:
    """A memory that notes every attribute Access reaches for, then passes it through."""

    def __init__(self, mem: Any) -> None:
        self._mem = mem
        self.touched: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.touched.append(name)
        return getattr(self._mem, name)


def test_authenticate_refuses_empty_and_overlong_tokens_without_touching_the_store(acc: Access, mem: Any) -> None:
    acc.create_agent("alice")
    spy = Recording(mem)
    watched = Access(spy)  # type: ignore[arg-type]
    for refused in (None, "", "t" * 201, "t" * 5000):
        assert watched.authenticate(refused) is None
    assert spy.touched == []
    assert watched.authenticate("t" * 200) is None  # at the cap: looked up, and unknown
    assert spy.touched != []


def test_rotate_token_keeps_the_agent_and_only_the_new_token_works(acc: Access) -> None:
    acc.create_agent("alice", admin=True)
    acc.create_room("eng")
    acc.add_member("eng", "alice")
    acc.grant("alice", "project", "read")
    before = acc.agent("alice")
    _, old = acc.create_agent("bob")
    t1 = acc.rotate_token("bob")
    t2 = acc.rotate_token("bob")
    assert re.fullmatch(r"ml_[A-Za-z0-9_-]{43}", t2) and len({old, t1, t2}) == 3
    assert acc.authenticate(old) is None and acc.authenticate(t1) is None
    assert acc.authenticate(t2) == acc.agent("bob")
    t3 = acc.rotate_token("alice")
    assert acc.authenticate(t3) == before  # admin flag, rooms and grants survive a rotation
    assert acc.authenticate(t2).name == "bob"  # another agent's rotation changes nothing for bob


# -- rooms ----------------------------------------------------------------------------


def test_rooms_are_idempotent_and_list_their_members(acc: Access, mem: Any) -> None:
    acc.create_agent("alice")
    acc.create_agent("bob")
    assert acc.create_room("eng") == {"name": "eng", "members": []}
    assert acc.add_member("eng", "bob") == {"name": "eng", "members": ["bob"]}
    assert acc.add_member("eng", "alice") == {"name": "eng", "members": ["alice", "bob"]}
    assert acc.add_member("eng", "alice") == {"name": "eng", "members": ["alice", "bob"]}
    before = state(mem)
    assert acc.create_room("eng") == {"name": "eng", "members": ["alice", "bob"]}  # idempotent, members kept
    assert state(mem) == before  # and writes nothing
    assert acc.create_room("ops") == {"name": "ops", "members": []}
    assert acc.rooms() == [{"name": "eng", "members": ["alice", "bob"]}, {"name": "ops", "members": []}]
    assert acc.remove_member("eng", "alice") == {"name": "eng", "members": ["bob"]}
    assert acc.remove_member("eng", "nobody") == {"name": "eng", "members": ["bob"]}
    assert acc.rooms()[0] == {"name": "eng", "members": ["bob"]}
    assert acc.agent("alice").rooms == () and acc.agent("bob").rooms == ("eng",)


def test_room_refusals_name_the_field_and_change_nothing(acc: Access, mem: Any) -> None:
    acc.create_agent("alice")
    acc.create_room("eng")
    before = state(mem)
    for bad in ("", "a/b", 7):
        with pytest.raises(ValidationError) as e:
            acc.create_room(bad)  # type: ignore[arg-type]
        assert e.value.field == "room"
        with pytest.raises(ValidationError) as e:
            acc.add_member(bad, "alice")  # type: ignore[arg-type]
        assert e.value.field == "room"
    for call in (lambda: acc.add_member("nope", "alice"), lambda: acc.remove_member("nope", "alice")):
        with pytest.raises(NotFoundError) as nf:
            call()
        assert str(nf.value) == "no room named 'nope'; create it with `memlane room create nope`"
    with pytest.raises(NotFoundError, match="no agent named 'ghost'"):
        acc.add_member("eng", "ghost")
    assert state(mem) == before
    assert acc.rooms() == [{"name": "eng", "members": []}]


# -- grants ---------------------------------------------------------------------------


def test_grant_replaces_the_mode_on_the_same_prefix_and_revoke_removes_only_it(acc: Access) -> None:
    acc.create_agent("alice")
    assert acc.grant("alice", "project/x", "read").grants == (Grant(("project", "x"), "read"),)
    acc.grant("alice", ("team",), "write")
    got = acc.grant("alice", ["project", "x"], "write")
    assert got.grants == (Grant(("project", "x"), "write"), Grant(("team",), "write"))  # by prefix
    assert acc.scope(got).can_write(("project", "x", "y"))
    assert acc.revoke("alice", "project/x").grants == (Grant(("team",), "write"),)
    assert acc.revoke("alice", "nothing/here").grants == (Grant(("team",), "write"),)
    assert acc.revoke("alice", ["team"]) == acc.agent("alice") == Agent("alice")


def test_grant_refusals_name_the_field_and_change_nothing(acc: Access, mem: Any) -> None:
    acc.create_agent("alice")
    acc.grant("alice", "p", "read")
    before = state(mem)
    cases = [
        (("alice", "p", "admin"), "mode", "mode: 'admin' is not one of read, write"),
        (("alice", "p", "READ"), "mode", None),
        (("alice", "", "read"), "prefix", None),
        (("alice", "a//b", "read"), "prefix", None),
        (
            ("alice", "_memlane", "read"),
            "prefix",
            "prefix: '_memlane' is reserved for memlane's own records and holds no items; choose another first segment",
        ),
        (("alice", "_memlane/agents", "write"), "prefix", None),
    ]
    for args, field, message in cases:
        with pytest.raises(ValidationError) as e:
            acc.grant(*args)
        assert e.value.field == field, args
        if message:
            assert str(e.value) == message
    for bad in ("", "_memlane/agents"):
        with pytest.raises(ValidationError) as e:
            acc.revoke("alice", bad)
        assert e.value.field == "prefix"
    assert state(mem) == before


# -- the scope Access computes ----------------------------------------------------------


def test_scope_lists_own_rooms_and_grants_with_write_implying_read(acc: Access) -> None:
    acc.create_agent("alice")
    acc.create_room("eng")
    acc.add_member("eng", "alice")
    acc.grant("alice", "project/r", "read")
    acc.grant("alice", "project/w", "write")
    acc.grant("alice", "room/eng", "read")  # already a member: listed once
    scope = acc.scope(acc.agent("alice"))
    assert scope == Scope(
        read=(("agent", "alice"), ("room", "eng"), ("project", "w"), ("project", "r")),
        write=(("agent", "alice"), ("room", "eng"), ("project", "w")),
        admin=False,
    )


def test_admin_scope_is_everything_and_narrows_to_the_prefix_asked(acc: Access, mem: Any) -> None:
    admin, _ = acc.create_agent("root", admin=True)
    acc.create_room("eng")
    acc.add_member("eng", "root")
    acc.grant("root", "project/x", "read")  # an admin's rooms and grants change nothing of its scope
    mem.put("zeta/deep/er", "k", 1)
    mem.put("alpha", "k", 2)
    scope = acc.scope(acc.agent("root"))
    assert scope == Scope((), (), admin=True)
    assert scope.narrow(()) == [()]  # everything, in one statement
    assert scope.narrow(("zeta",)) == [("zeta",)] and scope.narrow(("nowhere", "x")) == [("nowhere", "x")]
    view = acc.view(acc.agent("root"))
    assert [(i.namespace, i.key) for i in view.list().items] == [(("alpha",), "k"), (("zeta", "deep", "er"), "k")]
    with pytest.raises(ValidationError, match="is reserved") as e:  # for an admin too
        view.list("_memlane/agents")
    assert e.value.field == "namespace_prefix"


# -- AgentView: refusals before any lookup ---------------------------------------------


@pytest.fixture
def world(acc: Access, mem: Any, clock: Clock) -> Access:
    """alice: room eng, read on project/r, write on project/w; bob: room ops; root: admin."""
    acc.create_agent("alice")
    acc.create_agent("bob")
    acc.create_agent("root", admin=True)
    acc.create_room("eng")
    acc.create_room("ops")
    acc.add_member("eng", "alice")
    acc.add_member("ops", "bob")
    acc.grant("alice", "project/r", "read")
    acc.grant("alice", "project/w", "write")
    for n in ("agent/alice", "agent/bob", "room/eng", "room/ops", "project/r", "project/w", "project/x"):
        clock.tick()
        mem.put(n, "topic", f"{WORD} notes in {n}")
    return acc


def view_of(acc: Access, name: str) -> AgentView:
    return acc.view(acc.agent(name))


def test_refused_reads_and_writes_say_why_and_change_nothing(world: Access, mem: Any) -> None:
    alice = view_of(world, "alice")
    assert alice.author == "alice" and alice.scope == world.scope(world.agent("alice"))
    before = state(mem)
    read_calls = [
        lambda: alice.get("room/ops", "topic"),
        lambda: alice.exists("room/ops", "topic"),  # no answer about what it may not read, not even False
        lambda: alice.get_many([("agent/alice", "topic"), ("room/ops", "topic")]),
        lambda: alice.history("agent/bob", "topic"),
        lambda: alice.fetch("topic", namespace_prefix="room/ops"),
        lambda: alice.list("project/x"),
        lambda: alice.namespaces("room/ops"),
        lambda: alice.summarize("agent/bob"),
        lambda: alice.search(WORD, namespace_prefix="room/ops"),
        lambda: alice.recall(WORD, namespace_prefix="room/ops"),
        lambda: alice.recall(WORD, key="topic", namespace_prefix="agent/bob"),
    ]
    for call in read_calls:
        with pytest.raises(ForbiddenError, match=r"^namespace '(room/ops|agent/bob|project/x)' is outside what"):
            call()
    write_calls = [
        lambda: alice.put("project/r", "k", 1),
        lambda: alice.put_many([{"namespace": "agent/alice", "key": "k", "value": 1}, {"namespace": "room/ops"}]),
        lambda: alice.delete("project/r", "topic"),
        lambda: alice.clear("project/r"),
    ]
    for call in write_calls:
        with pytest.raises(ForbiddenError) as e:
            call()
        assert re.fullmatch(r"namespace '[^']+' is outside what this agent may write", str(e.value))
    assert state(mem) == before


def test_the_reserved_root_is_refused_by_every_verb_for_every_agent(world: Access, mem: Any) -> None:
    before = state(mem)
    for who in ("alice", "root"):
        view = view_of(world, who)
        calls = [
            (lambda view=view: view.get("_memlane/agents", "alice"), "namespace"),
            (lambda view=view: view.get_many([("_memlane/agents", "alice")]), "namespace"),
            (lambda view=view: view.history("_memlane/agents", "alice"), "namespace"),
            (lambda view=view: view.put("_memlane/agents", "alice", {"admin": True}), "namespace"),
            (lambda view=view: view.put_many([{"namespace": "_memlane", "key": "k", "value": 1}]), "namespace"),
            (lambda view=view: view.delete("_memlane/agents", "alice"), "namespace"),
            (lambda view=view: view.clear("_memlane"), "namespace_prefix"),
            (lambda view=view: view.list("_memlane"), "namespace_prefix"),
            (lambda view=view: view.namespaces("_memlane"), "prefix"),
            (lambda view=view: view.summarize("_memlane"), "namespace_prefix"),
            (lambda view=view: view.fetch("alice", namespace_prefix="_memlane"), "namespace_prefix"),
            (lambda view=view: view.search("alice", namespace_prefix="_memlane"), "namespace_prefix"),
            (lambda view=view: view.recall("alice", namespace_prefix="_memlane/agents"), "namespace_prefix"),
            (lambda view=view: view.add_entity("_memlane", "X"), "namespace"),
            (lambda view=view: view.add_document("_memlane", "t", "x"), "namespace"),
            (lambda view=view: view.facts_context("x", namespace_prefix="_memlane"), "namespace_prefix"),
        ]
        for n, (call, field) in enumerate(calls):
            with pytest.raises(ValidationError, match="'_memlane' is reserved") as e:
                call()
            assert e.value.field == field, (who, n)
    assert state(mem) == before


def test_malformed_namespaces_are_validation_errors_naming_the_argument(world: Access) -> None:
    alice = view_of(world, "alice")
    cases = [
        (lambda: alice.get("", "topic"), "namespace"),
        (lambda: alice.history(5, "topic"), "namespace"),
        (lambda: alice.put("a//b", "k", 1), "namespace"),
        (lambda: alice.delete([], "k"), "namespace"),
        (lambda: alice.clear(""), "namespace_prefix"),
        (lambda: alice.list("a//b"), "namespace_prefix"),
        (lambda: alice.fetch("topic", namespace_prefix=5), "namespace_prefix"),
        (lambda: alice.summarize("a//b"), "namespace_prefix"),
        (lambda: alice.search(WORD, namespace_prefix=3), "namespace_prefix"),
        (lambda: alice.list(limit=0), "limit"),
        (lambda: alice.list(limit=10_001), "limit"),
        (lambda: alice.get_many([("agent/alice",)]), "addresses"),
        (lambda: alice.get_many(["agent/alice"]), "addresses"),
        (lambda: alice.get_many([("agent/alice", "topic", "x")]), "addresses"),
    ]
    for call, field in cases:
        with pytest.raises(ValidationError) as e:
            call()
        assert e.value.field == field
    with pytest.raises(ValidationError) as e:
        alice.get_many([["agent/alice", "topic"], ("agent/alice",)])
    # the owner's message, naming which address: the core checks both alike
    assert str(e.value) == "addresses: address 1 must be a (namespace, key) pair"
    # as in put_many, the agent learns that an address is not its to read before any key is checked
    with pytest.raises(ForbiddenError):
        alice.get_many([("agent/alice", "bad..key"), ("room/ops", "k")])
    for bad in (5, "agent/alice", {"agent/alice": "k"}):
        with pytest.raises(ValidationError, match="must be a list of"):
            alice.get_many(bad)


# -- AgentView: writes ----------------------------------------------------------------


def test_writes_inside_the_scope_record_the_agent_and_leave_the_memory_unchanged(world: Access, mem: Any) -> None:
    alice = view_of(world, "alice")
    assert alice.put("project/w/sub", "k", 1).author == "alice"
    assert [i.author for i in alice.put_many([{"namespace": "room/eng", "key": "a", "value": 1}])] == ["alice"]
    with pytest.raises(ConflictError):
        alice.put_many([{"namespace": "room/eng", "key": "a", "value": 2}], if_absent=True)
    assert mem.get("room/eng", "a").value == 1
    assert alice.put_many(r for r in [{"namespace": "room/eng", "key": "b", "value": 2}])[0].key == "b"
    with pytest.raises(ValidationError):  # a record without a namespace reaches the core's validation
        alice.put_many([{"key": "c", "value": 3}])
    assert alice.delete("project/w/sub", "k") is True and alice.delete("project/w/sub", "k") is False
    assert mem.history("project/w/sub", "k")[0].changed_by == "alice"
    assert alice.clear("room/eng") == 3 and mem.list("room/eng").items == []
    assert mem.author is None  # the shared memory is never changed


def test_reads_return_what_the_memory_has(world: Access, mem: Any, clock: Clock) -> None:
    alice = view_of(world, "alice")
    assert alice.get("project/r", "topic") == mem.get("project/r", "topic")
    assert alice.get("project/r", "missing") is None
    clock.tick()
    alice.put("agent/alice", "topic", "v2")
    assert alice.get_many([("agent/alice", "topic"), ["project/r", "nope"]]) == [mem.get("agent/alice", "topic"), None]
    assert alice.history("agent/alice", "topic") == mem.history("agent/alice", "topic") != []


# -- AgentView: merged reads ----------------------------------------------------------


def test_fetch_merges_newest_first_then_by_namespace_and_keeps_the_limit(world: Access, clock: Clock) -> None:
    alice = view_of(world, "alice")
    # seeded oldest to newest: agent/alice, room/eng, project/r, project/w
    assert [namespace_text(i.namespace) for i in alice.fetch("topic")] == [
        "project/w",
        "project/r",
        "room/eng",
        "agent/alice",
    ]
    assert [namespace_text(i.namespace) for i in alice.fetch("topic", limit=2)] == ["project/w", "project/r"]
    clock.tick()
    for n in ("room/eng", "agent/alice", "project/w/z"):
        alice.put(n, "same", 1)  # one instant: ties go by namespace
    assert [namespace_text(i.namespace) for i in alice.fetch("same")] == ["agent/alice", "project/w/z", "room/eng"]
    assert alice.fetch("topic", namespace_prefix="project") == alice.fetch("topic", limit=2)
    assert [i.namespace for i in alice.fetch("topic", namespace_prefix="room/eng")] == [("room", "eng")]


def test_list_merges_in_address_order_and_pages_with_a_cursor(world: Access) -> None:
    alice = view_of(world, "alice")
    for n in ("agent/alice", "room/eng", "project/w/a-b", "project/w/a/b"):
        for i in range(3):
            alice.put(n, f"p.{i}", i)
    world.mem.put("project/r", "p.0", 0)  # read-only for alice, still listed
    page = alice.list(key_prefix="p", limit=100)
    addresses = [(namespace_text(i.namespace), i.key) for i in page.items]
    assert addresses == sorted(addresses) and len(addresses) == 13 and page.next_cursor is None
    seen, cursor = [], None
    for _ in range(20):
        page = alice.list(key_prefix="p", limit=4, cursor=cursor)
        assert len(page.items) <= 4
        seen += [(namespace_text(i.namespace), i.key) for i in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == addresses
    exact = alice.list(key_prefix="p", limit=13)
    assert len(exact.items) == 13 and exact.next_cursor is None  # nothing follows: no cursor
    one_short = alice.list(key_prefix="p", limit=12)
    assert len(one_short.items) == 12 and one_short.next_cursor is not None
    assert alice.list(key_prefix="p", limit=10_000).items == alice.list(key_prefix="p", limit=100).items
    # one readable prefix: the memory's own page
    assert alice.list("project/w", key_prefix="p", limit=2) == world.mem.list("project/w", key_prefix="p", limit=2)


def test_namespaces_and_summarize_cover_each_readable_prefix(world: Access) -> None:
    alice = view_of(world, "alice")
    alice.put("project/w/deep/er", "tax.one", 1)
    alice.put("project/w/deep/er", "tax.two.x", 2)
    want = [("agent", "alice"), ("project", "r"), ("project", "w"), ("project", "w", "deep", "er"), ("room", "eng")]
    assert alice.namespaces() == want
    assert alice.namespaces("project") == want[1:4]
    assert alice.namespaces(max_depth=1) == [("agent",), ("project",), ("room",)]
    assert alice.namespaces("project", max_depth=2) == [("project", "r"), ("project", "w")]
    summary = alice.summarize()
    assert list(summary) == sorted(namespace_text(n) for n in want)
    assert summary["project/w/deep/er"] == world.mem.summarize("project/w/deep/er")["project/w/deep/er"]
    assert alice.summarize(depth=1, key_prefix="tax") == {"project/w/deep/er": {"tax": 2}}
    assert alice.summarize("project", depth=2, key_prefix="tax") == world.mem.summarize(
        "project/w", depth=2, key_prefix="tax"
    )


def test_search_merges_every_readable_prefix_by_score(world: Access, mem: Any) -> None:
    alice = view_of(world, "alice")
    for i in range(3):
        alice.put("room/eng", f"extra.{i}", f"{WORD} {WORD} extra {i}")
    env = alice.search(WORD, limit=50)
    assert {h.namespace for h in env.hits} == {("agent", "alice"), ("room", "eng"), ("project", "r"), ("project", "w")}
    assert [h.score for h in env.hits] == sorted((h.score for h in env.hits), reverse=True)
    assert env.operation == "search" and env.truncated is False
    parts = [mem.search(WORD, namespace_prefix=p, limit=50) for p in alice.scope.read]
    assert env.params["namespace_prefix"] == ""
    assert env.params["searched_prefixes"] == [p.params["namespace_prefix"] for p in parts]
    assert env.params["limit"] == 50 and env.params["query"] == WORD
    assert env.counts == {ch: sum(p.counts.get(ch, 0) for p in parts) for ch in parts[0].counts}
    assert env.dropped_by_hydration == sum(p.dropped_by_hydration for p in parts)
    assert set(env.timings) == set(parts[0].timings) and all(t >= 0 for t in env.timings.values())
    assert env.notes == sorted({n for p in parts for n in p.notes})
    assert len(env.hits) == 7
    top = alice.search(WORD, limit=2)
    assert top.truncated is True and len(top.hits) == 2
    assert [h.score for h in top.hits] == [h.score for h in env.hits[:2]]
    just = alice.search(WORD, limit=7)
    assert just.truncated is False and len(just.hits) == 7
    narrowed = alice.search(WORD, namespace_prefix=["project"], limit=50)
    assert narrowed.params["namespace_prefix"] == "project"
    assert narrowed.params["searched_prefixes"] == ["project/w", "project/r"]
    one = alice.search(WORD, namespace_prefix="room/eng", limit=50)
    assert one.to_dict() == mem.search(WORD, namespace_prefix="room/eng", limit=50).to_dict() | {"timings": one.timings}


def test_recall_merges_ranked_and_keyed_reads(world: Access, clock: Clock) -> None:
    alice = view_of(world, "alice")
    env = alice.recall(WORD, limit=50)
    assert env.operation == "recall"
    assert {h.namespace for h in env.hits} == {("agent", "alice"), ("room", "eng"), ("project", "r"), ("project", "w")}
    assert [h.score for h in env.hits] == sorted((h.score for h in env.hits), reverse=True)
    keyed = alice.recall(WORD, key="topic", limit=3)
    assert keyed.params["mode"] == "keyed" and keyed.truncated is True
    assert [namespace_text(h.namespace) for h in keyed.hits] == ["project/w", "project/r", "room/eng"]
    clock.tick()
    alice.put("agent/alice", "topic", f"{WORD} newest")
    assert [namespace_text(h.namespace) for h in alice.recall(WORD, key="topic").hits][:2] == [
        "agent/alice",
        "project/w",
    ]
    one = alice.recall(WORD, key="topic", namespace_prefix="room/eng")
    assert [h.namespace for h in one.hits] == [("room", "eng")] and one.params["namespace_prefix"] == "room/eng"


def test_an_agent_reading_nothing_gets_the_usual_empty_shapes(acc: Access, mem: Any) -> None:
    root, _ = acc.create_agent("root", admin=True)
    view = acc.view(root)  # an empty store: no top-level namespace to read
    assert view.list().items == [] and view.list().next_cursor is None
    assert view.namespaces() == [] and view.summarize() == {} and view.fetch("k") == []
    assert view.search(WORD).hits == [] and view.recall(WORD).hits == []
    blind = AgentView(mem, Scope((), ()), "nobody")
    assert blind.list().items == [] and blind.search(WORD).hits == [] and blind.fetch("k") == []
    with pytest.raises(ValidationError):  # arguments are still validated
        blind.search(WORD, limit=0)


def test_admin_view_reads_and_writes_everything_by_name(world: Access, mem: Any) -> None:
    root = view_of(world, "root")
    assert root.scope.admin
    assert root.get("room/ops", "topic") is not None
    assert {i.namespace[0] for i in root.list().items} == {"agent", "room", "project"}  # access records are no items
    assert {n[0] for n in root.namespaces()} == {"agent", "room", "project"}
    assert len(root.list().items) == 7 and root.list().items == world.mem.list().items
    assert root.namespaces() == world.mem.namespaces() and root.summarize() == world.mem.summarize()
    assert root.put("anything/new", "k", 1).author == "root"
    assert len(root.search(WORD, limit=50).hits) == 7


# -- the facts layer through a view ----------------------------------------------------


@pytest.fixture
def facts(world: Access, mem: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in ("room/eng", "project/r", "room/ops"):
        ent = mem.add_entity(n, "Payments", kind="project")
        other = mem.add_entity(n, "Billing", kind="project")
        person = mem.add_entity(n, "Kim", kind="person")
        fact = mem.assert_fact(n, person.id, "owns", ent.id)
        doc = mem.add_document(n, f"{n} notes", ["payments launch is on track", "billing slips"])
        claim = mem.add_claim(n, f"{n} says payments launch is on track", chunk=doc.chunk_ids[0], about=[ent.id])
        out[n] = {"ent": ent, "other": other, "person": person, "fact": fact, "doc": doc, "claim": claim}
    return out


def test_facts_changes_on_read_only_records_are_refused_and_change_nothing(world: Access, facts, mem) -> None:
    alice = view_of(world, "alice")
    ro = facts["project/r"]
    before = state(mem)
    refusals = [
        (lambda: alice.add_alias(ro["ent"].id, "Pay"), "entity"),
        (lambda: alice.merge_entities(ro["ent"].id, ro["other"].id), "survivor"),
        (lambda: alice.merge_entities(facts["room/eng"]["ent"].id, ro["ent"].id), "merged"),
        (lambda: alice.retract_fact(ro["fact"].id), "fact"),
        (lambda: alice.end_fact(ro["fact"].id, "2026-02-01T00:00:00Z"), "fact"),
        (lambda: alice.supersede_claim(ro["claim"].id), "claim"),
        (
            lambda: alice.assert_fact("agent/alice", ro["person"].id, "owns", 1, supersedes=ro["fact"].id),
            "supersedes",
        ),
    ]
    for call, field in refusals:
        with pytest.raises(ForbiddenError) as e:
            call()
        assert re.fullmatch(
            rf"{field} '[a-z]+_[0-9a-f]+' lives in 'project/r', which this agent may read but not write", str(e.value)
        ), str(e.value)
    with pytest.raises(ForbiddenError, match="outside what this agent may write"):
        alice.add_entity("project/r", "X")
    with pytest.raises(ForbiddenError, match="outside what this agent may write"):
        alice.add_document("project/r", "t", "x")
    with pytest.raises(ForbiddenError, match="outside what this agent may write"):
        alice.add_claims("project/r", [{"text": "x"}])
    assert state(mem) == before
    assert alice.lookup([ro["fact"].id])[0].retracted_at is None


def test_the_core_enforces_the_scope_not_only_the_view(world: Access, facts, mem) -> None:
    """AgentView has no check of its own: the agent's copy of Memory refuses, so every surface built on the
    core (the service, MCP, a Python caller holding that copy) refuses alike; the owner's Memory does not."""
    scoped = view_of(world, "alice")._as_author()
    assert scoped is not mem and scoped._scope is not None and mem._scope is None
    ro = facts["project/r"]
    before = state(mem)
    refusals = [
        (lambda: scoped.get("room/ops", "k"), "may read"),
        (lambda: scoped.exists("room/ops", "k"), "may read"),
        (lambda: scoped.history("room/ops", "k"), "may read"),
        (lambda: scoped.get_many([("room/eng", "k"), ("room/ops", "k")]), "may read"),
        (lambda: scoped.put("project/r", "k", 1), "may write"),
        (lambda: scoped.put_many([{"namespace": "project/r", "value": 1}]), "may write"),
        (lambda: scoped.add_conversation("project/r", [{"speaker": "a", "text": "b"}]), "may write"),
        (lambda: scoped.delete("project/r", "k"), "may write"),
        (lambda: scoped.clear("project/r"), "may write"),
        (lambda: scoped.add_entity("project/r", "X"), "may write"),
        (lambda: scoped.retract_fact(ro["fact"].id), "may read but not write"),
        (lambda: scoped.supersede_claim(ro["claim"].id), "may read but not write"),
    ]
    for call, why in refusals:
        with pytest.raises(ForbiddenError, match=why):
            call()
    assert state(mem) == before
    assert mem.get("room/ops", "k") is None  # the owner reads anywhere: nothing there, and no refusal


def test_facts_changes_on_writable_records_go_through_as_the_agent(world: Access, facts) -> None:
    alice = view_of(world, "alice")
    rw = facts["room/eng"]
    assert "Pay" in alice.add_alias(rw["ent"].id, "Pay").aliases
    assert alice.merge_entities(rw["ent"].id, rw["other"].id).id == rw["ent"].id
    new = alice.assert_fact("room/eng", rw["person"].id, "owns", 2, supersedes=rw["fact"].id)
    assert new.namespace == ("room", "eng")
    assert alice.end_fact(new.id, "2026-02-01T00:00:00Z").valid_to is not None
    assert alice.retract_fact(new.id).retracted_at is not None
    assert alice.supersede_claim(rw["claim"].id).id == rw["claim"].id
    assert alice.hydrate([rw["claim"].id]) == [None]
    doc = alice.add_document("agent/alice", "mine", "my payments note")
    claims = alice.add_claims("agent/alice", [{"text": "mine too", "chunk": doc.chunk_ids[0]}])
    assert [c.namespace for c in claims] == [("agent", "alice")]
    solo = alice.add_entity("agent/alice", "Solo")
    assert solo.namespace == ("agent", "alice")
    plain = alice.assert_fact("agent/alice", solo.id, "reads", rw["ent"].id)  # cites what alice can read
    assert plain.namespace == ("agent", "alice")
    claim = alice.add_claim("agent/alice", "solo reads payments", about=[rw["ent"].id])
    assert claim.namespace == ("agent", "alice") and claim.about == [rw["ent"].id]
    assert {f.namespace for f in alice.facts_context("reads", namespace_prefix="agent")["facts"]} == {
        ("agent", "alice")
    }
    with pytest.raises(ForbiddenError):
        alice.add_claim("room/ops", "x")
    with pytest.raises(NotFoundError):  # a hidden entity cannot be cited
        alice.assert_fact("agent/alice", solo.id, "reads", facts["room/ops"]["ent"].id)
    # unknown or malformed ids reach the facts layer's own errors
    with pytest.raises(NotFoundError):
        alice.retract_fact("fact_" + "0" * 32)
    with pytest.raises(ValidationError):
        alice.retract_fact("bogus")
    with pytest.raises(ValidationError):
        alice.retract_fact(5)


def test_facts_writes_treat_hidden_records_as_unknown_and_change_nothing(world: Access, facts, mem) -> None:
    alice = view_of(world, "alice")  # room/ops is bob's: alice cannot read it
    own, hidden = facts["room/eng"], facts["room/ops"]
    before = state(mem)
    calls = [
        lambda: alice.add_alias(hidden["ent"].id, "Pay"),
        lambda: alice.merge_entities(own["ent"].id, hidden["ent"].id),
        lambda: alice.merge_entities(hidden["ent"].id, own["other"].id),
        lambda: alice.retract_fact(hidden["fact"].id),
        lambda: alice.end_fact(hidden["fact"].id, "2026-02-01T00:00:00Z"),
        lambda: alice.supersede_claim(hidden["claim"].id),
        lambda: alice.supersede_claim(own["claim"].id, hidden["claim"].id),
        lambda: alice.assert_fact("room/eng", own["person"].id, "owns", hidden["ent"].id),
        lambda: alice.assert_fact("room/eng", hidden["person"].id, "owns", 1),
        lambda: alice.assert_fact("room/eng", own["person"].id, "owns", 1, supersedes=hidden["fact"].id),
        lambda: alice.add_claim("room/eng", "x", chunk=hidden["doc"].chunk_ids[0]),
        lambda: alice.add_claim("room/eng", "x", about=[hidden["ent"].id]),
        lambda: alice.add_claims("room/eng", [{"text": "x", "chunk": hidden["doc"].chunk_ids[0]}]),
        lambda: alice.add_claims("room/eng", [{"text": "x", "about": [hidden["ent"].id]}]),
        lambda: alice.traverse([hidden["person"].id]),
        lambda: alice.neighbours(hidden["doc"].chunk_ids[0]),
    ]
    for n, call in enumerate(calls):
        with pytest.raises(NotFoundError):
            call()
        assert state(mem) == before, n
    assert alice.lookup([hidden["fact"].id, hidden["claim"].id, hidden["ent"].id]) == [None, None, None]
    assert mem.lookup([hidden["fact"].id])[0].valid_to is None  # the owner sees it untouched


def test_facts_reads_through_a_view_see_only_the_scope(world: Access, facts) -> None:
    alice = view_of(world, "alice")
    hidden = facts["room/ops"]
    ids = [facts[n]["fact"].id for n in ("room/eng", "project/r", "room/ops")]
    assert [r is not None for r in alice.lookup(ids)] == [True, True, False]
    assert [r is not None for r in alice.hydrate(ids)] == [True, True, False]
    ctx = alice.combined_context("payments launch")
    assert {p.namespace for p in ctx["passages"]} == {("room", "eng"), ("project", "r")}
    assert alice.combined_context("payments launch", namespace_prefix="room")["passages"]
    assert {p.namespace for p in alice.combined_context("payments", namespace_prefix="room")["passages"]} == {
        ("room", "eng")
    }
    said = alice.claims_and_sources_context("payments launch", namespace_prefix="project")
    assert {c.namespace for g in said["claims"] for c in g.claims} == {("project", "r")}
    assert alice.resolve_entity("Payments", namespace_prefix="room/eng")["entities"][0].entity.namespace == (
        "room",
        "eng",
    )
    with pytest.raises(ForbiddenError):
        alice.resolve_entity("Payments", namespace_prefix="room/ops")
    with pytest.raises(ForbiddenError):
        alice.combined_context("payments", namespace_prefix="room/ops")
    chunk = facts["room/eng"]["doc"].chunk_ids[0]
    assert [c.id for c in alice.neighbours(chunk, 0, 1)] == facts["room/eng"]["doc"].chunk_ids
    with pytest.raises(NotFoundError):
        alice.neighbours(hidden["doc"].chunk_ids[0])
    assert alice.traverse([facts["room/eng"]["person"].id])["paths"]
    root = view_of(world, "root")
    assert all(r is not None for r in root.lookup(ids))  # an admin reads the facts layer by id, everywhere
    assert root.resolve_entity("Payments", namespace_prefix="room/ops").status == "resolved"


# -- the query space through a view ----------------------------------------------------


def test_query_space_rows_are_the_agents_own(world: Access, mem: Any) -> None:
    alice, bob, root = (view_of(world, n) for n in ("alice", "bob", "root"))
    sql = "SELECT namespace FROM items ORDER BY namespace"
    assert alice.query(sql).rows == [["agent/alice"], ["project/r"], ["project/w"], ["room/eng"]]
    assert bob.query(sql).rows == [["agent/bob"], ["room/ops"]]
    assert len(root.query(sql).rows) == 7 and "_memlane" not in str(root.query(sql).rows)
    assert alice.query(sql, max_rows=2).rows == [["agent/alice"], ["project/r"]]
    assert alice.explain_query(sql) is not None
    assert alice.describe_query_space() == mem.describe_query_space()
    assert alice.search_query_space("namespace") == mem.search_query_space("namespace")


def test_saved_queries_belong_to_their_author(world: Access) -> None:
    alice, bob, root = (view_of(world, n) for n in ("alice", "bob", "root"))
    saved = alice.save_query("mine", "SELECT count(*) FROM items", "count")
    assert saved.author == "alice" and saved.description == "count"
    assert alice.run_saved_query("mine").rows == [[4]] and bob.run_saved_query("mine").rows == [[2]]
    assert bob.run_saved_query("mine", max_rows=1).rows == [[2]]
    with pytest.raises(ForbiddenError, match="belongs to 'alice'"):
        bob.save_query("mine", "SELECT 1")
    with pytest.raises(ForbiddenError, match="only its author may delete it"):
        bob.delete_saved_query("mine")
    assert [q.name for q in alice.saved_queries()] == ["mine"]
    assert alice.save_query("mine", "SELECT 2").sql == "SELECT 2"  # its author replaces it
    assert root.save_query("mine", "SELECT 3").author == "root"  # an admin may replace any
    assert [q.sql for q in bob.saved_queries()] == ["SELECT 3"]
    assert root.delete_saved_query("mine") is True
    assert alice.saved_queries() == []


# -- defaults and pass-through arguments of the view ------------------------------------


def test_view_reads_default_to_the_memorys_limits(world: Access, mem: Any) -> None:
    alice = view_of(world, "alice")
    for n in ("agent/alice", "room/eng", "project/w"):
        alice.put_many([{"namespace": n, "key": f"bulk.k{i:03d}", "value": f"{WORD} bulk {i}"} for i in range(40)])
    assert len(alice.fetch("topic")) == 4 and len(alice.fetch("bulk.k001")) == 3
    for n in ("room/eng", "agent/alice"):
        for i in range(6):
            alice.put(n, f"dup.{i}", 1)
            alice.put(n, "dup", i)
    page = alice.list(key_prefix="bulk")
    assert len(page.items) == 100 and page.next_cursor is not None  # list: 100 by default
    assert len(alice.search(WORD).hits) == 10 and alice.search(WORD).params["limit"] == 10
    assert len(alice.recall(WORD).hits) == 10
    one_prefix = alice.search(WORD, namespace_prefix="room/eng")
    assert len(one_prefix.hits) == 10 and one_prefix.truncated
    assert len(alice.recall(WORD, namespace_prefix="room/eng").hits) == 10
    fetched = [alice.put(f"agent/alice/f{i}", "same.key", i) for i in range(12)]
    assert len(alice.fetch("same.key")) == 10 and len(fetched) == 12
    assert len(alice.fetch("same.key", namespace_prefix="agent/alice")) == 10


def test_view_summarize_defaults_to_depth_three(world: Access, mem: Any) -> None:
    alice = view_of(world, "alice")
    alice.put("room/eng", "a.b.c.d", 1)
    alice.put("room/eng", "a.b.c.e", 1)
    alice.put("agent/alice", "a.b.x.y", 1)
    assert alice.summarize()["room/eng"] == {"a.b.c": 2, "topic": 1}
    assert alice.summarize()["agent/alice"] == {"a.b.x": 1, "topic": 1}
    assert alice.summarize("room/eng") == {"room/eng": {"a.b.c": 2, "topic": 1}}
    assert alice.summarize("room/eng", depth=4, key_prefix="a") == {"room/eng": {"a.b.c.d": 1, "a.b.c.e": 1}}
    assert alice.summarize(key_prefix="a", depth=2) == {"agent/alice": {"a.b": 1}, "room/eng": {"a.b": 2}}


def test_view_writes_pass_their_options_to_the_memory(world: Access, mem: Any, clock: Clock) -> None:
    alice = view_of(world, "alice")
    item = alice.put("room/eng", "opt", {"v": 1}, text="findable words", metadata={"m": 1}, ttl=60)
    assert (item.metadata, item.expires_at is not None) == ({"m": 1}, True)
    assert [h.key for h in alice.search("findable", namespace_prefix="room/eng").hits] == ["opt"]
    with pytest.raises(ConflictError):
        alice.put("room/eng", "opt", 2, if_absent=True)
    replaced = alice.put_many([{"namespace": "room/eng", "key": "opt", "value": 3}])  # replaces by default
    assert replaced[0].value == 3 and replaced[0].version == 2
    alice.put("agent/alice", "short", 1, ttl=60)
    clock.tick(61)
    assert alice.get("agent/alice", "short") is None and alice.get("room/eng", "opt").value == 3


def test_view_ranked_reads_pass_their_options_to_the_memory(world: Access) -> None:
    alice = view_of(world, "alice")
    many = alice.search(WORD, limit=5, channels=["lexical"])
    assert many.params["channels"] == ["lexical"]
    one = alice.search(WORD, namespace_prefix="room/eng", channels=["lexical"])
    assert one.params["channels"] == ["lexical"]
    keyed = alice.recall(WORD, key="topic", namespace_prefix="project")
    assert keyed.params["mode"] == "keyed" and {h.key for h in keyed.hits} == {"topic"}
    assert alice.recall(WORD, limit=3, mode="lexical").params["mode"] == "lexical"
    assert alice.recall(WORD, namespace_prefix="room/eng", mode="lexical").params["mode"] == "lexical"


def test_view_facts_calls_pass_their_options(world: Access, facts) -> None:
    alice = view_of(world, "alice")
    eng = facts["room/eng"]
    ent = alice.add_entity("agent/alice", "Lee", kind="person", profile="a person")
    assert (ent.kind, ent.profile) == ("person", "a person")
    fact = alice.assert_fact("agent/alice", ent.id, "owns", eng["ent"].id, source="note-1")
    assert fact.sources == ["note-1"]
    doc = alice.add_document("agent/alice", "t", ["one", "two", "three", "four", "five"], source="src-1")
    assert doc.source == "src-1"
    middle = doc.chunk_ids[2]
    assert [c.id for c in alice.neighbours(middle)] == doc.chunk_ids[1:4]  # one each side by default
    assert [c.id for c in alice.neighbours(middle, 2, 0)] == doc.chunk_ids[0:3]
    new = alice.add_claim("agent/alice", "newer claim", chunk=doc.chunk_ids[0])
    old = alice.add_claim("agent/alice", "older claim", chunk=doc.chunk_ids[1])
    assert alice.supersede_claim(old.id, new.id).superseded_by == new.id
    assert alice.traverse([ent.id], hops=1).params["hops"] == 1
    assert alice.query("SELECT author FROM entities WHERE name = 'Lee'").rows == [["alice"]]  # written as alice
    assert alice.query("SELECT author FROM documents WHERE title = 't'").rows == [["alice"]]
    assert alice.facts_context("owns", limit=1).params["limit"] == 1
    assert alice.claims_and_sources_context("claim", k=3).params["k"] == 3
    assert alice.combined_context("claim", hops=0).params["hops"] == 0


def test_view_queries_pass_their_limits(world: Access) -> None:
    alice = view_of(world, "alice")
    for i in range(8):
        alice.put("agent/alice", f"row.{i}", i)
    big = "SELECT a.key FROM items a, items b, items c"  # 12 ** 3 visible rows
    res = alice.query(big)
    assert res.row_count == 1000 and res.truncated_by == "max_rows"
    assert res.limits["max_rows"] == 1000 and res.limits["timeout_ms"] == 2000
    assert alice.query(big, max_rows=5, timeout_ms=300).limits | {"max_bytes": 0} == {
        "max_rows": 5,
        "timeout_ms": 300,
        "max_bytes": 0,
    }
    assert alice.query("SELECT key FROM items WHERE key = ?", ["row.3"]).rows == [["row.3"]]
    assert alice.explain_query("SELECT key FROM items WHERE key = ?", ["row.3"]).valid is True
    with pytest.raises(ValidationError, match="1 \\? parameter"):  # the agent's values are checked, not dropped
        alice.explain_query("SELECT key FROM items WHERE key = ?", ["row.3", "row.4"])
    saved = alice.save_query("wide", big)
    assert saved.description == "" and saved.name == "wide" and saved.sql == big
    assert alice.run_saved_query("wide").row_count == 1000
    assert alice.run_saved_query("wide").limits == res.limits  # the same defaults as query
    assert alice.run_saved_query("wide", max_rows=7, timeout_ms=500).limits["max_rows"] == 7
    assert alice.run_saved_query("wide", max_rows=7, timeout_ms=500).limits["timeout_ms"] == 500
    alice.save_query("one", "SELECT key FROM items WHERE key = :k")
    assert alice.run_saved_query("one", {"k": "row.4"}).rows == [["row.4"]]


def test_access_changes_never_create_items(acc: Access, mem: Any) -> None:
    # each kind of change is the last one made to some record, so every writer is checked
    mem.put("scratch", "k", "one ordinary item")
    before = (mem.stats().active_items, mem.stats().history_versions, mem.list(limit=1000).items, mem.namespaces())
    for n in ("alice", "bob", "carol", "dave", "erin"):
        acc.create_agent(n)
    for r in ("eng", "ops", "empty"):
        acc.create_room(r)
    acc.add_member("eng", "alice")
    acc.add_member("ops", "bob")
    acc.remove_member("ops", "bob")
    acc.grant("alice", "project/x", "write")
    acc.grant("bob", "project/y", "read")
    acc.revoke("bob", "project/y")
    acc.rotate_token("carol")
    acc.delete_agent("erin")
    after = (mem.stats().active_items, mem.stats().history_versions, mem.list(limit=1000).items, mem.namespaces())
    assert after == before and mem.namespaces() == [("scratch",)]
    for word in ("alice", "bob", "carol", "dave", "eng", "ops", "members", "grants", "project", "write", "token"):
        assert mem.search(word, limit=50).hits == [], word
    assert acc.count() == 4 + 3 + 1 + 1  # agents, rooms, members, grants: rows of their own tables


def test_every_agent_and_room_is_listed_past_a_page(acc: Access) -> None:
    names = [f"a{i:03d}" for i in range(101)]
    acc.mem.put_many([{"namespace": "scratch", "key": n, "value": 1} for n in names])  # the store is not empty either
    for n in names:
        acc.create_agent(n)
        acc.create_room(f"r{n}")
    acc.add_member("ra100", "a100")
    assert [a.name for a in acc.agents()] == names
    assert [r["name"] for r in acc.rooms()] == [f"r{n}" for n in names]
    assert acc.agent("a100").rooms == ("ra100",)
    assert acc.scope(acc.agent("a100")).can_write(("room", "ra100", "x"))


def test_single_prefix_list_pages_with_the_cursor(world: Access, mem: Any) -> None:
    alice = view_of(world, "alice")
    for i in range(5):
        alice.put("room/eng", f"p.{i}", i)
    seen, cursor = [], None
    for _ in range(10):
        page = alice.list("room/eng", key_prefix="p", limit=2, cursor=cursor)
        seen += [i.key for i in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [f"p.{i}" for i in range(5)]


def test_a_large_page_takes_everything_from_one_crowded_prefix(world: Access) -> None:
    alice = view_of(world, "alice")
    alice.put_many([{"namespace": "room/eng", "key": f"many.{i:03d}", "value": i} for i in range(130)])
    alice.put("agent/alice", "many.x", 1)
    page = alice.list(key_prefix="many", limit=200)
    assert len(page.items) == 131 and page.next_cursor is None
    first = alice.list(key_prefix="many", limit=120)
    rest = alice.list(key_prefix="many", limit=120, cursor=first.next_cursor)
    assert len(first.items) == 120 and len(rest.items) == 11 and rest.next_cursor is None


def test_merged_search_is_truncated_when_the_union_exceeds_the_limit(world: Access) -> None:
    alice = view_of(world, "alice")  # one matching item in each of four readable prefixes
    env = alice.search(WORD, limit=3)
    assert len(env.hits) == 3 and env.truncated is True
    assert alice.search(WORD, limit=4).truncated is False
    assert alice.recall(WORD, limit=3).truncated is True
    assert alice.recall(WORD, key="topic", limit=3).truncated is True
    assert alice.recall(WORD, key="topic", limit=4).truncated is False
    for e in (env, alice.recall(WORD, key="topic", limit=3)):
        assert e.timings and all(isinstance(t, float) for t in e.timings.values())
        assert e.timings["total_ms"] > 0


def test_facts_reads_name_a_malformed_prefix(world: Access) -> None:
    for who in ("alice", "root"):
        view = view_of(world, who)
        for method, bad in (
            ("facts_context", "a//b"),
            ("resolve_entity", 5),
            ("combined_context", "a//b"),
            ("claims_and_sources_context", ["a", ""]),
        ):
            with pytest.raises(ValidationError) as e:
                getattr(view, method)("x", namespace_prefix=bad)
            assert e.value.field == "namespace_prefix", (who, method)


def test_an_admins_query_space_covers_facts_in_namespaces_without_items(world: Access, mem: Any) -> None:
    mem.add_entity("solo/ns", "Loner", kind="person")
    root, alice = view_of(world, "root"), view_of(world, "alice")
    assert root.query("SELECT name FROM entities WHERE namespace = 'solo/ns'").rows == [["Loner"]]
    assert alice.query("SELECT name FROM entities WHERE namespace = 'solo/ns'").rows == []
    assert root.resolve_entity("Loner").status == "resolved"
    assert alice.resolve_entity("Loner").status == "none"


def test_merged_search_ranks_the_whole_scope_as_one_search_would(acc: Access, mem: Any) -> None:
    acc.create_agent("alice")
    acc.create_room("eng")
    acc.add_member("eng", "alice")
    for i in range(3):
        mem.put("room/eng", f"strong.{i}", f"{WORD} {WORD} {WORD} care")
    mem.put("agent/alice", "weak", f"a long note on gardens, the weather, many other things and one {WORD}")
    alice = acc.view(acc.agent("alice"))
    owner = [(h.namespace, h.key) for h in mem.search(WORD).hits]  # everything matching is alice's to see
    assert [(h.namespace, h.key) for h in alice.search(WORD).hits] == owner


# -- the access tables: deletion, the log, pages, counts ------------------------------------


def test_delete_agent_removes_its_memberships_grants_and_token_but_not_its_items(acc: Access, mem: Any) -> None:
    _, token = acc.create_agent("alice")
    _, keep = acc.create_agent("bob")
    for r in ("eng", "ops"):
        acc.create_room(r)
        acc.add_member(r, "alice")
    acc.add_member("eng", "bob")
    acc.grant("alice", "project/x", "write")
    acc.grant("bob", "project/x", "read")
    acc.view(acc.agent("alice")).put("agent/alice", "note", "mine")
    assert acc.count() == 2 + 2 + 3 + 2
    assert acc.authenticate(token) is not None  # cached before the deletion
    assert acc.delete_agent("alice") is True
    assert acc.authenticate(token) is None and acc.authenticate(keep) == acc.agent("bob")
    with pytest.raises(NotFoundError, match="no agent named 'alice'"):
        acc.agent("alice")
    assert acc.rooms() == [{"name": "eng", "members": ["bob"]}, {"name": "ops", "members": []}]
    assert acc.agent("bob").grants == (Grant(("project", "x"), "read"),)  # another agent's grant stays
    assert acc.count() == 1 + 2 + 1 + 1
    assert mem.get("agent/alice", "note").value == "mine"  # items stay
    tail = [(c.action, c.agent, c.room) for c in acc.history(agent="alice")][-3:]
    assert tail == [
        ("remove_member", "alice", "eng"),
        ("remove_member", "alice", "ops"),
        ("delete_agent", "alice", None),
    ]
    before = state(mem)
    assert acc.delete_agent("alice") is False and acc.delete_agent("ghost") is False
    assert state(mem) == before  # nothing logged for a missing agent
    with pytest.raises(ValidationError) as e:
        acc.delete_agent("a/b")
    assert e.value.field == "agent"
    again, token2 = acc.create_agent("alice")  # the name is free again, with nothing of the old agent
    assert again == Agent("alice") and acc.authenticate(token2) == again and acc.authenticate(token) is None


def test_the_log_records_every_change_in_order_with_its_actor(acc: Access, mem: Any, clock: Clock) -> None:
    by_root = Access(mem, actor="root")
    start = clock.now
    acc.create_agent("alice", admin=True)
    clock.tick()
    by_root.create_agent("bob")
    by_root.create_room("eng")
    by_root.create_room("eng")  # idempotent: not logged again
    by_root.add_member("eng", "bob")
    by_root.add_member("eng", "bob")  # already a member: not logged
    by_root.grant("bob", ("project", "x"), "read")
    by_root.grant("bob", "project/x", "write")  # a replacement is logged
    by_root.revoke("bob", "project/x")
    by_root.revoke("bob", "project/x")  # nothing to revoke: not logged
    by_root.rotate_token("bob")
    by_root.remove_member("eng", "bob")
    by_root.remove_member("eng", "bob")  # not a member: not logged
    log = acc.history()
    got = [(c.actor, c.action, c.agent, c.room, c.prefix, c.mode) for c in log]
    assert got == [
        (None, "create_agent", "alice", None, None, "admin"),
        ("root", "create_agent", "bob", None, None, None),
        ("root", "create_room", None, "eng", None, None),
        ("root", "add_member", "bob", "eng", None, None),
        ("root", "grant", "bob", None, ("project", "x"), "read"),
        ("root", "grant", "bob", None, ("project", "x"), "write"),
        ("root", "revoke", "bob", None, ("project", "x"), None),
        ("root", "rotate_token", "bob", None, None, None),
        ("root", "remove_member", "bob", "eng", None, None),
    ]
    seqs = [c.seq for c in log]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert log[0].at == start and log[1].at == start + timedelta(seconds=1) and log[1].at.tzinfo is not None
    assert log[4].to_dict() == {
        "seq": log[4].seq,
        "at": log[4].at.isoformat(),
        "actor": "root",
        "action": "grant",
        "agent": "bob",
        "room": None,
        "prefix": "project/x",
        "mode": "read",
    }
    assert log[0].to_dict()["prefix"] is None
    assert [c.action for c in acc.history(room="eng")] == ["create_room", "add_member", "remove_member"]
    assert [c.action for c in acc.history(agent="bob", room="eng")] == ["add_member", "remove_member"]
    assert acc.history(agent="alice") == log[:1]
    assert acc.history(limit=2) == log[:2] and acc.history(after=log[2].seq) == log[3:]
    assert acc.history(after=log[2].seq, limit=1) == log[3:4] and acc.history(after=log[-1].seq) == []
    assert acc.history(agent="ghost") == []
    for bad, field in (({"limit": 0}, "limit"), ({"limit": 10_001}, "limit"), ({"agent": "a/b"}, "agent")):
        with pytest.raises(ValidationError) as e:
            acc.history(**bad)
        assert e.value.field == field
    with pytest.raises(ValidationError) as e:
        acc.history(room="")
    assert e.value.field == "room"
    assert len(acc.history(limit=10_000)) == len(log)


def test_members_at_replays_the_log(acc: Access, clock: Clock) -> None:
    for n in ("alice", "bob", "carol"):
        acc.create_agent(n)
    acc.create_room("eng")
    acc.create_room("ops")
    t0 = clock.now
    clock.tick(10)
    acc.add_member("eng", "alice")
    acc.add_member("ops", "carol")  # another room's changes never count
    acc.grant("bob", "room/eng", "write")  # a grant on the room's prefix is no membership
    t1 = clock.now
    clock.tick(10)
    acc.add_member("eng", "bob")
    acc.remove_member("eng", "alice")
    t2 = clock.now
    clock.tick(10)
    acc.delete_agent("bob")
    acc.add_member("eng", "alice")
    assert acc.members_at("eng", t0) == []
    assert acc.members_at("eng", t1) == ["alice"] and acc.members_at("eng", t1 - timedelta(seconds=1)) == []
    assert acc.members_at("eng", t2) == ["bob"]
    assert acc.members_at("eng", clock.now) == ["alice"]
    assert acc.members_at("ops", clock.now) == ["carol"] and acc.members_at("nowhere", clock.now) == []
    for bad in (datetime(2026, 1, 1), "2026-01-01", None):
        with pytest.raises(ValidationError, match="aware datetime") as e:
            acc.members_at("eng", bad)  # type: ignore[arg-type]
        assert e.value.field == "at"
    with pytest.raises(ValidationError) as e:
        acc.members_at("a/b", clock.now)
    assert e.value.field == "room"


def test_members_at_takes_an_aware_datetime_in_any_zone(acc: Access, clock: Clock) -> None:
    acc.create_agent("alice")
    acc.create_room("eng")
    before = clock.now
    clock.tick(3600)
    acc.add_member("eng", "alice")
    plus5 = timezone(timedelta(hours=5))
    assert acc.members_at("eng", clock.now.astimezone(plus5)) == ["alice"]
    assert acc.members_at("eng", before.astimezone(plus5)) == []  # 17:00+05:00 is 12:00 UTC: before the add


def test_agent_and_room_pages_follow_their_cursors(acc: Access) -> None:
    names = [f"a{i}" for i in range(7)]
    for n in names:
        acc.create_agent(n)
        acc.create_room(f"r{n}")
        acc.add_member(f"r{n}", n)
    acc.add_member("ra3", "a0")
    for page_size in (1, 2, 3, 6, 7, 8):
        seen, cursor, pages = [], None, 0
        while True:
            page = acc.agent_page(limit=page_size, cursor=cursor)
            assert 0 < len(page.entries) <= page_size
            seen += page.entries
            pages += 1
            if page.next_cursor is None:
                break
            assert page.next_cursor == page.entries[-1].name
            cursor = page.next_cursor
        assert [a.name for a in seen] == names and pages == -(-7 // page_size)
        assert seen == [acc.agent(n) for n in names]  # rooms and grants loaded on every page
        rooms, cursor = [], None
        while True:
            page = acc.room_page(limit=page_size, cursor=cursor)
            assert 0 < len(page.entries) <= page_size
            rooms += page.entries
            if page.next_cursor is None:
                break
            assert page.next_cursor == page.entries[-1]["name"]
            cursor = page.next_cursor
        assert rooms == acc.rooms()
    assert acc.room_page(limit=3, cursor="ra2").entries == [
        {"name": "ra3", "members": ["a0", "a3"]},
        {"name": "ra4", "members": ["a4"]},
        {"name": "ra5", "members": ["a5"]},
    ]
    assert acc.agents(limit=2, cursor="a4") == [acc.agent("a5"), acc.agent("a6")]
    assert [r["name"] for r in acc.rooms(limit=2, cursor="ra4")] == ["ra5", "ra6"]
    assert acc.agent_page(cursor="a6") == acc.room_page(cursor="ra6") == type(acc.room_page())([], None)
    assert len(acc.agent_page().entries) == 7 and acc.agent_page().next_cursor is None
    for call in (acc.agent_page, acc.room_page, acc.agents, acc.rooms):
        for bad in (0, 10_001, "5"):
            with pytest.raises(ValidationError) as e:
                call(limit=bad)
            assert e.value.field == "limit"


def test_page_defaults_are_a_thousand_and_lists_ten_thousand(acc: Access, mem: Any) -> None:
    at = "2026-01-01T00:00:00+00:00"
    with mem.store.session(write=True) as s:  # bulk set-up; every check goes through the API
        s.many("INSERT INTO access_rooms (name, created_at) VALUES (?, ?)", [(f"r{i:05d}", at) for i in range(1001)])
        s.many(
            "INSERT INTO access_agents (name, admin, token_hash, created_at) VALUES (?, ?, ?, ?)",
            [(f"a{i:05d}", False, f"h{i}", at) for i in range(1001)],
        )
    page = acc.room_page()
    assert len(page.entries) == 1000 and page.next_cursor == "r00999"
    assert acc.room_page(cursor=page.next_cursor).entries == [{"name": "r01000", "members": []}]
    agents = acc.agent_page()
    assert len(agents.entries) == 1000 and agents.next_cursor == "a00999"
    assert len(acc.rooms()) == 1001 and len(acc.agents()) == 1001
    with mem.store.session(write=True) as s:
        s.many(
            "INSERT INTO access_log (at, action, room) VALUES (?, 'migrated', ?)",
            [(at, f"r{i:05d}") for i in range(1001)],
        )
    log = acc.history()
    assert len(log) == 1000 and log[-1].room == "r00999" and acc.history(after=log[-1].seq)[0].room == "r01000"


def test_has_admin_and_count_follow_the_tables(acc: Access) -> None:
    assert acc.has_admin() is False and acc.count() == 0
    acc.create_agent("alice")
    assert acc.has_admin() is False and acc.count() == 1
    acc.create_agent("root", admin=True)
    assert acc.has_admin() is True
    acc.create_room("eng")
    acc.add_member("eng", "alice")
    acc.grant("alice", "p", "read")
    assert acc.count() == 5
    acc.delete_agent("root")
    assert acc.has_admin() is False and acc.count() == 4
    with pytest.raises(ValidationError) as e:
        acc.create_agent("x", admin=1)  # type: ignore[arg-type]
    assert e.value.field == "admin" and str(e.value) == "admin: must be true or false, not 1"


def test_authentication_follows_every_change_made_through_any_access_object(acc: Access, mem: Any) -> None:
    _, token = acc.create_agent("alice")
    other = Access(mem)  # another process sharing the database
    assert acc.authenticate(token) == Agent("alice")
    other.create_room("eng")
    other.add_member("eng", "alice")
    assert acc.authenticate(token).rooms == ("eng",)
    other.grant("alice", "p", "write")
    assert acc.authenticate(token).grants == (Grant(("p",), "write"),)
    assert acc.authenticate("ml_unknown") is None
    _, later = other.create_agent("bob")  # an unknown token cached as None is looked up again after a change
    assert acc.authenticate(later) == Agent("bob")
    other.revoke("alice", "p")
    other.remove_member("eng", "alice")
    assert acc.authenticate(token) == Agent("alice")
    fresh = other.rotate_token("alice")
    assert acc.authenticate(token) is None and acc.authenticate(fresh) == Agent("alice")
    assert acc.authenticate(fresh) is acc.authenticate(fresh)  # cached while nothing changes


# -- the gate on expensive work ----------------------------------------------------------


def test_a_view_with_a_gate_refuses_expensive_reads_only(world: Access, mem: Any, facts) -> None:
    """Over its fair share while another agent waits, an agent's expensive reads are refused; nothing else is."""
    from gating import over_share
    from memlane.core.access import Gate
    from memlane.values.errors import BusyError

    gate = Gate(per_agent=1, capacity=2)
    gated = Access(mem, gate=gate)
    alice, bob = gated.view(gated.agent("alice")), gated.view(gated.agent("bob"))
    assert alice.search(WORD).hits and alice.query("SELECT 1").rows == [[1]]  # a free gate lets them through
    with over_share(gate, "alice"):
        expensive = [
            lambda: alice.search(WORD),
            lambda: alice.recall(WORD),
            lambda: alice.resolve_entity("Payments"),
            lambda: alice.facts_context("payments"),
            lambda: alice.claims_and_sources_context("payments"),
            lambda: alice.combined_context("payments"),
            lambda: alice.traverse([facts["room/eng"]["person"].id]),
            lambda: alice.query("SELECT 1"),
            lambda: alice.explain_query("SELECT 1"),
        ]
        for call in expensive:
            with pytest.raises(BusyError, match="its fair share is 1"):
                call()
        assert alice.get("room/eng", "topic") is not None and alice.list().items and alice.fetch("topic")
        assert alice.namespaces() and alice.summarize() and alice.lookup([facts["room/eng"]["fact"].id])[0]
        ungated = gated.view(gated.agent("alice"), gated=False)  # e.g. an HTTP route gated before it runs
        assert ungated.search(WORD).hits and ungated.query("SELECT 1").rows == [[1]]
    assert alice.search(WORD).hits and bob.search(WORD).hits
    assert gate._running == {}


# -- one statement over several prefixes ------------------------------------------------


def test_reads_over_several_prefixes_are_one_read_of_the_scope(world: Access, mem: Any, clock: Clock) -> None:
    alice = view_of(world, "alice")
    clock.tick()
    for n in ("room/eng", "agent/alice", "project/r", "project/w/a"):
        for i in range(3):
            mem.put(n, f"q.{i}", f"{WORD} {i}")
    mem.put("room/ops", "q.0", f"{WORD} hidden")
    mem.put("project/x", "q.0", f"{WORD} hidden")
    readable = ["agent/alice", "room/eng", "project/w", "project/r"]
    # list: one address order over the scope, the owner's list restricted to it, pages joined by cursors
    owner = [i for i in mem.list(key_prefix="q", limit=1000).items if namespace_text(i.namespace) not in BOB_OR_HIDDEN]
    assert alice.list(key_prefix="q", limit=1000).items == owner
    for size in (1, 5, 11, 12):
        seen, cursor = [], None
        while True:
            page = alice.list(key_prefix="q", limit=size, cursor=cursor)
            seen += page.items
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == owner, size
    # fetch: the owner's keyed read, narrowed
    assert alice.fetch("q.0", limit=100) == [
        i for i in mem.fetch("q.0", limit=100) if namespace_text(i.namespace) not in BOB_OR_HIDDEN
    ]
    # search: one ranking, scores strictly from one fusion
    env = alice.search(WORD, limit=100, channels=["lexical"])
    assert env.params["searched_prefixes"] == readable
    ranks = [h.ranks["lexical"] for h in env.hits]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    assert {namespace_text(h.namespace) for h in env.hits}.isdisjoint(BOB_OR_HIDDEN)
    one = alice.search(WORD, namespace_prefix="project/w", limit=100)
    assert one.params["namespace_prefix"] == "project/w" and "searched_prefixes" not in one.params
    assert alice.recall(WORD, limit=100).params["searched_prefixes"] == readable
    # namespaces and summarize: the owner's, restricted
    assert alice.namespaces() == [n for n in mem.namespaces() if namespace_text(n) not in BOB_OR_HIDDEN]
    assert alice.summarize() == {k: v for k, v in mem.summarize().items() if k not in BOB_OR_HIDDEN}


BOB_OR_HIDDEN = {"agent/bob", "room/ops", "project/x"}


def test_an_agent_loaded_just_before_a_change_is_never_served_after_it(acc: Access, mem: Any) -> None:
    """A request loads alice while another process changes her rooms and another request moves the cache on.

    The agent it loaded is the one from before the change; it must not be served to the next request.
    """
    _, alice = acc.create_agent("alice")
    _, bob = acc.create_agent("bob")
    acc.create_room("eng")
    acc.add_member("eng", "alice")
    other = Access(mem)  # another process sharing the database
    session = acc._session
    interleaved: list[bool] = []

    @contextmanager
    def read_then_interleave(*, write: bool = False) -> Iterator[Any]:
        with session(write=write) as s:
            yield s  # alice is read here, before the change: still in eng
        if not interleaved:  # after the read, before the request caches what it read
            interleaved.append(True)
            other.remove_member("eng", "alice")  # the change commits
            assert acc.authenticate(bob) == Agent("bob")  # another request sees the new head first

    acc._session = read_then_interleave  # type: ignore[method-assign]
    assert acc.authenticate(alice) == Agent("alice", rooms=("eng",))  # what that request resolved
    assert acc.authenticate(alice) == Agent("alice")  # the next request: without the room


def test_the_token_cache_starts_over_rather_than_grow_past_ten_thousand(acc: Access) -> None:
    alice, token = acc.create_agent("alice")
    assert acc.authenticate("ml_unknown") is None  # reads the log's head once
    acc._by_token.update({f"digest{i}": (acc._version, None) for i in range(9_999)})  # as if 10,000 callers had come
    assert acc.authenticate(token) == alice
    assert len(acc._by_token) == 1  # started over, then cached the one just resolved
    assert acc.authenticate(token) == alice and acc.authenticate("ml_unknown") is None


def test_only_a_sha256_of_each_token_is_stored(acc: Access, mem: Any) -> None:
    import hashlib

    _, token = acc.create_agent("alice")
    rotated = acc.rotate_token("alice")
    with mem.store.session() as s:
        stored = s.rows("SELECT token_hash FROM access_agents WHERE name = 'alice'")[0][0]
    assert stored == hashlib.sha256(rotated.encode()).hexdigest() and token not in stored and rotated not in stored
    assert rotated.startswith("ml_") and token.startswith("ml_")


def test_every_access_method_names_its_malformed_argument(acc: Access, mem: Any) -> None:
    acc.create_agent("alice")
    acc.create_room("eng")
    before = state(mem)
    cases = [
        (lambda b: acc.create_agent(b), "name"),
        (lambda b: acc.rotate_token(b), "agent"),
        (lambda b: acc.delete_agent(b), "agent"),
        (lambda b: acc.agent(b), "agent"),
        (lambda b: acc.create_room(b), "room"),
        (lambda b: acc.add_member(b, "alice"), "room"),
        (lambda b: acc.add_member("eng", b), "agent"),
        (lambda b: acc.remove_member(b, "alice"), "room"),
        (lambda b: acc.remove_member("eng", b), "agent"),
        (lambda b: acc.grant(b, "p", "read"), "agent"),
        (lambda b: acc.grant("alice", b, "read"), "prefix"),
        (lambda b: acc.revoke(b, "p"), "agent"),
        (lambda b: acc.revoke("alice", b), "prefix"),
        (lambda b: acc.history(agent=b), "agent"),
        (lambda b: acc.history(room=b), "room"),
        (lambda b: acc.members_at(b, datetime(2026, 1, 1, tzinfo=UTC)), "room"),
    ]
    for n, (call, field) in enumerate(cases):
        for bad in ("a//b" if field == "prefix" else "a/b", "", 5, "_memlane"):
            with pytest.raises(ValidationError) as e:
                call(bad)
            assert e.value.field == field, (n, bad)
    with pytest.raises(NotFoundError) as nf:
        acc.add_member("eng", "ghost")
    assert str(nf.value) == "no agent named 'ghost'; create it with `memlane agent create ghost`"
    with pytest.raises(NotFoundError, match="no room named 'nope'"):
        acc.add_member("nope", "ghost")  # the room is checked first
    assert state(mem) == before


def test_names_that_sort_first_are_listed_on_the_first_page(acc: Access) -> None:
    names = ["-dash", "0zero", "AUpper", "Zed", "_under", "alice"]  # text order puts these before letters
    for n in names:
        acc.create_agent(n)
        acc.create_room(n)
    assert [a.name for a in acc.agents()] == sorted(names) == [a.name for a in acc.agent_page(limit=10).entries]
    assert [r["name"] for r in acc.rooms()] == sorted(names) == [r["name"] for r in acc.room_page(limit=10).entries]
    assert acc.agent_page(limit=1).entries[0].name == "-dash" and acc.room_page(limit=1).next_cursor == "-dash"


def test_an_agents_select_passes_every_condition_and_page_argument(acc: Access, mem: Any) -> None:
    agent = acc.create_agent("sel")[0]
    ns = ("agent", "sel")
    mem.put_many([{"namespace": ns, "key": f"k{i}", "value": {"n": i}} for i in range(5)])
    view = acc.view(agent)
    assert [i.key for i in view.select(ns, where={"n": {"$gte": 3}}, order="address")] == ["k3", "k4"]
    assert [i.key for i in view.select(ns, order="address", limit=2, offset=1)] == ["k1", "k2"]
    assert [i.key for i in view.select(ns, where={"n": 0})] == ["k0"]


@pytest.mark.parametrize("embedder", [None, "fake"])
def test_what_an_agent_cannot_read_never_moves_its_searchs_verdicts(tmp_path: Path, embedder: str | None) -> None:
    """The relevance decision counts words in the searched scope only: a store whose unreadable namespaces are
    full of the query's words answers alice exactly as one without them (notes, verdicts, reasons), so no
    answer tells her what another agent's notes say."""
    answers = []
    for name, others in (("plain", 0), ("crowded", 40)):
        with memlane.open(str(tmp_path / f"{name}.db"), embedder=embedder) as m:
            acc = Access(m)
            acc.create_agent("alice")
            acc.create_agent("bob")
            m.put_many(
                [{"namespace": "agent/alice", "key": f"n{i}", "value": text} for i, text in enumerate(ALICE_NOTES)]
            )
            m.put_many(
                [{"namespace": "agent/bob", "key": f"z{i}", "value": f"zebra tomato note {i}"} for i in range(others)]
            )
            alice = view_of(acc, "alice")
            for query in ("zebra", "tomato zebra", "tomato soup"):
                env = alice.search(query, floor=False)
                answers.append(
                    (name, query, env.notes, env.status, [(h.key, h.relevant, h.relevance, h.why) for h in env.hits])
                )
    half = len(answers) // 2
    assert [a[1:] for a in answers[:half]] == [a[1:] for a in answers[half:]]


ALICE_NOTES = ("tomato soup with basil", "the garden needs water", "tomato plants grow tall", "call the plumber")
