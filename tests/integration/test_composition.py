"""The guard's promises in a stack of LangChain middlewares, first and last in the list."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    AutoModeMiddleware,
    HumanInTheLoopMiddleware,
    LLMToolSelectorMiddleware,
    ToolCallLimitMiddleware,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from langgraph_replay_guard import ReplayGuardMiddleware
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import async_run
from tests.integration.decision_models import ScriptedClassifier
from tests.integration.stacks import counted_tools, selector_model

os.environ["LANGSMITH_TRACING"] = "false"

ORDERS = ["guard-first", "guard-last"]


def _stack(order: str, other: Any, guard: Any | None = None) -> list[Any]:
    guard = guard or ReplayGuardMiddleware()
    return [guard, other] if order == "guard-first" else [other, guard]


def _tools(runs: Counter[str]) -> list[Any]:
    """`lookup`, `quote` and `send_email`, each run counted (`stacks.counted_tools`)."""
    return list(counted_tools(runs).values())


def _stopped(messages: list[Any]) -> str | None:
    last = messages[-1]
    return last.response_metadata.get("replay_guard_stop") if isinstance(last, AIMessage) else None


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_loop_against_tool_call_limit_continue_is_stopped(order, mode):
    # ToolCallLimit "continue" answers the over-limit calls itself, in after_model: they never
    # reach a tool hook. The model insists 30 times; without the guard that is 31 model calls.
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=30)
    limit = ToolCallLimitMiddleware(run_limit=1, exit_behavior="continue")
    agent = create_agent(model, _tools(runs), middleware=_stack(order, limit))
    inputs = {"messages": [HumanMessage("who is P1?")]}
    out = agent.invoke(inputs) if mode == "sync" else async_run.run(agent.ainvoke(inputs))
    assert runs["lookup"] == 1
    assert model.calls == 4  # the documented stop: the 4th identical call
    assert _stopped(out["messages"]) == "repeat_limit"


def test_without_the_guard_the_same_loop_runs_to_the_end_of_the_script():
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=30)
    limit = ToolCallLimitMiddleware(run_limit=1, exit_behavior="continue")
    create_agent(model, _tools(runs), middleware=[limit]).invoke(
        {"messages": [HumanMessage("who is P1?")]}
    )
    assert model.calls == 31


def _run_rejecting(agent: Any, cfg: dict[str, Any], *, limit: int = 20) -> tuple[Any, int]:
    """Run the agent, rejecting every HITL review, until it ends; count the reviews."""
    out = agent.invoke({"messages": [HumanMessage("email bob")]}, cfg)
    reviews = 0
    while agent.get_state(cfg).interrupts and reviews < limit:
        reviews += 1
        reject = {"decisions": [{"type": "reject", "message": "Do not send that."}]}
        out = agent.invoke(Command(resume=reject), cfg)
    return out, reviews


@pytest.mark.parametrize("order", ORDERS)
def test_a_call_rejected_by_a_human_and_asked_again_is_stopped(order):
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("send_email", {"to": "bob", "body": "hi"}, times=8)
    hitl = HumanInTheLoopMiddleware(interrupt_on={"send_email": True})
    agent = create_agent(
        model, _tools(runs), middleware=_stack(order, hitl), checkpointer=InMemorySaver()
    )
    out, reviews = _run_rejecting(agent, {"configurable": {"thread_id": f"hitl-{order}"}})
    assert runs["send_email"] == 0
    assert reviews == 3  # the 4th identical ask is stopped before a human is bothered again
    assert _stopped(out["messages"]) == "repeat_limit"
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert all(m.status == "error" for m in answers)


def test_without_the_guard_a_rejected_call_is_asked_again_every_time():
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("send_email", {"to": "bob", "body": "hi"}, times=8)
    hitl = HumanInTheLoopMiddleware(interrupt_on={"send_email": True})
    agent = create_agent(model, _tools(runs), middleware=[hitl], checkpointer=InMemorySaver())
    _, reviews = _run_rejecting(agent, {"configurable": {"thread_id": "hitl-plain"}})
    assert reviews == 8


@pytest.mark.parametrize("order", ORDERS)
def test_a_healthy_run_under_a_call_limit_is_the_unguarded_run(order):
    def run(middleware: list[Any]) -> list[tuple[str, str]]:
        runs: Counter[str] = Counter()
        model = ScriptedChatModel(
            script=[
                [("lookup", {"id": "P1"})],
                [("lookup", {"id": "P2"}), ("lookup", {"id": "P3"})],
                "done",
            ]
        )
        out = create_agent(model, _tools(runs), middleware=middleware).invoke(
            {"messages": [HumanMessage("who?")]}
        )
        return [(type(m).__name__, m.text) for m in out["messages"]]

    limit = ToolCallLimitMiddleware(run_limit=2, exit_behavior="continue")
    plain = run([ToolCallLimitMiddleware(run_limit=2, exit_behavior="continue")])
    assert run(_stack(order, limit)) == plain


def test_a_structured_answer_failing_validation_identically_is_stopped():
    from langchain.agents.structured_output import ToolStrategy
    from pydantic import BaseModel

    class Answer(BaseModel):
        score: int

    def run(middleware: list[Any]) -> tuple[ScriptedChatModel, dict[str, Any]]:
        model = ScriptedChatModel.looping("Answer", {"score": "high"}, times=30)
        agent = create_agent(
            model, _tools(Counter()), middleware=middleware, response_format=ToolStrategy(Answer)
        )
        return model, agent.invoke({"messages": [HumanMessage("rate it")]})

    plain_model, _ = run([])
    assert plain_model.calls == 31
    model, out = run([ReplayGuardMiddleware()])
    assert model.calls == 4
    assert _stopped(out["messages"]) == "repeat_limit"
    # Every call has exactly one answer (the model node's own validation error included).
    ids = [m.tool_call_id for m in out["messages"] if isinstance(m, ToolMessage)]
    asked = [c["id"] for m in out["messages"] if isinstance(m, AIMessage) for c in m.tool_calls]
    assert sorted(ids) == sorted(asked)
    assert "do not exist" not in out["messages"][-1].text


class _Cache(AgentMiddleware):
    """A result cache in LangChain's documented pattern: answers a repeat without the tool."""

    def __init__(self) -> None:
        super().__init__()
        self.cached: dict[str, Any] = {}

    def wrap_tool_call(self, request, handler):
        key = f"{request.tool_call['name']}:{sorted(request.tool_call['args'].items())}"
        if key in self.cached:
            return ToolMessage(
                self.cached[key].content,
                tool_call_id=request.tool_call["id"],
                name=request.tool_call["name"],
            )
        result = handler(request)
        self.cached[key] = result
        return result

    async def awrap_tool_call(self, request, handler):
        key = f"{request.tool_call['name']}:{sorted(request.tool_call['args'].items())}"
        if key in self.cached:
            return self.wrap_tool_call(request, handler)
        result = await handler(request)
        self.cached[key] = result
        return result


