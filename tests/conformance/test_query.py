"""The query space: memory_v1 views, useful queries, parameters, limits and saved queries, on every backend.

On ``client`` every call goes through the HTTP service with an admin token, so
the same answers come back over the wire (an admin sees everything except the
reserved namespace, like the embedded owner).
"""

from __future__ import annotations

import pytest

from memlane import QueryRefused, ValidationError
from memlane.store import query_space as space


@pytest.fixture
def world(mem, clock):
    """Items in three namespaces, two people and a project with facts, a document with claims."""
    mem.put("user/1", "preferences.ui.theme", "dark")
    mem.put("user/1", "preferences.editor", {"name": "helix", "tabs": 4}, metadata={"source": "chat"})
    mem.put("user/2", "preferences.ui.theme", "light")
    mem.put("room/eng", "session-digest", "billing ships Friday", ttl=3600)
    dana = mem.add_entity("team/acme", "Dana", kind="person")
    ravi = mem.add_entity("team/acme", "Ravi", kind="person", aliases=["R."])
    billing = mem.add_entity("team/acme", "Billing migration", kind="project")
    mem.assert_fact("team/acme", dana.id, "works_on", billing.id, source="standup 1")
    mem.assert_fact("team/acme", dana.id, "works_on", billing.id, source="standup 2")
    mem.assert_fact("team/acme", ravi.id, "works_on", billing.id, source="standup 1")
    mem.assert_fact("team/acme", billing.id, "cutover", "2026-03-01")
    clock.advance(60)
    doc = mem.add_document(
        "team/acme",
        "Billing sync notes",
        ["Dana: the billing migration slips to March.", "Ravi: search reindex is done."],
    )
    mem.add_claim("team/acme", "the billing migration slips to March", speaker="Dana", about=[dana.id, billing.id])
    clock.advance(60)
    mem.add_claim("team/acme", "search reindex is done", speaker="Ravi", about=[ravi.id])
    return {"dana": dana, "ravi": ravi, "billing": billing, "doc": doc}


def test_every_view_has_its_documented_columns(mem):
    for view in space.VIEWS:
        result = mem.query(f"SELECT * FROM {view.name} LIMIT 0")
        assert result.columns == list(view.column_names), view.name
        assert result.rows == [] and not result.truncated
        qualified = mem.query(f"SELECT * FROM memory_v1.{view.name} LIMIT 0")
        assert qualified.columns == list(view.column_names)


def test_items_are_live_unexpired_and_never_the_reserved_namespace(mem, clock):
    mem.put("a", "k", {"x": 1}, metadata={"m": 2})
    mem.put("a", "short", "gone soon", ttl=10)
    with pytest.raises(ValidationError, match="reserved"):  # access records are no items: nothing can plant one
        mem.put("_memlane/secrets", "k", "never visible", text="")
    rows = mem.query("SELECT namespace, key, value, value_type, metadata, version FROM items ORDER BY key").rows
    assert rows == [["a", "k", '{"x":1}', "object", '{"m":2}', 1], ["a", "short", '"gone soon"', "string", "{}", 1]]
    clock.advance(11)
    assert mem.query("SELECT key FROM items").rows == [["k"]]  # expired on the memory's clock, before cleanup
    assert mem.query("SELECT count(*) FROM items WHERE namespace LIKE '%memlane%'").rows == [[0]]
    assert mem.query("SELECT count(*) FROM item_history WHERE namespace LIKE '%memlane%'").rows == [[0]]
    assert "_memlane" not in str(mem.query("SELECT * FROM namespaces").rows)


def test_history_keeps_replaced_versions(mem, clock):
    mem.put("a", "k", "one")
    clock.advance(1)
    mem.put("a", "k", "two")
    mem.delete("a", "k")
    rows = mem.query("SELECT value, version, change FROM item_history WHERE key = ? ORDER BY version", ["k"]).rows
    assert rows == [['"one"', 1, "replace"], ['"two"', 2, "delete"]]


def test_join_facts_with_entities(mem, world):
    rows = mem.query(
        "SELECT s.name, s.kind, f.predicate, o.name AS object, f.evidence_count "
        "FROM facts_current f JOIN entities s ON s.id = f.subject_id JOIN entities o ON o.id = f.object_id "
        "ORDER BY s.name"
    ).rows
    assert rows == [
        ["Dana", "person", "works_on", "Billing migration", 2],
        ["Ravi", "person", "works_on", "Billing migration", 1],
    ]
    value = mem.query("SELECT object_value FROM facts WHERE predicate = 'cutover'").rows
    assert value == [['"2026-03-01"']]


