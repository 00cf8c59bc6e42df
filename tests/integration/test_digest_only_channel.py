"""Where the guard reads the thread's messages, its channel keeps result digests, no text.

`GuardConfig.store_previews=None` (the default): `ReplayGuardMiddleware` and `guard.wrap`
quote an earlier result from the thread's messages, so no checkpoint of the guard channel holds
any of a tool's output; the callback handler, which has no messages, keeps previews. What the
model is told is the same either way: a real `create_agent` and a hand-written graph with
`guard.tool_node`, on a real SqliteSaver, every checkpoint of the thread read back.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, RemoveMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from langgraph_replay_guard import GUARD_CHANNEL, GuardConfig, ReplayGuard
from langgraph_replay_guard.policy.config import keeps_previews
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph

os.environ["LANGSMITH_TRACING"] = "false"
pytestmark = pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")

SECRET = "Status of P1: all systems nominal, owner jane.doe@example.com, plan gold"
CHARS = 30
STATUS = ("status", {"id": "P1"})


def _tools(runs: list[str]) -> list[Any]:
    @tool
    def status(id: str) -> str:
        """The status of a system: the same text on every call."""
        runs.append(id)
        return SECRET

    return [status]


def _build(kind: str, store_previews: bool | None, runs: list[str], saver: Any) -> Any:
    # No dedup: the third identical call is answered by the result-diff layer (`same_result`),
    # whose answer quotes the last result.
    config = GuardConfig(dedup=False, result_preview_chars=CHARS, store_previews=store_previews)
    guard = ReplayGuard(config)
    model = ScriptedChatModel(script=[[STATUS], [STATUS], [STATUS], "done"])
    if kind == "middleware":
        return create_agent(
            model, _tools(runs), middleware=[guard.middleware()], checkpointer=saver
        )
    return agent_graph(model, _tools(runs), guard=guard, checkpointer=saver)


def _run(kind: str, store_previews: bool | None, tmp_path: Path, *, asynchronous: bool) -> Any:
    runs: list[str] = []
    cfg: Any = {"configurable": {"thread_id": "t"}}
    given: Any = {"messages": [HumanMessage("status?")]}
    if asynchronous:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async def go() -> Any:
            async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
                graph = _build(kind, store_previews, runs, saver)
                out = await graph.ainvoke(given, cfg)
                channels = [
                    c.checkpoint["channel_values"].get(GUARD_CHANNEL)
                    async for c in saver.alist(cfg)
                ]
                return out, channels

        out, channels = asyncio.run(go())
    else:
        with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
            graph = _build(kind, store_previews, runs, saver)
            out = graph.invoke(given, cfg)
            channels = [c.checkpoint["channel_values"].get(GUARD_CHANNEL) for c in saver.list(cfg)]
    return runs, out["messages"], [json.dumps(c) for c in channels if c is not None]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", ["middleware", "wrap"])
def test_the_default_channel_holds_no_result_and_the_model_is_told_the_same(
    kind: str, asynchronous: bool, tmp_path: Path
) -> None:
    """The short circuit quotes the last result from the thread; no checkpoint holds it."""
    runs, messages, channels = _run(kind, None, tmp_path, asynchronous=asynchronous)
    (tmp_path / "kept").mkdir()
    kept_runs, kept_messages, kept_channels = _run(
        kind, True, tmp_path / "kept", asynchronous=asynchronous
    )

    assert runs == ["P1", "P1"]  # the third identical call is answered, not run
    answers = [m for m in messages if isinstance(m, ToolMessage)]
    assert [a.status for a in answers] == ["success", "success", "error"]
    assert answers[2].text.startswith("Not executed: identical result again. 'status'")
    assert answers[2].text.endswith(f"\nLast result (preview):\n{SECRET[:CHARS]}")
    # Every checkpoint of the thread: the guard recorded the calls, and none of their text.
    assert channels
    assert all(SECRET[:10] not in c for c in channels)
    assert any('"status"' in c for c in channels)

    # store_previews=True: the model is told exactly the same; the channel keeps the preview.
    assert kept_runs == runs
    assert [m.text for m in kept_messages] == [m.text for m in messages]
    assert any(SECRET[:CHARS] in c for c in kept_channels)


def test_a_short_circuit_whose_result_the_history_lost_is_answered_without_a_quote(
    tmp_path: Path,
) -> None:
    """Nothing to quote once the earlier results were removed: the answer says so plainly."""
    runs: list[str] = []
    cfg: Any = {"configurable": {"thread_id": "lost"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
        config = GuardConfig(dedup=False, result_preview_chars=CHARS)
        model = ScriptedChatModel(script=[[STATUS], [STATUS], [STATUS], "done"])
        graph = create_agent(
            model,
            _tools(runs),
            middleware=[ReplayGuard(config).middleware()],
            checkpointer=saver,
            interrupt_before=["tools"],
        )
        graph.invoke({"messages": [HumanMessage("status?")]}, cfg)
        for _ in range(2):
            graph.invoke(None, cfg)
        # The two results leave the history (a summarization would do the same).
        old = [m for m in graph.get_state(cfg).values["messages"] if isinstance(m, ToolMessage)]
        graph.update_state(cfg, {"messages": [RemoveMessage(id=m.id or "") for m in old]})
        out = graph.invoke(None, cfg)
    assert runs == ["P1", "P1"]
    answer = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    assert answer.text.startswith("Not executed: identical result again. 'status'")
    assert "Last result" not in answer.text
    assert SECRET[:10] not in answer.text


@pytest.mark.parametrize(
    ("store_previews", "with_messages", "without_messages"),
    [(None, False, True), (True, True, True), (False, False, False)],
)
def test_the_setting_decides_per_integration(
    store_previews: bool | None, with_messages: bool, without_messages: bool
) -> None:
    """None: previews only where no messages hold the results; True and False: everywhere."""
    config = GuardConfig(store_previews=store_previews)
    assert keeps_previews(config, messages=True) is with_messages
    assert keeps_previews(config, messages=False) is without_messages


def test_a_channel_holding_its_first_write_reads_as_the_state_it_stands_for(
    tmp_path: Path,
) -> None:
    """One tool call, then the answer: the channel holds one write; `inspect` reads it."""
    runs: list[str] = []
    guard = ReplayGuard(GuardConfig())
    cfg: Any = {"configurable": {"thread_id": "one"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
        model = ScriptedChatModel(script=[[STATUS], "done"])
        agent = create_agent(
            model, _tools(runs), middleware=[guard.middleware()], checkpointer=saver
        )
        agent.invoke({"messages": [HumanMessage("status?")]}, cfg)
        value = agent.get_state(cfg).values[GUARD_CHANNEL]
        snapshot = agent.get_state(cfg)
    assert runs == ["P1"]
    assert "v" not in value  # the write itself, as LangGraph stores a channel's first value
    for given in (value, snapshot, snapshot.values):
        view = guard.inspect(given)
        assert [(c.tool, c.outcome) for c in view.recent_calls] == [("status", "success")]
        assert view.totals.calls == 1


# -- which result a short circuit quotes (found by attacking the default) ------------------------


def _status_answers(
    results: Any, script: list[Any], store_previews: bool | None, *, kind: str = "middleware"
) -> tuple[Any, Any, Any]:
    """An agent over a `status` tool giving `results(tool_call_id)`; its graph, config, saver."""

    @tool
    def status(id: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """The status of a system."""
        return str(results(tool_call_id))

    config = GuardConfig(
        dedup=False, result_preview_chars=40, max_repeats=10, store_previews=store_previews
    )
    guard = ReplayGuard(config)
    saver = InMemorySaver()
    model = ScriptedChatModel(script=script)
    if kind == "middleware":
        graph = create_agent(
            model,
            [status],
            middleware=[guard.middleware()],
            checkpointer=saver,
            interrupt_before=["tools"],
        )
    else:
        graph = agent_graph(model, [status], guard=guard, checkpointer=saver)
    return graph, {"configurable": {"thread_id": "t"}}, saver


def _call(index: int) -> dict[str, Any]:
    return {"name": "status", "args": {"id": "P1"}, "id": f"c{index}"}


@pytest.mark.parametrize("store_previews", [None, True], ids=["default", "previews"])
def test_a_short_circuit_never_quotes_an_older_result_the_history_kept(
    store_previews: bool | None,
) -> None:
    """OLD, then NEW twice; the two NEW messages removed: the quote is not OLD (none at all)."""
    given = iter(["OLD-result-aaaa", "NEW-result-bbbb", "NEW-result-bbbb"])
    script = [[_call(0)], [_call(1)], [_call(2)], [_call(3)], "done"]
    graph, cfg, _ = _status_answers(lambda _id: next(given), script, store_previews)
    graph.invoke({"messages": [HumanMessage("go")]}, cfg)
    for _ in range(3):
        graph.invoke(None, cfg)
    results = [m for m in graph.get_state(cfg).values["messages"] if isinstance(m, ToolMessage)]
    assert [m.text for m in results] == ["OLD-result-aaaa", *["NEW-result-bbbb"] * 2]
    graph.update_state(cfg, {"messages": [RemoveMessage(id=m.id or "") for m in results[1:]]})
    out = graph.invoke(None, cfg)
    answer = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    assert answer.text.startswith("Not executed: identical result again.")
    assert "OLD-result" not in answer.text
    assert "Last result" not in answer.text


@pytest.mark.parametrize("kind", ["middleware", "wrap"])
def test_a_short_circuit_after_a_batch_of_identical_calls_quotes_the_last_result(
    kind: str,
) -> None:
    """Y, X, X in one batch, then the call again: the quote is X, as with previews kept."""
    script = [[_call(0), _call(1), _call(2)], [_call(3)], "done"]
    answers = {}
    for store_previews in (None, True):
        graph, cfg, saver = _status_answers(
            lambda call_id: "FIRST-call-result-YYYY" if call_id == "c0" else "later-result-XXXX",
            script,
            store_previews,
            kind=kind,
        )
        out = graph.invoke({"messages": [HumanMessage("go")]}, cfg)
        while graph.get_state(cfg).next:  # the middleware agent stops before each tools node
            out = graph.invoke(None, cfg)
        answers[store_previews] = [m.text for m in out["messages"]]
        channels = [
            json.dumps(c.checkpoint["channel_values"].get(GUARD_CHANNEL)) for c in saver.list(cfg)
        ]
        assert any("XXXX" in c for c in channels) is (store_previews is True)
    assert answers[None][-2].endswith("Last result (preview):\nlater-result-XXXX")
    assert answers[None] == answers[True]


@pytest.mark.parametrize("reads", [40, 420])
def test_a_short_circuit_quotes_a_last_result_far_back_in_the_thread(reads: int) -> None:
    """Hundreds of messages after the last result (one batch of reads): still quoted."""

    @tool
    def poll(id: str) -> str:
        """Poll a job: the same text while it runs."""
        return f"POLL-RESULT-{id}"

    @tool
    def read(n: int) -> str:
        """Read a page."""
        return f"page {n}"

    config = GuardConfig(
        dedup=False,
        repeat_limit=False,
        result_preview_chars=40,
        tools={"poll": {"volatile": True, "short_circuit": True}},
    )
    pages = [("read", {"n": i % 4}) for i in range(reads)]
    script = [
        [("poll", {"id": "P"})],
        [("poll", {"id": "P"})],
        pages,
        [("poll", {"id": "P"})],
        "done",
    ]
    agent = create_agent(
        ScriptedChatModel(script=script),
        [poll, read],
        middleware=[ReplayGuard(config).middleware()],
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "far"}})
    answer = out["messages"][-2]
    assert answer.text.startswith("Not executed: identical result again. 'poll'")
    assert answer.text.endswith("Last result (preview):\nPOLL-RESULT-P")


def test_a_last_result_a_middleware_rewrote_is_not_quoted() -> None:
    """A `before_model` that marks old results changes their text: no quote of a stale copy."""

    class MarkOld(AgentMiddleware):  # type: ignore[type-arg]
        def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            messages = state["messages"]
            last_ai = max((i for i, m in enumerate(messages) if m.type == "ai"), default=0)
            old = [
                m.model_copy(update={"content": f"[old] {m.content}"})
                for m in messages[:last_ai]
                if isinstance(m, ToolMessage) and not str(m.content).startswith("[old]")
            ]
            return {"messages": old} if old else None

    runs: list[str] = []

    @tool
    def status(id: str) -> str:
        """The status of a system."""
        runs.append(id)
        return f"Status of {id}: all systems nominal"

    config = GuardConfig(dedup=False, result_preview_chars=CHARS)
    script = [[STATUS], [STATUS], [("status", {"id": "P2"})], [STATUS], "done"]
    agent = create_agent(
        ScriptedChatModel(script=script),
        [status],
        middleware=[MarkOld(), ReplayGuard(config).middleware()],
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "mark"}})
    assert runs == ["P1", "P1", "P2"]
    answer = out["messages"][-2]
    assert answer.text.startswith("Not executed: identical result again. 'status'")
    assert "Last result" not in answer.text


def test_the_callback_handler_with_store_previews_false_keeps_no_result_text() -> None:
    """`store_previews=False`: the handler's state in the store holds digests only."""
    from langgraph.store.memory import InMemoryStore

    @tool
    def read(id: str) -> str:
        """Read a record."""
        return "CB-SECRET contents of the record"

    store = InMemoryStore()
    handler = ReplayGuard(GuardConfig(store_previews=False)).callback_handler(store=store)
    script = [[("read", {"id": "A"})], [("read", {"id": "B"})], [("read", {"id": "A"})], "done"]
    agent = create_agent(ScriptedChatModel(script=script), [read], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "cb"}, "callbacks": [handler]}
    out = agent.invoke({"messages": [HumanMessage("go")]}, config)
    answer = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    assert answer.text.startswith("Not executed: 'read' already succeeded")
    assert "CB-SECRET" not in answer.text  # said identical, not quoted
    items = [item for ns in store.list_namespaces() for item in store.search(ns)]
    assert items
    assert all("CB-SECRET" not in json.dumps(item.value, default=str) for item in items)