@pytest.mark.parametrize("order", ORDERS)
def test_a_loop_a_cache_answers_is_stopped(order):
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=30)
    agent = create_agent(model, _tools(runs), middleware=_stack(order, _Cache()))
    out = agent.invoke({"messages": [HumanMessage("who is P1?")]})
    assert runs["lookup"] == 1
    assert model.calls == 4  # the documented stop: the 4th identical call
    assert _stopped(out["messages"]) == "repeat_limit"


@pytest.mark.parametrize("order", ORDERS)
def test_a_send_asked_again_after_the_history_was_summarized_runs(order, tmp_path):
    # Summarization removes the ToolMessage of the first send. The ledger must not take the
    # user's deliberate second send for a call lost in a crash (a false ReplayUnsafeError).
    import sqlite3

    from langchain.agents.middleware import SummarizationMiddleware
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    runs: Counter[str] = Counter()
    send = {"to": "bob", "body": "hi"}
    model = ScriptedChatModel(
        script=[[("send_email", send)], "Sent.", "ok", "ok", [("send_email", send)], "Sent."]
    )
    summarize = SummarizationMiddleware(
        ScriptedChatModel(script=["An email was sent to bob."] * 5),
        trigger=("messages", 5),
        keep=("messages", 1),
    )
    guard = ReplayGuardMiddleware(tools={"send_email": "unsafe"})
    conn = sqlite3.connect(tmp_path / "cp.db", check_same_thread=False)
    store = SqliteStore(sqlite3.connect(tmp_path / "store.db", check_same_thread=False))
    store.setup()
    agent = create_agent(
        model,
        _tools(runs),
        middleware=_stack(order, summarize, guard),
        checkpointer=SqliteSaver(conn),
        store=store,
    )
    cfg = {"configurable": {"thread_id": "summarized"}}
    for text in ["email bob", "thanks", "and?", "send it again please"]:
        out = agent.invoke({"messages": [HumanMessage(text)]}, cfg, durability="sync")
    assert runs["send_email"] == 2
    assert out["messages"][-1].text == "Sent."
    texts = [m.text for m in out["messages"]]
    assert not any("lost in a crash" in t for t in texts)


