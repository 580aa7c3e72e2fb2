"""The query space: read-only, checked SQL over the ``memory_v1`` views.

* :mod:`memlane.query.space`: the views (columns, types, meanings) and the
  function allow-list, defined once for SQLite and PostgreSQL;
* :mod:`memlane.query.fence`: parse, check and rewrite one statement (sqlglot);
* :mod:`memlane.query.run`: run it on a read-only connection, bounded and
  filtered to what the caller may see; saved queries;
* :mod:`memlane.query.model`: :class:`QueryResult`, :class:`QueryPlan`,
  :class:`SavedQuery`.

``Memory.query`` and its siblings are the entry points. This package's import
stays light (no sqlglot) because the stores import :mod:`.space` for their
migration.
"""

from .model import QueryPlan, QueryResult, SavedQuery

__all__ = ["QueryPlan", "QueryResult", "SavedQuery"]
