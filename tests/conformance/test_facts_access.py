"""The visibility rule on the facts layer: every read and write of an agent, on every backend."""

from __future__ import annotations

import pytest

from memlane import ForbiddenError, NotFoundError
from memlane.core.access import Access

pytestmark = pytest.mark.embedded


@pytest.fixture
def acc(mem):
    acc = Access(mem)
    acc.create_agent("alice")
    acc.create_agent("bob")
    acc.create_room("eng")
    acc.add_member("eng", "alice")
    acc.grant("bob", "room/eng", "read")
    return acc


@pytest.fixture
def seeded(acc, mem):
    out = {}
    for ns, who in (("room/eng", "eng"), ("agent/bob", "bob"), ("room/ops", "ops")):
        ent = mem.add_entity(ns, "Payments", kind="project", profile=f"{who} payments project")
        person = mem.add_entity(ns, "Kim", kind="person")
        fact = mem.assert_fact(ns, person.id, "owns", ent.id, source=f"{who}-note")
        doc = mem.add_document(ns, f"{who} notes", [f"{who}: payments launch is on track"])
        claim = mem.add_claim(ns, f"{who} says payments launch is on track", chunk=doc.chunk_ids[0], about=[ent.id])
        out[who] = {"ent": ent, "person": person, "fact": fact, "doc": doc, "claim": claim}
    return out


def test_reads_show_only_what_the_agent_may_see(acc, seeded):
    alice = acc.view(acc.agent("alice"))
    ctx = alice.resolve_entity("Payments")
    assert ctx.status == "resolved" and ctx["entities"][0].entity.namespace == ("room", "eng")
    facts = alice.facts_context("owns payments")
    assert {f.namespace for f in facts["facts"]} == {("room", "eng")}
    said = alice.claims_and_sources_context("payments launch")
    assert {c.namespace for g in said["claims"] for c in g.claims} == {("room", "eng")}
    assert {p.namespace for p in said["passages"]} == {("room", "eng")}
    ids = [seeded[w][k].id for w in ("eng", "bob", "ops") for k in ("ent", "fact", "doc", "claim")]
    visible = [r is not None for r in alice.lookup(ids)]
    assert visible == [True] * 4 + [False] * 8
    assert alice.hydrate([seeded["ops"]["fact"].id]) == [None]
    with pytest.raises(NotFoundError):
        alice.neighbours(seeded["bob"]["doc"].chunk_ids[0])
    with pytest.raises(NotFoundError):  # another agent's entity is no way in
        alice.traverse([seeded["bob"]["person"].id])
    with pytest.raises(NotFoundError):
        alice.facts_context("owns", entity_ids=[seeded["ops"]["ent"].id])
    with pytest.raises(ForbiddenError):
        alice.facts_context("owns", namespace_prefix="room/ops")


def test_writes_need_write_access_and_visible_references(acc, seeded):
    bob = acc.view(acc.agent("bob"))  # reads room/eng, writes only agent/bob
    eng = seeded["eng"]
    assert bob.facts_context("owns", entity_ids=[eng["person"].id])["facts"]
    with pytest.raises(ForbiddenError):
        bob.add_entity("room/eng", "Mallory")
    with pytest.raises(ForbiddenError, match="may read but not write"):
        bob.retract_fact(eng["fact"].id)
    with pytest.raises(ForbiddenError, match="may read but not write"):
        bob.end_fact(eng["fact"].id, "2026-01-01T00:00:00Z")
    with pytest.raises(ForbiddenError, match="may read but not write"):
        bob.supersede_claim(eng["claim"].id)
    with pytest.raises(ForbiddenError, match="may read but not write"):
        bob.add_alias(eng["ent"].id, "Payola")
    with pytest.raises(ForbiddenError, match="may read but not write"):
        bob.merge_entities(seeded["bob"]["ent"].id, eng["ent"].id)
    # his own namespace may cite what he can read, never what he cannot
    own = bob.assert_fact("agent/bob", seeded["bob"]["person"].id, "works with", eng["person"].id)
    assert own.object == eng["person"].id
    with pytest.raises(NotFoundError):
        bob.assert_fact("agent/bob", seeded["bob"]["person"].id, "works with", seeded["ops"]["person"].id)
    with pytest.raises(NotFoundError):
        bob.add_claim("agent/bob", "x", chunk=seeded["ops"]["doc"].chunk_ids[0])
    claim = bob.add_claim("agent/bob", "bob heard payments slipped", about=[eng["ent"].id])
    assert claim.about == [eng["ent"].id]
    assert bob.lookup([eng["fact"].id])[0].retracted_at is None  # nothing changed by the refusals
