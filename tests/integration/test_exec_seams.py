"""What runs under the claim (issue 32, seams 3, 4, 5 and 7): effects counted by real tool bodies.

- Seam 3: a tool a middleware inside the guard supplies (a swapped tool, a tool the middleware
  serves itself, a HITL edit that redirects a call) runs claimed; a SIGKILL inside its body is
  an unknown outcome on resume, never a second send (real processes, `proc_exec_seams.py`).
- Seam 4: a control-flow signal after the body started (a nested guard's stop, any other
  `GraphBubbleUp`, a sub-agent's interrupt) is an unknown outcome, not an `interrupt()`.
- Seam 5: a tool class that does its work in its own `_run`/`_arun` is never taken for "not
  started" when it raises.
- Seam 7: a tool's `Command` replayed from the ledger is the whole Command: a hand-off
  (`graph=Command.PARENT`, `goto`) replayed after a sibling failed still reaches its target.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool, Tool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphBubbleUp, ParentCommand
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command, Send, interrupt
from pydantic import BaseModel

from langgraph_replay_guard import ReplayGuard, ReplayGuardMiddleware, ReplayUnsafeError
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import async_run, warm_children
from tests.integration.replay_graphs import asking_model, replay_graph

os.environ["LANGSMITH_TRACING"] = "false"

pytestmark = pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")

MODES = ["sync", "async"]
HOW = ["wrap", "middleware"]


def _agent(how: str, tools: list[Any], name: str, policy: dict[str, Any]) -> Any:
    """A graph whose model asks `name(to="ann")` once, guarded by `guard.wrap` or the middleware."""
    model = asking_model([(name, {"to": "ann"})])
    store, saver = InMemoryStore(), InMemorySaver()
    if how == "wrap":
        return replay_graph(
            ReplayGuard(tools=policy, store=store), model, tools, checkpointer=saver
        )
    middleware = [ReplayGuardMiddleware(tools=policy)]
    return create_agent(model, tools, middleware=middleware, checkpointer=saver, store=store)


def _run_and_resume(graph: Any, mode: str, thread: str, resumes: int = 2) -> list[str]:
    """One run and `resumes` resumes of a thread; what each ended with (an error's class)."""
    config = {"configurable": {"thread_id": thread}}
    ended = []
    for inputs in [{"messages": [HumanMessage("go")]}] + [None] * resumes:
        try:
            if mode == "sync":
                graph.invoke(inputs, config, durability="sync")
            else:
                async_run.run(graph.ainvoke(inputs, config, durability="sync"))
            ended.append("done")
        except ReplayUnsafeError:
            ended.append("ReplayUnsafeError")
        except Exception as exc:
            ended.append(type(exc).__name__)
    return ended


# -- seam 5: "not started" is proven, never assumed ----------------------------------------------


class _To(BaseModel):
    to: str


class _SendingStructuredTool(StructuredTool):
    """A StructuredTool with `func=None` that does its work in its own `_run`/`_arun`."""

    effects: Any  # Any: pydantic keeps the very list (a list field would be copied)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        self.effects.append("send")
        msg = "connection reset after the message went out"
        raise ConnectionError(msg)

    async def _arun(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(*args, **kwargs)


class _SendingTool(Tool):
    """A single-input `Tool` with `func=None` and its own `_run` (no `_arun`: LangChain runs
    `_run` in an executor for `ainvoke`)."""

    effects: Any  # Any: pydantic keeps the very list (a list field would be copied)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        self.effects.append("send")
        msg = "connection reset after the message went out"
        raise ConnectionError(msg)


def _own_run_tool(kind: str, effects: list[str]) -> Any:
    if kind == "StructuredTool":
        return _SendingStructuredTool(
            name="send", description="Send.", args_schema=_To, func=None, effects=effects
        )
    return _SendingTool(name="send", description="Send.", func=None, effects=effects)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("kind", ["StructuredTool", "Tool"])
def test_a_tool_class_with_its_own_run_that_raises_after_sending_is_never_resent(kind, how, mode):
    effects: list[str] = []
    graph = _agent(how, [_own_run_tool(kind, effects)], "send", {"send": "unsafe"})
    ended = _run_and_resume(graph, mode, f"own-run-{kind}-{how}-{mode}")
    assert effects == ["send"]
    assert ended == ["ConnectionError", "ReplayUnsafeError", "ReplayUnsafeError"]


def _async_only_send(effects: list[str]) -> Any:
    async def send(to: str) -> str:
        """Send."""
        effects.append("send")
        return f"Sent to {to}"

    return StructuredTool.from_function(coroutine=send, name="send", description="Send.")


class _SendsThenInvokes(AgentMiddleware):
    """Outside the guard: hands down a copy whose replaced `invoke` sends, then runs the tool."""

    def __init__(self, effects: list[str]) -> None:
        super().__init__()
        self.effects = effects

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        real, effects = request.tool.invoke, self.effects

        def invoke(input: Any, config: Any = None, **kwargs: Any) -> Any:
            effects.append("send (in the replaced invoke)")
            return real(input, config, **kwargs)

        replaced = request.tool.model_copy()
        object.__setattr__(replaced, "invoke", invoke)
        return handler(request.override(tool=replaced))


def test_a_tool_whose_invoke_was_replaced_is_not_proven_unstarted():
    # The async-only tool run through `invoke` is refused by LangChain before its coroutine
    # starts, but a middleware outside the guard replaced `invoke` with code that sends
    # first: the guard did not wrap the code that ran, so the refusal proves nothing.
    effects: list[str] = []
    model = asking_model([("send", {"to": "ann"})])
    agent = create_agent(
        model,
        [_async_only_send(effects)],
        middleware=[_SendsThenInvokes(effects), ReplayGuardMiddleware(tools={"send": "unsafe"})],
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    ended = _run_and_resume(agent, "sync", "replaced-invoke")
    assert effects == ["send (in the replaced invoke)"]
    assert ended == ["NotImplementedError", "ReplayUnsafeError", "ReplayUnsafeError"]


def test_an_async_only_tool_refused_before_its_body_is_still_free_to_run_again():
    # The proof the guard keeps: LangChain's own code refuses the sync run of the coroutine
    # the guard wrapped before calling it, so nothing can have happened.
    effects: list[str] = []
    graph = _agent("middleware", [_async_only_send(effects)], "send", {"send": "unsafe"})
    ended = _run_and_resume(graph, "sync", "async-only", resumes=1)
    assert effects == []
    assert ended == ["NotImplementedError", "NotImplementedError"]


# -- seam 4: a control-flow signal after the body started is an unknown outcome ---------------


def _looping_sub_agent() -> Any:
    """A sub-agent with its own guard, whose scripted model loops: the guard raises its stop."""

    @tool
    def lookup(id: str) -> str:
        """Look a record up."""
        return f"record {id}"

    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=30)
    guard = ReplayGuardMiddleware(exit_behavior="error", name="sub")
    return create_agent(model, [lookup], middleware=[guard])


class _Escalated(GraphBubbleUp):
    """A control-flow signal of a library's own (a GraphBubbleUp that is no interrupt)."""


def _refund(effects: list[str], then: str) -> Any:
    """An unsafe refund that records its effect, then meets a control-flow signal."""

    def after_the_effect() -> None:
        if then == "sub-agent-stop":
            _looping_sub_agent().invoke({"messages": [HumanMessage("check P1")]})
        elif then == "bubble-up":
            msg = "escalated to a supervisor"
            raise _Escalated(msg)
        elif then == "parent-command":
            raise ParentCommand(Command(graph=Command.PARENT, goto="billing"))

    @tool
    def refund(to: str) -> str:
        """Refund a customer."""
        effects.append("refund")
        after_the_effect()
        return f"Refunded {to}"

    @tool("refund")
    async def arefund(to: str) -> str:
        """Refund a customer."""
        effects.append("refund")
        after_the_effect()
        return f"Refunded {to}"

    return refund, arefund


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("then", ["sub-agent-stop", "bubble-up", "parent-command"])
def test_a_control_flow_signal_after_the_refund_is_an_unknown_outcome(then, how, mode):
    effects: list[str] = []
    refund, arefund = _refund(effects, then)
    graph = _agent(how, [refund if mode == "sync" else arefund], "refund", {"refund": "unsafe"})
    ended = _run_and_resume(graph, mode, f"signal-{then}-{how}-{mode}")
    assert effects == ["refund"]  # unguarded: 3 refunds
    assert ended[1:] == ["ReplayUnsafeError", "ReplayUnsafeError"]
    assert ended[0] != "done"


def _sub_agent_asking_a_human() -> Any:
    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt({"question": "approve the refund?"})
        return {"messages": [AIMessage(f"human said {answer}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    return builder.compile()


@pytest.mark.parametrize("how", HOW)
def test_a_sub_agents_interrupt_after_the_refund_is_not_the_tools_own(how):
    # LangGraph reruns the tool on resume, refund included: only the tool's own interrupt()
    # (which the tool places before its effect) is a pause the ledger lets run again.
    effects: list[str] = []
    sub = _sub_agent_asking_a_human()

    @tool
    def refund(to: str) -> str:
        """Refund a customer, then have a sub-agent ask a human."""
        effects.append("refund")
        sub.invoke({"messages": [HumanMessage("ask")]})
        return f"Refunded {to}"

    graph = _agent(how, [refund], "refund", {"refund": "unsafe"})
    config = {"configurable": {"thread_id": f"sub-interrupt-{how}"}}
    graph.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    assert graph.get_state(config).interrupts
    with pytest.raises(ReplayUnsafeError):
        graph.invoke(Command(resume="yes"), config, durability="sync")
    assert effects == ["refund"]


@pytest.mark.parametrize("how", HOW)
def test_the_tools_own_interrupt_before_its_effect_still_runs_again_on_resume(how):
    effects: list[str] = []

    @tool
    def refund(to: str) -> str:
        """Ask a human, then refund."""
        if interrupt({"approve": to}) != "yes":
            return "Not approved"
        effects.append("refund")
        return f"Refunded {to}"

    graph = _agent(how, [refund], "refund", {"refund": "unsafe"})
    config = {"configurable": {"thread_id": f"own-interrupt-{how}"}}
    graph.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    assert graph.get_state(config).interrupts
    out = graph.invoke(Command(resume="yes"), config, durability="sync")
    assert effects == ["refund"]
    assert any(isinstance(m, ToolMessage) and m.text == "Refunded ann" for m in out["messages"])


# -- seam 7: a replayed Command is the whole Command ----------------------------------------------


class _Routed(MessagesState):
    route: str


def _hand_off_app(guarded: bool, effects: list[str]) -> Any:
    """A triage agent whose batch hands off to billing and looks a record up (which fails
    once, after the hand-off ran): the resumed batch replays the hand-off."""

    @tool
    def transfer_to_billing(tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Hand the customer over to billing."""
        effects.append("hand-off")
        # The sibling's failure ends the step first: 0.2 s was once not enough in CI (four
        # workers on two cores), and the hand-off's write was kept.
        time.sleep(1.0)
        message = ToolMessage("Transferred to billing", tool_call_id=tool_call_id)
        return Command(
            graph=Command.PARENT,
            goto="billing",
            update={"messages": [message], "route": "billing"},
        )

    @tool
    def lookup(id: str) -> str:
        """Look a record up (the first try times out)."""
        effects.append("lookup")
        if effects.count("lookup") == 1:
            msg = "lookup timed out"
            raise TimeoutError(msg)
        return f"record {id}"

    model = ScriptedChatModel(
        script=[[("transfer_to_billing", {}), ("lookup", {"id": "P1"})]],
        final="Done (no hand-off)",
    )
    middleware = [ReplayGuardMiddleware(tools={"transfer_to_billing": "unsafe"})] if guarded else []
    triage = create_agent(
        model, [transfer_to_billing, lookup], middleware=middleware, name="triage"
    )

    def billing(state: _Routed) -> dict[str, Any]:
        return {"messages": [AIMessage("Billing here: how can I help?")]}

    builder = StateGraph(_Routed)
    builder.add_node("triage", triage, destinations=("billing",))
    builder.add_node("billing", billing)
    builder.add_edge(START, "triage")
    builder.add_edge("billing", END)
    return builder.compile(checkpointer=InMemorySaver(), store=InMemoryStore())


def _resumed_hand_off(app: Any, mode: str, thread: str) -> dict[str, Any]:
    """Run the batch (sync: an async step would cancel the hand-off when its sibling fails,
    an unknown outcome), then resume it in `mode`."""
    config = {"configurable": {"thread_id": thread}}
    with pytest.raises(TimeoutError):
        app.invoke({"messages": [HumanMessage("I was billed twice")]}, config, durability="sync")
    if mode == "sync":
        out: dict[str, Any] = app.invoke(None, config, durability="sync")
    else:
        out = async_run.run(app.ainvoke(None, config, durability="sync"))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_hand_off_replayed_from_the_ledger_still_reaches_its_target(mode):
    effects: list[str] = []
    out = _resumed_hand_off(_hand_off_app(True, effects), mode, f"hand-off-{mode}")
    assert effects.count("hand-off") == 1  # replayed, not run again
    texts = [m.text for m in out["messages"]]
    assert texts[-1] == "Billing here: how can I help?"
    assert "Done (no hand-off)" not in texts
    assert out["route"] == "billing"
    replayed = [
        m for m in out["messages"] if isinstance(m, ToolMessage) and "Transferred" in m.text
    ]
    assert replayed[-1].response_metadata.get("replay_guard") == "replayed"


def test_without_the_guard_the_hand_off_runs_again_and_reaches_billing():
    effects: list[str] = []
    out = _resumed_hand_off(_hand_off_app(False, effects), "sync", "hand-off-plain")
    assert effects.count("hand-off") == 2
    assert out["messages"][-1].text == "Billing here: how can I help?"


def test_a_recorded_command_comes_back_whole_through_a_store():
    # Every part of a Command a tool returned survives the ledger row (a JSON store value):
    # its graph, goto (Send packets included), resume and update, the ToolMessage inside
    # answering the call being replayed.
    from langgraph_replay_guard.integrations.ledger_gate import _command_update, replayed_result
    from langgraph_replay_guard.replay.ledger import LedgerEntry, finished_entry

    message = ToolMessage("Transferred", tool_call_id="call_old", name="transfer")
    command = Command(
        graph=Command.PARENT,
        goto=[Send("billing", {"invoice": 7}), "audit"],
        update={"messages": [message], "route": "billing"},
        resume={"approved": True},
    )
    entry = LedgerEntry(key="k", tool="transfer", tool_call_id="call_old", status="started")
    done = finished_entry(entry, message.content, None, "success", update=_command_update(command))
    stored = json.loads(json.dumps(done.to_value()))  # what any store keeps
    again, sends = replayed_result(
        LedgerEntry.from_value("k", stored), {"id": "call_new", "name": "transfer"}
    )
    assert sends == []
    assert isinstance(again, Command)
    assert again.graph == Command.PARENT
    assert again.goto == [Send("billing", {"invoice": 7}), "audit"]
    assert again.resume == {"approved": True}
    assert again.update["route"] == "billing"
    (replayed,) = again.update["messages"]
    assert replayed.tool_call_id == "call_new"
    assert replayed.text == "Transferred"


# -- seam 3: what a middleware inside the guard runs is claimed -----------------------------------

CHILD = Path(__file__).with_name("proc_exec_seams.py")


def _child(
    case: str, order: str, phase: str, root: Path, mode: str = "sync"
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LANGSMITH_TRACING": "false"}
    return warm_children.run(
        [sys.executable, str(CHILD), case, order, phase, str(root), mode],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _sends(root: Path) -> int:
    effects = root / "effects"
    return len(effects.read_text().splitlines()) if effects.exists() else 0


@pytest.mark.parametrize(
    ("case", "order", "mode"),
    [
        ("swap", "guard-first", "sync"),
        ("serve", "guard-first", "sync"),
        ("redirect", "guard-first", "sync"),
        ("swap", "guard-first", "async"),
        ("serve", "guard-first", "async"),
        ("redirect", "guard-first", "async"),
        ("swap", "guard-last", "sync"),
        ("redirect", "guard-last", "sync"),
    ],
)
def test_a_send_killed_inside_a_body_a_middleware_supplies_is_never_sent_twice(
    case, order, mode, tmp_path
):
    first = _child(case, order, "run", tmp_path, mode)
    assert first.returncode == -9, first.stderr[-3000:]  # SIGKILL inside the body
    assert _sends(tmp_path) == 1
    # Two resumes where the seam was (guard first, sync); one elsewhere, to keep it short.
    for _ in range(2 if (order, mode) == ("guard-first", "sync") else 1):
        resumed = _report(_child(case, order, "resume", tmp_path, mode))
        assert resumed["status"] == "ReplayUnsafeError"
    assert _sends(tmp_path) == 1  # without the claim (guard first on 25e8adf): 2 sends


@pytest.mark.parametrize("case", ["swap", "serve", "redirect"])
def test_a_send_a_middleware_supplies_killed_after_it_returned_is_replayed(case, tmp_path):
    # The process dies after the call came back out of every middleware, before LangGraph
    # saved its answer: the ledger has the outcome (for `serve`, the answer the middleware
    # returned under the guard's claim), and the resumed run replays it.
    first = _child(case, "guard-first", "run-after", tmp_path)
    assert first.returncode == -9, first.stderr[-3000:]
    resumed = _report(_child(case, "guard-first", "resume", tmp_path))
    assert resumed["status"] == "done"
    assert any("Sent to ann" in text for text in resumed["texts"])
    assert resumed["texts"][-1] == "Done."
    assert _sends(tmp_path) == 1


class _PassThrough(AgentMiddleware):
    """A middleware inside the guard that changes nothing (the call is handed down)."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


@pytest.mark.parametrize("mode", MODES)
def test_an_idempotent_call_claimed_before_it_is_handed_down_keeps_one_key(mode):
    # The guard claims the call before the middlewares inside it run: the tool below runs
    # under that claim with its key, and the resumed retry gets the same key.
    keys: list[str] = []

    @tool
    def charge(amount: int, idempotency_key: str) -> str:
        """Charge a card (the payment API deduplicates by key)."""
        keys.append(idempotency_key)
        if len(keys) == 1:
            msg = "payment API timed out"
            raise ConnectionError(msg)
        return f"Charged {amount}"

    policy = {"charge": {"replay": "idempotent", "idempotency_key_arg": "idempotency_key"}}
    agent = create_agent(
        asking_model([("charge", {"amount": 20})]),
        [charge],
        middleware=[ReplayGuardMiddleware(tools=policy), _PassThrough()],
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    ended = _run_and_resume(agent, mode, f"idempotent-handed-{mode}", resumes=1)
    assert ended == ["ConnectionError", "done"]
    assert len(keys) == 2
    assert keys[0] == keys[1] != ""


def test_a_deep_agents_sub_agent_review_is_a_pause_of_the_task_tool():
    # deepagents' `task` is unsafe, and its sub-agent's `interrupt_on` review reaches the
    # task tool as the sub-agent's interrupt, not the tool's own. The deepagents toolkit
    # names it a pause (`no_effect_errors`): on resume the sub-agent goes on where it stopped.
    deepagents = pytest.importorskip("deepagents", reason="the stacks extra")
    sent: list[str] = []

    @tool
    def send(to: str) -> str:
        """Send a message."""
        sent.append(to)
        return f"Sent to {to}"

    def step(messages: list[Any]) -> Any:
        last = messages[-1]
        if isinstance(last, HumanMessage) and last.text == "mail ann":
            return [("task", {"description": "send the mail", "subagent_type": "mailer"})]
        if isinstance(last, HumanMessage):  # the sub-agent's input
            return [("send", {"to": "ann"})]
        return "Done."

    mailer = {
        "name": "mailer",
        "description": "Sends mail.",
        "system_prompt": "Send mail.",
        "tools": [send],
        "interrupt_on": {"send": True},
    }
    agent = deepagents.create_deep_agent(
        ScriptedChatModel(script=[step] * 10),
        [send],
        subagents=[mailer],
        middleware=[ReplayGuardMiddleware(toolkits=["deepagents"])],
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    config = {"configurable": {"thread_id": "sub-agent-review"}}
    agent.invoke({"messages": [HumanMessage("mail ann")]}, config, durability="sync")
    assert agent.get_state(config).interrupts
    approve = Command(resume={"decisions": [{"type": "approve"}]})
    agent.invoke(approve, config, durability="sync")
    assert sent == ["ann"]
    assert not agent.get_state(config).interrupts
