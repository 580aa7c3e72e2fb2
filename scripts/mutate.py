"""Mutation testing, one module at a time: ``make mutate MODULE=validate`` (or every module).

mutmut 3 makes small deliberate bugs (a comparison turned round, a constant changed, a
call dropped) in the listed source files and reruns the tests that reach each mutated
function. A mutant that no test notices marks a behaviour nothing guards.

Each module runs in its own work folder (``.mutate/<module>/``) with its own narrow test
selection, because mutmut reads one configuration per folder and a module touched by
every test (validation) would otherwise rerun hundreds of tests per mutant. Where a
module yields more mutants than ``--sample``, a seeded random sample runs, and the
report says so. Mutants reviewed as equivalent (no test could tell them apart from the
original) are listed with a reason in ``scripts/equivalent/<module>.txt``.

Output: a line per module, ``.mutate/<module>/report.json`` and ``survivors.txt`` (the
diff of every surviving mutant), and with ``--markdown`` the table docs/testing.md shows.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutate"
EQUIVALENT = ROOT / "scripts" / "equivalent"
SQLITE_ONLY = "not postgres and not client"


@dataclass(frozen=True)
class Module:
    """What to mutate and which tests are aimed at it."""

    files: tuple[str, ...]
    tests: tuple[str, ...]
    select: str = SQLITE_ONLY  # a pytest -k expression
    postgres: bool = False
    note: str = ""
    # a large file of which only some functions belong to this module: its dotted name -> those functions
    within: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def keeps(self, mutant: str) -> bool:
        """Whether a mutant (mutmut's name: ``memlane.core.memory.xǁMemoryǁget__mutmut_3``) is this module's."""
        for dotted, functions in self.within.items():
            if mutant.startswith(dotted + "."):
                function = mutant.rsplit("__mutmut_", 1)[0].split("ǁ")[-1].removeprefix(dotted + ".x_")
                return function in functions
        return True


def scope_checks(source: Path = ROOT / "src" / "memlane" / "core" / "memory.py") -> tuple[str, ...]:
    """``Memory``'s methods that enforce an agent's scope, read from its source: the checks (every method that
    reads ``self._scope``, but ``__init__``, which sets it) and every method that calls one, at any depth.

    The async twins (``_aget``, ``_aput``...) call the same checks but are left out: no agent reaches them
    (``AsyncMemory`` wraps an owner's ``Memory``), and the conformance suite's async runs guard their behaviour.
    """
    tree = ast.parse(source.read_text())
    memory = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Memory")
    uses = {  # method -> what it reaches on self (attributes and methods)
        f.name: {
            node.attr
            for node in ast.walk(f)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
        }
        for f in memory.body
        if isinstance(f, ast.FunctionDef) and f.name != "__init__"
    }
    found = {name for name, used in uses.items() if "_scope" in used}
    while more := {name for name, used in uses.items() if used & found} - found:
        found |= more
    return tuple(sorted(found))


SCOPE_CHECKS = scope_checks()

# Memory's methods that make vectors or mark items for the indexer, and a search's catch-up
INDEXING = ("_catch_up", "_to_write", "_writing", "_with_vectors", "_embed", "wait_indexed", "index")

MODULES: dict[str, Module] = {
    "validate": Module(
        files=("src/memlane/values/validate.py",),
        tests=(
            "tests/conformance/test_validation.py",
            "tests/conformance/test_limits.py",
            "tests/conformance/test_items.py",
            "tests/test_validate.py",
        ),
    ),
    "access": Module(
        # since #28 the scope is enforced by Memory itself, and the access records' SQL is in the store
        files=("src/memlane/core/access.py", "src/memlane/store/sharing.py", "src/memlane/core/memory.py"),
        within={"memlane.core.memory": SCOPE_CHECKS},
        tests=(
            "tests/conformance/test_access.py",
            "tests/conformance/test_facts_access.py",
            "tests/test_service.py",
            "tests/test_access.py",
            "tests/test_access_history.py",
            "tests/test_scope_scale.py",
            # Memory's methods that check the scope do other work too: reads, conversations, extraction
            "tests/conformance/test_reads.py",
            "tests/test_conversation.py",
            "tests/test_extract.py",
        ),
    ),
    "store-sqlite": Module(
        files=("src/memlane/store/sqlite.py", "src/memlane/store/_common.py"),
        tests=(
            "tests/conformance/test_items.py",
            "tests/conformance/test_reads.py",
            "tests/conformance/test_ttl.py",
            "tests/conformance/test_export.py",
            "tests/conformance/test_limits.py",
            "tests/conformance/test_search.py",
            "tests/test_rules_property.py",
            "tests/test_store.py",
            "tests/test_sqlite.py",
            "tests/conformance/test_indexing.py",
            "tests/test_langgraph_rules.py",
            # the statements by id and the filters inside search's statements (#35, #37)
            "tests/conformance/test_by_id.py",
            "tests/conformance/test_filter.py",
            "tests/test_sqlite_rewrites.py",
        ),
        # the tests that start other Python processes import the installed memlane, not the mutant
        select=SQLITE_ONLY + " and not processes and not sigkill",
        note="the write, expiry, read and hydrate paths; read-only opening, the indexer's claims, select",
    ),
    "store-postgres": Module(
        files=("src/memlane/store/postgres.py",),
        tests=(
            "tests/conformance/test_items.py",
            "tests/conformance/test_reads.py",
            "tests/conformance/test_ttl.py",
            "tests/conformance/test_export.py",
            "tests/conformance/test_limits.py",
            "tests/conformance/test_search.py",
            "tests/test_rules_property.py",
            "tests/test_postgres.py",
            "tests/test_postgres_rules.py",
            "tests/test_store.py",
            "tests/conformance/test_indexing.py",
            "tests/test_indexing.py",
            "tests/conformance/test_recall.py",
            "tests/test_vector_scope.py",
            "tests/test_relevance.py",
            "tests/test_langgraph_rules.py",
            "tests/conformance/test_select_pages.py",  # select's offset
            "tests/conformance/test_large_batches.py",  # a batch staged through COPY in several runs
            "tests/test_postgres_wide_scope.py",  # a scope wider than SMALL_SCOPE in the lexical statement
            "tests/test_postgres_async_close.py",  # aclose closes an event loop's connections
            "tests/test_postgres_connect.py",  # an unreachable server's message
        ),
        # the tests that start other Python processes import the installed memlane, not the mutant
        select="postgres and not processes and not killed and not shell and not watch",
        postgres=True,
        note="the write, expiry, read and hydrate paths",
    ),
    "search": Module(
        files=("src/memlane/domain/search/rank.py", "src/memlane/values/vectors.py"),
        tests=(
            "tests/test_rank.py",
            "tests/test_relevance.py",
            "tests/conformance/test_search.py",
            "tests/conformance/test_recall.py",
            "tests/test_search_rules.py",
        ),
        select=SQLITE_ONLY + " and not other_words",  # the MiniLM paraphrase tests read bench/data (not copied)
        note="ranking, fusion and confirm",
    ),
    "relevance": Module(
        # its own module since #35 (it was search's): the decision, and the search that feeds it its evidence
        files=("src/memlane/domain/search/relevance.py", "src/memlane/core/memory.py"),
        within={"memlane.core.memory": ("search", "_status")},
        tests=(
            "tests/test_relevance_guards.py",
            "tests/test_relevance_calibrated.py",
            "tests/test_relevance.py",
            "tests/test_relevance_stored.py",
            "tests/test_search_rules.py",
            "tests/conformance/test_read_your_writes.py",
            "tests/conformance/test_search.py",
        ),
        # the async surfaces run search off the loop through the same method: their runs add nothing here; the
        # MiniLM paraphrase tests read bench/data, which the work folder does not hold
        select=SQLITE_ONLY + " and not async and not other_words",
        note="the relevance decision: its evidence, the absent-word cap, stop-word queries, the answer's status",
    ),
    "indexer": Module(
        files=("src/memlane/domain/indexer.py", "src/memlane/core/memory.py"),
        within={"memlane.core.memory": INDEXING},
        tests=(
            "tests/test_catchup.py",
            "tests/conformance/test_read_your_writes.py",
            "tests/conformance/test_indexing.py",
            "tests/conformance/test_unindexed.py",
            "tests/test_indexing.py",
        ),
        select=SQLITE_ONLY + " and not async and not processes and not killed and not watch and not sigkill",
        note="write-behind indexing and a search's catch-up: its bound, its scope, index=False kept from the embedder",
    ),
    "twins": Module(
        # AsyncMemory's awaited operations: the runners of the steps each such Memory method is declared as
        files=("src/memlane/core/twins.py",),
        # SQLite's twins only: the PostgreSQL ones run the same steps (test_async_twins.py's postgres run)
        tests=("tests/test_async_twins.py", "tests/test_operations.py"),
        select=SQLITE_ONLY,
        note="the sync and async runners of the exact reads' and item writes' steps, against each other",
    ),
    "where": Module(
        files=("src/memlane/values/where.py",),
        tests=("tests/test_langgraph_rules.py", "tests/test_langgraph.py", "tests/conformance/test_budget.py"),
        select="not client",  # half of the module is PostgreSQL's jsonb rendering
        postgres=True,
        note="value filters compiled into SQL (select, the LangGraph adapter's search filter)",
    ),
    "langgraph": Module(
        files=("src/memlane/langgraph.py",),
        tests=(
            "tests/test_langgraph.py",
            "tests/test_langgraph_rules.py",
            "tests/test_langgraph_guards.py",
            "tests/test_langgraph_graph.py",
        ),
        # the adapter speaks to a Memory and to a Client alike: the client run is the HTTP path
        select="not postgres",
        note="LangGraph's ops on memlane: the reversible encoding, filters, deep prefixes, wildcards, TTL",
    ),
    "conversation": Module(
        files=("src/memlane/domain/conversation.py",),
        tests=("tests/test_conversation.py",),
        note="turn keys, windows, appends and the index text of a turn",
    ),
    "facts": Module(
        # since #28 the facts layer's statements are in store/facts.py
        files=(
            "src/memlane/domain/facts/layer.py",
            "src/memlane/values/facts.py",
            "src/memlane/values/facts_text.py",
            "src/memlane/store/facts.py",
        ),
        tests=(
            "tests/conformance/test_facts.py",
            "tests/conformance/test_facts_access.py",
            "tests/conformance/test_limits.py",
            "tests/test_facts_lexical.py",
            "tests/test_rules_property.py",
            "tests/test_facts_rules.py",
            "tests/conformance/test_document_context.py",
        ),
    ),
    "query": Module(
        files=("src/memlane/store/fence.py", "src/memlane/domain/query/run.py"),
        tests=(
            "tests/test_query_fence.py",
            "tests/conformance/test_query.py",
            "tests/test_query_rules.py",
            "tests/test_query_public.py",
        ),
        select=SQLITE_ONLY + " and not slow",
        note="the fence (validator) and the runner",
    ),
    "service": Module(
        files=(
            "src/memlane/server/app.py",
            "src/memlane/server/routes.py",
            "src/memlane/values/operations.py",
            "src/memlane/values/wire.py",
            "src/memlane/client.py",
        ),
        tests=(
            "tests/test_service_rules.py",
            "tests/test_routes_rules.py",
            "tests/test_answers.py",
            "tests/test_operations.py",
            "tests/test_golden.py",
            "tests/test_boundary.py",
        ),
        select="",
        note="the operations table, the routes built from it, the error mapping and the Client's error kinds",
    ),
    "client": Module(
        files=("src/memlane/client.py",),
        within={"memlane.client": ("__init__", "url", "__repr__", "close", "__enter__", "__exit__", "_call", "_send")},
        tests=("tests/test_client_retry.py",),
        # the AsyncClient runs the same transport; the real service down for seconds is the slow twin of the
        # fake-clock window tests
        select="not AsyncClient and not real_service",
        note="the Client's transport: what is sent again (429, a lost connection within retry_window), failover",
    ),
    "gate": Module(
        files=("src/memlane/values/gate.py",),
        tests=("tests/test_gate.py",),
        select="",
        note="fair sharing of expensive work: capacity, per-agent share, max_waiting, round robin, time-outs",
    ),
    "workers": Module(
        files=("src/memlane/server/workers.py",),
        # the supervisor's loop (run) and a worker's body (_work) run only in the processes of `memlane serve
        # --workers N`, which import the installed memlane, not the mutant: tests/test_workers.py and
        # tests/test_faults.py guard them from outside. Here: the policies they follow, as functions
        within={
            "memlane.server.workers": (
                "cpu_count",
                "default_workers",
                "pool_size",
                "shared_port",
                "next_start",
                "start_at",
                "_context",
                "single",
                "capture_signals",
            )
        },  # fmt: skip
        tests=(
            "tests/test_faults.py::test_each_workers_pool_is_capped_and_all_of_them_stay_within_the_connections_shared",
            "tests/test_faults.py::test_a_slot_never_leaves_the_port_without_a_listener_longer_than_needed",
            "tests/test_workers.py::test_the_default_over_postgresql_stays_within_its_default_connection_limit",
            "tests/test_workers.py::test_a_slot_whose_workers_keep_dying_waits_longer_each_time_and_a_settled_one_not_at_all",
            "tests/test_workers_policy.py",
        ),
        select="",
        note="the supervisor's policies: worker count, pool size, back-off, the shared port, uvicorn's signals",
    ),
    "mcp-profiles": Module(
        files=("src/memlane/mcp.py",),
        within={
            "memlane.mcp": (
                "instructions",
                "tool_selection",
                "_tool_names",
                "call_tool",
                "build_server",
                "_bearer",
                "_selection",
            )
        },  # fmt: skip
        tests=("tests/test_mcp_profiles.py",),
        select="",
        note="which tools a server offers (--tools, ?tools=), its instructions, the bearer check at /mcp",
    ),
}


def _copy_tree(src: Path, dst: Path) -> None:
    # copy2 keeps mtimes: mutmut regenerates a file's mutants only when its source is newer
    shutil.copytree(
        src, dst, dirs_exist_ok=True, copy_function=shutil.copy2, ignore=shutil.ignore_patterns("__pycache__")
    )


def prepare(name: str, module: Module, rev: str | None) -> Path:
    """Lay out the work folder: sources, tests and a pyproject whose [tool.mutmut] is this module's.

    With ``rev``, sources and tests come from that git revision instead of the work tree.
    """
    work = WORK / (name if rev is None else f"{name}@{rev}")
    work.mkdir(parents=True, exist_ok=True)
    if rev is None:
        for folder in ("src", "tests"):
            _copy_tree(ROOT / folder, work / folder)
    else:
        for folder in ("src", "tests"):
            shutil.rmtree(work / folder, ignore_errors=True)
        archive = subprocess.run(["git", "archive", rev, "src", "tests"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive.stdout, check=True)
    tests = [t for t in module.tests if (work / t.partition("::")[0]).exists()]  # a file or a test's node id
    selection = [*tests, "-p", "no:randomly", "-p", "no:cacheprovider"]
    if module.select:
        selection += ["-k", module.select]
    config = {
        "source_paths": ["src"],
        "only_mutate": list(module.files),
        "pytest_add_cli_args_test_selection": selection,
        "pytest_add_cli_args": ["-W", "ignore"],
        "do_not_mutate_patterns": [],
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in config.items()]
    text = (ROOT / "pyproject.toml").read_text() + "\n".join(lines) + "\n"
    target = work / "pyproject.toml"
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    return work


def _postgres_url() -> str:
    # one server for the whole run: a forked test process would otherwise start its own
    import pgserver

    base = Path("/tmp/memlane-mutate-pg")
    base.mkdir(exist_ok=True)
    os.chmod(base, 0o755)
    return str(pgserver.get_server(str(base), cleanup_mode=None).get_uri())


def list_mutants(work: Path) -> list[str]:
    """Generate the mutants (mutmut's own generator) and return their names."""
    code = (
        "import sys\n"
        "from mutmut.__main__ import create_mutants\n"
        "from mutmut.utils.file_utils import copy_src_dir, copy_also_copy_files, walk_mutatable_files\n"
        "from mutmut.mutation.data import SourceFileMutationData\n"
        "from mutmut.mutation.trampoline import set_mutant_under_test\n"
        "import os, json\n"
        "os.makedirs('mutants', exist_ok=True)\n"
        "set_mutant_under_test('mutant_generation')\n"
        "copy_src_dir(); copy_also_copy_files(); create_mutants(2)\n"
        "names = []\n"
        "for p in walk_mutatable_files():\n"
        "    m = SourceFileMutationData(path=p); m.load(); names += list(m.exit_code_by_key)\n"
        "print(json.dumps(names))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"mutant generation failed in {work}:\n{out.stderr[-4000:]}")
    return sorted(json.loads(out.stdout.strip().splitlines()[-1]))


def equivalents(name: str) -> dict[str, str]:
    """A module's reviewed equivalent mutants: ``mutant-name reason`` per line, ``#`` comments."""
    found: dict[str, str] = {}
    path = EQUIVALENT / f"{name}.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition(" ")
                found[name] = reason.strip()
    return found


def results(work: Path) -> dict[str, int | None]:
    """Each mutant's exit code as mutmut recorded it."""
    codes: dict[str, int | None] = {}
    for meta in (work / "mutants").rglob("*.meta"):
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    return codes


KILLED = {1, 3, 36, 24, -24, 152, 255, -11, -9}  # failed, errored, or hung past the time cap


def run(
    name: str, sample: int, seed: int, workers: int, rev: str | None = None, survivors: bool = False
) -> dict[str, object]:
    """Run a module's mutants (or, with ``survivors``, only those the last run left alive) and score the sample."""
    module = MODULES[name]
    last = WORK / (name if rev is None else f"{name}@{rev}") / "report.json"
    if survivors and not last.exists():
        raise SystemExit(f"{name}: no earlier run to take the survivors from; run it whole first")
    started = time.monotonic()
    work = prepare(name, module, rev)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("MEMLANE_DB", None)
    if module.postgres:
        env["MEMLANE_TEST_PG_URL"] = _postgres_url()
    # mutmut keeps which tests reach which function from the last run; tests written since would be missed
    (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    names = [m for m in list_mutants(work) if module.keeps(m)]
    chosen = sorted(random.Random(seed).sample(names, sample)) if 0 < sample < len(names) else names
    to_run = chosen
    if survivors:
        # a test added since cannot revive a killed mutant: rerun only the others, keep the killed ones' codes
        earlier = json.loads(last.read_text())
        if earlier["seed"] != seed or earlier["run"] != len(chosen):
            raise SystemExit(f"{name}: the last run used another sample (seed {earlier['seed']}); run it whole")
        to_run = sorted(set(earlier["survived"]) | set(earlier["no_tests"]) | set(earlier["not_run"]))
    log = work / "mutmut.log"
    with log.open("w") as out:
        # names go in chunks: a very long argv is refused by the kernel
        for i in range(0, len(to_run), 400):
            cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(workers), *to_run[i : i + 400]]
            subprocess.run(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    codes = results(work)
    equivalent = equivalents(name)
    killed, survived, no_tests, skipped = [], [], [], []
    for mutant in chosen:
        code = codes.get(mutant)
        if mutant in equivalent:
            continue
        if code in KILLED:
            killed.append(mutant)
        elif code in (33, 5):
            no_tests.append(mutant)
        elif code is None or code == 34:
            skipped.append(mutant)
        else:
            survived.append(mutant)
    equivalent_here = sorted(m for m in chosen if m in equivalent)
    scored = len(killed) + len(survived) + len(no_tests)
    report: dict[str, object] = {
        "module": name,
        "files": list(module.files),
        "mutants": len(names),
        "run": len(chosen),
        "sampled": len(chosen) < len(names),
        "seed": seed,
        "killed": len(killed),
        "survived": sorted(survived),
        "no_tests": sorted(no_tests),
        "not_run": sorted(skipped),
        "equivalent": {m: equivalent[m] for m in equivalent_here},
        "score": round(len(killed) / scored, 4) if scored else None,
        "seconds": round(time.monotonic() - started),
        "date": time.strftime("%Y-%m-%d"),
        "rev": rev or "work tree",
        "rerun": len(to_run) if survivors else None,  # how many of the sample this run ran again
    }
    (work / "report.json").write_text(json.dumps(report, indent=2))
    with (work / "survivors.txt").open("w") as out:
        for mutant in sorted(survived + no_tests):
            shown = subprocess.run(
                [sys.executable, "-m", "mutmut", "show", mutant], cwd=work, capture_output=True, text=True
            )
            out.write(f"### {mutant}\n{shown.stdout}\n")
    return report


def rescore(name: str, report: dict[str, Any]) -> dict[str, Any]:
    """A stored report with the equivalents file as it is now (mutants reviewed since the run)."""
    equivalent = equivalents(name)
    for group in ("survived", "no_tests"):
        moved = [m for m in report[group] if m in equivalent]
        report[group] = [m for m in report[group] if m not in equivalent]
        report["equivalent"].update({m: equivalent[m] for m in moved})
    scored = report["killed"] + len(report["survived"]) + len(report["no_tests"])
    report["score"] = round(report["killed"] / scored, 4) if scored else None
    return report


def line(r: dict[str, object]) -> str:
    score = r["score"]
    shown = f"{100 * score:.1f}%" if isinstance(score, float) else "n/a"
    surviving = len(r["survived"]) + len(r["no_tests"])  # type: ignore[arg-type]
    sampled = f" (sample of {r['mutants']}, seed {r['seed']})" if r["sampled"] else ""
    return (
        f"{r['module']}: {r['run']} mutants{sampled}, {r['killed']} killed, {surviving} surviving, "
        f"{len(r['equivalent'])} equivalent: {shown} killed ({r['seconds']} s)"  # type: ignore[arg-type]
    )


def markdown(reports: list[dict[str, object]]) -> str:
    rows = [
        "| module | files | mutants | run | killed | surviving | equivalent | killed of non-equivalent |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in reports:
        score = r["score"]
        surviving = len(r["survived"]) + len(r["no_tests"])  # type: ignore[arg-type]
        run_count = f"{r['run']} (sample, seed {r['seed']})" if r["sampled"] else str(r["run"])
        files = ", ".join(f"`{f.removeprefix('src/memlane/')}`" for f in r["files"])  # type: ignore[attr-defined]
        rows.append(
            f"| {r['module']} | {files} | {r['mutants']} | {run_count} | {r['killed']} | {surviving} | "
            f"{len(r['equivalent'])} | {100 * score:.1f}% |"  # type: ignore[arg-type, operator]
            if isinstance(score, float)
            else f"| {r['module']} | {files} | {r['mutants']} | {run_count} | - | - | - | n/a |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help=f"modules to mutate (default: all): {', '.join(MODULES)}")
    parser.add_argument("--sample", type=int, default=150, help="mutants per module at most (0: all)")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--markdown", action="store_true", help="print the table docs/testing.md shows")
    parser.add_argument("--report-only", action="store_true", help="summarise the last run without running")
    parser.add_argument("--files", action="store_true", help="print the listed source files, comma-separated")
    parser.add_argument("--rev", help="mutate the sources and run the tests of this git revision (default: work tree)")
    parser.add_argument(
        "--survivors", action="store_true", help="rerun only the last run's surviving mutants (after new tests)"
    )
    args = parser.parse_args()
    if args.files:
        print(",".join(f for m in MODULES.values() for f in m.files))
        return
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    reports = []
    for name in args.modules or list(MODULES):
        if args.report_only:
            path = WORK / (name if args.rev is None else f"{name}@{args.rev}") / "report.json"
            if not path.exists():
                print(f"{name}: not run yet (make mutate MODULE={name})")
                continue
            report = rescore(name, json.loads(path.read_text()))
        else:
            report = run(name, args.sample, args.seed, args.workers, args.rev, args.survivors)
        reports.append(report)
        print(line(report), flush=True)
    if args.markdown:
        print()
        print(markdown(reports))


if __name__ == "__main__":
    main()
