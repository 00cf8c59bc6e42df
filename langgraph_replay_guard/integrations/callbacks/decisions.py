"""Deciding and recording the tool calls the handler observes; unknown outcomes of unsafe calls."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from langchain_core.messages import AIMessage, ToolCall, ToolMessage

from langgraph_replay_guard.decisions.engine import (
    CallFacts,
    DecidedCall,
    Decision,
    Verdict,
    call_facts,
    decide_calls,
    loop_error,
    make_event,
    raises_on_abort,
    render_reminder,
    state_view,
    stop_error,
)
from langgraph_replay_guard.decisions.keys import content_hash
from langgraph_replay_guard.decisions.state import (
    Event,
    GuardView,
    Outcome,
    settled,
    show_update,
    state_for_turn,
)
from langgraph_replay_guard.decisions.texts import UNKNOWN_TOOL
from langgraph_replay_guard.integrations.answers import abort_answer, blocked_answer
from langgraph_replay_guard.integrations.batches import ToolCallBatch
from langgraph_replay_guard.integrations.callbacks.marks import RAISED, STARTED, MarkBook
from langgraph_replay_guard.integrations.callbacks.scopes import Scope, ScopeKey, ScopeTable
from langgraph_replay_guard.integrations.calls import (
    BatchDecisions,
    answered_event,
    denied_event,
    executed_write,
    guard_update,
    message_text,
    snapshot,
)
from langgraph_replay_guard.policy.config import keeps_previews
from langgraph_replay_guard.policy.resolver import PolicyResolver

if TYPE_CHECKING:
    from langgraph_replay_guard.policy.config import GuardConfig

__all__ = [
    "Admitted",
    "Call",
    "CallbackDecider",
    "Refusal",
    "Shadowed",
    "as_tool_call",
    "find_mark",
    "new_mark",
    "started_mark",
]

logger = logging.getLogger("langgraph_replay_guard")

Call = tuple[str, Any, str | None]
"""A tool call as a callback sees it: name, arguments (a dict or a plain string), id."""

_ANSWER_NOW = " Do not call any more tools; answer the user now."


@dataclass(frozen=True)
class Admitted:
    """A call the guard lets run; what to record once it ends."""

    scope: Scope
    plan: BatchDecisions
    planned: DecidedCall
    claim: dict[str, Any] | None = None
    """An `unsafe` call's mark, written before the body ran, to settle when it ends."""


@dataclass(frozen=True)
class Refusal:
    """A call (or executor step) that must not run, and what the model is told instead."""

    message: str
    decisions: tuple[tuple[Decision, ToolCall], ...]
    """The non-allow decisions behind it, for the custom stream."""


@dataclass(frozen=True)
class Shadowed:
    """An executor step that runs in shadow mode although enforcing would have refused it."""

    decisions: tuple[tuple[Decision, ToolCall], ...]
    """The shadowed decisions of its calls, for the custom stream and the decision event."""


def as_tool_call(call: Call) -> ToolCall:
    """A `Call` as LangChain's `ToolCall` (the engine's and the tracer's input)."""
    name, args, call_id = call
    # Executors may pass a plain string as a tool's input; the call key hashes it as it is.
    return cast("ToolCall", {"name": name, "args": args, "id": call_id, "type": "tool_call"})


