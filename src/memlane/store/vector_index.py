"""One vector index per SQLite store, memory-mapped and shared by every process that opens it.

Where it lives: a folder beside the database, ``<db>.vectors/``, holding
immutable *generations*: ``gen-<N>.vec`` (a header, then the float32 matrix
of every vector, rows grouped by namespace, a checksum per block of its rows, per-row ref, version and
``item_vectors.seq``, a ref lookup and the namespace table) and, above
:data:`GRAPH_MIN` rows when usearch is installed, ``gen-<N>.graph`` (an HNSW
graph keyed by ref, opened with ``view=True``). ``CURRENT`` names the newest.
Every process maps the same files, so the operating system's page cache holds
one copy for all of them; a process's private memory holds only the *delta*.

Who updates it: :func:`fold`, under an exclusive ``flock`` on ``lock`` (one
process at a time), called by the write-behind indexer after its batches and
by a search that finds the delta far too long (no indexer running). It writes
a new generation to a temporary file, fsyncs it and renames it into place,
then renames a new ``CURRENT`` over the old: readers see the old generation
or the new one, never half of one. Rows whose vector is unchanged are copied
from the previous generation; the rest are read from ``item_vectors``.

What a search trusts (see :class:`SharedVectors`): the index is derived data.
Vectors written after the generation (``seq`` above the one its header
records) are read from the database into the private delta and scored
exactly; where the delta replaces a row, the index's row is masked. Every row
the index nominates is re-checked against ``item_vectors`` in the search's
read transaction (same ref, same ``seq``), so a deleted or replaced vector
never comes back, and the search reads further down the ranking until ``k``
live rows are found: deletions never cost a result slot. Hydration from live
rows (``Store.hydrate``) stays the authority on scope and liveness.

On a crash: a process killed while writing leaves a temporary file (removed by
the next fold) and the previous ``CURRENT``; a fold that fails (a full disk: the
file's blocks are reserved before it is mapped) removes what it wrote. A
generation that fails its checks (magic, header checksum, exact size, a
checksum of everything but the matrix, the trailer, the dimension), or whose
mapped file changes under a reader (its ``fstat`` stamp), is ignored: the search
falls back to an exact scan of the database's vectors (the old private cache)
and the next fold rewrites it. Scores outside [-1, 1] (garbage written into
the matrix) condemn the generation the same way. The matrix has a checksum per
block of rows, too costly for a search to read but checked by a fold before it
copies rows, so damage is never carried into the next generation.

Another version's graph: the header records the graph's scalar kind, connectivity and expansion_add. A
generation whose graph was built with others (or a format-2 one, which did not record them) is sound: its matrix
is searched, exactly, but its graph is not, until the indexer's next fold (due at once) builds a new one, copying
the matrix's rows.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import json
import mmap
import os
import secrets
import sqlite3
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..values.vectors import DTYPE, VectorCache

FORMAT = 3  # 2: a checksum per block of matrix rows; 3: the graph's parameters in the header
READABLE = (2, 3)  # format 2 is read, its graph (parameters unknown) not searched: the next fold rebuilds it
MAGIC = b"MLVECIX1"
TRAILER = b"MLVECEND"
HEADER_BYTES = 4096
# magic, format, dim, count, seq, deletes, namespaces, namespace bytes, file size, meta crc, graph size, graph crc,
# and from format 3 the graph's scalar kind, connectivity and expansion_add
_HEAD_2 = struct.Struct("<8sIIQqqQQQIQI")
_HEAD = struct.Struct(_HEAD_2.format + "8sII")
_ALIGN = 64
MATRIX_BLOCK = 1024  # rows per matrix checksum (the format's: changing it needs a new FORMAT)

FOLD_MIN = 1024  # the delta a fold waits for, at least...
FOLD_SHARE = 16  # ... or 1/16 of the index: the copying a fold costs stays a constant share of the writes
SEARCH_FOLD_FACTOR = 4  # a search folds itself when the delta is this many times the fold size (no indexer ran)
GRAPH_MIN = 50_000  # rows in the index before an HNSW graph is built (below, an exact scan costs < 5 ms)
APPROX_MIN = 50_000  # rows in a search's scope before it asks the graph rather than scanning exactly
APPROX_SHARE = 0.5  # ... and the share of the index the scope covers (smaller scopes are scanned exactly)
# The graph (docs/benchmarks.md, "Vector recall at 1M (#36)"; recall@10 on bench/search.py's natural questions at
# expansion_search 2,048, every candidate re-scored from the f32 matrix). Its three build parameters are recorded
# in each generation's header: a graph built with others is not searched and the next fold rebuilds it once.
# int8 entries: the scalar kind does not limit recall (100k, 32 / 128: i8 0.940, f16 0.936, f32 0.937), and int8
# has the smallest file and the fastest build (f16: 1.6x the file, 2.3x the build time).
GRAPH_DTYPE = "i8"
# The links do: 32 / 128 found 0.940 at 100k and 0.885 at 1M; 64 / 256 finds 0.964 and 0.941, for a graph file
# 1.4x as large (87 against 63 MiB at 100k, mapped and shared) and a build about 1.3x as long (1M: 688 against
# 551 s on 2 cores); searches cost about 1.3x (100k, same run).
GRAPH_CONNECTIVITY = 64
GRAPH_EXPANSION_ADD = 256
# 64 / 256 at 100k: 0.953 at 1,024, 0.964 at 2,048, 0.976 at 4,096, each doubling about 1.6x the search time
GRAPH_EXPANSION_SEARCH = 2048
GRAPH_CANDIDATES = 256  # the graph's nearest a search re-scores exactly from the matrix (at least 4 x k)
# ... and those a filtered search asks for: the whole beam, which costs no more (usearch widens the beam to what is
# asked only past expansion_search: 100k, 384 dimensions, 4.2 ms for 256 or 2,048, 13 ms for 4,096), tested
# against the filter in growing windows
GRAPH_FILTER_CANDIDATES = GRAPH_EXPANSION_SEARCH
GRAPH_CRC_BYTES = 1 << 20
# rows gathered and scored in one product: from about 1,500 rows (384 dimensions) numpy's BLAS spreads a product
# over threads, which on a busy 2-core machine cost 10x (2,048 rows: 4.4 ms in one product, 0.3 ms in pieces)
# and leave spinning threads that slow what follows
SCORE_ROWS = 1024
_SCORE_LIMIT = 1.001  # cosines of unit vectors; beyond this the matrix is garbage


# (max seq, the deletes counter, the seq high-water mark): what a generation is compared with
_STATE = (
    "SELECT (SELECT coalesce(max(seq), 0) FROM item_vectors), "
    "(SELECT coalesce((SELECT value FROM counters WHERE name = 'vector_deletes'), 0)), "
    "(SELECT coalesce((SELECT value FROM counters WHERE name = 'vector_seq'), "
    "(SELECT coalesce(max(seq), 0) FROM item_vectors)))"
)


def _older_database(gen_seq: int, gen_deletes: int, high_water: int, deletes: int) -> bool:
    """Whether the database is older than the generation (a backup restored under it): both counters only grow."""
    return high_water < gen_seq or deletes < gen_deletes


def enabled() -> bool:
    """Whether stores use the shared index (``MEMLANE_VECTOR_INDEX=0`` turns it off: the private cache only)."""
    return os.environ.get("MEMLANE_VECTOR_INDEX", "1").strip().lower() not in ("0", "off", "false", "no")


def directory_for(db_path: str) -> str:
    """The index folder of the database at ``db_path``."""
    return os.path.abspath(db_path) + ".vectors"


def fold_size(count: int) -> int:
    """The delta (rows past the index) at which the indexer folds them into a new generation."""
    return max(FOLD_MIN, count // FOLD_SHARE)


class CorruptIndex(Exception):
    """A generation file that fails its checks (torn, truncated, overwritten, another format)."""


class MissingGeneration(CorruptIndex):
    """The generation file is not there: damage, or a fold removed it after ``CURRENT`` was read (look again)."""


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _layout(count: int, dim: int, namespaces: int, ns_bytes: int) -> tuple[dict[str, tuple[int, int]], int]:
    """Offsets and lengths of each section, and the file's size."""
    off = HEADER_BYTES
    sections: dict[str, tuple[int, int]] = {}
    for name, nbytes in (
        ("matrix", count * dim * 4),
        ("matrix_crcs", 4 * _blocks(count)),
        ("refs", 8 * count),
        ("versions", 8 * count),
        ("seqs", 8 * count),
        ("sorted_refs", 8 * count),
        ("by_ref", 8 * count),
        ("ns_start", 8 * (namespaces + 1)),
        ("ns", ns_bytes),
    ):
        sections[name] = (off, nbytes)
        off = _align(off + nbytes)
    return sections, off + len(TRAILER)


