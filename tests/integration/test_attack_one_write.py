"""Attacks on one guard-channel write a step (issue 34 item 15, merge 4b90c86).

The model call plans its batch on the channel value with the last batch's previews and
writes nothing when tools follow; the tools node's writes carry the previews (`show`). Real
`create_agent` agents, `ToolNode`, `InMemorySaver`/`SqliteSaver` and `ScriptedChatModel`:
middlewares that rewrite ToolMessages at other points (guard first and last), a parallel
batch half answered by another middleware, a tool returning its own `Command`, two threads
sharing one middleware instance run step by step alternately (real threads and
`asyncio.gather`), and hostile `show`/`scrub` keys in stored writes. The expected messages
and previews are those of the same scripts run on 7e21124 (`_BASE`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, SummarizationMiddleware, hook_config
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, InjectedToolCallId, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from langgraph_replay_guard import GUARD_CHANNEL, GuardConfig, ReplayGuard
from langgraph_replay_guard.decisions.keys import content_hash
from langgraph_replay_guard.testing import ScriptedChatModel

os.environ["LANGSMITH_TRACING"] = "false"

EMAIL = "jane.doe@example.com"
REDACTED = "[REDACTED]"
CHARS = 30


def _text(customer_id: str) -> str:
    return f"Customer {customer_id}: contact {EMAIL}, plan gold"


def _tools(runs: list[str]) -> list[BaseTool]:
    @tool
    def lookup_customer(customer_id: str) -> str:
        """Look up a customer."""
        runs.append(customer_id)
        if customer_id.startswith("E"):
            msg = f"lookup_customer: customer_id {customer_id!r} is not known; pass a C id"
            raise ToolException(msg)  # answered as an error ToolMessage (handle_tool_error)
        return _text(customer_id)

    lookup_customer.handle_tool_error = True

    @tool
    def note_customer(
        customer_id: str, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> Command:  # type: ignore[type-arg]
        """Note a customer (answers with its own ToolMessage in a Command)."""
        runs.append(f"note:{customer_id}")
        text = _text(customer_id)
        return Command(update={"messages": [ToolMessage(text, tool_call_id=tool_call_id)]})

    return [lookup_customer, note_customer]


def _redact(messages: list[Any]) -> list[Any]:
    """The ToolMessages holding the raw email, redacted (same ids: `add_messages` replaces)."""
    return [
        m.model_copy(update={"content": m.content.replace(EMAIL, REDACTED)})
        for m in messages
        if isinstance(m, ToolMessage) and isinstance(m.content, str) and EMAIL in m.content
    ]


class EditAt(AgentMiddleware):  # type: ignore[type-arg]
    """A `before_model` that edits the messages in state only at model call `at`."""

    def __init__(self, at: int, edit: Callable[[list[Any]], list[Any]]) -> None:
        super().__init__()
        self.at, self.calls, self.edit = at, 0, edit

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self.calls += 1
        if self.calls != self.at:
            return None
        edited = self.edit(state["messages"])
        return {"messages": edited} if edited else None


def redact_at(at: int) -> EditAt:
    """Redact the ToolMessages in state only at model call `at`."""
    return EditAt(at, _redact)


def remove_at(at: int) -> EditAt:
    """Remove every ToolMessage from state at model call `at`."""
    return EditAt(at, _removals)


def _removals(messages: list[Any]) -> list[Any]:
    return [RemoveMessage(id=m.id) for m in messages if isinstance(m, ToolMessage)]


class RedactAfter(AgentMiddleware):  # type: ignore[type-arg]
    """An `after_model` that redacts the ToolMessages the model just read, in state."""

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        redacted = _redact(state["messages"])
        return {"messages": redacted} if redacted else None


class RedactRequest(AgentMiddleware):  # type: ignore[type-arg]
    """A `wrap_model_call` that gives the model redacted ToolMessages, state unchanged."""

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(self._given(request))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await handler(self._given(request))

    @staticmethod
    def _given(request: Any) -> Any:
        given = [
            m.model_copy(update={"content": m.content.replace(EMAIL, REDACTED)})
            if isinstance(m, ToolMessage) and isinstance(m.content, str)
            else m
            for m in request.messages
        ]
        return request.override(messages=given)


class ShortCircuit(AgentMiddleware):  # type: ignore[type-arg]
    """A `wrap_tool_call` that answers the calls for `S*` customers itself."""

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        answer = self._answer(request)
        return handler(request) if answer is None else answer

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        answer = self._answer(request)
        return await handler(request) if answer is None else answer

    @staticmethod
    def _answer(request: Any) -> ToolMessage | None:
        if str(request.tool_call["args"].get("customer_id", "")).startswith("S"):
            return ToolMessage(
                "answered elsewhere", tool_call_id=request.tool_call["id"], name="lookup_customer"
            )
        return None


def _c(customer_id: str) -> tuple[str, dict[str, str]]:
    return ("lookup_customer", {"customer_id": customer_id})


_REPEAT = [[_c("C1")], [_c("C2")], [_c("C1")], "done"]

# name -> (other middlewares, script)
_CASES: dict[str, tuple[Callable[[], list[Any]], list[Any]]] = {
    "before_model_at_2": (lambda: [redact_at(2)], _REPEAT),
    "before_model_at_3": (lambda: [redact_at(3)], _REPEAT),
    "after_model": (lambda: [RedactAfter()], _REPEAT),
    "remove_results_at_3": (lambda: [remove_at(3)], _REPEAT),
    "wrap_model_call": (lambda: [RedactRequest()], _REPEAT),
    "summarization": (
        lambda: [
            SummarizationMiddleware(
                ScriptedChatModel(script=[], final="summary"),
                trigger=("messages", 4),
                keep=("messages", 2),
            )
        ],
        _REPEAT,
    ),
    "command_tool": (
        lambda: [],
        [
            [("note_customer", {"customer_id": "C1"}), _c("C2")],
            [("note_customer", {"customer_id": "C1"})],
            "done",
        ],
    ),
    "tool_error_parallel": (
        lambda: [],
        [[_c("C1"), _c("E1")], [_c("C1"), _c("E1")], [_c("C2")], [_c("C1")], "done"],
    ),
    "short_circuit_parallel": (
        lambda: [ShortCircuit()],
        [[_c("C1"), _c("S1")], [_c("C1"), _c("S1"), _c("C2")], [_c("C2")], "done"],
    ),
}


def _normalized(messages: list[Any]) -> list[str]:
    ids: dict[str, str] = {}

    def norm(text: str) -> str:
        return re.sub(r"call_[0-9a-f]{12}", lambda m: ids.setdefault(m[0], f"<id{len(ids)}>"), text)

    out: list[str] = []
    for m in messages:
        calls = [[c["name"], c["args"]] for c in getattr(m, "tool_calls", None) or ()]
        out.append(norm(f"{m.type}:{m.content}{json.dumps(calls) if calls else ''}"))
    return out


def _previews(value: Any) -> list[Any]:
    """The channel's result previews, by digest (ids and turns aside)."""
    if not isinstance(value, dict):
        return []
    return sorted([memo[0], memo[3]] for memo in value.get("results", {}).values())


