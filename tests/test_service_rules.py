"""The service carries every call faithfully: what a caller sends reaches the core, and the core's answer comes back.

Guards ``src/memlane/server/app.py`` (request bodies and their defaults, each
route's mapping onto the agent's view, the answer shapes, the Authorization
parsing, the OpenAPI document, the body-size limit ``BodyLimit``) and
``src/memlane/client.py`` (each ``memlane.Client`` method's arguments reaching
the wire, its client-side refusals, its transport settings, the chooser that
runs in the caller's process).

The oracle is the core itself on the same store: a live server (uvicorn on
loopback, one SQLite file) answers alice's ``Client`` (and raw HTTP requests),
and the same call on alice's :class:`~memlane.core.access.AgentView` (which the
service calls) must give the same answer, timings aside. Writes go through the
service and are checked against what the store then holds. Refusals are
compared the same way (class, field, message); the service's own answer for
each error kind is ``tests/test_answers.py``'s, the Client's decoding of other
servers' answers (unknown kinds, bodies that are not JSON) is here.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

import memlane
from memlane.core.access import Access, AgentView
from memlane.core.memory import Memory
from memlane.domain.search.embedders import FakeEmbedder
from memlane.server import create_app
from memlane.server.app import BodyLimit, error_body
from memlane.values import errors

sys.path.insert(0, str(Path(__file__).parent))
from live import LiveServer  # noqa: E402

LIMIT = 8 * 1024  # max_body_bytes of the shared service
NS = "agent/alice"
ROOM = "room/eng"
SHARED_KEY = "shared.key"  # stored in more namespaces than any default limit returns
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
T1 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
VOLATILE = {"timings", "elapsed_ms"}
# docs/http.md, "Compatibility"
OMITTED_WHEN_UNSET = {
    "author",
    "expires_at",
    "changed_by",
    "next_cursor",
    "embedding",
    "pending_vectors",
    "relevant",
    "relevance",
    "why",
}


class World:
    """One memory behind a live server; alice (member of room eng) and root (admin) have tokens."""

    def __init__(self, path: Path) -> None:
        self.mem: Memory = memlane.open(str(path), embedder="fake", indexing="sync")
        self.access = Access(self.mem)
        self.tokens = {
            "root": self.access.create_agent("root", admin=True)[1],
            "alice": self.access.create_agent("alice")[1],
        }
        self.access.create_room("eng")
        self.access.add_member("eng", "alice")
        self.ids: dict[str, Any] = {}
        self.server = LiveServer(create_app(self.mem, max_body_bytes=LIMIT))
        self.url = self.server.url
        self.http = httpx.Client(base_url=self.url, timeout=30)
        self.client = memlane.Client(self.url, self.tokens["alice"])
        self.root = memlane.Client(self.url, self.tokens["root"])

    def view(self, agent: str = "alice") -> AgentView:
        """What the service calls for this agent's requests."""
        return self.access.view(self.access.agent(agent))

    def post(self, path: str, body: Any, *, as_: str = "alice") -> httpx.Response:
        return self.http.post(f"/v1/{path}", json=body, headers={"Authorization": f"Bearer {self.tokens[as_]}"})

    def close(self) -> None:
        self.client.close()
        self.root.close()
        self.http.close()
        self.server.stop()
        self.mem.close()


def seed(w: World) -> None:
    """Items, versions, entities, facts, a document and claims, each set to tell defaults apart."""
    mem = w.mem
    mem.put(NS, "prefs.ui.theme", "light")
    mem.put(NS, "prefs.ui.theme", {"mode": "dark", "contrast": 2}, metadata={"source": "chat"})
    mem.put(NS, "prefs.ui.font", "mono", text="editor font mono")
    mem.put(NS, "notes.standup", "standup moved to 10am")
    mem.put(NS, "deep.a.b.c.d", "five segments, cut by summarize's depth")
    mem.put(ROOM, "prefs.ui.theme", "solarized")
    mem.put(ROOM, "notes.standup", "team standup notes")
    # 105 bulk items (over list's default page of 100) with one word in common (over search's 10)
    mem.put_many([{"namespace": f"{NS}/bulk", "key": f"bulk.{i:03}", "value": f"bulk orchid {i}"} for i in range(105)])
    # 12 items under one key (over fetch's and recall's default limit of 10)
    mem.put_many([{"namespace": f"{NS}/n{i:02}", "key": SHARED_KEY, "value": f"shared {i}"} for i in range(12)])
    kim = mem.add_entity(NS, "Kim Lee", kind="person", aliases=["Kim"])
    billing = mem.add_entity(NS, "Billing", kind="project")
    search = mem.add_entity(NS, "Search", kind="project")
    works = mem.assert_fact(NS, kim.id, "works_on", billing.id, valid_from=T0, source="hr")
    leads = mem.assert_fact(NS, kim.id, "leads", search.id, valid_from=T0)
    mem.assert_fact(NS, search.id, "depends_on", billing.id, valid_from=T0)
    parts = [f"Part {n}: Kim moved the billing launch; search waits on billing. " * 2 for n in range(4)]
    doc = mem.add_document(NS, "Standup", parts, chunk_chars=150)
    claim = mem.add_claim(NS, "Kim said the billing launch moved", speaker="Kim", about=[kim.id, billing.id])
    mem.add_claim(NS, "the billing launch moved to friday", chunk=doc.chunk_ids[1], about=[billing.id])
    w.view().save_query("by_key", "SELECT key FROM items WHERE key LIKE :pattern ORDER BY key")
    w.ids.update(
        kim=kim.id,
        billing=billing.id,
        search=search.id,
        works=works.id,
        leads=leads.id,
        doc=doc.id,
        chunk=doc.chunk_ids[1],
        claim=claim.id,
        now=datetime.now(UTC),  # a believed_at after every write above
    )
    w.ids["cursor"] = w.view().list(NS, key_prefix="prefs", limit=1).next_cursor


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    w = World(tmp_path_factory.mktemp("rules") / "rules.db")
    seed(w)
    yield w
    w.close()


def plain(obj: Any) -> Any:
    """An answer as JSON data, without timings (they differ from run to run) and unset optional fields.

    The service omits unset optional fields (docs/http.md, "Compatibility"), so
    they are left out on both sides.
    """
    if hasattr(obj, "to_dict"):
        obj = obj.to_dict()
    if isinstance(obj, Mapping):
        return {
            str(k): plain(v)
            for k, v in obj.items()
            if k not in VOLATILE and not (v is None and k in OMITTED_WHEN_UNSET)
        }
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    if isinstance(obj, datetime):
        return obj.isoformat()
    return obj


def vector(text: str) -> list[float]:
    return [float(x) for x in FakeEmbedder().embed_batch([text])[0]]


# -- every Client read answers what the agent's view answers -----------------------------