class CallbackDecider:
    """The engine applied to what callbacks report: batches, tool starts and ends.

    Every method takes the scope's lock, so parallel tool calls of one batch (threads, or
    tasks of an async run) are decided and recorded consistently. A batch is decided when
    the model returns it, all calls against one snapshot and by position, exactly like the
    node wrapper; a tool start then claims its call's decision.

    Args:
        config: Guard configuration.
        scopes: Where the per-thread state lives.
    """

    def __init__(self, config: GuardConfig, scopes: ScopeTable) -> None:
        """Create the guard."""
        self.policies = PolicyResolver(config)
        """What class each call is: the configuration, then the classes the MCP annotations
        of the agent's tools give (learned by this handler, its own)."""
        self.scopes = scopes
        self.tools: tuple[str, ...] | None = None
        """Names of the agent's tools, once known (`check(agent)`, an executor's report)."""
        self.marks = MarkBook(scopes.store, scopes.namespace, scopes.max_threads)
        """The marks protecting unsafe calls: store items (or memory), outside the evictable
        scope table and never capped."""

    @property
    def config(self) -> GuardConfig:
        """The handler's configuration (what class a call is: ask `policies`)."""
        return self.policies.config

    def learn_tools(self, names: Sequence[str]) -> None:
        """Add tool names that exist: a call to any other name is an unknown tool.

        Args:
            names: Tool names.
        """
        known = self.tools or ()
        new = tuple(n for n in dict.fromkeys(names) if n not in known)
        if new:
            self.tools = (*known, *new)

    # -- model calls --------------------------------------------------------------------------

    def model_start(self, key: ScopeKey, turn: str, messages: Sequence[Any] = ()) -> None:
        """Note the turn of a model call, and the previews of what it is given.

        Raises:
            LoopAbortedError: With `exit_behavior="error"` when the turn was stopped (a tools node
                that handles every error turned the abort into a message).
        """
        scope = self.scopes.get(key)
        with scope.lock:
            scope.turn = turn
            self._show(scope, messages)
            scope.model_seen = True
            if not raises_on_abort(self.config):
                return
            view = state_for_turn(settled(self.scopes.read(scope)), turn, self.config.scope)
            stop = view.get("stop")
        if stop is not None:
            raise stop_error(stop)

    def _show(self, scope: Scope, messages: Sequence[Any]) -> None:
        """Write the previews of the results recorded since the last model call, as given.

        Once a model drives the calls, a result's event keeps its digest and no text (see
        `_record`): a middleware may change the result before the model sees it (`PIIMiddleware`
        redacts ToolMessages in its `before_model`), and the handler's state (in its store)
        must not keep more of it than the model is given. A preview is written when a
        ToolMessage of the model's messages still has the result's digest; when the messages
        hold no ToolMessage after the last AIMessage (an `AgentExecutor`'s scratchpad), as the
        tool returned it. Call with `scope.lock` held.
        """
        unshown, scope.unshown = scope.unshown, {}
        if not unshown:
            return
        answers = _last_answers(messages)
        if answers is not None:
            given = {content_hash(message_text(m)) for m in answers}
            unshown = {digest: text for digest, text in unshown.items() if digest in given}
        if unshown:
            self.scopes.write(scope, show_update(unshown))

    def model_answered(self, key: ScopeKey) -> None:
        """The model answered without tool calls: no reminder is pending for a next call."""
        scope = self.scopes.get(key)
        with scope.lock:
            scope.last_batch = None

    def batch(
        self, key: ScopeKey, batch_id: str, calls: Sequence[Call]
    ) -> list[tuple[Decision, ToolCall]]:
        """Decide the batch of tool calls a model call returned.

        Calls to unknown tools are recorded at once: a tools node answers them itself, so
        no tool run starts for them (an executor step refused for them records them once).

        Returns:
            The decisions recorded now, for the custom stream.

        Raises:
            LoopAbortedError: When the batch aborts with `exit_behavior="error"`, or the model
                asks for tools after the guard stopped the run.
        """
        scope = self.scopes.get(key)
        with scope.lock:
            plan = self._decide(scope, batch_id, calls, keep=True)
            recorded: list[tuple[Decision, ToolCall]] = []
            events: list[Event] = []
            for planned in plan.calls:
                if planned.facts is None or not planned.facts.unknown:
                    continue
                scope.taken.add(planned.index)
                scope.recorded.add(planned.index)
                if planned.decision is not None and planned.decision.shadowed is not None:
                    # Shadow mode: the node answers it; count what enforcing would have done.
                    events.append(answered_event(planned, plan.batch, shadowed=True))
                else:
                    events.extend(self._answer(scope, plan, planned)[1])
                if planned.decision is not None:
                    recorded.append((planned.decision, planned.tool_call))
            self._write(scope, events)
        return recorded

    def invalid_tool(self, key: ScopeKey, name: str, available: Sequence[str]) -> None:
        """Record a call an executor answered itself because `name` is not one of its tools.

        An `AgentExecutor` runs its `InvalidTool` for such a call, which reports the names
        it has: from then on the guard knows them and decides calls to other names itself.

        Args:
            key: The scope.
            name: The name the model asked for.
            available: The executor's tool names.
        """
        self.learn_tools(available)
        scope = self.scopes.get(key)
        with scope.lock:
            plan = scope.plan
            if plan is None:
                return
            for planned in plan.calls:
                tool_call = planned.tool_call
                if planned.index in scope.taken or tool_call["name"] != name:
                    continue
                scope.taken.add(planned.index)
                facts = call_facts(self.policies, name, tool_call["args"], tools=self.tools)
                # Shadow mode: the executor answered; enforcing would have refused it.
                shadow = self.config.mode == "shadow"
                event = make_event(
                    facts,
                    "answered" if shadow else "denied",
                    reason=UNKNOWN_TOOL,
                    batch=plan.batch.batch_id,
                    index=planned.index,
                    turn=plan.batch.turn,
                    batch_size=len(plan.calls),
                )
                self._write(scope, [event])
                return

    def step(
        self, key: ScopeKey, step: object, step_id: str, calls: Sequence[Call]
    ) -> Refusal | Shadowed | None:
        """Decide an `AgentExecutor` step, which is refused whole if any call is refused.

        The executor turns only an error raised while the agent plans into an observation,
        so a refusal must come before any tool of the step runs. Calls of a refused step
        that the guard would have allowed do not run either; the model is told to ask again.

        Args:
            key: The scope.
            step: The step's first `AgentAction`: a step is decided once, although an
                enclosing chain reports it again.
            step_id: Batch id of the step.
            calls: The step's calls.

        Returns:
            None to let the step run, or the refusal; in shadow mode, the step runs and
            what enforcing would have done is returned to report (`Shadowed`): its tools'
            runs cannot report it, an executor runs them outside any run context.

        Raises:
            LoopAbortedError: As for `batch`.
        """
        scope = self.scopes.get(key)
        with scope.lock:
            if scope.actions is step or not calls:
                return None
            scope.actions = step
            plan = scope.plan
            if plan is None or not _same_calls(plan, step_id, calls):
                plan = self._decide(scope, step_id, calls, keep=True)
            scope.executor = True
            answers = [self._answer(scope, plan, planned) for planned in plan.calls]
            if all(message is None for message, _ in answers):
                shadowed = tuple(
                    (planned.decision, planned.tool_call)
                    for planned in plan.calls
                    if planned.decision is not None
                    and planned.decision.shadowed is not None
                    and planned.index not in scope.recorded  # reported with the batch
                )
                return Shadowed(shadowed) if shadowed else None
            recorded = scope.recorded  # calls to unknown tools, recorded with the batch
            fresh = [
                (planned, message, events)
                for planned, (message, events) in zip(plan.calls, answers, strict=True)
                if planned.index not in recorded
            ]
            self._write(scope, [event for _, _, events in fresh for event in events])
            scope.plan = None
        refused = (
            (_refusal_decision(planned, events), planned.tool_call)
            for planned, message, events in fresh
            if message is not None
        )
        decisions = tuple((d, call) for d, call in refused if d is not None)
        return Refusal(_step_message(plan, [m for m, _ in answers]), decisions)

    # -- tool calls ---------------------------------------------------------------------------

    def tool_start(
        self, key: ScopeKey, call: Call, *, fallback_id: str, fallback_turn: str
    ) -> Admitted | Refusal:
        """Admit or refuse a tool run, recording a refusal.

        An `unsafe` call that is let run is claimed first: its mark, `started`, is in the
        store (or memory) before this returns, so that a crash or a store outage after its
        side effect leaves an unknown outcome rather than nothing.

        Args:
            key: The scope.
            call: The call as the tool run reports it.
            fallback_id: Batch id when the call belongs to no batch the guard saw.
            fallback_turn: Turn when no model call of the scope was seen.

        Returns:
            `Admitted` to let the tool run, or the `Refusal`.

        Raises:
            LoopAbortedError: As for `batch`, for a call of no known batch.
            Exception: What the store raised: the call was not claimed and must not run.
        """
        scope = self.scopes.get(key)
        with scope.lock:
            plan, planned = self._claim(scope, call, fallback_id, fallback_turn)
            facts = planned.facts
            unsafe = facts is not None and facts.replay == "unsafe"
            claim = started_mark(facts) if facts is not None and unsafe else None
            message, events = self._answer(scope, plan, planned, claim=claim)
            if message is None:  # an unsafe call let run was claimed on the way
                return Admitted(scope, plan, planned, claim=claim)
            self._write(scope, events)
        decision = _refusal_decision(planned, events)
        return Refusal(message, ((decision, planned.tool_call),) if decision else ())

    def record(self, admitted: Admitted, outcome: str, text: str | None) -> None:
        """Record how an admitted call ended: `success`, `failure` or `timeout`.

        The call's claim is settled first: its outcome is known.
        """
        if admitted.claim is not None:
            self._settle(admitted)
        self._record(admitted, outcome, text)

    def _record(self, admitted: Admitted, outcome: str, text: str | None) -> None:
        planned, batch = admitted.planned, admitted.plan.batch
        if planned.facts is None:
            return
        # Previews go into the handler's state (it has no messages to quote from) unless
        # `store_previews=False`.
        previews = keeps_previews(self.config, messages=False)
        if outcome == "timeout":
            event = make_event(
                planned.facts,
                "timeout",
                batch=batch.batch_id,
                index=planned.index,
                turn=batch.turn,
            )
            update = guard_update(self.config, [event])
        else:
            config = self.config
            deferred = admitted.scope.model_seen and previews
            # The event and its write in one pass of the core (`executed_write`).
            update = executed_write(config, planned, batch, outcome, text, preview=not deferred)
            (event,) = update["events"]
        with admitted.scope.lock:
            digest = event.get("h")
            if outcome == "success" and event.get("p") is None and text and digest and previews:
                # Kept in this process until the next model call shows what it is given;
                # bounded, as tools may run long without a model call (the oldest go).
                unshown = admitted.scope.unshown
                unshown.pop(digest, None)
                unshown[digest] = text[: self.config.result_preview_chars]
                if len(unshown) > _MAX_UNSHOWN:
                    del unshown[next(iter(unshown))]
            self.scopes.write(admitted.scope, update)

    def failed(self, admitted: Admitted, error: BaseException) -> None:
        """Record an admitted call whose tool raised.

        An `unsafe` call that raised an exception its policy does not name in
        `no_effect_errors` may have taken effect before it failed: its outcome is unknown,
        and identical calls in the scope are refused until `resolve`. Other calls (a
        `pure` read, an `idempotent` call, a no-effect error) stay plain failures that may
        be retried.
        """
        facts = admitted.planned.facts
        if (
            facts is not None
            and facts.replay == "unsafe"
            and not self.policies.policy_for(facts.tool).raised_before_effect(error)
        ):
            # The mark first: it protects a side effect, the event only counts the call.
            self._mark(admitted.scope, facts, error)
        elif admitted.claim is not None:
            self._settle(admitted)
        outcome = "timeout" if isinstance(error, TimeoutError) else "failure"
        self._record(admitted, outcome, str(error))

    def paused(self, admitted: Admitted) -> None:
        """An admitted call paused (its tool called `interrupt()`): LangGraph reruns it.

        Its claim is settled, so that the rerun on resume is not refused.
        """
        if admitted.claim is not None:
            self._settle(admitted)

    def _settle(self, admitted: Admitted) -> None:
        """Clear the claim of a call whose outcome is known.

        If the store cannot take it, the claim stays: other processes refuse identical calls
        as an unknown outcome until someone resolves it (the safe side of the error); this
        one, which knows the call ended, takes the claim over at its next identical call.
        """
        facts, claim = admitted.planned.facts, admitted.claim
        if facts is None or claim is None:
            return
        key = admitted.scope.key
        try:
            self.marks.drop(key, facts.key)
        except Exception as exc:
            self.marks.ended_later(key, claim)
            logger.error(
                "langgraph-replay-guard: unsafe tool '%s' (%s) ended, but the handler's store "
                "could not clear the mark written when it started (%s: %s). This process "
                "takes it over at its next identical call; other processes refuse identical "
                "calls as an unknown outcome until handler.resolve(%r, %r, <args>, "
                "'succeeded' | 'failed' | 'retry') clears it.",
                facts.tool,
                facts.args_summary,
                type(exc).__name__,
                exc,
                key[1],
                facts.tool,
            )

    def _mark(self, scope: Scope, facts: CallFacts, error: BaseException) -> None:
        """Mark a call's outcome unknown, naming the error its body raised.

        The call was claimed before its body ran, so its mark is already durable: this adds
        the error to it. If the store cannot take that, the claim stands and identical calls
        are still refused, in every process; only the error text is missing.
        """
        try:
            self.marks.put(scope.key, new_mark(facts, error))
        except Exception as exc:
            logger.error(
                "langgraph-replay-guard: unsafe tool '%s' (%s) raised %s, and the handler's "
                "store could not record it (%s: %s). The mark written in the store when the "
                "call started stands: identical calls are refused as an unknown outcome, in "
                "every process, until handler.resolve settles it. Fix the store: while it is "
                "down, no unsafe or idempotent call can run safely and the handler refuses them.",
                facts.tool,
                facts.args_summary,
                type(error).__name__,
                type(exc).__name__,
                exc,
            )
        logger.warning(
            "langgraph-replay-guard: unsafe tool '%s' (%s) raised %s: its outcome is unknown "
            "and identical calls are refused until handler.resolve",
            facts.tool,
            facts.args_summary,
            type(error).__name__,
        )

    def resolve(
        self, key: ScopeKey, tool: str, args: Any, outcome: str, result: Any = None
    ) -> None:
        """Settle an unknown outcome: clear its mark, recording a confirmed result.

        Args:
            key: The scope.
            tool: The tool's name.
            args: The call's arguments, as the model gave them.
            outcome: `"succeeded"`, `"failed"` or `"retry"`.
            result: For `succeeded`/`failed`, the confirmed result or error text.

        Raises:
            ValueError: `outcome` is not one of the three words, or no unknown outcome is
                recorded for that call in the scope.
        """
        if outcome not in RESOLUTIONS:
            msg = f"outcome={outcome!r}: use 'succeeded', 'failed' or 'retry'."
            raise ValueError(msg)
        facts = call_facts(self.policies, tool, args)
        scope = self.scopes.get(key)
        with scope.lock:
            state = self.scopes.read(scope)
            legacy = marks_of(state)  # marks of releases that kept them in the state
            in_legacy = find_mark(legacy, facts.key) is not None
            if not in_legacy and self.marks.find(key, facts.key) is None:
                listed = [*legacy, *self.marks.page(key, limit=_LISTED + 1)]
                known = ", ".join(f"{m['n']}({m['a']})" for m in listed[:_LISTED]) or "none"
                more = ", ..." if len(listed) > _LISTED else ""
                msg = (
                    f"No unknown outcome is recorded for '{tool}' with these args "
                    f"({facts.args_summary}) in {key[0]} {key[1]!r}: nothing to resolve. "
                    f"Unknown outcomes there: {known}{more}. Pass the args exactly as the tool "
                    "got them."
                )
                raise ValueError(msg)
            self.marks.drop(key, facts.key)
            if in_legacy:
                self.scopes.write_field(scope, UNKNOWN_FIELD, without_mark(legacy, facts.key))
            state = scope.value
            if outcome != "retry" and result is not None:
                # Recorded as the call's latest outcome, for inspect() and result-diff.
                turn = settled(state).get("turn")
                executed: Outcome = "success" if outcome == "succeeded" else "failure"
                text = result if isinstance(result, str) else repr(result)
                event = make_event(
                    facts,
                    executed,
                    result=text,
                    turn=turn,
                )
                self._write(scope, [event])

    # -- reading --------------------------------------------------------------------------------

    def unknown(self, key: ScopeKey, limit: int, offset: int) -> list[dict[str, Any]]:
        """A page of a scope's marks: those an earlier release kept in its state first."""
        if key[0] == "thread":
            legacy = marks_of(self.scopes.read_thread(key[1]))
        else:
            scope = self.scopes.peek(key)
            legacy = marks_of(scope.value if scope is not None else None)
        shown = legacy[offset : offset + limit]
        if len(shown) == limit:
            return shown
        rest = max(0, offset - len(legacy))
        return [*shown, *self.marks.page(key, limit=limit - len(shown), offset=rest)]

    def view(self, key: ScopeKey) -> GuardView:
        """A read-only view of a scope's state (the reminder is not cleared)."""
        if key[0] == "thread":
            value = self.scopes.read_thread(key[1])
        else:
            scope = self.scopes.peek(key)
            value = scope.value if scope is not None else None
        return state_view(value)

    def reminder(self, key: ScopeKey) -> str | None:
        """The pending reminder for the model call after the tripping batch, returned once."""
        scope = self.scopes.peek(key)
        if scope is None:
            return None
        with scope.lock:
            pending = settled(self.scopes.read(scope)).get("reminder")
            if not pending or pending.get("batch") != scope.last_batch:
                return None
            marker = tuple(sorted(pending.items()))
            if marker == scope.shown:
                return None
            scope.shown = marker
            return render_reminder(pending)

    # -- internals (scope lock held) ----------------------------------------------------------

    def _write(self, scope: Scope, events: list[Event]) -> None:
        if events:
            self.scopes.write(scope, guard_update(self.config, events))

    def _decide(
        self, scope: Scope, batch_id: str, calls: Sequence[Call], *, keep: bool
    ) -> BatchDecisions:
        config = self.config
        state = snapshot(self.scopes.read(scope), batch_id)
        # The batch's AIMessage only carries the id: executor calls may have string args.
        batch = ToolCallBatch(AIMessage(content="", id=batch_id), scope.turn)
        tool_calls = [as_tool_call(call) for call in calls]
        calls_planned = decide_calls(
            self.policies, state, tool_calls, scope.turn, batch_id=batch_id, tools=self.tools
        )
        plan = BatchDecisions(calls=calls_planned, batch=batch)
        scope.last_batch = batch_id
        come_back = plan.stop_ignored
        if come_back is not None and come_back.decision is not None:
            raise loop_error(come_back.decision, fix=_CALLBACK_FIX)
        # With "continue" a plan aborts only when a blocked call escalated to a stop.
        aborting = plan.abort
        if aborting is not None and aborting.decision is not None and raises_on_abort(config):
            self._write(scope, abort_answer(aborting, aborting, batch)[1])
            raise loop_error(aborting.decision)
        if keep:
            scope.plan, scope.taken, scope.executor = plan, set(), False
            scope.recorded = set()
        return plan

    def _claim(
        self, scope: Scope, call: Call, fallback_id: str, fallback_turn: str
    ) -> tuple[BatchDecisions, DecidedCall]:
        """The planned call a tool run is; a batch of one when it belongs to no known batch."""
        name, args, call_id = call
        plan = scope.plan
        if plan is not None:
            for planned in plan.calls:
                tool_call = planned.tool_call
                if call_id is not None and tool_call.get("id") == call_id:
                    # A re-run (RetryPolicy, resume) gets the decision the call got first.
                    scope.taken.add(planned.index)
                    return plan, planned
                if (
                    planned.index not in scope.taken
                    and (call_id is None or scope.executor)
                    and tool_call["name"] == name
                    and tool_call["args"] == args
                ):
                    scope.taken.add(planned.index)  # executors pass no tool call id
                    return plan, planned
        if scope.turn is None:
            scope.turn = fallback_turn
        single = self._decide(scope, call_id or fallback_id, [call], keep=False)
        return single, single.calls[0]

    def _answer(
        self,
        scope: Scope,
        plan: BatchDecisions,
        planned: DecidedCall,
        *,
        claim: dict[str, Any] | None = None,
    ) -> tuple[str | None, list[Event]]:
        """What the model is told instead of running a call (None: run it), and its events.

        With `claim` (an `unsafe` call's `started` mark), a call let run is claimed (see
        `_unknown_answer`).
        """
        aborting = plan.abort
        if aborting is not None and aborting.decision is not None:
            answer, events = abort_answer(planned, aborting, plan.batch)
            # A callback cannot end the run: ask the model to end it.
            return answer.text + (_ANSWER_NOW if planned is aborting else ""), events
        decision = planned.decision
        if decision is not None and decision.verdict is Verdict.ALLOW:
            return self._unknown_answer(scope, plan, planned, claim=claim)
        answer, events = blocked_answer(planned, plan.batch)
        return answer.text, events

    def _unknown_answer(
        self,
        scope: Scope,
        plan: BatchDecisions,
        planned: DecidedCall,
        *,
        claim: dict[str, Any] | None,
    ) -> tuple[str | None, list[Event]]:
        """Refuse an unsafe call whose identical earlier call has an unknown outcome.

        With `claim` (the call is about to run), the check and the claim are one write: the
        call's `started` mark is written unless one is there already, atomically where the
        store allows, so two processes cannot both run it.
        """
        facts = planned.facts
        if facts is None or facts.replay != "unsafe":
            return None, []  # only unsafe calls pay the store read
        mark = find_mark(marks_of(self.scopes.read(scope)), facts.key)
        if mark is None and claim is not None:
            mark = self.marks.claim(scope.key, claim)
        elif mark is None:
            mark = self.marks.find(scope.key, facts.key)
        if mark is None:
            return None, []
        message = unknown_message(mark, scope.key)
        logger.warning("langgraph-replay-guard: %s", message)
        return message, [denied_event(planned, plan.batch, UNKNOWN_REASON, abort=False)]