def _blocks(count: int) -> int:
    return (count + MATRIX_BLOCK - 1) // MATRIX_BLOCK


def _matrix_crcs(matrix: np.ndarray) -> np.ndarray:
    """The CRC-32 of each block of :data:`MATRIX_BLOCK` rows."""
    return np.fromiter(
        (zlib.crc32(matrix[lo : lo + MATRIX_BLOCK].data) for lo in range(0, matrix.shape[0], MATRIX_BLOCK)),
        dtype=np.uint32,
        count=_blocks(matrix.shape[0]),
    )


def _meta_crc(buf: Any, sections: dict[str, tuple[int, int]]) -> int:
    crc = 0
    for name in ("matrix_crcs", "refs", "versions", "seqs", "sorted_refs", "by_ref", "ns_start", "ns"):
        off, nbytes = sections[name]
        crc = zlib.crc32(memoryview(buf)[off : off + nbytes], crc)
    return crc


def graph_params() -> tuple[str, int, int]:
    """The graph this version builds: ``(scalar kind, connectivity, expansion_add)``; another is rebuilt once."""
    return (GRAPH_DTYPE, GRAPH_CONNECTIVITY, GRAPH_EXPANSION_ADD)


def _unpack_head(head: bytes) -> tuple[tuple[Any, ...], tuple[str, int, int] | None] | None:
    """The header's first twelve fields and the graph's parameters (``None``: not recorded, format 2), or
    ``None`` when it is not a readable format (the checksum follows the fields: checked by the caller)."""
    if len(head) < 12 or head[:8] != MAGIC:
        return None
    fmt = struct.unpack_from("<I", head, 8)[0]
    if fmt not in READABLE:
        return None
    layout = _HEAD if fmt == FORMAT else _HEAD_2
    if len(head) < layout.size:
        return None
    fields = layout.unpack_from(head)
    if fmt != FORMAT:
        return fields, None
    kind, connectivity, expansion_add = fields[12:]
    return fields[:12], (kind.rstrip(b"\0").decode("ascii", "replace"), connectivity, expansion_add)


def _file_crc(path: str, limit: int = GRAPH_CRC_BYTES) -> int:
    with open(path, "rb") as f:
        return zlib.crc32(f.read(limit))