# (name, the call on either interface given the world's ids): the Client and the AgentView
# have the same method names and arguments, so one callable drives both.
READS: list[tuple[str, Callable[[Any, dict[str, Any]], Any]]] = [
    ("get", lambda m, ids: m.get(NS, "prefs.ui.theme")),
    ("get-tuple-namespace", lambda m, ids: m.get(("room", "eng"), "prefs.ui.theme")),
    ("get-missing", lambda m, ids: m.get(NS, "no.such.key")),
    (
        "get_many",
        lambda m, ids: m.get_many([(NS, "prefs.ui.font"), (NS, "missing"), (("room", "eng"), "prefs.ui.theme")]),
    ),
    ("get_many-lists", lambda m, ids: m.get_many([[("agent", "alice"), "prefs.ui.font"], [ROOM, "prefs.ui.theme"]])),
    ("fetch-defaults", lambda m, ids: m.fetch(SHARED_KEY)),
    ("fetch-prefix-and-limit", lambda m, ids: m.fetch("prefs.ui.theme", namespace_prefix=ROOM, limit=1)),
    ("fetch-limit", lambda m, ids: m.fetch(SHARED_KEY, limit=11)),
    ("list-defaults", lambda m, ids: m.list()),
    ("list-prefix", lambda m, ids: m.list(f"{NS}/bulk")),
    ("list-key-prefix-limit", lambda m, ids: m.list(NS, key_prefix="prefs", limit=1)),
    ("list-cursor", lambda m, ids: m.list(NS, limit=2, cursor=m.list(NS, limit=2).next_cursor)),
    ("namespaces-defaults", lambda m, ids: m.namespaces()),
    ("namespaces-prefix", lambda m, ids: m.namespaces(("agent", "alice", "bulk"))),
    ("namespaces-depth", lambda m, ids: m.namespaces(NS, max_depth=2)),
    ("summarize-defaults", lambda m, ids: m.summarize()),
    ("summarize-arguments", lambda m, ids: m.summarize(NS, depth=1, key_prefix="prefs")),
    ("summarize-depth", lambda m, ids: m.summarize(NS, depth=4)),
    ("history", lambda m, ids: m.history(NS, "prefs.ui.theme")),
    ("search-defaults", lambda m, ids: m.search("bulk orchid")),
    (
        "search-arguments",
        lambda m, ids: m.search(
            "standup",
            namespace_prefix=ROOM,
            limit=1,
            channels=["lexical"],
            candidate_k=3,
            rrf_k=3,
            weights={"lexical": 2.0},
        ),
    ),
    ("search-rrf_k", lambda m, ids: m.search("bulk orchid", namespace_prefix=NS, rrf_k=1)),
    ("search-embedding", lambda m, ids: m.search("x", channels=("vector",), embedding=tuple(vector("standup")))),
    ("recall-defaults", lambda m, ids: m.recall("bulk orchid")),
    ("recall-keyed", lambda m, ids: m.recall("", key=SHARED_KEY)),
    ("recall-keyed-limit", lambda m, ids: m.recall("", key=SHARED_KEY, limit=11)),
    ("recall-arguments", lambda m, ids: m.recall("standup", namespace_prefix=ROOM, limit=1, mode="lexical")),
    ("recall-prefix", lambda m, ids: m.recall("standup", namespace_prefix=NS)),
    ("recall-embedding", lambda m, ids: m.recall("x", mode="vector", embedding=vector("team standup"))),
    ("recall-single-without-chooser", lambda m, ids: m.recall("standup", mode="single")),
    ("query-defaults", lambda m, ids: m.query("SELECT key FROM items WHERE key LIKE 'prefs%' ORDER BY key")),
    (
        "query-arguments",
        lambda m, ids: m.query(
            "SELECT key FROM items WHERE key LIKE ? ORDER BY key", ("bulk%",), max_rows=2, timeout_ms=1500
        ),
    ),
    ("query-named-params", lambda m, ids: m.query("SELECT :a AS a, :b AS b", {"a": 1, "b": "two"})),
    ("query-mapping-params", lambda m, ids: m.query("SELECT :a AS a", MappingProxyType({"a": "two words"}))),
    (
        "search-mapping-weights",
        lambda m, ids: m.search("standup", weights=MappingProxyType({"lexical": 0.5, "vector": 2.0})),
    ),
    ("explain", lambda m, ids: m.explain_query("SELECT key FROM items WHERE key = ?", ["k"])),
    ("explain-refused", lambda m, ids: m.explain_query("DELETE FROM items")),
    ("describe_query_space", lambda m, ids: m.describe_query_space()),
    ("search_query_space", lambda m, ids: m.search_query_space("updated key")),
    ("saved_queries", lambda m, ids: m.saved_queries()),
    ("run_saved_query-defaults", lambda m, ids: m.run_saved_query("by_key", {"pattern": "prefs%"})),
    (
        "run_saved_query-arguments",
        lambda m, ids: m.run_saved_query("by_key", {"pattern": "bulk%"}, max_rows=3, timeout_ms=1500),
    ),
    ("resolve_entity", lambda m, ids: m.resolve_entity("Kim")),
    ("resolve_entity-prefix", lambda m, ids: m.resolve_entity("Kim", namespace_prefix=(*NS.split("/"), "bulk"))),
    ("facts_context-defaults", lambda m, ids: m.facts_context("billing")),
    (
        "facts_context-arguments",
        lambda m, ids: m.facts_context(
            "billing",
            entity_ids=(ids["kim"],),
            hops=2,
            predicate="works_on",
            time={"valid_at": T1, "believed_at": ids["now"]},
            limit=1,
            namespace_prefix=NS,
        ),
    ),
    (
        "facts_context-before",
        lambda m, ids: m.facts_context("billing", time={"valid_at": T0 - timedelta(days=1), "believed_at": ids["now"]}),
    ),
    ("facts_context-limit", lambda m, ids: m.facts_context("kim", entity_ids=[ids["kim"]], limit=1)),
    ("claims_and_sources_context-defaults", lambda m, ids: m.claims_and_sources_context("billing launch")),
    (
        "claims_and_sources_context-arguments",
        lambda m, ids: m.claims_and_sources_context(
            "billing launch", entity_ids=[ids["billing"]], k=1, candidate_k=5, namespace_prefix=NS
        ),
    ),
    ("combined_context-defaults", lambda m, ids: m.combined_context("billing")),
    (
        "combined_context-arguments",
        lambda m, ids: m.combined_context(
            "billing",
            entity_ids=[ids["kim"]],
            hops=2,
            predicate="leads",
            time={"valid_at": T1.isoformat(), "believed_at": ids["now"].isoformat()},
            k=1,
            namespace_prefix=NS,
        ),
    ),
    (
        "lookup",
        lambda m, ids: m.lookup((ids["kim"], ids["works"], ids["doc"], ids["chunk"], ids["claim"], "ent_" + "0" * 32)),
    ),
    ("hydrate", lambda m, ids: m.hydrate([ids["kim"], ids["claim"]])),
    ("traverse-defaults", lambda m, ids: m.traverse([ids["kim"]])),
    (
        "traverse-arguments",
        lambda m, ids: m.traverse(
            (ids["kim"],), hops=1, time={"valid_at": T0 - timedelta(days=1), "believed_at": ids["now"]}
        ),
    ),
    ("neighbours-defaults", lambda m, ids: m.neighbours(ids["chunk"])),
    ("neighbours-arguments", lambda m, ids: m.neighbours(ids["chunk"], before=0, after=0)),
]


@pytest.mark.parametrize(("name", "call"), READS, ids=[r[0] for r in READS])
def test_each_client_read_answers_what_the_agents_view_answers(world: World, name: str, call: Callable) -> None:
    wanted = plain(call(world.view(), world.ids))
    got = plain(call(world.client, world.ids))
    assert got == wanted


def test_the_reads_tell_their_arguments_and_defaults_apart(world: World) -> None:
    """The cases above only prove something if each argument changes the answer: these pin that it does."""
    v, ids = world.view(), world.ids
    assert len(v.fetch(SHARED_KEY)) == 10 and len(v.fetch(SHARED_KEY, limit=11)) == 11
    assert len(v.list().items) == 100 and v.list().next_cursor is not None
    assert len(v.search("bulk orchid").hits) == 10
    assert any(len(k.split(".")) > 3 for k in v.summarize(NS, depth=4)[NS])
    assert v.summarize(NS) != v.summarize(NS, depth=4) != v.summarize(NS, key_prefix="prefs")
    assert v.query("SELECT 1").limits["max_rows"] == 1000 and v.query("SELECT 1").limits["timeout_ms"] == 2000
    assert v.search("bulk orchid", namespace_prefix=NS, rrf_k=1).params["rrf_k"] == 1
    assert v.traverse([ids["kim"]]).to_dict()["sections"] != v.traverse([ids["kim"]], hops=1).to_dict()["sections"]
    before = {"valid_at": T0 - timedelta(days=1)}
    assert plain(v.traverse([ids["kim"]], time=before)) != plain(v.traverse([ids["kim"]]))
    assert plain(v.facts_context("billing", time=before)) != plain(v.facts_context("billing"))
    assert plain(v.resolve_entity("Kim", namespace_prefix=f"{NS}/bulk")) != plain(v.resolve_entity("Kim"))
    assert plain(v.neighbours(ids["chunk"])) != plain(v.neighbours(ids["chunk"], before=0, after=0))


