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
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, RemoveMessage, ToolMessage
from langchain_core.tools import tool
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