class Generation:
    """One generation file, memory-mapped read-only and checked; raises :class:`CorruptIndex` when it is not sound."""

    def __init__(self, path: str, *, with_graph: bool = True) -> None:
        self.path = path
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError as e:
            raise MissingGeneration(f"cannot open {path}: {e}") from e
        except OSError as e:
            raise CorruptIndex(f"cannot open {path}: {e}") from e
        try:
            st = os.fstat(fd)
            if st.st_size < HEADER_BYTES:
                raise CorruptIndex(f"{path}: {st.st_size} bytes, shorter than its header")
            self._map = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        except (OSError, ValueError) as e:
            os.close(fd)
            raise CorruptIndex(f"cannot map {path}: {e}") from e
        except CorruptIndex:
            os.close(fd)
            raise
        self._fd = fd
        buf = self._map
        head = bytes(buf[: _HEAD.size + 4])
        unpacked = _unpack_head(head)
        if unpacked is None:
            raise CorruptIndex(f"{path}: not a memlane vector index of format {' or '.join(map(str, READABLE))}")
        fields, params = unpacked
        (magic, fmt, dim, count, seq, deletes, n_ns, ns_bytes, size, meta_crc, graph_size, graph_crc) = fields
        head_size = _HEAD.size if params is not None else _HEAD_2.size
        if struct.unpack_from("<I", head, head_size)[0] != zlib.crc32(head[:head_size]):
            raise CorruptIndex(f"{path}: header checksum mismatch")
        sections, expected = _layout(count, dim, n_ns, ns_bytes)
        if size != expected or st.st_size != expected:
            raise CorruptIndex(f"{path}: {st.st_size} bytes where its header promises {expected}")
        if bytes(buf[expected - len(TRAILER) : expected]) != TRAILER:
            raise CorruptIndex(f"{path}: no trailer (torn write)")
        if _meta_crc(buf, sections) != meta_crc:
            raise CorruptIndex(f"{path}: checksum mismatch")
        self.dim, self.count, self.seq, self.deletes, self.size = dim, count, seq, deletes, size
        self._stamp = _stamp(st)

        def arr(name: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
            off, _ = sections[name]
            return np.frombuffer(buf, dtype=dtype, count=int(np.prod(shape)), offset=off).reshape(shape)

        self.matrix = arr("matrix", "<f4", (count, dim))
        self.refs = arr("refs", "<i8", (count,))
        self.versions = arr("versions", "<i8", (count,))
        self.seqs = arr("seqs", "<i8", (count,))
        self.sorted_refs = arr("sorted_refs", "<i8", (count,))
        self.by_ref = arr("by_ref", "<i8", (count,))
        self.ns_start = arr("ns_start", "<i8", (n_ns + 1,))
        self.matrix_crcs = arr("matrix_crcs", "<u4", (_blocks(count),))
        off, nbytes = sections["ns"]
        self.namespaces: list[str] = json.loads(bytes(buf[off : off + nbytes]).decode("utf-8"))
        if len(self.namespaces) != n_ns:
            raise CorruptIndex(f"{path}: namespace table of the wrong length")
        self.graph: Any = None
        self.graph_size = graph_size
        self.graph_params = params if graph_size else None
        self.graph_path = path[: -len(".vec")] + ".graph"
        # a graph built with other parameters (by another version) is not searched: the scans stay exact
        # (over the mapped matrix) until the indexer's next fold rebuilds it with this version's
        self.graph_current = not graph_size or params == graph_params()
        if with_graph and graph_size and self.graph_current:
            self.graph = _open_graph(self.graph_path, graph_size, graph_crc, dim)

    def intact(self) -> bool:
        """Whether the mapped file is as it was checked: not written since, nor truncated (a map would fault).

        Asked of the open descriptor, so a generation a fold superseded and unlinked keeps its contents.
        ``st_ctime_ns`` changes on every write and cannot be set back, so ``utime`` cannot hide one; but
        unlinking changes it too (see :meth:`rewritten`).
        """
        try:
            return _stamp(os.fstat(self._fd)) == self._stamp
        except OSError:
            return False

    def rewritten(self) -> bool:
        """Whether the contents' stamp changed (inode, mtime, size): damage whatever ``CURRENT`` says now."""
        try:
            return _stamp(os.fstat(self._fd))[:3] != self._stamp[:3]
        except OSError:
            return True

    @property
    def inode(self) -> int:
        return self._stamp[0]

    def named(self) -> bool:
        """Whether :attr:`path` still names the mapped file (not unlinked, nor another file renamed over it)."""
        try:
            return os.stat(self.path).st_ino == self._stamp[0]
        except OSError:
            return False

    def close(self) -> None:
        """Release the descriptor; the map goes with the last array that views it."""
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self.graph = None

    def damaged_blocks(self) -> np.ndarray:
        """Per block of :data:`MATRIX_BLOCK` rows, whether its checksum fails (the matrix is not in the others').

        A search never reads the whole matrix, so it cannot afford this; a fold, which copies it, checks first.
        """
        return _matrix_crcs(self.matrix) != self.matrix_crcs

    def positions(self, refs: np.ndarray) -> np.ndarray:
        """Row of each ref in this generation, -1 where it has none."""
        refs = np.asarray(refs, dtype=np.int64)
        if self.count == 0 or refs.size == 0:
            return np.full(refs.shape, -1, dtype=np.int64)
        at = np.searchsorted(self.sorted_refs, refs)
        at = np.minimum(at, self.count - 1)
        found = self.sorted_refs[at] == refs
        return np.where(found, self.by_ref[at], -1)

    def ranges(self, within: Sequence[tuple[str, ...]]) -> list[tuple[int, int]] | None:
        """Row ranges of the namespaces on or under any prefix of ``within``, merged; ``None``: every row."""
        if not all(within):
            return None
        names = self.namespaces
        spans = []
        for prefix in within:
            text = "/".join(prefix)
            i = bisect.bisect_left(names, text)
            if i < len(names) and names[i] == text:
                spans.append((i, i + 1))
            # "a/b/..." sorts after "a/b/" and before "a/b0" ("0" follows "/")
            lo, hi = bisect.bisect_left(names, text + "/"), bisect.bisect_left(names, text + "0")
            if hi > lo:
                spans.append((lo, hi))
        spans.sort()
        merged: list[tuple[int, int]] = []
        for lo, hi in spans:
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        starts = self.ns_start
        return [(int(starts[lo]), int(starts[hi])) for lo, hi in merged if starts[hi] > starts[lo]]


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_ctime_ns)


def _open_graph(path: str, size: int, crc: int, dim: int) -> Any:
    """The HNSW graph, memory-mapped, or ``None`` when usearch is missing or the file fails its checks."""
    try:
        from usearch.index import Index
    except ImportError:
        return None
    try:
        if os.path.getsize(path) != size or _file_crc(path) != crc:
            return None
        graph = Index.restore(path, view=True)
    except Exception:  # noqa: BLE001 - a graph that cannot be read is only a slower search
        return None
    if graph is None or graph.ndim != dim:
        return None
    graph.expansion_search = GRAPH_EXPANSION_SEARCH  # type: ignore[misc]  # a property with a setter
    return graph


# -- the maintainer --------------------------------------------------------------


