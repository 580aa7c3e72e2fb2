"""Shared memory that cannot leak: the scope inside every statement, access records in tables.

What this file guards, on SQLite and PostgreSQL:

* confirm re-reads candidates by stable id inside the caller's scope, so an item
  deleted and replaced between nominate and confirm (SQLite reuses row numbers)
  never reaches another agent;
* every read of an agent, for random agents, rooms, grants, items, deletes and
  re-inserts, equals a brute-force model of what the agent may see (hypothesis);
* a search over several readable prefixes is one ranking, not a merge;
* concurrent membership changes and grants are all kept, and removals stick;
* access records live in tables: old ``_memlane`` items are converted, the log
  answers who was in a room when, export/import carry them, 20,000 rooms work;
* a merge never redirects a reader across namespaces;
* one agent cannot take every worker: the gate answers 429 with Retry-After.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import memlane
from memlane.core.access import Access
from memlane.values.errors import BusyError, ForbiddenError, ValidationError


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        yield str(tmp_path / "shared.db")
        return
    server = request.getfixturevalue("postgres")
    made = server.create()
    yield made
    server.drop(made)


def _world(mem: memlane.Memory) -> Access:
    acc = Access(mem)
    for name in ("alice", "bob"):
        acc.create_agent(name)
    acc.create_room("eng")
    acc.add_member("eng", "bob")
    return acc


# -- confirm by identity -----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["lexical", "vector", "hybrid"])
def test_an_item_replaced_between_nominate_and_confirm_never_reaches_another_agent(url, clock, mode):
    """Bob's own item is nominated, then deleted, and alice's private item takes its place before confirm."""
    with memlane.open(url, embedder="fake", clock=clock) as mem:
        acc = _world(mem)
        bob = acc.view(acc.agent("bob"))
        bob.put("agent/bob", "note", "orchid watering schedule")
        assert mem.wait_indexed(60)  # the vector channel nominates it too
        store = mem.store
        real = {"lexical": store.lexical, "vector": store.vector}

        def race(channel: str):  # type: ignore[no-untyped-def]
            def nominate(*args: Any, **kwargs: Any) -> Any:
                found = real[channel](*args, **kwargs)
                if channel == "lexical" or mode == "vector":
                    # between nominate and confirm: bob's item goes, alice writes the same words privately
                    mem.delete("agent/bob", "note")
                    mem.put("agent/alice", "secret", "orchid watering schedule")
                return found

            return nominate

        store.lexical = race("lexical")  # type: ignore[method-assign]
        store.vector = race("vector")  # type: ignore[method-assign]
        try:
            env = bob.recall("orchid watering schedule", mode=mode)
        finally:
            store.lexical, store.vector = real["lexical"], real["vector"]  # type: ignore[method-assign]
        assert all(h.namespace != ("agent", "alice") for h in env.hits), env.to_dict()
        assert env.hits == [] and env.dropped_by_hydration >= 1
        # the row really was taken over: alice's item exists, bob may not read it
        assert mem.get("agent/alice", "secret") is not None
        with pytest.raises(ForbiddenError):
            bob.get("agent/alice", "secret")


def test_one_ranking_over_every_readable_prefix(url, clock):
    """An agent's search over three rooms ranks like the owner's search over the same rows: one fusion."""
    with memlane.open(url, embedder="fake", clock=clock) as mem:
        acc = Access(mem)
        acc.create_agent("carol")
        for room in ("a", "b", "c"):
            acc.create_room(room)
            acc.add_member(room, "carol")
        words = {"a": "billing migration friday", "b": "billing", "c": "migration notes"}
        for room, text in words.items():
            for i in range(3):
                mem.put(("room", room), f"n{i}", f"{text} {i}")
        carol = acc.view(acc.agent("carol")).search("billing migration", limit=9, channels=["lexical"])
        owner = mem.search("billing migration", namespace_prefix="room", limit=9, channels=["lexical"])
        assert [(h.namespace, h.key) for h in carol.hits] == [(h.namespace, h.key) for h in owner.hits]
        ranks = [h.ranks["lexical"] for h in carol.hits]
        assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)  # no per-prefix "#1" ties
        assert carol.params["searched_prefixes"] == ["agent/carol", "room/a", "room/b", "room/c"]


# -- a model of what each agent may see ----------------------------------------------------

AGENTS = ("alice", "bob", "carol")
ROOMS = ("r1", "r2")
PLACES = [
    ("agent", "alice"), ("agent", "bob"), ("agent", "carol"), ("room", "r1"), ("room", "r2"), ("room", "r10"),
    ("proj", "x"), ("proj", "x", "y"), ("proj", "xy"),
]  # fmt: skip
PREFIXES = [("proj",), ("proj", "x"), ("proj", "xy"), ("room", "r10")]
WORDS = ("orchid", "billing", "cutover")


def _inside(ns: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return ns[: len(prefix)] == prefix


class SharedMemory(RuleBasedStateMachine):
    """Random access changes and writes; after each step every agent's reads match the model exactly."""

    fresh: Any = None  # set by the test: a callable giving the URL of a new empty store
    family = "core"  # or "client": every read goes through memlane.Client over loopback HTTP

    @initialize()
    def start(self) -> None:
        self.mem = memlane.open(type(self).fresh(), embedder="fake")
        self.access = Access(self.mem)
        self.tokens = {a: self.access.create_agent(a)[1] for a in AGENTS}
        self.server: Any = None
        if self.family == "client":
            from live import LiveServer
            from memlane.server import create_app

            self.server = LiveServer(create_app(self.mem))
            self.clients = {a: memlane.Client(self.server.url, t) for a, t in self.tokens.items()}
        for r in ROOMS + ("r10",):
            self.access.create_room(r)
        self.members: dict[str, set[str]] = {r: set() for r in ROOMS + ("r10",)}
        self.grants: dict[str, dict[tuple[str, ...], str]] = {a: {} for a in AGENTS}
        self.items: dict[tuple[tuple[str, ...], str], str] = {}

    def teardown(self) -> None:
        if getattr(self, "server", None) is not None:
            for client in self.clients.values():
                client.close()
            self.server.stop()
        if hasattr(self, "mem"):
            self.mem.close()

    def reader(self, agent: str) -> Any:
        """The agent's reads through the family under test (its view, or its HTTP client)."""
        if self.family == "client":
            return self.clients[agent]
        return self.access.view(self.access.agent(agent))

    # -- the model --------------------------------------------------------------------

    def readable(self, agent: str) -> list[tuple[str, ...]]:
        out = [("agent", agent)] + [("room", r) for r, m in self.members.items() if agent in m]
        return out + list(self.grants[agent])

    def sees(self, agent: str, ns: tuple[str, ...]) -> bool:
        return any(_inside(ns, p) for p in self.readable(agent))

    # -- steps ------------------------------------------------------------------------

    @rule(place=st.sampled_from(PLACES), key=st.sampled_from(["k1", "k2", "k3"]), word=st.sampled_from(WORDS))
    def put(self, place: tuple[str, ...], key: str, word: str) -> None:
        self.mem.put(place, key, f"{word} note")
        self.items[(place, key)] = f"{word} note"

    @rule(place=st.sampled_from(PLACES), key=st.sampled_from(["k1", "k2", "k3"]), word=st.sampled_from(WORDS))
    def delete_and_reinsert_elsewhere(self, place: tuple[str, ...], key: str, word: str) -> None:
        # a deleted row's number may be reused by the very next insert, in another namespace
        for address in list(self.items)[-1:]:
            self.mem.delete(*address)
            del self.items[address]
        self.mem.put(place, key, f"{word} note")
        self.items[(place, key)] = f"{word} note"

    @rule(room=st.sampled_from(ROOMS + ("r10",)), agent=st.sampled_from(AGENTS), add=st.booleans())
    def membership(self, room: str, agent: str, add: bool) -> None:
        if add:
            self.access.add_member(room, agent)
            self.members[room].add(agent)
        else:
            self.access.remove_member(room, agent)
            self.members[room].discard(agent)

    @rule(
        agent=st.sampled_from(AGENTS), prefix=st.sampled_from(PREFIXES), mode=st.sampled_from(["read", "write", None])
    )
    def grant(self, agent: str, prefix: tuple[str, ...], mode: str | None) -> None:
        if mode is None:
            self.access.revoke(agent, prefix)
            self.grants[agent].pop(prefix, None)
        else:
            self.access.grant(agent, prefix, mode)
            self.grants[agent][prefix] = mode

    # -- what every agent reads --------------------------------------------------------

    @invariant()
    def every_read_matches_the_model(self) -> None:
        if not hasattr(self, "mem"):
            return
        for agent in AGENTS:
            view = self.reader(agent)
            visible = {a: t for a, t in self.items.items() if self.sees(agent, a[0])}
            listed = view.list(limit=1000).items
            assert {(i.namespace, i.key) for i in listed} == set(visible), agent
            assert set(view.namespaces()) == {a[0] for a in visible}, agent
            for word in WORDS:
                want = {a for a, t in visible.items() if word in t}
                got = view.search(word, limit=100, channels=["lexical"]).hits
                assert {(h.namespace, h.key) for h in got} == want, (agent, word)
                hybrid = view.recall(word, limit=100).hits
                assert {(h.namespace, h.key) for h in hybrid} <= set(visible), (agent, word)
            for key in ("k1", "k2"):
                fetched = view.fetch(key, limit=100)
                assert {(i.namespace, i.key) for i in fetched} == {a for a in visible if a[1] == key}
            for place in PLACES:
                if not self.sees(agent, place):
                    with pytest.raises(ForbiddenError):
                        view.get(place, "k1")


