"""A LangGraph graph with memlane as its store, run without any language model, on every backend.

Memory written in one thread of the graph is read in another: the point of a store (a checkpointer keeps a
thread's state; the store keeps what outlives it). LangMem's memory tools run over the same store when
LangMem is installed.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph")

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.runtime import Runtime  # noqa: E402

from memlane.langgraph import MemlaneStore  # noqa: E402


class State(TypedDict):
    user: str
    message: str
    replies: Annotated[list[str], operator.add]


def remember(state: State, runtime: Runtime[Any]) -> dict[str, Any]:
    if state["message"].startswith("I like "):
        thing = state["message"].removeprefix("I like ")
        assert runtime.store is not None
        runtime.store.put(("users", state["user"], "likes"), thing, {"thing": thing})
    return {}


def answer(state: State, runtime: Runtime[Any]) -> dict[str, Any]:
    assert runtime.store is not None
    likes = sorted(i.value["thing"] for i in runtime.store.search(("users", state["user"], "likes")))
    return {"replies": [f"you like: {', '.join(likes) or 'nothing yet'}"]}


def build() -> Any:
    builder = StateGraph(State)
    builder.add_node(remember)
    builder.add_node(answer)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "answer")
    builder.add_edge("answer", END)
    return builder


def test_memory_written_in_one_thread_is_read_in_another(mem: Any) -> None:
    graph = build().compile(checkpointer=InMemorySaver(), store=MemlaneStore(mem))
    say = lambda user, text, thread: graph.invoke(  # noqa: E731
        {"user": user, "message": text}, {"configurable": {"thread_id": thread}}
    )
    assert say("ada", "what do I like?", "t1")["replies"] == ["you like: nothing yet"]
    assert say("ada", "I like tea", "t1")["replies"] == ["you like: nothing yet", "you like: tea"]
    assert say("ada", "I like chess", "t2")["replies"] == ["you like: chess, tea"]  # a new thread remembers
    assert say("bob", "what do I like?", "t3")["replies"] == ["you like: nothing yet"]  # and keeps users apart
    # the graph's memories are memlane items: history and the rest come with them
    assert {i.key for i in mem.list(("users", "ada", "likes")).items} == {"tea", "chess"}


def test_the_graph_runs_async_too(mem: Any) -> None:
    import asyncio

    graph = build().compile(store=MemlaneStore(mem))
    asyncio.run(graph.ainvoke({"user": "cy", "message": "I like jazz"}))
    result = asyncio.run(graph.ainvoke({"user": "cy", "message": "and?"}))
    assert result["replies"] == ["you like: jazz"]


def test_langmem_tools_manage_and_search_memories(mem: Any) -> None:
    langmem = pytest.importorskip("langmem")
    store = MemlaneStore(mem, index={"dims": 64, "fields": ["content"]})
    manage = langmem.create_manage_memory_tool(namespace=("memories", "{user_id}"), store=store)
    search = langmem.create_search_memory_tool(namespace=("memories", "{user_id}"), store=store)
    config = {"configurable": {"user_id": "ada"}}
    created = manage.invoke({"content": "Ada prefers green tea", "action": "create"}, config)
    manage.invoke({"content": "Ada lives in London", "action": "create"}, config)
    tea_id = created.removeprefix("created memory ")
    found = store.search(("memories", "ada"), query="green tea")
    assert found[0].key == tea_id and found[0].score is not None
    manage.invoke({"content": "Ada prefers black tea", "action": "update", "id": tea_id}, config)
    assert store.get(("memories", "ada"), tea_id).value == {"content": "Ada prefers black tea"}  # type: ignore[union-attr]
    assert store.search(("memories", "ada"), query="black tea")[0].key == tea_id
    manage.invoke({"action": "delete", "id": tea_id}, config)
    assert [i.value["content"] for i in store.search(("memories", "ada"))] == ["Ada lives in London"]
    assert "Ada lives in London" in search.invoke({"query": "where does she live"}, config)
