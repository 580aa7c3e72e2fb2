"""Imported by the fork server of ``memlane serve --workers N`` (:data:`memlane.server.workers.PRELOAD`), never
by anything else: it builds one service over an in-memory store and drops it, so that what every worker builds
the same way (the request models, the MCP tools' templates, FastAPI's schemas of the routes) is built once,
in the fork server, and each worker, a fork of it, starts serving in a fraction of a second.

It starts no thread and opens no file: the fork server forks workers from a single-threaded process.
"""

from __future__ import annotations

import memlane

from .app import create_app


def _warm() -> None:
    try:
        mem = memlane.open(":memory:", embedder=None, indexing="external")
        try:
            create_app(mem, index=False)
        finally:
            mem.close()
    except Exception:  # noqa: BLE001 - only a head start: a worker builds what is missing itself
        return


_warm()