def _refusal_decision(planned: DecidedCall, events: list[Event]) -> Decision | None:
    """The decision reported on the stream for a refused call."""
    decision = planned.decision
    recorded = events[-1]["r"] if events else None  # the last event's reason
    if planned.facts is None or recorded not in (UNKNOWN_REASON, "stopped"):
        return decision
    # What was recorded: an unknown outcome, or a call of a batch another call stopped
    # (its own decision may be a stop too; the batch's first one is the stop).
    return Decision(
        Verdict.DENY,
        recorded,
        planned.facts.key,
        message=None,
        tool=planned.facts.tool,
        count=decision.count if decision is not None else 1,
    )


def _same_calls(plan: BatchDecisions, batch_id: str, calls: Sequence[Call]) -> bool:
    """Whether a plan (made when the model answered) already covers an executor step."""
    if plan.batch.batch_id != batch_id or len(plan.calls) != len(calls):
        return False
    return all(
        planned.tool_call["name"] == name and planned.tool_call["args"] == args
        for planned, (name, args, _) in zip(plan.calls, calls, strict=True)
    )


_CALLBACK_FIX = (
    "A callback cannot end a run any other way: use ReplayGuardMiddleware (create_agent) to "
    "end runs gracefully."
)


def _step_message(plan: BatchDecisions, messages: list[str | None]) -> str:
    """The observation of a refused `AgentExecutor` step."""
    if len(plan.calls) == 1 and messages[0] is not None:
        return messages[0]
    lines = ["The loop guard did not run the tool calls of this step:"]
    for planned, message in zip(plan.calls, messages, strict=True):
        why = message or (
            "not run because another call of the same step was refused; ask for it again "
            "if you still need it."
        )
        lines.append(f"- {planned.tool_call['name']}: {why}")
    return "\n".join(lines)


