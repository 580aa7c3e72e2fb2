"""Brute-force cosine search over an in-memory matrix of vectors.

Vectors are L2-normalised when written, so cosine similarity is one
matrix-vector product; ``argpartition`` picks the top candidates.

On the SQLite backend this is the private part of vector search: the vectors
written since the store's shared, memory-mapped index (``store/vector_index.py``)
was last folded (a short delta), or every vector when the store has no index
(an in-memory store, ``MEMLANE_VECTOR_INDEX=0``, an index found unsound).

The cache follows the table without rereading it: every write stamps its
vectors with a higher ``seq``, so new and replaced vectors are loaded
incrementally (``seq > last seen``); deletions bump a counter, which forces a
reload. Whatever the cache still gets wrong (an item deleted a moment
ago, a vector older than its item) the confirm step drops, because each
nomination carries the item's stable id and the version its vector was made
from, and confirm re-reads by id inside the caller's scope.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

DTYPE = np.float32


def to_blob(vector: Sequence[float] | np.ndarray) -> bytes:
    """Pack a vector as float32 little-endian bytes."""
    return np.asarray(vector, dtype="<f4").tobytes()


def normalise(vector: Sequence[float]) -> np.ndarray:
    """A unit-length float32 copy of ``vector`` (zero stays zero), at any finite scale.

    The norm is taken in float64 after dividing by the largest magnitude, so
    neither squares beyond float32 (|x| > 1.8e19) nor tiny components overflow
    or underflow: only the direction is kept, and that is all cosine uses.
    """
    v = np.asarray(vector, dtype=np.float64)
    peak = float(np.max(np.abs(v))) if v.size else 0.0
    if not peak > 0:
        return v.astype(DTYPE)
    v = v / peak
    return (v / float(np.linalg.norm(v))).astype(DTYPE)


class VectorCache:
    """Rows of ``(ref, id, version, namespace, vector)`` held as numpy arrays."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.seq = -1
        self.deletes = -1
        self._clear()

    def _clear(self) -> None:
        self._n = 0
        self._matrix = np.zeros((0, self.dimension), dtype=DTYPE)
        self._refs = np.zeros(0, dtype=np.int64)
        self._versions = np.zeros(0, dtype=np.int64)
        self._ns = np.zeros(0, dtype=np.int32)
        self._pos: dict[int, int] = {}
        self._ids: list[str] = []
        self._ns_ids: dict[str, int] = {}
        self._allowed: dict[frozenset[tuple[str, ...]], tuple[int, np.ndarray]] = {}

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (capacity included)."""
        return self._matrix.nbytes + self._refs.nbytes + self._versions.nbytes + self._ns.nbytes

    def reset(self) -> None:
        """Forget everything; the next refresh reloads from scratch."""
        self.seq = -1
        self.deletes = -1
        self._clear()

    def _grow(self, extra: int) -> None:
        need = self._n + extra
        cap = len(self._refs)
        if need <= cap:
            return
        cap = max(need, cap * 2, 1024)
        matrix = np.zeros((cap, self.dimension), dtype=DTYPE)
        matrix[: self._n] = self._matrix[: self._n]
        self._matrix = matrix
        for name in ("_refs", "_versions", "_ns"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: self._n] = old[: self._n]
            setattr(self, name, new)

    def apply(self, rows: Iterable[tuple[int, str, int, str, bytes]]) -> None:
        """Insert or overwrite rows ``(ref, item_id, version, namespace_text, blob)``."""
        rows = list(rows)
        self._grow(len(rows))
        dim = self.dimension
        for ref, item_id, version, namespace, blob in rows:
            vec = np.frombuffer(blob, dtype="<f4")
            if vec.shape[0] != dim:
                continue  # written by another embedder; reindex rebuilds it
            ns_id = self._ns_ids.setdefault(namespace, len(self._ns_ids))
            i = self._pos.get(ref)
            if i is None:
                i = self._pos[ref] = self._n
                self._n += 1
                self._refs[i] = ref
                self._ids.append(item_id)
            else:
                self._ids[i] = item_id  # a reused row number names another item now
            self._matrix[i] = vec
            self._versions[i] = version
            self._ns[i] = ns_id

    def namespace_ids(self, within: Sequence[tuple[str, ...]]) -> np.ndarray | None:
        """Ids of cached namespaces on or under any prefix of ``within`` (``None``: no filter).

        Worked out once per scope and kept until a new namespace appears, so an
        agent's repeated searches do not rescan every namespace.
        """
        if not all(within):  # the root prefix () among them
            return None
        key = frozenset(map(tuple, within))  # a scope of 10,000 prefixes is not joined and sorted each time
        known = self._allowed.get(key)
        if known is not None and known[0] == len(self._ns_ids):
            return known[1]
        wanted = {"/".join(prefix) for prefix in within}
        found = []
        for ns, i in self._ns_ids.items():
            parts = ns.split("/")
            if any("/".join(parts[:n]) in wanted for n in range(1, len(parts) + 1)):
                found.append(i)
        allowed = np.array(found, dtype=np.int32)
        if len(self._allowed) > 256:  # many distinct scopes: start over rather than grow without bound
            self._allowed.clear()
        self._allowed[key] = (len(self._ns_ids), allowed)
        return allowed

    def search(
        self, query: Any, within: Sequence[tuple[str, ...]], k: int, refs: np.ndarray | None = None
    ) -> list[tuple[str, float, int]]:
        """Top ``k`` ``(item_id, cosine, version)`` inside ``within`` for a unit query vector, best first.

        ``refs``, when given, are the only rows ranked (the items meeting a ``where``).
        """
        return [(i, s, v) for _, i, s, v in self.search_refs(query, within, k, refs)]

    @property
    def refs(self) -> np.ndarray:
        """The row numbers held (a view)."""
        return self._refs[: self._n]

    def search_refs(
        self, query: Any, within: Sequence[tuple[str, ...]], k: int, refs: np.ndarray | None = None
    ) -> list[tuple[int, str, float, int]]:
        """As :meth:`search`, each result ``(ref, item_id, cosine, version)``."""
        n = self._n
        if n == 0 or k <= 0 or not within:
            return []
        q = np.asarray(query, dtype=DTYPE)
        allowed = self.namespace_ids(within)
        if allowed is None and refs is None:
            scores = self._matrix[:n] @ q
            rows = None
        else:
            if allowed is not None and allowed.size == 0:
                return []
            if refs is not None:
                keep = np.isin(self._refs[:n], refs)
                if allowed is not None:
                    keep &= np.isin(self._ns[:n], allowed)
                rows = np.flatnonzero(keep)
            else:
                rows = np.flatnonzero(np.isin(self._ns[:n], allowed if allowed is not None else []))
            if rows.size == 0:
                return []
            scores = self._matrix[rows] @ q
        k = min(k, scores.shape[0])
        if k < scores.shape[0]:
            # every row scoring at least the k-th best, so that rows tied at the cut are chosen by ref below,
            # not by their place in the cache (which differs between processes)
            cut = scores[np.argpartition(-scores, k - 1)[k - 1]]
            top = np.flatnonzero(scores >= cut)
        else:
            top = np.arange(scores.shape[0])
        # ties broken by ref so results are deterministic
        idx = rows[top] if rows is not None else top
        order = np.lexsort((self._refs[idx], -scores[top]))[:k]
        top, idx = top[order], idx[order]
        ids = self._ids
        return [
            (int(r), ids[i], float(s), int(v))
            for i, r, s, v in zip(idx.tolist(), self._refs[idx], scores[top], self._versions[idx], strict=True)
        ]
