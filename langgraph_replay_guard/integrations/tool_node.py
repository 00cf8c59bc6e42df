"""The guard as a `ToolNode` wrapper: decide, run or answer, and record each tool call."""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from langgraph_replay_guard._compat import (
    channel_without_reducer,
    channel_writer,
    graph_has_channel,
    graph_state,
    handled_error_types,
    is_default_tool_error_handler,
    runs_the_tool_itself,
    scoped_tool_node,
    tool_error_content,
    tool_node_settings,
)
from langgraph_replay_guard.decisions.engine import (
    CallFacts,
    DecidedCall,
    Decision,
    Verdict,
    earlier_call_id,
    last_result_digest,
    loop_error,
    raises_on_abort,
    stop_error,
)
from langgraph_replay_guard.decisions.state import Event, merge_guard_state, settled
from langgraph_replay_guard.errors import (
    LoopAbortedError,
)
from langgraph_replay_guard.integrations.answers import (
    abort_answer,
    blocked_answer,
    earlier_answer,
    final_ai_message,
    last_result_answer,
    message_with_result,
    stopped_here,
    whole_duplicate_answer,
)
from langgraph_replay_guard.integrations.batches import (
    ToolCallBatch,
    current_turn,
    find_batch,
    state_field,
    state_messages,
    turn_anchors,
)
from langgraph_replay_guard.integrations.calls import (
    GUARD_CHANNEL,
    BatchDecisions,
    DecisionCache,
    PlannedValues,
    answered_event,
    decide_batch,
    emit,
    executed_write,
    result_outcome,
    snapshot,
    tool_message,
)
from langgraph_replay_guard.integrations.channel_resets import ResetWatch, reset_channel_message
from langgraph_replay_guard.integrations.ledger_gate import (
    LedgerGate,
    RunTicket,
    guarded_body,
    replayed_result,
)
from langgraph_replay_guard.integrations.ledgered_tool import (
    ledgered_tool,
    model_args,
    watch_tool_errors,
    with_invoke,
)
from langgraph_replay_guard.integrations.signals import NodeErrorPassage, as_signal
from langgraph_replay_guard.integrations.task_writes import TaskWrites, write_events, write_update
from langgraph_replay_guard.integrations.tracing import (
    BlockedRun,
    LedgerAction,
    ablocked_run,
    blocked_run,
    trace_info,
    traced_request,
)
from langgraph_replay_guard.policy.config import keeps_previews
from langgraph_replay_guard.policy.options import unclassified_tool_error
from langgraph_replay_guard.replay.ledger import LedgerEntry
from langgraph_replay_guard.storage.plans import adrive, drive

if TYPE_CHECKING:
    from langchain_core.messages import ToolCall

    from langgraph_replay_guard.guard import ReplayGuard
    from langgraph_replay_guard.policy.config import GuardConfig

__all__ = [
    "ToolCallWrapper",
    "abort_trace",
    "guarded_tool_node",
    "misdeclared_channel_message",
    "route_after_tools",
]

logger = logging.getLogger("langgraph_replay_guard")

ToolResult = ToolMessage | Command[Any] | list[ToolMessage | Command[Any]]
Execute = Callable[["ToolCallRequest"], ToolResult]
AsyncExecute = Callable[["ToolCallRequest"], Awaitable[ToolResult]]
Wrapper = Callable[["ToolCallRequest", Execute], ToolResult]
AsyncWrapper = Callable[["ToolCallRequest", AsyncExecute], Awaitable[ToolResult]]


@dataclass(slots=True)
class _Allowed:
    """A call the guard lets run; what to record once it returns."""

    planned: DecidedCall
    batch: ToolCallBatch
    runs: CallFacts | None = None
    """The facts of the call as it runs, when a middleware changed it after the model asked
    (see `ToolCallWrapper._as_it_runs`); None: it runs as asked."""
    call_id: str | None = None
    """The call's tool_call_id when it is counted as it runs, not as the model's message
    holds it (its result is remembered by this id: `earlier_answer`)."""

    @property
    def facts(self) -> CallFacts:
        """The facts of the call as the model asked it (loop and repeat counting)."""
        assert self.planned.facts is not None
        return self.planned.facts

    @property
    def ledger_facts(self) -> CallFacts:
        """The facts of the call as it runs: its class and name at the replay ledger."""
        return self.runs if self.runs is not None else self.facts

    def trace(self, ledger: LedgerAction) -> dict[str, Any]:
        """The decision for the run's metadata; a ledger replay is a `replay` verdict."""
        facts = self.ledger_facts
        if ledger == "replayed":
            return trace_info(
                self.planned.decision,
                replay=facts.replay,
                source=facts.source,
                ledger=ledger,
                verdict="replay",
                reason="replayed",
            )
        return trace_info(
            self.planned.decision, replay=facts.replay, source=facts.source, ledger=ledger
        )


@dataclass(slots=True)
class _Blocked:
    """A call the guard answers without running the tool: from memory, or a refusal.

    Nothing is recorded or reported until the plan answers with it (`ToolCallWrapper._answer`):
    a probed name that another wrapper serves was never blocked.
    """

    messages: list[Any]
    """The answer: the call's ToolMessage, then the stop's final AIMessage if any."""
    events: list[Event]
    trace: dict[str, Any]
    probe: bool = False
    """A call to a name the node lacks: hand it on first, answer it only if nobody serves it."""
    notice: Decision | None = None
    """The decision to report on the custom stream when the answer is given."""
    repeat: _Allowed | None = None
    """For a repeat the guard would answer (not a stop): the call, to record as `answered`
    when a middleware inside the guard answers it first (see `_decided_where_it_runs`)."""


@dataclass(slots=True)
class _Stop:
    """A call on which the guard stops the run by raising (`exit_behavior="error"`)."""

    error: LoopAbortedError
    """The stop, a LangGraph control-flow signal (`as_signal`)."""
    trace: dict[str, Any]


_Decided = _Allowed | _Blocked | _Stop | None
"""What `ToolCallWrapper._decide` decided for a call: run it, answer it, stop the run on it,
or (None) pass it on to the node, whose name it is not."""

_DECIDING_MARK = "_replay_guard_deciding"
"""Set on a tool copy whose `invoke` is the guard's plan (`ToolCallWrapper._deciding_tool`)."""


@dataclass(slots=True)
class _Handed:
    """A call the guard's hook handed to the middlewares inside it."""

    arrived: bool = False
    """Whether a deciding copy of a tool ran (the call arrived where a tool runs)."""
    claim: RunTicket | None = None
    """The hook's claim, until the first copy that runs takes it over."""
    key: str | None = None
    """The idempotency key the claim was given."""
    recorded: LedgerEntry | None = None
    """The outcome the hook's check found for the call, until the first copy that runs: a
    copy that gets the call plus arguments a middleware added replays it (see `_call_plan`)."""
    asked: Mapping[str, Any] | None = None
    """The call as the hook saw it, when `recorded` is set."""
    decided: _Decided = None
    """The hook's decision, for a copy that gets the very call the hook decided (the same
    name and arguments): it runs it without deciding again (`ToolCallWrapper._arrived`)."""
    call: Mapping[str, Any] | None = None
    """The call the hook decided (`decided`)."""


