"""The web inspector served at ``/``: one static page over the ``/v1`` API.

The page (``static/index.html``, ``app.js``, ``style.css``) is plain HTML, CSS
and JavaScript with no build step and nothing fetched from elsewhere. It holds
no server-side state: the browser signs in with an agent token, keeps it in
``sessionStorage`` and sends it as ``Authorization: Bearer`` on each ``/v1``
call, so the inspector sees exactly what that agent may see.

Every response here carries a strict Content-Security-Policy (scripts, styles
and connections only from this origin, no inline script, no framing), so even
a stored value that looks like HTML can never run; the script also renders all
stored text with ``textContent``, never as markup.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from ..values.wire import error_body

ASSET_PREFIX = "/inspector"

# name in static/ -> media type; nothing else is ever served from the folder
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}

CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)

HEADERS = {
    "Content-Security-Policy": CSP,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


def _read(name: str) -> bytes | None:
    """An asset's bytes from the installed package, or ``None`` if it is missing."""
    try:
        return resources.files("memlane.server").joinpath("static", name).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _missing(name: str) -> JSONResponse:
    return JSONResponse(
        error_body("not_found", f"the inspector's {name} is not installed (package data server/static/ is missing)"),
        status_code=404,
    )


def mount_inspector(app: FastAPI) -> None:
    """Serve the inspector's page at ``/`` and its assets under ``/inspector/`` on ``app``."""

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    def inspector_page() -> Response:
        body = _read("index.html")
        if body is None:
            return _missing("index.html")
        return Response(body, media_type="text/html; charset=utf-8", headers=HEADERS)

    @app.api_route(ASSET_PREFIX + "/{name}", methods=["GET", "HEAD"], include_in_schema=False)
    def inspector_asset(name: str) -> Response:
        media_type = ASSETS.get(name)
        if media_type is None:
            return JSONResponse(error_body("not_found", f"no inspector asset named {name!r}"), status_code=404)
        body = _read(name)
        if body is None:
            return _missing(name)
        return Response(body, media_type=media_type, headers=HEADERS)
