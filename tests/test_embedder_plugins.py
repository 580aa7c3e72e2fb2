"""Embedder plug-ins: one registration hook for built-ins and plug-ins, entry points found lazily by name."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import memlane
from memlane.domain.search import embedders
from memlane.domain.search.embedders import (
    ENTRY_POINT_GROUP,
    FakeEmbedder,
    OpenAIEmbedder,
    get_embedder,
    known_embedders,
    register_embedder,
    resolve_embedder,
)
from memlane.values.errors import EmbedderError

PLUGIN = """
LOADED = []


class Tiny:
    dimension = 3

    def __init__(self, flavour="plain"):
        self.name = "tiny" if flavour == "plain" else "tiny:" + flavour
        LOADED.append(flavour)

    def embed_batch(self, texts):
        return [[1.0, 0.0, 0.0] if "cat" in t else [0.0, 1.0, 0.0] for t in texts]


def make(flavour="plain"):
    return Tiny(flavour)


def make_keyed(key):
    return Tiny(key)


def not_an_embedder_factory():
    return Tiny()
"""


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedders, "_REGISTRY", dict(embedders._REGISTRY))


@pytest.fixture
def plugin_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An installed distribution 'memlane-tiny-plugin' declaring embedders, as pip would lay it out."""
    (tmp_path / "memlane_tiny_plugin.py").write_text(PLUGIN)
    info = tmp_path / "memlane_tiny_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: memlane-tiny-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            f"""\
            [{ENTRY_POINT_GROUP}]
            tiny = memlane_tiny_plugin:make
            keyed = memlane_tiny_plugin:make_keyed
            broken = memlane_tiny_plugin_gone:make
            minilm = memlane_tiny_plugin:make

            [some.other.group]
            elsewhere = memlane_tiny_plugin:make
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "memlane_tiny_plugin", raising=False)
    yield tmp_path
    sys.modules.pop("memlane_tiny_plugin", None)


def test_an_entry_point_is_found_by_name_and_loaded_only_then(plugin_dist: Path) -> None:
    names = known_embedders()
    assert {"tiny", "keyed", "broken"} <= set(names)
    assert "elsewhere" not in names  # another group
    assert "memlane_tiny_plugin" not in sys.modules  # listing loads nothing

    embedder = get_embedder("tiny")
    assert "memlane_tiny_plugin" in sys.modules
    assert (embedder.name, embedder.dimension) == ("tiny", 3)
    assert embedder.embed_batch(["a cat", "a dog"]) == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    # Once loaded it is registered like any other embedder, through the same hook.
    assert embedders._REGISTRY["tiny"] is sys.modules["memlane_tiny_plugin"].make
    assert get_embedder("tiny:spicy").name == "tiny:spicy"


def test_a_plugin_takes_the_text_after_the_colon(plugin_dist: Path) -> None:
    assert get_embedder("keyed:abc:def").name == "tiny:abc:def"
    assert "keyed:<key>" in known_embedders()  # usage shown once the factory is known
    with pytest.raises(EmbedderError, match="'keyed:<key>'"):
        get_embedder("keyed")


def test_a_plugin_that_fails_to_load_is_named(plugin_dist: Path) -> None:
    with pytest.raises(EmbedderError) as info:
        get_embedder("broken")
    message = str(info.value)
    assert "memlane_tiny_plugin_gone:make" in message and "memlane-tiny-plugin" in message
    assert "ModuleNotFoundError" in message


def test_built_ins_win_over_a_plugin_of_the_same_name(plugin_dist: Path) -> None:
    assert get_embedder("minilm").name == "minilm"
    assert "memlane_tiny_plugin" not in sys.modules


def test_a_plugin_opens_a_store(plugin_dist: Path, tmp_path: Path) -> None:
    with memlane.open(tmp_path / "m.db", embedder="tiny") as mem:
        mem.put(("u",), "pet", "my cat is called Tom")
        mem.put(("u",), "car", "a blue dog")
        wait = getattr(mem, "wait_indexed", None)  # with write-behind indexing, vectors come later
        if wait is not None:
            wait(timeout=30)
        hits = mem.search("cat", namespace_prefix=("u",), limit=1, channels=("vector",)).hits
        assert [h.item.key for h in hits] == ["pet"]


def test_built_ins_are_registered_through_the_public_hook() -> None:
    registered = set(embedders._REGISTRY)
    assert {"minilm", "minilm-numpy", "fake", "openai"} <= registered
    assert known_embedders() == sorted(known_embedders())
    assert {"minilm", "fake", "openai:<model>"} <= set(known_embedders())
    # No special case for "openai:" in the lookup: replacing the registration replaces what it returns.
    assert isinstance(get_embedder("openai:m"), OpenAIEmbedder)
    register_embedder("openai", lambda model: FakeEmbedder(8))
    assert isinstance(get_embedder("openai:m"), FakeEmbedder)
    assert isinstance(resolve_embedder("openai:m"), FakeEmbedder)


def test_registering_a_family_of_names() -> None:
    register_embedder("sized", lambda dims: FakeEmbedder(int(dims)))
    assert get_embedder("sized:5").dimension == 5
    assert "sized:<dims>" in known_embedders()
    with pytest.raises(EmbedderError, match="needs an argument"):
        get_embedder("sized")
    register_embedder("plain", FakeEmbedder)  # optional argument: both forms work
    assert get_embedder("plain").dimension == 64
    with pytest.raises(EmbedderError, match="unknown embedder"):
        get_embedder("unregistered:5")