def _scenario(
    name: str, *, guard_first: bool, asynchronous: bool = False, previews: bool | None = True
) -> dict[str, Any]:
    """Run a case on an InMemorySaver: messages, previews, and which checkpoints hold raw.

    `previews`: `GuardConfig.store_previews` (True: as on 7e21124, whose default it was).
    """
    others, script = _CASES[name]
    runs: list[str] = []
    saver = InMemorySaver()
    config = GuardConfig(result_preview_chars=CHARS, store_previews=previews)
    guard = ReplayGuard(config).middleware()
    stack = [guard, *others()] if guard_first else [*others(), guard]
    agent = create_agent(
        ScriptedChatModel(script=list(script)), _tools(runs), middleware=stack, checkpointer=saver
    )
    cfg: Any = {"configurable": {"thread_id": name}}
    given: Any = {"messages": [HumanMessage("go")]}
    out = asyncio.run(agent.ainvoke(given, cfg)) if asynchronous else agent.invoke(given, cfg)
    channels = [c.checkpoint["channel_values"].get(GUARD_CHANNEL) for c in saver.list(cfg)]
    held = [json.dumps(c) for c in channels]
    return {
        "messages": _normalized(out["messages"]),
        "runs": runs,
        "previews": _previews(channels[0]),
        # The customers whose raw preview some checkpoint's channel held.
        "raw": sorted({c for c in ("C1", "C2") for v in held if _text(c)[:CHARS] in v}),
    }


def _base() -> dict[str, Any]:
    """What a package answers for every case, guard first and last (`_BASE`: 7e21124's)."""
    return {
        f"{name}/{'first' if first else 'last'}": _scenario(name, guard_first=first)
        for name in _CASES
        for first in (True, False)
    }


