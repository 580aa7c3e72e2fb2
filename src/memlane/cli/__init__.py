"""The ``memlane`` command line: a thin shell over :class:`memlane.Memory` (or :class:`memlane.Client`).

Each operation of the table is a command made from its declaration (:mod:`.made`; what a shell adds to each,
:mod:`.commands` and :mod:`.query`; renderings, :mod:`.render`); the commands that are no operation are written by
hand (:mod:`.hand`). What they share (the app, errors, opening the memory, tables) is :mod:`.base`.
"""

from __future__ import annotations

from ..values.operations import OPERATION, OPERATIONS
from . import commands, hand, made, query  # noqa: F401  (the commands, registered as they are imported)
from .base import EXTRAS, GROUPS, READS, WRITES, _cli_words, app, main, namespace_hint, nearest_commands  # noqa: F401
from .made import MADE, _operation_command  # noqa: F401

_OPS = {**{path: OPERATION[op] for path, op in MADE.items()}, **{f"op {op.name}": op for op in OPERATIONS}}
READ_COMMANDS = READS | {path for path, op in _OPS.items() if op.safe}
WRITE_COMMANDS = WRITES | {path for path, op in _OPS.items() if not op.safe}
