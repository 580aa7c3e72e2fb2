"""An agent in many rooms: every broad read stays exact, and its cost grows no faster than its rooms (#27).

With 10,001 rooms every broad read took 11 s: narrowing the scope compared
every prefix with every other, and the query space tested every prefix on
every row. Timing goals live in ``bench/sharing.py``; here the cost is counted
in units that do not depend on the machine:

* Python: the function calls narrowing makes (``sys.setprofile``), for a
  scope and one four times larger: linear work is four times more, quadratic
  sixteen;
* SQLite: the virtual machine instructions of each broad read's statements
  (a progress handler called every 100 instructions), for 1,000 prefixes and
  4,000: linear setup plus a cost per row that does not depend on the number
  of prefixes stays well under four times more, a cost per row and prefix
  (the old query space) reaches it;
* PostgreSQL: the plan. The scope of each statement is a *hashed* SubPlan,
  built once per statement, never a list tested on every row.

And on both backends, at 10,000 rooms and at prefixes of hundreds of lengths,
every broad read answers exactly what the agent may read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import memlane
from memlane.core.access import Access, AgentView, Scope
from memlane.domain.query import run

AT = "2026-01-01T00:00:00+00:00"


def rooms(n: int, start: int = 0) -> list[tuple[str, ...]]:
    return [("room", f"r{i:05d}") for i in range(start, start + n)]


def calls_made(fn: Callable[[], Any]) -> int:
    """Python and C function calls made while ``fn`` runs."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


# look-alike names (a-b sorts between a and a/b) and nesting, as many rooms and grants make them
def lookalike_scope(n: int) -> tuple[tuple[str, ...], ...]:
    out: list[tuple[str, ...]] = [("agent", "me")]
    for i in range(n):
        out += [("room", f"r{i}"), ("room", f"r{i}-b"), ("room", f"r{i}", "inner"), ("proj", f"p{i % 97}", f"x{i}")]
    return tuple(dict.fromkeys(out))


@pytest.mark.parametrize("prefix", [(), ("room",), ("proj",), ("proj", "p3")])
def test_narrowing_is_linear_and_exact(prefix: tuple[str, ...]) -> None:
    small, large = Scope(lookalike_scope(500), ()), Scope(lookalike_scope(2000), ())
    for scope in (small, large):
        got = scope.narrow(prefix)
        # the reference: readable prefixes under the request that no other readable prefix contains
        below = [p for p in scope.read if p[: len(prefix)] == prefix]
        want = [p for p in below if not any(q != p and p[: len(q)] == q for q in below)]
        assert got == want
    cost = [calls_made(lambda s=s: s.narrow(prefix)) for s in (small, large)]
    made = [calls_made(lambda s=s: Scope(s.read, ())) for s in (small, large)]
    assert cost[1] <= 5 * cost[0] + 100, cost  # four times the prefixes: linear is 4x, quadratic 16x
    assert made[1] <= 5 * made[0] + 100, made


def test_can_read_costs_the_same_whatever_the_number_of_prefixes() -> None:
    small, large = Scope(lookalike_scope(50), ()), Scope(lookalike_scope(5000), ())
    namespaces = [("room", "r7", "inner", "deep"), ("room", "r7-c"), ("proj", "p3", "x3", "a", "b"), ("zeta",)]
    for ns in namespaces:
        assert small.can_read(ns) == large.can_read(ns) == any(ns[: len(p)] == p for p in small.read)
        assert calls_made(lambda ns=ns: large.can_read(ns)) == calls_made(lambda ns=ns: small.can_read(ns))


# -- the stores and the query space at scale ------------------------------------------------


class World:
    """A store where the reader may see room/r00000 (a few items) and its own namespace, in ``n`` rooms."""

    def __init__(self, mem: memlane.Memory) -> None:
        self.mem = mem
        mem.put_many(
            [{"namespace": "room/r00000", "key": f"doc{i:03d}", "value": f"orchid note {i}"} for i in range(60)]
        )
        mem.put_many(
            [{"namespace": "agent/reader", "key": f"own{i:02d}", "value": f"own orchid {i}"} for i in range(20)]
        )
        hidden = [("agent", "other"), ("room", "r00000-b"), ("room-x",), ("team", "t")]
        mem.put_many(
            [{"namespace": ns, "key": f"doc{i:03d}", "value": f"hidden orchid {i}"} for ns in hidden for i in range(40)]
        )
        self.visible = sorted(
            [(("room", "r00000"), f"doc{i:03d}") for i in range(60)]
            + [(("agent", "reader"), f"own{i:02d}") for i in range(20)]
        )

    def view(self, n: int) -> AgentView:
        read = (("agent", "reader"), *rooms(n))
        return AgentView(self.mem, Scope(read, read), "reader")