# `_base()` run with the package of 7e21124 (guard first and last answered the same).
_BASE: dict[str, Any] = {
    "after_model": {
        "messages": [
            "human:go",
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            "tool:Customer C1: contact [REDACTED], plan gold",
            'ai:[["lookup_customer", {"customer_id": "C2"}]]',
            "tool:Customer C2: contact [REDACTED], plan gold",
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            "tool:Not executed: 'lookup_customer' already succeeded with "
            "exactly these arguments and nothing has changed since, so it "
            "would return the same result. Use the earlier result instead of "
            "calling it again.\n"
            "Earlier result:\n"
            "Customer C1: contact [REDACTED], plan gold",
            "ai:done",
        ],
        "previews": [
            ["149756cd32dc4b4264acaa6c9ea93b0a", None],
            ["1aac072cc0e64b804bb3585c77d6b59f", None],
        ],
        "raw": ["C1", "C2"],
        "runs": ["C1", "C2"],
    },
    "before_model_at_2": {
        "messages": [
            "human:go",
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            "tool:Customer C1: contact [REDACTED], plan gold",
            'ai:[["lookup_customer", {"customer_id": "C2"}]]',
            "tool:Customer C2: contact jane.doe@example.com, plan gold",
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            "tool:Not executed: 'lookup_customer' already succeeded "
            "with exactly these arguments and nothing has changed "
            "since, so it would return the same result. Use the "
            "earlier result instead of calling it again.\n"
            "Earlier result:\n"
            "Customer C1: contact [REDACTED], plan gold",
            "ai:done",
        ],
        "previews": [
            ["149756cd32dc4b4264acaa6c9ea93b0a", "Customer C2: contact jane.doe@"],
            ["1aac072cc0e64b804bb3585c77d6b59f", None],
        ],
        "raw": ["C2"],
        "runs": ["C1", "C2"],
    },
    "before_model_at_3": {
        "messages": [
            "human:go",
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            "tool:Customer C1: contact [REDACTED], plan gold",
            'ai:[["lookup_customer", {"customer_id": "C2"}]]',
            "tool:Customer C2: contact [REDACTED], plan gold",
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            "tool:Not executed: 'lookup_customer' already succeeded "
            "with exactly these arguments and nothing has changed "
            "since, so it would return the same result. Use the "
            "earlier result instead of calling it again.\n"
            "Earlier result:\n"
            "Customer C1: contact [REDACTED], plan gold",
            "ai:done",
        ],
        "previews": [
            ["149756cd32dc4b4264acaa6c9ea93b0a", None],
            ["1aac072cc0e64b804bb3585c77d6b59f", None],
        ],
        "raw": ["C1"],
        "runs": ["C1", "C2"],
    },
    "command_tool": {
        "messages": [
            "human:go",
            'ai:[["note_customer", {"customer_id": "C1"}], '
            '["lookup_customer", {"customer_id": "C2"}]]',
            "tool:Customer C1: contact jane.doe@example.com, plan gold",
            "tool:Customer C2: contact jane.doe@example.com, plan gold",
            'ai:[["note_customer", {"customer_id": "C1"}]]',
            "tool:Customer C1: contact jane.doe@example.com, plan gold",
            "ai:done",
        ],
        "previews": [
            ["149756cd32dc4b4264acaa6c9ea93b0a", "Customer C2: contact jane.doe@"],
            ["1aac072cc0e64b804bb3585c77d6b59f", "Customer C1: contact jane.doe@"],
        ],
        "raw": ["C1", "C2"],
        "runs": ["C2", "note:C1", "note:C1"],
    },
    "remove_results_at_3": {
        "messages": [
            "human:go",
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            'ai:[["lookup_customer", {"customer_id": "C2"}]]',
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            "tool:Customer C1: contact jane.doe@example.com, plan gold",
            "ai:done",
        ],
        "previews": [
            ["149756cd32dc4b4264acaa6c9ea93b0a", None],
            ["1aac072cc0e64b804bb3585c77d6b59f", "Customer C1: contact jane.doe@"],
        ],
        "raw": ["C1"],
        "runs": ["C1", "C1", "C2"],
    },
    "short_circuit_parallel": {
        "messages": [
            "human:go",
            'ai:[["lookup_customer", {"customer_id": "C1"}], '
            '["lookup_customer", {"customer_id": "S1"}]]',
            "tool:Customer C1: contact jane.doe@example.com, plan gold",
            "tool:answered elsewhere",
            'ai:[["lookup_customer", {"customer_id": "C1"}], '
            '["lookup_customer", {"customer_id": "S1"}], '
            '["lookup_customer", {"customer_id": "C2"}]]',
            "tool:Not executed: 'lookup_customer' already "
            "succeeded with exactly these arguments and nothing "
            "has changed since, so it would return the same "
            "result. Use the earlier result instead of calling it "
            "again.\n"
            "Earlier result:\n"
            "Customer C1: contact jane.doe@example.com, plan gold",
            "tool:answered elsewhere",
            "tool:Customer C2: contact jane.doe@example.com, plan gold",
            'ai:[["lookup_customer", {"customer_id": "C2"}]]',
            "tool:Not executed: 'lookup_customer' already "
            "succeeded with exactly these arguments and nothing "
            "has changed since, so it would return the same "
            "result. Use the earlier result instead of calling it "
            "again.\n"
            "Earlier result:\n"
            "Customer C2: contact jane.doe@example.com, plan gold",
            "ai:done",
        ],
        "previews": [
            ["149756cd32dc4b4264acaa6c9ea93b0a", "Customer C2: contact jane.doe@"],
            ["1aac072cc0e64b804bb3585c77d6b59f", "Customer C1: contact jane.doe@"],
        ],
        "raw": ["C1", "C2"],
        "runs": ["C1", "C2"],
    },
    "summarization": {
        "messages": [
            "human:Here is a summary of the conversation to date:\n\nsummary",
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            "tool:Customer C1: contact jane.doe@example.com, plan gold",
            "ai:done",
        ],
        "previews": [
            ["149756cd32dc4b4264acaa6c9ea93b0a", None],
            ["1aac072cc0e64b804bb3585c77d6b59f", "Customer C1: contact jane.doe@"],
        ],
        "raw": ["C1", "C2"],
        "runs": ["C1", "C1", "C2"],
    },
    "tool_error_parallel": {
        "messages": [
            "human:go",
            'ai:[["lookup_customer", {"customer_id": "C1"}], '
            '["lookup_customer", {"customer_id": "E1"}]]',
            "tool:Customer C1: contact jane.doe@example.com, plan gold",
            "tool:lookup_customer: customer_id 'E1' is not known; pass a C id",
            'ai:[["lookup_customer", {"customer_id": "C1"}], '
            '["lookup_customer", {"customer_id": "E1"}]]',
            "tool:Not executed: 'lookup_customer' already succeeded "
            "with exactly these arguments and nothing has changed "
            "since, so it would return the same result. Use the "
            "earlier result instead of calling it again.\n"
            "Earlier result:\n"
            "Customer C1: contact jane.doe@example.com, plan gold",
            "tool:lookup_customer: customer_id 'E1' is not known; pass a C id",
            'ai:[["lookup_customer", {"customer_id": "C2"}]]',
            "tool:Customer C2: contact jane.doe@example.com, plan gold",
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            "tool:Not executed: 'lookup_customer' already succeeded "
            "with exactly these arguments and nothing has changed "
            "since, so it would return the same result. Use the "
            "earlier result instead of calling it again.\n"
            "Earlier result:\n"
            "Customer C1: contact jane.doe@example.com, plan gold",
            "ai:done",
        ],
        "previews": [
            ["149756cd32dc4b4264acaa6c9ea93b0a", "Customer C2: contact jane.doe@"],
            ["1aac072cc0e64b804bb3585c77d6b59f", "Customer C1: contact jane.doe@"],
        ],
        "raw": ["C1", "C2"],
        "runs": ["C1", "C2", "E1", "E1"],
    },
    "wrap_model_call": {
        "messages": [
            "human:go",
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            "tool:Customer C1: contact jane.doe@example.com, plan gold",
            'ai:[["lookup_customer", {"customer_id": "C2"}]]',
            "tool:Customer C2: contact jane.doe@example.com, plan gold",
            'ai:[["lookup_customer", {"customer_id": "C1"}]]',
            "tool:Not executed: 'lookup_customer' already succeeded with "
            "exactly these arguments and nothing has changed since, so "
            "it would return the same result. Use the earlier result "
            "instead of calling it again.\n"
            "Earlier result:\n"
            "Customer C1: contact jane.doe@example.com, plan gold",
            "ai:done",
        ],
        "previews": [
            ["149756cd32dc4b4264acaa6c9ea93b0a", "Customer C2: contact jane.doe@"],
            ["1aac072cc0e64b804bb3585c77d6b59f", "Customer C1: contact jane.doe@"],
        ],
        "raw": ["C1", "C2"],
        "runs": ["C1", "C2"],
    },
}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("guard_first", [True, False], ids=["first", "last"])
@pytest.mark.parametrize("name", sorted(_CASES))
def test_a_stack_answers_as_on_7e21124(name: str, guard_first: bool, asynchronous: bool) -> None:
    """Messages (the repeat's answer included), previews and raw-holding checkpoints: as 7e21124."""
    got = _scenario(name, guard_first=guard_first, asynchronous=asynchronous)
    expected = _BASE[name]
    assert got["messages"] == expected["messages"]
    assert sorted(got["runs"]) == expected["runs"]  # a parallel batch runs in any order
    assert got["previews"] == expected["previews"]
    # No checkpoint keeps a raw text 7e21124 did not keep; C1, redacted before the model
    # read it, never.
    assert set(got["raw"]) <= set(expected["raw"])
    if name == "before_model_at_2":
        assert "C1" not in got["raw"]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("guard_first", [True, False], ids=["first", "last"])