# -- every Client write reaches the store with each argument it was given ---------------------


def test_put_carries_every_argument_and_answers_the_stored_item(world: World) -> None:
    c, mem = world.client, world.mem
    item = c.put(f"{NS}/w", "put.full", {"a": [1, 2]}, text="words to find", metadata={"m": 1}, ttl=3600)
    stored = mem.get(f"{NS}/w", "put.full")
    assert stored is not None and plain(item) == plain(stored)
    assert (item.key, item.value, item.text, item.metadata, item.author) == (
        "put.full",
        {"a": [1, 2]},
        "words to find",
        {"m": 1},
        "alice",
    )
    assert item.expires_at is not None and item.expires_at - item.updated_at == timedelta(seconds=3600)
    # leaving the options out: text derived from the value, no metadata, no expiry; a replace
    again = c.put(("agent", "alice", "w"), "put.full", "plain")
    assert (again.text, again.metadata, again.expires_at, again.version) == ("plain", {}, None, 2)
    generated = c.put(f"{NS}/w", None, 7)
    assert generated.key and plain(mem.get(f"{NS}/w", generated.key)) == plain(generated)


def test_put_if_absent_reaches_the_store(world: World) -> None:
    world.client.put(f"{NS}/w", "put.once", 1, if_absent=True)
    with pytest.raises(errors.ConflictError):
        world.client.put(f"{NS}/w", "put.once", 2, if_absent=True)
    assert world.mem.get(f"{NS}/w", "put.once").value == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "metadata", "ttl", "field"),
    [
        ({1, 2}, None, None, "value"),
        (float("nan"), None, None, "value"),
        (1, {1: "x"}, None, "metadata"),
        (1, None, -1, "ttl"),
        (1, None, float("nan"), "ttl"),  # JSON cannot carry it: refused before sending
    ],
    ids=["set", "nan", "non-text-key", "ttl", "ttl-nan"],
)
def test_the_client_refuses_what_json_cannot_carry_like_memory_does(
    world: World, value: Any, metadata: Any, ttl: Any, field: str
) -> None:
    with pytest.raises(errors.ValidationError) as embedded:
        world.mem.put(f"{NS}/w", "refused", value, metadata=metadata, ttl=ttl)
    with pytest.raises(errors.ValidationError) as remote:
        world.client.put(f"{NS}/w", "refused", value, metadata=metadata, ttl=ttl)
    assert remote.value.field == embedded.value.field == field
    assert str(remote.value) == str(embedded.value)
    assert world.mem.get(f"{NS}/w", "refused") is None


def test_put_many_carries_every_record_and_option(world: World) -> None:
    c, mem = world.client, world.mem
    records = [
        {"namespace": ("agent", "alice", "many"), "key": "a", "value": 1, "text": "first", "metadata": {"n": 1}},
        {"namespace": f"{NS}/many", "key": "b", "value": [2], "ttl": 60},
        {"namespace": f"{NS}/many", "value": "generated key"},
    ]
    items = c.put_many(records)
    assert [plain(i) for i in items] == [plain(mem.get(i.namespace, i.key)) for i in items]
    assert [(i.key, i.value, i.text, i.metadata) for i in items[:2]] == [
        ("a", 1, "first", {"n": 1}),
        ("b", [2], "[2]", {}),
    ]
    assert items[1].expires_at is not None and items[0].expires_at is None and items[2].key
    assert all(i.author == "alice" for i in items)
    with pytest.raises(errors.ConflictError):
        c.put_many([{"namespace": f"{NS}/many", "key": "a", "value": 9}], if_absent=True)
    assert mem.get(f"{NS}/many", "a").value == 1  # type: ignore[union-attr]
    assert c.put_many([]) == []


@pytest.mark.parametrize(
    "records",
    [
        [{"namespace": NS, "key": "ok", "value": 1}, {"namespace": NS, "key": "k", "value": 1, "colour": "red"}],
        [{"namespace": NS, "key": "ok", "value": 1}, {"namespace": NS, "key": "k", "value": float("inf")}],
        [{"namespace": NS, "key": "k", "value": 1, "metadata": {("a: b",): 1}}],  # a message with ': ' inside
        [{"namespace": NS, "key": "k", "value": 1, "ttl": "soon"}],
    ],
    ids=["unknown-field", "infinity", "colon-in-message", "ttl"],
)
def test_put_many_refuses_a_bad_record_with_memorys_message(world: World, records: list[dict[str, Any]]) -> None:
    with pytest.raises(errors.ValidationError) as embedded:
        world.mem.put_many(records)
    with pytest.raises(errors.ValidationError) as remote:
        world.client.put_many(records)
    assert (remote.value.field, str(remote.value)) == (embedded.value.field, str(embedded.value))
    assert world.mem.get(NS, "ok") is None and world.mem.get(NS, "k") is None


def test_delete_clear_and_cleanup_reach_the_store(world: World) -> None:
    c, mem = world.client, world.mem
    mem.put_many([{"namespace": f"{NS}/scratch/{i}", "key": "k", "value": i} for i in range(3)])
    assert c.delete(("agent", "alice", "scratch", "0"), "k") is True
    assert mem.get(f"{NS}/scratch/0", "k") is None and mem.history(f"{NS}/scratch/0", "k")[0].change == "delete"
    assert c.delete(f"{NS}/scratch/0", "k") is False
    assert c.clear(("agent", "alice", "scratch")) == 2
    assert mem.list(f"{NS}/scratch").items == []
    assert c.clear(f"{NS}/scratch") == 0
    mem.put(f"{NS}/expiring", "k", 1, ttl=0.001)
    time.sleep(0.01)
    assert world.root.cleanup() == 1
    with pytest.raises(errors.ForbiddenError):
        c.cleanup()


def test_facts_writes_carry_every_argument(world: World) -> None:
    c, mem = world.client, world.mem
    ann = c.add_entity(NS, "Ann", aliases=("Annie", "A. N."))
    assert (ann.kind, sorted(ann.aliases), ann.profile) == ("thing", ["A. N.", "Annie"], "")
    assert plain(mem.lookup([ann.id])[0]) == plain(ann) | {"aliases": sorted(ann.aliases)}  # stored sorted
    bo = c.add_entity(("agent", "alice"), "Bo", kind="person", aliases=["B"], profile="writes the docs")
    assert (bo.namespace, bo.kind, bo.aliases, bo.profile) == (("agent", "alice"), "person", ["B"], "writes the docs")
    assert "Nan" in c.add_alias(ann.id, "Nan").aliases
    merged = c.merge_entities(ann.id, bo.id)
    assert merged.id == ann.id and mem.lookup([bo.id])[0].merged_into == ann.id  # type: ignore[union-attr]

    fact = c.assert_fact(("agent", "alice"), ann.id, "owns", {"budget": 3}, valid_from=T0, valid_to=T1, source="memo")
    assert (fact.namespace, fact.predicate, fact.value, fact.valid_from, fact.valid_to) == (
        ("agent", "alice"),
        "owns",
        {"budget": 3},
        T0,
        T1,
    )
    assert fact.sources == ["memo"] and plain(mem.lookup([fact.id])[0]) == plain(fact)
    newer = c.assert_fact(NS, ann.id, "owns", {"budget": 4}, valid_from=T0.isoformat(), supersedes=fact.id)
    assert newer.valid_from == T0 and newer.valid_to is None and newer.sources == []
    ended = c.end_fact(newer.id, T1)
    assert ended.valid_to == T1
    assert c.retract_fact(ended.id).retracted_at is not None

    doc = c.add_document(
        ("agent", "alice"), "Memo", ("Part one of the memo.", "Part two of it."), source="drive", created_at=T0
    )
    assert (doc.title, doc.source, doc.created_at, doc.chunk_count) == ("Memo", "drive", T0, 2)
    one = c.add_document(NS, "Long", "x " * 150, chunk_chars=100)
    assert one.chunk_count == len(one.chunk_ids) > 1 and plain(mem.lookup([one.id])[0]) == plain(one)

    claim = c.add_claim(
        ("agent", "alice"), "Ann owns the budget", speaker="Bo", asserted_at=T0, chunk=doc.chunk_ids[0], about=(ann.id,)
    )
    assert (claim.speaker, claim.asserted_at, claim.chunk_id, claim.about) == ("Bo", T0, doc.chunk_ids[0], [ann.id])
    claims = c.add_claims(
        ("agent", "alice"),
        [
            {"text": "Ann approved it", "asserted_at": T1, "about": (ann.id,), "speaker": "Cy"},
            {"text": "Bo agreed", "asserted_at": T1.isoformat()},
        ],
    )
    assert [(x.text, x.asserted_at, x.about, x.speaker) for x in claims] == [
        ("Ann approved it", T1, [ann.id], "Cy"),
        ("Bo agreed", T1, [], None),
    ]
    assert [plain(r) for r in mem.lookup([x.id for x in claims])] == [plain(x) for x in claims]
    superseded = c.supersede_claim(claim.id, by=claims[0].id)
    assert superseded.superseded_by == claims[0].id and superseded.superseded_at is not None
    assert c.supersede_claim(claims[1].id).superseded_by is None


