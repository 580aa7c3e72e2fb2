"""memlane: durable memory for AI agents.

Two verbs for two questions: exact lookup when the agent knows the address
(``get``, ``fetch``, ``list``, ``summarize``), search when it knows a topic
(``search``). One SQLite file by default.

The modules sit in one folder per layer (docs/architecture.md); their paths of before
(``memlane.memory``, ``memlane.search.embedders``...) still import, as aliases of the same
modules (``memlane/_moved.py``).
"""

import importlib
from typing import TYPE_CHECKING, Any

from . import _moved

_moved.install()  # first: an old module path imported from here on is the module at its new path

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

if not TYPE_CHECKING:  # a type checker sees the new paths only

    def __getattr__(name: str) -> Any:
        """``memlane.errors``, ``memlane.memory``...: the old modules as attributes of the package, as before."""
        if f"memlane.{name}" in _moved.MOVED:
            return importlib.import_module(f"memlane.{name}")
        raise AttributeError(f"module 'memlane' has no attribute {name!r}")


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
