"""The lexical channel (BM25): safe with any user text, the envelope, confirm drops."""

from __future__ import annotations

import pytest


@pytest.fixture
def corpus(mem):
    mem.put("kb", "db", "We chose PostgreSQL for the billing service")
    mem.put("kb", "cache", "Redis caches session tokens for the web tier")
    mem.put("kb", "lang", "The billing service is written in Python")
    mem.put("other", "db", "PostgreSQL backups run nightly")
    return mem


def test_search_ranks_and_describes_itself(corpus):
    env = corpus.search("billing postgresql", limit=2, channels=["lexical"])
    assert env.operation == "search"
    assert [h.key for h in env.hits][0] == "db"
    assert len(env.hits) == 2 and env.truncated is True
    assert env.counts == {"lexical": 3}  # cache mentions neither word
    assert env.params["limit"] == 2 and env.params["channels"] == ["lexical"]
    hit = env.hits[0]
    assert hit.ranks == {"lexical": 1} and hit.channel_scores["lexical"] > 0
    assert hit.score == pytest.approx(1 / 11)  # rrf_k defaults to 10
    assert set(env.timings) >= {"lexical_ms", "fuse_ms", "confirm_ms", "total_ms"}
    assert env.to_dict()["hits"][0]["key"] == "db"


def test_search_scopes_to_namespace(corpus):
    hits = corpus.search("postgresql", namespace_prefix="kb", channels=["lexical"]).hits
    assert {h.namespace for h in hits} == {("kb",)}


@pytest.mark.parametrize(
    "query",
    [
        '"unbalanced',
        "billing AND",
        "NEAR(billing service",
        "bill*",
        "(((",
        "OR OR OR",
        "-billing",
        "billing:service",
        "^start",
        "NOT",
        "col:value + {x}",
        "'; DROP TABLE items_fts; --",
        "",
        "   ",
        "🙂",
    ],
)
def test_any_user_text_is_safe(corpus, query):
    env = corpus.search(query, channels=["lexical"])
    assert isinstance(env.hits, list)
    assert corpus.get("kb", "db") is not None


def test_operators_are_searched_as_words(mem):
    mem.put("k", "a", "NEAR the AND gate")
    mem.put("k", "b", "something else")
    assert [h.key for h in mem.search("near", channels=["lexical"]).hits] == ["a"]
    assert [h.key for h in mem.search('"AND"', channels=["lexical"]).hits] == ["a"]


def test_porter_stemming_matches_word_forms(mem):
    mem.put("k", "a", "she was running marathons")
    assert [h.key for h in mem.search("run marathon", channels=["lexical"]).hits] == ["a"]


def test_deleted_and_replaced_items_never_surface(mem):
    mem.put("k", "a", "apple pie")
    mem.put("k", "b", "apple tart")
    mem.delete("k", "a")
    mem.put("k", "b", "pear tart")
    assert mem.search("apple", channels=["lexical"]).hits == []
    assert [h.value for h in mem.search("pear", channels=["lexical"]).hits] == ["pear tart"]


def test_no_words_gives_an_empty_envelope_with_a_note(mem):
    mem.put("k", "a", "text")
    env = mem.search("!!!", channels=["lexical"])
    assert env.hits == [] and env.notes == ["the query has no searchable words"]