@pytest.mark.parametrize("name", sorted(_CASES))
def test_by_default_a_stack_answers_as_on_7e21124_and_no_checkpoint_holds_a_result(
    name: str, guard_first: bool, asynchronous: bool
) -> None:
    """The default channel keeps digests only: the same messages, no result text anywhere.

    The model is told what it was told on 7e21124 (a duplicate's and a short circuit's answer
    cut from the thread's messages), and no checkpoint's guard channel holds a preview, so a
    redaction the guard cannot see (a `wrap_model_call` rewriting the model's request only)
    leaves nothing raw behind it either.
    """
    got = _scenario(name, guard_first=guard_first, asynchronous=asynchronous, previews=None)
    expected = _BASE[name]
    assert got["messages"] == expected["messages"]
    assert sorted(got["runs"]) == expected["runs"]
    assert got["previews"] == [[digest, None] for digest, _ in expected["previews"]]
    assert got["raw"] == []


@pytest.mark.xfail(
    strict=True,
    reason="with store_previews=True (the default of 7e21124; None, today's, keeps no text: "
    "`test_by_default_a_stack_answers_as_on_7e21124_and_no_checkpoint_holds_a_result`), "
    "found on 7e21124 as on main: the guard cuts the previews from the state's messages "
    "(`request.state`), not from `request.messages`, so a `wrap_model_call` that gives the "
    "model redacted ToolMessages without changing state leaves the raw preview in the channel; "
    "guard first it cannot see the rewrite at all, and a tools node that misses "
    "`PlannedValues` recomputes from state, so reading `request.messages` alone would not do",
)
@pytest.mark.parametrize("guard_first", [True, False], ids=["first", "last"])
def test_a_redaction_around_the_model_call_keeps_no_raw_preview(guard_first: bool) -> None:
    """The model was only ever given `[REDACTED]`: no checkpoint's channel holds the email."""
    got = _scenario("wrap_model_call", guard_first=guard_first)
    assert got["messages"] == _BASE["wrap_model_call"]["messages"]
    assert got["raw"] == []


