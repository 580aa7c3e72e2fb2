"""The values layer: plain records (``Item``, ``Envelope``, ``Agent``, ``Scope``, the facts' records), the
exceptions, the input checks and filters, ids, the error envelope on the wire, and the table of operations the
surfaces are made from (with ``Memory``'s signatures as declared, so that the Client loads no core). Nothing here
knows there is a database: a module of this layer imports only this layer, nothing above it.
"""
