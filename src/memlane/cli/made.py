"""The commands made from the operations table: each operation one command, its parameters from its declaration.

:func:`command` makes a command of one operation: the core's required parameters are arguments, the rest options,
each typed and described as the table declares it. What a command line adds is declared beside it (:class:`Human`).
``--json`` prints exactly the HTTP API's body for the same call (``POST /v1/<operation>``). ``memlane op NAME`` is
every operation with nothing declared beside it, printing that JSON.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

import memlane
import memlane.cli.base as b
import memlane.cli.render as show

from ..values import surface
from ..values.operations import ANSWERS, OPERATION, OPERATIONS, compact, wire_default
from ..values.validate import MAX_DEPTH

# How a parameter is typed on the command line, by the core's annotation; any other is JSON.
_KINDS = {"bool": "flag", "int": "int", "float": "float", "str": "text", "Namespace | str": "text",
          "datetime | str": "text"}  # fmt: skip
_CLI_TYPES: dict[str, Any] = {"flag": bool | None, "int": int | None, "float": float | None, "list": list[str] | None}
_JSON_HINT = {"json": "JSON", "json or text": "JSON or text"}
_EXAMPLE_JSON = {"where": '{"kind": "note"}', "metadata": '{"source": "chat"}'}


def _kind(annotation: str) -> str:
    bare = annotation.removesuffix(" | None")
    return _KINDS.get(bare) or (
        "json or text" if annotation.startswith("str | ") else "json"
    )  # {"valid_at":..}|"current"


def _argument(name: str, raw: Any, kind: str, strict: bool = True) -> Any:
    """One command-line value as the core takes it; ``strict``: `memlane op`'s words for text that is no JSON."""
    if kind == "csv":
        return [part.strip() for part in raw.split(",") if part.strip()]
    if kind not in _JSON_HINT or (kind == "json or text" and not raw.lstrip().startswith(("[", "{"))):
        return raw
    try:
        return json.loads(raw, parse_constant=b._reject_constant)  # NaN and Infinity are no JSON
    except RecursionError:
        raise memlane.ValidationError(
            name, f"is nested more than {MAX_DEPTH} levels deep (lists and objects inside one another)"
        ) from None
    except ValueError as e:
        if kind == "json or text":
            return raw  # text that merely starts with a bracket: "[draft] notes"
        if strict:
            raise memlane.ValidationError(name, f"must be JSON, not {raw!r:.60} (a text value is quoted: '\"text\"')"
                                          ) from None  # fmt: skip
        example = _EXAMPLE_JSON.get(name, "{}")
        raise memlane.ValidationError(name, f"is not valid JSON ({e}); pass an object such as '{example}'") from None


@dataclass
class Call:
    """One run of a command: the core's arguments, the command's own options, the open memory and the answer."""

    args: dict[str, Any]
    own: dict[str, Any]
    mem: Any = None
    result: Any = None


@dataclass(frozen=True)
class Human:
    """What a command line declares beside an operation."""

    args: tuple[str, ...] = ()  # parameters typed in place, in order (required or not)
    flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # parameter: its option's names
    kinds: Mapping[str, str] = field(default_factory=dict)  # parameter: how it is typed, where not as declared
    defaults: Mapping[str, Any] = field(default_factory=dict)  # what the command line gives when left out
    hide: tuple[str, ...] = ()  # parameters the command fills itself (from ``own`` options)
    own: Mapping[str, Any] = field(default_factory=dict)  # options of the command line only: name: Annotated
    prepare: Callable[[Call], None] | None = None  # fills args from own options, before the memory opens
    call: Callable[[Call], Any] | None = None  # the work, where it is more than the operation's one call
    render: Callable[[Call], None] = show.record
    example: str = ""
    summary: str = ""  # the first line of its help, where the operation's is worded for the wire
    helps: Mapping[str, str] = field(default_factory=dict)  # parameter: its help, where typed otherwise
    embedder: bool = True  # an --embedder option; without, it opens with none (the owner's settings)


def _annotation(name: str, flag_names: tuple[str, ...], kind: str, helps: str, default: Any, positional: bool) -> Any:
    if positional:
        return Annotated[_CLI_TYPES.get(kind, str | None), typer.Argument(help=helps, show_default=False,
                                                                          metavar=name.upper())]  # fmt: skip
    if kind == "flag" and len(flag_names) == 1:
        flag_names = (f"{flag_names[0]}/--no-{flag_names[0][2:]}",)
    if default not in (None, (), inspect.Parameter.empty):
        helps += f" Default: {','.join(default) if kind == 'csv' else json.dumps(wire_default(default))}."
    return b._option(*flag_names, help=helps.strip(), kind=_CLI_TYPES.get(kind, str | None))


