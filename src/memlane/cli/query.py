"""`memlane query`: read-only SQL over the memory_v1 views, with a table, CSV or JSON and saved queries.

Each subcommand is an operation of the table (:mod:`memlane.cli.made`); this module declares what the command line
adds: ``-p NAME=VALUE`` parameters, SQL from stdin, ``--csv``, ``--explain`` and the renderings.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

import memlane

from .base import EXIT_INVALID, GROUPS, _brief, _cli_words, _console, _fail, _Group, _option, _show, _table, _value, app
from .made import Call, made


class _SqlByDefault(_Group):
    """``memlane query "SELECT ..."`` runs SQL; ``memlane query describe`` (save, run...) is a subcommand.

    A first argument that names no subcommand (a statement, or an option such as ``--db``) is handed to the ``sql``
    subcommand, so both spellings work and ``--help`` still lists the subcommands. No SELECT is spelled like one.
    """

    _VALUED = frozenset({"--db", "--param", "-p", "--max-rows", "--timeout-ms", "--search", "--description", "-d",
                         "--url", "--token"})  # fmt: skip

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in ("--help", "-h"):
            i = 0  # the first word that is not an option (or an option's value) picks the subcommand
            while i < len(args) and args[i].startswith("-") and args[i] not in ("-", "--"):
                i += 2 if args[i] in self._VALUED else 1
            if i < len(args) and args[i] in self.commands:
                args = [args[i], *args[:i], *args[i + 1 :]]
            elif args[0] not in self.commands:
                args = ["sql", *args]
        return super().parse_args(ctx, args)


GROUPS["query"] = typer.Typer(cls=_SqlByDefault, no_args_is_help=True, help="Read-only SQL over the memory_v1 views: "
                              'memlane query "SELECT ...", or a subcommand below.')  # fmt: skip
app.add_typer(GROUPS["query"], name="query")
PARAMS = _option("--param", "-p", metavar="NAME=VALUE|VALUE", kind=list[str] | None, help="A parameter: NAME=VALUE "
                 "binds :NAME, a bare VALUE binds the next ?. JSON when it parses, else text.")  # fmt: skip
CSV = _option("--csv", help="Print the rows as CSV (with a header) instead of a table.", kind=bool)


def _params(c: Call) -> None:
    """``--param`` values: all ``NAME=VALUE`` (a dict) or all bare (a list); ``-`` as the SQL reads stdin."""
    if c.args.get("sql") == "-":
        c.args["sql"] = sys.stdin.read()
    raw = c.own.get("param")
    if not raw:
        return
    named = [p for p in raw if "=" in p and p.split("=", 1)[0].isidentifier()]
    if named and len(named) != len(raw):
        raise memlane.ValidationError("param", "use either NAME=VALUE for every --param or bare values for every one")
    c.args["params"] = ({k: _value(v, False) for k, v in (p.split("=", 1) for p in raw)} if named
                        else [_value(p, False) for p in raw])  # fmt: skip


def _rows(c: Call) -> None:
    result = c.result
    if c.own.get("csv"):
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([("" if v is None else v if isinstance(v, str) else json.dumps(v)) for v in row]
                         for row in result.rows)  # fmt: skip
    else:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for col in result.columns:
            table.add_column(col, overflow="fold")
        for row in result.rows:
            table.add_row(*(Text(_brief(v, 80)) if v is not None else Text("null", style="dim") for v in row))
        _console().print(table)
        _console(stderr=True).print(f"{result.row_count} row(s) in {result.elapsed_ms:.1f} ms", style="dim")
    for note in result.notes:
        _console(stderr=True).print(Text(f"Note: {_cli_words(note)}", style="yellow"))


def _explained(c: Call) -> None:
    plan, out = c.result, _console()
    if not plan.valid:
        _fail(f"query refused: {plan.message}", EXIT_INVALID)
    out.print("valid: runs on the read-only connection", style="green")
    for label, names in (("views", plan.views), ("functions", plan.functions), ("parameters", plan.parameters)):
        out.print(f"{label}: {', '.join(names) or '-'}", highlight=False)
    out.print(Text(f"runs: {plan.runs}"))
    out.print("plan:")
    for line in plan.plan:
        out.print(Text("  " + line))


def _sql(c: Call) -> Any:
    if c.own["explain"]:
        return c.mem.explain_query(c.args["sql"], c.args.get("params"))
    return c.mem.query(**c.args)


EXPLAIN = _option("--explain", help="Check and plan the statement instead of running it.", kind=bool)
made("query sql", "query", args=("sql",), hide=("params",), own={"param": PARAMS, "explain": EXPLAIN, "csv": CSV},
     prepare=_params, call=_sql, render=lambda c: (_explained if c.own["explain"] else _rows)(c), embedder=False,
     summary='Run one read-only SELECT over the memory_v1 views (the default: `memlane query "SELECT ..."`).',
     example='memlane query "SELECT namespace, count(*) AS n FROM items GROUP BY namespace"\n'
     'memlane query "SELECT claim_text FROM claims_live WHERE speaker = :who" -p who=Dana --csv\n'
     'memlane query --explain "SELECT * FROM facts_current"')  # fmt: skip


def _space(c: Call) -> None:
    if c.own["search"] is not None:
        rows = [(m["view"], m["column"] or "", m["type"], m["description"]) for m in c.result]
        _show(["view", "column", "type", "meaning"], rows, show_edge=False)
        return
    space, out = c.result, _console()
    out.print(f"[bold]{space['schema']}[/bold] ({space['dialect']}): {space['limits']}", highlight=False)
    for view in space["views"]:
        cols = [(col["name"], col["type"], col["description"]) for col in view["columns"]]
        title = f"{view['name']}: {view['description']}"
        out.print(_table(["column", "type", "meaning"], cols, show_edge=False, title=title, title_justify="left"))
    for group, calls in space["functions"].items():
        out.print(Text(f"{group}: " + ", ".join(calls)))
    for note in space["notes"]:
        out.print(Text(f"- {note}"))


made("query describe", "describe_query_space", render=_space, embedder=False,
     own={"search": _option("--search", help="Only views and columns whose name or meaning has these words.")},
     call=lambda c: c.mem.search_query_space(c.own["search"]) if c.own["search"] else c.mem.describe_query_space(),
     example='memlane query describe\nmemlane query describe --search "when said"')  # fmt: skip
made("query save", "save_query", args=("name", "sql"), flags={"description": ("--description", "-d")},
     prepare=_params, embedder=False, render=lambda c: _console().print(
         f"Saved query {c.result.name!r} ({', '.join(c.result.parameters) or 'no parameters'})", highlight=False),
     example='memlane query save claims-by "SELECT claim_text FROM claims_live WHERE speaker = :who"')  # fmt: skip
made("query run", "run_saved_query", args=("name",), hide=("params",), own={"param": PARAMS, "csv": CSV},
     prepare=_params, render=_rows, embedder=False, example="memlane query run claims-by -p who=Dana")  # fmt: skip
made("query saved", "saved_queries", embedder=False, example="memlane query saved",
     render=lambda c: _show(["name", "parameters", "description", "sql"], [
         (q.name, ", ".join(q.parameters), q.description, Text(_brief(q.sql, 80))) for q in c.result],
         show_edge=False))  # fmt: skip


def _delete(c: Call) -> Any:
    if not c.mem.delete_saved_query(**c.args):
        _fail(f"no saved query named {c.args['name']!r}; `memlane query saved` lists them")
    return True


made("query delete", "delete_saved_query", args=("name",), call=_delete, embedder=False,
     example="memlane query delete claims-by",
     render=lambda c: _console().print(f"Deleted saved query {c.args['name']!r}", highlight=False))  # fmt: skip