def _flaky_send(sent: list[str]) -> Any:
    """An email tool whose connection drops after the email went out, the first time."""

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(to)
        if len(sent) == 1:
            raise ConnectionError("connection reset after the message was handed over")
        return f"sent to {to}"

    return send_email


def _retry_agent(
    order: str, sent: list[str], **options: Any
) -> tuple[ScriptedChatModel, Any, ReplayGuardMiddleware]:
    """An agent that sends one email through `_flaky_send`, with `ToolRetryMiddleware` and
    the guard (`send_email` unsafe, `options` its other settings) in the given order."""
    from langchain.agents.middleware import ToolRetryMiddleware
    from langgraph.store.memory import InMemoryStore

    model = ScriptedChatModel(script=[[("send_email", {"to": "bob", "body": "hi"})], "done"])
    retry = ToolRetryMiddleware(max_retries=3, initial_delay=0, jitter=False)
    guard = ReplayGuardMiddleware(tools={"send_email": "unsafe"}, **options)
    agent = create_agent(
        model,
        [_flaky_send(sent)],
        middleware=_stack(order, retry, guard),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    return model, agent, guard


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_retry_never_repeats_an_unsafe_effect_whose_outcome_is_unknown(order, mode):

    from langgraph_replay_guard import ReplayUnsafeError

    sent: list[str] = []
    model, agent, _ = _retry_agent(order, sent)
    cfg = {"configurable": {"thread_id": f"retry-{order}-{mode}"}}
    inputs = {"messages": [HumanMessage("email bob")]}

    def run() -> Any:
        if mode == "sync":
            return agent.invoke(inputs, cfg)
        return async_run.run(agent.ainvoke(inputs, cfg))

    with pytest.raises(ReplayUnsafeError):
        run()
    assert sent == ["bob"]  # once: the retries were refused, not run
    # Nothing was handed to the model as an ordinary tool error.
    messages = agent.get_state(cfg).values["messages"]
    assert not [m for m in messages if isinstance(m, ToolMessage)]
    assert model.calls == 1


@pytest.mark.parametrize("order", ORDERS)
def test_with_on_unsafe_interrupt_a_retry_becomes_an_interrupt_for_a_human(order):

    sent: list[str] = []
    _, agent, guard = _retry_agent(order, sent, on_unsafe="interrupt")
    cfg = {"configurable": {"thread_id": f"retry-interrupt-{order}"}}
    agent.invoke({"messages": [HumanMessage("email bob")]}, cfg)
    interrupts = agent.get_state(cfg).interrupts
    assert len(interrupts) == 1
    assert sent == ["bob"]
    # The operator checked upstream: the email went out.
    guard.guard.resolve(agent, cfg, interrupts[0].value["tool_call_id"], "succeeded", "sent")
    out = agent.invoke(None, cfg)
    assert sent == ["bob"]
    assert out["messages"][-1].text == "done"


def _doc_tools(reads: list[str], document: str | None = None) -> list[Any]:
    """`read_doc` (each read noted in `reads`; it returns `document`, or a short text) and
    `note`."""

    @tool
    def read_doc(id: str) -> str:
        """Read a document."""
        reads.append(id)
        return document or f"document {id}: the refund policy allows 30 days"

    @tool
    def note(text: str) -> str:
        """Take a note."""
        return "noted"

    return [read_doc, note]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    ("summarized", "expected"),
    [(True, ["D1", "D1"]), (False, ["D1"])],
    ids=["summarized-away-runs-again", "still-in-history-is-a-duplicate"],
)
def test_a_re_read_is_a_duplicate_only_while_its_earlier_result_is_in_the_thread(
    order, summarized, expected
):
    # Two notes in between: with a low trigger, Summarization has removed the first read
    # (and its answer) by the time the model asks for it again.
    from langchain.agents.middleware import SummarizationMiddleware

    reads: list[str] = []
    model = ScriptedChatModel(
        script=[
            [("read_doc", {"id": "D1"})],
            [("note", {"text": "a"})],
            [("note", {"text": "b"})],
            [("read_doc", {"id": "D1"})],
            "done",
        ]
    )
    summarize = SummarizationMiddleware(
        ScriptedChatModel(script=["The user asked about refunds."] * 5),
        trigger=("messages", 6 if summarized else 50),
        keep=("messages", 2),
    )
    agent = create_agent(model, _doc_tools(reads), middleware=_stack(order, summarize))
    out = agent.invoke({"messages": [HumanMessage("what is the refund policy?")]})
    assert reads == expected
    last_read = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    assert last_read.text.startswith("document D1") is summarized