@contextlib.contextmanager
def _locked(folder: str, blocking: bool) -> Iterator[bool]:
    fd = os.open(os.path.join(folder, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def current_name(folder: str) -> str | None:
    """The generation ``CURRENT`` names (``gen-<N>``), or ``None``."""
    try:
        with open(os.path.join(folder, "CURRENT"), encoding="ascii") as f:
            name = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if name.startswith("gen-") and name[4:].isdigit() else None


def open_current(folder: str, *, with_graph: bool = True) -> Generation | None:
    """The newest sound generation, or ``None``."""
    name = current_name(folder)
    if name is None:
        return None
    try:
        return Generation(os.path.join(folder, name + ".vec"), with_graph=with_graph)
    except CorruptIndex:
        return None


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fold(
    db_path: str, *, min_delta: int | None = None, blocking: bool = False, rebuild: bool = False, graph: bool = True
) -> bool:
    """Write a new generation covering every vector in the database now; ``True`` when one was published.

    ``min_delta``: publish only when at least that many rows are newer than the
    current generation (default :func:`fold_size`), or when many were deleted,
    or the current one is missing or unsound. ``blocking``: wait for another
    process's fold rather than return ``False``. ``rebuild``: read every vector from the database, none from
    the current generation (a search found it unsound). ``graph=False``: write no HNSW graph (a search
    folding for itself does not spend minutes on one; the indexer's next fold adds it).
    """
    folder = directory_for(db_path)
    if not rebuild and not _due(db_path, folder, min_delta, graph):
        return False
    os.makedirs(folder, exist_ok=True)
    with _locked(folder, blocking) as got:
        if not got:
            return False
        conn = sqlite3.connect(f"file:{os.path.abspath(db_path)}?mode=ro", uri=True, isolation_level=None)
        try:
            conn.execute("BEGIN")  # one snapshot for everything read below
            return _fold_locked(conn, folder, min_delta, rebuild, graph)
        finally:
            conn.close()


def _peek(folder: str) -> tuple[int, int, int, int, bool] | None:
    """``(seq, count, deletes, graph size, graph current)`` from the current generation's header, unchecked."""
    name = current_name(folder)
    if name is None:
        return None
    try:
        with open(os.path.join(folder, name + ".vec"), "rb") as f:
            unpacked = _unpack_head(f.read(_HEAD.size))
    except OSError:
        return None
    if unpacked is None:
        return None
    fields, params = unpacked
    return (fields[4], fields[3], fields[5], fields[10], not fields[10] or params == graph_params())


def graphs_available() -> bool:
    """Whether usearch is installed (the ``vectors`` extra): without it every search scans exactly."""
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return True


def _graph_wanted(count: int, graph_size: int, current: bool) -> bool:
    """Whether a fold should build a graph: none yet, or one built with other parameters."""
    return count >= GRAPH_MIN and (not graph_size or not current) and graphs_available()


# folder -> (the generation file, its stamp, whether it passed its checks): _due checks each file once
_checked: dict[str, tuple[str, tuple[int, int, int, int], bool]] = {}


def _sound(folder: str) -> bool:
    """Whether the generation CURRENT names passes its checks (read once per file and stamp, per process).

    A reader that finds it unsound (a read-only store cannot fold) loads every vector privately until a
    writer replaces it: the writer's next fold must not wait for a full delta first.
    """
    name = current_name(folder)
    if name is None:
        return False
    path = os.path.join(folder, name + ".vec")
    key = _file_key(path)
    if key is None:
        return False
    seen = _checked.get(folder)
    if seen is not None and seen[:2] == (path, key):
        return seen[2]
    try:
        Generation(path, with_graph=False).close()
        ok = True
    except CorruptIndex:
        ok = False
    _checked[folder] = (path, key, ok)
    return ok


def _due(db_path: str, folder: str, min_delta: int | None, graph: bool) -> bool:
    """Whether a fold would publish, judged without the lock (after every batch: reads a generation once)."""
    head = _peek(folder)
    seq, count, deletes, graph_size, current = (0, 0, 0, 0, True) if head is None else head
    if head is not None and graph and _graph_wanted(count, graph_size, current):
        return True
    if head is not None and not _sound(folder):
        return True
    conn = sqlite3.connect(f"file:{os.path.abspath(db_path)}?mode=ro", uri=True, isolation_level=None)
    try:
        newer = conn.execute("SELECT count(*) FROM item_vectors WHERE seq > ?", (seq,)).fetchone()[0]
        _, now_deletes, high_water = conn.execute(_STATE).fetchone()
    finally:
        conn.close()
    if head is not None and _older_database(seq, deletes, high_water, now_deletes):
        return True
    wanted = fold_size(count) if min_delta is None else min_delta
    if head is None:
        return bool(newer) and newer >= wanted
    return newer >= max(1, wanted) or now_deletes - deletes > max(FOLD_MIN, count // 8)


def _fold_locked(conn: sqlite3.Connection, folder: str, min_delta: int | None, rebuild: bool, graph: bool) -> bool:
    for name in os.listdir(folder):  # a fold killed before its rename: nobody else writes while we hold the lock
        if name.startswith("tmp-"):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, name))
    seq, deletes, high_water = conn.execute(_STATE).fetchone()
    latest = conn.execute("SELECT length(embedding) / 4 FROM item_vectors ORDER BY seq DESC LIMIT 1").fetchone()
    old = open_current(folder, with_graph=False)
    if latest is None:  # no vector left (dropped before a new embedder): an empty generation replaces a full one
        if old is None or old.count == 0:
            return False
        dim = old.dim
    else:
        dim = int(latest[0])
    if old is not None and (
        rebuild or old.dim != dim or _older_database(old.seq, old.deletes, high_water, deletes)
    ):  # copy nothing from it
        old.close()
        old = None
    if old is not None:
        newer = conn.execute("SELECT count(*) FROM item_vectors WHERE seq > ?", (old.seq,)).fetchone()[0]
        wanted = fold_size(old.count) if min_delta is None else min_delta
        no_graph = graph and _graph_wanted(old.count, old.graph_size, old.graph_current)
        if newer < max(1, wanted) and deletes - old.deletes <= max(FOLD_MIN, old.count // 8) and not no_graph:
            return False
    rows = conn.execute(
        "SELECT v.item_rowid, v.version, v.seq, i.namespace FROM item_vectors v "
        "JOIN items i ON i.rowid = v.item_rowid WHERE length(v.embedding) = ?",
        (dim * 4,),
    ).fetchall()
    count = len(rows)
    refs = np.fromiter((r[0] for r in rows), dtype=np.int64, count=count)
    versions = np.fromiter((r[1] for r in rows), dtype=np.int64, count=count)
    seqs = np.fromiter((r[2] for r in rows), dtype=np.int64, count=count)
    names = sorted({r[3] for r in rows})
    ns_index = {n: i for i, n in enumerate(names)}
    ns_ids = np.fromiter((ns_index[r[3]] for r in rows), dtype=np.int64, count=count)
    del rows
    order = np.lexsort((refs, ns_ids))
    refs, versions, seqs, ns_ids = refs[order], versions[order], seqs[order], ns_ids[order]
    ns_start = np.searchsorted(ns_ids, np.arange(len(names) + 1)).astype(np.int64)
    by_ref = np.argsort(refs, kind="stable").astype(np.int64)
    sorted_refs = refs[by_ref]
    ns_blob = json.dumps(names).encode("utf-8")
    sections, size = _layout(count, dim, len(names), len(ns_blob))

    number = 1 + max(
        [int(n[4:].split(".")[0]) for n in os.listdir(folder) if n.startswith("gen-") and n[4:].split(".")[0].isdigit()]
        or [0]
    )
    final = f"gen-{number:09d}"
    tmp = os.path.join(folder, f"tmp-{os.getpid()}-{secrets.token_hex(4)}")
    published = False
    try:
        graph_size = _write_generation(
            tmp,
            size,
            sections,
            count,
            dim,
            seq,
            deletes,
            names,
            ns_blob,
            (refs, versions, seqs, sorted_refs, by_ref, ns_start),
            old,
            conn,
            graph,
        )
        if graph_size:
            os.replace(tmp + ".graph", os.path.join(folder, final + ".graph"))
        os.replace(tmp + ".vec", os.path.join(folder, final + ".vec"))
        with open(tmp + ".current", "wb") as pointer:
            pointer.write(final.encode("ascii"))
            pointer.flush()
            os.fsync(pointer.fileno())
        os.replace(tmp + ".current", os.path.join(folder, "CURRENT"))
        published = True
    finally:
        if not published:  # a full disk, an error: leave no partial file behind (CURRENT still names the old one)
            if old is not None:
                old.close()
            for leftover in (
                tmp + ".vec",
                tmp + ".graph",
                tmp + ".current",
                *(os.path.join(folder, final + ext) for ext in (".vec", ".graph")),
            ):
                with contextlib.suppress(OSError):
                    os.remove(leftover)
    _fsync_dir(folder)
    for name in os.listdir(folder):  # readers that still map an old generation keep it until they let go
        if name.startswith("gen-") and name.split(".")[0] != final:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, name))
    if old is not None:
        old.close()
    return True


