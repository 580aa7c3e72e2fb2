"""The benchmarks that compare with LangGraph still run: a tiny run of each, as a user would start it.

The figures are not checked (timing goals live in bench/); what is checked is that each script starts from
its own folder, finds the installed ``langgraph`` package rather than ``bench/langgraph.py`` (``langgraph`` is a
namespace package, which any same-named module on the path shadows) and reports every subject.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"

pytest.importorskip("langgraph.store.sqlite", reason="the bench extra (LangGraph's stores) is not installed")


def test_kv_compares_memlane_with_langgraph_and_raw_sqlite(tmp_path):
    out = tmp_path / "kv.json"
    args = ["--langgraph", "--backend", "sqlite", "--n", "1000", "--indexing", "0", "--lookups", "100"]
    done = subprocess.run(
        [sys.executable, str(BENCH / "kv.py"), *args, "--json", str(out)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    text = json.dumps(report["runs"])
    assert '"langgraph"' in text and '"memlane"' in text
    assert "500 of 500" in done.stdout  # lexical read-your-writes after put_many


def test_the_langgraph_adapter_benchmark_runs_beside_langgraphs_store():
    done = subprocess.run(
        [sys.executable, str(BENCH / "langgraph.py"), "--n", "200", "--queries", "30", "--backend", "sqlite"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for op in ("put (one new item)", "get", "search, filter", "list_namespaces"):
        assert op in done.stdout
