"""A real memlane service on loopback, in a background thread, for tests."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn


class _Slot:
    """An ASGI app that forwards to whichever app the current test put in it."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        app = self.app
        if app is None:  # a request left over from an earlier test, after its stop()
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"this test server is stopped"})
            return
        await app(scope, receive, send)


class _Uvicorn:
    """One uvicorn server on 127.0.0.1 and a free port, running in a daemon thread."""

    def __init__(self) -> None:
        self.slot = _Slot()
        config = uvicorn.Config(self.slot, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


# Starting and stopping uvicorn costs about 0.15 s, and about a thousand tests each run a server
# (every `client` backend test): stopped servers go back to this pool and serve the next test's app.
_IDLE: list[_Uvicorn] = []
_LOCK = threading.Lock()


class LiveServer:
    """Runs an ASGI app with uvicorn on loopback until ``stop()``; ``url`` is where it answers.

    With ``fresh=True`` the server is started for this app alone and really stopped by
    ``stop()``; otherwise an idle server from an earlier test may serve it (lifespan is off
    either way, so the app sees the same thing).
    """

    def __init__(self, app: Any, *, fresh: bool = False) -> None:
        with _LOCK:
            pooled = None if fresh or not _IDLE else _IDLE.pop()
        self._pooled = not fresh
        self._server = pooled or _Uvicorn()
        self._server.slot.app = app
        self._stopped = False
        self.url = self._server.url

    def stop(self) -> None:
        if self._stopped:  # the server may already serve another test
            return
        self._stopped = True
        self._server.slot.app = None
        if not self._pooled:
            self._server.stop()
            return
        with _LOCK:
            _IDLE.append(self._server)
