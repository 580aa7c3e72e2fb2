"""The query space: read-only, checked SQL over the ``memory_v1`` views.

* :mod:`memlane.store.query_space`: the views (columns, types, meanings) and the
  function allow-list, defined once for SQLite and PostgreSQL;
* :mod:`memlane.store.fence`: parse, check and rewrite one statement (sqlglot);
* :mod:`memlane.domain.query.run`: run it on a read-only connection, bounded and
  filtered to what the caller may see; saved queries;
* :mod:`memlane.values.query`: :class:`QueryResult`, :class:`QueryPlan`,
  :class:`SavedQuery`.

The views and the fence are SQL, so they sit in the store layer; the runner's
rules are the domain's, here. ``Memory.query`` and its siblings are the entry
points. This package's import stays light (no sqlglot).
"""

from ...values.query import QueryPlan, QueryResult, SavedQuery

__all__ = ["QueryPlan", "QueryResult", "SavedQuery"]