@pytest.mark.parametrize(("backend", "family"), [("sqlite", "core"), ("postgres", "core"), ("sqlite", "client")])
def test_every_agent_reads_exactly_what_the_model_allows(request, tmp_path, backend, family):
    made: list[str] = []

    def fresh() -> str:
        if backend == "sqlite":
            made.append(str(tmp_path / f"model{len(made)}.db"))
        else:
            made.append(request.getfixturevalue("postgres").create())
        return made[-1]

    SharedMemory.fresh = staticmethod(fresh)
    SharedMemory.family = family
    state = SharedMemory.TestCase
    state.settings = settings(
        max_examples=12 if family == "core" else 5,
        stateful_step_count=10,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    try:
        state().runTest()
    finally:
        if backend == "postgres":
            for url in made:
                request.getfixturevalue("postgres").drop(url)


def test_the_client_reads_exactly_what_the_model_allows(tmp_path):
    """The same rule over real HTTP: each agent's Client sees its rooms and grants, nothing else."""
    from live import LiveServer
    from memlane.server import create_app

    with memlane.open(str(tmp_path / "c.db"), embedder="fake") as mem:
        acc = Access(mem)
        tokens = {a: acc.create_agent(a)[1] for a in AGENTS}
        acc.create_room("r1")
        acc.add_member("r1", "bob")
        acc.grant("carol", "proj/x", "read")
        for place in PLACES:
            mem.put(place, "k1", "orchid note")
        server = LiveServer(create_app(mem))
        try:
            expect = {
                "alice": {("agent", "alice")},
                "bob": {("agent", "bob"), ("room", "r1")},
                "carol": {("agent", "carol"), ("proj", "x"), ("proj", "x", "y")},
            }
            for agent, want in expect.items():
                with memlane.Client(server.url, tokens[agent]) as client:
                    assert {i.namespace for i in client.list(limit=100).items} == want
                    assert {h.namespace for h in client.search("orchid", limit=100).hits} == want
                    assert {i.namespace for i in client.fetch("k1", limit=100)} == want
            acc.remove_member("r1", "bob")  # takes effect on the next request
            with memlane.Client(server.url, tokens["bob"]) as client:
                assert {i.namespace for i in client.list(limit=100).items} == {("agent", "bob")}
                with pytest.raises(ForbiddenError):
                    client.put("room/r1", "k2", "after removal")
        finally:
            server.stop()


# -- concurrent access changes -----------------------------------------------------------------


def test_concurrent_membership_changes_and_grants_are_all_kept(url):
    with memlane.open(url, embedder=None) as mem:
        acc = Access(mem)
        workers = [f"w{i}" for i in range(8)]
        for w in workers:
            acc.create_agent(w)
        acc.create_room("eng")
        barrier = threading.Barrier(len(workers))
        errors: list[BaseException] = []

        def churn(name: str) -> None:
            try:
                barrier.wait()
                for _ in range(5):
                    Access(mem).add_member("eng", name)
                    Access(mem).remove_member("eng", name)
                Access(mem).add_member("eng", name)
                Access(mem).remove_member("eng", name)  # every worker ends on an acknowledged removal
                for j in range(3):
                    Access(mem).grant(name, f"proj/{name}/{j}", "write")
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        threads = [threading.Thread(target=churn, args=(w,)) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert acc.rooms() == [{"name": "eng", "members": []}]
        for w in workers:
            agent = acc.agent(w)
            assert agent.rooms == ()
            assert len(agent.grants) == 3  # 24 concurrent grants, all kept
            with pytest.raises(ForbiddenError):
                acc.view(agent).put("room/eng", "k", "not a member any more")
        log = acc.history(room="eng", limit=10_000)
        assert sum(c.action == "add_member" for c in log) == sum(c.action == "remove_member" for c in log) == 48


# -- access records in tables -------------------------------------------------------------------


def test_the_log_answers_who_was_in_a_room_and_when(url, clock):
    with memlane.open(url, embedder=None, clock=clock) as mem:
        acc = _world(mem)
        march = clock.now
        clock.advance(86400)
        acc.add_member("eng", "alice")
        acc.remove_member("eng", "bob")
        assert acc.members_at("eng", march) == ["bob"]
        assert acc.members_at("eng", clock.now) == ["alice"]
        assert acc.members_at("eng", march - timedelta(seconds=1)) == []
        admin_made = Access(mem, actor="root")
        admin_made.grant("alice", "proj/x", "read")
        last = acc.history(agent="alice")[-1]
        assert (last.action, last.actor, last.prefix, last.mode) == ("grant", "root", ("proj", "x"), "read")
        with pytest.raises(ValidationError):
            acc.members_at("eng", "yesterday")  # type: ignore[arg-type]


def test_old_access_items_are_converted_in_place(url):
    """A store written before m006_access keeps its agents, tokens, rooms, members and grants."""
    with memlane.open(url, embedder=None) as mem:
        token = "ml_legacy-token"
        import hashlib

        digest = hashlib.sha256(token.encode()).hexdigest()
        rows = [
            ("_memlane/agents", "dana", f'{{"admin":false,"grants":[{{"mode":"read","prefix":["proj","x"]}}],'
                                        f'"token":"{digest}"}}', "object"),
            ("_memlane/tokens", digest, '"dana"', "string"),
            ("_memlane/rooms", "ops", '{"members":["dana","ghost"]}', "object"),
        ]  # fmt: skip
        with mem.store.session(write=True) as s:
            for table in ("access_log", "access_grants", "access_members", "access_rooms", "access_agents"):
                s.run(f"DROP TABLE {table}")
            s.run("DELETE FROM _memlane_migrations WHERE name = 'm006_access'")
            for i, (ns, key, value, vtype) in enumerate(rows):
                s.run(
                    "INSERT INTO items (id, namespace, key, value, value_type, text, metadata, created_at, "
                    "updated_at, version) VALUES (?, ?, ?, ?, ?, '', '{}', '2026-01-01T00:00:00+00:00', "
                    "'2026-01-02T00:00:00+00:00', 1)",
                    (f"legacy{i}", ns, key, value, vtype),
                )
                if s.dialect == "sqlite":  # as put would: an external-content FTS row per item
                    s.run(
                        "INSERT INTO items_fts (rowid, text, address) "
                        "SELECT rowid, text, namespace || ' ' || key FROM items WHERE id = ?",
                        (f"legacy{i}",),
                    )
    with memlane.open(url, embedder=None) as mem:  # migrates
        acc = Access(mem)
        dana = acc.authenticate(token)
        assert dana is not None and dana.name == "dana" and dana.rooms == ("ops",)
        assert [(g.prefix, g.mode) for g in dana.grants] == [(("proj", "x"), "read")]
        assert acc.rooms() == [{"name": "ops", "members": ["dana"]}]  # the unknown member is dropped
        with mem.store.session() as s:
            assert s.rows("SELECT count(*) FROM items WHERE namespace LIKE '\\_memlane%' ESCAPE '\\'")[0][0] == 0
        assert acc.members_at("ops", dana_time()) == ["dana"]


def dana_time():  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    return datetime(2026, 1, 3, tzinfo=UTC)


def test_export_and_import_carry_the_access_tables(url, tmp_path, clock):
    with memlane.open(url, embedder=None, clock=clock) as mem:
        acc = _world(mem)
        _, token = acc.create_agent("erin")
        acc.grant("erin", "proj/x", "write")
        records = list(mem.export_records())
    with memlane.open(str(tmp_path / "copy.db"), embedder=None) as copy:
        copy.import_records(records)
        copy.import_records(records)  # idempotent
        acc = Access(copy)
        erin = acc.authenticate(token)
        assert erin is not None and [(g.prefix, g.mode) for g in erin.grants] == [(("proj", "x"), "write")]
        assert acc.agent("bob").rooms == ("eng",)
        assert len(acc.history(agent="erin")) == 2


def test_twenty_thousand_rooms(url):
    """Membership in the last of 20,000 rooms works; listing pages are complete and say when they are cut."""
    with memlane.open(url, embedder=None) as mem:
        acc = Access(mem)
        at = "2026-01-01T00:00:00+00:00"
        with mem.store.session(write=True) as s:  # bulk set-up; every check below goes through the API
            s.many(
                "INSERT INTO access_rooms (name, created_at) VALUES (?, ?)", [(f"r{i:05d}", at) for i in range(20_000)]
            )
            s.many(
                "INSERT INTO access_agents (name, admin, token_hash, created_at) VALUES (?, ?, ?, ?)",
                [(f"a{i:04d}", False, f"h{i}", at) for i in range(5_000)],
            )
        _, token = acc.create_agent("last")
        acc.add_member("r19999", "last")
        agent = acc.authenticate(token)
        assert agent is not None and agent.rooms == ("r19999",)
        acc.view(agent).put("room/r19999", "k", "written in the last room")
        seen, cursor, pages = [], None, 0
        while True:
            page = acc.room_page(limit=5000, cursor=cursor)
            seen += [r["name"] for r in page.entries]
            pages += 1
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert len(seen) == 20_000 and pages == 4 and seen[-1] == "r19999"
        first = acc.agent_page(limit=1000)
        assert len(first.entries) == 1000 and first.next_cursor is not None


# -- merges and visibility ----------------------------------------------------------------------


def test_a_merge_never_leads_a_reader_across_namespaces(url):
    with memlane.open(url, embedder=None) as mem:
        acc = _world(mem)
        acc.add_member("eng", "alice")
        alice = acc.view(acc.agent("alice"))
        bob = acc.view(acc.agent("bob"))
        private = alice.add_entity("agent/alice", "Ravi Kumar", profile="alice's private notes on Ravi")
        shared = alice.add_entity("room/eng", "Ravi")
        with pytest.raises(ValidationError, match="within one namespace") as refused:
            alice.merge_entities(private.id, shared.id)
        assert refused.value.field == "merged"
        # a merge recorded before the rule stays invisible: bob keeps seeing the room's entity as itself
        with mem.store.session(write=True) as s:
            s.run("UPDATE entities SET merged_into = ? WHERE id = ?", (private.id, shared.id))
        found = bob.resolve_entity("Ravi")
        entities = [c.entity for c in found.sections["entities"]]
        assert [e.id for e in entities] == [shared.id] and "private" not in str(found.to_dict())
        assert entities[0].merged_into is None
        context = bob.facts_context("Ravi", entity_ids=[shared.id])
        assert private.id not in str(context.to_dict())
        assert alice.resolve_entity("Ravi Kumar").sections["entities"][0].entity.id == private.id


# -- fair sharing ----------------------------------------------------------------------------------


def test_one_agent_cannot_take_every_worker(tmp_path):
    """A greedy agent over its share while another waits gets 429; the other's request runs at its turn."""
    from live import LiveServer
    from memlane.server import create_app
    from memlane.server.app import WorkGate

    with memlane.open(str(tmp_path / "busy.db"), embedder=None) as mem:
        app = create_app(mem, max_agent_work=2, max_work=2)
        acc, gate = app.state.access, app.state.access.gate
        alice = acc.create_agent("alice")[1]
        bob = acc.create_agent("bob")[1]
        mem.put("agent/bob", "k", "orchid")
        server = LiveServer(app)
        try:
            share = WorkGate.key_of(alice)  # how the service tells alice's requests apart
            with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {alice}"}) as http:
                with gate.enter(share), gate.enter(share):  # alice holds every place
                    bobs: list[httpx.Response] = []
                    searching = threading.Thread(
                        target=lambda: bobs.append(
                            httpx.post(
                                server.url + "/v1/search",
                                json={"query": "orchid"},
                                headers={"Authorization": f"Bearer {bob}"},
                                timeout=30,
                            )
                        )
                    )
                    searching.start()
                    deadline = time.monotonic() + 10
                    while gate.waiting() < 1:  # bob's search waits for its turn
                        assert time.monotonic() < deadline
                        time.sleep(0.005)
                    resp = http.post("/v1/search", json={"query": "orchid"})
                    assert resp.status_code == 429 and int(resp.headers["retry-after"]) >= 1
                    error = resp.json()["error"]
                    assert error["type"] == "busy" and "fair share is 2" in error["message"]
                    assert http.post("/v1/put", json={"namespace": "agent/alice", "key": "k", "value": 1}).is_success
                    with memlane.Client(server.url, alice, retries=0) as client, pytest.raises(BusyError) as busy:
                        client.query("SELECT count(*) FROM items")
                    assert busy.value.retry_after == int(resp.headers["retry-after"])
                    with memlane.Client(server.url, bob) as client:
                        assert client.get("agent/bob", "k") is not None  # another agent's point read
                    assert not bobs  # still waiting: alice holds both places
                # alice's places free: bob's search is next
                searching.join(timeout=10)
                assert [r.status_code for r in bobs] == [200] and bobs[0].json()["hits"]
                assert httpx.get(server.url + "/v1/health").json()["status"] == "ok"
        finally:
            server.stop()


def test_point_reads_leave_the_event_loop_when_the_store_is_held_or_they_ask_for_many_rows(tmp_path, monkeypatch):
    """The event loop serves every connection: a point read runs on it only when the store is free at once and
    it asks for few rows; otherwise it waits in a worker thread while the loop answers others."""
    from live import LiveServer
    from memlane.core.memory import Memory
    from memlane.server import create_app
    from memlane.server.dispatch import INLINE_ROWS

    threads: list[str] = []
    get_many = Memory.get_many

    def recorded(self, addresses):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return get_many(self, addresses)

    monkeypatch.setattr(Memory, "get_many", recorded)
    with memlane.open(str(tmp_path / "loop.db"), embedder=None) as mem:
        app = create_app(mem)
        token = app.state.access.create_agent("alice")[1]
        mem.put("agent/alice", "k", 1)
        server = LiveServer(app)
        try:
            with memlane.Client(server.url, token) as client:
                client.get_many([("agent/alice", "k")] * INLINE_ROWS)
                client.get_many([("agent/alice", "k")] * (INLINE_ROWS + 1))
                assert not threads[0].startswith("memlane-request") and threads[1].startswith("memlane-request")
                answers: list[Any] = []
                with mem.store._lock:  # another thread holds the store
                    reading = threading.Thread(target=lambda: answers.append(client.get("agent/alice", "k")))
                    reading.start()
                    time.sleep(0.2)
                    started = time.monotonic()
                    assert httpx.get(server.url + "/v1/health", timeout=5).json()["status"] == "ok"
                    assert time.monotonic() - started < 1.0 and not answers  # the loop answered; the read waits
                reading.join(timeout=10)
                assert answers and answers[0].value == 1
        finally:
            server.stop()


def test_an_agent_sending_one_request_at_a_time_is_never_refused(tmp_path):
    """A caller that has read its answer may ask again at once: its finished request no longer counts."""
    from live import LiveServer
    from memlane.server import create_app
    from memlane.server.app import WorkGate

    with memlane.open(str(tmp_path / "serial.db"), embedder=None) as mem:
        app = create_app(mem, max_agent_work=1, max_work=1)
        alice = app.state.access.create_agent("alice")[1]
        mem.put("agent/alice", "k", "orchid")
        server = LiveServer(app)
        try:
            with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {alice}"}) as http:
                statuses = [http.post("/v1/search", json={"query": "orchid"}).status_code for _ in range(60)]
                statuses += [http.post("/v1/query", json={"sql": "SELECT 1"}).status_code for _ in range(20)]
            assert set(statuses) == {200}
            assert app.state.access.gate._running.get(WorkGate.key_of(alice), 0) == 0
        finally:
            server.stop()


def test_the_work_slot_is_free_when_the_answer_is_complete():
    """Deterministic form of the race above: when the last byte is sent, the caller's share is already free."""
    import asyncio

    from memlane.core.access import Gate
    from memlane.server.app import WorkGate

    gate = Gate(1, 1)
    counted_at_send: list[tuple[bool, int]] = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{", "more_body": True})
        await send({"type": "http.response.body", "body": b"}"})
        await asyncio.sleep(0)  # work after the answer (background tasks, logging) must not hold the slot

    async def send(message):
        if message["type"] == "http.response.body":
            counted_at_send.append((message.get("more_body", False), sum(gate._running.values())))

    scope = {"type": "http", "method": "POST", "path": "/v1/search", "headers": [(b"authorization", b"Bearer t")]}
    asyncio.run(WorkGate(app, gate)(scope, None, send))
    assert counted_at_send == [(True, 1), (False, 0)]
    assert sum(gate._running.values()) == 0


def test_the_cli_lists_rooms_revokes_logs_and_deletes_agents(tmp_path):
    import json

    from typer.testing import CliRunner

    from memlane import cli

    db = str(tmp_path / "cli.db")
    run = CliRunner()

    def ok(*args: str) -> str:
        result = run.invoke(cli.app, [*args, "--db", db], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        return result.stdout

    ok("agent", "create", "planner")
    ok("room", "create", "eng")
    ok("room", "add", "eng", "planner")
    ok("grant", "planner", "project/billing", "read")
    assert json.loads(ok("room", "list", "--json")) == [{"name": "eng", "members": ["planner"]}]
    assert "(none)" in ok("revoke", "planner", "project/billing")
    log = json.loads(ok("agent", "log", "--agent", "planner", "--json"))
    assert [c["action"] for c in log] == ["create_agent", "add_member", "grant", "revoke"]
    assert all(c["actor"] is None for c in log)  # the CLI is the store's owner
    assert "Deleted agent 'planner'" in ok("agent", "delete", "planner")
    assert json.loads(ok("room", "list", "--json")) == [{"name": "eng", "members": []}]
    missing = run.invoke(cli.app, ["agent", "delete", "planner", "--db", db])
    assert missing.exit_code == 1 and "no agent named 'planner'" in missing.output


worlds = st.fixed_dictionaries(
    {
        "items": st.lists(st.tuples(st.sampled_from(PLACES), st.sampled_from(WORDS)), min_size=1, max_size=10),
        "members": st.lists(st.tuples(st.sampled_from(ROOMS + ("r10",)), st.sampled_from(AGENTS)), max_size=5),
        "grants": st.lists(st.tuples(st.sampled_from(AGENTS), st.sampled_from(PREFIXES)), max_size=3),
    }
)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(world=worlds)
def test_mcp_tools_read_exactly_what_the_model_allows(tmp_path_factory, world):  # type: ignore[no-untyped-def]
    """The MCP family: random rooms, grants and items; each agent's MCP tools answer the model's set."""
    from live import LiveServer
    from memlane.server import create_app
    from test_mcp import Service, call, fail, http_session, run

    with memlane.open(str(tmp_path_factory.mktemp("mcp") / "m.db"), embedder="fake") as mem:
        acc = Access(mem)
        tokens = {a: acc.create_agent(a)[1] for a in AGENTS}
        for r in ROOMS + ("r10",):
            acc.create_room(r)
        for r, a in world["members"]:
            acc.add_member(r, a)
        for a, p in world["grants"]:
            acc.grant(a, p, "read")
        for n, (place, word) in enumerate(world["items"]):
            mem.put(place, f"k{n}", f"{word} note")
        server = LiveServer(create_app(mem))
        svc = Service(server.url, tokens, mem, acc)
        try:
            for agent in AGENTS:
                readable: list[tuple[str, ...]] = [("agent", agent)]
                readable += [("room", r) for r, a in world["members"] if a == agent]
                readable += [p for a, p in world["grants"] if a == agent]
                visible = {
                    (place, f"k{n}"): word
                    for n, (place, word) in enumerate(world["items"])
                    if any(place[: len(p)] == p for p in readable)
                }

                async def check(
                    agent: str = agent, visible: dict[Any, str] = visible, readable: Any = readable
                ) -> None:
                    async with http_session(svc, agent) as s:
                        listed = await call(s, "memory_list", limit=1000)
                        assert {(tuple(i["namespace"]), i["key"]) for i in listed["items"]} == set(visible), agent
                        for word in WORDS:
                            found = await call(s, "memory_search", query=word, limit=100, channels=["lexical"])
                            want = {a for a, w in visible.items() if w == word}
                            assert {(tuple(h["namespace"]), h["key"]) for h in found["hits"]} == want, (agent, word)
                        for place in PLACES:
                            if not any(place[: len(p)] == p for p in readable):
                                _, error = await fail(s, "memory_get", namespace="/".join(place), key="k0")
                                assert error["type"] == "forbidden", (agent, place)

                run(check)
        finally:
            server.stop()
