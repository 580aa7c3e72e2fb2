"""The module paths of before the layer folders, kept as aliases of the modules where they live now.

memlane's modules sit in one folder per layer (docs/architecture.md): ``memlane.memory`` is
``memlane.core.memory``, ``memlane.search.embedders`` is ``memlane.domain.search.embedders``.
Every old path in :data:`MOVED` still imports, and gives the *same module object* as its new
path, so ``monkeypatch.setattr("memlane.memory.X", ...)`` or ``from memlane.search.embedders
import register`` acts on the one module there is. There are no stub files: :class:`Aliases`, a
finder on ``sys.meta_path`` installed by ``memlane/__init__.py``, answers for the names in
:data:`MOVED` alone. Type checkers do not run it, so they see only the new paths.

This module imports nothing from memlane when it is imported; the modules it names are imported
only when an old path is asked for.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

# old path -> new path; an old package maps to a package, so `import memlane.query.space` finds its parent
MOVED: dict[str, str] = {
    # core
    "memlane.memory": "memlane.core.memory",
    "memlane.access": "memlane.core.access",
    "memlane.operations": "memlane.core.operations",
    "memlane.surface": "memlane.core.surface",
    # domain
    "memlane.ports": "memlane.domain.ports",
    "memlane.indexer": "memlane.domain.indexer",
    "memlane.conversation": "memlane.domain.conversation",
    "memlane.extract": "memlane.domain.extract",
    "memlane.facts": "memlane.domain.facts",
    "memlane.facts.layer": "memlane.domain.facts.layer",
    "memlane.facts.transfer": "memlane.domain.facts.transfer",
    "memlane.query": "memlane.domain.query",
    "memlane.query.run": "memlane.domain.query.run",
    "memlane.search": "memlane.domain.search",
    "memlane.search.rank": "memlane.domain.search.rank",
    "memlane.search.relevance": "memlane.domain.search.relevance",
    "memlane.search.embedders": "memlane.domain.search.embedders",
    "memlane.search.choose": "memlane.domain.search.choose",
    "memlane.search.minilm": "memlane.domain.search.minilm",
    "memlane.search.minilm_onnx": "memlane.domain.search.minilm_onnx",
    # store
    "memlane.facts.schema": "memlane.store.facts_schema",
    "memlane.query.space": "memlane.store.query_space",
    "memlane.query.fence": "memlane.store.fence",
    # values
    "memlane.errors": "memlane.values.errors",
    "memlane.model": "memlane.values.model",
    "memlane.validate": "memlane.values.validate",
    "memlane.where": "memlane.values.where",
    "memlane.wire": "memlane.values.wire",
    "memlane.ids": "memlane.values.ids",
    "memlane.agents": "memlane.values.agents",
    "memlane.retention": "memlane.values.retention",
    "memlane.gate": "memlane.values.gate",
    "memlane.chat": "memlane.values.chat",
    "memlane.facts.model": "memlane.values.facts",
    "memlane.facts.text": "memlane.values.facts_text",
    "memlane.query.model": "memlane.values.query",
    "memlane.search.vectors": "memlane.values.vectors",
    "memlane.search.stopwords": "memlane.values.stopwords",
}


class Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of :data:`MOVED` and loads it as the module at its new path, that very object.

    It sits first on ``sys.meta_path``: the path finder would otherwise find ``memlane.search.rank``
    as a second copy of ``domain/search/rank.py`` (``memlane.search``'s ``__path__`` is
    ``memlane.domain.search``'s).
    """

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)  # a package keeps its own __path__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        # the import system sets module.__spec__ to the alias's spec whatever it finds: keep the module's own
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # already executed under its new name; only its own spec is put back
        module.__spec__ = module.__spec__.loader_state if module.__spec__ is not None else None


ALIASES = Aliases()


def install() -> None:
    """Put :data:`ALIASES` first on ``sys.meta_path``, once."""
    # by name, not isinstance: a copy of this module imported again (its sys.modules entry dropped) is the same finder
    if not any(
        type(finder).__qualname__ == "Aliases" and type(finder).__module__ == __name__ for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, ALIASES)
