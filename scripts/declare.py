"""Write ``src/memlane/values/operations.json`` from ``Memory``'s signatures and docstrings.

Run it after changing an operation of ``Memory`` (``python scripts/declare.py``);
``tests/test_operations.py`` fails while the file and ``Memory`` disagree.
"""

from __future__ import annotations

import json
from pathlib import Path

from memlane.core.memory import Memory
from memlane.values import operations


def declared_text() -> str:
    """The file's text: one parameter a line, so a change reads as a small diff."""
    blocks = []
    for name, declared in operations.declare(Memory).items():
        params = ",\n".join(f"   {json.dumps(p, ensure_ascii=False)}" for p in declared["params"])
        head = json.dumps({"returns": declared["returns"], "doc": declared["doc"]}, ensure_ascii=False)[:-1]
        blocks.append(f' {json.dumps(name)}: {head}, "params": [\n{params}\n ]}}')
    return "{\n" + ",\n".join(blocks) + "\n}\n"


if __name__ == "__main__":
    Path(operations.DECLARED).write_text(declared_text(), encoding="utf-8")