BROAD: dict[str, Callable[[AgentView], list[tuple[tuple[str, ...], str]]]] = {
    "list": lambda v: [(i.namespace, i.key) for i in v.list(limit=1000).items],
    "fetch": lambda v: [(i.namespace, i.key) for i in v.fetch("doc001", limit=100)],
    "select": lambda v: [(i.namespace, i.key) for i in v.select(limit=1000, order="address")],
    "search": lambda v: [(h.namespace, h.key) for h in v.search("orchid", limit=1000, channels=["lexical"]).hits],
    "namespaces": lambda v: [(ns, "") for ns in v.namespaces()],
    "summarize": lambda v: [(tuple(ns.split("/")), "") for ns in v.summarize()],
    "query": lambda v: [
        (tuple(r[0].split("/")), r[1]) for r in v.query("SELECT namespace, key FROM items", max_rows=10_000).rows
    ],
}


def expected(world: World, name: str) -> list[tuple[tuple[str, ...], str]]:
    if name == "fetch":
        return [(("room", "r00000"), "doc001")]
    if name in ("namespaces", "summarize"):
        return [(("agent", "reader"), ""), (("room", "r00000"), "")]
    return world.visible


@pytest.fixture
def world(store_url: str) -> Iterator[World]:
    with memlane.open(store_url, embedder="fake", indexing="sync") as mem:
        yield World(mem)


def test_every_broad_read_is_exact_for_an_agent_in_ten_thousand_rooms(world: World) -> None:
    for n in (1, 10_000):
        view = world.view(n)
        for name, read in BROAD.items():
            assert sorted(read(view)) == expected(world, name), (n, name)
        hits = view.search("orchid", limit=1000)
        assert sorted((h.namespace, h.key) for h in hits.hits) == world.visible and hits.params["searched_prefixes"]


def test_prefixes_of_hundreds_of_lengths_fit_every_statement(world: World) -> None:
    """An admin may grant prefixes of any length: each length is one more test, and they nest as a tree."""
    grants = [("g", "s" * 128, "x" * i) for i in range(1, 129)] + [
        ("g", "t" * 100, "u" * 128, "v" * i) for i in range(1, 129)
    ]
    grants += [("g", "w" * 128, "w" * 128, "w" * 128, "y" * i) for i in range(1, 129)]
    assert len({len("/".join(p)) for p in grants}) > 350
    world.mem.put(grants[200], "k", "orchid granted")
    read = (("agent", "reader"), ("room", "r00000"), *grants)
    view = AgentView(world.mem, Scope(read, read), "reader")
    want = [*world.visible, (grants[200], "k")]
    for name, read_fn in BROAD.items():
        got = sorted(read_fn(view))
        if name == "fetch":
            assert got == [(("room", "r00000"), "doc001")]
        elif name in ("namespaces", "summarize"):
            assert got == sorted([(("agent", "reader"), ""), (("room", "r00000"), ""), (grants[200], "")])
        else:
            assert got == sorted(want), name


def test_an_agent_in_ten_thousand_rooms_through_the_access_tables(world: World) -> None:
    mem = world.mem
    acc = Access(mem)
    _, token = acc.create_agent("reader")
    with mem.store.session(write=True) as s:  # bulk set-up; every read below goes through the API
        s.many("INSERT INTO access_rooms (name, created_at) VALUES (?, ?)", [(r[1], AT) for r in rooms(10_000)])
        s.many(
            "INSERT INTO access_members (room, agent, added_at) VALUES (?, ?, ?)",
            [(r[1], "reader", AT) for r in rooms(10_000)],
        )
        s.run("INSERT INTO access_log (at, action, agent) VALUES (?, ?, ?)", (AT, "add_member", "reader"))
    agent = acc.authenticate(token)
    assert agent is not None and len(agent.rooms) == 10_000
    assert acc.scope(agent) is acc.scope(agent)  # remembered for the agent
    view = acc.view(agent, gated=False)
    for name, read in BROAD.items():
        assert sorted(read(view)) == expected(world, name), name
    acc.remove_member("r00000", "reader")  # the next request sees the change
    again = acc.authenticate(token)
    assert again is not None and len(again.rooms) == 9_999
    assert [i.namespace for i in acc.view(again).list(limit=1000).items] == [("agent", "reader")] * 20