def test_counts_by_namespace(mem, world):
    rows = mem.query("SELECT namespace, count(*) AS n FROM items GROUP BY namespace ORDER BY namespace").rows
    assert rows == [["room/eng", 1], ["user/1", 2], ["user/2", 1]]
    by_ns = {r["namespace"]: r for r in mem.query("SELECT * FROM namespaces").dicts()}
    assert by_ns["team/acme"] == {
        "namespace": "team/acme",
        "depth": 2,
        "items": 0,
        "entities": 3,
        "facts": 3,
        "documents": 1,
        "claims": 2,
    }
    assert by_ns["user/1"]["items"] == 2


def test_newest_claims_and_who_said_them(mem, world):
    rows = mem.query("SELECT speaker, claim_text FROM claims_live ORDER BY recorded_at DESC LIMIT 1").rows
    assert rows == [["Ravi", "search reindex is done"]]
    about = mem.query(
        "SELECT e.name FROM claim_entities ce JOIN entities e ON e.id = ce.entity_id "
        "JOIN claims c ON c.id = ce.claim_id WHERE c.speaker = :who ORDER BY e.name",
        {"who": "Dana"},
    ).rows
    assert about == [["Billing migration"], ["Dana"]]


def test_full_text_match_uses_stemmed_words(mem, world):
    rows = mem.query("SELECT claim_text FROM claims_live WHERE text_match(claim_text, 'migrations billing')").rows
    assert rows == [["the billing migration slips to March"]]
    assert mem.query("SELECT count(*) FROM claims WHERE text_match(claim_text, 'billing reindex')").rows == [[0]]
    chunks = mem.query(
        "SELECT d.title, k.position FROM chunks k JOIN documents d ON d.id = k.document_id "
        "WHERE text_match(k.chunk_text, ?) ORDER BY k.position",
        ["reindex"],
    ).rows
    assert chunks == [["Billing sync notes", 1]]
    items = mem.query("SELECT key FROM items i WHERE text_match(i.text, 'friday')").rows
    assert items == [["session-digest"]]
    facts = mem.query("SELECT count(*) FROM facts_current WHERE text_match(fact_text, 'dana works')").rows
    assert facts == [[1]]


def test_documents_mentioning_two_entities_newest_first(mem, world):
    rows = mem.query(
        "SELECT d.title FROM documents d WHERE EXISTS (SELECT 1 FROM chunks k WHERE k.document_id = d.id "
        "AND text_match(k.chunk_text, 'dana') AND text_match(k.chunk_text, 'billing migration')) "
        "ORDER BY d.recorded_at DESC"
    ).rows
    assert rows == [["Billing sync notes"]]


def test_facts_current_follows_retraction_and_validity(mem, world, clock):
    fact = mem.assert_fact("team/acme", world["ravi"].id, "lives_in", "Lisbon")
    assert mem.query("SELECT count(*) FROM facts_current WHERE predicate = 'lives_in'").rows == [[1]]
    mem.retract_fact(fact.id)
    assert mem.query("SELECT count(*) FROM facts_current WHERE predicate = 'lives_in'").rows == [[0]]
    versions = mem.query("SELECT retracted_at IS NOT NULL FROM facts WHERE id = ?", [fact.id]).rows
    assert versions == [[1]] or versions == [[True]]
    ended = mem.assert_fact("team/acme", world["dana"].id, "on_call", True, valid_from="2025-01-01T00:00:00Z")
    mem.end_fact(ended.id, clock.now.isoformat())
    rows = mem.query("SELECT version, valid_to IS NULL FROM facts WHERE id = ? ORDER BY version", [ended.id]).rows
    assert [r[0] for r in rows] == [1, 2]
    assert mem.query("SELECT count(*) FROM facts_current WHERE id = ?", [ended.id]).rows == [[0]]
    assert mem.query("SELECT count(*) FROM evidence WHERE fact_id = ?", [ended.id]).rows == [[1]]


def test_parameters_bind_by_position_or_name(mem):
    mem.put("a", "k1", 1)
    mem.put("a", "k2", 2)
    assert mem.query("SELECT key FROM items WHERE key = ? OR key = ? ORDER BY key", ["k1", "k2"]).rows == [
        ["k1"],
        ["k2"],
    ]
    # OFFSET written before LIMIT still binds in the order written
    assert mem.query("SELECT key FROM items ORDER BY key LIMIT :n OFFSET :skip", {"n": 1, "skip": 1}).rows == [["k2"]]
    assert mem.query("SELECT ? AS text_with_marks", ["it's ?; --"]).rows == [["it's ?; --"]]
    with pytest.raises(ValidationError, match="params"):
        mem.query("SELECT key FROM items WHERE key = ?", [])
    with pytest.raises(ValidationError, match="params"):
        mem.query("SELECT key FROM items WHERE key = :k", {"other": 1})
    with pytest.raises(QueryRefused, match="mixes"):
        mem.query("SELECT key FROM items WHERE key = ? OR key = :k", ["x"])


