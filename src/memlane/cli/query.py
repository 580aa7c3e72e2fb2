"""`memlane query`: read-only SQL over the memory_v1 views, with a table, CSV or JSON and saved queries."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

import memlane

from . import (
    EXIT_INVALID,
    NO_EMBEDDER,
    AsJson,
    Db,
    F,
    _brief,
    _cli_words,
    _command,
    _console,
    _fail,
    _Group,
    _open,
    _print_json,
    _value,
    app,
)


class _SqlByDefault(_Group):
    """``memlane query "SELECT ..."`` runs SQL; ``memlane query describe`` (save, run...) is a subcommand.

    A first argument that names no subcommand (a statement, or an option such as
    ``--db``) is handed to the ``sql`` subcommand, so both spellings work and
    ``--help`` still lists the subcommands. No SELECT is spelled like one.
    """

    _VALUED = frozenset({"--db", "--param", "-p", "--max-rows", "--timeout-ms", "--search", "--description", "-d"})

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in ("--help", "-h"):
            # the first word that is not an option (or an option's value) picks the subcommand
            i = 0
            while i < len(args) and args[i].startswith("-") and args[i] not in ("-", "--"):
                i += 2 if args[i] in self._VALUED else 1
            if i < len(args) and args[i] in self.commands:
                args = [args[i], *args[:i], *args[i + 1 :]]
            elif args[0] not in self.commands:
                args = ["sql", *args]
        return super().parse_args(ctx, args)


query_app = typer.Typer(
    cls=_SqlByDefault,
    help='Read-only SQL over the memory_v1 views: memlane query "SELECT ...", or a subcommand below.',
    no_args_is_help=True,
)
app.add_typer(query_app, name="query")

SqlArg = Annotated[str, typer.Argument(help="One SELECT over the memory_v1 views; - reads stdin.", show_default=False)]
Params = Annotated[
    list[str] | None,
    typer.Option(
        "--param",
        "-p",
        metavar="NAME=VALUE|VALUE",
        help="A parameter: NAME=VALUE binds :NAME, a bare VALUE binds the next ?. JSON when it parses, else text.",
    ),
]
AsCsv = Annotated[bool, typer.Option("--csv", help="Print the rows as CSV (with a header) instead of a table.")]
MaxRows = Annotated[int, typer.Option("--max-rows", help="Stop after this many rows (at most 100,000).")]
TimeoutMs = Annotated[int, typer.Option("--timeout-ms", help="Stop the statement after this long (at most 60,000).")]


def _query_command(name: str) -> Callable[[F], F]:
    """A ``query`` subcommand; a refused statement exits 2 like any invalid input."""

    def register(fn: F) -> F:
        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except memlane.QueryRefused as e:
                _fail(f"query refused: {e}", EXIT_INVALID)

        _command(name, query_app)(guarded)
        return fn

    return register


def _sql_text(sql: str) -> str:
    return sys.stdin.read() if sql == "-" else sql


def _query_params(raw: list[str] | None) -> Any:
    """``--param`` values: all ``NAME=VALUE`` (a dict) or all bare (a list)."""
    if not raw:
        return None
    named = [p for p in raw if "=" in p and p.split("=", 1)[0].isidentifier()]
    if named and len(named) != len(raw):
        raise memlane.ValidationError("param", "use either NAME=VALUE for every --param or bare values for every one")
    if named:
        return {k: _value(v, False) for k, v in (p.split("=", 1) for p in raw)}
    return [_value(p, False) for p in raw]


def _cell(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else json.dumps(value)


def _show_result(result: memlane.QueryResult, as_json: bool, as_csv: bool) -> None:
    if as_json:
        _print_json(result.to_dict())
        return
    if as_csv:
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([_cell(v) for v in row] for row in result.rows)
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


@_query_command("sql")
def query_sql(
    sql: SqlArg,
    params: Params = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Check and plan the statement instead of running it.")
    ] = False,
    max_rows: MaxRows = 1000,
    timeout_ms: TimeoutMs = 2000,
    as_json: AsJson = False,
    as_csv: AsCsv = False,
    db: Db = None,
) -> None:
    """Run one read-only SELECT over the memory_v1 views (the default: `memlane query "SELECT ..."`).

    Example:
        memlane query "SELECT namespace, count(*) AS n FROM items GROUP BY namespace"
        memlane query "SELECT claim_text FROM claims_live WHERE speaker = :who" -p who=Dana --csv
        memlane query --explain "SELECT * FROM facts_current"
    """
    text = _sql_text(sql)
    with _open(db, NO_EMBEDDER) as mem:
        if explain:
            plan = mem.explain_query(text, _query_params(params))
            if as_json:
                _print_json(plan.to_dict())
            elif not plan.valid:
                _fail(f"query refused: {plan.message}", EXIT_INVALID)
            else:
                out = _console()
                out.print("valid: runs on the read-only connection", style="green")
                out.print(f"views: {', '.join(plan.views) or '-'}", highlight=False)
                out.print(f"functions: {', '.join(plan.functions) or '-'}", highlight=False)
                out.print(f"parameters: {', '.join(plan.parameters) or '-'}", highlight=False)
                out.print(Text(f"runs: {plan.runs}"))
                out.print("plan:")
                for line in plan.plan:
                    out.print(Text("  " + line))
            return
        result = mem.query(text, _query_params(params), max_rows=max_rows, timeout_ms=timeout_ms)
    _show_result(result, as_json, as_csv)


@_query_command("describe")
def query_describe(
    search: Annotated[
        str | None, typer.Option("--search", help="Only views and columns whose name or meaning has these words.")
    ] = None,
    as_json: AsJson = False,
    db: Db = None,
) -> None:
    """The memory_v1 views with their columns, the functions you may call and the limits.

    Example:
        memlane query describe
        memlane query describe --search "when said"
    """
    with _open(db, NO_EMBEDDER) as mem:
        if search is not None:
            matches = mem.search_query_space(search)
            if as_json:
                _print_json(matches)
                return
            table = Table("view", "column", "type", "meaning", box=box.SIMPLE_HEAD, show_edge=False)
            for m in matches:
                table.add_row(m["view"], m["column"] or "", m["type"], m["description"])
            _console().print(table)
            return
        space = mem.describe_query_space()
    if as_json:
        _print_json(space)
        return
    out = _console()
    out.print(f"[bold]{space['schema']}[/bold] ({space['dialect']}): {space['limits']}", highlight=False)
    for view in space["views"]:
        table = Table("column", "type", "meaning", box=box.SIMPLE_HEAD, show_edge=False, title_justify="left")
        table.title = f"{view['name']}: {view['description']}"
        for col in view["columns"]:
            table.add_row(col["name"], col["type"], col["description"])
        out.print(table)
    for group, calls in space["functions"].items():
        out.print(Text(f"{group}: " + ", ".join(calls)))
    for note in space["notes"]:
        out.print(Text(f"- {note}"))


@_query_command("save")
def query_save(
    name: Annotated[str, typer.Argument(help="Name to run it by: letters, digits, '_', '.', '-'.")],
    sql: SqlArg,
    description: Annotated[str, typer.Option("--description", "-d", help="What it answers.")] = "",
    as_json: AsJson = False,
    db: Db = None,
) -> None:
    """Check a statement and save it under a name (replacing one of that name).

    Example:
        memlane query save claims-by "SELECT claim_text FROM claims_live WHERE speaker = :who" -d "what someone said"
    """
    with _open(db, NO_EMBEDDER) as mem:
        saved = mem.save_query(name, _sql_text(sql), description)
    if as_json:
        _print_json(saved.to_dict())
        return
    takes = ", ".join(saved.parameters) or "no parameters"
    _console().print(f"Saved query {saved.name!r} ({takes})", highlight=False)


@_query_command("run")
def query_run(
    name: Annotated[str, typer.Argument(help="A saved query's name.")],
    params: Params = None,
    max_rows: MaxRows = 1000,
    timeout_ms: TimeoutMs = 2000,
    as_json: AsJson = False,
    as_csv: AsCsv = False,
    db: Db = None,
) -> None:
    """Run a saved query with parameters.

    Example:
        memlane query run claims-by -p who=Dana
    """
    with _open(db, NO_EMBEDDER) as mem:
        result = mem.run_saved_query(name, _query_params(params), max_rows=max_rows, timeout_ms=timeout_ms)
    _show_result(result, as_json, as_csv)


@_query_command("saved")
def query_saved(as_json: AsJson = False, db: Db = None) -> None:
    """Every saved query with its parameters.

    Example:
        memlane query saved
    """
    with _open(db, NO_EMBEDDER) as mem:
        queries = mem.saved_queries()
    if as_json:
        _print_json([q.to_dict() for q in queries])
        return
    table = Table("name", "parameters", "description", "sql", box=box.SIMPLE_HEAD, show_edge=False)
    for q in queries:
        table.add_row(q.name, ", ".join(q.parameters), q.description, Text(_brief(q.sql, 80)))
    _console().print(table)


@_query_command("delete")
def query_delete(name: Annotated[str, typer.Argument(help="A saved query's name.")], db: Db = None) -> None:
    """Delete a saved query.

    Example:
        memlane query delete claims-by
    """
    with _open(db, NO_EMBEDDER) as mem:
        deleted = mem.delete_saved_query(name)
    if not deleted:
        _fail(f"no saved query named {name!r}; `memlane query saved` lists them")
    _console().print(f"Deleted saved query {name!r}", highlight=False)


# -- history retention ------------------------------------------------------------
