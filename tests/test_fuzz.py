"""A property-based fuzz of the HTTP API from its own OpenAPI (schemathesis) and of the Python API (hypothesis).

Bounded here (a few examples per operation, in ``make test``); ``make fuzz``
runs many more. For every generated request: no 5xx, no traceback in the body,
and a refused request (any 4xx) changes nothing (the store's export and the
agents are the same before and after).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane.server import create_app

EXAMPLES = int(os.environ.get("MEMLANE_FUZZ_EXAMPLES", "6"))

_home = Path(tempfile.mkdtemp(prefix="memlane-fuzz-"))
MEM = memlane.open(_home / "fuzz.db", embedder="fake")
MEM.put("agent/fuzz", "seed", {"a": 1}, text="seed text")
APP = create_app(MEM)
_, TOKEN = APP.state.access.create_agent("fuzz", admin=True)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


def snapshot() -> tuple[Any, ...]:
    return (tuple(map(repr, MEM.export_records())), tuple(a.name for a in APP.state.access.agents()))


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_generated_request_gets_a_5xx_and_a_refused_one_changes_nothing(case: Any) -> None:
    before = snapshot()
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code < 500, (case.method, case.path, response.status_code, response.text[:300])
    assert "Traceback" not in response.text and TOKEN not in response.text
    if 400 <= response.status_code < 500:
        assert snapshot() == before, (case.method, case.path, response.status_code, response.text[:300])


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)
ANY = JSON | st.tuples(st.text(max_size=5)) | st.sampled_from([object(), b"bytes", float("nan"), 10**40])


@pytest.fixture(scope="module")
def mem(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with memlane.open(tmp_path_factory.mktemp("pyfuzz") / "p.db", embedder="fake") as m:
        m.put("a/b", "k", 1, text="one")
        yield m


@settings(max_examples=EXAMPLES * 25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    op=st.sampled_from(["put", "get", "delete", "list", "search", "recall", "fetch", "history", "put_many"]),
    args=st.lists(ANY, max_size=3),
)
def test_python_calls_on_any_input_answer_or_refuse_cleanly_and_a_refusal_changes_nothing(mem, op, args) -> None:
    before = list(mem.export_records())
    try:
        getattr(mem, op)(*args)
    except memlane.MemlaneError as e:
        assert not isinstance(e, memlane.StoreError), e
        assert list(mem.export_records()) == before
    except TypeError as e:  # a wrong number of arguments is Python's own refusal, before memlane runs
        assert "positional argument" in str(e), e
        assert list(mem.export_records()) == before
