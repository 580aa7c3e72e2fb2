"""One call to an OpenAI-compatible chat endpoint, for the optional model-backed helpers (chooser, extractor)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from .errors import MemlaneError


def complete(
    base_url: str, api_key: str | None, body: dict[str, Any], timeout: float, error: type[MemlaneError]
) -> Any:
    """POST ``body`` to ``{base_url}/chat/completions`` and return the first choice's message content.

    Uses only the standard library, so the core needs no HTTP client. Every failure (an HTTP error, an
    unreachable endpoint, an answer of the wrong shape) is raised as ``error`` with a message saying what to check.
    """
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(
        f"{base_url}/chat/completions", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            payload = json.loads(resp.read())
        return payload["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as e:
        raise error(f"chat endpoint {base_url} answered HTTP {e.code}; check the model name and API key") from None
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        raise error(f"cannot reach chat endpoint {base_url}: {e}") from None
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise error(f"chat endpoint {base_url} sent an unexpected response ({e!r})") from None