@dataclass
class _HandedRequest(ToolCallRequest):
    """The request the guard hands down: a tool put in it below becomes a deciding copy.

    A middleware inside the guard that swaps the tool (`request.override(tool=other)`, a
    HITL edit that redirects the call to another tool) makes a copy of this request
    (`dataclasses.replace` keeps the class), so the tool that runs is still decided,
    claimed and recorded where it runs, by its own policy.
    """

    deciding: Callable[[BaseTool], BaseTool] | None = field(default=None, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        # The dataclass `__init__` sets `deciding` like any field; `ToolCallRequest` warns on
        # every set of an attribute its class has (a default), so this one field is set plainly.
        if name == "deciding":
            object.__setattr__(self, name, value)
            return
        super().__setattr__(name, value)

    def __post_init__(self) -> None:
        tool = self.tool
        if (
            self.deciding is not None
            and isinstance(tool, BaseTool)
            and not getattr(tool, _DECIDING_MARK, False)
        ):
            object.__setattr__(self, "tool", self.deciding(tool))


@dataclass(slots=True)
class _Execute:
    """Run the tool (through the node's own wrapper, if any); `watch` its errors."""

    request: ToolCallRequest
    watch: bool = False
    ticket: RunTicket | None = None
    """The ledgered call it runs: calls made inside its body are nested in it."""


@dataclass(slots=True)
class _Check:
    """Admit the call at the replay ledger (`LedgerGate.check`)."""

    request: ToolCallRequest
    facts: CallFacts
    batch_id: str | None
    batch_size: int = 1
    """How many calls the batch has: their claims are written together."""


@dataclass(slots=True)
class _Finish:
    """Record how an admitted call ended (`LedgerGate.finish`)."""

    ticket: RunTicket
    result: Any
    error: BaseException | None


def _trace(
    request: ToolCallRequest, info: Mapping[str, Any], output: Any, error: Any
) -> BlockedRun:
    """Report a call the guard answered itself as a tool run (`blocked_run`)."""
    return BlockedRun(_config(request), request.tool_call, request.tool, info, output, error)


_Op = _Execute | _Check | _Finish | BlockedRun


class ToolCallWrapper:
    """Decides, runs and records one tool call (sync and async).

    Used as `wrap_tool_call`/`awrap_tool_call` of a `ToolNode` (`guard.wrap`) and by
    `ReplayGuardMiddleware.wrap_tool_call`. Decisions are taken for the whole batch of the
    call's AIMessage against one snapshot, so parallel calls agree without locks.

    Args:
        guard: The guard.
        inner: A wrapper the node already had; it runs inside the guard.
        ainner: Its async twin.
        messages_key: State key of the message list.
        channel: State key of the guard channel.
        end_batches: Whether this wrapper stops a batch that aborts (`exit_behavior="end"`);
            the middleware does that in `after_model` instead.
        raise_on_abort: Whether `exit_behavior="error"` may raise from the wrapper. False when
            the node's `handle_tool_errors` would turn the error into a ToolMessage: the
            stop is then recorded and `route_after_tools` raises it.
        tools: Names of the node's tools. A call to another name (`request.tool` is None:
            the node defers its own check to after its wrappers) is an unknown tool, which
            the guard answers and counts. None until known (the middleware learns them at
            the first model call); until then such calls pass to the node as before.
        reads_graph_state: Decide a call of a task started by `Send` against the graph's
            state instead of the task's payload (see `_decision_state`). `create_agent`'s
            tools node already hands the graph's state to the middleware's calls.
        passes_node_errors: The guard is the node's only wrapper: an error the node's own
            execution lets out leaves the node as it does without a wrapper, instead of
            being turned into a message by the node's `handle_tool_errors` (see
            `NodeErrorPassage`).
        defer_previews: Record a result's digest and no preview: a middleware may still
            change the result before the model sees it (`PIIMiddleware` in its
            `before_model`), so the caller adds the preview from what the model is given
            (`ReplayGuardMiddleware`), and no checkpoint holds more.
        watch_resets: Refuse a channel that a sub-graph gets empty at every run
            (`ResetWatch`): a `ToolNode` sub-graph run once per step of a parent graph
            whose state lacks the channel. The middleware's agent loops inside one run.
    """

    def __init__(
        self,
        guard: ReplayGuard,
        *,
        inner: Wrapper | None = None,
        ainner: AsyncWrapper | None = None,
        messages_key: str = "messages",
        channel: str = GUARD_CHANNEL,
        end_batches: bool = True,
        raise_on_abort: bool = True,
        tools: tuple[str, ...] | None = None,
        reads_graph_state: bool = False,
        passes_node_errors: bool = False,
        defer_previews: bool = False,
        watch_resets: bool = True,
    ) -> None:
        """Create the wrapper."""
        self.defer_previews = defer_previews
        # With `defer_previews`, the middleware's map to the value a batch was planned on
        # and the previews its writes carry (the model call wrote nothing).
        self.planned_values: PlannedValues | None = None
        self.resets = ResetWatch() if watch_resets else None
        self.passes_node_errors = passes_node_errors and inner is None
        self.raise_on_abort = raise_on_abort
        self.reads_graph_state = reads_graph_state
        self.tools = tools
        self.guard = guard
        self.inner = inner
        self.ainner = ainner
        self.messages_key = messages_key
        self.channel = channel
        self.end_batches = end_batches
        # Shared with the middleware's after_model: a batch is decided once a step.
        self.decisions = DecisionCache()
        self.policies = guard._policies
        self.gate = LedgerGate(
            self.policies,
            store=guard.store,
            namespace=guard.namespace,
            messages_key=messages_key,
            channel=channel,
        )

    @property
    def config(self) -> GuardConfig:
        """The guard's configuration (what class a call is: ask `policies`)."""
        return self.policies.config

    # -- one plan, a sync and an async driver -----------------------------------------------

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        """`wrap_tool_call` for a ToolNode."""
        run = _passing_node_errors(execute) if self.passes_node_errors else execute
        decided = self._decide(request)
        direct = self._direct(execute, self.inner)
        allowed = self._unledgered(request, decided, direct)
        if allowed is not None:  # one decide (above), one run, one record (`_finish`)
            return self._finish(request, allowed, run(self._traced(request, allowed)))
        return self._drive(
            self._call_plan(request, decided, direct),
            lambda op: self._execute_op(op, run),
            request,
        )

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        """`awrap_tool_call` for a ToolNode."""
        run = _passing_node_errors(execute) if self.passes_node_errors else execute
        decided = self._decide(request)
        direct = self._direct(execute, self.ainner)
        allowed = self._unledgered(request, decided, direct)
        if allowed is not None:  # one decide (above), one run, one record (`_finish`)
            return self._finish(request, allowed, await run(self._traced(request, allowed)))
        return await self._adrive(
            self._call_plan(request, decided, direct),
            lambda op: self._aexecute_op(op, run),
            request,
        )

    def _unledgered(
        self, request: ToolCallRequest, decided: _Decided, direct: bool
    ) -> _Allowed | None:
        """The decision of a call that is one decide, one run, one record, else None.

        Such a call is allowed, goes straight to the tool (nothing inside the guard) and has
        no ledger: its plan (`_call_plan`, `_allowed`) would yield the run and nothing else,
        and leave no claim of its batch to let go (`pass_by` needs a store). Every other
        call runs its plan through the driver.
        """
        if (
            direct
            and isinstance(decided, _Allowed)
            and request.tool is not None
            and not self._ledgered(request, decided.ledger_facts)
        ):
            return decided
        return None

    def _ledgered(self, request: ToolCallRequest, facts: CallFacts) -> bool:
        """Whether the ledger gate has anything to do for this call (else `check` is None).

        An unsafe call always goes through `check`, which warns about a setup that cannot
        protect it; any other call only where there is a store for the ledger.
        """
        if facts.replay == "unsafe" or self.gate.store is not None:
            return True
        return getattr(request.runtime, "store", None) is not None

    def _traced(self, request: ToolCallRequest, allowed: _Allowed) -> ToolCallRequest:
        """The request whose tool run carries the decision, for tracers (`traced_request`)."""
        return traced_request(request, lambda: allowed.trace("none"))

    def _drive(
        self,
        plan: Generator[_Op, Any, ToolResult],
        run: Callable[[_Execute], Any],
        batch: ToolCallRequest | None = None,
    ) -> ToolResult:
        """Run a call plan: `run` executes the tool, the rest is the ledger and traces.

        `batch`: the call as the node got it; a plan that ends without admitting it at the
        ledger (answered, stopped, handed down) lets its siblings' claims go without it.
        """
        checked = False

        def op_result(op: _Op) -> Any:
            nonlocal checked
            if isinstance(op, _Execute):
                if op.ticket is None:  # no ledger claim to mark it with: no context manager
                    return run(op)
                with guarded_body(op.ticket):
                    return run(op)
            if isinstance(op, _Check):
                checked = True
                return self.gate.check(op.request, op.facts, op.batch_id, op.batch_size)
            if isinstance(op, _Finish):
                return self.gate.finish(op.ticket, op.result, op.error)
            return blocked_run(op)

        try:
            return drive(plan, op_result)
        finally:
            if batch is not None and not checked:
                self.gate.pass_by(batch)

    async def _adrive(
        self,
        plan: Generator[_Op, Any, ToolResult],
        run: Callable[[_Execute], Awaitable[Any]],
        batch: ToolCallRequest | None = None,
    ) -> ToolResult:
        """`_drive`, async."""
        checked = False

        async def op_result(op: _Op) -> Any:
            nonlocal checked
            if isinstance(op, _Execute):
                if op.ticket is None:  # no ledger claim to mark it with: no context manager
                    return await run(op)
                with guarded_body(op.ticket):
                    return await run(op)
            if isinstance(op, _Check):
                checked = True
                return await self.gate.acheck(op.request, op.facts, op.batch_id, op.batch_size)
            if isinstance(op, _Finish):
                return await self.gate.afinish(op.ticket, op.result, op.error)
            return await ablocked_run(op)

        try:
            return await adrive(plan, op_result)
        finally:
            if batch is not None and not checked:
                self.gate.pass_by(batch)

    def _execute_op(self, op: _Execute, execute: Execute) -> Any:
        if not op.watch:
            return self.inner(op.request, execute) if self.inner else execute(op.request)
        with watch_tool_errors() as spy:
            result = self.inner(op.request, execute) if self.inner else execute(op.request)
        return result, spy.error

    async def _aexecute_op(self, op: _Execute, execute: AsyncExecute) -> Any:
        run = self.ainner(op.request, execute) if self.ainner else execute(op.request)
        if not op.watch:
            return await run
        with watch_tool_errors() as spy:
            result = await run
        return result, spy.error

    def _direct(self, execute: Any, inner: object) -> bool:
        """Whether the call goes straight to the tool (nothing inside the guard can answer it).

        `inner` is the node's own wrapper for this driver (`inner` sync, `ainner` async): a
        node given only `awrap_tool_call` has no sync one, and its async calls are not direct.
        """
        return inner is None and runs_the_tool_itself(execute)

    def _call_plan(
        self,
        request: ToolCallRequest,
        prepared: _Decided,
        direct: bool = False,
        hand: _Handed | None = None,
    ) -> Generator[_Op, Any, ToolResult]:
        """Run, answer or stop one call as `_decide` decided it, and record it; yields I/O.

        The one runner of a call: the hook runs it on the call it got, a deciding copy of
        the tool handed down (`hand`) on the call as it arrives there, with the hook's own
        decision when the call arrives unchanged (`_arrived`). The drivers (`wrap`, `awrap`,
        the copy's `invoke`/`ainvoke`) run each op and send back its answer; an exception an
        op raised is thrown back in, so the plan records an unknown outcome before it goes on.
        """
        if prepared is None:
            # A name the node lacks: its own wrapper may serve it, or the node answers.
            result: ToolResult = yield _Execute(request)
            return result
        if isinstance(prepared, _Stop):
            yield _trace(request, prepared.trace, None, prepared.error)
            raise prepared.error
        if not direct and request.tool is not None:
            where = prepared if isinstance(prepared, _Allowed) else prepared.repeat
            if where is not None:
                return (yield from self._decided_where_it_runs(request, prepared, where))
        if isinstance(prepared, _Blocked):
            return (yield from self._refused(request, prepared))
        if request.tool is None:
            return (yield from self._shadowed_unknown(request, prepared))
        return (yield from self._allowed(request, prepared, hand))

    def _refused(
        self, request: ToolCallRequest, blocked: _Blocked
    ) -> Generator[_Op, Any, ToolResult]:
        """Answer a call the guard does not run: from memory, or a refusal."""
        if blocked.probe:
            # LangGraph defers its unknown-name check past the wrappers so that an inner
            # wrapper (a middleware's dynamic tool) may serve the name: let it. Nothing
            # runs for a name nobody serves; the node only answers "not a valid tool".
            served: ToolResult = yield _Execute(request)
            if not _refused_as_unknown(served, request.tool_call["name"]):
                self.learn_tools([request.tool_call["name"]])
                return served
        answer = self._answer(request, blocked)
        yield _trace(request, blocked.trace, _answer_of(answer), None)
        return answer

    def _allowed(
        self, request: ToolCallRequest, allowed: _Allowed, hand: _Handed | None
    ) -> Generator[_Op, Any, ToolResult]:
        """Run a call the guard lets run: through the ledger gate, or a recorded outcome."""
        ticket: RunTicket | LedgerEntry | None = _recorded_run(request, hand)
        if ticket is None and hand is not None and hand.claim is not None:
            # The guard's hook claimed the call before handing it down: the tool runs under
            # that claim, with the arguments it arrived with (`ran_args` when edited).
            ticket = self.gate.continued(hand.claim, request)
            hand.claim = None
        elif ticket is None and self._ledgered(request, allowed.ledger_facts):
            batch = allowed.batch
            ticket = yield _Check(
                request, allowed.ledger_facts, batch.batch_id, len(batch.tool_calls)
            )
        if isinstance(ticket, LedgerEntry):
            replayed = self._replayed(request, allowed, ticket)
            yield _trace(request, allowed.trace("replayed"), _answer_of(replayed), None)
            return replayed
        if ticket is None:
            # Nothing sits between here and the tool (a call with middlewares inside the
            # guard was handed down, to be run where it arrives).
            result = yield _Execute(self._traced(request, allowed))
            return self._finish(request, allowed, result)
        traced = traced_request(ticket.request, lambda: allowed.trace("claimed"))
        if traced.tool is not None:
            # The ledger sees the tool's runs whole: its state writes beside its answer.
            tool = ledgered_tool(traced.tool, runs=ticket.runs, sends=ticket.sends)
            traced = traced.override(tool=tool)
        try:
            result, tool_error = yield _Execute(traced, watch=True, ticket=ticket)
        except BaseException as exc:
            yield _Finish(ticket, None, exc.error if isinstance(exc, NodeErrorPassage) else exc)
            raise
        yield _Finish(ticket, result, tool_error)
        ran = ticket.runs.started or traced.tool is None
        return self._finish(request, allowed, result, ran=ran)

    def _shadowed_unknown(
        self, request: ToolCallRequest, shadowed: _Allowed
    ) -> Generator[_Op, Any, ToolResult]:
        """Shadow mode: let the node answer a name it lacks, as enforcing would have.

        Enforcing answers (or stops on) the call itself; shadow mode hands it on, and when
        nobody serves the name (the node says "not a valid tool") records what enforcing
        would have done, as enforcing records its own answer: counted towards the loop of
        unknown names and in the channel's `shadow`. A name a wrapper inside serves is
        learned, as when enforcing.
        """
        name = request.tool_call["name"]
        served: ToolResult = yield _Execute(request)
        if not _refused_as_unknown(served, name):
            self.learn_tools([name])
            return served
        yield _trace(request, shadowed.trace("none"), _answer_of(served), None)
        decision = shadowed.planned.decision
        if decision is not None:
            emit(getattr(request.runtime, "stream_writer", None), decision, request.tool_call)
        event = answered_event(shadowed.planned, shadowed.batch, shadowed=True)
        self._record(request, [event])
        return served

    def _decided_where_it_runs(
        self, request: ToolCallRequest, prepared: _Allowed | _Blocked, decided: _Allowed
    ) -> Generator[_Op, Any, ToolResult]:
        """Hand a call to the middlewares inside the guard; decide it where the tool runs.

        A middleware between the guard and the tool may change the call (a HITL edit, PII
        redaction), swap its tool, or answer it itself (a HITL reject, a cache, an emulator,
        a tool of its own). So the guard decides and records the call as it arrives at the
        tool: the copy of the tool handed down runs this same plan there, on that call,
        with nothing in between (`direct`); a tool swapped in below (`request.override(
        tool=...)`) becomes such a copy too (`_HandedRequest`). A call that is not pure as
        the model asked it is claimed here first, so whatever runs below runs claimed: the
        copy continues under that claim; when no copy runs (a middleware answered), the
        answer it returned is the call's outcome, and an exception leaves it unknown. A
        call that never arrives counts as an attempt (`answered`), never as the tool's
        result in the channel. Stops were decided already, before anything ran. A copy that
        gets the call unchanged runs it as decided here (`prepared`, carried in `_Handed`).
        """
        tool = request.tool
        assert tool is not None
        hand = _Handed(decided=prepared, call=request.tool_call)
        facts = decided.ledger_facts
        if decided is prepared and facts.replay != "pure" and self._ledgered(request, facts):
            batch = decided.batch
            ticket = yield _Check(request, facts, batch.batch_id, len(batch.tool_calls))
            if isinstance(ticket, LedgerEntry) and ticket.answered_inside:
                # A middleware inside answered it last time: its answer, not a second run.
                replayed = self._replayed(request, decided, ticket)
                yield _trace(request, decided.trace("replayed"), _answer_of(replayed), None)
                return replayed
            # A body's own outcome: hand the call down again, unclaimed, so that the
            # middlewares inside do what they did (a retry, a redaction) and each copy of
            # the tool replays the row of the call it sees.
            if isinstance(ticket, RunTicket):
                hand.claim = ticket
                hand.key = ticket.entry.idempotency_key if ticket.entry else None
                request = ticket.request  # with the idempotency key, if any
            elif isinstance(ticket, LedgerEntry):
                hand.recorded, hand.asked = ticket, request.tool_call

        def deciding(given: BaseTool) -> BaseTool:
            return self._deciding_tool(request, given, hand)

        handed = _HandedRequest(
            tool_call=request.tool_call,
            tool=deciding(tool),
            state=request.state,
            runtime=request.runtime,
            deciding=deciding,
        )
        claim = hand.claim
        try:
            # Under the hook's claim: a guard with the same label stacked inside recognises
            # the call as this one (no second claim), and calls made below are nested in it.
            result: ToolResult = yield _Execute(handed, ticket=claim)
        except BaseException as exc:
            if claim is not None and hand.claim is claim:
                # Nothing ran where the guard could see it, yet something may have run
                # below (a middleware's own body): unknown, unless it is the task's own
                # interrupt() before anything ran.
                yield _Finish(claim, None, exc.error if isinstance(exc, NodeErrorPassage) else exc)
            raise
        if claim is not None and hand.claim is claim:
            # A middleware inside answered under the guard's claim: what it returned is the
            # call's outcome, replayed on a resume.
            yield _Finish(dataclasses.replace(claim, answered_inside=True), result, None)
        if not hand.arrived:
            self._record(request, [answered_event(decided.planned, decided.batch)])
        return result

    def _deciding_tool(self, request: ToolCallRequest, tool: BaseTool, hand: _Handed) -> BaseTool:
        """A copy of a tool whose run is the guard's whole plan for the call, where it runs."""
        key_arg = self.policies.policy_for(request.tool_call["name"]).idempotency_key_arg

        def here(input: Any) -> ToolCallRequest:
            hand.arrived = True
            call = dict(request.tool_call)
            args = model_args(tool, input)
            if args is not None:
                if key_arg and hand.key is not None and args.get(key_arg) == hand.key:
                    # The key the ledger gave the claim is no argument the model asked for.
                    args = {k: v for k, v in args.items() if k != key_arg}
                call["args"] = args
            name = input.get("name") if isinstance(input, dict) else None
            # The call as it arrives: a tool swapped in below is decided by its own policy.
            call["name"] = name if isinstance(name, str) and name else tool.name
            return request.override(tool=tool, tool_call=cast("ToolCall", call))

        def as_sent(input: Any, op: _Execute) -> Any:
            """The tool's input for `op`: the ledger may have added an idempotency key.

            The key goes in an argument (`idempotency_key_arg`) and in the runtime's config,
            which a tool reads from its injected `runtime`.
            """
            if not isinstance(input, dict) or not isinstance(input.get("args"), dict):
                return input
            args = {**input["args"], **op.request.tool_call["args"]}
            arrived, runtime = request.runtime, op.request.runtime
            if runtime is not arrived:
                args = {k: runtime if v is arrived else v for k, v in args.items()}
            return {**input, "args": args}

        def invoke(input: Any, config: Any = None, **kwargs: Any) -> Any:
            def run(op: _Execute) -> Any:
                result = cast("BaseTool", op.request.tool).invoke(
                    as_sent(input, op), config, **kwargs
                )
                return (result, None) if op.watch else result

            return self._drive(self._arrived(here(input), hand), run)

        async def ainvoke(input: Any, config: Any = None, **kwargs: Any) -> Any:
            async def run(op: _Execute) -> Any:
                result = await cast("BaseTool", op.request.tool).ainvoke(
                    as_sent(input, op), config, **kwargs
                )
                return (result, None) if op.watch else result

            return await self._adrive(self._arrived(here(input), hand), run)

        copy = cast("BaseTool", with_invoke(tool, invoke, ainvoke))
        if copy is not tool:
            object.__setattr__(copy, _DECIDING_MARK, True)
        return copy

    def _arrived(self, request: ToolCallRequest, hand: _Handed) -> Generator[_Op, Any, ToolResult]:
        """The plan of a call that arrived where a tool runs (a deciding copy's run).

        The call the hook decided, unchanged (the same name and arguments), runs as the hook
        decided it: deciding it again would read the same state and plan to the same answer.
        A call a middleware changed on the way (a HITL edit, a redaction, another tool) is a
        call of its own, decided here.
        """
        call = hand.call
        same = (
            call is not None
            and hand.decided is not None
            and call["name"] == request.tool_call["name"]
            and call.get("args") == request.tool_call.get("args")
        )
        decided = hand.decided if same else self._decide(request)
        return self._call_plan(request, decided, direct=True, hand=hand)

    # -- deciding -----------------------------------------------------------------------------

    def _channel_value(self, request: ToolCallRequest, state: Any) -> Any:
        """The guard channel's value; fails when the graph's state has no guard channel.

        A channel that starts empty (the guard's own schemas) is absent from the state until
        the guard first writes it, so an absent key is asked of the running graph itself.
        LangGraph drops writes to a key its schema lacks, so in a graph without the channel
        (like `create_react_agent`'s default `AgentState`) every call would look like a first
        call and no loop would ever be stopped. Outside a graph (a node run by hand) there is
        no state to keep count in: the call is decided against an empty one.

        A channel declared without `merge_guard_state` (or with it not last in
        `Annotated[...]`) is a `LastValue` channel: each call's update would replace the
        last and no loop would be stopped either, so it is an error too.

        Raises:
            ValueError: The running graph has no guard channel, or one without the guard's
                reducer.
        """
        channel = self.channel
        kind = channel_without_reducer(_config(request), channel, merge_guard_state)
        if kind is not None:
            raise ValueError(misdeclared_channel_message(channel, kind))
        if type(state) is dict or isinstance(state, Mapping):
            if channel in state:
                return state[channel]
        elif hasattr(state, channel):  # a pydantic or dataclass state
            return getattr(state, channel)
        if graph_has_channel(_config(request), channel) is not False:
            return None
        msg = (
            f"the graph state has no {channel!r} channel, so the guard could not keep "
            "count and would stop no loop. Build the graph on a state that has it: subclass "
            "ReplayGuardState (StateGraph(ReplayGuardState)), or for create_react_agent pass "
            "state_schema=<an AgentState subclass with the channel>; see "
            "docs/using-it-with.md."
        )
        raise ValueError(msg)

    def _decision_state(self, request: ToolCallRequest) -> Any:
        """The graph state a call is decided against: the request's, or the graph's.

        A tools task started by `Send` (LangGraph's map-reduce pattern: one task per tool
        call) gets the Send's payload as its state, and a payload may hold a copy of the
        AIMessage that keeps only the task's own call, or no history at all. Decided
        against that, each call would be a batch of its own: sibling calls could not see
        each other (two identical reads would both run), their events would collide in the
        reducer, and each task would end the run with a final message of its own. The
        graph's state has the whole AIMessage and the user turn, the same for every task.
        """
        if self.reads_graph_state:
            state = graph_state(_config(request))
            if state is not None:
                return state
        return request.state

    def _planned(
        self, request: ToolCallRequest, tools: tuple[str, ...] | None, state: Any, value: Any
    ) -> tuple[BatchDecisions, DecidedCall]:
        """The plan of the call's batch (made once per batch) and the call's entry in it."""
        tool_call_id = request.tool_call.get("id")
        history = state_messages(state, self.messages_key)
        cached = self.decisions.decided(value, history, tool_call_id, tools)
        if cached is not None:  # planned by the model call or a sibling: the common case
            return cached
        anchors = turn_anchors(value)
        batch = find_batch(state, tool_call_id, self.messages_key, anchors)
        if batch is None:  # a ToolNode called with bare tool calls: a batch of one
            turn = current_turn(state, self.messages_key, anchors)
            batch = ToolCallBatch(AIMessage(content="", tool_calls=[request.tool_call]), turn)
        plan = self.decisions.decide(self.policies, value, batch, tools)
        return plan, plan.call(tool_call_id) or plan.calls[-1]

    def _as_it_runs(
        self,
        request: ToolCallRequest,
        plan: BatchDecisions,
        planned: DecidedCall,
        value: Any,
        tools: tuple[str, ...] | None,
    ) -> tuple[BatchDecisions, DecidedCall, CallFacts | None]:
        """The call's plan, and its facts as it runs when a middleware only added arguments.

        The batch is planned from the AIMessage in the state: what the model asked, as the
        history holds it. A tool middleware may change the call in the request before it
        runs:

        - It only adds arguments (a per-call trace id), at the top or inside an argument
          that is a dict: the call is still the one the model asked. Counting, dedup and
          stops follow the model's call; a decoration that differs at every call would
          otherwise make every call look new, and no loop would ever be stopped. The replay
          ledger follows what runs: its class and name come from the call as it runs (the
          third value), its row keeps the arguments it ran with (`ran_args`).
        - It changes or removes an argument the model gave, or runs another tool (a HITL
          reviewer's edit, a corrected retry, PII redaction): a new call, decided and
          recorded as it runs (a reviewer's new read runs, not the model's duplicate), less
          the arguments it added: a middleware that drops empty arguments and adds a trace
          id still makes one call of twenty identical ones.
        """
        asked, runs = planned.tool_call, request.tool_call
        if asked is runs or (
            asked.get("args") == runs.get("args") and asked["name"] == runs["name"]
        ):
            return plan, planned, None
        replanned, as_run = self._replanned(plan, planned, runs, value, tools)
        if planned.facts is None or as_run.facts is None or asked["name"] != runs["name"]:
            return replanned, as_run, None
        counted = _without_added(asked.get("args"), runs.get("args"))
        if counted == asked.get("args"):
            return plan, planned, as_run.facts  # it only added arguments: the model's call
        if counted == runs.get("args"):
            return replanned, as_run, None
        # Changed and decorated: counted as it runs without the decoration, ledgered whole.
        call = cast("ToolCall", {**runs, "args": counted})
        recounted, as_counted = self._replanned(plan, planned, call, value, tools)
        if as_counted.facts is None:
            return replanned, as_run, None
        return recounted, as_counted, as_run.facts

    def _replanned(
        self,
        plan: BatchDecisions,
        planned: DecidedCall,
        call: ToolCall,
        value: Any,
        tools: tuple[str, ...] | None,
    ) -> tuple[BatchDecisions, DecidedCall]:
        """The batch planned again with `call` in the place of the planned one."""
        ai = plan.batch.ai_message
        calls = [
            call if i == planned.index else other for i, other in enumerate(plan.batch.tool_calls)
        ]
        edited = ToolCallBatch(ai.model_copy(update={"tool_calls": calls}), plan.batch.turn)
        replanned = decide_batch(self.policies, snapshot(value, edited.batch_id), edited, tools)
        return replanned, replanned.calls[planned.index]

    def _decide(self, request: ToolCallRequest) -> _Decided:
        """Decide a call: run it, answer it, stop the run on it, or pass it on (None).

        `_Allowed`, `_Blocked` or `_Stop` (`_Decided`). The decide step of one call: it reads
        the state and the batch's decisions (made once a step, `DecisionCache`), writes
        nothing and runs nothing; `_call_plan` runs it.
        """
        tools = self._known_tools(request)
        if request.tool is None and tools is None:
            return None
        if request.tool is not None and self.config.require_classes:
            name = request.tool_call["name"]
            if self.policies.policy_source(name) == "default":  # a tool added after the build
                raise ValueError(unclassified_tool_error([name], "the graph"))
        state = self._decision_state(request)
        value = self._channel_value(request, state)
        if value is None and self.resets is not None:  # a first call, or a channel reset
            reset = self.resets.check(
                _config(request), state, self.messages_key, request.tool_call.get("id")
            )
            if reset is not None:
                raise ValueError(reset_channel_message(self.channel, reset))
        if self.planned_values is not None:
            history = state_messages(state, self.messages_key)
            value = self.planned_values.planned(self.config, history, value)[0]
        plan, asked = self._planned(request, tools, state, value)
        plan, planned, runs = self._as_it_runs(request, plan, asked, value, tools)
        # Counted as it runs: no message holds this call's key, so its id is remembered.
        call_id = request.tool_call.get("id") if planned is not asked else None
        decision = planned.decision
        if plan.abort is None and decision is not None and decision.verdict is Verdict.ALLOW:
            # Nothing in the batch stops the run and this call runs: every step's case.
            if request.tool is None and not _shadowed_unknown(planned):
                return None
            return _Allowed(planned, plan.batch, runs=runs, call_id=call_id)
        prepared = self._decided(request, plan, planned, state, value)
        if isinstance(prepared, _Allowed | _Blocked):
            allowed = prepared if isinstance(prepared, _Allowed) else prepared.repeat
            if allowed is not None:
                allowed.runs, allowed.call_id = runs, call_id
        return prepared

    def _decided(
        self,
        request: ToolCallRequest,
        plan: BatchDecisions,
        planned: DecidedCall,
        state: Any,
        value: Any,
    ) -> _Decided:
        """`_decide` for a call that is blocked, or whose batch stops the run."""
        batch = plan.batch
        config = self.config
        last = planned.index == len(batch.tool_calls) - 1

        come_back = plan.stop_ignored
        # The graph went back to the model after the stop (a static `tools -> agent` edge).
        # The first come-back is answered below like a stop, so the saved history stays
        # valid (a node that raises loses its writes); the model node then ends the run
        # (`guard.system_prompt`). A second one is not answered: that would loop until the
        # recursion limit. With "error" the first one raises already. The error is a
        # control-flow signal: it passes any `handle_tool_errors` and retry middleware.
        if (
            come_back is not None
            and come_back.decision is not None
            and self.end_batches
            and (plan.stop_was_ignored or raises_on_abort(config))
        ):
            raise as_signal(loop_error(come_back.decision))
        # With "continue" a plan aborts only when a blocked call escalated to a stop.
        aborting = plan.abort if self.end_batches else None
        if aborting is not None and aborting.decision is not None:
            trace = abort_trace(planned, aborting)
            if raises_on_abort(config) and self.raise_on_abort:
                return _Stop(as_signal(loop_error(aborting.decision)), trace)
            answer, events = abort_answer(planned, aborting, batch)
            notice = aborting.decision if planned is aborting else None
            messages: list[Any] = [answer]
            if last:
                messages.append(final_ai_message(aborting.decision, batch))
            return _Blocked(messages, events, trace, notice=notice)

        decision = planned.decision
        if decision is not None and decision.verdict is Verdict.ALLOW:
            if request.tool is None:
                return None  # a name the node lacks though the guard knew it: the node answers
            return _Allowed(planned, batch)
        earlier = None
        # Whether or not the channel kept a preview (`store_previews=False`, or one dropped
        # when a middleware changed the result): the thread's messages decide. A duplicate
        # of an earlier call of this same batch has no result in them yet: its sibling runs,
        # and the answer says to use that call's result.
        if (
            decision is not None
            and decision.reason == "duplicate"
            and not _sibling_duplicate(plan, planned)
        ):
            ran_as = earlier_call_id(snapshot(value, batch.batch_id), decision.call_key)
            earlier = earlier_answer(self.policies, decision, state, self.messages_key, ran_as)
            if earlier is None:
                # A duplicate of a result the history no longer holds (summarized or
                # removed): "use the earlier result" would point at nothing, so it runs.
                return _Allowed(planned, batch)
        answer, events = blocked_answer(planned, batch)
        if earlier is not None and decision is not None:
            answer = whole_duplicate_answer(answer, decision, earlier)
        elif (
            decision is not None
            and decision.reason == "same_result"
            and decision.previous_result is None
        ):
            # A channel of digests only (`keeps_previews`): the last result's preview is cut
            # from a ToolMessage that still holds it as the tool returned it (none once the
            # history lost it or a middleware changed it).
            digest = last_result_digest(snapshot(value, batch.batch_id), decision.call_key)
            shown = (
                None if digest is None else message_with_result(state, digest, self.messages_key)
            )
            if shown is not None:
                answer = last_result_answer(answer, shown, self.config.result_preview_chars)
        if decision is None:  # `planned.error`: arguments that could not be keyed
            trace = trace_info(None, replay=None, verdict="deny", reason="invalid_arguments")
            return _Blocked([answer], events, trace)
        messages = [answer]
        if decision.verdict is Verdict.ABORT and last:
            messages.append(final_ai_message(decision, batch))
        replay, source = _class_of(planned)
        trace = trace_info(decision, replay=replay, source=source)
        probe = (
            request.tool is None
            and planned.facts is not None
            and planned.facts.unknown
            and decision.verdict is Verdict.DENY
        )
        repeat = None if decision.verdict is Verdict.ABORT else _Allowed(planned, batch)
        return _Blocked(messages, events, trace, probe, notice=decision, repeat=repeat)

    def _known_tools(self, request: ToolCallRequest) -> tuple[str, ...] | None:
        """The node's tool names, counting a name the node answers (`request.tool` set)."""
        tools = self.tools
        name = request.tool_call["name"]
        if request.tool is not None and tools is not None and name not in tools:
            # A tool the model was not offered but the node has: learn it, never call it
            # unknown. A new tuple: plans are cached by the names they were made with.
            self.tools = tools = (*tools, name)
        return tools

    def learn_tools(self, names: Sequence[str]) -> None:
        """Add tool names that exist (the middleware's model calls offer them).

        Args:
            names: Tool names.
        """
        if not names:
            return
        known = self.tools or ()
        new = tuple(n for n in dict.fromkeys(names) if n not in known)
        if new or self.tools is None:
            self.tools = (*known, *new)

    def _answer(self, request: ToolCallRequest, blocked: _Blocked) -> ToolResult:
        """Give the guard's own answer to a call: record it, report it, return the message."""
        if blocked.notice is not None:
            emit(getattr(request.runtime, "stream_writer", None), blocked.notice, request.tool_call)
        answer, *stop = blocked.messages
        final = stop[0] if stop else None
        if self._record(request, blocked.events, stop=final):
            return cast("ToolMessage", answer)
        # No guarded node run to add the stop message to (a create_agent tool task): the
        # guard's own answer carries it.
        return Command(update={self.messages_key: blocked.messages})

    def _record(
        self,
        request: ToolCallRequest,
        events: list[Event],
        *,
        stop: AIMessage | None = None,
    ) -> bool:
        """Write events to the guard channel beside the node's output (see `task_writes`)."""
        return write_events(
            self,
            _config(request),
            self.config,
            self.channel,
            events,
            stop=stop,
            edits=self._carried(request),
        )

    def _carried(self, request: ToolCallRequest) -> tuple[Mapping[str, Any], ...]:
        """The preview edits this call's write carries (`PlannedValues`): the show, if any."""
        if self.planned_values is None:
            return ()
        state = self._decision_state(request)
        value = state.get(self.channel) if isinstance(state, Mapping) else None
        history = state_messages(state, self.messages_key)
        show = self.planned_values.planned(self.config, history, value)[1]
        return () if show is None else (show,)

    # -- recording ------------------------------------------------------------------------------

    def _replayed(self, request: ToolCallRequest, run: _Allowed, entry: LedgerEntry) -> ToolResult:
        """Answer a call whose outcome the ledger recorded, without running the tool."""
        message, sends = replayed_result(entry, request.tool_call)
        if sends:  # the tool's own state writes beside its answer (deepagents' files)
            send = channel_writer(_config(request))
            if send is not None:
                send(sends)
        decision = Decision(Verdict.REPLAY, "replayed", run.facts.key, tool=run.facts.tool, count=1)
        emit(getattr(request.runtime, "stream_writer", None), decision, request.tool_call)
        return self._finish(request, run, message)

    def _finish(
        self, request: ToolCallRequest, run: _Allowed, result: ToolResult, *, ran: bool = True
    ) -> ToolResult:
        """Record how a call ended; return exactly what it returned.

        A call that a middleware inside the guard answered without running the tool (a cache,
        an emulator, a HITL reject) counts as an attempt; its answer is not the tool's result
        and is not remembered as one.
        """
        decision = run.planned.decision
        if decision is not None and decision.shadowed is not None:
            # Shadow mode: the call runs; what enforcing would have done is reported.
            emit(getattr(request.runtime, "stream_writer", None), decision, request.tool_call)
        if not ran:
            self._record(request, [answered_event(run.planned, run.batch)])
            return result
        outcome, text = result_outcome(result)
        if isinstance(result, Command) and result.graph is not None:
            logger.debug("tool %r returned a Command for another graph", run.planned.tool_call)
        update = executed_write(
            self.config,
            run.planned,
            run.batch,
            outcome,
            text,
            command=isinstance(result, Command),
            preview=not self.defer_previews and keeps_previews(self.config, messages=True),
            call_id=run.call_id,
            edits=self._carried(request),
        )
        write_update(self, _config(request), self.channel, update)
        return result


_Run = TypeVar("_Run", Execute, AsyncExecute)


def _passing_node_errors(execute: _Run) -> _Run:
    """`execute`, its errors carried in a `NodeErrorPassage` past the node's error handling.

    What the node's own execution lets out leaves a node without a wrapper; the guarded
    node raises it again once its run is over (`TaskWrites.error`). The guard's plan
    records the call with the error the passage carries.
    """

    def run(request: ToolCallRequest) -> Any:
        try:
            result = execute(request)
        except Exception as exc:
            raise NodeErrorPassage(exc) from None
        return _passing_awaited(result) if inspect.isawaitable(result) else result

    return cast("_Run", run)


async def _passing_awaited(result: Awaitable[ToolResult]) -> ToolResult:
    """`_passing_node_errors` for an async execution."""
    try:
        return await result
    except Exception as exc:
        raise NodeErrorPassage(exc) from None


def _recorded_run(request: ToolCallRequest, hand: _Handed | None) -> LedgerEntry | None:
    """The hook's recorded outcome of a call a deciding copy got, if it is this very run.

    The hook's call, resumed, as it ran before but for what a middleware added: a fresh
    trace id is new in every process, so no row has these arguments, and checked anew the
    call would run a second time. The hook's row is its outcome (taken once: a retry below
    asks the ledger).
    """
    if hand is None or hand.recorded is None:
        return None
    recorded, asked, hand.recorded = hand.recorded, hand.asked, None
    if asked is not None and _ran_as_recorded(asked, request.tool_call, recorded):
        return recorded
    return None


def _ran_as_recorded(asked: Mapping[str, Any], runs: Mapping[str, Any], row: LedgerEntry) -> bool:
    """Whether a call runs as its recorded run did, but for keys a middleware added.

    `asked` is the call the row was found for; the row's body ran with `ran_args` when a
    middleware changed it, else with the asked arguments.
    """
    args = asked.get("args")
    if asked["name"] != runs["name"] or (row.tool and row.tool != runs["name"]):
        return False
    ran = row.ran_args if row.ran_args is not None else args
    return bool(_without_added(args, runs.get("args")) == _without_added(args, ran))


def _without_added(asked: Any, runs: Any) -> Any:
    """The arguments a call runs with, less the keys a middleware added (at any depth).

    A key the model did not give, in the arguments or in an argument that is a dict, is a
    decoration (a trace id): what is left is the call as the model would recognise it.
    """
    if type(asked) is not dict or type(runs) is not dict:
        return runs
    return {k: _without_added(asked[k], v) for k, v in runs.items() if k in asked}


def _sibling_duplicate(plan: BatchDecisions, planned: DecidedCall) -> bool:
    """Whether an earlier call of the same batch has this call's key (it runs, this one not)."""
    decision = planned.decision
    if decision is None:
        return False
    return any(
        other.decision is not None and other.decision.call_key == decision.call_key
        for other in plan.calls[: planned.index]
    )


def _shadowed_unknown(planned: DecidedCall) -> bool:
    """Whether shadow mode lets through a call to a name that does not exist."""
    decision = planned.decision
    return (
        decision is not None
        and decision.shadowed is not None
        and planned.facts is not None
        and planned.facts.unknown
    )


def _refused_as_unknown(result: ToolResult, name: str) -> bool:
    """Whether a result is the node's answer to a name it does not have."""
    message = tool_message(result)
    return (
        message is not None
        and message.status == "error"
        and f"{name} is not a valid tool" in message.text
    )


def misdeclared_channel_message(channel: str, kind: str) -> str:
    """The error for a guard channel that LangGraph built without `merge_guard_state`.

    Args:
        channel: The state key.
        kind: The channel's class (`"LastValue"`).

    Returns:
        The message, with the line to write for each kind of state.
    """
    return (
        f"the graph state's {channel!r} channel has no merge_guard_state reducer (LangGraph "
        f"built it as {kind}), so each call's update would replace the last and the guard "
        "would stop no loop. Declare it with the reducer as the LAST item of Annotated: "
        f"`{channel}: NotRequired[Annotated[dict[str, Any] | None, merge_guard_state]]` in "
        f"a TypedDict state, `{channel}: Annotated[dict[str, Any] | None, "
        "merge_guard_state] = None` in a pydantic or dataclass state (merge_guard_state "
        "from langgraph_replay_guard), or subclass ReplayGuardState; see "
        "docs/using-it-with.md."
    )


def _config(request: ToolCallRequest) -> Mapping[str, Any] | None:
    config: Mapping[str, Any] | None = getattr(request.runtime, "config", None)
    return config


def _answer_of(result: ToolResult | None) -> Any:
    """The ToolMessage of a guard's answer: what a tracer shows as the run's output."""
    if isinstance(result, Command) and isinstance(result.update, Mapping):
        for value in result.update.values():
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ToolMessage):
                        return item
    return result


