"""The compositions of the crash matrix: one small builder per way the guard sits in a stack.

Each builder takes `checkpointer=`, `store=` and `guarded=` (False: the same composition
without the guard, to compare clean runs) and returns the compiled graph, as
`replay-guard crashtest` wants. The scripted models decide from the messages alone (the
same calls in every process), and every tool body with a side effect counts it with
`crashtest.effect` (the matrix counts effects by tool and arguments, whatever tool call id or
node they ran under). `COMPOSITIONS` lists them with their input and interrupt answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    HumanInTheLoopMiddleware,
    ToolErrorMiddleware,
    ToolRetryMiddleware,
)
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import StructuredTool, tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, ToolRuntime
from langgraph.store.base import BaseStore
from langgraph.types import Command, Send, interrupt
from pydantic import BaseModel

from langgraph_replay_guard import ReplayGuard, ReplayGuardState
from langgraph_replay_guard.crashtest import effect
from langgraph_replay_guard.integrations.ledger_gate import IDEMPOTENCY_KEY_CONFIG
from langgraph_replay_guard.testing import ScriptedChatModel

POLICY = {
    "send": "unsafe",
    "notify": "unsafe",
    "approve_send": "unsafe",
    "hand_off": "unsafe",
    "ask_worker": "unsafe",
    "transfer": "unsafe",
    "page": {"replay": "unsafe", "no_effect_errors": ["ConnectionRefusedError"]},
    # Its ValueError (a bad address) is raised before anything is sent: a retry may run.
    "mail": {"replay": "unsafe", "no_effect_errors": ["ValueError"]},
    "charge": "idempotent",
    "lookup": "pure",
    "draft": "pure",
}
"""The replay classes every composition's guard is given."""

SEND = ("send", {"to": "ann@example.com"})
CHARGE = ("charge", {"amount": 30})


# -- tools whose bodies count their effects ----------------------------------------------------


def _key(runtime: ToolRuntime) -> str | None:
    found = (runtime.config.get("configurable") or {}).get(IDEMPOTENCY_KEY_CONFIG)
    return None if found is None else str(found)


@tool
def send(to: str) -> str:
    """Send an email (unsafe: a second send is a second email)."""
    effect("send", {"to": to})
    return f"sent to {to}"


@tool
def charge(amount: int, runtime: ToolRuntime) -> str:
    """Charge the card (idempotent: the payment API deduplicates by the key)."""
    effect("charge", {"amount": amount}, _key(runtime))
    return f"charged {amount}"


@tool
def lookup(id: str) -> str:
    """Read a customer's record (pure)."""
    return f"{id}: ann@example.com"


@tool
def draft(to: str) -> str:
    """Draft an email without sending it (pure)."""
    return f"draft for {to}"


@tool("send")
def send_v2(to: str) -> str:
    """Send an email through the new mail API (what a swapping middleware runs)."""
    effect("send", {"to": to})
    return f"sent to {to} (v2)"


@tool
def notify(to: str) -> str:
    """Notify someone (a middleware serves this tool itself)."""
    return "not served"


@tool
def approve_send(to: str) -> str:
    """Ask a person, then send (the tool calls interrupt())."""
    if not interrupt({"question": f"send to {to}?"}):
        return "not approved"
    effect("send", {"to": to})
    return f"sent to {to}"


@tool
def hand_off(team: str, runtime: ToolRuntime) -> Command:  # type: ignore[type-arg]
    """Hand the conversation to a team (unsafe: opens a ticket), as a Command."""
    effect("hand_off", {"team": team})
    answer = ToolMessage(f"ticket for {team}", tool_call_id=runtime.tool_call_id, name="hand_off")
    return Command(update={"ticket": team, "messages": [answer]})


class _SendArgs(BaseModel):
    to: str


class SendTool(StructuredTool):
    """A tool class that does its work in its own `_run` (no `func`)."""

    def _run(self, to: str, **kwargs: Any) -> str:
        effect("send", {"to": to})
        return f"sent to {to}"


