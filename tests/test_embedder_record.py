"""An embedder that learns its dimension from its first response (``openai:<model>``), checked against the store.

``open()`` does not ask it (that would cost a request on every open); its first
embedding is checked instead: a write is refused, a search says why its vector
channel found nothing. The server is a real loopback HTTP server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import memlane
from memlane import EmbedderMismatchError
from memlane.domain.search.embedders import FakeEmbedder, OpenAIEmbedder


class EmbeddingsServer:
    """``POST /v1/embeddings`` answering with fake vectors of ``dimension`` (changeable: another model)."""

    def __init__(self) -> None:
        self.dimension = 12
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests += 1
                vectors = FakeEmbedder(owner.dimension).embed_batch(body["input"])
                raw = json.dumps({"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def embedder(self) -> OpenAIEmbedder:
        return OpenAIEmbedder("embed-small", base_url=self.base_url, max_retries=0, timeout=5)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    srv = EmbeddingsServer()
    yield srv
    srv.close()


def test_a_dimension_learned_at_the_first_response_is_checked_there(
    server: EmbeddingsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MEMLANE_EMBED_BASE_URL", server.base_url)  # the embedder made from the spec: loopback
    monkeypatch.delenv("MEMLANE_EMBEDDER", raising=False)
    path = str(tmp_path / "remote.db")
    with memlane.open(path, embedder=server.embedder(), indexing="sync") as mem:
        mem.put("notes", "car", "I drive a blue hatchback")
    with memlane.open(path, embedder=None) as mem:
        assert json.loads(mem.store.get_meta("embedder") or "null") == {
            "name": "openai:embed-small",
            "dimension": 12,
            "spec": "openai:embed-small",
        }
    server.dimension = 24  # the model behind the same name now makes 24 dimensions
    asked = server.requests
    with memlane.open(path, embedder=server.embedder(), indexing="sync") as mem:
        assert server.requests == asked  # open() sent no request to learn the dimension
        env = mem.search("blue hatchback", channels=["vector"])
        assert env.counts["vector"] == 0
        assert any("24 dimensions" in n and "have 12" in n for n in env.notes), env.notes
        with pytest.raises(EmbedderMismatchError, match=r"\(12 dimensions\), not 'openai:embed-small' \(24"):
            mem.put("notes", "bike", "a red bicycle")
    server.dimension = 12
    with memlane.open(path) as mem:  # the recorded spec, and the store's dimension again: found
        assert mem.search("blue hatchback", channels=["vector"]).counts["vector"] == 1