def _class_of(planned: DecidedCall) -> tuple[str | None, str | None]:
    """A planned call's class and its source, for `trace_info` (None: arguments not keyed)."""
    facts = planned.facts
    return (None, None) if facts is None else (facts.replay, facts.source)


def abort_trace(planned: DecidedCall, aborting: DecidedCall) -> dict[str, Any]:
    """The traced decision of one call of a batch that aborts the run.

    The aborting call shows its own decision; its siblings show `abort` with reason
    `stopped` (they were not run because of it).

    Args:
        planned: The call.
        aborting: The call whose decision aborts the run.

    Returns:
        A `trace_info` object.
    """
    replay, source = _class_of(planned)
    if planned is aborting:
        return trace_info(planned.decision, replay=replay, source=source)
    return trace_info(
        planned.decision, replay=replay, source=source, verdict="abort", reason="stopped"
    )


def guarded_tool_node(guard: ReplayGuard, node: ToolNode) -> ToolNode:
    """Return a copy of a ToolNode whose tool calls go through the guard.

    The node's tools, name, tags, error handling and messages key are kept; a wrapper the
    node already had runs inside the guard.

    Args:
        guard: The guard.
        node: The node to guard.

    Returns:
        A new ToolNode, a drop-in replacement.
    """
    settings = tool_node_settings(node)
    inner: Wrapper | None = settings.wrap_tool_call
    ainner: AsyncWrapper | None = settings.awrap_tool_call
    messages_key = settings.messages_key
    wrapper = ToolCallWrapper(
        guard,
        inner=inner,
        ainner=ainner,
        messages_key=messages_key,
        raise_on_abort=not _converts_errors(settings.handle_tool_errors),
        tools=tuple(node.tools_by_name),
        reads_graph_state=True,
        passes_node_errors=True,
    )
    # A sync-only inner wrapper cannot be given an async `execute`: let the node run the
    # sync guard in async mode too, as it does for sync-only wrappers.
    async_wrapper = wrapper.awrap if inner is None or ainner is not None else None
    channel = wrapper.channel

    def task_scope(task_config: Any) -> TaskWrites:
        return TaskWrites(wrapper, task_config, wrapper.config, channel, messages_key)

    return scoped_tool_node(
        list(node.tools_by_name.values()),
        task_scope=task_scope,
        name=node.name or "tools",
        tags=list(node.tags or []),
        handle_tool_errors=_keeping_its_filter(settings.handle_tool_errors),
        messages_key=messages_key,
        wrap_tool_call=wrapper.wrap,
        awrap_tool_call=async_wrapper,
    )