class FailingSendTool(StructuredTool):
    """A tool class with its own `_run` that sends, then fails (the reply timed out)."""

    def _run(self, to: str, **kwargs: Any) -> str:
        effect("send", {"to": to})
        msg = f"send: the mail server accepted the email to {to} but the reply timed out"
        raise TimeoutError(msg)


failing_own_run_send = FailingSendTool(
    name="send", description="Send an email.", args_schema=_SendArgs, func=None
)


own_run_send = SendTool(name="send", description="Send an email.", args_schema=_SendArgs, func=None)


# -- scripted models that decide from the messages -----------------------------------------


def turns(*steps: list[tuple[str, dict[str, Any]]], final: str = "Done.") -> ScriptedChatModel:
    """A model making `steps[i]` after its i-th AIMessage, then answering `final`."""

    def step(messages: list[BaseMessage]) -> Any:
        made = sum(isinstance(m, AIMessage) for m in messages)
        return list(steps[made]) if made < len(steps) else final

    return ScriptedChatModel(script=[step] * 20, final=final)


def _guard(store: Any, **extra: Any) -> ReplayGuard:
    return ReplayGuard(tools=POLICY, store=store, **extra)


def _agent(
    model: ScriptedChatModel,
    tools: list[Any],
    checkpointer: Any,
    store: Any,
    guarded: bool,
    before: list[Any] = (),  # type: ignore[assignment]
    after: list[Any] = (),  # type: ignore[assignment]
    **kwargs: Any,
) -> Any:
    """create_agent with the guard between `before` and `after` (left out when unguarded)."""
    guard = [_guard(store).middleware()] if guarded else []
    return create_agent(
        model,
        tools,
        middleware=[*before, *guard, *after],
        checkpointer=checkpointer,
        store=store,
        **kwargs,
    )


class PassThrough(AgentMiddleware):  # type: ignore[type-arg]
    """A tool middleware that only hands the call on (what logging or metrics do)."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


class SwapTool(AgentMiddleware):  # type: ignore[type-arg]
    """Runs the new mail API's `send` instead of the tool the agent was given."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        if request.tool_call["name"] == "send":
            return handler(request.override(tool=send_v2))
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        if request.tool_call["name"] == "send":
            return await handler(request.override(tool=send_v2))
        return await handler(request)


class ServeNotify(AgentMiddleware):  # type: ignore[type-arg]
    """Offers `notify` and answers its calls itself (the effect happens here)."""

    tools = [notify]  # noqa: RUF012  (what AgentMiddleware subclasses declare)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = request.tool_call
        if call["name"] != "notify":
            return handler(request)
        effect("notify", dict(call["args"]))
        return ToolMessage(content="notified", tool_call_id=call["id"], name="notify")

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        if request.tool_call["name"] != "notify":
            return await handler(request)
        return self.wrap_tool_call(request, handler)


class TraceArgs(AgentMiddleware):  # type: ignore[type-arg]
    """Adds a trace id to every call's arguments before it runs."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = request.tool_call
        traced = {**call, "args": {**call["args"], "trace_id": f"trace-{call['id']}"}}
        return handler(request.override(tool_call=traced))

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = request.tool_call
        traced = {**call, "args": {**call["args"], "trace_id": f"trace-{call['id']}"}}
        return await handler(request.override(tool_call=traced))


@tool("send")
def traced_send(to: str, trace_id: str = "") -> str:
    """Send an email (takes the trace id a middleware adds)."""
    effect("send", {"to": to})
    return f"sent to {to}"


class CorrectAndRetry(AgentMiddleware):  # type: ignore[type-arg]
    """Retries a call that failed for a bad address with the corrected address, same id."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = request.tool_call
        try:
            return handler(request)
        except ValueError:
            fixed = {**call, "args": {**call["args"], "to": f"{call['args']['to']}@example.com"}}
            return handler(request.override(tool_call=fixed))

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = request.tool_call
        try:
            return await handler(request)
        except ValueError:
            fixed = {**call, "args": {**call["args"], "to": f"{call['args']['to']}@example.com"}}
            return await handler(request.override(tool_call=fixed))