def test_saved_queries_are_saved_run_and_deleted_through_the_client(world: World) -> None:
    c = world.client
    saved = c.save_query("mine", "SELECT key FROM items WHERE key = :k", "one key")
    assert (saved.name, saved.description, saved.parameters, saved.author) == ("mine", "one key", [":k"], "alice")
    assert plain(c.saved_queries()) == plain(world.view().saved_queries())
    assert c.run_saved_query("mine", {"k": "notes.standup"}).rows == [["notes.standup"], ["notes.standup"]]
    assert c.save_query("nodesc", "SELECT 1").description == ""
    assert c.delete_saved_query("mine") is True and c.delete_saved_query("nodesc") is True
    assert c.delete_saved_query("mine") is False
    assert {q.name for q in c.saved_queries()} == {"by_key"}


def test_export_stats_and_me_answer_what_the_store_holds(world: World) -> None:
    v = world.view()
    exported = list(world.client.export_records())
    # export lines are whole records (unset fields included), as ``memlane import`` reads them
    assert exported == [json.loads(json.dumps({"record": "item", **i.to_dict()})) for i in v.list(limit=1000).items]
    assert len(exported) > 100 and all(r["record"] == "item" for r in exported)
    mem = world.mem
    # access records live in their own tables: the store's counts are the items' alone
    stats = world.root.stats()
    assert stats.active_items == mem.stats().active_items
    assert stats.namespaces == len(mem.namespaces())
    raw = world.http.get("/v1/stats", headers={"Authorization": f"Bearer {world.tokens['root']}"}).json()
    assert raw["access_records"] == Access(mem).count() > 0
    with pytest.raises(errors.ForbiddenError):
        world.client.stats()


# -- each route hands every body field to the core, and leaves out what the core defaults --------
#
# These tests build their own app (create_app over the shared memory), served in process by
# Starlette's TestClient: the routes, handlers and schemas are made inside create_app, so a test
# covers the app it built itself (mutation testing maps create_app to the tests that call it).


class InProcess:
    """A new app over the world's memory, served in process."""

    def __init__(self, world: World) -> None:
        self.app = create_app(world.mem, max_body_bytes=LIMIT)
        self.http = TestClient(self.app, raise_server_exceptions=False)
        self.tokens = world.tokens

    def post(self, path: str, body: Any, *, as_: str = "alice") -> httpx.Response:
        return self.http.post(f"/v1/{path}", json=body, headers={"Authorization": f"Bearer {self.tokens[as_]}"})

    def get(self, path: str, *, as_: str | None = "alice", header: str | None = None) -> httpx.Response:
        auth = header if as_ is None else f"Bearer {self.tokens[as_]}"
        return self.http.get(f"/v1/{path}", headers={} if auth is None else {"Authorization": auth})


@pytest.fixture
def app(world: World) -> InProcess:
    return InProcess(world)


# (route, a body given the ids, the same call on the agent's view): first with only the required
# fields (the core's defaults apply), then with every field set to something other than its default.
ROUTES: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]], Callable[[AgentView, dict[str, Any]], Any]]] = [
    (
        "get",
        lambda ids: {"namespace": ["room", "eng"], "key": "prefs.ui.theme"},
        lambda v, ids: v.get(ROOM, "prefs.ui.theme"),
    ),
    (
        "get_many",
        lambda ids: {"addresses": [[NS, "prefs.ui.font"], [["room", "eng"], "prefs.ui.theme"], [NS, "nope"]]},
        lambda v, ids: {"items": v.get_many([(NS, "prefs.ui.font"), (ROOM, "prefs.ui.theme"), (NS, "nope")])},
    ),
    ("fetch", lambda ids: {"key": SHARED_KEY}, lambda v, ids: {"items": v.fetch(SHARED_KEY)}),
    ("list", lambda ids: {}, lambda v, ids: v.list()),
    ("namespaces", lambda ids: {}, lambda v, ids: {"namespaces": v.namespaces()}),
    ("summarize", lambda ids: {}, lambda v, ids: {"summary": v.summarize()}),
    (
        "history",
        lambda ids: {"namespace": NS, "key": "prefs.ui.theme"},
        lambda v, ids: {"versions": v.history(NS, "prefs.ui.theme")},
    ),
    ("search", lambda ids: {"query": "bulk orchid"}, lambda v, ids: v.search("bulk orchid")),
    ("recall", lambda ids: {"query": "bulk orchid"}, lambda v, ids: v.recall("bulk orchid")),
    ("recall", lambda ids: {}, lambda v, ids: v.recall("")),
    ("recall", lambda ids: {"key": SHARED_KEY}, lambda v, ids: v.recall("", key=SHARED_KEY)),
    (
        "query",
        lambda ids: {"sql": "SELECT key FROM items ORDER BY key"},
        lambda v, ids: v.query("SELECT key FROM items ORDER BY key"),
    ),
    ("query/explain", lambda ids: {"sql": "SELECT 1"}, lambda v, ids: v.explain_query("SELECT 1")),
    (
        "query/run",
        lambda ids: {"name": "by_key", "params": {"pattern": "bulk%"}},
        lambda v, ids: v.run_saved_query("by_key", {"pattern": "bulk%"}),
    ),
    ("query/space", lambda ids: {}, lambda v, ids: v.describe_query_space()),
    (
        "query/space/search",
        lambda ids: {"text": "namespace"},
        lambda v, ids: {"matches": v.search_query_space("namespace")},
    ),
    ("query/saved", lambda ids: {}, lambda v, ids: {"queries": v.saved_queries()}),
    ("resolve_entity", lambda ids: {"name": "Kim"}, lambda v, ids: v.resolve_entity("Kim")),
    ("facts_context", lambda ids: {"query": "billing"}, lambda v, ids: v.facts_context("billing")),
    (
        "claims_and_sources_context",
        lambda ids: {"query": "launch"},
        lambda v, ids: v.claims_and_sources_context("launch"),
    ),
    ("combined_context", lambda ids: {"query": "billing"}, lambda v, ids: v.combined_context("billing")),
    ("traverse", lambda ids: {"entity_ids": [ids["kim"]]}, lambda v, ids: v.traverse([ids["kim"]])),
    ("neighbours", lambda ids: {"chunk_id": ids["chunk"]}, lambda v, ids: {"chunks": v.neighbours(ids["chunk"])}),
    (
        "lookup",
        lambda ids: {"ids": [ids["kim"], ids["claim"]]},
        lambda v, ids: {"records": v.lookup([ids["kim"], ids["claim"]])},
    ),
    ("hydrate", lambda ids: {"ids": [ids["works"]]}, lambda v, ids: {"records": v.hydrate([ids["works"]])}),
    # every field set
    (
        "fetch",
        lambda ids: {"key": SHARED_KEY, "namespace_prefix": NS, "limit": 11},
        lambda v, ids: {"items": v.fetch(SHARED_KEY, namespace_prefix=NS, limit=11)},
    ),
    (
        "list",
        lambda ids: {"namespace_prefix": NS, "key_prefix": "prefs", "limit": 1, "cursor": ids["cursor"]},
        lambda v, ids: v.list(NS, key_prefix="prefs", limit=1, cursor=ids["cursor"]),
    ),
    (
        "namespaces",
        lambda ids: {"prefix": ["agent", "alice"], "max_depth": 2},
        lambda v, ids: {"namespaces": v.namespaces(NS, max_depth=2)},
    ),
    (
        "summarize",
        lambda ids: {"namespace_prefix": NS, "depth": 1, "key_prefix": "prefs"},
        lambda v, ids: {"summary": v.summarize(NS, depth=1, key_prefix="prefs")},
    ),
    (
        "summarize",
        lambda ids: {"namespace_prefix": NS, "depth": 4},
        lambda v, ids: {"summary": v.summarize(NS, depth=4)},
    ),
    (
        "search",
        lambda ids: {
            "query": "standup",
            "namespace_prefix": ROOM,
            "limit": 1,
            "channels": ["lexical"],
            "candidate_k": 3,
            "rrf_k": 3,
            "weights": {"lexical": 2.0},
        },
        lambda v, ids: v.search(
            "standup",
            namespace_prefix=ROOM,
            limit=1,
            channels=["lexical"],
            candidate_k=3,
            rrf_k=3,
            weights={"lexical": 2.0},
        ),
    ),
    (
        "search",
        lambda ids: {"query": "x", "channels": ["vector"], "embedding": vector("standup")},
        lambda v, ids: v.search("x", channels=["vector"], embedding=vector("standup")),
    ),
    (
        "recall",
        lambda ids: {"query": "standup", "namespace": ROOM, "limit": 1, "mode": "lexical"},
        lambda v, ids: v.recall("standup", namespace_prefix=ROOM, limit=1, mode="lexical"),
    ),
    (
        "recall",
        lambda ids: {"query": "q", "key": SHARED_KEY, "namespace": NS, "limit": 11},
        lambda v, ids: v.recall("q", key=SHARED_KEY, namespace_prefix=NS, limit=11),
    ),
    (
        "recall",
        lambda ids: {"query": "x", "mode": "vector", "embedding": vector("team standup")},
        lambda v, ids: v.recall("x", mode="vector", embedding=vector("team standup")),
    ),
    (
        "query",
        lambda ids: {
            "sql": "SELECT key FROM items WHERE key LIKE ?",
            "params": ["bulk%"],
            "max_rows": 2,
            "timeout_ms": 1500,
        },
        lambda v, ids: v.query("SELECT key FROM items WHERE key LIKE ?", ["bulk%"], max_rows=2, timeout_ms=1500),
    ),
    (
        "query/explain",
        lambda ids: {"sql": "SELECT key FROM items WHERE key = :k", "params": {"k": "x"}},
        lambda v, ids: v.explain_query("SELECT key FROM items WHERE key = :k", {"k": "x"}),
    ),
    (
        "query/run",
        lambda ids: {"name": "by_key", "params": {"pattern": "bulk%"}, "max_rows": 3, "timeout_ms": 1500},
        lambda v, ids: v.run_saved_query("by_key", {"pattern": "bulk%"}, max_rows=3, timeout_ms=1500),
    ),
]


