"""What the query space hands back: results, plans and saved queries (JSON-ready, rebuildable by the client)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _fields(obj: Any) -> dict[str, Any]:
    """A dataclass's fields in order, each list copied."""
    out = {name: getattr(obj, name) for name in obj.__dataclass_fields__}
    return {name: list(x) if isinstance(x, list) else x for name, x in out.items()}


@dataclass(slots=True)
class QueryResult:
    """Rows of one statement, with the limits applied and what they cut.

    ``rows`` are lists in ``columns`` order; values are strings, numbers,
    booleans or ``None`` (JSON and times stay text). ``truncated`` is true when
    a limit stopped the statement early; ``truncated_by`` says which:
    ``max_rows``, ``max_bytes`` or ``timeout`` (rows read before the time cap).
    """

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    truncated_by: str | None
    limits: dict[str, int]
    elapsed_ms: float
    views: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def row_count(self) -> int:
        """How many rows came back."""
        return len(self.rows)

    def dicts(self) -> list[dict[str, Any]]:
        """The rows as ``{column: value}`` dicts (a repeated column name keeps its last value)."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "columns": list(self.columns),
            "rows": [list(r) for r in self.rows],
            "row_count": len(self.rows),
            "truncated": self.truncated,
            "truncated_by": self.truncated_by,
            "limits": dict(self.limits),
            "elapsed_ms": self.elapsed_ms,
            "views": list(self.views),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QueryResult:
        """Rebuild from ``to_dict()`` output."""
        return cls(
            list(d["columns"]),
            [list(r) for r in d["rows"]],
            bool(d["truncated"]),
            d.get("truncated_by"),
            dict(d.get("limits") or {}),
            float(d.get("elapsed_ms", 0.0)),
            list(d.get("views") or []),
            list(d.get("notes") or []),
        )


@dataclass(slots=True)
class QueryPlan:
    """``explain_query``: whether a statement passes the fence, what it touches, and the database's plan."""

    valid: bool
    sql: str  # the statement as given
    runs: str | None = None  # what would run (sqlglot's rendering for the backend), when valid
    views: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    parameters: list[str] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)
    reason: str | None = None  # why it is refused, when not valid
    message: str | None = None
    part: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QueryPlan:
        """Rebuild from ``to_dict()`` output."""
        return cls(
            bool(d["valid"]),
            d.get("sql", ""),
            d.get("runs"),
            list(d.get("views") or []),
            list(d.get("functions") or []),
            list(d.get("parameters") or []),
            list(d.get("plan") or []),
            d.get("reason"),
            d.get("message"),
            d.get("part"),
        )


@dataclass(slots=True)
class SavedQuery:
    """A statement saved under a name, run later with parameters (``run_saved_query``)."""

    name: str
    sql: str
    description: str
    parameters: list[str]
    author: str | None
    created_at: str
    updated_at: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return _fields(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SavedQuery:
        """Rebuild from ``to_dict()`` output."""
        return cls(
            d["name"],
            d["sql"],
            d.get("description", ""),
            list(d.get("parameters") or []),
            d.get("author"),
            d.get("created_at", ""),
            d.get("updated_at", ""),
        )
