"""The domain layer: the parts with rules (ranking and the relevance decision, embedders, the facts layer, the
indexer, conversations, extraction, the query space's operations), each handed the memory that composes it as
a protocol from ``ports.py``, never ``Memory`` itself. A module of this layer imports only this layer, the
stores (``memlane.store``) and the values (``memlane.values``).
"""