# -- unknown outcomes: unsafe calls that raised, refused again until a human settles them ----

UNKNOWN_FIELD = "unknown"
"""Field of the handler's per-thread state holding the marks (a list, oldest first)."""

UNKNOWN_REASON = "unknown_outcome"
"""Reason of the refusal of a call whose identical earlier call has an unknown outcome."""

_MAX_ERROR_CHARS = 300

_LISTED = 20
"""Most unknown outcomes a `resolve` error lists (read as one page, never all)."""

RESOLUTIONS: tuple[str, ...] = ("succeeded", "failed", "retry")


def marks_of(state: Any) -> list[dict[str, Any]]:
    """The unknown-outcome marks of a per-thread state (a copy; empty when none)."""
    marks = state.get(UNKNOWN_FIELD) if isinstance(state, Mapping) else None
    if not isinstance(marks, list):
        return []
    return [dict(m) for m in marks if isinstance(m, Mapping) and isinstance(m.get("k"), str)]


def find_mark(marks: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """The mark of the call key, if its outcome is unknown."""
    for mark in marks:
        if mark["k"] == key:
            return mark
    return None


def new_mark(facts: CallFacts, error: BaseException) -> dict[str, Any]:
    """The JSON mark of a call whose tool raised `error` (the error text is bounded)."""
    text = f"{type(error).__name__}: {error}"
    if len(text) > _MAX_ERROR_CHARS:
        text = text[: _MAX_ERROR_CHARS - 3] + "..."
    return {"k": facts.key, "n": facts.tool, "a": facts.args_summary, "e": text, "s": RAISED}


def started_mark(facts: CallFacts) -> dict[str, Any]:
    """The JSON mark (the claim) of an unsafe call whose body is about to run.

    Its `rev`, unique, tells this claim from a later one of the identical call.
    """
    return {
        "k": facts.key,
        "n": facts.tool,
        "a": facts.args_summary,
        "e": "",
        "s": STARTED,
        "rev": uuid.uuid4().hex,
    }


def without_mark(marks: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The marks without the call key's."""
    return [m for m in marks if m["k"] != key]


def unknown_message(mark: Mapping[str, Any], scope: ScopeKey) -> str:
    """What the model (and the log) is told when an identical call is refused.

    Args:
        mark: The mark of the earlier call.
        scope: The handler's scope key: `("thread", id)` or `("run", root run id)`.

    Returns:
        The refusal text.
    """
    where = repr(scope[1]) if scope[0] == "thread" else f"None, run_id={scope[1]!r}"
    if mark.get("s") == STARTED:
        happened = (
            "started and its end was never recorded (it may still be running, or its process "
            "crashed or lost the guard's store while it ran)"
        )
    else:
        happened = f"raised {mark['e']}"
    return (
        f"Not executed: an earlier identical call of unsafe tool '{mark['n']}' ({mark['a']}) "
        f"{happened}, so its outcome is unknown: it may have taken effect. Running it "
        "again could repeat its side effect, so the guard refuses it until someone checks "
        "upstream and settles it with handler.resolve("
        f"{where}, {mark['n']!r}, <args>, 'succeeded' | 'failed' | 'retry'). "
        "Do not call it again now; tell the user its outcome is unknown."
    )


_MAX_UNSHOWN = 256
"""Most previews a scope keeps in memory for the next model call (`Scope.unshown`)."""


def _last_answers(messages: Sequence[Any]) -> list[ToolMessage] | None:
    """The ToolMessages after the last AIMessage, or None when there is none to compare."""
    answers: list[ToolMessage] = []
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            answers.append(message)
        elif isinstance(message, AIMessage):
            break
    return answers or None
