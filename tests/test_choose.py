"""The OpenAI-compatible chat chooser, against a real HTTP server on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import memlane
from memlane import ChooserError, OpenAIChooser

KEY = "sk-test-secret-123"


class FakeChat(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions by picking offered options that mention a word of the question."""

    requests: list[dict[str, Any]] = []
    reply: str | None = None
    status = 200

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeChat.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if FakeChat.status != 200:
            self.send_response(FakeChat.status)
            self.end_headers()
            self.wfile.write(b'{"error": "nope"}')
            return
        user = body["messages"][1]["content"]
        question = user.split("\n", 1)[0].lower()
        options = [line.rsplit(" (", 1)[0] for line in user.split("Options:\n", 1)[1].splitlines()]
        picked = [o for o in options if any(w in o.lower() for w in question.replace("?", "").split()[1:])]
        content = FakeChat.reply if FakeChat.reply is not None else f"Sure! {json.dumps({'choices': picked})}"
        out = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def chat() -> Iterator[str]:
    FakeChat.requests, FakeChat.reply, FakeChat.status = [], None, 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeChat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture
def store(tmp_path, clock):  # type: ignore[no-untyped-def]
    with memlane.open(str(tmp_path / "m.db"), clock=clock, embedder=None) as mem:
        mem.put("user/1", "preferences.ui.theme", "dark")
        mem.put("user/1", "preferences.editor", "helix")
        mem.put("user/1", "projects.memlane", "active")
        yield mem


def test_single_mode_with_chat_chooser(chat, store):
    chooser = OpenAIChooser("tiny-model", base_url=chat, api_key=KEY)
    env = store.recall("which editor?", mode="single", chooser=chooser)
    assert [h.key for h in env.hits] == ["preferences.editor"]
    (req,) = FakeChat.requests
    assert req["path"] == "/v1/chat/completions" and req["auth"] == f"Bearer {KEY}"
    assert req["body"]["model"] == "tiny-model" and req["body"]["temperature"] == 0
    assert "user/1:preferences.editor" in req["body"]["messages"][1]["content"]


def test_tiered_mode_with_chat_chooser(chat, store):
    chooser = OpenAIChooser("tiny-model", base_url=chat, api_key=KEY)
    env = store.recall("what preferences theme?", mode="tiered", chooser=chooser)
    # level 2 offers preferences.editor (a whole key, read) and preferences.ui (drilled)
    assert [h.key for h in env.hits] == ["preferences.editor", "preferences.ui.theme"]
    assert "projects" not in FakeChat.requests[1]["body"]["messages"][1]["content"]
    assert env.timings["steps"] == len(FakeChat.requests) >= 2


@pytest.mark.parametrize(
    ("status", "reply", "message"),
    [
        (401, None, "HTTP 401"),
        (200, "I would rather not say", "did not reply with JSON"),
        (200, '{"choices": [1, 2]}', "no list of option strings"),
    ],
)
def test_chooser_errors_are_clear_and_never_leak_the_key(chat, store, status, reply, message):
    FakeChat.status, FakeChat.reply = status, reply
    chooser = OpenAIChooser("tiny-model", base_url=chat, api_key=KEY)
    with pytest.raises(ChooserError, match=message) as e:
        store.recall("which editor?", mode="single", chooser=chooser)
    assert KEY not in str(e.value)


def test_unreachable_endpoint(store):
    chooser = OpenAIChooser("m", base_url="http://127.0.0.1:9/v1", api_key=KEY, timeout=2)
    with pytest.raises(ChooserError, match="cannot reach"):
        store.recall("x", mode="single", chooser=chooser)