DOCUMENT = "document D1: the refund policy allows 30 days. " + "Details follow. " * 40


@pytest.mark.parametrize("order", ORDERS)
def test_a_duplicate_of_a_read_context_editing_cleared_carries_the_whole_result(order):
    # ContextEditing clears old tool outputs in the model's request only; the thread keeps
    # them. The model asks for D1 again after its result was cleared from what it sees: the
    # guard answers the duplicate with the whole earlier result, not "use the result above".
    from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware

    reads: list[str] = []
    model = ScriptedChatModel(
        script=[
            [("read_doc", {"id": "D1"})],
            [("note", {"text": "a"})],
            [("read_doc", {"id": "D1"})],
            "done",
        ]
    )
    editing = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=50, keep=1)])
    agent = create_agent(model, _doc_tools(reads, DOCUMENT), middleware=_stack(order, editing))
    out = agent.invoke({"messages": [HumanMessage("what is the refund policy?")]})
    assert reads == ["D1"]
    # What the model saw of the first read when it asked again: cleared.
    seen_first = next(m for m in model.seen[2] if isinstance(m, ToolMessage))
    assert DOCUMENT not in seen_first.text
    duplicate = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    assert duplicate.text.startswith("Not executed")
    assert DOCUMENT in duplicate.text


def test_each_repeat_of_a_read_carries_the_read_result_not_an_earlier_refusal():
    reads: list[str] = []
    model = ScriptedChatModel.looping("read_doc", {"id": "D1"}, times=3)
    tools = _doc_tools(reads, DOCUMENT)
    agent = create_agent(model, tools, middleware=[ReplayGuardMiddleware()])
    out = agent.invoke({"messages": [HumanMessage("what is the refund policy?")]})
    assert reads == ["D1"]
    repeats = [m.text for m in out["messages"] if isinstance(m, ToolMessage)][1:3]
    assert len(repeats) == 2
    for text in repeats:
        assert text.count("Not executed") == 1
        assert DOCUMENT in text


def _edit_every_review(agent: Any, cfg: dict[str, Any], args: dict[str, Any]) -> Any:
    """Answer every HITL review (batched or per call) with an edit to `args`."""
    out = None
    for _ in range(10):
        interrupts = agent.get_state(cfg).interrupts
        if not interrupts:
            return out
        edit = {"type": "edit", "edited_action": {"name": "lookup", "args": args}}
        if interrupts[0].value.get("type") == "tool_approval":  # per call: one answer by id
            out = agent.invoke(Command(resume={i.id: edit for i in interrupts}), cfg)
        else:
            out = agent.invoke(Command(resume={"decisions": [edit]}), cfg)
    return out