def _reserve(f: Any, size: int) -> None:
    """Allocate every block of the file now: a full disk is an ``ENOSPC`` here, not a SIGBUS in the map."""
    try:
        os.posix_fallocate(f.fileno(), 0, size)
        return
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
    zeros = bytes(1 << 20)  # a file system without fallocate: write the zeros
    for lo in range(0, size, len(zeros)):
        f.write(zeros[: min(len(zeros), size - lo)])
    f.flush()


def _write_generation(
    tmp: str,
    size: int,
    sections: dict[str, tuple[int, int]],
    count: int,
    dim: int,
    seq: int,
    deletes: int,
    names: list[str],
    ns_blob: bytes,
    columns: tuple[np.ndarray, ...],
    old: Generation | None,
    conn: sqlite3.Connection,
    graph: bool,
) -> int:
    """Write the generation to ``tmp + ".vec"`` (and its graph), fsynced; the graph's size, 0: none."""
    refs, versions, seqs, sorted_refs, by_ref, ns_start = columns
    with open(tmp + ".vec", "w+b") as f:
        _reserve(f, size)
        buf = mmap.mmap(f.fileno(), size)
        try:

            def arr(name: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
                return np.frombuffer(buf, dtype=dtype, count=int(np.prod(shape)), offset=sections[name][0]).reshape(
                    shape
                )

            matrix = arr("matrix", "<f4", (count, dim))
            for name, values in (
                ("refs", refs),
                ("versions", versions),
                ("seqs", seqs),
                ("sorted_refs", sorted_refs),
                ("by_ref", by_ref),
                ("ns_start", ns_start),
            ):
                arr(name, "<i8", values.shape)[:] = values
            off = sections["ns"][0]
            buf[off : off + len(ns_blob)] = ns_blob
            filled = np.zeros(count, dtype=bool)
            if old is not None and count:
                was = old.positions(refs)
                same = was >= 0
                same[same] &= old.seqs[was[same]] == seqs[same]
                # rows of a damaged block are read from the database: damage never outlives its generation
                same[same] &= ~old.damaged_blocks()[was[same] // MATRIX_BLOCK]
                rows_same = np.flatnonzero(same)
                for lo in range(0, rows_same.size, 65536):
                    part = rows_same[lo : lo + 65536]
                    matrix[part] = old.matrix[was[part]]
                filled[rows_same] = True
            _read_missing(conn, matrix, refs, sorted_refs, by_ref, filled, dim)
            arr("matrix_crcs", "<u4", (_blocks(count),))[:] = _matrix_crcs(matrix)
            del matrix
            graph_size, graph_crc = (
                _write_graph(tmp + ".graph", buf, sections, count, dim, refs, seqs, old) if graph else (0, 0)
            )
            kind, connectivity, expansion_add = graph_params() if graph_size else ("", 0, 0)
            head = _HEAD.pack(
                MAGIC, FORMAT, dim, count, seq, deletes, len(names), len(ns_blob), size,
                _meta_crc(buf, sections), graph_size, graph_crc,
                kind.encode("ascii"), connectivity, expansion_add,
            )  # fmt: skip
            buf[: len(head) + 4] = head + struct.pack("<I", zlib.crc32(head))
            buf[size - len(TRAILER) : size] = TRAILER
            buf.flush()
        finally:
            buf.close()
        os.fsync(f.fileno())
    return graph_size


def _read_missing(
    conn: sqlite3.Connection,
    matrix: np.ndarray,
    refs: np.ndarray,
    sorted_refs: np.ndarray,
    by_ref: np.ndarray,
    filled: np.ndarray,
    dim: int,
) -> None:
    """Copy the vectors the previous generation did not hold from ``item_vectors`` into ``matrix``."""
    missing = refs[~filled]
    if missing.size == 0:
        return
    if missing.size > refs.size // 4:  # most rows: one pass over the table beats many lookups
        cursor = conn.execute("SELECT item_rowid, embedding FROM item_vectors WHERE length(embedding) = ?", (dim * 4,))
        wanted = None
    else:
        wanted = np.sort(missing)
        cursor = None
    got = 0

    def place(batch: list[tuple[int, bytes]]) -> int:
        if not batch:
            return 0
        at = by_ref[np.searchsorted(sorted_refs, np.fromiter((r for r, _ in batch), dtype=np.int64))]
        matrix[at] = np.frombuffer(b"".join(b for _, b in batch), dtype="<f4").reshape(len(batch), dim)
        filled[at] = True
        return len(batch)

    if cursor is not None:
        while batch := cursor.fetchmany(8192):
            got += place(batch)
    else:
        assert wanted is not None
        for lo in range(0, wanted.size, 4096):
            part = wanted[lo : lo + 4096]
            got += place(
                conn.execute(
                    "SELECT item_rowid, embedding FROM item_vectors "
                    "WHERE item_rowid IN (SELECT value FROM json_each(?))",
                    (json.dumps(part.tolist()),),
                ).fetchall()
            )
    if not filled.all():  # cannot happen inside one snapshot; never publish a hole
        raise CorruptIndex("a vector vanished while the generation was written")


def _write_graph(
    path: str,
    buf: Any,
    sections: dict[str, tuple[int, int]],
    count: int,
    dim: int,
    refs: np.ndarray,
    seqs: np.ndarray,
    old: Generation | None,
) -> tuple[int, int]:
    """Build (or extend the previous generation's) HNSW graph; ``(size, crc)`` of the file, ``(0, 0)``: none."""
    if count < GRAPH_MIN:
        return 0, 0
    try:
        from usearch.index import Index
    except ImportError:
        return 0, 0
    matrix = np.frombuffer(buf, dtype="<f4", count=count * dim, offset=sections["matrix"][0]).reshape(count, dim)
    graph = None
    if old is not None and old.graph_size and old.graph_current and os.path.exists(old.graph_path):
        try:
            graph = Index.restore(old.graph_path)  # a private copy, extended below
        except Exception:  # noqa: BLE001 - unreadable: build anew
            graph = None
    if graph is not None and graph.ndim == dim and old is not None:
        was = old.positions(refs)
        keep = was >= 0
        keep[keep] &= old.seqs[was[keep]] == seqs[keep]
        gone = np.setdiff1d(np.asarray(old.refs), refs[keep], assume_unique=True)
        add = np.flatnonzero(~keep)
        if gone.size + add.size > count // 2:
            graph = None
        else:
            if gone.size:
                graph.remove(gone.astype(np.uint64))
            if add.size:
                graph.add(refs[add].astype(np.uint64), np.ascontiguousarray(matrix[add]), threads=_threads())
    else:
        graph = None
    if graph is None:
        kind, connectivity, expansion_add = graph_params()
        graph = Index(ndim=dim, metric="ip", dtype=kind, connectivity=connectivity, expansion_add=expansion_add)
        for lo in range(0, count, 65536):
            hi = min(count, lo + 65536)
            graph.add(refs[lo:hi].astype(np.uint64), np.ascontiguousarray(matrix[lo:hi]), threads=_threads())
    try:
        graph.save(path)
    except Exception as e:  # usearch raises its own errors; a full disk is an OSError to every caller
        raise OSError(f"cannot write the graph {path}: {e}") from e
    del graph
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
    return os.path.getsize(path), _file_crc(path)


def _threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


# -- the reader ------------------------------------------------------------------

# a search's candidate: (ref, item_id, score, version)
Hit = tuple[int, str, float, int]
# a row test in SQL over ``items`` (a ``where`` and the scope), with its parameters
Test = tuple[str, list[Any]]
FILTER_GIVE_UP = 4  # a filtered ranking reads at most 1/this of the scope's rows before the caller scans instead
FILTER_FIRST = 256  # the first window a filtered ranking tests (its match rate decides whether to read on)


def _projected(tested: int, matched: int, k: int) -> float:
    """The rows a filtered ranking reads until ``k`` match, at the match rate seen so far."""
    return tested * k / max(matched, 0.5)


def _too_selective(tested: int, matched: int, k: int, total: int) -> bool:
    """Whether reading on until ``k`` matches, at the match rate seen so far, would pass the give-up point."""
    return _projected(tested, matched, k) > max(FILTER_FIRST * 4, total // FILTER_GIVE_UP)


class TooSelective(Exception):
    """A filtered ranking read far down without ``k`` matches: reading the matching rows first is cheaper."""


def _meeting(conn: sqlite3.Connection, refs: list[int], test: Test) -> set[int]:
    """Which of ``refs`` meet ``test`` (one statement)."""
    sql, params = test
    found = conn.execute(
        f"SELECT rowid FROM items WHERE rowid IN (SELECT value FROM json_each(?)) AND {sql}",
        [json.dumps(refs), *params],
    )
    return {r[0] for r in found}


def _file_key(path: str) -> tuple[int, int, int, int] | None:
    try:
        return _stamp(os.stat(path))
    except OSError:
        return None


def _inode(path: str) -> int:
    """The file's inode, -1 when it is missing (a generation is condemned by its file, not its reusable name)."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return -1


def _row_scores(matrix: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``matrix[rows] @ q``, in pieces of :data:`SCORE_ROWS` rows."""
    if rows.size <= SCORE_ROWS:
        return matrix[rows] @ q
    return np.concatenate([matrix[rows[i : i + SCORE_ROWS]] @ q for i in range(0, rows.size, SCORE_ROWS)])


def _inside(rows: np.ndarray, ranges: list[tuple[int, int]] | None) -> np.ndarray:
    """The sorted ``rows`` that fall in one of the sorted, disjoint ``ranges`` (``None``: every row)."""
    if ranges is None or not rows.size:
        return rows
    if not ranges:
        return rows[:0]
    starts = np.array([a for a, _ in ranges], dtype=np.int64)
    stops = np.array([b for _, b in ranges], dtype=np.int64)
    j = np.searchsorted(starts, rows, side="right") - 1
    return rows[(j >= 0) & (rows < stops[np.maximum(j, 0)])]


class SharedVectors:
    """A store's view of its shared index plus the private delta of newer vectors (one per open store).

    Not thread-safe: the store calls it under its lock, inside a read transaction.
    """

    def __init__(self, db_path: str | None, *, writable: bool) -> None:
        self.folder = None if db_path is None or not enabled() else directory_for(db_path)
        self.db_path = db_path
        self.writable = writable and self.folder is not None
        self.gen: Generation | None = None
        self._gen_key: tuple[int, int, int, int] | None = None  # CURRENT's stamp when last looked
        self._condemned: set[tuple[str, int]] = set()  # (path, inode) of generation files found unsound
        self.needs_rebuild = False  # a generation was condemned: the next fold copies nothing from it
        self.delta: VectorCache | None = None
        self._delta_base = -1
        self._delta_gen: Generation | None = None
        self._masked = np.zeros(0, dtype=np.int64)  # rows of the generation the delta replaces
        self._seen: tuple[int, int] | None = None
        self._query_norm = 1.0
        self.rows_loaded = 0  # vectors read from the database into private memory, for tests and benchmarks
        self.approximate_searches = 0
        self.exact_searches = 0

    @property
    def nbytes(self) -> int:
        """Private bytes held (the delta and the masked rows; the mapped generation is shared)."""
        return (0 if self.delta is None else self.delta.nbytes) + self._masked.nbytes

    def _current(self, dim: int) -> Generation | None:
        folder = self.folder
        if folder is None:
            return None
        key = _file_key(os.path.join(folder, "CURRENT"))
        gen = self.gen
        # CURRENT moved on: a fold published another generation (the old file, merely unlinked, closes quietly)
        reload = key != self._gen_key
        if gen is not None and not gen.intact():
            # written or truncated in place: damage; only its ctime changed: damage too, unless a fold unlinked
            # it, which changes ctime as well, and which follows the fold's replacing CURRENT (so look again)
            current = _file_key(os.path.join(folder, "CURRENT"))
            if gen.rewritten() or (current == self._gen_key and gen.named()):
                self._condemned.add((gen.path, gen.inode))
                self.needs_rebuild = self.writable
            reload = True
        elif gen is not None and not reload and not gen.named():
            reload = True  # removed or replaced under the same CURRENT: look at what is there now
        if reload:
            self._gen_key = key
            gen = self._open_named(folder)
            if self.gen is not None:
                self.gen.close()
            self.gen = gen
        return gen if gen is not None and gen.dim == dim else None

    def _open_named(self, folder: str) -> Generation | None:
        """The generation CURRENT names, checked; ``None`` (and condemned) when it is missing or unsound."""
        for _ in range(3):
            name = current_name(folder)
            if name is None:
                return None
            path = os.path.join(folder, name + ".vec")
            ident = (path, _inode(path))
            if ident in self._condemned:
                return None
            try:
                return Generation(path)
            except MissingGeneration:
                if current_name(folder) != name:  # a fold published another and removed this one: read again
                    self._gen_key = _file_key(os.path.join(folder, "CURRENT"))
                    continue
            except CorruptIndex:
                pass
            self._condemned.add(ident)
            self.needs_rebuild = self.writable
            return None
        return None

    def condemn(self) -> None:
        """Stop trusting the current generation (its scores were garbage); the next fold replaces it."""
        if self.gen is not None:
            self._condemned.add((self.gen.path, self.gen.inode))
            self.gen.close()
        self.gen = None
        self.needs_rebuild = self.writable

    def refresh(self, conn: sqlite3.Connection, dim: int, seen: tuple[int, int]) -> Generation | None:
        """Bring the generation and the delta up to date (inside the caller's read transaction)."""
        gen = self._current(dim)
        base = gen.seq if gen is not None else 0
        delta = self.delta
        if delta is None or delta.dimension != dim or self._delta_base != base:
            delta = self.delta = VectorCache(dim)
            delta.seq = base
            self._delta_base = base
            self._seen = None
        if seen != self._seen or self._delta_gen is not gen:
            seq, deletes, high_water = conn.execute(_STATE).fetchone()
            if gen is not None and _older_database(gen.seq, gen.deletes, high_water, deletes):
                self.condemn()  # its rows could pass the re-check for vectors written since under reused seqs
                raise CorruptIndex(f"{gen.path}: newer than the database (a backup restored?)")
            changed = False
            if delta.deletes not in (-1, deletes):  # a delta row may be gone: reload the (short) delta
                delta.reset()
                delta.seq = base
                changed = True
            if seq > delta.seq:
                changed = True
                loaded = conn.execute(
                    "SELECT v.item_rowid, i.id, v.version, i.namespace, v.embedding FROM item_vectors v "
                    "JOIN items i ON i.rowid = v.item_rowid WHERE v.seq > ?",
                    (delta.seq,),
                ).fetchall()
                self.rows_loaded += len(loaded)
                delta.apply(loaded)
            delta.seq, delta.deletes = max(seq, delta.seq), deletes
            # the mask only saves re-checks: a replaced row of the generation fails its re-check anyway
            if changed or self._delta_gen is not gen:
                self._masked = np.zeros(0, dtype=np.int64)
                if gen is not None and len(delta):
                    at = gen.positions(delta.refs)
                    self._masked = np.sort(at[at >= 0])
                self._delta_gen = gen
            self._seen = seen
        return gen

    def fold_due(self) -> bool:
        """Whether the delta is long enough that a search should fold it itself (no indexer keeps up)."""
        if not self.writable or self.delta is None:
            return False
        if self.needs_rebuild:
            return True
        count = 0 if self.gen is None else self.gen.count
        return len(self.delta) >= SEARCH_FOLD_FACTOR * fold_size(count)

    def search(
        self,
        conn: sqlite3.Connection,
        query: Any,
        within: Sequence[tuple[str, ...]],
        k: int,
        refs: np.ndarray | None = None,
        test: Test | None = None,
    ) -> list[Hit]:
        """Top ``k`` ``(ref, id, cosine, version)`` inside ``within`` (and among ``refs``), best first, ties by ref.

        ``test``: only rows meeting it (a ``where``), tested in SQL while the ranking is read down: the graph's
        candidates first where the graph is asked (as without a filter), then, when they hold fewer than ``k``
        matches, the exact ranking; raises :class:`TooSelective` once that has read 1/``FILTER_GIVE_UP`` of the
        scope without ``k`` matches.
        """
        q = np.asarray(query, dtype=DTYPE)
        self._query_norm = float(np.linalg.norm(q))
        delta = self.delta
        assert delta is not None
        found = self._delta_tested(conn, q, within, k, test) if test else delta.search_refs(q, within, k, refs)
        gen = self._delta_gen
        if gen is not None and gen.count and k > 0 and within:
            try:
                found.extend(self._from_generation(conn, gen, q, within, k, refs, test))
            except CorruptIndex:
                self.condemn()
                raise
        found.sort(key=lambda h: (-h[2], h[0]))
        return found[:k]

    def _delta_tested(
        self, conn: sqlite3.Connection, q: np.ndarray, within: Sequence[tuple[str, ...]], k: int, test: Test
    ) -> list[Hit]:
        """The delta's best ``k`` meeting ``test``, read down in growing windows."""
        delta = self.delta
        assert delta is not None
        m, meets = max(k + 8, FILTER_FIRST), set[int]()
        tested: set[int] = set()
        while True:
            ranked = delta.search_refs(q, within, m)
            fresh = [h[0] for h in ranked if h[0] not in tested]
            if fresh:
                meets |= _meeting(conn, fresh, test)
                tested.update(fresh)
            kept = [h for h in ranked if h[0] in meets]
            if len(kept) >= k or len(ranked) < m:
                return kept[:k]
            if _too_selective(len(tested), len(kept), k, len(delta)):
                raise TooSelective
            m *= 4

    def _from_generation(
        self,
        conn: sqlite3.Connection,
        gen: Generation,
        q: np.ndarray,
        within: Sequence[tuple[str, ...]],
        k: int,
        refs: np.ndarray | None,
        test: Test | None = None,
    ) -> list[Hit]:
        ranges = gen.ranges(within)
        if ranges is not None and not ranges:
            return []
        scope_rows = gen.count if ranges is None else sum(b - a for a, b in ranges)
        checked: dict[int, tuple[str, int] | None] = {}  # rows re-checked (and tested) on the graph's path
        if (
            refs is None
            and gen.graph is not None
            and scope_rows >= APPROX_MIN
            and scope_rows >= APPROX_SHARE * gen.count
        ):
            hits = self._approximate(conn, gen, q, ranges, scope_rows, k, test, checked)
            if hits is not None:
                self.approximate_searches += 1
                return hits
        self.exact_searches += 1
        rows: np.ndarray | None
        if refs is not None:
            at = gen.positions(refs)
            rows = _inside(np.unique(at[at >= 0]), ranges)
            if rows.size == 0:
                return []
            scores = _row_scores(gen.matrix, rows, q)
        elif ranges is None:
            rows = None
            scores = gen.matrix @ q
        else:
            scores = np.concatenate([gen.matrix[a:b] @ q for a, b in ranges])
            rows = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges])
        return self._confirm(conn, gen, rows, scores, k, test, checked=checked)

    def _approximate(
        self,
        conn: sqlite3.Connection,
        gen: Generation,
        q: np.ndarray,
        ranges: list[tuple[int, int]] | None,
        scope_rows: int,
        k: int,
        test: Test | None,
        checked: dict[int, tuple[str, int] | None],
    ) -> list[Hit] | None:
        """The graph's nearest inside the scope, re-scored from the matrix; ``None``: too few, scan instead.

        With ``test``, the graph's whole beam is asked for and read down in windows until ``k`` meet it; the rows
        it re-checked are left in ``checked`` for the exact path, which then tests none of them again.
        """
        # over-fetch for the rows the delta replaced and those deleted since (re-checked below), and for rows
        # outside a broad scope; what still falls short of k is answered by the exact scan
        want = max(GRAPH_CANDIDATES, 4 * k) + min(self._masked.size, 4 * GRAPH_CANDIDATES)
        want = int(want * gen.count / max(1, scope_rows)) + 1
        want = min(gen.count, want if test is None else max(want, GRAPH_FILTER_CANDIDATES))
        try:
            keys = np.asarray(gen.graph.search(q, want, threads=1).keys, dtype=np.int64)
        except Exception:  # noqa: BLE001 - a graph that fails is only a slower search
            return None
        at = gen.positions(keys)
        rows = _inside(np.unique(at[at >= 0]), ranges)
        if rows.size < k:
            return None
        hits = self._confirm(
            conn, gen, rows, _row_scores(gen.matrix, rows, q), k, test, checked=checked, candidates=True
        )
        return hits if len(hits) >= k else None

    def _confirm(
        self,
        conn: sqlite3.Connection,
        gen: Generation,
        rows: np.ndarray | None,
        scores: np.ndarray,
        k: int,
        test: Test | None = None,
        *,
        checked: dict[int, tuple[str, int] | None] | None = None,
        candidates: bool = False,
    ) -> list[Hit]:
        """The best ``k`` rows still live as indexed (and meeting ``test``), reading down past the others.

        ``checked``: rows already re-checked in this transaction (``None``: gone or failing ``test``), filled in
        as more are. ``candidates``: ``rows`` are the graph's; with ``test``, give up (fewer than ``k`` hits)
        once the match rate seen projects past them, rather than raise :class:`TooSelective`.
        """
        scores = np.asarray(scores, dtype=np.float32)
        # NaN fails both comparisons, so a NaN anywhere condemns the generation too
        limit = _SCORE_LIMIT * max(1.0, self._query_norm)  # stored vectors are unit length (normalised when written)
        if scores.size and not (-limit <= float(scores.min()) and float(scores.max()) <= limit):
            raise CorruptIndex(f"{gen.path}: scores outside [-1, 1]")
        if self._masked.size:
            if rows is None:
                replaced = self._masked
            else:  # rows ascend (merged ranges, or np.unique): look the masked rows up, no pass over them all
                at = np.minimum(np.searchsorted(rows, self._masked), rows.size - 1)
                replaced = at[rows[at] == self._masked]
            scores[replaced] = -np.inf
        total = int(np.count_nonzero(scores > -np.inf))
        checked = {} if checked is None else checked
        m = min(total, k + 8 if test is None else max(k + 8, FILTER_FIRST))
        while True:
            if m < scores.shape[0]:
                cut = scores[np.argpartition(-scores, m - 1)[m - 1]]
                top = np.flatnonzero(scores >= cut) if cut > -np.inf else np.flatnonzero(scores > -np.inf)
            else:
                top = np.flatnonzero(scores > -np.inf)
            idx = top if rows is None else rows[top]
            order = np.lexsort((gen.refs[idx], -scores[top]))
            top, idx = top[order], idx[order]
            fresh = [int(r) for r in idx if int(r) not in checked]
            if fresh:
                want = {int(gen.refs[r]): r for r in fresh}
                for r in fresh:
                    checked[r] = None
                sql, params = test if test is not None else ("1", [])
                live = conn.execute(
                    "SELECT v.item_rowid, items.id, v.version, v.seq FROM item_vectors v JOIN items "
                    "ON items.rowid = v.item_rowid WHERE v.item_rowid IN (SELECT value FROM json_each(?)) "
                    f"AND {sql}",
                    [json.dumps(list(want)), *params],
                ).fetchall()
                for ref, item_id, version, seq in live:
                    r = want[ref]
                    if seq == gen.seqs[r]:  # the very vector indexed; a newer one is in the delta
                        checked[r] = (item_id, int(version))
            hits: list[Hit] = []
            for t, r in zip(top.tolist(), idx.tolist(), strict=True):
                ok = checked.get(r)
                if ok is not None:
                    hits.append((int(gen.refs[r]), ok[0], float(scores[t]), ok[1]))
                    if len(hits) == k:
                        return hits
            if top.size >= total:
                return hits
            if test is not None and candidates and _projected(top.size, len(hits), k) > total:
                return hits  # the graph's candidates will not hold k: the exact path reads on
            if test is not None and not candidates and _too_selective(len(checked), len(hits), k, total):
                raise TooSelective
            m = min(total, max(m * 4, top.size + 1))
