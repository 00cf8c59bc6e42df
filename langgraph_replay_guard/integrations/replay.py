"""Replay safety inside LangGraph: look a call up in the ledger, run it once, record its outcome."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.messages import ToolMessage
from langgraph.types import interrupt

from langgraph_replay_guard.errors import ReplayGuardWarning, ReplayUnsafeError
from langgraph_replay_guard.integrations.calls import state_messages, tool_message
from langgraph_replay_guard.keys import canonical_json
from langgraph_replay_guard.ledger import (
    CallIdentity,
    LedgerEntry,
    ReplayLedger,
    finished_entry,
    json_safe_result,
    node_path,
    now_iso,
    started_entry,
)

if TYPE_CHECKING:
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from langgraph_replay_guard.config import GuardConfig
    from langgraph_replay_guard.engine import CallFacts

__all__ = [
    "IDEMPOTENCY_KEY_CONFIG",
    "INTERRUPT_KIND",
    "Outcome",
    "ReplayGate",
    "RunTicket",
    "apply_resolution",
    "replayed_message",
]

logger = logging.getLogger("langgraph_replay_guard")

IDEMPOTENCY_KEY_CONFIG = "replay_guard_idempotency_key"
"""Key of `runtime.config["configurable"]` holding an idempotent call's idempotency key."""

Outcome = Literal["succeeded", "failed", "retry"]

INTERRUPT_KIND = "replay_guard.unknown_outcome"
"""`"kind"` of the value of the guard's `interrupt()` for an unknown outcome."""


@dataclass(frozen=True)
class RunTicket:
    """A call the ledger lets run: the (possibly changed) request and what to record after."""

    request: ToolCallRequest
    ledger: ReplayLedger
    identity: CallIdentity
    entry: LedgerEntry | None
    """The `started` row (non-pure tools), or None for a pure call (recorded afterwards)."""
    replay: str
    tool: str
    args_hash: str


@dataclass(frozen=True)
class _Step:
    """What the ledger says about a call."""

    kind: Literal["run", "replay", "unknown", "search"]
    row: LedgerEntry | None = None
    key: str | None = None
    why: str = ""

    @property
    def previous(self) -> LedgerEntry | None:
        """The identity's own earlier row, which a new `started` row continues."""
        return self.row if self.kind == "run" else None


@dataclass(frozen=True)
class _Lookup:
    ledger: ReplayLedger
    identity: CallIdentity
    facts: CallFacts
    args_hash: str
    args: Any


def _args_hash(args: Any) -> str:
    text = canonical_json(args, root="args")
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def replayed_message(entry: LedgerEntry, tool_call: Mapping[str, Any]) -> ToolMessage:
    """Rebuild the recorded ToolMessage for the current tool_call_id."""
    result = entry.result or {}
    content = result.get("content")
    if not isinstance(content, str | list):
        content = "" if content is None else json.dumps(content)
    return ToolMessage(
        content=content,
        artifact=result.get("artifact"),
        status="error" if entry.status == "failed" else "success",
        name=tool_call.get("name") or entry.tool,
        tool_call_id=tool_call.get("id") or entry.tool_call_id,
        response_metadata={"replay_guard": "replayed"},
    )


def apply_resolution(entry: LedgerEntry, outcome: str, result: Any) -> LedgerEntry:
    """The row after a human resolved an unknown outcome.

    Raises:
        ValueError: For an unknown outcome word, or a row whose outcome is already known.
    """
    if entry.has_outcome:
        msg = (
            f"Tool call '{entry.tool_call_id}' of '{entry.tool}' already has a recorded outcome "
            f"({entry.status}); only an unknown outcome can be resolved."
        )
        raise ValueError(msg)
    if outcome == "retry":
        return entry.with_status("retry", resolved_by="human", finished_at=now_iso())
    if outcome == "succeeded":
        content = result if isinstance(result, str | list) else json.dumps(result)
        recorded = json_safe_result("" if result is None else content, None, "success")
    elif outcome == "failed":
        text = result if isinstance(result, str) else None
        if text is None and result is not None:
            text = json.dumps(result)
        recorded = json_safe_result(
            text or "An operator marked this call as failed.", None, "error"
        )
    else:
        msg = (
            f"Unknown outcome {outcome!r} for tool call '{entry.tool_call_id}': use "
            "'succeeded' (with the result confirmed upstream), 'failed' or 'retry'."
        )
        raise ValueError(msg)
    return finished_entry(entry, recorded).with_status(
        "completed" if outcome == "succeeded" else "failed", resolved_by="human"
    )


