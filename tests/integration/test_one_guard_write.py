"""One guard-channel write a step: the previews ride on the guard's next write (issue 34 item 15).

The model call cuts the previews of the last batch from the messages the model read (issue
33) and writes nothing when the answer's calls go to the guard's tool hook: the tools node's
write for the batch carries them. A real `create_agent` agent on a real SqliteSaver (sync and
async), `PIIMiddleware` redacting or not, the guard first or last, and a
`HumanInTheLoopMiddleware` interrupt between the model and the tools resumed by a NEW agent
object (a new guard: what it planned in memory is gone) on the same checkpointer.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, PIIMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from langgraph_replay_guard import GUARD_CHANNEL, GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel

os.environ["LANGSMITH_TRACING"] = "false"

EMAIL = "jane.doe@example.com"


def _result(customer_id: str) -> str:
    return f"Customer {customer_id}: Jane Doe, contact {EMAIL}, plan gold"


def _lookup_tool(runs: list[str]) -> BaseTool:
    @tool
    def lookup_customer(customer_id: str) -> str:
        """Look up a customer."""
        runs.append(customer_id)
        return _result(customer_id)

    return lookup_customer


def _versions(checkpoints: list[dict[str, Any]]) -> set[Any]:
    """The guard channel's versions over a thread's checkpoints (one per write that changed it)."""
    return {
        c["channel_versions"][GUARD_CHANNEL]
        for c in checkpoints
        if GUARD_CHANNEL in c["channel_versions"]
    }


@pytest.mark.parametrize("store_previews", [None, True], ids=["default", "previews"])
def test_the_guard_channel_gets_one_version_a_step(
    tmp_path: Path, store_previews: bool | None
) -> None:
    """20 agent steps (model, tools): about 20 versions of the channel, not 40 (7e21124)."""
    runs: list[str] = []
    steps = 20
    script: list[Any] = [[("lookup_customer", {"customer_id": f"C{i}"})] for i in range(steps)]
    model = ScriptedChatModel(script=[*script, "done"])
    cfg: Any = {"configurable": {"thread_id": "versions"}, "recursion_limit": 200}
    with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
        guard = ReplayGuard(GuardConfig(result_preview_chars=24, store_previews=store_previews))
        agent = create_agent(
            model, [_lookup_tool(runs)], middleware=[guard.middleware()], checkpointer=saver
        )
        agent.invoke({"messages": [HumanMessage("look them up")]}, cfg, durability="sync")
        checkpoints = [c.checkpoint for c in saver.list(cfg)]
        channel = json.dumps(agent.get_state(cfg).values[GUARD_CHANNEL])
        writes = saver.conn.execute(
            "SELECT COUNT(*) FROM writes WHERE channel = ?", (GUARD_CHANNEL,)
        ).fetchone()[0]
    assert len(runs) == steps
    if store_previews is None:
        # Digests only (the messages hold the results): one version a step, the tools
        # node's write, and no result text in the channel.
        assert len(_versions(checkpoints)) == steps
        assert writes == steps
        assert [i for i in range(steps) if _result(f"C{i}")[:24] in channel] == []
        assert "Jane Doe" not in channel
        return
    # One version a step (the tools node's write, carrying the last batch's previews), and
    # the final model call's write of the last batch's previews: 21. 7e21124: 40.
    assert len(_versions(checkpoints)) == steps + 1
    assert writes == steps + 1
    # Every result the channel keeps got its preview, cut from what the model read.
    kept = [i for i in range(steps) if _result(f"C{i}")[:24] in channel]
    assert kept, "no preview reached the channel"
    assert kept == list(range(steps - len(kept), steps)), kept


# The messages of a run on 7e21124 (the same script, ids normalized): what every case of the
# matrix answers, the repeat of the first call included.
_PLAIN = [
    ["human", "who is C1?"],
    ["ai", "", ["lookup_customer", {"customer_id": "C1"}]],
    ["tool", "Customer C1: Jane Doe, contact jane.doe@example.com, plan gold"],
    ["ai", "", ["lookup_customer", {"customer_id": "C1"}]],
    [
        "tool",
        "Not executed: 'lookup_customer' already succeeded with exactly these arguments and "
        "nothing has changed since, so it would return the same result. Use the earlier "
        "result instead of calling it again.\nEarlier result:\nCustomer C1: Jane Doe, contact "
        "jane.doe@example.com, plan gold",
    ],
    ["ai", "done"],
]


def _normalized(messages: list[Any]) -> list[Any]:
    """The messages as comparable values: tool call ids replaced by their order."""
    ids: dict[str, str] = {}

    def norm(text: str) -> str:
        return re.sub(r"call_[0-9a-f]{12}", lambda m: ids.setdefault(m[0], f"<id{len(ids)}>"), text)

    out: list[Any] = []
    for m in messages:
        if m.type == "ai" and m.tool_calls:
            call = m.tool_calls[0]
            norm(call["id"])
            out.append(["ai", norm(str(m.content)), [call["name"], call["args"]]])
        else:
            out.append([m.type, norm(str(m.content))])
    return out


def _run(
    tmp_path: Path, *, guard_first: bool, pii: bool, hitl: bool, asynchronous: bool
) -> tuple[list[Any], list[dict[str, Any]], list[str], int]:
    """Run the script; return the messages, every checkpoint's channel value, runs, resumes."""
    runs: list[str] = []
    model = ScriptedChatModel(
        script=[
            [("lookup_customer", {"customer_id": "C1"})],
            [("lookup_customer", {"customer_id": "C1"})],
            "done",
        ]
    )
    cfg: Any = {"configurable": {"thread_id": "matrix"}}
    db = str(tmp_path / "cp.db")

    def agent(saver: Any) -> Any:
        # A new guard each time: a resume finds nothing of what the model call planned.
        guard = ReplayGuard(GuardConfig(result_preview_chars=30, store_previews=True))
        others: list[Any] = []
        if pii:
            others.append(PIIMiddleware("email", strategy="redact", apply_to_tool_results=True))
        if hitl:
            others.append(HumanInTheLoopMiddleware(interrupt_on={"lookup_customer": True}))
        stack = [guard.middleware(), *others] if guard_first else [*others, guard.middleware()]
        return create_agent(model, [_lookup_tool(runs)], middleware=stack, checkpointer=saver)

    given: Any = {"messages": [HumanMessage("who is C1?")]}
    approve = Command(resume={"decisions": [{"type": "approve"}]})
    resumes = 0
    if asynchronous:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async def arun() -> tuple[Any, list[Any]]:
            nonlocal resumes
            async with AsyncSqliteSaver.from_conn_string(db) as saver:
                out = await agent(saver).ainvoke(given, cfg, durability="sync")
                while "__interrupt__" in out:
                    resumes += 1
                    out = await agent(saver).ainvoke(approve, cfg, durability="sync")
                return out, [c.checkpoint async for c in saver.alist(cfg)]

        out, checkpoints = asyncio.run(arun())
    else:
        with SqliteSaver.from_conn_string(db) as saver:
            out = agent(saver).invoke(given, cfg, durability="sync")
            while "__interrupt__" in out:
                resumes += 1
                out = agent(saver).invoke(approve, cfg, durability="sync")
            checkpoints = [c.checkpoint for c in saver.list(cfg)]
    return _normalized(out["messages"]), checkpoints, runs, resumes


