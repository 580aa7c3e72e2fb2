"""A loopback TCP relay to a PostgreSQL server that a test can cut and restore: the database "goes away".

``cut()`` closes every relayed connection (the client sees the server hang up, as after a restart) and stops
listening (new connections are refused at once, as while a server is down); ``restore()`` listens again on the
same port. The server behind it is untouched, so other tests that share it go on.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit


def _target(url: str) -> tuple[int, Any]:
    """Where the server at ``url`` listens: a Unix socket (pgserver's) or a TCP address."""
    parts = urlsplit(url)
    host = parse_qs(parts.query).get("host", [parts.hostname or ""])[0]
    port = parts.port or 5432
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (host or "127.0.0.1", port)


class Cuttable:
    """Relays 127.0.0.1:``port`` to the PostgreSQL server of ``admin_url``; :meth:`url` names a database there."""

    def __init__(self, admin_url: str) -> None:
        self._admin_url = admin_url
        self._family, self._address = _target(admin_url)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = 0
        self.restore()

    def url(self, database_url: str) -> str:
        """``database_url`` (a database on the same server) reached through this relay."""
        parts = urlsplit(database_url)
        query = {k: v[0] for k, v in parse_qs(parts.query).items() if k != "host"}
        netloc = f"{parts.username or 'postgres'}@127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))

    def restore(self) -> None:
        """Listen (again, on the same port once it had one)."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Stop listening and hang up every relayed connection."""
        with self._lock:
            listener, self._listener = self._listener, None
            relayed, self._open = self._open, set()
        if listener is not None:
            with contextlib.suppress(OSError):  # wakes the thread in accept(), which holds the port while it waits
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in relayed:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed by cut()
                return
            server = socket.socket(self._family, socket.SOCK_STREAM)
            try:
                server.connect(self._address)
            except OSError:
                client.close()
                server.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    server.close()
                    return
                self._open.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
