"""The optional extractor: a caller's model files entities, facts and claims that cite the turns they came from."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import memlane
from memlane.domain.conversation import Turn
from memlane.domain.extract import ClaimDraft, EntityDraft, Extraction, Extractor, FactDraft, OpenAIExtractor, run
from memlane.values.errors import ExtractorError

CHAT = [
    {"speaker": "Caroline", "text": "I went to the LGBTQ support group yesterday.", "at": "2023-05-08T13:56:00Z"},
    {"speaker": "Melanie", "text": "Great! I am painting a lake sunrise.", "at": "2023-05-08T13:57:00Z"},
    {"speaker": "Caroline", "text": "The support group really helped me.", "at": "2023-05-08T13:58:00Z"},
]


class Rules:
    """A deterministic extractor: who attends what, from the words of each turn."""

    def __init__(self) -> None:
        self.seen: list[list[Turn]] = []

    def extract(self, turns: Sequence[Turn]) -> Extraction:
        self.seen.append(list(turns))
        group = [t.turn for t in turns if "support group" in t.text]
        facts = [FactDraft("Caroline", "attends", "LGBTQ support group", tuple(group))] if group else []
        claims = [
            ClaimDraft(f"{t.speaker} said: {t.text}", (t.turn,), about=(t.speaker,)) for t in turns if "I" in t.text
        ]
        return Extraction(
            (EntityDraft("Caroline", "person"), EntityDraft("Melanie", "person"), EntityDraft("LGBTQ support group")),
            tuple(facts),
            tuple(claims),
        )


def test_rules_is_an_extractor() -> None:
    assert isinstance(Rules(), Extractor)


def test_without_an_extractor_no_facts_are_filed(mem: Any) -> None:
    mem.add_conversation("chat/1", CHAT, session="s1")
    assert mem.resolve_entity("Caroline", namespace_prefix="chat/1").status == "none"


def test_extracted_facts_and_claims_cite_the_turns(mem: Any) -> None:
    rules = Rules()
    items = mem.add_conversation("chat/1", CHAT, session="s1", extractor=rules)
    assert [t.turn for t in rules.seen[0]] == [1, 2, 3]
    assert rules.seen[0][0].speaker == "Caroline" and rules.seen[0][0].at is not None
    # one entity per name, reused on the next call
    caroline = mem.resolve_entity("Caroline", namespace_prefix="chat/1")
    assert caroline.status == "resolved" and caroline["entities"][0].entity.kind == "person"
    facts = mem.facts_context("attends", namespace_prefix="chat/1")["facts"]
    assert len(facts) == 1
    fact = facts[0]
    assert fact.evidence_count == 2  # turns 1 and 3 both say it
    assert sorted(fact.sources) == ["chat/1#s1.t00001", "chat/1#s1.t00003"]
    namespace, key = fact.sources[0].rsplit("#", 1)
    assert mem.get(namespace, key).key == items[0].key
    # claims keep the turn's speaker and time and cite the turn's passage
    said = mem.claims_and_sources_context("support group", namespace_prefix="chat/1")
    claims = [c for group in said["claims"] for c in group.claims]
    claim = next(c for c in claims if "yesterday" in c.text)
    assert claim.speaker == "Caroline" and claim.asserted_at.isoformat().startswith("2023-05-08T13:56")
    chunk = mem.lookup([claim.chunk_id])[0]
    assert chunk.text == "Caroline (2023-05-08): " + CHAT[0]["text"]
    assert [c.text for c in mem.neighbours(claim.chunk_id, 0, 1)][1].startswith("Melanie")
    # a later append extracts only the new turns and reuses the entities
    mem.add_conversation("chat/1", [{"speaker": "Caroline", "text": "Back at the support group."}], session="s1",
                         extractor=rules)  # fmt: skip
    assert [t.turn for t in rules.seen[1]] == [4]
    assert mem.resolve_entity("Caroline", namespace_prefix="chat/1").status == "resolved"
    assert mem.facts_context("attends", namespace_prefix="chat/1")["facts"][0].evidence_count == 3


class Broken:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def extract(self, turns: Sequence[Turn]) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    "answer",
    [
        RuntimeError("model offline"),
        Extraction(facts=(FactDraft("Caroline", "attends", "x", (99,)),)),
        {"entities": [{"kind": "person"}]},
        "not an extraction",
    ],
    ids=["raises", "cites-an-unknown-turn", "malformed-dict", "wrong-type"],
)
def test_a_failing_extractor_raises_keeps_the_turns_and_files_nothing(mem: Any, answer: Any) -> None:
    with pytest.raises(ExtractorError):
        mem.add_conversation("chat/1", CHAT, session="s1", extractor=Broken(answer))
    assert len(mem.list("chat/1").items) == 3
    assert mem.resolve_entity("Caroline", namespace_prefix="chat/1").status == "none"


def test_an_extraction_reads_the_documented_json_shape() -> None:
    parsed = Extraction.from_dict(
        {
            "entities": [{"name": "Kim", "kind": "person", "aliases": ["K"]}],
            "facts": [{"subject": "Kim", "predicate": "lives_in", "object": "Oslo", "turns": [2], "valid_from": None}],
            "claims": [{"text": "Kim moved to Oslo.", "speaker": "Kim", "turns": 2, "about": ["Kim"]}],
        }
    )
    assert parsed.entities == (EntityDraft("Kim", "person", ("K",)),)
    assert parsed.facts == (FactDraft("Kim", "lives_in", "Oslo", (2,)),)
    assert parsed.claims == (ClaimDraft("Kim moved to Oslo.", (2,), ("Kim",), "Kim"),)
    for bad in ([], {"facts": [{"subject": "Kim"}]}, {"claims": "many"}, {"facts": [{"subject": "", "predicate": "p",
                                                                                        "object": 1}]}):  # fmt: skip
        with pytest.raises(ExtractorError):
            Extraction.from_dict(bad)


# -- the OpenAI-compatible extractor, against a real HTTP server on loopback ------------------------

KEY = "sk-test-secret-456"


class FakeChat(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions with an extraction of the numbered turns it was sent."""

    requests: list[dict[str, Any]] = []
    reply: str | None = None
    status = 200

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeChat.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if FakeChat.status != 200:
            self.send_response(FakeChat.status)
            self.end_headers()
            self.wfile.write(b'{"error": "nope"}')
            return
        lines = body["messages"][1]["content"].splitlines()
        numbers = [int(line[1 : line.index("]")]) for line in lines if "support group" in line]
        extraction = {
            "entities": [{"name": "Caroline", "kind": "person"}],
            "facts": [{"subject": "Caroline", "predicate": "attends", "object": "support group", "turns": numbers}],
            "claims": [{"text": "Caroline goes to a support group.", "turns": numbers[:1], "about": ["Caroline"]}],
        }
        content = FakeChat.reply if FakeChat.reply is not None else f"```json\n{json.dumps(extraction)}\n```"
        out = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def chat() -> Iterator[str]:
    FakeChat.requests, FakeChat.reply, FakeChat.status = [], None, 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeChat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_extractor_files_what_the_model_answers(chat: str, tmp_path: Path) -> None:
    extractor = OpenAIExtractor("tiny-model", base_url=chat, api_key=KEY)
    assert KEY not in repr(extractor)
    with memlane.open(tmp_path / "m.db", embedder=None) as mem:
        mem.add_conversation("chat/1", CHAT, session="s1", extractor=extractor)
        fact = mem.facts_context("attends", namespace_prefix="chat/1")["facts"][0]
        assert fact.text.startswith("Caroline attends") and sorted(fact.sources) == [
            "chat/1#s1.t00001",
            "chat/1#s1.t00003",
        ]
        claim = mem.claims_and_sources_context("support group", namespace_prefix="chat/1")["claims"][0].claims[0]
        assert claim.speaker == "Caroline"
    (sent,) = FakeChat.requests
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == f"Bearer {KEY}"
    body = sent["body"]
    assert body["model"] == "tiny-model" and body["response_format"] == {"type": "json_object"}
    assert body["messages"][1]["content"].splitlines()[0] == "[1] Caroline (2023-05-08): " + CHAT[0]["text"]


@pytest.mark.parametrize(
    ("status", "reply", "said"),
    [(500, None, "HTTP 500"), (200, "I cannot help with that.", "JSON object"), (200, '{"facts": 3}', "malformed")],
)
def test_openai_extractor_failures_are_extractor_errors(
    chat: str, tmp_path: Path, status: int, reply: str | None, said: str
) -> None:
    FakeChat.status, FakeChat.reply = status, reply
    with memlane.open(tmp_path / "m.db", embedder=None) as mem:
        items = mem.add_conversation("chat/1", CHAT, session="s1")
        with pytest.raises(ExtractorError, match=said):
            run(mem, ("chat", "1"), items, OpenAIExtractor("m", base_url=chat, api_key=KEY))
        assert mem.resolve_entity("Caroline", namespace_prefix="chat/1").status == "none"


def test_openai_extractor_cannot_reach_its_endpoint() -> None:
    turn = Turn("s", 1, "a", "b")
    with pytest.raises(ExtractorError, match="cannot reach"):
        OpenAIExtractor("m", base_url="http://127.0.0.1:9/v1", api_key=KEY, timeout=2).extract([turn])