def _expected(pii: bool) -> list[Any]:
    expected = json.loads(json.dumps(_PLAIN))
    if pii:
        for message in expected:
            if message[0] == "tool":
                message[1] = message[1].replace(EMAIL, "[REDACTED_EMAIL]")
    return expected


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("hitl", [False, True], ids=["plain", "hitl_resumed"])
@pytest.mark.parametrize("pii", [False, True], ids=["raw", "pii"])
@pytest.mark.parametrize("guard_first", [True, False], ids=["guard_first", "guard_last"])
def test_the_previews_ride_on_the_next_write(
    tmp_path: Path, guard_first: bool, pii: bool, hitl: bool, asynchronous: bool
) -> None:
    """The preview reaches the channel (never raw), a repeat is answered as on 7e21124, and
    the channel gets one version a step, across an interrupt resumed by a new agent."""
    messages, checkpoints, runs, resumes = _run(
        tmp_path, guard_first=guard_first, pii=pii, hitl=hitl, asynchronous=asynchronous
    )
    assert runs == ["C1"], "the repeat is answered, not run"
    assert resumes == (2 if hitl else 0)
    assert messages == _expected(pii)
    channels = [json.dumps(c["channel_values"].get(GUARD_CHANNEL)) for c in checkpoints]
    latest = channels[0]  # newest first
    if pii:
        for i, text in enumerate(channels):
            assert EMAIL not in text, f"checkpoint {i} holds the raw result"
        assert "[REDACTED_EMAIL]" not in latest  # a changed result keeps its digest only
    else:
        assert _result("C1")[:30] in latest, "the preview reached the channel"
        assert _result("C1")[:31] not in latest
    # Two tool steps and the final model call's write of nothing new: one version per tools
    # node (7e21124: the model call's preview write, then the tools node's write).
    assert len(_versions(checkpoints)) == 2


