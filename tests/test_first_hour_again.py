"""The first hour, second pass (issue 39): each stumble found by trying memlane again as a new user is a test here.

- a wrong Client base URL (``/v1``, ``/api``, ``/docs`` appended) or a misspelt operation is an error naming the
  URL, never "no such item";
- ``memlane serve`` refuses a port outside 1-65535 and says which port ``--port 0`` found;
- a missing extra is one line naming it, before any bare import of what it brings.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import memlane
from memlane.core.access import Access
from memlane.server import create_app
from memlane.values.errors import ValidationError

MEMLANE = Path(sys.executable).with_name("memlane")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[memlane.Memory, str, str]]:
    from live import LiveServer

    with memlane.open(tmp_path / "svc.db", embedder=None) as mem:
        _, token = Access(mem).create_agent("root", admin=True)
        server = LiveServer(create_app(mem))
        try:
            yield mem, server.url, token
        finally:
            server.stop()


# -- a wrong base URL or a misspelt operation -------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["/v1", "/api", "/docs", "/v1/"])
def test_a_client_base_url_that_is_not_the_service_root_is_an_error_naming_it(service: Any, suffix: str) -> None:
    mem, url, token = service
    mem.put("notes", "k", "there")
    with memlane.Client(url, token) as right:
        assert right.get("notes", "k") is not None  # the item exists
    wrong = url + suffix
    with memlane.Client(wrong, token, retries=0) as client:
        for call in (
            lambda: client.get("notes", "k"),
            lambda: client.delete("notes", "k"),
            lambda: client.exists("notes", "k"),
            lambda: client.me(),
        ):
            with pytest.raises(ValidationError) as refused:
                call()
            said = str(refused.value)
            assert said.startswith("url: ") and wrong.rstrip("/") in said and "\n" not in said
            assert f"the service root, such as {url}," in said  # what to use instead
    assert mem.exists("notes", "k")  # nothing was deleted


def test_an_unknown_route_has_its_own_error_naming_the_path(service: Any) -> None:
    _, url, token = service
    headers = {"Authorization": f"Bearer {token}"}
    misspelt = httpx.post(f"{url}/v1/serach", json={"query": "x"}, headers=headers)
    assert misspelt.status_code == 404
    error = misspelt.json()["error"]
    assert error["type"] == "no_such_route" and error["path"] == "/v1/serach"
    assert "GET /v1/operations" in error["message"] and "service root" in error["message"]
    # a missing item keeps its own answer
    missing = httpx.post(f"{url}/v1/get", json={"namespace": "notes", "key": "nope"}, headers=headers)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"


def test_a_misspelt_operation_through_the_client_is_the_same_clear_error(service: Any) -> None:
    _, url, token = service
    with memlane.Client(url, token) as client:
        with pytest.raises(ValidationError, match=r"no_such_route|nothing is served at POST /v1/serach"):
            client._call("POST", "serach", {"query": "x"})


def test_a_404_that_is_not_memlanes_is_no_missing_item(service: Any) -> None:
    """Another web server at that URL (or a proxy) answers 404 in its own words: the URL is wrong, not the key."""
    from live import LiveServer

    async def plain_404(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": b"<h1>Not Found</h1>"})

    other = LiveServer(plain_404)
    try:
        with memlane.Client(other.url, "t", retries=0) as client:
            with pytest.raises(ValidationError, match="url: .*not a memlane service"):
                client.get("notes", "k")
    finally:
        other.stop()