@pytest.mark.parametrize("interrupt_mode", ["batched", "per_call"])
@pytest.mark.parametrize("order", ["guard-first", "guard-last"])
def test_an_edited_read_runs_with_the_edited_arguments(order, interrupt_mode):
    # The model reads P1, then asks for P1 again; the reviewer edits the second call to P2.
    # The guard decides on what runs (a new read), not on the model's duplicate.
    runs: Counter[str] = Counter()
    seen: list[str] = []

    @tool
    def lookup(id: str) -> str:
        """Look a customer up."""
        seen.append(id)
        return f"{id}: premium plan"

    model = ScriptedChatModel(
        script=[[("lookup", {"id": "P1"})], [("lookup", {"id": "P1"})], "done"]
    )
    hitl = HumanInTheLoopMiddleware(
        interrupt_on={"lookup": {"allowed_decisions": ["approve", "edit", "reject"]}},
        interrupt_mode=interrupt_mode,
    )
    agent = create_agent(
        model,
        [lookup, counted_tools(runs)["send_email"]],
        middleware=_stack(order, hitl),
        checkpointer=InMemorySaver(),
    )
    cfg = {"configurable": {"thread_id": f"edit-{order}-{interrupt_mode}"}}
    agent.invoke({"messages": [HumanMessage("who are P1 and P2?")]}, cfg)
    approve = {"type": "approve"}
    interrupts = agent.get_state(cfg).interrupts
    if interrupts[0].value.get("type") == "tool_approval":
        agent.invoke(Command(resume={i.id: approve for i in interrupts}), cfg)
    else:
        agent.invoke(Command(resume={"decisions": [approve]}), cfg)
    out = _edit_every_review(agent, cfg, {"id": "P2"})
    assert seen == ["P1", "P2"]
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "P2: premium plan" in answers[-1].text


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_cache_inside_the_guard_counts_but_is_never_the_tools_result(mode):
    # The cache sits inside the guard (after it in the list): the guard sees each call, but
    # the cache answers the repeats itself. They count toward the loop; none of them is
    # recorded as the tool's result (the guard's channel keeps the tool's own answer only).
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=30)
    guard = ReplayGuardMiddleware(dedup=False)
    agent = create_agent(
        model, _tools(runs), middleware=[guard, _Cache()], checkpointer=InMemorySaver()
    )
    cfg = {"configurable": {"thread_id": f"cache-inside-{mode}"}}
    inputs = {"messages": [HumanMessage("who is P1?")]}
    run = agent.invoke if mode == "sync" else (lambda i, c: async_run.run(agent.ainvoke(i, c)))
    out = run(inputs, cfg)
    assert runs["lookup"] == 1
    assert model.calls == 4  # the documented stop: the 4th identical call
    assert _stopped(out["messages"]) == "repeat_limit"
    view = guard.guard.inspect(agent.get_state(cfg))
    assert [call.outcome for call in view.recent_calls] == ["success"]  # the real run only


