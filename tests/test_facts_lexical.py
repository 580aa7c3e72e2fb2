"""The facts layer without an embedder: lexical ranking alone still answers the scenario's questions."""

from __future__ import annotations

from pathlib import Path

import memlane


def test_two_hop_and_claims_without_vectors(tmp_path: Path) -> None:
    mem = memlane.open(str(tmp_path / "m.db"), embedder=None)
    ravi = mem.add_entity("team", "Ravi", kind="person")
    billing = mem.add_entity("team", "Billing migration", kind="project")
    other = mem.add_entity("team", "Office move", kind="project")
    mem.assert_fact("team", ravi.id, "works on", billing.id)
    mem.assert_fact("team", billing.id, "cutover date", "2026-04-15")
    mem.assert_fact("team", other.id, "moving day", "2026-05-01")
    ctx = mem.facts_context("what is Ravi working on", entity_ids=[ravi.id], hops=1)
    texts = [f.text for f in ctx["facts"]]
    # the matched fact first, then the project's facts the query did not name; nothing outside the neighbourhood
    assert texts == ["Ravi works on Billing migration", "Billing migration cutover date 2026-04-15"]
    assert ctx.counts["matched"] == 1 and "vector" not in ctx.counts
    doc = mem.add_document("team", "standup", ["Ravi: the cutover moves to April.", "Dana: fine."])
    mem.add_claim("team", "The cutover moves to April", speaker="Ravi", chunk=doc.chunk_ids[0])
    said = mem.claims_and_sources_context("when is the cutover")
    assert said["claims"][0].text == "The cutover moves to April"
    # the passage that said it first; its neighbour after it, matched on its context (the first passage)
    assert [p.id for p in said["passages"]] == doc.chunk_ids
    assert [p.text for p in said["passages"]] == ["Ravi: the cutover moves to April.", "Dana: fine."]
    mem.close()


def test_string_values_that_merely_start_like_an_id_are_values(tmp_path: Path) -> None:
    with memlane.open(str(tmp_path / "m.db"), embedder=None) as mem:
        kim = mem.add_entity("team", "Kim")
        fact = mem.assert_fact("team", kim.id, "handle", "ent_kim")
        assert (fact.object, fact.value) == (None, "ent_kim")


def test_a_neighbourhood_with_more_facts_than_one_statement_carries(tmp_path: Path) -> None:
    from memlane.domain.facts import layer

    with memlane.open(str(tmp_path / "m.db"), embedder=None) as mem:
        kim = mem.add_entity("team", "Kim")
        for i in range(layer.MAX_AREA + 50):
            mem.assert_fact("team", kim.id, "visited", f"city {i}")
        mem.assert_fact("team", kim.id, "lives in", "Lisbon")
        ctx = mem.facts_context("where does Kim live", entity_ids=[kim.id], limit=5)
        assert ctx["facts"][0].text == "Kim lives in Lisbon"
        assert "facts" in ctx.truncated