def test_row_cap_says_what_was_cut(mem):
    mem.put_many([{"namespace": "a", "key": f"k{i:02}", "value": i} for i in range(30)])
    result = mem.query("SELECT key FROM items ORDER BY key", max_rows=10)
    assert result.row_count == 10 and result.rows[0] == ["k00"]
    assert result.truncated and result.truncated_by == "max_rows"
    assert result.limits["max_rows"] == 10 and result.limits["timeout_ms"] == 2000 and result.limits["max_bytes"] > 0
    assert any("max_rows" in n for n in result.notes)
    full = mem.query("SELECT key FROM items", max_rows=30)
    assert full.row_count == 30 and not full.truncated and full.truncated_by is None
    with pytest.raises(ValidationError, match="max_rows"):
        mem.query("SELECT 1", max_rows=0)
    with pytest.raises(ValidationError, match="timeout_ms"):
        mem.query("SELECT 1", timeout_ms=10**9)


def test_refused_statement_names_the_reason_and_part(mem):
    mem.put("a", "k", 1)
    with pytest.raises(QueryRefused, match="DELETE") as e:
        mem.query("DELETE FROM items")
    assert "read-only" in str(e.value)
    with pytest.raises(QueryRefused, match="sqlite_master"):
        mem.query("SELECT * FROM sqlite_master")
    with pytest.raises(QueryRefused, match="not a view"):
        mem.query("SELECT * FROM nothing_here")
    assert mem.get("a", "k").value == 1


def test_explain_tells_validity_views_functions_and_plan(mem, world):
    plan = mem.explain_query(
        "SELECT speaker, count(*) FROM claims_live c WHERE text_match(c.claim_text, :w) GROUP BY 1"
    )
    assert plan.valid and plan.views == ["claims_live"] and {"count", "text_match"} <= set(plan.functions)
    assert plan.parameters == [":w"] and plan.plan and plan.runs
    bad = mem.explain_query("UPDATE items SET value = '1'")
    assert not bad.valid and bad.reason == "not_select" and "UPDATE" in (bad.message or "")


def test_describe_and_search_the_query_space(mem):
    described = mem.describe_query_space()
    assert [v["name"] for v in described["views"]] == [v.name for v in space.VIEWS]
    claims = next(v for v in described["views"] if v["name"] == "claims_live")
    assert claims["columns"][2] == {
        "name": "claim_text",
        "type": "text",
        "description": claims["columns"][2]["description"],
    }
    assert claims["text_match"] == "claim_text"
    assert described["dialect"] in ("sqlite", "postgres") and described["functions"]["aggregate"]
    found = mem.search_query_space("who said it")
    assert {(h["view"], h["column"]) for h in found[:4]} >= {("claims", "speaker"), ("claims_live", "speaker")}
    assert mem.search_query_space("") == []


def test_saved_queries_run_by_name_with_parameters(mem, world):
    saved = mem.save_query(
        "claims-by", "SELECT claim_text FROM claims_live WHERE speaker = :who ORDER BY 1", "what someone said"
    )
    assert saved.parameters == [":who"] and saved.description == "what someone said"
    assert mem.run_saved_query("claims-by", {"who": "Dana"}).rows == [["the billing migration slips to March"]]
    mem.save_query("claims-by", "SELECT count(*) FROM claims_live WHERE speaker = :who")  # replaces
    assert mem.run_saved_query("claims-by", {"who": "Ravi"}).rows == [[1]]
    assert [q.name for q in mem.saved_queries()] == ["claims-by"]
    with pytest.raises(QueryRefused):
        mem.save_query("bad", "DROP TABLE items")
    with pytest.raises(ValidationError, match="name"):
        mem.save_query("no spaces please", "SELECT 1")
    assert [q.name for q in mem.saved_queries()] == ["claims-by"]
    assert mem.delete_saved_query("claims-by") and not mem.delete_saved_query("claims-by")
    with pytest.raises(KeyError, match="claims-by"):
        mem.run_saved_query("claims-by", {"who": "Dana"})
