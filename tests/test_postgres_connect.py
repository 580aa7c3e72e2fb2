"""PostgreSQL that cannot be reached when a store opens: a StoreError that names the server and what to do."""

from __future__ import annotations

import socket

import pytest

import memlane


def test_a_postgres_server_that_is_not_there_is_named_with_what_to_check() -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://memlane:secret@127.0.0.1:{port}/nowhere?connect_timeout=2"
    with pytest.raises(memlane.StoreError) as refused:
        memlane.open(url, embedder=None)
    message = str(refused.value)
    assert message.startswith(f"cannot connect to postgresql://memlane:***@127.0.0.1:{port}/nowhere")
    assert "check the URL and that the server is up" in message and "secret" not in message
