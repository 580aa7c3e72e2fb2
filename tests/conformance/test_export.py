"""Export / import round-trips a store exactly."""

from __future__ import annotations

import pytest

import memlane
from memlane import ValidationError

pytestmark = pytest.mark.embedded


def _fill(mem, clock):
    mem.put("user/1", "preferences.ui.theme", "dark", metadata={"m": [1, 2]})
    clock.advance(1)
    mem.put("user/1", "preferences.ui.theme", {"mode": "light", "contrast": 1.5})
    mem.put("room/general", None, "a note about deploys", text="deploy note")
    mem.put("room/general", "ephemeral", 3.12, ttl=60)
    mem.put("room/general", "gone", True)
    mem.delete("room/general", "gone")


def test_export_import_roundtrip_exact(mem, clock, tmp_path):
    _fill(mem, clock)
    exported = list(mem.export_records())
    assert {r["record"] for r in exported} == {"item", "version"}
    with memlane.open(str(tmp_path / "copy.db"), clock=clock, embedder="fake", indexing="sync") as copy:
        assert copy.import_records(exported) == len(exported)
        assert list(copy.export_records()) == exported
        assert copy.get("user/1", "preferences.ui.theme") == mem.get("user/1", "preferences.ui.theme")
        assert copy.history("room/general", "gone") == mem.history("room/general", "gone")
        # rowids differ after import, so only ties may reorder
        assert sorted(h.key for h in copy.search("deploy").hits) == sorted(h.key for h in mem.search("deploy").hits)
        assert copy.stats().vectors == mem.stats().vectors  # recomputed on import
        clock.advance(120)
        assert copy.get("room/general", "ephemeral") is None


def test_import_is_all_or_nothing(mem, clock, tmp_path):
    _fill(mem, clock)
    records = list(mem.export_records())
    records.insert(2, {"record": "item", "namespace": "x", "key": "k"})
    with memlane.open(str(tmp_path / "copy.db"), clock=clock, embedder="fake") as copy:
        with pytest.raises(ValidationError, match="record 3"):
            copy.import_records(records)
        assert copy.stats().active_items == 0 and copy.stats().history_versions == 0


def test_reimport_is_idempotent(mem, clock):
    _fill(mem, clock)
    exported = list(mem.export_records())
    assert mem.import_records(exported) == 0
    assert list(mem.export_records()) == exported


def test_import_over_a_different_live_item_keeps_it_in_history(mem, clock):
    mem.put("u/1", "k", "old")
    exported = list(mem.export_records())
    mem.delete("u/1", "k")
    clock.advance(5)
    mem.put("u/1", "k", "newest")
    clock.advance(5)
    assert mem.import_records(exported) == 1
    assert mem.get("u/1", "k").value == "old"
    latest = mem.history("u/1", "k")[0]
    assert (latest.value, latest.change, latest.changed_at) == ("newest", "import", clock.now)
    assert [h.key for h in mem.search("old", channels=["lexical"]).hits] == ["k"]
    assert mem.search("newest", channels=["lexical"]).hits == []


def test_import_refuses_bad_times_and_kinds(mem):
    good = {
        "record": "item",
        "id": "x",
        "namespace": ["a"],
        "key": "k",
        "value": 1,
        "value_type": "number",
        "text": "1",
        "metadata": {},
        "author": None,
        "created_at": "2026-01-01T00:00:00+00:00",
        "updated_at": "2026-01-01T00:00:00+00:00",
        "expires_at": None,
        "version": 1,
    }
    for bad in (
        {"created_at": "yesterday"},
        {"updated_at": "2026-01-01T00:00:00"},
        {"record": "blob"},
        {"version": 0},
        {"id": 5},
    ):
        with pytest.raises(ValidationError, match="record 1"):
            mem.import_records([good | bad])
    assert mem.import_records([good]) == 1


def _fill_facts(mem, clock):
    kim = mem.add_entity("team", "Kim", kind="person", aliases=["K."])
    dup = mem.add_entity("team", "Kimberly", kind="person")
    pay = mem.add_entity("team", "Payments", kind="project")
    fact = mem.assert_fact("team", kim.id, "owns", pay.id, source="note:1")
    mem.assert_fact("team", kim.id, "owns", pay.id, source="note:2")
    date = mem.assert_fact("team", pay.id, "launch", {"date": "2026-05-01"}, valid_from="2026-01-01")
    clock.advance(5)
    mem.end_fact(fact.id, clock.now)
    mem.retract_fact(date.id)
    mem.merge_entities(dup.id, kim.id)  # into the newer entity: a forward reference
    doc = mem.add_document("team", "notes", ["Kim: payments launch in May.", "ok."], source="meeting")
    first = mem.add_claim("team", "Payments launch in May", speaker="Kim", chunk=doc.chunk_ids[0], about=[pay.id])
    second = mem.add_claim("team", "Payments launch in June", speaker="Kim", about=[pay.id])
    mem.supersede_claim(first.id, second.id)
    return kim, pay


@pytest.mark.parametrize("target", ["sqlite", "postgres"])
def test_facts_layer_travels_with_export_exactly(mem, clock, tmp_path, request, target):
    kim, pay = _fill_facts(mem, clock)
    exported = list(mem.export_records())
    kinds = {r["record"] for r in exported}
    assert {"entity", "alias", "fact", "evidence", "document", "chunk", "claim", "claim_entity"} <= kinds
    url = str(tmp_path / "copy.db") if target == "sqlite" else request.getfixturevalue("postgres").create()
    with memlane.open(url, clock=clock, embedder="fake") as copy:
        assert copy.import_records(exported) == len(exported)
        assert list(copy.export_records()) == exported
        assert copy.import_records(exported) == 0  # idempotent
        assert copy.lookup([kim.id]) == mem.lookup([kim.id])
        assert copy.resolve_entity("K.").to_dict()["sections"] == mem.resolve_entity("K.").to_dict()["sections"]
        ctx = copy.facts_context("owns payments", entity_ids=[pay.id], time={"valid_at": "2026-01-01T12:00:00Z"})
        assert [f.evidence_count for f in ctx["facts"] if f.predicate == "owns"] == [2]
        said = copy.claims_and_sources_context("payments launch")
        assert [g.text for g in said["claims"]] == ["Payments launch in June"]
        assert said["passages"] and said.counts["passages_vector"] > 0  # vectors recomputed on import
    if target == "postgres":
        request.getfixturevalue("postgres").drop(url)


def test_facts_import_refuses_malformed_rows_before_writing(mem, clock):
    _fill(mem, clock)
    bad = [
        {"record": "item", "id": "x", "namespace": ["a"], "key": "k", "value": 1, "value_type": "number", "text": "",
         "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00", "version": 1},
        {"record": "fact", "id": "fact_1", "version": "one"},
    ]  # fmt: skip
    before = list(mem.export_records())
    with pytest.raises(ValidationError, match="record 2"):
        mem.import_records(bad)
    assert list(mem.export_records()) == before