def command(op_name: str, name: str, group: typer.Typer, human: Human | None = None, **register: Any) -> Any:
    """Register the command ``name`` of the operation ``op_name`` in ``group``: ``memlane op``'s without
    ``human``, printing the HTTP API's JSON; with it, a command for people with ``--json``."""
    op, spec, core = OPERATION[op_name], human or Human(), surface.signature(op_name).parameters
    kinds = {p.name: _kind(str(core[p.name].annotation)) for p in op.params()}
    if human is not None:  # a list of texts is a repeated option (or several arguments) for people, not JSON
        kinds = {
            n: "list" if k == "json" and "Sequence[str]" in str(core[n].annotation) else k for n, k in kinds.items()
        }
    kinds |= spec.kinds
    parameters = []
    offered = [p for p in op.params() if p.name not in spec.hide]
    for param in sorted(offered, key=lambda p: spec.args.index(p.name) if p.name in spec.args else len(spec.args)):
        kind = kinds[param.name]
        positional = param.name in spec.args if human is not None else param.required
        hint = f"({_JSON_HINT[kind]})" if kind in _JSON_HINT else ""
        helps = spec.helps.get(param.name) or " ".join(h for h in (op.meaning(param.name), hint) if h)
        flag_names = spec.flags.get(param.name, ("--" + param.name.replace("_", "-"),))
        annotation = _annotation(param.name, flag_names, kind, helps, spec.defaults.get(param.name, param.default),
                                 positional)  # fmt: skip
        # required: what the core requires, and an argument in place without a default (put's KEY)
        required = param.required or (positional and human is not None and param.default is None)
        required = required and param.name not in spec.defaults
        if required:
            annotation = Annotated[list[str] if kind == "list" else str, *annotation.__metadata__]
        parameters.append(b._keyword(param.name, annotation, inspect.Parameter.empty if required else None))
    own = dict(spec.own) | {"db": b.Db} | ({"embedder": b.EmbedderName} if spec.embedder else {})
    own |= {"url": b.Url, "token": b.Token}  # taken by _command's wrapper: the command works on a service too
    own |= {"as_json": b.AsJson} if human is not None else {}
    for extra, annotation in own.items():
        required = isinstance(annotation.__metadata__[0], typer.models.ArgumentInfo)  # a FILE argument
        default = inspect.Parameter.empty if required else False if annotation.__origin__ is bool else None
        parameters.append(b._keyword(extra, annotation, default))

    def run(**given: Any) -> None:
        db, embedder, as_json = given.pop("db"), given.pop("embedder", None), given.pop("as_json", True)
        mine = {k: given.pop(k) for k in spec.own}
        args = dict(op.optional) | {k: v for k, v in spec.defaults.items() if k not in spec.hide}
        args |= {n: _argument(n, raw, kinds[n], human is None) for n, raw in given.items() if raw not in (None, [])}
        c = Call(op.from_wire(args) if op.from_wire is not None else args, mine)
        if spec.prepare is not None:
            spec.prepare(c)
        with b._open(db, embedder, reads=op.safe, vectors=spec.embedder) as c.mem:  # a read never creates the file
            c.result = spec.call(c) if spec.call is not None else getattr(c.mem, op.name)(**c.args)
            if op.result in ("found", "gone") and not c.result and human is not None:
                b._fail(show.no_item(c.args))
            if mine.get("value_only"):  # get --value: the value alone, for scripts (wins over --json)
                typer.echo(json.dumps(c.result.value, ensure_ascii=False))
            elif as_json:
                b._print_json(compact(ANSWERS[op.result](c.result, c.args)))
            else:
                spec.render(c)

    b._sign(run, parameters)
    if human is None:
        doc = inspect.getdoc(surface.core(op.name)) or ""
        arguments = " ".join(p.name.upper() for p in op.params() if p.required)
        run.__doc__ = f"{op.summary}\n\n{doc}\n\nExample:\n    memlane op {op.name} {arguments}".rstrip()
    else:
        run.__doc__ = f"{spec.summary or op.summary}\n\nExample:\n    " + "\n    ".join(spec.example.splitlines())
    b._command(name, group, **register)(run)
    return run


# Every command for people made from the table, as typed after `memlane`, and its operation.
MADE: dict[str, str] = {}


def made(path: str, op_name: str, aliases: tuple[str, ...] = (), **declared: Any) -> Human:
    """The command ``path`` (``get``, ``entity add``) of the operation ``op_name``, for people, with what it
    ``declared`` beside the operation (the fields of :class:`Human`)."""
    *group, name = path.split()
    human = Human(**declared)
    command(op_name, name, b.GROUPS[group[0]] if group else b.app, human, aliases=aliases)
    MADE[path] = op_name
    return human


def _operation_command(op: Any) -> Any:
    """The ``memlane op`` command of one operation of the table."""
    one = typer.Typer(add_completion=False)
    command(op.name, op.name, one)
    return typer.main.get_command(one)


class _Operations(b._Group):
    """``memlane op``'s commands, each made when it is asked for: the CLI's start-up builds none of them."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [op.name for op in OPERATIONS]

    def get_command(self, ctx: Any, name: str) -> Any:
        op = OPERATION.get(name.replace("-", "_"))
        return None if op is None else sys.modules[__name__]._operation_command(op)


b.app.add_typer(typer.Typer(cls=_Operations, no_args_is_help=True, help="Every operation of the memory, one command "
                            "each, printing the JSON the HTTP API answers (memlane op NAME --help; values of JSON "
                            "parameters are JSON)."), name="op")  # fmt: skip
