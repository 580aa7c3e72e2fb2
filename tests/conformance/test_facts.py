"""Facts, claims and sources: the issue's scenario and each operation's edges, on every backend.

Runs on SQLite, PostgreSQL and the Client over a live service (an admin agent),
so every operation is also exercised through HTTP.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from memlane import ConflictError, NotFoundError, ValidationError
from memlane.values.facts import Chunk, Claim, Document, Entity, Fact

NS = "team/acme"


@pytest.fixture
def world(mem, clock):
    """Two people named Ravi, a billing migration, a cutover date that changed, notes, a standup."""
    w = {}
    w["ravi"] = mem.add_entity(NS, "Ravi", kind="person", aliases=["Ravi K"], profile="backend engineer, billing team")
    w["ravi2"] = mem.add_entity(NS, "Ravi", kind="person", profile="designer in the Lisbon office")
    w["billing"] = mem.add_entity(NS, "Billing migration", kind="project", aliases=["billing-v2"])
    w["dana"] = mem.add_entity(NS, "Dana", kind="person")
    clock.advance(60)
    w["works"] = None
    for i in range(10):  # ten notes repeat one fact
        w["works"] = mem.assert_fact(NS, w["ravi"].id, "works on", w["billing"].id, source=f"note:{i}")
        clock.advance(1)
    w["lead"] = mem.assert_fact(NS, w["dana"].id, "leads", w["billing"].id, source="org-chart")
    w["march"] = mem.assert_fact(NS, w["billing"].id, "cutover date", "2026-03-01", source="plan-v1")
    clock.advance(3600)
    w["before_change"] = clock.now
    clock.advance(3600)
    w["april"] = mem.assert_fact(
        NS, w["billing"].id, "cutover date", "2026-04-15", source="plan-v2", supersedes=w["march"].id
    )
    w["doc"] = mem.add_document(
        NS,
        "Standup 2026-01-05",
        ["Ravi: the billing cutover moves to April 15.", "Dana: agreed, I will tell finance.", "Ravi: thanks."],
        source="meeting:standup-0105",
    )
    w["claim"] = mem.add_claim(
        NS,
        "The billing cutover moves to April 15",
        speaker="Ravi",
        chunk=w["doc"].chunk_ids[0],
        about=[w["billing"].id],
    )
    w["claim2"] = mem.add_claim(
        NS,
        "the billing cutover moves to April 15!",
        speaker="Dana",
        chunk=w["doc"].chunk_ids[1],
        about=[w["billing"].id],
    )
    clock.advance(60)
    return w


def test_two_people_named_ravi_are_told_apart(mem, world):
    ctx = mem.resolve_entity("Ravi")
    assert ctx.status == "ambiguous"
    assert {c.entity.id for c in ctx["entities"]} == {world["ravi"].id, world["ravi2"].id}
    assert "profile" in ctx.notes[0]
    engineer = next(c for c in ctx["entities"] if c.entity.id == world["ravi"].id)
    assert "Ravi works on Billing migration" in engineer.facts  # what sets them apart
    assert mem.resolve_entity("Ravi K").status == "resolved"
    by_alias = mem.resolve_entity("BILLING-V2")  # normalised match on an alias
    assert by_alias.status == "resolved" and by_alias["entities"][0].matched == "normalised"
    assert mem.resolve_entity("Nobody").status == "none"


def test_repeated_fact_is_one_fact_with_evidence(mem, world):
    assert world["works"].evidence_count == 10
    assert world["works"].sources == [f"note:{i}" for i in range(10)]
    again = mem.assert_fact(NS, world["ravi"].id, "works_on", world["billing"].id, source="note:3")
    assert again.id == world["works"].id and again.evidence_count == 10  # distinct sources only
    facts = mem.facts_context("works on", entity_ids=[world["ravi"].id])["facts"]
    assert [f.id for f in facts].count(world["works"].id) == 1


def test_changed_cutover_date_old_value_readable_at_its_time(mem, world):
    now = mem.facts_context("cutover date", entity_ids=[world["billing"].id], predicate="cutover date")
    assert [f.value for f in now["facts"]] == ["2026-04-15"]
    then = mem.facts_context(
        "cutover date",
        entity_ids=[world["billing"].id],
        predicate="cutover date",
        time={"believed_at": world["before_change"]},
    )
    assert [f.value for f in then["facts"]] == ["2026-03-01"]
    assert then.params["time"]["believed_at"].startswith(world["before_change"].date().isoformat())


def test_retracted_fact_gone_now_present_earlier(mem, world, clock):
    believed = clock.now
    clock.advance(10)
    retracted = mem.retract_fact(world["lead"].id)
    assert retracted.retracted_at is not None
    ids_now = [f.id for f in mem.facts_context("leads", entity_ids=[world["dana"].id])["facts"]]
    assert world["lead"].id not in ids_now
    earlier = mem.facts_context("leads", entity_ids=[world["dana"].id], time={"believed_at": believed})
    assert world["lead"].id in [f.id for f in earlier["facts"]]
    with pytest.raises(ConflictError, match="already retracted"):
        mem.retract_fact(world["lead"].id)


def test_two_hop_question_reaches_the_projects_facts(mem, world):
    ctx = mem.facts_context("what is Ravi working on, and when is the cutover", entity_ids=[world["ravi"].id], hops=1)
    texts = [f.text for f in ctx["facts"]]
    assert "Ravi works on Billing migration" in texts
    assert "Billing migration cutover date 2026-04-15" in texts  # a fact of the project Ravi works on
    assert "Billing migration cutover date 2026-03-01" not in texts  # superseded
    assert all(f.recorded_at and f.evidence_count >= 1 for f in ctx["facts"])
    assert ctx.counts["neighbourhood"] >= 2
    assert world["ravi2"].id not in {f.subject for f in ctx["facts"]}  # the other Ravi stays out
    zero = mem.facts_context("cutover", entity_ids=[world["ravi"].id], hops=0)
    assert all(world["ravi"].id in (f.subject, f.object) for f in zero["facts"])


def test_ended_edge_breaks_the_path_whole(mem, world, clock):
    paths = mem.traverse([world["ravi"].id], hops=2)
    assert [p.names for p in paths["paths"]] == [
        ["Ravi", "Billing migration"],
        ["Ravi", "Billing migration", "Dana"],
    ]
    assert paths.dropped["broken_paths"] == 0
    ended_at = clock.now
    clock.advance(60)
    ended = mem.end_fact(world["works"].id, ended_at)
    assert ended.id == world["works"].id and ended.version == 2 and ended.valid_to == ended_at
    after = mem.traverse([world["ravi"].id], hops=2)
    assert after["paths"] == [] and after.dropped["broken_paths"] == 2  # dropped whole, never cut short
    # the world as it was before the end is still answerable
    before = mem.traverse([world["ravi"].id], hops=2, time={"valid_at": ended_at - timedelta(seconds=1)})
    assert len(before["paths"]) == 2
    assert world["works"].id not in [f.id for f in mem.facts_context("works", entity_ids=[world["ravi"].id])["facts"]]


def test_claims_grouped_and_passages_kept_apart(mem, world):
    ctx = mem.claims_and_sources_context("when is the billing cutover", entity_ids=[world["billing"].id])
    groups = ctx["claims"]
    assert groups[0].corroboration == 2 and {c.speaker for c in groups[0].claims} == {"Ravi", "Dana"}
    assert [p.id for p in ctx["passages"]][0] == world["doc"].chunk_ids[0]
    assert all(isinstance(p, Chunk) for p in ctx["passages"])
    mem.supersede_claim(world["claim2"].id, world["claim"].id)
    after = mem.claims_and_sources_context("when is the billing cutover")
    assert after["claims"][0].corroboration == 1  # superseded testimony is not current
    with pytest.raises(ConflictError):
        mem.supersede_claim(world["claim2"].id)


def test_combined_runs_both_side_by_side(mem, world):
    ctx = mem.combined_context("billing cutover", entity_ids=[world["billing"].id])
    assert set(ctx.sections) == {"facts", "claims", "passages"}
    assert any(f.predicate == "cutover_date" for f in ctx["facts"])
    assert ctx["claims"] and ctx["passages"]
    assert {"facts_ms", "claims_and_sources_ms"} <= set(ctx.timings)


def test_merged_entity_keeps_resolving_to_survivor(mem, world):
    dup = mem.add_entity(NS, "R. Kumar", kind="person")
    mem.assert_fact(NS, dup.id, "reports to", world["dana"].id)
    survivor = mem.merge_entities(world["ravi"].id, dup.id)
    assert "R. Kumar" in survivor.aliases
    ctx = mem.resolve_entity("R. Kumar")
    assert ctx.status == "resolved" and ctx["entities"][0].entity.id == world["ravi"].id
    facts = mem.facts_context("reports", entity_ids=[dup.id])["facts"]  # the merged-away id still works
    assert any(f.subject == world["ravi"].id and f.predicate == "reports_to" for f in facts)
    with pytest.raises(ConflictError):
        mem.merge_entities(world["ravi"].id, dup.id)


def test_primitives_lookup_hydrate_neighbours(mem, world):
    w = world
    found = mem.lookup(
        [w["ravi"].id, w["works"].id, w["doc"].id, w["doc"].chunk_ids[1], w["claim"].id, "fact_" + "0" * 32]
    )
    assert [type(r) for r in found] == [Entity, Fact, Document, Chunk, Claim, type(None)]
    assert found[2].chunk_ids == w["doc"].chunk_ids
    assert mem.hydrate([w["march"].id, w["april"].id]) == [None, mem.hydrate([w["april"].id])[0]]
    around = mem.neighbours(w["doc"].chunk_ids[1])
    assert [c.position for c in around] == [0, 1, 2]
    assert [c.position for c in mem.neighbours(w["doc"].chunk_ids[0], before=3, after=0)] == [0]
    with pytest.raises(NotFoundError):
        mem.neighbours("chunk_" + "0" * 32)
    with pytest.raises(ValidationError, match="unknown kind"):
        mem.lookup(["item_1"])


def test_add_alias_and_documents_are_chunked(mem):
    e = mem.add_entity(NS, "Project Falcon", kind="project")
    assert "Falcon" in mem.add_alias(e.id, "Falcon").aliases
    long = "\n\n".join(f"Paragraph {i}. " + "word " * 60 for i in range(6))
    doc = mem.add_document(NS, "Design notes", long, chunk_chars=400)
    chunks = [mem.lookup([c])[0] for c in doc.chunk_ids]
    assert doc.chunk_count == len(chunks) > 1
    assert all(len(c.text) <= 400 for c in chunks)
    assert [c.position for c in chunks] == list(range(len(chunks)))
    assert "".join(c.text for c in chunks).replace("\n", "").count("Paragraph") == 6


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (
            lambda m, w: m.facts_context(
                "x", entity_ids=[w["ravi"].id] * 1 + ["ent_" + f"{i:032x}" for i in range(20)]
            ),
            "entity_ids",
        ),
        (lambda m, w: m.facts_context("x", entity_ids=[w["ravi"].id], hops=9), "hops"),
        (lambda m, w: m.claims_and_sources_context("x", k=101), "k"),
        (lambda m, w: m.claims_and_sources_context("x", candidate_k=401), "candidate_k"),
        (lambda m, w: m.facts_context("x", time={"when": "now"}), "time"),
        (lambda m, w: m.facts_context("x", time={"valid_at": "yesterday"}), "time.valid_at"),
        (lambda m, w: m.assert_fact(NS, w["ravi"].id, "  ", 1), "predicate"),
        (lambda m, w: m.assert_fact(NS, "Ravi", "likes", 1), "subject"),
        (
            lambda m, w: m.assert_fact(NS, w["ravi"].id, "x", 1, valid_from="2026-02-01", valid_to="2026-01-01"),
            "valid_to",
        ),
        (lambda m, w: m.add_entity(NS, ""), "name"),
        (lambda m, w: m.add_document(NS, "t", "   "), "text"),
        (lambda m, w: m.add_claim(NS, "x", about="ent_1"), "about"),
    ],
)
def test_bad_input_is_refused_naming_the_field(mem, world, call, field):
    with pytest.raises(ValidationError) as err:
        call(mem, world)
    assert err.value.field == field


def test_unknown_references_are_not_found(mem, world):
    ghost = "ent_" + "f" * 32
    with pytest.raises(NotFoundError, match="no entity"):
        mem.assert_fact(NS, world["ravi"].id, "knows", ghost)
    with pytest.raises(NotFoundError, match="no chunk"):
        mem.add_claim(NS, "x", chunk="chunk_" + "0" * 32)
    with pytest.raises(NotFoundError, match="no fact"):
        mem.retract_fact("fact_" + "0" * 32)


def test_add_claims_in_one_call_all_or_nothing(mem, world):
    chunk = world["doc"].chunk_ids[2]
    added = mem.add_claims(NS, [
        {"text": "Thanks were given", "speaker": "Ravi", "chunk": chunk},
        {"text": "Billing is on track", "about": [world["billing"].id], "asserted_at": "2026-01-05T10:00:00Z"},
    ])  # fmt: skip
    assert [c.text for c in added] == ["Thanks were given", "Billing is on track"]
    assert added[1].about == [world["billing"].id] and added[1].asserted_at.isoformat().startswith("2026-01-05")
    assert mem.lookup([added[0].id])[0].chunk_id == chunk
    said = mem.claims_and_sources_context("billing on track")
    assert said["claims"][0].text == "Billing is on track"
    before = mem.lookup([c.id for c in added])
    with pytest.raises(ValidationError) as err:
        mem.add_claims(NS, [{"text": "fine"}, {"text": "x", "speeker": "typo"}])
    assert err.value.field == "claims[1].speeker"
    with pytest.raises(NotFoundError):
        mem.add_claims(NS, [{"text": "kept?"}, {"text": "bad chunk", "chunk": "chunk_" + "0" * 32}])
    texts = {g.text for g in mem.claims_and_sources_context("kept", k=100)["claims"]}
    assert "kept?" not in texts and "fine" not in texts  # nothing of a refused batch was written
    assert mem.lookup([c.id for c in added]) == before
    assert mem.add_claims(NS, []) == []