@tool("mail")
def strict_send(to: str) -> str:
    """Send an email; refuses an address without a domain (before sending)."""
    if "@" not in to:
        msg = f"mail: 'to' must be an email address, got {to!r}"
        raise ValueError(msg)
    effect("mail", {"to": to})
    return f"sent to {to}"


class StampRequest(AgentMiddleware):  # type: ignore[type-arg]
    """Stamps every call with a fresh request id (what a tracing or audit middleware does)."""

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = request.tool_call
        stamped = {**call, "args": {**call["args"], "request_id": uuid.uuid4().hex}}
        return handler(request.override(tool_call=stamped))

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = request.tool_call
        stamped = {**call, "args": {**call["args"], "request_id": uuid.uuid4().hex}}
        return await handler(request.override(tool_call=stamped))


@tool("send")
def stamped_send(to: str, request_id: str = "") -> str:
    """Send an email (takes the request id a middleware adds)."""
    effect("send", {"to": to})
    return f"sent to {to}"


@tool("charge")
def stamped_charge(amount: int, runtime: ToolRuntime, request_id: str = "") -> str:
    """Charge the card (idempotent: the payment API deduplicates by the key)."""
    effect("charge", {"amount": amount}, _key(runtime))
    return f"charged {amount}"


# -- the compositions -------------------------------------------------------------------------