# -- two threads, one middleware ----------------------------------------------------------------


def _thread_script(who: str) -> list[Any]:
    """Per thread: its own customers, a parallel batch, then repeats of the first batch's calls."""
    a, b = f"{who}1", f"{who}2"
    return [[_c(a), _c(b)], [_c(a)], [_c(b), _c(f"{who}3")], [_c(a)], "done"]


class Alternate(AgentMiddleware):  # type: ignore[type-arg]
    """Outermost: after each model call, wait for the other thread's (both planned, neither ran)."""

    def __init__(self, barrier: Any) -> None:
        super().__init__()
        self.barrier = barrier

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        response = handler(request)
        self.barrier.wait()
        return response

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        response = await handler(request)
        await self.barrier.wait()
        return response


def _by_thread(messages: list[Any]) -> Any:
    """One agent's script for both threads: the thread's step by its human message."""
    who = next(str(m.content) for m in messages if isinstance(m, HumanMessage))
    step = sum(isinstance(m, AIMessage) for m in messages)
    script = _thread_script(who)
    return script[step] if step < len(script) else "done"


def _two_threads(mode: str, *, one_agent: bool = False) -> dict[str, Any]:
    """Threads A and B on one guard middleware instance and one saver, step by step alternately
    (`one_agent`: one compiled agent for both, as a server runs it)."""
    guard = ReplayGuard(GuardConfig(result_preview_chars=CHARS, store_previews=True)).middleware()
    saver = InMemorySaver()
    barrier: Any = asyncio.Barrier(2) if mode == "async" else threading.Barrier(2, timeout=30)
    runs: dict[str, list[str]] = {"A": [], "B": []}
    stack = [*([Alternate(barrier)] if mode != "serial" else []), guard]
    if one_agent:
        ran: list[str] = []
        shared = create_agent(
            ScriptedChatModel(script=[_by_thread] * 12),
            _tools(ran),
            middleware=stack,
            checkpointer=saver,
        )
        agents = dict.fromkeys(runs, shared)
    else:
        agents = {
            who: create_agent(
                ScriptedChatModel(script=_thread_script(who)),
                _tools(runs[who]),
                middleware=stack,
                checkpointer=saver,
            )
            for who in runs
        }
    given: dict[str, Any] = {w: {"messages": [HumanMessage(w)]} for w in runs}
    cfgs: dict[str, Any] = {w: {"configurable": {"thread_id": w}} for w in runs}
    outs: dict[str, Any] = {}
    if mode == "async":

        async def both() -> list[Any]:
            return await asyncio.gather(*(agents[w].ainvoke(given[w], cfgs[w]) for w in runs))

        outs = dict(zip(runs, asyncio.run(both()), strict=True))
    elif mode == "threads":
        errors: list[BaseException] = []

        def one(who: str) -> None:
            try:
                outs[who] = agents[who].invoke(given[who], cfgs[who])
            except BaseException as exc:  # re-raised below, in the test's thread
                errors.append(exc)
                barrier.abort()

        workers = [threading.Thread(target=one, args=(w,)) for w in runs]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        if errors:
            raise errors[0]
    else:
        outs = {w: agents[w].invoke(given[w], cfgs[w]) for w in runs}
    result: dict[str, Any] = {}
    for who in runs:
        channels = [
            json.dumps(c.checkpoint["channel_values"].get(GUARD_CHANNEL))
            for c in saver.list(cfgs[who])
        ]
        other = "B" if who == "A" else "A"
        result[who] = {
            "messages": _normalized(outs[who]["messages"]),
            "runs": sorted(r for r in (ran if one_agent else runs[who]) if r.startswith(who)),
            "previews": _previews(json.loads(channels[0])),
            # Any checkpoint of this thread holding the other thread's result text.
            "foreign": [c for c in channels if f"Customer {other}" in c],
        }
    return result