def test_every_route_hands_each_body_field_to_the_core_and_answers_what_it_answers(
    world: World, app: InProcess
) -> None:
    differ = []
    for route, body, call in ROUTES:
        resp = app.post(route, body(world.ids))
        assert resp.status_code == 200, (route, resp.text)
        if plain(resp.json()) != plain(call(world.view(), world.ids)):
            differ.append((route, body(world.ids)))
    assert differ == []
    get = app.get("query/space")
    assert get.status_code == 200 and get.json() == app.post("query/space", {}).json()


def test_every_write_route_hands_each_body_field_to_the_core(world: World, app: InProcess) -> None:
    mem, ns = world.mem, f"{NS}/routes"
    # put: every field, then the documented defaults (text from the value, no metadata, no ttl, if_absent false)
    full = app.post("put", {"namespace": ns, "key": "full", "value": 1, "text": "t", "metadata": {"m": 1}, "ttl": 60})
    assert plain(full.json()) == plain(mem.get(ns, "full")) and full.json()["author"] == "alice"
    item = mem.get(ns, "full")
    assert item is not None and item.expires_at is not None
    assert (item.text, item.metadata, item.expires_at - item.updated_at) == ("t", {"m": 1}, timedelta(seconds=60))
    first = app.post("put", {"namespace": ns, "key": "raw", "value": {"n": 1}}).json()
    assert (first["text"], first["metadata"], first["version"], "expires_at" in first) == ('{"n":1}', {}, 1, False)
    second = app.post("put", {"namespace": ns, "key": "raw", "value": 2}).json()
    assert second["version"] == 2 and second["id"] == first["id"]
    assert app.post("put", {"namespace": ns, "key": "raw", "value": 3, "if_absent": True}).status_code == 409
    generated = app.post("put", {"namespace": ns, "value": "no key"}).json()
    assert plain(mem.get(ns, generated["key"])) == plain(generated)
    # put_many: every record field, the default if_absent (false), then true
    records = [
        {"namespace": ns, "key": "raw", "value": 4, "text": "four", "metadata": {"n": 4}, "ttl": 30},
        {"namespace": ["agent", "alice", "routes"], "key": "other", "value": 5},
    ]
    items = app.post("put_many", {"records": records}).json()["items"]
    assert [plain(i) for i in items] == [plain(mem.get(ns, k)) for k in ("raw", "other")]
    assert (items[0]["version"], items[0]["text"], items[0]["metadata"], "expires_at" in items[0]) == (
        3,
        "four",
        {"n": 4},
        True,
    )
    assert app.post("put_many", {"records": records, "if_absent": True}).status_code == 409
    assert mem.get(ns, "raw").version == 3  # type: ignore[union-attr]
    # delete, clear
    assert app.post("delete", {"namespace": ns, "key": "other"}).json() == {"deleted": True}
    assert mem.get(ns, "other") is None
    assert app.post("delete", {"namespace": ns, "key": "other"}).status_code == 404
    assert app.post("clear", {"namespace_prefix": ["agent", "alice", "routes"]}).json() == {"deleted": 3}
    # saved queries: description given, then left out
    saved = app.post("query/save", {"name": "routes", "sql": "SELECT 1", "description": "one"}).json()
    assert plain(saved) == plain(next(q for q in world.view().saved_queries() if q.name == "routes"))
    assert saved["description"] == "one"
    assert app.post("query/save", {"name": "routes", "sql": "SELECT 2"}).json()["description"] == ""
    assert app.post("query/delete", {"name": "routes"}).json() == {"deleted": True}
    assert app.post("query/delete", {"name": "routes"}).json() == {"deleted": False}
    # administration
    made = app.post("admin/agents", {"name": "dana", "admin": True}, as_="root").json()
    assert made["agent"]["admin"] is True and world.access.agent("dana").admin is True


# -- answer shapes: every documented key ---------------------------------------------------

ITEM = {"id", "namespace", "key", "value", "value_type", "text", "metadata", "author", "created_at", "updated_at"}
ITEM_ALL = ITEM | {"expires_at", "version"}
ENVELOPE = {"operation", "params", "hits", "counts", "dropped_by_hydration", "truncated", "timings", "notes"} | {
    "below_floor",
    "status",
}
CONTEXT = {"operation", "params", "status", "sections", "counts", "dropped", "truncated", "timings", "notes"}
RESULT = {"columns", "rows", "row_count", "truncated", "truncated_by", "limits", "elapsed_ms", "views", "notes"}
PLAN = {"valid", "sql", "runs", "views", "functions", "parameters", "plan", "reason", "message", "part"}
SPACE = {"schema", "dialect", "views", "functions", "casts", "parameters", "limits", "notes"}
SAVED = {"name", "sql", "description", "parameters", "author", "created_at", "updated_at"}


