"""The query space's documentation is generated from the same source as the validator, and stays true."""

from __future__ import annotations

from pathlib import Path

import pytest

import memlane
from memlane.store import fence
from memlane.store import query_space as space

DOC = Path(__file__).parent.parent / "docs" / "query-space.md"


def test_checked_in_column_reference_matches_the_view_specs():
    assert DOC.read_text(encoding="utf-8") == space.markdown(), (
        "docs/query-space.md is stale; regenerate it: .venv/bin/python -c 'import memlane.store.query_space as s; "
        'open("docs/query-space.md", "w").write(s.markdown())\''
    )


@pytest.mark.parametrize("dialect", space.DIALECTS)
def test_every_documented_function_passes_the_fence(dialect):
    for _, sample in space.function_samples(dialect):
        source = "claims_live" if "text_match" in sample else "items"
        fence.check(f"SELECT {sample} FROM {source}", dialect, bind=False)


def test_every_documented_sqlite_function_runs_past_the_authorizer(tmp_path):
    with memlane.open(str(tmp_path / "m.db"), embedder=None) as mem:
        for _, sample in space.function_samples("sqlite"):
            if "text_match" in sample:
                continue
            sql = f"SELECT {sample} FROM (SELECT 1 AS x, 2 AS y, 1 AS c, 'k' AS k, '{{\"a\": 1}}' AS value) AS t"
            assert mem.query(sql).row_count == 1, sample


def test_view_bodies_name_only_their_documented_columns():
    for view in space.VIEWS:
        for dialect in space.DIALECTS:
            body = space.view_sql(view.body, dialect)
            assert "{" not in body.replace("'{}'", ""), (view.name, dialect)  # every marker filled in
        assert len(set(view.column_names)) == len(view.column_names), view.name