@pytest.mark.parametrize("one_agent", [False, True], ids=["two_agents", "one_agent"])
@pytest.mark.parametrize("mode", ["threads", "async"])
def test_two_threads_on_one_middleware_never_share_a_planned_value(
    mode: str, one_agent: bool
) -> None:
    """Each thread's messages, runs and previews are those of a run alone (which 7e21124
    gives too); no checkpoint of one holds the other's result."""
    alone = _two_threads("serial")
    got = _two_threads(mode, one_agent=one_agent)
    for who in ("A", "B"):
        assert got[who]["foreign"] == []
        assert got[who]["messages"] == alone[who]["messages"]
        assert got[who]["runs"] == alone[who]["runs"]
        assert got[who]["previews"] == alone[who]["previews"]


# -- hostile show / scrub keys --------------------------------------------------------------------

_HOSTILE: dict[str, Any] = {
    "show_int": {"show": 5},
    "show_text": {"show": "Customer C1"},
    "show_list": {"show": ["Customer C1"]},
    "show_int_preview": {"show": {content_hash(_text("C1")): 5}},
    "show_int_digest": {"show": {5: "Customer C1"}},
    "scrub_int": {"scrub": 5},
    "scrub_text": {"scrub": "Customer C1"},
    "scrub_int_item": {"scrub": [1]},
    "scrub_map": {"scrub": {"Customer C1": "x"}},
}


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_a_show_or_scrub_of_the_wrong_type_is_ignored_with_a_notice(
    tmp_path: Path, name: str
) -> None:
    """A stored events write with a bad `show`/`scrub` (via `update_state`, on a SqliteSaver):
    noted and ignored (the state readers' way), never a crash; the thread runs on."""
    runs: list[str] = []
    cfg: Any = {"configurable": {"thread_id": name}}
    script = [[_c("C1")], "first", [_c("C1")], "done"]
    with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
        guard = ReplayGuard(
            GuardConfig(result_preview_chars=CHARS, store_previews=True)
        ).middleware()
        agent = create_agent(
            ScriptedChatModel(script=script), _tools(runs), middleware=[guard], checkpointer=saver
        )
        agent.invoke({"messages": [HumanMessage("go")]}, cfg)
        before = agent.get_state(cfg).values[GUARD_CHANNEL]
        agent.update_state(cfg, {GUARD_CHANNEL: {"op": "events", "events": [], **_HOSTILE[name]}})
        after = agent.get_state(cfg).values[GUARD_CHANNEL]
        out = agent.invoke({"messages": [HumanMessage("again")]}, cfg)
    assert "ignored a write to the guard channel" in after["notice"]
    assert after["results"] == before["results"]
    assert out["messages"][-1].content == "done"
    assert runs == ["C1", "C1"]  # a new turn: the call runs again