def test_each_answer_has_every_documented_key_and_openapi_documents_it(world: World, app: InProcess) -> None:
    def ok(route: str, body: Any, as_: str = "alice") -> Any:
        resp = app.post(route, body, as_=as_)
        assert resp.status_code == 200, resp.text
        assert resp.headers["content-type"] == "application/json"
        return resp.json()

    item = ok("put", {"namespace": f"{NS}/shape", "key": "k", "value": 1, "ttl": 60})
    assert set(item) == ITEM_ALL
    assert set(ok("put_many", {"records": [{"namespace": f"{NS}/shape", "key": "m", "value": 1}]})) == {"items"}
    assert set(ok("get", {"namespace": f"{NS}/shape", "key": "k"})) == ITEM_ALL
    assert set(ok("get_many", {"addresses": []})) == {"items"}
    assert set(ok("fetch", {"key": "k"})) == {"items"}
    assert set(ok("list", {"limit": 1})) == {"items", "next_cursor"}
    assert set(ok("list", {"namespace_prefix": f"{NS}/shape"})) == {"items"}
    assert set(ok("namespaces", {})) == {"namespaces"} and set(ok("summarize", {})) == {"summary"}
    ok("put", {"namespace": f"{NS}/shape", "key": "k", "value": 2})
    (version,) = ok("history", {"namespace": f"{NS}/shape", "key": "k"})["versions"]
    assert set(version) == ITEM_ALL - {"id"} | {"item_id", "change", "changed_at", "changed_by"}
    assert version["change"] == "replace" and version["changed_by"] == "alice"
    for route, body in (("search", {"query": "standup"}), ("recall", {"query": "standup", "mode": "lexical"})):
        env = ok(route, body)
        # pending_vectors: only when the vector channel ran
        assert set(env) - {"pending_vectors"} == ENVELOPE and env["hits"]
        assert ("pending_vectors" in env) == (route == "search")
        hit = {"version", "score", "ranks", "channel_scores", "matched", "similarity", "relevant", "relevance", "why"}
        assert all(ITEM - {"author"} | hit <= set(h) <= ITEM_ALL | hit for h in env["hits"])
    assert set(ok("recall", {"key": "notes.standup"})) == ENVELOPE
    for route, body in (
        ("facts_context", {"query": "billing"}),
        ("claims_and_sources_context", {"query": "billing"}),
        ("combined_context", {"query": "billing"}),
        ("resolve_entity", {"name": "Kim"}),
        ("traverse", {"entity_ids": [world.ids["kim"]]}),
    ):
        assert set(ok(route, body)) == CONTEXT, route
    assert set(ok("lookup", {"ids": [world.ids["kim"]]})) == {"records"}
    assert set(ok("neighbours", {"chunk_id": world.ids["chunk"]})) == {"chunks"}
    assert set(ok("add_claims", {"namespace": NS, "claims": [{"text": "shape"}]})) == {"claims"}  # as MCP says it
    assert set(ok("query", {"sql": "SELECT 1"})) == RESULT
    assert set(ok("query/run", {"name": "by_key", "params": {"pattern": "x"}})) == RESULT
    assert set(ok("query/explain", {"sql": "SELECT 1"})) == PLAN
    assert ok("query/explain", {"sql": "DROP TABLE items"})["valid"] is False
    space = ok("query/space", {})
    assert set(space) == SPACE
    assert all({"name", "description", "columns"} <= set(view) for view in space["views"])
    matches = ok("query/space/search", {"text": "key"})["matches"]
    assert matches and all(set(m) == {"view", "column", "type", "description", "score"} for m in matches)
    assert set(ok("query/save", {"name": "shape", "sql": "SELECT 1"})) == SAVED
    assert set(ok("query/saved", {})) == {"queries"}
    assert ok("query/delete", {"name": "shape"}) == {"deleted": True}
    assert ok("delete", {"namespace": f"{NS}/shape", "key": "m"}) == {"deleted": True}
    assert ok("clear", {"namespace_prefix": f"{NS}/shape"}) == {"deleted": 1}
    me = app.get("me").json()
    assert set(me) == {"name", "admin", "namespace", "rooms", "grants", "read", "write"}
    assert me["read"] == me["write"] == ["agent/alice", "room/eng"]
    made = ok("admin/agents", {"name": "shape"}, as_="root")
    assert set(made) == {"agent", "token"} and made["token"].startswith("ml_")
    stats = app.get("stats", as_="root").json()
    assert stats["access_records"] == Access(world.mem).count()
    assert app.get("export").headers["content-type"].startswith("application/x-ndjson")
    # /v1/operations lists every POST operation with both schemas; OpenAPI gives each its result model
    ops = app.http.get("/v1/operations").json()
    assert set(ops) == {"version", "operations"} and ops["version"] == "v1" and len(ops["operations"]) > 30
    spec = app.http.get("/openapi.json").json()
    for op in ops["operations"]:
        assert set(op) == {"name", "method", "path", "summary", "params", "result"}
        assert (op["method"], op["path"]) == ("POST", f"/v1/{op['name']}")
        post = spec["paths"][op["path"]]["post"]
        assert post["summary"] == op["summary"]
        answer = post["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer == {"$ref": f"#/components/schemas/{op['result']['title']}"}, op["path"]
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]
    assert spec["info"]["title"] == "memlane" and spec["info"]["version"] == "v1"
    # the service describes itself as the package does
    assert spec["info"]["description"].split(":")[0] == project["description"].split(":")[0]


# -- the plumbing: the Authorization header, the error handlers ----------------------------------


def test_the_bearer_scheme_is_case_insensitive_and_the_error_handlers_give_the_one_shape(
    world: World, app: InProcess
) -> None:
    token = world.tokens["alice"]
    for header in (f"Bearer {token}", f"bearer {token}", f"BEARER {token}", f"Bearer   {token}"):
        resp = app.get("me", as_=None, header=header)
        assert resp.status_code == 200 and resp.json()["name"] == "alice", header
    for header in (None, f"Basic {token}", token, f"Bearer{token}", "Bearer "):
        resp = app.get("me", as_=None, header=header)
        assert resp.status_code == 401 and resp.json()["error"]["type"] == "unauthorized", header
    # a core refusal: the field once, the core's message without it
    with pytest.raises(errors.ValidationError) as core:
        world.view().put(NS, "k", 1, ttl=-5)
    err = app.post("put", {"namespace": NS, "key": "k", "value": 1, "ttl": -5}).json()["error"]
    assert err == {"type": "validation_error", "field": "ttl", "message": str(core.value).removeprefix("ttl: ")}
    # a message that does not begin with its field is kept whole
    forbidden = app.post("get", {"namespace": "agent/bob", "key": "k"}).json()["error"]
    assert forbidden["type"] == "forbidden" and "field" not in forbidden
    # the request model's refusals name the field
    assert app.post("admin/agents", {"name": 5}, as_="root").json()["error"]["field"] == "name"
    missing = app.post("admin/grants", {"agent": "alice", "prefix": "x"}, as_="root").json()["error"]
    assert missing == {"type": "validation_error", "message": "is required", "field": "mode"}
    bad_json = app.http.post("/v1/put", content=b"{oops", headers={"content-type": "application/json"})
    assert bad_json.status_code == 400
    assert bad_json.json() == error_body("validation_error", "is not valid JSON", "body")
    # the framework's own refusals
    nowhere = app.http.get("/v1/nowhere").json()["error"]
    assert (nowhere["type"], nowhere["path"]) == ("no_such_route", "/v1/nowhere")
    assert nowhere["message"].startswith("nothing is served at GET /v1/nowhere: the operations are POST /v1/")
    wrong = app.http.get("/v1/put")
    assert (wrong.status_code, wrong.json()) == (405, error_body("method_not_allowed", "Method Not Allowed"))
    assert wrong.headers["allow"] == "POST"


# -- the body-size limit: exactly the limit passes, one byte past is refused ----------------


def put_body(size: int, key: str) -> bytes:
    """A valid put body of exactly ``size`` bytes."""
    base = {"namespace": f"{NS}/limit", "key": key, "value": ""}
    pad = size - len(json.dumps(base).encode())
    body = json.dumps(base | {"value": "x" * pad}).encode()
    assert len(body) == size
    return body


