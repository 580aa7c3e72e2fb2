"""memlane: durable memory for AI agents.

Two verbs for two questions: exact lookup when the agent knows the address
(``get``, ``fetch``, ``list``, ``summarize``), search when it knows a topic
(``search``). One SQLite file by default.

The modules sit in one folder per layer (docs/architecture.md).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported when first asked for
    from .aio import AsyncClient, AsyncMemory
    from .client import Client
    from .core.memory import Memory, open
    from .domain.indexer import CatchUp
    from .domain.search.choose import Chooser, OpenAIChooser
    from .values.errors import (
        BackendUnavailableError,
        BusyError,
        ChooserError,
        ConflictError,
        EmbedderError,
        EmbedderMismatchError,
        ForbiddenError,
        MemlaneError,
        NotFoundError,
        QueryRefused,
        SchemaVersionError,
        StorageFullError,
        StoreError,
        StoreUnavailableError,
        UnauthorizedError,
        ValidationError,
    )
    from .values.model import Envelope, Hit, Item, Namespace, Page, Stats, Version
    from .values.query import QueryPlan, QueryResult, SavedQuery
    from .values.retention import CleanupReport, RetentionRule

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncMemory",
    "BackendUnavailableError",
    "BusyError",
    "CatchUp",
    "Chooser",
    "ChooserError",
    "CleanupReport",
    "Client",
    "ConflictError",
    "EmbedderError",
    "EmbedderMismatchError",
    "ForbiddenError",
    "Envelope",
    "Hit",
    "Item",
    "MemlaneError",
    "Memory",
    "Namespace",
    "NotFoundError",
    "OpenAIChooser",
    "Page",
    "QueryPlan",
    "QueryRefused",
    "QueryResult",
    "RetentionRule",
    "SavedQuery",
    "SchemaVersionError",
    "Stats",
    "StorageFullError",
    "StoreError",
    "StoreUnavailableError",
    "UnauthorizedError",
    "ValidationError",
    "Version",
    "open",
]

# where each public name lives: the exceptions in values.errors, the others as listed. Each is imported when first
# asked for (PEP 562), so that ``import memlane.client`` loads the Client and the values it speaks in, not
# ``Memory`` with its store and domain.
_WHERE = {name: "values.errors" for name in __all__ if name.endswith(("Error", "Refused"))} | {
    name: module
    for module, names in {
        "aio": ("AsyncClient", "AsyncMemory"),
        "client": ("Client",),
        "core.memory": ("Memory", "open"),
        "domain.indexer": ("CatchUp",),
        "domain.search.choose": ("Chooser", "OpenAIChooser"),
        "values.model": ("Envelope", "Hit", "Item", "Namespace", "Page", "Stats", "Version"),
        "values.query": ("QueryPlan", "QueryResult", "SavedQuery"),
        "values.retention": ("CleanupReport", "RetentionRule"),
    }.items()
    for name in names
}
# the modules that were attributes of the package after ``import memlane`` when it imported them all
# (``memlane.aio.open``): each is imported when first asked for
_SUBMODULES = ("aio", "client", "core", "domain", "store", "values")


if not TYPE_CHECKING:  # a type checker sees the names imported for it at the top, and no others

    def __getattr__(name: str) -> Any:
        if name in _SUBMODULES:
            return importlib.import_module(f"{__name__}.{name}")  # sets the attribute: asked once
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module 'memlane' has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value  # asked once
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