# -- a show carried by every write of a parallel batch --------------------------------------------

SAME = f"Status: contact {EMAIL}, all fine"  # every call's result: one digest for all


class RedactNewest(AgentMiddleware):  # type: ignore[type-arg]
    """A `before_model` that redacts only the newest batch's ToolMessages, at model call `at`."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.calls = at, 0

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self.calls += 1
        if self.calls != self.at:
            return None
        messages = state["messages"]
        start = len(messages)
        while start and not isinstance(messages[start - 1], AIMessage):
            start -= 1
        return {"messages": _redact(messages[start:])}


@pytest.mark.parametrize("guard_first", [True, False], ids=["first", "last"])
def test_a_redacted_result_with_an_earlier_results_text_keeps_its_digest_only(
    guard_first: bool,
) -> None:
    """Batch 1 `a`, batch 2 `b`, `c` in parallel, each returning the text `a` returned (one
    digest). The model reads `b` and `c` redacted: they keep their digest only, in every
    checkpoint, as on 7e21124. 4b90c86's model call read the batch before the last one for
    the digest `b` and `c` still had no preview of, and gave them `a`'s (raw) preview."""
    runs: list[str] = []

    @tool
    def status(x: str) -> str:
        """A status."""
        runs.append(x)
        return SAME

    def s(x: str) -> tuple[str, dict[str, str]]:
        return ("status", {"x": x})

    saver = InMemorySaver()
    cfg: Any = {"configurable": {"thread_id": "same"}}
    guard = ReplayGuard(GuardConfig(result_preview_chars=20, store_previews=True)).middleware()
    stack = [guard, RedactNewest(3)] if guard_first else [RedactNewest(3), guard]
    script = [[s("a")], [s("b"), s("c")], [s("b"), s("c")], [s("a")], "done"]
    agent = create_agent(
        ScriptedChatModel(script=script), [status], middleware=stack, checkpointer=saver
    )
    out = agent.invoke({"messages": [HumanMessage("go")]}, cfg)
    assert sorted(runs) == ["a", "b", "c"]
    assert out["messages"][-1].content == "done"
    preview = SAME[:20]
    for checkpoint in saver.list(cfg):
        value = checkpoint.checkpoint["channel_values"].get(GUARD_CHANNEL)
        if not isinstance(value, dict) or "results" not in value:
            continue  # before the channel's first state (a first write is kept as it is)
        shown = sorted(memo[3] == preview for memo in value["results"].values())
        # 7e21124: `a`'s preview only, from the model call that read it unchanged.
        assert shown in ([True], [False, False, True]), (checkpoint.config, shown)


@pytest.mark.parametrize("repeats", [1, 2])
def test_an_abort_that_raises_keeps_the_previews_of_7e21124(repeats: int) -> None:
    """`exit_behavior="error"`: the run raises `LoopAbortedError`; the last checkpoint's
    channel keeps what 7e21124 kept (the previews the model call wrote before the raise)."""
    from langgraph_replay_guard.decisions.state import load_state

    runs: list[str] = []
    saver = InMemorySaver()
    cfg: Any = {"configurable": {"thread_id": "abort"}}
    config = GuardConfig(
        result_preview_chars=CHARS, store_previews=True, exit_behavior="error", max_repeats=repeats
    )
    script = [[_c("C1")], [_c("C2"), _c("C1")], [_c("C1")], [_c("C1")], [_c("C1")], "done"]
    agent = create_agent(
        ScriptedChatModel(script=script),
        _tools(runs),
        middleware=[ReplayGuard(config).middleware()],
        checkpointer=saver,
    )
    with pytest.raises(Exception, match="lookup_customer") as raised:
        agent.invoke({"messages": [HumanMessage("go")]}, cfg)
    assert type(raised.value).__name__ == "LoopAbortedError"
    tup = saver.get_tuple(cfg)
    assert tup is not None
    value = load_state(tup.checkpoint["channel_values"][GUARD_CHANNEL])
    previews = sorted(memo[3] for memo in value["results"].values() if memo[3] is not None)
    # 7e21124: max_repeats=1 aborts before C1's preview is written; 2, after.
    assert sorted(runs) == (["C1"] if repeats == 1 else ["C1", "C2"])
    assert previews == ([] if repeats == 1 else [_text("C1")[:CHARS]])