def _converts_errors(flag: Any, error: type[Exception] = LoopAbortedError) -> bool:
    """Whether a ToolNode `handle_tool_errors` setting turns `error` into a message."""
    if not flag:
        return False
    if isinstance(flag, type | tuple):
        return issubclass(error, flag)
    if callable(flag):
        # LangGraph's default handles only ToolInvocationError; any other callable may
        # handle everything (ToolNode infers its types from annotations).
        return not is_default_tool_error_handler(flag)
    return True


def _keeping_its_filter(flag: Any) -> Any:
    """A `handle_tool_errors` setting that, behind the guard's wrapper, handles what `flag` does.

    A `ToolNode` applies its `handle_tool_errors` to every exception a wrapper lets out,
    whatever types the setting names; without a wrapper it handles only those types. So a
    guarded node given `(ValueError,)` (or a handler annotated `ValueError`) would turn any
    tool error into a message. This callable re-raises what `flag` does not handle and
    answers the rest as `flag` would. The guard's own stops are LangGraph control-flow
    signals (`integrations/signals.py`), which no `handle_tool_errors` catches.
    """
    handled: tuple[type[BaseException], ...]
    if isinstance(flag, type):
        handled = (flag,)
    elif isinstance(flag, tuple):
        handled = flag
    elif callable(flag) and not is_default_tool_error_handler(flag):
        handled = handled_error_types(flag)
    else:
        return flag  # True, a message, or LangGraph's default (it re-raises what it leaves)
    if any(issubclass(Exception, kind) for kind in handled):
        return flag  # handles every error: nothing to keep out

    def handle_tool_errors(error: Exception) -> str:
        if not isinstance(error, handled):
            raise error
        return tool_error_content(error, flag)

    return handle_tool_errors