# -- cost in units that do not depend on the machine ---------------------------------------------


def vm_steps(conns: list[Any], fn: Callable[[], Any]) -> int:
    """SQLite virtual machine instructions (in hundreds) executed on ``conns`` while ``fn`` runs."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    for conn in conns:
        conn.set_progress_handler(tick, 100)
    try:
        fn()
    finally:
        for conn in conns:
            conn.set_progress_handler(None, 100)
    return steps


def filled(mem: memlane.Memory, n: int) -> AgentView:
    """The reader in rooms r00000.. r<n>, each holding one item, beside rooms and agents it may not read."""
    have = {ns for ns in mem.namespaces(("room",))}
    more = [r for r in rooms(n) if r not in have]
    mem.put_many([{"namespace": r, "key": "doc001", "value": f"orchid in {r[1]}"} for r in more])
    mem.put_many([{"namespace": ("room", f"{r[1]}-b"), "key": "doc001", "value": "hidden orchid"} for r in more])
    read = (("agent", "reader"), *rooms(n))
    return AgentView(mem, Scope(read, read), "reader")


@pytest.mark.parametrize("name", BROAD)
def test_sqlite_reads_cost_linear_in_the_rooms_they_read(world: World, backend: str, name: str) -> None:
    """Four times the rooms, each with an item: linear work is about four times more, a cost per row and room 16."""
    if backend != "sqlite":
        pytest.skip("SQLite's instruction counter")
    counts = []
    for n in (500, 2000):
        view = filled(world.mem, n)
        assert len(BROAD[name](view)) >= (2 if name in ("fetch", "namespaces", "summarize") else 80)
        runner = run.runner(world.mem)
        connection = runner._borrow()  # the query space's one connection: count it too
        runner._give_back(connection)
        conns = [world.mem.store._conn, connection._conn]
        BROAD[name](view)  # warm: the scope's parameters and the query space's scope rows are written once
        counts.append(vm_steps(conns, lambda view=view: BROAD[name](view)))
        connection._conn.set_progress_handler(lambda: False, 1000)  # the runner's time cap, inert here
    assert counts[1] <= 6 * counts[0] + 50, counts


def _plans(mem: memlane.Memory, fn: Callable[[], Any]) -> list[str]:
    """PostgreSQL plans of the statements ``fn`` runs that read with a scope of many prefixes."""
    import psycopg

    seen: list[str] = []
    real = psycopg.Cursor.execute

    def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        text = query if isinstance(query, str) else str(query)
        if "string_to_array" in text and text.lstrip().upper().startswith(("SELECT", "WITH")):
            plan = real(self, "EXPLAIN " + text, params).fetchall()
            seen.append("\n".join(r[0] for r in plan))
        return real(self, query, params, **kw)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        fn()
    finally:
        psycopg.Cursor.execute = real  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("lengths", ["two-lengths", "one-length"])
@pytest.mark.parametrize("name", BROAD)
def test_postgres_tests_the_scope_with_a_hash_built_once_per_statement(
    world: World, backend: str, name: str, lengths: str
) -> None:
    """Every prefix of the same length (a lone IN, which PostgreSQL would rather join) or of several."""
    if backend != "postgres":
        pytest.skip("PostgreSQL's plans")
    view = world.view(2000)
    if lengths == "one-length":  # agent/rdr00 is as long as room/r00000
        read = (("agent", "rdr00"), *rooms(2000))
        view = AgentView(world.mem, Scope(read, read), "rdr00")
    if name == "query":  # the views' own rule, planned for the caller's scope
        plans = ["\n".join(view.explain_query("SELECT namespace, key FROM items").plan)]
    else:
        plans = _plans(world.mem, lambda: BROAD[name](view))
    assert plans, name
    for plan in plans:
        assert "hashed SubPlan" in plan, plan
        tested = [line for line in plan.splitlines() if "SubPlan" in line and not line.strip().startswith("SubPlan")]
        assert all("hashed SubPlan" in line for line in tested), plan  # none is run again for each row
