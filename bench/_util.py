"""Shared helpers for memlane benchmarks: timing, percentiles, machine info, reports.

Generic on purpose: ``bench/kv.py``, ``bench/search.py`` and ``bench/retrieval.py``
all time calls the same way, summarise them the same way and print the same
kind of table, so their figures can be compared side by side.

Conventions:

* Latencies are collected as integer nanoseconds (``time.perf_counter_ns``)
  around each single call and summarised in microseconds.
* Percentiles use the nearest-rank method on the sorted samples (no
  interpolation), so a reported p99 is a latency that was actually observed.
* Ratios are ``subject / baseline``: above 1.0 means the subject is slower
  (latency) or, for throughput, use :func:`ratio` with the arguments swapped.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "Goal",
    "LatencySummary",
    "Stopwatch",
    "db_size",
    "fmt_bytes",
    "fmt_num",
    "format_table",
    "gc_paused",
    "machine_info",
    "percentile",
    "profile_top",
    "progress",
    "ratio",
    "summarize",
    "time_calls",
    "time_calls_interleaved",
    "write_json",
]


# -- statistics -------------------------------------------------------------


def percentile(sorted_samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) of already sorted samples."""
    if not sorted_samples:
        return math.nan
    if p <= 0:
        return sorted_samples[0]
    rank = math.ceil(p / 100 * len(sorted_samples))
    return sorted_samples[min(rank, len(sorted_samples)) - 1]


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Latency distribution of individually timed calls, in microseconds."""

    n: int
    p50_us: float
    p90_us: float
    p99_us: float
    mean_us: float
    min_us: float
    max_us: float

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def summarize(samples_ns: Sequence[int]) -> LatencySummary:
    """Summarise nanosecond samples as a :class:`LatencySummary` in microseconds."""
    s = sorted(samples_ns)
    if not s:
        nan = math.nan
        return LatencySummary(0, nan, nan, nan, nan, nan, nan)
    us = 1e-3
    return LatencySummary(
        n=len(s),
        p50_us=percentile(s, 50) * us,
        p90_us=percentile(s, 90) * us,
        p99_us=percentile(s, 99) * us,
        mean_us=sum(s) / len(s) * us,
        min_us=s[0] * us,
        max_us=s[-1] * us,
    )


def ratio(subject: float, baseline: float) -> float:
    """``subject / baseline`` (``nan`` when the baseline is zero or missing)."""
    if not baseline or math.isnan(baseline):
        return math.nan
    return subject / baseline


# -- timing -----------------------------------------------------------------


def time_calls(fn: Callable[..., Any], args: Iterable[Sequence[Any]]) -> list[int]:
    """Call ``fn(*a)`` for each ``a`` in ``args``, timing each call on its own (ns).

    The loop overhead outside the two ``perf_counter_ns`` reads is not counted;
    the reads themselves (~50 ns together) are, equally for every subject.
    """
    clock = time.perf_counter_ns
    out: list[int] = []
    append = out.append
    for a in args:
        t0 = clock()
        fn(*a)
        append(clock() - t0)
    return out


def time_calls_interleaved(
    subjects: Mapping[str, tuple[Callable[..., Any], Sequence[Sequence[Any]]]],
    *,
    rounds: int = 4,
    warmup: int = 0,
) -> dict[str, list[int]]:
    """Time several subjects on equivalent arguments, alternating in blocks.

    ``subjects`` maps a name to ``(fn, args)``; every ``args`` list has the same
    length and item ``j`` of each list is the same request in that subject's
    own form (so no adapter wraps the timed call). The first ``warmup`` items
    of each list run untimed. The rest is split into ``rounds`` blocks; in
    each block every subject runs the whole block, and the subject order is
    rotated from block to block, so drift (CPU frequency, page cache, a noisy
    neighbour) is spread over all subjects instead of landing on one.
    """
    lengths = {len(a) for _, a in subjects.values()}
    if len(lengths) > 1:
        raise ValueError(f"argument lists differ in length: {sorted(lengths)}")
    count = lengths.pop() if lengths else 0
    names = list(subjects)
    for name in names:
        fn, a = subjects[name]
        time_calls(fn, a[:warmup])
    out: dict[str, list[int]] = {name: [] for name in names}
    timed = count - min(warmup, count)
    rounds = max(1, min(rounds, timed or 1))
    size = math.ceil(timed / rounds) if timed else 0
    for r in range(rounds):
        lo, hi = warmup + r * size, min(count, warmup + (r + 1) * size)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn, a = subjects[name]
            out[name].extend(time_calls(fn, a[lo:hi]))
    return out


class Stopwatch:
    """Accumulates wall time and this process's CPU time over timed sections (``with sw: ...``).

    ``cpu_share`` (CPU time / wall time) tells how much of the machine the
    timed code actually got: near 1.0 for CPU-bound code on an idle machine,
    lower when it waited on I/O or other processes took the CPU. On a shared
    machine, ``cpu_rate`` (per CPU-second) is the steadier throughput figure.
    """

    def __init__(self) -> None:
        self.ns = 0
        self.cpu_ns = 0
        self.sections = 0
        self._t0 = 0
        self._c0 = 0

    def __enter__(self) -> Stopwatch:
        self._c0 = time.process_time_ns()
        self._t0 = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        self.ns += time.perf_counter_ns() - self._t0
        self.cpu_ns += time.process_time_ns() - self._c0
        self.sections += 1

    @property
    def seconds(self) -> float:
        return self.ns / 1e9

    @property
    def cpu_share(self) -> float:
        return self.cpu_ns / self.ns if self.ns else math.nan

    def rate(self, count: int) -> float:
        """``count`` per second of accumulated wall time."""
        return count / self.seconds if self.ns else math.nan

    def cpu_rate(self, count: int) -> float:
        """``count`` per second of this process's CPU time."""
        return count / (self.cpu_ns / 1e9) if self.cpu_ns else math.nan