def guard_first(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """create_agent, the guard first (outermost) and a pass-through tool middleware inside."""
    model = turns([CHARGE, SEND])
    return _agent(model, [charge, send], checkpointer, store, guarded, after=[PassThrough()])


def guard_last(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """create_agent, a pass-through tool middleware outside and the guard last (innermost)."""
    model = turns([CHARGE, SEND])
    return _agent(model, [charge, send], checkpointer, store, guarded, before=[PassThrough()])


def _hitl(on: str) -> HumanInTheLoopMiddleware:
    return HumanInTheLoopMiddleware(interrupt_on={on: True})


def hitl_edit(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A person edits the send's address before it runs."""
    model = turns([("send", {"to": "ann@example.org"})])
    return _agent(model, [send], checkpointer, store, guarded, after=[_hitl("send")])


def hitl_redirect(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A person edits a `draft` call into the unsafe `send`."""
    model = turns([("draft", {"to": "ann@example.com"})])
    return _agent(model, [draft, send], checkpointer, store, guarded, after=[_hitl("draft")])


def hitl_reject(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A person rejects the send; the charge beside it runs."""
    model = turns([CHARGE, SEND])
    return _agent(model, [charge, send], checkpointer, store, guarded, after=[_hitl("send")])


def answer_review(value: Any) -> Any:
    """The person's decisions: edit a send to .org into .com, redirect a draft, reject a send."""
    if not isinstance(value, dict) or "action_requests" not in value:
        return True if isinstance(value, dict) and "question" in value else None
    decisions = []
    for action in value["action_requests"]:
        if action["name"] == "draft":
            edited = {"name": "send", "args": dict(action["args"])}
            decisions.append({"type": "edit", "edited_action": edited})
        elif action["args"].get("to", "").endswith(".org"):
            edited = {"name": "send", "args": {"to": "ann@example.com"}}
            decisions.append({"type": "edit", "edited_action": edited})
        else:
            decisions.append({"type": "reject", "message": "Do not send it."})
    return {"decisions": decisions}


def tool_retry(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """ToolRetryMiddleware inside the guard."""
    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0, jitter=False)
    model = turns([CHARGE, SEND])
    return _agent(model, [charge, send], checkpointer, store, guarded, after=[retry])


def swap_tool(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A middleware inside the guard swaps `send` for the new mail API's tool."""
    model = turns([SEND])
    return _agent(model, [send], checkpointer, store, guarded, after=[SwapTool()])


def serve_tool(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A middleware inside the guard offers `notify` and answers it itself."""
    model = turns([("notify", {"to": "ann@example.com"})])
    return _agent(model, [lookup], checkpointer, store, guarded, after=[ServeNotify()])


def decorate_args(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A middleware inside the guard adds a trace id to the arguments."""
    model = turns([SEND])
    return _agent(model, [traced_send], checkpointer, store, guarded, after=[TraceArgs()])


def corrected_retry(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A middleware retries a failed send with the corrected address under the same id."""
    model = turns([("mail", {"to": "ann"})])
    return _agent(model, [strict_send], checkpointer, store, guarded, after=[CorrectAndRetry()])


def two_guards(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """An app's guard around a library's guard (distinct names), one store."""
    model = turns([CHARGE, SEND])
    guards = (
        # in_flight_wait: the deadlock shows in 1 s instead of 10 (seam 2)
        [
            _guard(store, in_flight_wait=1.0).middleware(name="app"),
            _guard(store, in_flight_wait=1.0).middleware(name="library"),
        ]
        if guarded
        else []
    )
    return create_agent(
        model, [charge, send], middleware=guards, checkpointer=checkpointer, store=store
    )


def deep_subagent(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A deep agent whose sub-agent has the same guard; each sends once to ann.

    The sub-agent mails through its own tool: the crash test names a call by its tool and
    ordinal in its own messages, so a parent's and a sub-agent's `send #1` would share a
    name (the same send by both is `test_identity_seams.py`'s).
    """
    from deepagents import create_deep_agent

    guard = _guard(store, toolkits=["deepagents"])
    worker = {
        "name": "mailer",
        "description": "Sends the customer's email.",
        "system_prompt": "Send the email.",
        "tools": [strict_send],
        "model": turns([("mail", {"to": "ann@example.com"})], final="Mailed."),
        "middleware": [guard.middleware(name="mailer")] if guarded else [],
    }
    task = ("task", {"description": "Email ann.", "subagent_type": "mailer"})
    return create_deep_agent(
        turns([SEND], [task]),
        [send],
        subagents=[worker],
        middleware=[guard.middleware(name="main")] if guarded else [],
        checkpointer=checkpointer,
        store=store,
    )


def supervisor_worker(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A supervisor agent whose tool runs a worker agent; both guarded by one guard."""
    guard = _guard(store)
    worker = create_agent(
        turns([SEND], final="Mailed."),
        [send],
        name="worker",
        middleware=[guard.middleware(name="worker")] if guarded else [],
        store=store,
    )

    @tool
    def ask_worker(task: str) -> str:
        """Hand a task to the mail worker."""
        result = worker.invoke({"messages": [("user", task)]})
        return str(result["messages"][-1].text)

    model = turns([CHARGE], [("ask_worker", {"task": "Email ann."})])
    middleware = [guard.middleware(name="supervisor")] if guarded else []
    return create_agent(
        model, [charge, ask_worker], middleware=middleware, checkpointer=checkpointer, store=store
    )


def send_fan_out(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A hand-written graph sending each tool call to `guard.wrap(ToolNode)` on its own."""
    guard = _guard(store)
    model = turns([CHARGE, SEND])

    def agent(state: ReplayGuardState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def fan_out(state: ReplayGuardState) -> Any:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return END
        return [Send("tools", [call]) for call in last.tool_calls]

    node = ToolNode([charge, send])
    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", agent)
    builder.add_node("tools", guard.wrap(node) if guarded else node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", fan_out, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer, store=store)


def command_tool(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """An unsafe tool returning a `Command` (it opens a ticket), beside a send."""
    from langchain.agents import AgentState

    class TicketState(AgentState):  # type: ignore[type-arg]
        ticket: str

    model = turns([SEND, ("hand_off", {"team": "billing"})])
    return _agent(model, [send, hand_off], checkpointer, store, guarded, state_schema=TicketState)


def interrupt_tool(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """An unsafe tool that asks a person (`interrupt()`) before it sends."""
    model = turns([("approve_send", {"to": "ann@example.com"})])
    return _agent(model, [approve_send], checkpointer, store, guarded)


def own_run_tool(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A `StructuredTool` subclass with its own `_run` (no `func`)."""
    model = turns([SEND])
    return _agent(model, [own_run_send], checkpointer, store, guarded)


def own_run_raises(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """A tool class with its own `_run` that sends, then raises; errors become ToolMessages."""
    errors = ToolErrorMiddleware(lambda error, request: f"failed: {error}")
    model = turns([SEND])
    return _agent(model, [failing_own_run_send], checkpointer, store, guarded, before=[errors])


def hand_off_to_billing(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """An agent (a subgraph) whose unsafe tool hands off to a parent's node with a Command."""
    from langgraph.graph import MessagesState

    @tool
    def transfer(team: str, runtime: ToolRuntime) -> Command:  # type: ignore[type-arg]
        """Transfer the customer to a team (unsafe: opens a ticket)."""
        effect("transfer", {"team": team})
        answer = ToolMessage("Transferred", tool_call_id=runtime.tool_call_id, name="transfer")
        return Command(graph=Command.PARENT, goto=team, update={"messages": [answer]})

    model = turns([("transfer", {"team": "billing"})], final="Done (no hand-off).")
    agent = _agent(model, [transfer], None, store, guarded)

    def billing(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("Billing here: your refund is on its way.")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent, destinations=("billing",))
    builder.add_node("billing", billing)
    builder.add_edge(START, "agent")
    builder.add_edge("billing", END)
    return builder.compile(checkpointer=checkpointer, store=store)


_OUTAGE = {"down": False}
"""Set by `send_then_time_out`: the store's next operation fails (an outage during the call)."""


class OutageStore(BaseStore):
    """The crash test's store, whose next operation fails once `_OUTAGE` says it is down."""

    def __init__(self, store: BaseStore) -> None:
        self.store = store

    def batch(self, ops: Any) -> Any:
        if _OUTAGE["down"]:
            _OUTAGE["down"] = False
            msg = "store unreachable: connection refused (db:5432)"
            raise ConnectionError(msg)
        return self.store.batch(ops)

    async def abatch(self, ops: Any) -> Any:
        return self.batch(ops)


@tool("send")
def send_then_time_out(to: str) -> str:
    """Send an email; the reply times out while the store is down."""
    effect("send", {"to": to})
    _OUTAGE["down"] = True
    msg = f"send: no reply from the mail server for the email to {to}"
    raise TimeoutError(msg)


def callback_store_down(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """`ReplayGuardCallbackHandler` on a plain agent; its store is down when the send fails."""
    from langgraph_replay_guard import ReplayGuardCallbackHandler

    errors = ToolErrorMiddleware(lambda error, request: f"failed: {error}")
    graph = create_agent(
        turns([SEND], final="I could not confirm the email."),
        [send_then_time_out],
        middleware=[errors],
        checkpointer=checkpointer,
        store=store,
    )
    if not guarded:
        return graph
    handler = ReplayGuardCallbackHandler(tools=POLICY, store=OutageStore(store))
    return graph.with_config(callbacks=[handler])


_ATTEMPTS = {"send": 0, "page": 0}


@tool("send")
def send_then_time_out_once(to: str) -> str:
    """Send an email; the first reply in a process times out after the email went out."""
    effect("send", {"to": to})
    _ATTEMPTS["send"] += 1
    if _ATTEMPTS["send"] == 1:
        msg = f"send: no reply from the mail server for the email to {to}"
        raise TimeoutError(msg)
    return f"sent to {to}"


def retry_after_effect(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """ToolRetryMiddleware inside the guard retries a send that timed out after sending.

    Not a matrix composition: guarded, its clean run stops with `ReplayUnsafeError` after
    one email (an unknown outcome is never retried), which
    `test_a_retry_middleware_never_reruns_an_unknown_outcome` checks.
    """
    retry = ToolRetryMiddleware(
        max_retries=1, retry_on=(TimeoutError,), initial_delay=0, jitter=False
    )
    model = turns([SEND])
    return _agent(model, [send_then_time_out_once], checkpointer, store, guarded, after=[retry])


@tool("page")
def page_refused_once(to: str) -> str:
    """Page someone; the first attempt in a process is refused before anything is sent."""
    _ATTEMPTS["page"] += 1
    if _ATTEMPTS["page"] == 1:
        msg = f"page: the pager refused the connection; nothing was sent to {to}"
        raise ConnectionRefusedError(msg)
    effect("page", {"to": to})
    return f"paged {to}"


def retry_before_effect(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """ToolRetryMiddleware inside the guard retries an unsafe page refused before its effect.

    The page's policy names `ConnectionRefusedError` as raised before any effect: every
    attempt is claimed, the refused one is settled as `retry`, the retry runs once.
    """
    retry = ToolRetryMiddleware(
        max_retries=1, retry_on=(ConnectionRefusedError,), initial_delay=0, jitter=False
    )
    model = turns([("page", {"to": "ann"})])
    return _agent(model, [page_refused_once], checkpointer, store, guarded, after=[retry])


def same_call_twice(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """The model asks for the same send twice in one turn (two ids), and a charge."""
    model = turns([SEND, SEND, CHARGE])
    return _agent(model, [send, charge], checkpointer, store, guarded)


def agent_in_subgraph(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """The guarded agent as a node of a parent graph (its checkpoints in a namespace)."""
    from langgraph.graph import MessagesState

    agent = _agent(turns([CHARGE, SEND]), [charge, send], None, store, guarded)

    def wrap_up(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("Wrapped up.")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("wrap_up", wrap_up)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "wrap_up")
    builder.add_edge("wrap_up", END)
    return builder.compile(checkpointer=checkpointer, store=store)


def stamp_outside(*, checkpointer: Any, store: Any, guarded: bool = True) -> Any:
    """Guard last: a middleware outside it stamps each call with a fresh request id.

    A resumed call arrives under its ids with other arguments than its recorded attempt:
    no corrected retry (no attempt ran in this run of the task), an unknown outcome.
    """
    model = turns([CHARGE, SEND])
    tools = [stamped_charge, stamped_send]
    return _agent(model, tools, checkpointer, store, guarded, before=[StampRequest()])


@dataclass(frozen=True)
class Composition:
    """A composition of the matrix: its builder and how the crash test drives it."""

    build: Callable[..., Any]
    answer: Callable[[Any], Any] | None = None
    allow_rerun: tuple[str, ...] = ("lookup", "draft")

    @property
    def name(self) -> str:
        """The builder's name."""
        return self.build.__name__


COMPOSITIONS: dict[str, Composition] = {
    c.name: c
    for c in [
        Composition(guard_first),
        Composition(guard_last),
        Composition(hitl_edit, answer_review),
        Composition(hitl_redirect, answer_review),
        Composition(hitl_reject, answer_review),
        Composition(tool_retry),
        Composition(swap_tool),
        Composition(serve_tool),
        Composition(decorate_args),
        Composition(corrected_retry),
        Composition(two_guards),
        Composition(deep_subagent),
        Composition(supervisor_worker),
        Composition(send_fan_out),
        Composition(command_tool),
        Composition(interrupt_tool, answer_review),
        Composition(own_run_tool),
        Composition(own_run_raises),
        Composition(hand_off_to_billing),
        Composition(callback_store_down),
        Composition(same_call_twice),
        Composition(retry_before_effect),
        Composition(agent_in_subgraph),
        Composition(stamp_outside),
    ]
}
"""Every composition of the matrix, by name."""
