"""The memlane HTTP service (``memlane serve``); needs the ``server`` extra."""

from .app import create_app

__all__ = ["create_app"]