class JumpBack(AgentMiddleware):  # type: ignore[type-arg]
    """An `after_model` that sends an answer calling for a `J*` customer back to the model,
    its calls unanswered (they never reach the tools node)."""

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        ai = state["messages"][-1]
        calls = ai.tool_calls if isinstance(ai, AIMessage) else []
        if any(str(c["args"].get("customer_id", "")).startswith("J") for c in calls):
            return {"jump_to": "model"}
        return None


@pytest.mark.parametrize("jumps", [1, 2, 3])
@pytest.mark.parametrize("guard_first", [True, False], ids=["first", "last"])
def test_jumps_back_to_the_model_do_not_lose_the_previews(guard_first: bool, jumps: int) -> None:
    """C1 runs, then `jumps` answers go back to the model unanswered: the model call that
    reads C1's result unchanged plans its preview, but no tools node carries it. 7e21124
    wrote it at once; 4b90c86 lost it for good after two jumps (it read two batches back)."""
    runs: list[str] = []
    saver = InMemorySaver()
    cfg: Any = {"configurable": {"thread_id": "jumps"}}
    guard = ReplayGuard(GuardConfig(result_preview_chars=CHARS, store_previews=True)).middleware()
    stack = [guard, JumpBack()] if guard_first else [JumpBack(), guard]
    script = [[_c("C1")], *([_c(f"J{i}")] for i in range(jumps)), [_c("C1")], "done"]
    agent = create_agent(
        ScriptedChatModel(script=script), _tools(runs), middleware=stack, checkpointer=saver
    )
    out = agent.invoke({"messages": [HumanMessage("go")]}, cfg)
    assert runs == ["C1"]
    repeat = out["messages"][-2].content  # the repeat of C1, answered as on 7e21124
    assert repeat.startswith("Not executed: 'lookup_customer' already succeeded")
    assert repeat.endswith(_text("C1"))
    tup = saver.get_tuple(cfg)
    assert tup is not None
    value = tup.checkpoint["channel_values"][GUARD_CHANNEL]
    assert [memo[3] for memo in value["results"].values()] == [_text("C1")[:CHARS]]


@pytest.mark.parametrize("guard_first", [True, False], ids=["first", "last"])
def test_a_lost_show_of_a_result_with_an_earlier_results_text_is_written_late(
    guard_first: bool,
) -> None:
    """`a`, then `b` (the same text, one digest): the model call reading `b` plans its show,
    but the next batch is answered by a `wrap_tool_call` outside the guard, so no tool hook
    carries it. The next model call reads one batch back and shows `b` as 7e21124 did (a
    digest some result already has a preview of is still shown for a result of its own)."""

    @tool
    def status(x: str) -> str:
        """A status."""
        return SAME

    class Outside(ShortCircuit):
        @staticmethod
        def _answer(request: Any) -> ToolMessage | None:
            if not str(request.tool_call["args"].get("x", "")).startswith("S"):
                return None
            return ToolMessage("answered elsewhere", tool_call_id=request.tool_call["id"])

    def s(x: str) -> tuple[str, dict[str, str]]:
        return ("status", {"x": x})

    saver = InMemorySaver()
    cfg: Any = {"configurable": {"thread_id": "lost"}}
    guard = ReplayGuard(GuardConfig(result_preview_chars=20, store_previews=True)).middleware()
    stack = [guard, Outside()] if guard_first else [Outside(), guard]
    script = [[s("a")], [s("b")], [s("S1")], [s("S2")], "done"]
    agent = create_agent(
        ScriptedChatModel(script=script), [status], middleware=stack, checkpointer=saver
    )
    out = agent.invoke({"messages": [HumanMessage("go")]}, cfg)
    assert out["messages"][-1].content == "done"
    tup = saver.get_tuple(cfg)
    assert tup is not None
    value = tup.checkpoint["channel_values"][GUARD_CHANNEL]
    assert [memo[3] for memo in value["results"].values()] == [SAME[:20]] * 2