def chunks(data: bytes, size: int = 1000) -> Iterator[bytes]:
    """An iterator body: httpx sends it chunked, without Content-Length."""
    for i in range(0, len(data), size):
        yield data[i : i + size]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_of_exactly_the_limit_is_read_and_one_byte_more_is_413(world: World, chunked: bool) -> None:
    headers = {"Authorization": f"Bearer {world.tokens['alice']}", "content-type": "application/json"}
    key = f"exact.{'chunked' if chunked else 'declared'}"
    exact = put_body(LIMIT, key)
    resp = world.http.post("/v1/put", content=chunks(exact) if chunked else exact, headers=headers)
    assert resp.status_code == 200, resp.text
    assert world.mem.get(f"{NS}/limit", key).value == json.loads(exact)["value"]  # type: ignore[union-attr]
    over = put_body(LIMIT + 1, key + ".over")
    resp = world.http.post("/v1/put", content=chunks(over) if chunked else over, headers=headers)
    assert resp.status_code == 413
    assert resp.json() == error_body("payload_too_large", f"request body is over {LIMIT:,} bytes")
    assert resp.headers["content-type"] == "application/json"
    assert resp.headers["content-length"] == str(len(resp.content))
    assert world.mem.get(f"{NS}/limit", key + ".over") is None


def test_a_declared_length_over_the_limit_is_refused_before_any_body_byte_is_sent(world: World) -> None:
    """The Content-Length check answers at once: the service does not wait for (or read) the body."""
    host, port = world.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"POST /v1/put HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {LIMIT + 1}\r\n\r\n".encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = sock.recv(4096)
            if not data:
                break
            answer += data
    assert answer.startswith(b"HTTP/1.1 413 "), answer


def run_asgi(app: Any, scope: dict[str, Any], body: list[bytes]) -> list[dict[str, Any]]:
    """Drive an ASGI app with these body chunks; return every message it sent."""
    sent: list[dict[str, Any]] = []
    pending = [{"type": "http.request", "body": b, "more_body": n < len(body) - 1} for n, b in enumerate(body)]

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


HTTP_SCOPE = {"type": "http", "method": "POST", "path": "/", "headers": []}


async def echo(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI app that reads the whole body, then answers 200 with it."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]}
    )
    await send({"type": "http.response.body", "body": body})


def test_body_limit_counts_streamed_chunks_up_to_exactly_the_limit() -> None:
    sent = run_asgi(BodyLimit(echo, 10), HTTP_SCOPE, [b"12345", b"67890"])
    assert [m.get("status") for m in sent] == [200, None] and sent[1]["body"] == b"1234567890"
    sent = run_asgi(BodyLimit(echo, 10), HTTP_SCOPE, [b"12345", b"678901"])
    assert sent[0]["status"] == 413


def test_body_limits_413_is_a_well_formed_asgi_answer() -> None:
    """Lower-case header names (the ASGI spec), a Content-Length that matches, the one error shape."""
    declared = HTTP_SCOPE | {"headers": [(b"content-type", b"application/json"), (b"content-length", b"11")]}
    for scope, body in ((declared, [b""]), (HTTP_SCOPE, [b"x" * 6, b"y" * 6])):
        start, answer = run_asgi(BodyLimit(echo, 10), scope, body)
        payload = json.dumps(error_body("payload_too_large", "request body is over 10 bytes")).encode()
        assert start == {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
        assert answer == {"type": "http.response.body", "body": payload}


def test_body_limit_sends_no_second_answer_once_the_app_has_started_one() -> None:
    async def answers_then_reads(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while (await receive()).get("more_body"):
            pass

    sent = run_asgi(BodyLimit(answers_then_reads, 10), HTTP_SCOPE, [b"x" * 6] * 3)
    assert [m["type"] for m in sent] == ["http.response.start"] and sent[0]["status"] == 200


def test_body_limit_hands_a_disconnect_mid_body_to_the_app() -> None:
    got: list[dict[str, Any]] = []

    async def reads_until_disconnect(scope: Any, receive: Any, send: Any) -> None:
        while True:
            got.append(await receive())
            if got[-1]["type"] == "http.disconnect":
                return

    chunks_then_gone = [b"x" * 8, b"y" * 8]  # more_body stays true on the last one: the client went away
    sent: list[Any] = []
    pending = [{"type": "http.request", "body": b, "more_body": True} for b in chunks_then_gone]

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(BodyLimit(reads_until_disconnect, 16)(HTTP_SCOPE, receive, send))
    assert [m["type"] for m in got] == ["http.request", "http.request", "http.disconnect"] and sent == []


def test_body_limit_passes_other_scopes_through_untouched() -> None:
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope, receive, send))

    async def receive() -> Any:
        return {"type": "websocket.receive", "bytes": b"x" * 100}

    async def send(message: Any) -> None:
        raise AssertionError(f"BodyLimit answered a websocket: {message}")

    scope = {"type": "websocket", "headers": [(b"content-length", b"100")]}
    asyncio.run(BodyLimit(app, 10)(scope, receive, send))
    assert seen == [(scope, receive, send)]


def test_error_body_has_a_field_only_when_one_is_named() -> None:
    assert error_body("not_found", "gone") == {"error": {"type": "not_found", "message": "gone"}}
    assert error_body("validation_error", "bad", "ttl") == {
        "error": {"type": "validation_error", "message": "bad", "field": "ttl"}
    }
    assert error_body("validation_error", "bad", "") == {
        "error": {"type": "validation_error", "message": "bad", "field": ""}
    }


# -- the Client's transport and its caller-side chooser --------------------------------------


