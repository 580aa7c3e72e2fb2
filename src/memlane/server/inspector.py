"""The web inspector served at ``/`` (to be built)."""

from __future__ import annotations

from fastapi import FastAPI


def mount_inspector(app: FastAPI) -> None:
    """Serve the inspector's page and assets on ``app``."""
