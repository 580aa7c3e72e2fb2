"""History retention: how much of an address's history ``cleanup()`` keeps.

A **rule** covers a namespace prefix (segment boundaries: ``user`` covers
``user`` and ``user/1`` but not ``users``; the empty prefix covers everything)
and sets one or both limits:

* ``keep_versions=N``: keep the ``N`` newest history versions of each address
  (the first ``N`` entries of ``history(namespace, key)``); ``0`` keeps none.
  The live item is not a history version and never counts or goes.
* ``keep_days=D``: keep a version for ``D`` days after it stopped being current
  (its ``changed_at``); it goes from the instant ``changed_at + D days <= now``,
  the same instant rule as TTL expiry.

With both, a version stays only while it is inside both limits. A namespace
follows the one rule with the longest prefix that covers it (the most specific
wins outright; limits of shorter rules are not combined with it). Namespaces no
rule covers keep every version.

Rules live in the database (table ``retention_rules``, migration
``m007_retention``), so every process and interface on that database applies
the same ones; only ``cleanup()`` deletes, in SQL, one statement per rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import validate as v
from .errors import ValidationError
from .model import Namespace, namespace_text

MAX_KEEP_VERSIONS = 2**31 - 1  # an INTEGER column on both backends
MAX_KEEP_DAYS = 100 * 365.25  # 100 years, as for TTL


@dataclass(frozen=True, slots=True)
class RetentionRule:
    """How much history ``cleanup()`` keeps under ``prefix`` (``()``: every namespace)."""

    prefix: Namespace
    keep_versions: int | None
    keep_days: float | None
    updated_at: datetime
    updated_by: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ``prefix`` as its text form (``""`` for everything)."""
        return {
            "prefix": namespace_text(self.prefix),
            "keep_versions": self.keep_versions,
            "keep_days": self.keep_days,
            "updated_at": self.updated_at.isoformat(timespec="microseconds"),
            "updated_by": self.updated_by,
        }


@dataclass(frozen=True, slots=True)
class CleanupReport:
    """What one ``cleanup()`` deleted: expired items, and history versions beyond the rules."""

    expired_items: int
    history_versions: int
    by_prefix: dict[str, int] = field(default_factory=dict)
    """History versions deleted per rule, by the rule's prefix text (every rule, ``0`` included)."""

    @property
    def total(self) -> int:
        """Rows deleted in all (what ``cleanup()`` returns)."""
        return self.expired_items + self.history_versions

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "expired_items": self.expired_items,
            "history_versions": self.history_versions,
            "total": self.total,
            "by_prefix": dict(self.by_prefix),
        }


def prefix(raw: Any, field: str = "prefix") -> Namespace:
    """A rule's prefix: a namespace prefix, ``()``/``""`` for every namespace."""
    return v.namespace(raw, field, allow_empty=True)


def keep_versions(raw: Any, field: str = "keep_versions") -> int | None:
    """``None`` or an integer from 0 to 2**31 - 1 (a bool is refused)."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValidationError(field, f"must be a whole number of versions, not {type(raw).__name__}")
    if raw < 0 or raw > MAX_KEEP_VERSIONS:
        raise ValidationError(field, f"must be between 0 and {MAX_KEEP_VERSIONS}, got {raw}")
    return raw


def keep_days(raw: Any, field: str = "keep_days") -> float | None:
    """``None`` or a positive, finite number of days, at most 100 years (a bool is refused)."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ValidationError(field, f"must be a number of days, not {type(raw).__name__}")
    if not math.isfinite(raw) or raw <= 0:
        raise ValidationError(field, f"must be a positive, finite number of days, got {raw!r}")
    if raw > MAX_KEEP_DAYS:
        raise ValidationError(field, f"is longer than 100 years ({raw!r} days)")
    return float(raw)


def rule(raw_prefix: Any, raw_versions: Any, raw_days: Any) -> tuple[Namespace, int | None, float | None]:
    """Check a whole rule before anything is stored: at least one limit must be given."""
    checked = prefix(raw_prefix), keep_versions(raw_versions), keep_days(raw_days)
    if checked[1] is None and checked[2] is None:
        raise ValidationError("keep_versions", "give keep_versions, keep_days or both (clear_retention removes a rule)")
    return checked


def covers(rule_prefix: Namespace, namespace: Namespace) -> bool:
    """Whether a rule's prefix covers ``namespace`` (whole segments)."""
    return namespace[: len(rule_prefix)] == rule_prefix


def rule_for(rules: list[RetentionRule], namespace: Namespace) -> RetentionRule | None:
    """The rule that applies to ``namespace``: the longest prefix covering it, or ``None``."""
    best: RetentionRule | None = None
    for r in rules:
        if covers(r.prefix, namespace) and (best is None or len(r.prefix) > len(best.prefix)):
            best = r
    return best