def test_the_clients_timeout_bounds_a_request_to_a_service_that_never_answers() -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # accepts connections (the backlog), never answers
    port = listener.getsockname()[1]
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            with memlane.Client(f"http://127.0.0.1:{port}", "ml_x", timeout=0.3) as client:
                client.get(NS, "k")
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - recorded for the main thread
            outcome.append(e)

    worker = threading.Thread(target=call, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(timeout=15)
    listener.close()
    assert not worker.is_alive(), "the request outlived its timeout"
    assert time.monotonic() - started < 10
    (raised,) = outcome
    assert type(raised) is errors.StoreError and "cannot reach the memlane service" in str(raised)


class PickPrefs:
    """A chooser that takes the options on the way to ``prefs.ui.theme``, and records what it was offered."""

    def __init__(self) -> None:
        self.offered: list[dict[str, int]] = []

    def choose(self, query: str, options: Mapping[str, int], *, limit: int) -> list[str]:
        self.offered.append(dict(options))
        wanted = ("prefs", "prefs.ui", "prefs.ui.theme")
        return [o for o in sorted(options) if o.rpartition(":")[2] in wanted][:limit]


@pytest.mark.parametrize("mode", ["single", "tiered"])
def test_a_chooser_runs_in_the_clients_process_over_what_the_agent_may_read(world: World, mode: str) -> None:
    from memlane.domain.search.choose import choose

    remote, local = PickPrefs(), PickPrefs()
    env = world.client.recall("what theme", mode=mode, chooser=remote, namespace_prefix=NS, limit=3)
    want = choose(world.view(), "what theme", local, mode=mode, namespace_prefix=NS, limit=3)
    assert plain(env) == plain(want)
    assert remote.offered == local.offered and remote.offered
    assert env.params["mode"] == mode and [(h.namespace, h.key) for h in env.hits] == [
        (("agent", "alice"), "prefs.ui.theme")
    ]
    assert all(o.startswith("agent/alice") for step in remote.offered for o in step)


# -- a refusal through the Client is the core's exception, with its field and message ----------

# (name, the call on either interface): each must raise; the Client's exception has the core's class,
# field and message (the Client adds where the answer came from, except to invalid input and refused
# queries). QueryRefused's reason and part are not compared: they are lost on the wire (known).
REFUSALS: list[tuple[str, Callable[[Any, dict[str, Any]], Any]]] = [
    ("bad-namespace", lambda m, ids: m.get("a//b", "k")),
    ("bad-key", lambda m, ids: m.history(NS, "a..b")),
    ("bad-cursor", lambda m, ids: m.list(cursor="not-a-cursor")),
    ("bad-limit", lambda m, ids: m.fetch(SHARED_KEY, limit=0)),
    ("bad-channel", lambda m, ids: m.search("q", channels=["telepathy"])),
    ("bad-mode", lambda m, ids: m.recall("q", mode="psychic")),
    ("bad-depth", lambda m, ids: m.summarize(depth=0)),
    ("bad-max-depth", lambda m, ids: m.namespaces(max_depth=99)),
    ("bad-hops", lambda m, ids: m.facts_context("q", hops="far")),
    ("bad-entity-namespace", lambda m, ids: m.add_entity("a//b", "X")),
    ("record-not-a-mapping", lambda m, ids: m.put_many([{"namespace": NS, "key": "ok", "value": 1}, 7])),
    ("record-without-value", lambda m, ids: m.put_many([{"namespace": NS, "key": "novalue"}])),
    ("bad-query-params", lambda m, ids: m.query("SELECT ?", {"a": 1})),
    ("forbidden-read", lambda m, ids: m.get("agent/bob", "k")),
    ("forbidden-write", lambda m, ids: m.put("project/x", "k", 1)),
    ("unknown-saved-query", lambda m, ids: m.run_saved_query("nope")),
    ("unknown-fact", lambda m, ids: m.retract_fact("fact_" + "0" * 32)),
    ("merge-into-itself", lambda m, ids: m.merge_entities(ids["kim"], ids["kim"])),
    ("taken-address", lambda m, ids: m.put(NS, "prefs.ui.font", "x", if_absent=True)),
    ("not-a-select", lambda m, ids: m.query("DELETE FROM items")),
    ("unknown-view", lambda m, ids: m.query("SELECT * FROM nowhere")),
]


@pytest.mark.parametrize(("name", "call"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_a_refusal_through_the_client_is_the_cores_exception(world: World, name: str, call: Callable) -> None:
    with pytest.raises(errors.MemlaneError) as embedded:
        call(world.view(), world.ids)
    with pytest.raises(errors.MemlaneError) as remote:
        call(world.client, world.ids)
    assert type(remote.value) is type(embedded.value)
    assert getattr(remote.value, "field", None) == getattr(embedded.value, "field", None)
    if isinstance(embedded.value, errors.ValidationError | errors.QueryRefused):
        assert str(remote.value) == str(embedded.value)
    else:
        assert str(remote.value).startswith(str(embedded.value) + " (HTTP ")
    assert world.mem.get(NS, "ok") is None and world.mem.get(NS, "novalue") is None


# -- the Client decodes answers of other servers (proxies, older or newer versions) ------------


async def foreign(scope: Any, receive: Any, send: Any) -> None:
    """Answers ``/v1/<status>/<kind>`` with that status and the error shape (``-``: a plain-text body)."""
    _, _, status, kind = scope["path"].split("/", 3)
    if kind == "-":
        body, ctype = b"<html>bad gateway</html>", b"text/html"
    else:
        body, ctype = (
            json.dumps({"error": {"type": kind, "message": "from afar", "field": "f"}}).encode(),
            b"application/json",
        )
    await send({"type": "http.response.start", "status": int(status), "headers": [(b"content-type", ctype)]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[memlane.Client]:
    server = LiveServer(foreign)
    client = memlane.Client(server.url, "ml_x")
    yield client
    client.close()
    server.stop()


@pytest.mark.parametrize(
    ("status", "kind", "exc", "message"),
    [
        (409, "conflict", errors.ConflictError, "from afar"),
        (409, "embedder_mismatch", errors.EmbedderMismatchError, "from afar"),
        (502, "chooser_error", errors.ChooserError, "from afar"),
        (503, "store_error", errors.StoreError, "from afar"),
        (409, "a_kind_from_the_future", errors.ConflictError, "from afar"),  # unknown type: the status decides
        (404, "a_kind_from_the_future", errors.NotFoundError, "from afar"),
        (401, "-", errors.UnauthorizedError, "<html>bad gateway</html>"),
        (403, "-", errors.ForbiddenError, "<html>bad gateway</html>"),
        (500, "-", errors.MemlaneError, "<html>bad gateway</html>"),
        (501, "-", errors.BackendUnavailableError, "<html>bad gateway</html>"),
        (502, "-", errors.EmbedderError, "<html>bad gateway</html>"),
        (504, "-", errors.StoreError, "<html>bad gateway</html>"),  # no mapping at all: the store is unreachable
        (418, "a_kind_from_the_future", errors.StoreError, "from afar"),
    ],
)
def test_the_client_decodes_any_servers_error_answer(
    elsewhere: memlane.Client, status: int, kind: str, exc: type, message: str
) -> None:
    with pytest.raises(errors.MemlaneError) as raised:
        elsewhere._call("POST", f"{status}/{kind}", {})
    assert type(raised.value) is exc
    assert str(raised.value) == f"{message} (HTTP {status} from {elsewhere.url})"


@pytest.mark.parametrize(
    ("status", "kind", "field", "message"),
    [(400, "validation_error", "f", "from afar"), (413, "-", "request", "<html>bad gateway</html>")],
)
def test_the_client_raises_validation_error_for_400_and_413(
    elsewhere: memlane.Client, status: int, kind: str, field: str, message: str
) -> None:
    with pytest.raises(errors.ValidationError) as raised:
        elsewhere._call("POST", f"{status}/{kind}", {})
    assert (raised.value.field, str(raised.value)) == (field, f"{field}: {message}")


def test_export_follows_every_page(world: World) -> None:
    """The service exports in pages of 1000: a scope holding more comes back whole, in address order."""
    world.mem.put_many([{"namespace": f"{NS}/export", "key": f"e.{i:04}", "value": i} for i in range(1001)])
    try:
        exported = list(world.client.export_records())
        listed, cursor = [], None
        while True:
            page = world.view().list(limit=1000, cursor=cursor)
            listed += page.items
            if (cursor := page.next_cursor) is None:
                break
        assert len(exported) == len(listed) > 1001
        assert [(r["namespace"], r["key"]) for r in exported] == [(list(i.namespace), i.key) for i in listed]
    finally:
        world.mem.clear(f"{NS}/export")


def test_the_clients_add_conversation_carries_messages_window_and_runs_its_extractor(world: World) -> None:
    from memlane.domain.extract import Extraction

    seen: list[list[int]] = []

    class Recording:
        def extract(self, turns: Any) -> Extraction:
            seen.append([t.turn for t in turns])
            return Extraction.from_dict({"entities": [{"name": "Porto", "kind": "place"}], "facts": [], "claims": []})

    messages = [{"speaker": s, "text": f"turn {n} about Porto"} for n, s in enumerate(["Ann", "Bo", "Ann", "Bo"])]
    ns = f"{NS}/conv"
    items = world.client.add_conversation(ns, messages, session="s1", window=1, extractor=Recording())
    assert [i.key for i in items] == [f"s1.t0000{n}" for n in range(1, 5)]
    stored = world.mem.list(ns).items
    assert "turn 1 about" in stored[0].text and "turn 2 about" not in stored[0].text  # window 1, not the default 2
    assert seen == [[1, 2, 3, 4]]  # the extractor ran here, on the turns written
    assert world.mem.resolve_entity("Porto", namespace_prefix=ns).status == "resolved"  # filed through the client


def test_the_clients_select_defaults_to_newest_first(world: World) -> None:
    got = world.client.select(f"{NS}/bulk", limit=3)
    assert [i.key for i in got] == [i.key for i in world.view().select(f"{NS}/bulk", limit=3)]
    assert len(got) == 3


def test_the_clients_recall_carries_min_score(world: World) -> None:
    everything = world.client.recall("bulk orchid", floor=False)
    assert everything.hits
    top = max(h.score for h in everything.hits)
    kept = world.client.recall("bulk orchid", floor=False, min_score=top)
    assert kept.hits and all(h.score >= top for h in kept.hits) and len(kept.hits) < len(everything.hits)