def _answered_ids(state: Any, messages_key: str) -> set[str]:
    messages = state_messages(state, messages_key)
    return {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}


class ReplayGate:
    """The ledger side of the tool-call wrapper (sync and async).

    Args:
        config: Guard configuration.
        store: The store given to the guard; when None, the graph's store (`compile(store=)`,
            `create_agent(store=)`) is used; without either there is no ledger.
        namespace: Namespace prefix of the ledger rows.
        messages_key: State key of the message list.
    """

    def __init__(
        self,
        config: GuardConfig,
        *,
        store: Any = None,
        namespace: tuple[str, ...] = ("replay_guard",),
        messages_key: str = "messages",
    ) -> None:
        """Create the gate."""
        self.config = config
        self.namespace = namespace
        self.messages_key = messages_key
        self._ledger: ReplayLedger | None = None
        if store is not None:
            self._ledger = ReplayLedger(store, namespace=namespace)
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    # -- setup -----------------------------------------------------------------------------------

    def _lookup(
        self, request: ToolCallRequest, facts: CallFacts, ai_message_id: str | None
    ) -> _Lookup | None:
        runtime = request.runtime
        config = getattr(runtime, "config", None) or {}
        configurable = config.get("configurable", {})
        ledger = self._ledger
        graph_store = getattr(runtime, "store", None)
        if ledger is None and graph_store is not None:
            ledger = ReplayLedger(graph_store, namespace=self.namespace)
        thread_id = configurable.get("thread_id")
        if facts.replay == "unsafe":
            self._warn_setup(facts.tool, ledger, thread_id, configurable)
        if ledger is None or thread_id is None:
            return None
        tool_call = request.tool_call
        identity = CallIdentity(
            thread_id=str(thread_id),
            node=node_path(configurable.get("checkpoint_ns")),
            ai_message_id=ai_message_id,
            tool_call_id=str(tool_call.get("id") or ""),
        )
        args = tool_call.get("args", {})
        return _Lookup(ledger, identity, facts, _args_hash(args), args)

    def _warn_setup(
        self, tool: str, ledger: ReplayLedger | None, thread_id: Any, configurable: Any
    ) -> None:
        problems = []
        if ledger is None:
            problems.append(
                "no store for the replay ledger (pass store= to the guard, or compile the "
                "graph with a store): an interrupted or crashed run may send it twice"
            )
        if thread_id is None:
            problems.append("no thread_id in the config: calls have no durable identity")
        checkpointer = configurable.get("__pregel_checkpointer")
        if checkpointer is None or type(checkpointer).__name__ == "InMemorySaver":
            problems.append(
                "no durable checkpointer (InMemorySaver or none): after a restart the thread, "
                "and the ids that make a call's identity, are gone"
            )
        durability = configurable.get("__pregel_durability") or "async"
        if durability != "sync":
            problems.append(
                f"durability={durability!r}: after a crash the model's message may be lost and "
                "asked again with new ids (the guard then stops the repeat, which needs a "
                "human); run with durability='sync'"
            )
        for problem in problems:
            with self._lock:
                if problem in self._warned:
                    continue
                self._warned.add(problem)
            warnings.warn(
                f"langgraph-replay-guard: unsafe tool '{tool}' runs with {problem}.",
                ReplayGuardWarning,
                stacklevel=4,
            )

    # -- the decision ---------------------------------------------------------------------------

    def _after_get(self, look: _Lookup, entry: LedgerEntry | None) -> _Step:
        """What the identity's own row says: replay it, run, an unknown outcome, or search."""
        if entry is None:
            return _Step("run") if look.facts.replay == "pure" else _Step("search")
        entry.check_args(look.args_hash, look.identity)
        if entry.has_outcome:
            return _Step("replay", entry)
        if entry.status in ("retry", "interrupted") or look.facts.replay != "unsafe":
            return _Step("run", entry, key=entry.idempotency_key)
        return _Step("unknown", entry, why="its outcome is unknown")

    def _after_search(
        self, request: ToolCallRequest, look: _Lookup, rows: list[LedgerEntry]
    ) -> _Step:
        """A new identity: does an identical call of another identity forbid running it?"""
        # Siblings in the same AIMessage are not earlier calls: the batch plan decides them.
        others = [
            row
            for row in rows
            if row.key != look.identity.key and row.ai_message_id != look.identity.ai_message_id
        ]
        if not others:
            return _Step("run")
        if look.facts.replay == "unsafe":
            for row in others:
                if row.outcome_unknown and row.replay == "unsafe":
                    return _Step("unknown", row, why="an identical call's outcome is unknown")
        # An earlier identical call whose answer never reached the thread: its AIMessage was
        # lost in a crash (or LangGraph lost the writes that would have answered it), and the
        # model asked again with new ids. A repeat after an answered call is deliberate.
        answered = _answered_ids(request.state, self.messages_key)
        lost = [row for row in others if row.tool_call_id not in answered]
        if not lost:
            return _Step("run")
        if look.facts.replay == "unsafe":
            why = (
                "an identical earlier call was never answered in this thread (its message was "
                "lost in a crash) and may have had its effect"
            )
            return _Step("unknown", lost[0], why=why)
        return _Step("run", key=lost[0].idempotency_key)  # idempotent: the lost call's key

    def _ticket(
        self, request: ToolCallRequest, look: _Lookup, previous: LedgerEntry | None, key: str | None
    ) -> RunTicket:
        entry = None
        if look.facts.replay != "pure":
            if look.facts.replay == "idempotent":
                key = key or look.identity.idempotency_key
                request = self._deliver_key(request, look.facts.tool, key)
            else:
                key = None
            entry = started_entry(
                look.identity,
                tool=look.facts.tool,
                replay=look.facts.replay,
                args_hash=look.args_hash,
                args=look.args,
                idempotency_key=key,
                previous=previous,
            )
        return RunTicket(
            request,
            look.ledger,
            look.identity,
            entry,
            look.facts.replay,
            look.facts.tool,
            look.args_hash,
        )

    def _deliver_key(self, request: ToolCallRequest, tool: str, key: str) -> ToolCallRequest:
        policy = self.config.policy_for(tool)
        if policy.idempotency_key_arg:
            call = request.tool_call
            args = {**call.get("args", {}), policy.idempotency_key_arg: key}
            request = request.override(tool_call={**call, "args": args})
        runtime = request.runtime
        config: Any = dict(getattr(runtime, "config", None) or {})
        config["configurable"] = {**config.get("configurable", {}), IDEMPOTENCY_KEY_CONFIG: key}
        try:
            runtime = dataclasses.replace(runtime, config=config)
        except TypeError:  # not a dataclass: leave the runtime as it is
            return request
        return dataclasses.replace(request, runtime=runtime)

    def _unknown(
        self, look: _Lookup, row: LedgerEntry, why: str
    ) -> tuple[ReplayUnsafeError, LedgerEntry | None, dict[str, Any]]:
        """The error (or interrupt value) for an unknown outcome, and the row to write first."""
        own = row.key == look.identity.key
        blocked = None
        if not own:
            blocked = LedgerEntry(
                key=look.identity.key,
                status="blocked",
                tool=look.facts.tool,
                replay=look.facts.replay,
                args_hash=look.args_hash,
                tool_call_id=look.identity.tool_call_id,
                ai_message_id=look.identity.ai_message_id,
                started_at=row.started_at,
                args=look.args,
                last_error=f"blocked: {why} (tool_call_id {row.tool_call_id})",
            )
        facts = {
            "kind": INTERRUPT_KIND,
            "thread_id": look.identity.thread_id,
            "tool": look.facts.tool,
            "args": look.args,
            "tool_call_id": look.identity.tool_call_id,
            "started_at": row.started_at,
            "status": row.status,
            "reason": why,
            "earlier_tool_call_id": None if own else row.tool_call_id,
            "last_error": row.last_error,
            "resolve": (
                f"guard.resolve(graph, config, {look.identity.tool_call_id!r}, "
                "outcome='succeeded' | 'failed' | 'retry', result=...)"
            ),
        }
        msg = (
            f"Unsafe tool '{look.facts.tool}' (tool_call_id {look.identity.tool_call_id!r}, "
            f"thread {look.identity.thread_id!r}, args {canonical_json(look.args)[:200]}): {why}; "
            f"started at {row.started_at}, status '{row.status}'. Running it again could repeat "
            "its side effect. Check upstream whether it happened, then call "
            f"{facts['resolve']}."
        )
        return ReplayUnsafeError(msg, **facts), blocked, facts

    def _resume_value(self, look: _Lookup, value: Any, row: LedgerEntry) -> LedgerEntry:
        if isinstance(value, Mapping) and value.get("outcome") is not None:
            target = value.get("tool_call_id")
            if target in (None, look.identity.tool_call_id):
                return apply_resolution(row, str(value["outcome"]), value.get("result"))
        msg = (
            f"The guard's interrupt for tool call {look.identity.tool_call_id!r} of "
            f"'{look.facts.tool}' was resumed with {value!r}: resume with "
            "guard.resolve(...) or Command(resume={'outcome': 'succeeded' | 'failed' | 'retry', "
            "'result': ...})."
        )
        raise ValueError(msg)

    # -- sync -----------------------------------------------------------------------------------

    def check(
        self, request: ToolCallRequest, facts: CallFacts, ai_message_id: str | None
    ) -> RunTicket | LedgerEntry | None:
        """Look an allowed call up: a ticket to run it, a recorded entry to replay, or None.

        None means there is no ledger (no store or no thread id): run as usual.

        Raises:
            ReplayUnsafeError: An unsafe call's outcome is unknown (`on_unsafe="raise"`).
            ReplayConflictError: The identity was recorded with other arguments.
        """
        look = self._lookup(request, facts, ai_message_id)
        if look is None:
            return None
        step = self._after_get(look, look.ledger.get(look.identity))
        if step.kind == "search":
            rows = look.ledger.same_calls(look.identity.thread_id, facts.tool, look.args_hash)
            step = self._after_search(request, look, rows)
        if step.kind == "replay":
            assert step.row is not None
            return step.row
        if step.kind == "unknown":
            assert step.row is not None
            return self._settle_unknown(request, look, step.row, step.why)
        return self._started(self._ticket(request, look, step.previous, step.key))

    def _started(self, ticket: RunTicket) -> RunTicket:
        if ticket.entry is not None:
            ticket.ledger.put(ticket.identity.thread_id, ticket.entry)
        return ticket

    def _settle_unknown(
        self, request: ToolCallRequest, look: _Lookup, row: LedgerEntry, why: str
    ) -> RunTicket | LedgerEntry:
        error, blocked, facts = self._unknown(look, row, why)
        if blocked is not None:
            look.ledger.put(look.identity.thread_id, blocked)
        if self.config.on_unsafe != "interrupt":
            raise error
        value = interrupt(facts)
        current = look.ledger.get(look.identity) or blocked or row
        if current.outcome_unknown:
            current = self._resume_value(look, value, current)
            look.ledger.put(look.identity.thread_id, current)
        if current.has_outcome:
            return current
        return self._started(self._ticket(request, look, current, current.idempotency_key))

    def finish(self, ticket: RunTicket, result: Any) -> None:
        """Record the outcome of a call that ran."""
        ticket.ledger.put(ticket.identity.thread_id, self._outcome(ticket, result))

    def failed(self, ticket: RunTicket, error: BaseException) -> None:
        """Record an exception that escaped the tool: the outcome stays unknown."""
        entry = self._escaped(ticket, error)
        if entry is not None:
            ticket.ledger.put(ticket.identity.thread_id, entry)

    # -- async ----------------------------------------------------------------------------------

    async def acheck(
        self, request: ToolCallRequest, facts: CallFacts, ai_message_id: str | None
    ) -> RunTicket | LedgerEntry | None:
        """Async twin of `check`."""
        look = self._lookup(request, facts, ai_message_id)
        if look is None:
            return None
        step = self._after_get(look, await look.ledger.aget(look.identity))
        if step.kind == "search":
            rows = await look.ledger.asame_calls(
                look.identity.thread_id, facts.tool, look.args_hash
            )
            step = self._after_search(request, look, rows)
        if step.kind == "replay":
            assert step.row is not None
            return step.row
        if step.kind == "unknown":
            assert step.row is not None
            return await self._asettle_unknown(request, look, step.row, step.why)
        return await self._astarted(self._ticket(request, look, step.previous, step.key))

    async def _astarted(self, ticket: RunTicket) -> RunTicket:
        if ticket.entry is not None:
            await ticket.ledger.aput(ticket.identity.thread_id, ticket.entry)
        return ticket

    async def _asettle_unknown(
        self, request: ToolCallRequest, look: _Lookup, row: LedgerEntry, why: str
    ) -> RunTicket | LedgerEntry:
        error, blocked, facts = self._unknown(look, row, why)
        if blocked is not None:
            await look.ledger.aput(look.identity.thread_id, blocked)
        if self.config.on_unsafe != "interrupt":
            raise error
        value = interrupt(facts)
        current = await look.ledger.aget(look.identity) or blocked or row
        if current.outcome_unknown:
            current = self._resume_value(look, value, current)
            await look.ledger.aput(look.identity.thread_id, current)
        if current.has_outcome:
            return current
        return await self._astarted(self._ticket(request, look, current, current.idempotency_key))

    async def afinish(self, ticket: RunTicket, result: Any) -> None:
        """Async twin of `finish`."""
        await ticket.ledger.aput(ticket.identity.thread_id, self._outcome(ticket, result))

    async def afailed(self, ticket: RunTicket, error: BaseException) -> None:
        """Async twin of `failed`."""
        entry = self._escaped(ticket, error)
        if entry is not None:
            await ticket.ledger.aput(ticket.identity.thread_id, entry)

    # -- rows after a run -----------------------------------------------------------------------

    def _outcome(self, ticket: RunTicket, result: Any) -> LedgerEntry:
        message = tool_message(result)
        if message is None:
            recorded = {"content": "", "status": "success", "command": True}
        else:
            recorded = json_safe_result(message.content, message.artifact, message.status)
        entry = ticket.entry
        if entry is None:  # a pure call: one row, written once it finished, no arguments
            entry = started_entry(
                ticket.identity,
                tool=ticket.tool,
                replay=ticket.replay,
                args_hash=ticket.args_hash,
                args=None,
                idempotency_key=None,
            )
        return finished_entry(entry, recorded)

    @staticmethod
    def _escaped(ticket: RunTicket, error: BaseException) -> LedgerEntry | None:
        from langgraph.errors import GraphBubbleUp

        if ticket.entry is None:
            return None  # a pure call that raised: nothing to remember, it may run again
        if isinstance(error, GraphBubbleUp):
            # The tool called interrupt(): LangGraph re-runs it from the start on resume, so
            # the tool must interrupt before its side effect (LangGraph's own rule).
            return ticket.entry.with_status("interrupted")
        text = f"{type(error).__name__}: {error}"[:500]
        return ticket.entry.with_status("started", last_error=text)