_SAME = (
    "Not executed: 'lookup_customer' already succeeded with exactly these arguments and "
    "nothing has changed since, so it would return the same result. Use the earlier result "
    "instead of calling it again.\nEarlier result:\n"
)


def test_a_parallel_batch_carries_the_previews_in_each_call_as_on_7e21124(tmp_path: Path) -> None:
    """Each parallel call's write carries the show; the batch's own events keep no preview
    until the next model call, and every value the channel held is one 7e21124 held."""
    runs: list[str] = []

    @tool
    def lookup_customer(customer_id: str) -> str:
        """Look up a customer."""
        runs.append(customer_id)
        return f"Customer {customer_id}: contact {EMAIL}, plan gold"

    c1, c2, c3 = ({"customer_id": c} for c in ("C1", "C2", "C3"))
    model = ScriptedChatModel(
        script=[
            [("lookup_customer", c1), ("lookup_customer", c2), ("lookup_customer", c1)],
            [("lookup_customer", c2), ("lookup_customer", c3)],
            [("lookup_customer", c3)],
            "done",
        ]
    )
    cfg: Any = {"configurable": {"thread_id": "parallel"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
        guard = ReplayGuard(GuardConfig(result_preview_chars=30, store_previews=True))
        agent = create_agent(
            model, [lookup_customer], middleware=[guard.middleware()], checkpointer=saver
        )
        out = agent.invoke({"messages": [HumanMessage("go")]}, cfg, durability="sync")
        checkpoints = [c.checkpoint for c in saver.list(cfg)]
    assert sorted(runs) == ["C1", "C2", "C3"]  # a parallel batch runs in any order
    assert [f"{m.type}:{m.content}" for m in out["messages"]] == [
        "human:go",
        "ai:",
        f"tool:Customer C1: contact {EMAIL}, plan gold",
        f"tool:Customer C2: contact {EMAIL}, plan gold",
        "tool:Not executed: an earlier call in this same batch already calls 'lookup_customer' "
        "with exactly these arguments. Use that call's result.",
        "ai:",
        f"tool:{_SAME}Customer C2: contact {EMAIL}, plan gold",
        f"tool:Customer C3: contact {EMAIL}, plan gold",
        "ai:",
        f"tool:{_SAME}Customer C3: contact {EMAIL}, plan gold",
        "ai:done",
    ]
    final = out.get(GUARD_CHANNEL) or checkpoints[0]["channel_values"][GUARD_CHANNEL]
    assert sorted(memo[3] for memo in final["results"].values()) == [
        f"Customer C{i}: contact jane.doe@"[:30] for i in (1, 2, 3)
    ]
    assert final["totals"] == {"aborts": 0, "blocked": 3, "calls": 6}
    # Three tools steps, one version each (7e21124: five, two model calls' preview writes).
    assert len(_versions(checkpoints)) == 3


def test_a_batch_whose_tools_never_run_still_gets_the_previews_before_it(tmp_path: Path) -> None:
    """A HITL reject answers every call of the second batch: the tools node never writes, so
    the next model call writes the first batch's previews (read one batch further back)."""
    runs: list[str] = []
    model = ScriptedChatModel(
        script=[
            [("lookup_customer", {"customer_id": "C1"})],
            [("lookup_customer", {"customer_id": "C2"})],
            "done",
        ]
    )
    cfg: Any = {"configurable": {"thread_id": "rejected"}}
    reject = Command(resume={"decisions": [{"type": "reject", "message": "not now"}]})
    approve = Command(resume={"decisions": [{"type": "approve"}]})
    with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
        guard = ReplayGuard(GuardConfig(result_preview_chars=30, store_previews=True))
        hitl = HumanInTheLoopMiddleware(interrupt_on={"lookup_customer": True})
        agent = create_agent(
            model, [_lookup_tool(runs)], middleware=[guard.middleware(), hitl], checkpointer=saver
        )
        out = agent.invoke({"messages": [HumanMessage("who is C1?")]}, cfg, durability="sync")
        out = agent.invoke(approve, cfg, durability="sync")
        out = agent.invoke(reject, cfg, durability="sync")
        channel = json.dumps(agent.get_state(cfg).values[GUARD_CHANNEL])
    assert runs == ["C1"]
    assert out["messages"][-1].content == "done"
    assert _result("C1")[:30] in channel
