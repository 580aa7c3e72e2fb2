"""The conformance suite: one set of tests, run on every backend and surface (``tests/conftest.py``)."""

# the surfaces that reach the memory over HTTP
OVER_HTTP = ("client", "async_client")
