"""Nothing internal in what a caller of the query space sees (#27).

``explain`` showed SQLite's per-connection view names
(``temp.memlane_<token>_namespaces``): the fence refuses every use of them,
but the name was meant to be unknowable as a second guard. Here every answer
the query space gives, on both backends, is searched for the names of its
machinery: the inner views and their token, the context tables and their
indexes, the helpers behind ``text_match``, the clock and scope settings and
the function that checks them on PostgreSQL. Answers: ``explain_query`` of
every view, of ``text_match`` on every view that has it, of joins, CTEs and
parameters, and of statements the fence or the database refuses; the errors
``query`` raises for statements the database refuses; results' notes;
``describe_query_space``, ``search_query_space`` and saved queries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

import memlane
from memlane import QueryRefused, ValidationError
from memlane.core.access import AgentView, Scope
from memlane.store import query_space as space
from memlane.store import runner as qrunner

# written out, not read from memlane: a new piece of machinery must be added here on purpose
MACHINERY = [
    "memlane_ctx",
    "memlane_scope",
    "memlane_now",
    "memlane_fts_query",
    "memlane_match",
    "visible_scope",
    "memlane_query_secret",
    "memlane.now",
    "memlane.scope",
    "memlane.sig",
    "memlane.depths",
    "scope_key",
]
TOKEN = re.compile(r"memlane_[0-9a-f]{16}")

VIEWS = sorted(space.NAMES)
MATCHED = {v.name: v.match[0] for v in space.VIEWS if v.match}
STATEMENTS = [f"SELECT * FROM {v}" for v in VIEWS]
STATEMENTS += [f"SELECT * FROM {v} WHERE text_match({c}, 'billing')" for v, c in MATCHED.items()]
STATEMENTS += [
    "SELECT i.key, f.predicate FROM items i JOIN facts f ON f.namespace = i.namespace WHERE i.key = ?",
    "WITH recent AS (SELECT * FROM items ORDER BY updated_at DESC LIMIT 5) SELECT count(*) FROM recent",
    "SELECT namespace, count(*) FROM namespaces GROUP BY namespace HAVING count(*) > :n",
    "SELECT (SELECT count(*) FROM claims_live c WHERE c.namespace = d.namespace) FROM documents d",
    "SELECT key FROM items WHERE namespace IN (SELECT namespace FROM entities) UNION SELECT name FROM entities",
]
# statements the fence refuses, and ones it passes that the database refuses (each backend its own way)
REFUSED = [
    "SELECT * FROM memory_v1.meta",
    "DELETE FROM items",
    "SELECT nope FROM items",
    "SELECT namespace FROM items, facts",
    "SELECT * FROM items WHERE key = (SELECT key FROM items)",
    "SELECT json_extract(value, '$[') FROM items",
    "SELECT value -> 'x' ->> 1 FROM items",
    "SELECT 1 FROM items UNION SELECT 1, 2 FROM items",
    "SELECT cast(key AS integer) + 1 FROM items",
    "SELECT abs(-9223372036854775807 - 2)",
    "SELECT * FROM claims WHERE text_match(text, 'x')",
    "SELECT * FROM items i JOIN items j USING (nope)",
    "SELECT substr(key, 1, 2, 3) FROM items",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
]


def leaks(answer: Any) -> list[str]:
    text = answer if isinstance(answer, str) else json.dumps(answer, default=str)
    found = [name for name in MACHINERY if name in text]
    return found + TOKEN.findall(text)


@pytest.fixture
def agent(store_url: str) -> Iterator[AgentView]:
    with memlane.open(store_url, embedder="fake", indexing="sync") as mem:
        mem.put("team/a", "billing.plan", "the billing migration plan", metadata={"m": 1})
        mem.put("team/b", "other", "not readable")
        kim = mem.add_entity("team/a", "Kim")
        mem.assert_fact("team/a", kim.id, "owns", "billing")
        doc = mem.add_document("team/a", "Billing", "The billing migration moves in March.")
        mem.add_claim("team/a", "Kim said billing moves", about=[kim.id], chunk=doc.chunk_ids[0])
        mem.save_query("by_key", "SELECT namespace, key FROM items WHERE key = :key")
        read = (("team", "a"), ("room", "x"), ("agent", "me"))
        yield AgentView(mem, Scope(read, read), "me")


def test_explain_of_every_view_and_text_match_names_no_machinery(agent: AgentView) -> None:
    for sql in STATEMENTS:
        params = [1] if "?" in sql else {"n": 0} if ":n" in sql else None
        plan = agent.explain_query(sql, params)
        assert plan.valid and plan.plan, (sql, plan)
        assert leaks(plan.to_dict()) == [], (sql, leaks(plan.to_dict()), plan.to_dict())
        unbound = agent.explain_query(sql)  # planned without values (a generic plan on PostgreSQL 16)
        assert leaks(unbound.to_dict()) == [], sql
    # what runs is the statement as written, in the backend's dialect, text_match included
    plan = agent.explain_query("SELECT * FROM claims WHERE text_match(claim_text, 'billing')")
    assert "text_match(claim_text, 'billing')" in (plan.runs or "")
    namespaces = agent.explain_query("SELECT * FROM namespaces").plan
    assert any("namespaces" in line for line in namespaces) or agent._mem.store.backend == "postgres"


def test_refusals_and_database_errors_name_no_machinery(agent: AgentView) -> None:
    for sql in REFUSED:
        for ask in (agent.explain_query, lambda s: agent.query(s, timeout_ms=300)):
            try:
                answer = ask(sql).to_dict()  # a refused plan, or what ran
            except (QueryRefused, ValidationError) as e:  # what the database refused while planning or running
                answer = {"message": str(e), "part": getattr(e, "part", None), "reason": getattr(e, "reason", None)}
            assert leaks(answer) == [], (sql, answer)


def test_results_notes_descriptions_and_saved_queries_name_no_machinery(agent: AgentView) -> None:
    answers: list[Any] = [
        agent.query("SELECT namespace, key, value, metadata FROM items").to_dict(),
        agent.query("SELECT key FROM items", max_rows=1).to_dict(),  # cut: a note says so
        agent.run_saved_query("by_key", {"key": "billing.plan"}).to_dict(),
        agent.describe_query_space(),
        [q.to_dict() for q in agent.saved_queries()],
    ]
    for words in ("who said it", "scope", "memlane", "clock now", "match text", "namespace prefix"):
        answers.append(agent.search_query_space(words))
    for answer in answers:
        assert leaks(answer) == [], answer
    assert agent.query("SELECT key FROM items").rows == [["billing.plan"]]  # and the scope still holds


def test_the_words_shown_for_machinery_are_the_query_spaces_own() -> None:
    assert space.public("CO-ROUTINE temp.memlane_0123456789abcdef_namespaces") == "CO-ROUTINE namespaces"
    assert space.public("SCAN memlane_0123456789abcdef_memlane_match_claims") == "SCAN claims"
    clock = "(expires_at > (current_setting('memlane.now'::text, true))::text)"
    assert space.public(clock) == "(expires_at > (the memory's clock))"
    for hidden in ("SCAN temp.memlane_ctx", "USING INDEX sqlite_autoindex_memlane_scope_1", "visible_scope()"):
        assert space.public(hidden) is None
    refused = qrunner._public_error(QueryRefused("no such table: temp.memlane_ctx", reason="database_error", part="x"))
    assert "memlane_ctx" not in str(refused) and refused.reason == "database_error" and refused.part is None
    plain = QueryRefused("no such column: nope", reason="database_error", part="nope")
    assert qrunner._public_error(plain) is plain
    inner = QueryRefused("no such table: temp.memlane_0123456789abcdef_items", reason="database_error", part="x")
    renamed = qrunner._public_error(inner)
    assert (str(renamed), renamed.reason, renamed.part) == ("no such table: items", "database_error", "x")


def test_a_plan_shows_no_subquery_emptied_of_the_machinery(agent: AgentView) -> None:
    """A subquery whose every step was the visibility rule's goes with them; the others keep their steps."""
    if agent._mem.store.backend != "sqlite":
        pytest.skip("SQLite's plan tree")
    shown = 0
    for sql in STATEMENTS:
        params = [1] if "?" in sql else {"n": 0} if ":n" in sql else None
        lines = agent.explain_query(sql, params).plan
        for i, line in enumerate(lines):
            if "SUBQUERY" in line:
                shown += 1
                indent = len(line) - len(line.lstrip())
                assert i + 1 < len(lines) and len(lines[i + 1]) - len(lines[i + 1].lstrip()) > indent, (sql, lines)
    assert shown  # the statements' own subqueries, and the clock's, are still shown