def route_after_tools(
    then: str, channel: str = GUARD_CHANNEL, *, exit_behavior: str = "end"
) -> Callable[[Any], str]:
    """A conditional edge for after the tools node: `END` once the guard stopped the run.

    LangGraph runs it once per tools task, on the state plus that task's own writes. A
    graph that sends each tool call to the tools node on its own (`Send`) has one task per
    call: the task of a call that did not trip the stop sees no stop in the guard channel,
    so it also looks at its own answer, which the guard marks when it stopped the batch
    (`stopped_here`). Every task of a stopped batch then ends the run.

    Args:
        then: Node to go to otherwise (usually the model node).
        channel: State key of the guard channel.
        exit_behavior: The guard's `exit_behavior`; with `"error"` a recorded stop raises.

    Returns:
        A routing function for `add_conditional_edges`.

    Raises:
        LoopAbortedError: From the routing function, with `exit_behavior="error"` when the tools
            node recorded a stop instead of raising (its `handle_tool_errors` catches all).
    """

    def route(state: Any) -> str:
        value = state_field(state, channel)
        view = settled(value)
        stop = view.get("stop")
        if stop is None or view.get("turn") != current_turn(state, anchors=turn_anchors(value)):
            # With "error" the task of the call that tripped the stop raises (its channel
            # shows the stop); this one only ends its branch.
            return END if stopped_here(state) else then
        if exit_behavior == "error":
            raise stop_error(stop, hint="Set exit_behavior='end' to stop gracefully instead.")
        return END

    return route
