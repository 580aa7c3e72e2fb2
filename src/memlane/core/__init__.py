"""The core layer: ``Memory`` composes the domain parts over one store, ``AgentView`` is a ``Memory`` narrowed
to one agent's scope. A module of this layer may import every layer below it (``memlane.domain``,
``memlane.store``, ``memlane.values``), never a surface.
"""
