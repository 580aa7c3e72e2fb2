"""Conversations as items: addressable turns, found with their neighbours' context, on every backend."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlane
from memlane import ValidationError
from memlane.domain.conversation import DEFAULT_WINDOW, MAX_MESSAGES, turn_key

CHAT = [
    {"speaker": "Caroline", "text": "I went to the LGBTQ support group yesterday.", "id": "D1:1"},
    {"speaker": "Melanie", "text": "How did it feel to be there?", "id": "D1:2"},
    {"speaker": "Caroline", "text": "Powerful. Everyone shared their stories.", "id": "D1:3"},
    {"speaker": "Melanie", "text": "My kids painted the fence green today.", "id": "D1:4"},
    {"speaker": "Caroline", "text": "Pottery class starts next week for me.", "id": "D1:5"},
    {"speaker": "Melanie", "text": "Camping trip planned for August.", "id": "D1:6"},
]


def turns(mem: Any, namespace: str = "chat/1") -> list[Any]:
    return list(mem.list(namespace, limit=1000).items)


def test_each_turn_is_an_item_at_a_key_in_turn_order_carrying_speaker_time_and_message_id(mem: Any) -> None:
    items = mem.add_conversation("chat/1", CHAT, session="s1", at="2023-05-08T13:56:00Z")
    assert [i.key for i in items] == [f"s1.t{n:05d}" for n in range(1, 7)]
    assert [i.key for i in turns(mem)] == [i.key for i in items]
    first = mem.get("chat/1", "s1.t00001")
    assert first.value == {
        "session": "s1",
        "turn": 1,
        "speaker": "Caroline",
        "text": CHAT[0]["text"],
        "at": "2023-05-08T13:56:00+00:00",
        "message_id": "D1:1",
    }
    assert first.metadata == {"message_id": "D1:1"}
    # indexed: speaker and date, the turn, then the window (DEFAULT_WINDOW each side)
    assert first.text.splitlines()[0] == "Caroline on 8 May 2023: " + CHAT[0]["text"]
    assert all(m["text"] in first.text for m in CHAT[1 : 1 + DEFAULT_WINDOW])
    assert CHAT[1 + DEFAULT_WINDOW]["text"] not in first.text


def test_a_turn_is_found_lexically_by_the_words_of_its_neighbours_and_answers_when(mem: Any) -> None:
    mem.add_conversation("chat/1", CHAT, session="s1", at="2023-05-08T13:56:00Z")
    # only turn 1 says "support group"; turns 2 and 3 are found through it, ranked after the turn that said it
    env = mem.recall("LGBTQ support group", namespace_prefix="chat/1", mode="lexical")
    keys = [h.item.key for h in env.hits]
    assert keys[0] == "s1.t00001"
    assert set(keys) == {"s1.t00001", "s1.t00002", "s1.t00003"}
    hit = next(h for h in env.hits if h.item.key == "s1.t00001")
    assert hit.item.value["speaker"] == "Caroline"
    assert hit.item.value["at"].startswith("2023-05-08")


def test_a_turn_is_found_by_vector_through_its_window(mem: Any) -> None:
    mem.add_conversation("chat/1", CHAT, session="s1", window=1)
    env = mem.search("painted fence green kids", namespace_prefix="chat/1", channels=["vector"], limit=3)
    # turn 4 said it; turns 3 and 5 hold it in their window; the others do not
    assert {h.item.key for h in env.hits} == {"s1.t00003", "s1.t00004", "s1.t00005"}
    assert env.hits[0].item.key == "s1.t00004"


def test_appending_continues_the_numbering_and_reindexes_the_turns_whose_window_changed(mem: Any) -> None:
    mem.add_conversation("chat/1", CHAT[:3], session="s1", window=2)
    added = mem.add_conversation("chat/1", CHAT[3:], session="s1", window=2)
    assert [i.key for i in added] == ["s1.t00004", "s1.t00005", "s1.t00006"]
    assert [i.value["turn"] for i in added] == [4, 5, 6]
    by_key = {i.key: i for i in turns(mem)}
    assert by_key["s1.t00001"].version == 1  # its window (turns 2, 3) did not change
    assert by_key["s1.t00002"].version == 2 and CHAT[3]["text"] in by_key["s1.t00002"].text
    assert by_key["s1.t00003"].version == 2 and CHAT[4]["text"] in by_key["s1.t00003"].text
    assert CHAT[5]["text"] not in by_key["s1.t00003"].text


def test_without_a_session_each_call_starts_a_new_one(mem: Any, clock: Any) -> None:
    a = mem.add_conversation("chat/1", CHAT[:2])
    b = mem.add_conversation("chat/1", CHAT[2:4])
    sa, sb = a[0].value["session"], b[0].value["session"]
    assert sa != sb
    assert [i.key for i in a] == [turn_key(sa, 1), turn_key(sa, 2)]
    assert [i.key for i in b] == [turn_key(sb, 1), turn_key(sb, 2)]
    # messages without a time take now
    assert a[0].value["at"] == clock.now.isoformat()


def test_role_stands_in_for_speaker_and_a_messages_own_time_wins(mem: Any) -> None:
    items = mem.add_conversation(
        "chat/1",
        [{"role": "user", "text": "hi"}, {"role": "assistant", "speaker": "Ada", "text": "hello", "at": "2024-01-02"}],
        session="s",
        at=datetime(2024, 1, 1, tzinfo=UTC),
    )
    assert items[0].value["speaker"] == "user" and items[0].value["role"] == "user"
    assert items[1].value["speaker"] == "Ada" and items[1].value["role"] == "assistant"
    assert items[0].value["at"] == "2024-01-01T00:00:00+00:00"
    assert items[1].value["at"] == "2024-01-02T00:00:00+00:00"


BAD: list[tuple[Any, str]] = [
    ([{"speaker": "a"}], "messages[0].text"),
    ([{"speaker": "a", "text": "   "}], "messages[0].text"),
    ([{"speaker": "a", "text": "x"}, {"text": "y"}], "messages[1]"),
    ([{"speaker": "a", "text": "x", "colour": "red"}], "messages[0]"),
    ([{"speaker": "a", "text": "x", "at": "last tuesday"}], "messages[0].at"),
    ([{"speaker": "a", "text": "x", "id": "m"}, {"speaker": "b", "text": "y", "id": "m"}], "messages[1].id"),
    ([{"speaker": "a", "text": "x", "id": True}], "messages[0].id"),
    ([{"speaker": "", "text": "x"}], "messages[0].speaker"),
    (["just text"], "messages[0]"),
    ([], "messages"),
    ("a string", "messages"),
    ([{"speaker": "a", "text": "x"}] * (MAX_MESSAGES + 1), "messages"),
]


@pytest.mark.parametrize(("messages", "field"), BAD, ids=[f for _, f in BAD])
def test_a_bad_message_is_refused_by_name_and_nothing_is_written(mem: Any, messages: Any, field: str) -> None:
    mem.add_conversation("chat/1", CHAT[:2], session="s1")
    with pytest.raises(ValidationError) as e:
        mem.add_conversation("chat/1", messages, session="s1")
    assert e.value.field == field
    assert [i.key for i in turns(mem)] == ["s1.t00001", "s1.t00002"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"session": "a.b"}, "session"), ({"session": "has space"}, "session"), ({"session": 3}, "session"),
     ({"window": -1}, "window"), ({"window": 11}, "window"), ({"at": "soon"}, "at")],
)  # fmt: skip
def test_bad_arguments_are_refused_by_name(mem: Any, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as e:
        mem.add_conversation("chat/1", CHAT[:1], **kwargs)
    assert e.value.field == field
    assert turns(mem) == []


def _records(mem: Any, namespace: str) -> list[tuple[str, Any, str, dict[str, Any]]]:
    return [(i.key, i.value, i.text, i.metadata) for i in mem.list(namespace, limit=1000).items]


_message = st.fixed_dictionaries(
    {
        "speaker": st.sampled_from(["Ann", "Bo", "Cy"]),
        "text": st.text("abcdef ", min_size=1, max_size=12).filter(str.strip),
    },
    optional={"at": st.sampled_from(["2024-01-01T10:00:00+00:00", "2024-02-03T00:00:00+00:00"])},
)
_counter = itertools.count()


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with memlane.open(
        tmp_path_factory.mktemp("conv") / "m.db", embedder=None, clock=lambda: datetime(2025, 1, 1, tzinfo=UTC)
    ) as m:
        yield m


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    messages=st.lists(_message, min_size=1, max_size=12),
    cuts=st.lists(st.integers(1, 11), max_size=4),
    window=st.integers(0, 3),
)
def test_appending_in_any_split_gives_the_same_turns_as_adding_all_at_once(
    plain: Any, messages: list[dict[str, Any]], cuts: list[int], window: int
) -> None:
    n = next(_counter)
    whole, split = f"whole/{n}", f"split/{n}"
    plain.add_conversation(whole, messages, session="s", window=window)
    bounds = sorted({c for c in cuts if c < len(messages)})
    for start, end in itertools.pairwise([0, *bounds, len(messages)]):
        plain.add_conversation(split, messages[start:end], session="s", window=window)
    assert _records(plain, whole) == _records(plain, split)


def test_the_turns_of_another_session_or_a_deeper_key_are_not_neighbours(tmp_path: Path) -> None:
    with memlane.open(tmp_path / "m.db", embedder=None) as m:
        m.put("chat/1", "s1.notes", "not a turn")
        m.add_conversation("chat/1", CHAT[:2], session="s1")
        m.add_conversation("chat/1", CHAT[2:4], session="s10")
        added = m.add_conversation("chat/1", CHAT[4:5], session="s1")
        assert added[0].key == "s1.t00003"
        assert CHAT[1]["text"] in added[0].text and CHAT[2]["text"] not in added[0].text


def test_a_taken_turn_address_is_never_overwritten(mem: Any) -> None:
    """As when another writer appended the same turn meanwhile: a conflict, and nothing written."""
    mem.add_conversation("chat/1", CHAT[:2], session="s1")
    mem.put("chat/1", "s1.t00003", "not a turn, but the address is taken")
    with pytest.raises(memlane.ConflictError, match="nothing was written, retry"):
        mem.add_conversation("chat/1", CHAT[2:4], session="s1")
    assert mem.get("chat/1", "s1.t00003").value == "not a turn, but the address is taken"
    assert mem.get("chat/1", "s1.t00004") is None
    assert mem.get("chat/1", "s1.t00002").version == 1  # no window was re-indexed either


# -- limits at the limit, refusals named, and what an append keeps (mutation-testing gaps) --------------------


def _checked(messages: Any) -> Any:
    from memlane.domain import conversation

    return conversation.messages(messages, None)


def test_the_message_count_and_turn_length_are_accepted_at_their_limits_and_refused_past(monkeypatch) -> None:
    from memlane.domain import conversation

    monkeypatch.setattr(conversation, "MAX_MESSAGES", 3)
    assert len(_checked([{"speaker": "a", "text": "x"}] * 3)) == 3
    with pytest.raises(ValidationError, match="at most 3 per call"):
        _checked([{"speaker": "a", "text": "x"}] * 4)
    at_limit = "y" * conversation.MAX_TURN_CHARS
    assert _checked([{"speaker": "a", "text": at_limit}])[0].text == at_limit
    with pytest.raises(ValidationError, match="at most 100,000") as e:
        _checked([{"speaker": "a", "text": at_limit + "y"}])
    assert e.value.field == "messages[0].text"


def test_the_widest_window_is_accepted(plain: Any) -> None:
    items = plain.add_conversation("chat/widest", CHAT, window=10)
    assert all(other["text"] in items[0].text for other in CHAT)  # every other turn is within 10


@pytest.mark.parametrize(
    ("message", "field", "says"),
    [
        ({"speaker": "a", "text": "x", "id": 1.5}, "messages[0].id", "non-empty string or an integer"),
        ({"speaker": "a", "text": "x", "id": ""}, "messages[0].id", "non-empty string or an integer"),
        ({"speaker": "a", "text": "x", "id": "m\x01"}, "messages[0].id", "control character"),
        ({"role": "us\x02er", "text": "x"}, "messages[0].role", "control character"),
        ({"text": "x"}, "messages[0]", "neither 'speaker' nor 'role'"),
        ({"speaker": "a", "text": "half \ud800 a pair"}, "messages[0].text", "surrogate"),
    ],
)
def test_each_refusal_names_the_field_and_the_fix(message: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says) as e:
        _checked([message])
    assert e.value.field == field


@pytest.mark.parametrize("raw", ["one message", {"speaker": "a", "text": "x"}, 42])
def test_messages_that_are_not_a_list_are_refused_by_their_type(raw: Any) -> None:
    with pytest.raises(ValidationError, match=f"not {type(raw).__name__}$") as e:
        _checked(raw)
    assert e.value.field == "messages"


def test_appending_keeps_the_role_and_message_id_of_the_turns_it_reindexes(plain: Any) -> None:
    first = [{"role": "user", "speaker": "Ann", "text": "I moved to Porto.", "id": "m-1"}]
    plain.add_conversation("chat/keep", first, session="s", window=1)
    plain.add_conversation("chat/keep", [{"role": "assistant", "text": "Welcome to Porto!", "id": 7}], session="s")
    earlier, later = plain.list("chat/keep").items
    assert "Welcome to Porto" in earlier.text  # re-indexed with its new neighbour
    assert earlier.value["role"] == "user" and earlier.value["message_id"] == "m-1"
    assert earlier.metadata == {"message_id": "m-1"}
    assert later.value["role"] == "assistant" and later.metadata == {"message_id": 7}


def test_a_speaker_name_is_accepted_at_its_length_limit_and_refused_past_it() -> None:
    from memlane.domain import conversation

    at_limit = "s" * conversation.MAX_NAME_CHARS
    assert _checked([{"speaker": at_limit, "text": "x"}])[0].speaker == at_limit
    with pytest.raises(ValidationError, match="at most 200") as e:
        _checked([{"speaker": at_limit + "s", "text": "x"}])
    assert e.value.field == "messages[0].speaker"


def test_a_session_cannot_grow_past_the_turns_its_keys_can_number(plain: Any, monkeypatch) -> None:
    from memlane.domain import conversation

    monkeypatch.setattr(conversation, "MAX_TURNS", 3)
    plain.add_conversation("chat/full", [{"speaker": "a", "text": f"t{n}"} for n in range(3)], session="s")
    with pytest.raises(ValidationError, match="would reach 4 turns; at most 3") as e:
        plain.add_conversation("chat/full", [{"speaker": "a", "text": "one more"}], session="s")
    assert e.value.field == "messages"


def test_appending_to_a_session_longer_than_one_page_continues_its_numbering(plain: Any) -> None:
    """The session's end is found past the first page of 1,000 turns."""
    plain.add_conversation("chat/long", [{"speaker": "a", "text": f"turn {n}"} for n in range(1005)], session="s")
    (item,) = plain.add_conversation("chat/long", [{"speaker": "b", "text": "the last word"}], session="s")
    assert item.key == "s.t01006" and "turn 1004" in item.text