@contextmanager
def gc_paused() -> Any:
    """Collect garbage first, then keep the cyclic GC off inside the block."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def profile_top(fn: Callable[[], Any], *, top: int = 12, sort: str = "tottime") -> str:
    """Run ``fn()`` under cProfile; the ``top`` rows of the stats sorted by ``sort``.

    For naming dominant costs only: cProfile inflates Python-level time
    (each call pays the profiler hook), so never quote its totals as latency.
    """
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats(sort).print_stats(top)
    text = out.getvalue()
    # drop the preamble before the column header; keep paths short
    start = text.find("   ncalls")
    text = text[start:] if start >= 0 else text
    cwd = os.getcwd() + os.sep
    return "\n".join(line.replace(cwd, "").rstrip() for line in text.splitlines() if line.strip())


def progress(message: str) -> None:
    """One progress line on stderr (keeps stdout for the report)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- environment --------------------------------------------------------------


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_total_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def machine_info() -> dict[str, Any]:
    """What a reader needs to weigh the figures: CPU, memory, Python, SQLite, memlane."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    try:
        from importlib.metadata import version

        memlane_version: str | None = version("memlane")
    except Exception:  # informational only
        memlane_version = None
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "memory_total_bytes": _memory_total_bytes(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "memlane": memlane_version,
        "loadavg_1_5_15": _loadavg(),
    }


def _loadavg() -> list[float] | None:
    """System load when the run started: other work on the machine skews absolute figures."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def db_size(path: str | os.PathLike[str]) -> int:
    """Bytes on disk of a SQLite database: the file plus its ``-wal`` and ``-shm``."""
    total = 0
    for suffix in ("", "-wal", "-shm"):
        p = Path(f"{os.fspath(path)}{suffix}")
        if p.exists():
            total += p.stat().st_size
    return total


# -- reporting ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Goal:
    """A target printed beside a figure: ``value <= limit`` or ``value >= limit``."""

    label: str
    limit: float
    higher_is_better: bool = False

    def met(self, value: float) -> bool | None:
        if value is None or math.isnan(value):
            return None
        return value >= self.limit if self.higher_is_better else value <= self.limit

    def status(self, value: float) -> str:
        ok = self.met(value)
        return "n/a" if ok is None else ("met" if ok else "MISSED")


def fmt_num(value: float | None, digits: int = 1) -> str:
    """Human number: thousands separators, ``digits`` decimals below 1000."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def fmt_bytes(value: float | None) -> str:
    """Bytes with a binary unit."""
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} GiB"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str = "") -> str:
    """A plain-text table (first column left-aligned, the rest right-aligned)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        parts = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = [title] if title else []
    out += [line(cells[0]), rule] + [line(r) for r in cells[1:]]
    return "\n".join(out)


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as indented JSON (NaN written as ``null``)."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and math.isnan(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    Path(path).write_text(json.dumps(clean(data), indent=2) + "\n", encoding="utf-8")


@contextmanager
def postgres_server() -> Iterator[str]:
    """An admin URL: ``$MEMLANE_TEST_PG_URL`` if set, else a throwaway pgserver (as tests/conftest.py).

    The pgserver data directory comes from ``tempfile.mkdtemp`` and is made
    0755 (pgserver's postgres process runs as another user); the server is
    stopped and the directory removed on exit.
    """
    url = os.environ.get("MEMLANE_TEST_PG_URL")
    if url:
        yield url
        return
    import shutil
    import tempfile

    import pgserver

    base = tempfile.mkdtemp(prefix="memlane-bench-pg-")
    os.chmod(base, 0o755)
    server = pgserver.get_server(base, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


def pg_url_for(admin_url: str, dbname: str) -> str:
    """``admin_url`` pointing at database ``dbname``."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(admin_url)._replace(path="/" + dbname))


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now (for a server a benchmark starts)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def postgres_server_kept(datadir: str | os.PathLike[str] | None) -> Iterator[str]:
    """As :func:`postgres_server`, but with ``datadir`` its data lives there and stays after the server stops.

    For a benchmark that builds a large store once and reuses it: the next run
    starts the same pgserver on the same directory. ``None``: a throwaway one.
    """
    if datadir is None or os.environ.get("MEMLANE_TEST_PG_URL"):
        with postgres_server() as url:
            yield url
        return
    import pgserver

    path = Path(datadir)
    path.mkdir(parents=True, exist_ok=True)
    for p in (path, *path.parents):  # pgserver's postgres process runs as another user
        if p == Path("/"):
            break
        if p.stat().st_uid == os.getuid():
            os.chmod(p, p.stat().st_mode | 0o755)
    server = pgserver.get_server(path, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def smaps_rollup(pid: int) -> dict[str, int]:
    """A process's ``/proc/PID/smaps_rollup`` memory lines in bytes (``Rss``, ``Pss``, ``Private_Clean``...)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children...), from ``/proc/PID/task/*/children``."""
    found: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children", encoding="utf-8") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found