def test_an_unknown_outcome_names_the_arguments_the_edited_call_ran_with():
    # The guard comes first and claims the model's call (to bob); the reviewer edits it to
    # alice inside the guard; the connection drops after the email went out. The operator
    # must check the email that was sent: alice's.
    from langgraph.store.memory import InMemoryStore

    from langgraph_replay_guard import ReplayUnsafeError

    sent: list[str] = []
    model = ScriptedChatModel(script=[[("send_email", {"to": "bob", "body": "hi"})], "done"])
    hitl = HumanInTheLoopMiddleware(interrupt_on={"send_email": True}, interrupt_mode="per_call")
    guard = ReplayGuardMiddleware(tools={"send_email": "unsafe"})
    agent = create_agent(
        model,
        [_flaky_send(sent)],
        middleware=[guard, hitl],
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    cfg = {"configurable": {"thread_id": "edited-unknown"}}
    agent.invoke({"messages": [HumanMessage("email bob")]}, cfg)
    (review,) = agent.get_state(cfg).interrupts
    edit = {
        "type": "edit",
        "edited_action": {"name": "send_email", "args": {"to": "alice", "body": "hi"}},
    }
    with pytest.raises(ConnectionError):
        agent.invoke(Command(resume={review.id: edit}), cfg)
    assert sent == ["alice"]
    with pytest.raises(ReplayUnsafeError) as unknown:
        agent.invoke(None, cfg)
    assert unknown.value.facts["args"] == {"to": "alice", "body": "hi"}
    assert "alice" in str(unknown.value)
    assert sent == ["alice"]


def test_an_edited_call_keeps_the_class_its_mcp_annotations_give():
    # `ring_bell` has no policy, but its MCP annotations say destructive: unsafe, claimed in
    # the ledger before it runs. The reviewer edits the second call into a copy of the first;
    # the guard re-decides the edited call, and must do so with the class the annotations
    # gave, not the default (`pure`, recorded only after it ran).
    from langchain_core.tools import StructuredTool
    from langgraph.store.memory import InMemoryStore

    from langgraph_replay_guard.replay.ledger import row_namespace

    rings: list[str] = []

    def ring_bell(room: str) -> str:
        """Ring the bell in a room."""
        rings.append(room)
        return f"rang in {room}"

    bell = StructuredTool.from_function(ring_bell, metadata={"destructiveHint": True})
    store = InMemoryStore()
    model = ScriptedChatModel(
        script=[[("ring_bell", {"room": "hall"})], [("ring_bell", {"room": "attic"})], "done"]
    )
    hitl = HumanInTheLoopMiddleware(
        interrupt_on={"ring_bell": {"allowed_decisions": ["approve", "edit"]}},
        interrupt_mode="per_call",
    )
    agent = create_agent(
        model,
        [bell],
        middleware=[hitl, ReplayGuardMiddleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )
    cfg = {"configurable": {"thread_id": "edited-annotated"}}
    agent.invoke({"messages": [HumanMessage("ring twice")]}, cfg)
    (review,) = agent.get_state(cfg).interrupts
    agent.invoke(Command(resume={review.id: {"type": "approve"}}), cfg)
    (review,) = agent.get_state(cfg).interrupts
    edit = {"type": "edit", "edited_action": {"name": "ring_bell", "args": {"room": "hall"}}}
    agent.invoke(Command(resume={review.id: edit}), cfg)
    assert rings == ["hall", "hall"]
    rows = store.search(row_namespace(("replay_guard",), "edited-annotated"))
    assert sorted(row.value["replay"] for row in rows) == ["unsafe", "unsafe"]


MODES = ["sync", "async", "astream"]


def _invoke(agent: Any, inputs: Any, cfg: dict[str, Any], mode: str, **options: Any) -> Any:
    """Run the agent with `invoke`, `ainvoke`, or `astream` (the last streamed state)."""
    if mode == "sync":
        return agent.invoke(inputs, cfg, **options)
    if mode == "async":
        return async_run.run(agent.ainvoke(inputs, cfg, **options))

    async def stream() -> Any:
        last = None
        async for state in agent.astream(inputs, cfg, stream_mode="values", **options):
            last = state
        return last

    return async_run.run(stream())


def _selector_agent(
    order: str | None, script: ScriptedChatModel, runs: Counter[str], **guard_options: Any
) -> tuple[Any, LLMToolSelectorMiddleware, ReplayGuardMiddleware | None]:
    """An agent whose selector offers the model `lookup` only (of lookup, quote, send_email)."""
    selector = LLMToolSelectorMiddleware(model=selector_model("lookup"))
    guard = ReplayGuardMiddleware(**guard_options) if order else None
    middleware = _stack(order, selector, guard) if order else [selector]
    agent = create_agent(script, _tools(runs), middleware=middleware, checkpointer=InMemorySaver())
    return agent, selector, guard


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
def test_a_repeated_call_to_a_tool_outside_the_selection_is_stopped(order, mode):
    # The selector offers `lookup` only; the model calls `quote` anyway. The tools node has
    # every tool of the agent, so `quote` runs: the call counts like any other, and the
    # repeats are answered by the guard, never taken for the tool's result.
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("quote", {"item": "tea"}, times=20)
    agent, selector, guard = _selector_agent(order, model, runs)
    cfg = {"configurable": {"thread_id": f"selector-{order}-{mode}"}}
    out = _invoke(agent, {"messages": [HumanMessage("price tea")]}, cfg, mode)
    assert runs["quote"] == 1
    assert model.calls == 4
    assert selector.model.calls == 4  # a selection before every model call
    assert _stopped(out["messages"]) == "repeat_limit"  # a repeat, not a tool that is missing
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert answers[0].text == "tea costs 3 EUR"
    assert [m.status for m in answers[1:]] == ["error"] * 3
    view = guard.guard.inspect(agent.get_state(cfg))
    assert [(c.tool, c.outcome) for c in view.recent_calls] == [("quote", "success")]


def test_without_the_guard_a_call_outside_the_selection_runs_every_time():
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("quote", {"item": "tea"}, times=20)
    agent, _, _ = _selector_agent(None, model, runs)
    agent.invoke({"messages": [HumanMessage("price tea")]}, {"configurable": {"thread_id": "s"}})
    assert runs["quote"] == 20
    assert model.calls == 21


@pytest.mark.parametrize("order", ORDERS)
def test_calls_to_tools_outside_the_selection_are_not_taken_for_missing_tools(order):
    # Five different quotes in one batch: the tools node runs them all (the unguarded run
    # does). Inside the selector the guard took them for "tools that do not exist" when it
    # knew the agent's tools only from its model request, the selection.
    runs: Counter[str] = Counter()
    model = ScriptedChatModel(script=[[("quote", {"item": i}) for i in "abcde"], "ok"])
    agent, _, _ = _selector_agent(order, model, runs)
    out = agent.invoke({"messages": [HumanMessage("price")]}, {"configurable": {"thread_id": "u"}})
    assert runs["quote"] == 5
    assert _stopped(out["messages"]) is None
    assert out["messages"][-1].text == "ok"


@pytest.mark.parametrize("order", ORDERS)
def test_a_policy_for_a_tool_outside_the_selection_is_not_reported_as_a_typo(order):
    # `send_email` is one of the agent's tools; the selector just did not offer it this turn.
    import warnings

    from langgraph_replay_guard import ReplayGuardWarning

    model = ScriptedChatModel(script=[[("lookup", {"id": "P1"})], "ok"])
    agent, _, _ = _selector_agent(order, model, Counter(), tools={"send_email": "unsafe"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent.invoke({"messages": [HumanMessage("who?")]}, {"configurable": {"thread_id": "w"}})
    typos = [
        w for w in caught if issubclass(w.category, ReplayGuardWarning) and "no such tool" in str(w)
    ]
    assert typos == []


def _auto_mode_agent(
    order: str | None,
    model: ScriptedChatModel,
    runs: Counter[str],
    classifier: ScriptedClassifier,
    store: Any = None,
) -> tuple[Any, ReplayGuardMiddleware | None]:
    """An agent whose `send_email` calls AutoMode classifies first (`send_email` unsafe)."""
    auto = AutoModeMiddleware(tools=["send_email"], classifier=classifier)
    guard = ReplayGuardMiddleware(tools={"send_email": "unsafe"}) if order else None
    middleware = _stack(order, auto, guard) if order else [auto]
    agent = create_agent(
        model, _tools(runs), middleware=middleware, checkpointer=InMemorySaver(), store=store
    )
    return agent, guard


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
def test_a_call_auto_mode_blocks_asked_again_is_stopped(order, mode):
    # AutoMode answers a risky call itself (an error, the tool not run): inside the guard
    # (guard first) or before the guard's tool hook sees it (guard last). Either way the call
    # counts, and the blocked answer is never recorded as the tool's result.
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("send_email", {"to": "bob", "body": "hi"}, times=20)
    classifier = ScriptedClassifier(risky=frozenset({"send_email"}))
    agent, guard = _auto_mode_agent(order, model, runs, classifier, InMemoryStore())
    cfg = {"configurable": {"thread_id": f"auto-{order}-{mode}"}}
    out = _invoke(agent, {"messages": [HumanMessage("email bob")]}, cfg, mode)
    assert runs["send_email"] == 0
    assert model.calls == 4
    assert len(classifier.seen) == 3  # the 4th identical call is stopped before AutoMode
    assert _stopped(out["messages"]) == "repeat_limit"
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert all(m.status == "error" for m in answers)
    assert all("was blocked" in m.text for m in answers[:3])
    view = guard.guard.inspect(agent.get_state(cfg))
    assert view.recent_calls == ()  # nothing ran: nothing to answer a later call from


def test_without_the_guard_a_call_auto_mode_blocks_is_asked_again_every_time():
    runs: Counter[str] = Counter()
    model = ScriptedChatModel.looping("send_email", {"to": "bob", "body": "hi"}, times=20)
    classifier = ScriptedClassifier(risky=frozenset({"send_email"}))
    agent, _ = _auto_mode_agent(None, model, runs, classifier)
    agent.invoke({"messages": [HumanMessage("email bob")]}, {"configurable": {"thread_id": "a"}})
    assert model.calls == 21
    assert len(classifier.seen) == 20


def _replay_from_before_the_tools(agent: Any, cfg: dict[str, Any], mode: str) -> Any:
    """Run the thread again from its checkpoint before the tools node (a replay)."""
    before_tools = next(s for s in agent.get_state_history(cfg) if s.next == ("tools",))
    return _invoke(agent, None, before_tools.config, mode, durability="sync")


# An InMemorySaver is enough in one process; the guard warns that it is not durable.
@pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
def test_an_unsafe_call_auto_mode_lets_through_runs_once_and_is_in_the_ledger(order, mode):
    from langgraph_replay_guard.replay.ledger import row_namespace

    runs: Counter[str] = Counter()
    send = {"to": "bob", "body": "hi"}
    model = ScriptedChatModel(script=[[("send_email", send)], "Sent.", "Sent."])
    classifier = ScriptedClassifier()  # nothing is risky
    store = InMemoryStore()
    agent, _ = _auto_mode_agent(order, model, runs, classifier, store)
    thread = f"auto-unsafe-{order}-{mode}"
    cfg = {"configurable": {"thread_id": thread}}
    out = _invoke(agent, {"messages": [HumanMessage("email bob")]}, cfg, mode, durability="sync")
    assert runs["send_email"] == 1
    assert out["messages"][-1].text == "Sent."
    # Replayed from before the tools node: the ledger answers, the email is not sent again.
    out = _replay_from_before_the_tools(agent, cfg, mode)
    assert runs["send_email"] == 1
    assert [m.text for m in out["messages"] if isinstance(m, ToolMessage)] == ["sent to bob"]
    (row,) = [item.value for item in store.search(row_namespace(("replay_guard",), thread))]
    assert (row["tool"], row["replay"], row["status"]) == ("send_email", "unsafe", "completed")
    assert row["args"] == send
    assert row["ran_args"] is None  # it ran with the arguments the model gave
    assert row["attempts"] == 1
    assert classifier.seen[0]["args"] == send


def test_without_the_guard_a_replay_sends_the_email_again():
    runs: Counter[str] = Counter()
    model = ScriptedChatModel(script=[[("send_email", {"to": "bob", "body": "hi"})], "Sent."])
    agent, _ = _auto_mode_agent(None, model, runs, ScriptedClassifier())
    cfg = {"configurable": {"thread_id": "auto-unsafe-plain"}}
    agent.invoke({"messages": [HumanMessage("email bob")]}, cfg)
    _replay_from_before_the_tools(agent, cfg, "sync")
    assert runs["send_email"] == 2
