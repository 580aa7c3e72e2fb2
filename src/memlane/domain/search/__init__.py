"""Embedders that turn text into unit vectors for memlane's search layer."""
