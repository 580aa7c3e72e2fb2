"""The ``memlane`` command line: a thin shell over :class:`memlane.Memory` (or :class:`memlane.Client`).

Every command parses its arguments, opens the memory, calls one method and renders the answer: rich tables and
trees for people, ``--json`` (the HTTP API's body) for scripts. Each operation of the table is a command made from
its declaration (:mod:`.made`; what a shell adds to each, :mod:`.commands` and :mod:`.query`; renderings,
:mod:`.render`); the commands that are no operation are written by hand (:mod:`.files`, :mod:`.service`), each
saying why. This module holds what they share: errors are mapped in one place, :func:`_command` (a
:class:`~memlane.MemlaneError` becomes one ``Error: ...`` line on stderr and exit code 2 for invalid input, 1 for
anything else), and :func:`_open` opens the file (``--db``, ``--embedder``) or the service (``--url``/``--token``).
"""

from __future__ import annotations

from ..values.operations import OPERATION, OPERATIONS

# The commands, by module: those made from the operations table, then those that are not one operation each.
from . import commands, files, made, query, service  # noqa: E402,F401
from .base import (  # noqa: F401  (what callers and tests use: the entry point, the app, the shared rules)
    EXTRAS,
    GROUPS,
    READS,
    WRITES,
    _cli_words,
    app,
    main,
    namespace_hint,
    nearest_commands,
)
from .made import MADE, _operation_command  # noqa: E402,F401

_OPS = {**{path: OPERATION[op] for path, op in MADE.items()}, **{f"op {op.name}": op for op in OPERATIONS}}
READ_COMMANDS = READS | {path for path, op in _OPS.items() if op.safe}
WRITE_COMMANDS = WRITES | {path for path, op in _OPS.items() if not op.safe}
