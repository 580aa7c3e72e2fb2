"""Runs a doc's Python examples and checks what their comments promise; imports only the standard library.

``tests/test_docs.py`` uses it in its own process; in a fresh virtual environment per extra (see
``test_docs.py``, "a fresh virtual environment per extra") it runs as a script there::

    python docrun.py SPEC.json   # SPEC: {"blocks": [{"name", "code"}], "independent", "url", "token"}

and prints one JSON line: the failure of each block by name (``null`` when it passed).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import sys
import tokenize
import traceback
from typing import Any


def promised(comment: str) -> tuple[bool, Any]:
    """The value a ``# comment`` promises: the longest leading Python literal ending where the prose starts
    (two spaces, ``; ``, ``: ``, `` (``), or nothing if it has none or shows ``...`` for the rest."""
    text = comment.lstrip("#").strip()
    cuts = [len(text)] + sorted((m.start() for m in re.finditer(r"  |; |: | \(", text)), reverse=True)
    for cut in cuts:
        try:
            value = ast.literal_eval(text[:cut])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        return ("..." not in text[:cut] and "Ellipsis" not in repr(value), value)
    return (False, None)


def agrees(actual: Any, expected: Any) -> bool:
    """``actual`` is what ``expected`` promises; a float in a promise is a measurement (a time, a score): any
    number agrees with it; lists and tuples agree element by element."""
    if isinstance(expected, float):
        return isinstance(actual, int | float) and not isinstance(actual, bool)
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(expected)
            and all(agrees(a, e) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(agrees(actual[k], v) for k, v in expected.items())
        )
    if isinstance(expected, bool):
        return actual is expected
    return bool(actual == expected)


class _Promises(ast.NodeTransformer):
    """Wraps each expression statement whose line ends in a literal comment in ``__promise__(expr, literal)``."""

    def __init__(self, comments: dict[int, str]) -> None:
        self.comments = comments
        self.promises: list[Any] = []  # the values promised, by index (a dict is no ast.Constant)

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        checked, value = promised(self.comments.get(node.end_lineno or node.lineno, ""))
        if not checked:
            return node
        self.promises.append(value)
        call = ast.Call(
            ast.Name("__promise__", ast.Load()),
            [node.value, ast.Constant(len(self.promises) - 1), ast.Constant(node.lineno)],
            [],
        )
        return ast.copy_location(ast.Expr(ast.copy_location(call, node)), node)


def compile_example(code: str, filename: str) -> tuple[Any, list[Any]]:
    """The block as code, each literal promise wrapped in a check; the promises.

    No top-level ``await``: a reader runs a block as a script, where ``async with`` needs ``async def main()`` and
    ``asyncio.run``."""
    comments = {
        tok.start[0]: tok.string
        for tok in tokenize.generate_tokens(io.StringIO(code).readline)
        if tok.type == tokenize.COMMENT
    }
    promises = _Promises(comments)
    tree = ast.fix_missing_locations(promises.visit(ast.parse(code, filename)))
    return compile(tree, filename, "exec"), promises.promises


def printed_promise(code: str) -> list[str]:
    """The comment lines that end a block which prints: what it prints, one line each."""
    if "print(" not in code:
        return []
    tail = []
    for line in reversed(code.rstrip().splitlines()):
        if not line.startswith("# "):
            break
        tail.insert(0, line[2:])
    return tail


def run_example(code: str, filename: str, namespace: dict[str, Any]) -> None:
    """Runs one Python block in ``namespace`` and checks what its comments promise."""

    compiled, promises = compile_example(code, filename)

    def promise(actual: Any, index: int, line: int) -> Any:
        expected = promises[index]
        assert agrees(actual, expected), f"{filename}, line {line}: the comment promises {expected!r}, got {actual!r}"
        return actual

    namespace["__promise__"] = promise
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compiled, namespace)  # noqa: S102 - the doc's own example
    expected = printed_promise(code)
    got = [line.strip() for line in out.getvalue().splitlines()]
    assert got[: len(expected)] == expected or not expected, f"{filename}: prints {got}, the comments say {expected}"


def run_spec(spec: dict[str, Any]) -> dict[str, str | None]:
    """Runs the blocks of ``spec`` in order, in one namespace (or each in its own when ``independent``), with the
    names the docs assume: ``mem`` (a memory on ``assumed.db``) and ``token``; returns each block's failure."""
    import memlane

    outcomes: dict[str, str | None] = {}
    shared: dict[str, Any] = {}
    opened = []
    for block in spec["blocks"]:
        namespace = {} if spec.get("independent") else shared
        if not namespace:
            namespace.update({"memlane": memlane, "token": spec.get("token")})
            if not spec.get("independent"):  # the reference's blocks use `mem` without opening it
                namespace["mem"] = memlane.open("assumed.db")
                opened.append(namespace["mem"])
        code = block["code"].replace(spec.get("doc_url", "\x00"), spec.get("url") or "\x00")
        try:
            run_example(code, block["name"], namespace)
        except BaseException:  # recorded for the test to show
            outcomes[block["name"]] = traceback.format_exc(limit=-3)
        else:
            outcomes[block["name"]] = None
    for mem in opened:
        mem.close()
    return outcomes


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        result = run_spec(json.load(f))
    print(json.dumps(result))
