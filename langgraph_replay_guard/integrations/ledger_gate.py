"""Replay safety inside LangGraph: admit a call through the ledger, run it once, record it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import logging
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Generator, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from pydantic import BaseModel, ValidationError

from langgraph_replay_guard._compat import (
    own_interrupt,
    run_checkpointer,
    run_durability,
    task_run,
)
from langgraph_replay_guard.decisions.state import delivered
from langgraph_replay_guard.errors import ReplayGuardError, ReplayGuardWarning
from langgraph_replay_guard.integrations.batches import state_field, state_messages
from langgraph_replay_guard.integrations.calls import GUARD_CHANNEL, tool_message
from langgraph_replay_guard.integrations.ledgered_tool import ToolRuns
from langgraph_replay_guard.integrations.signals import as_signal
from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import (
    INTERRUPT_KIND,
    CallContext,
    CallIdentity,
    LedgerEntry,
    Write,
    admit,
    args_digest,
    block,
    call_anchor,
    call_scope,
    escaped_entry,
    finished_entry,
    index_namespace,
    interrupted_entry,
    nested_key,
    node_path,
    repeat_lookup_key,
    row_namespace,
    settle,
    started_entry,
    store_label,
    unknown_error,
    unknown_facts,
)
from langgraph_replay_guard.replay.result_codec import decode_result, decode_update
from langgraph_replay_guard.storage import batch_claims, store_cas
from langgraph_replay_guard.storage.ledger_io import arun_plan, run_plan

if TYPE_CHECKING:
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.store.base import BaseStore

    from langgraph_replay_guard.decisions.engine import CallFacts
    from langgraph_replay_guard.policy.config import GuardConfig
    from langgraph_replay_guard.policy.resolver import PolicyResolver

__all__ = [
    "IDEMPOTENCY_KEY_CONFIG",
    "INTERRUPT_KIND",
    "LedgerGate",
    "RunTicket",
    "RunningCall",
    "given_update",
    "guarded_body",
    "replayed_message",
    "replayed_result",
]

logger = logging.getLogger("langgraph_replay_guard")

IDEMPOTENCY_KEY_CONFIG = "replay_guard_idempotency_key"
"""Key of `runtime.config["configurable"]` holding an idempotent call's idempotency key."""


@dataclass(frozen=True)
class RunningCall:
    """A guarded call whose tool body is running (in this context: thread or task).

    Calls made inside its body (a deep agent's sub-agent inside `task`) fold its `anchor`
    into their identity; a guard with the same label finding its own call here recognises
    the claim as the one it would make (two guards stacked on one tool).
    """

    rows_ns: tuple[str, ...]
    label: str
    identity: CallIdentity
    enclosing: str
    """The anchor this call folded in ("" at the top of the graph)."""
    keys: tuple[str, ...]
    """The rows of this one model call claimed in `rows_ns`, outermost first."""
    gate: object = dataclasses.field(default=None, compare=False, repr=False)
    """The gate that claimed it: its own copies of the tool handed down under its hook's
    claim are that call where it runs, not a second guard stacked on it."""
    tool: str = ""
    args_hash: str = ""
    stable_enclosing: str = ""
    """`nested_key` of the call enclosing it ("" at the top of the graph)."""
    answered: Any = dataclasses.field(default=None, compare=False, repr=False)
    """Whether a call `(tool_call_id, AIMessage id)` was answered in the history this call's
    run continues (its `CallContext.is_answered`)."""

    @functools.cached_property
    def stable_anchor(self) -> str:
        """What a call made inside its body folds in by what encloses it, without any ids."""
        return nested_key(self.stable_enclosing, "", self.identity.node, self.tool, self.args_hash)

    @functools.cached_property
    def anchor(self) -> str:
        """`call_anchor` of this call: what a call made inside its body folds in.

        Computed only when a guarded call is made inside the body (most bodies make none).
        """
        ident = self.identity
        return call_anchor(
            ident.thread_id, self.enclosing, ident.node, ident.ai_message_id, ident.tool_call_id
        )

    def same_model_call(self, thread_id: str, node: str, ai_id: str | None, tc_id: str) -> bool:
        """Whether a call is this model call (another guard's view of it)."""
        mine = self.identity
        return (
            mine.tool_call_id == tc_id
            and mine.ai_message_id == ai_id
            and mine.thread_id == thread_id
            and mine.node == node
        )


_RUNNING: ContextVar[RunningCall | None] = ContextVar("replay_guard_running_call", default=None)
"""The innermost guarded call whose body runs here; LangGraph copies contexts into its
executor threads and tasks, so a sub-agent run inside a tool body sees it."""


class _TaskRuns:
    """The rows each recent run of a task admitted an attempt of, in this process.

    A middleware's retry of a call with other arguments (a corrected retry, a fan-out)
    follows an attempt in the same run of the tools task; a call arriving with other
    arguments in a new run (after a crash, a resume, from history) is no retry. Bounded to
    the most recent runs; each run object is held while listed, so its id is not reused.
    """

    LIMIT = 1024

    def __init__(self) -> None:
        self._runs: OrderedDict[int, tuple[object, set[tuple[tuple[str, ...], str]]]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def tried(self, run: object, rows_ns: tuple[str, ...], key: str) -> bool:
        """Whether this run admitted an attempt of row `key` in `rows_ns`."""
        with self._lock:
            found = self._runs.get(id(run))
            return found is not None and found[0] is run and (rows_ns, key) in found[1]

    def note(self, run: object, rows_ns: tuple[str, ...], *keys: str) -> None:
        """Remember that this run admitted an attempt of these rows."""
        with self._lock:
            found = self._runs.get(id(run))
            if found is None or found[0] is not run:
                found = (run, set())
                self._runs[id(run)] = found
            self._runs.move_to_end(id(run))
            found[1].update((rows_ns, key) for key in keys)
            while len(self._runs) > self.LIMIT:
                self._runs.popitem(last=False)


_TASK_RUNS = _TaskRuns()


@contextmanager
def guarded_body(ticket: RunTicket | None) -> Iterator[None]:
    """Around the run of a ledgered call's body: calls made inside it know it encloses them."""
    if ticket is None or ticket.running is None:
        yield
        return
    token = _RUNNING.set(ticket.running)
    try:
        yield
    finally:
        _RUNNING.reset(token)


@dataclass(frozen=True)
class RunTicket:
    """A call the ledger lets run: the (possibly changed) request and what to record after."""

    request: ToolCallRequest
    store: BaseStore
    ctx: CallContext
    entry: LedgerEntry | None
    """The claim (`started` row) of a non-pure call, or None for a pure call."""
    sends: list[tuple[str, Any]] = dataclasses.field(default_factory=list)
    """The state writes the tool made beside its answer (`ledgered_tool`)."""
    runs: ToolRuns = dataclasses.field(default_factory=ToolRuns)
    """Whether and with which arguments the tool body ran (`ledgered_tool`)."""
    running: RunningCall | None = None
    """What calls made inside its body see (`guarded_body`)."""
    answered_inside: bool = False
    """The hook's claim ends with the answer of a middleware inside the guard (no copy of
    the tool ran under it): the row says so, and a replay gives that answer back whole."""


def replayed_message(entry: LedgerEntry, tool_call: Mapping[str, Any]) -> ToolMessage:
    """Rebuild the recorded ToolMessage for the current tool_call_id."""
    content, artifact, _ = decode_result(entry.result or {})
    if not isinstance(content, str | list):
        content = "" if content is None else json.dumps(content)
    return ToolMessage(
        content=content,
        artifact=artifact,
        status="error" if entry.status == "failed" else "success",
        name=tool_call.get("name") or entry.tool,
        tool_call_id=tool_call.get("id") or entry.tool_call_id,
        response_metadata={"replay_guard": "replayed"},
    )


SENDS_KEY = "__replay_guard_sends__"
"""Key, in a recorded update, of the state writes the tool made beside its answer."""

COMMAND_KEY = "__replay_guard_command__"
"""Key, in a recorded update, of what a tool's `Command` holds besides a mapping update: the
graph it is for, where it goes, what it resumes (a hand-off's `goto` into the parent graph),
or an update that is not a mapping."""


LIST_KEY = "__replay_guard_list__"
"""Key, in a recorded update, of the answer of a tool that returned a list of `Command`s and
ToolMessages (LangGraph's tools node takes one): each item `{"message": ToolMessage}` or
`{"command": <the Command recorded as `_command_update` records one>}`, in order."""


def replayed_result(
    entry: LedgerEntry, tool_call: Mapping[str, Any]
) -> tuple[ToolMessage | Command[Any] | list[ToolMessage | Command[Any]], list[tuple[str, Any]]]:
    """What a call whose outcome the ledger recorded gives again, without running the tool.

    A tool that returned a `Command` gets it back whole: its state update (its messages
    answering the current tool_call_id), the graph it is for, its `goto` and `resume`; one
    that returned a list of them (and ToolMessages) gets the list back. Any other tool gets
    its ToolMessage (`replayed_message`). The state writes the tool made beside its answer
    come second, to be written again.

    Args:
        entry: The call's ledger row, with an outcome.
        tool_call: The call being answered.

    Returns:
        The answer and the state writes to make again (the recorded update decoded once).
    """
    # A copy: a plain-JSON update is the stored row's own dict.
    update = dict(decode_update(entry.result or {}) or {})
    writes = update.pop(SENDS_KEY, None)
    sends = [
        (write[0], write[1])
        for write in (writes if isinstance(writes, list) else [])
        if isinstance(write, list | tuple) and len(write) == 2 and isinstance(write[0], str)
    ]
    tool_call_id = tool_call.get("id") or entry.tool_call_id
    items = update.pop(LIST_KEY, None)
    if isinstance(items, list) and not update:
        answers: list[ToolMessage | Command[Any]] = []
        for item in items:
            if isinstance(item, Mapping) and isinstance(item.get("message"), ToolMessage):
                answers.append(_answering(item["message"], tool_call_id))
            elif isinstance(item, Mapping) and isinstance(item.get("command"), Mapping):
                answers.append(_replayed_command(dict(item["command"]), tool_call_id))
        if answers:
            return answers, sends
        return replayed_message(entry, tool_call), sends
    routing = update.get(COMMAND_KEY)
    rest = [key for key in update if key != COMMAND_KEY]
    if not rest and not (isinstance(routing, Mapping) and routing):
        return replayed_message(entry, tool_call), sends
    return _replayed_command(update, tool_call_id), sends


def _replayed_command(update: dict[str, Any], tool_call_id: str) -> Command[Any]:
    """A recorded `Command` (see `_command_update`) rebuilt, its messages answering the call."""
    routing = update.pop(COMMAND_KEY, None)
    if not isinstance(routing, Mapping):
        routing = {}
    messages = update.get("messages")
    if isinstance(messages, list):
        update["messages"] = [_answering(m, tool_call_id) for m in messages]
    other = routing.get("update")
    if isinstance(other, list):  # an update given as (key, value) pairs
        update_value: Any = [_answering_pair(pair, tool_call_id) for pair in other]
    else:
        update_value = update or other
    return Command(
        graph=routing.get("graph"),
        update=update_value,
        resume=routing.get("resume"),
        goto=routing.get("goto", ()),
    )


def given_update(
    update: Mapping[str, Any], tool_call_id: str, content: Any
) -> Mapping[str, Any] | None:
    """A recorded `Command` update whose ToolMessage answering the call holds `content`.

    The `UpdateRewrite` of the ledger (`given_entry`): a middleware that changed the
    ToolMessage after the tool returned its `Command` (`PIIMiddleware` redacting it) leaves
    the row's update with what the model was given, so that a replay gives nothing more
    back.

    Args:
        update: The update as recorded (`decode_update`), never changed.
        tool_call_id: The call whose ToolMessage is rewritten.
        content: What the model was given as that message's content.

    Returns:
        The new update, or None when it holds no message answering the call.
    """
    found = False

    def given(message: Any) -> Any:
        nonlocal found
        if isinstance(message, ToolMessage) and message.tool_call_id == tool_call_id:
            found = True
            return message.model_copy(update={"content": content})
        if (
            isinstance(message, Mapping)
            and message.get("tool_call_id") == tool_call_id
            and (message.get("role") == "tool" or message.get("type") == "tool")
        ):
            found = True
            return {**message, "content": content}
        return message

    def given_value(value: Any) -> Any:
        return [given(m) for m in value] if isinstance(value, list | tuple) else given(value)

    def given_command(recorded: Mapping[str, Any]) -> dict[str, Any]:
        # A mapping update only: `create_agent`'s tools node (where the middleware that asks
        # for this runs) refuses an update given as `(key, value)` pairs.
        new = dict(recorded)
        if "messages" in new:
            new["messages"] = given_value(new["messages"])
        return new

    new = given_command(update)
    items = new.get(LIST_KEY)
    if isinstance(items, list):  # a list of Commands and ToolMessages
        new[LIST_KEY] = [
            {**item, "message": given(item["message"])}
            if isinstance(item, Mapping) and "message" in item
            else {**item, "command": given_command(item["command"])}
            if isinstance(item, Mapping) and isinstance(item.get("command"), Mapping)
            else item
            for item in items
        ]
    return new if found else None


def _answering_pair(pair: Any, tool_call_id: str) -> Any:
    """`_answering` for an update written as a `(key, value)` pair."""
    if isinstance(pair, list | tuple) and len(pair) == 2 and pair[0] == "messages":
        value = pair[1]
        if isinstance(value, list):
            value = [_answering(m, tool_call_id) for m in value]
        else:
            value = _answering(value, tool_call_id)
        return (pair[0], value)
    return pair


def _answering(message: Any, tool_call_id: str) -> Any:
    """A recorded ToolMessage answering the current call (an identical call has a new id)."""
    if not isinstance(message, ToolMessage):
        return message
    metadata = {**message.response_metadata, "replay_guard": "replayed"}
    return message.model_copy(update={"tool_call_id": tool_call_id, "response_metadata": metadata})


def _with_ran_args(entry: LedgerEntry, ticket: RunTicket, ctx: CallContext) -> LedgerEntry:
    """The claim, noting the arguments the body ran with when a middleware changed them.

    The guard claims a call with the arguments it sees; a middleware between it and the
    tool (a HITL edit when the guard comes first) may run the tool with others. The operator
    who resolves an unknown outcome must check the call that ran.
    """
    ran = ticket.runs.args
    try:
        if ran is None or args_digest(ran) == ctx.args_hash:
            return entry
    except (TypeError, ValueError):  # arguments the canonical form cannot hold: keep the claim's
        return entry
    return dataclasses.replace(entry, ran_args=ran)


def _command_update(result: Any) -> Mapping[str, Any] | None:
    """The whole of a tool's own `Command` as an update to record, or None.

    A mapping update is recorded as it is; the rest of the Command (the graph it is for, its
    `goto`, `resume`, an update that is not a mapping) goes under `COMMAND_KEY`, so that a
    replay rebuilds the Command whole (`replayed_result`): a hand-off replayed from the
    ledger still goes where the tool sent it. A list of Commands and ToolMessages goes under
    `LIST_KEY`, item by item: recorded as its answer's content alone, a replay gave back that
    text without the Commands (or nothing, before the model node rewrote the row).
    """
    if isinstance(result, list) and result:
        items: list[dict[str, Any]] = []
        for item in result:
            if isinstance(item, ToolMessage):
                items.append({"message": item})
            elif isinstance(item, Command):
                items.append({"command": dict(_command_update(item) or {})})
        return {LIST_KEY: items}
    if not isinstance(result, Command):
        return None
    update = result.update
    routing: dict[str, Any] = {}
    if result.graph is not None:
        routing["graph"] = result.graph
    if result.goto:
        routing["goto"] = result.goto
    if result.resume is not None:
        routing["resume"] = result.resume
    if update is not None and not isinstance(update, Mapping):
        routing["update"] = list(update) if isinstance(update, tuple) else update
    if not routing:
        return update if isinstance(update, Mapping) else None
    return {**(update if isinstance(update, Mapping) else {}), COMMAND_KEY: routing}


def _answered(state: Any, messages_key: str, channel: str) -> Any:
    """Whether a call was answered in the thread: by the guard channel, else by its message.

    The channel records the batches whose side effects the guard saw answered (written in
    the same checkpoint write as their ToolMessages), so a history that Summarization or
    ContextEditing rewrote since does not make an answered call look lost in a crash.
    """

    def is_answered(tool_call_id: str, ai_message_id: str | None) -> bool:
        if delivered(state_field(state, channel), ai_message_id):
            return True
        for message in reversed(state_messages(state, messages_key)):
            if isinstance(message, ToolMessage) and message.tool_call_id == tool_call_id:
                return True
        return False

    return is_answered


def _asked_hash(state: Any, messages_key: str, identity: CallIdentity) -> Any:
    """`args_digest` of the call's arguments as its AIMessage asked them, read when needed."""

    def asked() -> str | None:
        for message in reversed(state_messages(state, messages_key)):
            if not isinstance(message, AIMessage) or message.id != identity.ai_message_id:
                continue
            for call in message.tool_calls:
                if call.get("id") == identity.tool_call_id:
                    try:
                        return args_digest(call.get("args", {}))
                    except (TypeError, ValueError):
                        return None
            return None
        return None

    return asked


def _rejected_before_run(tool: Any, tool_call: Mapping[str, Any], key_arg: str | None) -> bool:
    """Whether the tool's own schema rejects the arguments before its body could start."""
    schema = getattr(tool, "tool_call_schema", None)
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return False
    args = tool_call.get("args", {})
    if key_arg and isinstance(args, Mapping):
        args = {**args, key_arg: "rg-key"}  # the guard fills it in
    try:
        schema.model_validate(args)
    except ValidationError:
        return True
    except Exception:  # a schema that cannot validate on its own: let the tool decide
        return False
    return False


class LedgerGate:
    """The ledger side of the tool-call wrapper; one plan per call, a sync and an async driver.

    Args:
        policies: The guard's `PolicyResolver` (its configuration, and what it learned from
            MCP annotations).
        store: The store given to the guard; when None, the graph's store (`compile(store=)`,
            `create_agent(store=)`) is used; without either there is no ledger.
        namespace: Namespace prefix of the ledger rows.
        messages_key: State key of the message list.
        channel: State key of the guard channel.
    """

    def __init__(
        self,
        policies: PolicyResolver,
        *,
        store: Any = None,
        namespace: tuple[str, ...] = ("replay_guard",),
        messages_key: str = "messages",
        channel: str = GUARD_CHANNEL,
    ) -> None:
        """Create the gate."""
        self.policies = policies
        self.store = store
        self.prefix = tuple(store_label(part) for part in namespace)
        self.messages_key = messages_key
        self.channel = channel
        # Which guard owns a call, in its namespace: the instance name its own channel
        # carries (`replay_guard__<name>`); "" for the default, whose keys stay as they were.
        self.label = channel.removeprefix(GUARD_CHANNEL).removeprefix("__")
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    @property
    def config(self) -> GuardConfig:
        """The guard's configuration (what class a call is: ask `policies`)."""
        return self.policies.config

    # -- the call's context ---------------------------------------------------------------------

    def _context(
        self, request: ToolCallRequest, facts: CallFacts, ai_message_id: str | None
    ) -> tuple[BaseStore, CallContext, RunningCall] | None:
        runtime = request.runtime
        config = getattr(runtime, "config", None) or {}
        configurable = config.get("configurable", {})
        store = self.store if self.store is not None else getattr(runtime, "store", None)
        thread_id = configurable.get("thread_id")
        if facts.replay == "unsafe":
            self._warn_setup(facts.tool, store, thread_id, configurable)
        if store is None or thread_id is None:
            return None
        # One SQLite connection for the checkpointer and the store (docs/adopting.md): the
        # guard's transactions must not interleave with the checkpointer's commits.
        store_cas.share_connection(store, run_checkpointer(configurable))
        tool_call = request.tool_call
        key_arg = self.policies.policy_for(facts.tool).idempotency_key_arg
        if facts.replay != "pure" and _rejected_before_run(request.tool, tool_call, key_arg):
            return None  # the tool body cannot start: nothing to claim, nothing can happen
        thread, node = str(thread_id), node_path(configurable.get("checkpoint_ns"))
        tool_call_id = str(tool_call.get("id") or "")
        rows_ns = row_namespace(self.prefix, thread)
        enclosing = stable_enclosing = ""
        enclosing_call: tuple[str, str | None] | None = None
        enclosing_answered: Any = None
        also: tuple[str, ...] = ()
        outer = _RUNNING.get()
        if outer is not None and outer.same_model_call(thread, node, ai_message_id, tool_call_id):
            stacked = outer.gate is not self  # else: this guard's own copy, handed down
            if stacked and outer.rows_ns == rows_ns and outer.label == self.label:
                # A guard with this label already claimed this very call around us (two
                # guards stacked on one tool): its claim stands, a second would wait on it.
                return None
            enclosing = outer.enclosing  # another guard's view of this call: same place
            stable_enclosing = outer.stable_enclosing
            also = outer.keys if stacked and outer.rows_ns == rows_ns else ()
        elif outer is not None:
            enclosing = outer.anchor  # made inside a guarded call's tool body
            stable_enclosing = outer.stable_anchor
            enclosing_call = (outer.identity.tool_call_id, outer.identity.ai_message_id)
            enclosing_answered = outer.answered
        run = task_run(config)
        tried_here: Any = (
            (lambda key: True) if run is None else functools.partial(_TASK_RUNS.tried, run, rows_ns)
        )
        identity = CallIdentity(
            thread_id=thread,
            node=node,
            ai_message_id=ai_message_id,
            tool_call_id=tool_call_id,
            scope=call_scope(self.label, enclosing),
        )
        args = tool_call.get("args", {})
        args_hash = args_digest(args)
        repeat_key = None
        if enclosing_call is not None and enclosing_answered is not None:
            repeat_key = repeat_lookup_key(
                self.label, stable_enclosing, node, facts.tool, args_hash
            )
        lease = self.config.in_flight_lease
        ctx = CallContext(
            identity=identity,
            tool=facts.tool,
            replay=facts.replay,
            args=args,
            args_hash=args_hash,
            rows_ns=rows_ns,
            index_ns=index_namespace(self.prefix, identity.thread_id),
            wait=self.config.in_flight_wait,
            is_answered=_answered(request.state, self.messages_key, self.channel),
            is_alive=lambda owner: owners.is_alive(owner, dt.datetime.now(dt.UTC)),
            new_owner=lambda: owners.REGISTRY.new_owner(lease, dt.datetime.now(dt.UTC)),
            lost_owner=owners.REGISTRY.release,
            now=lambda: dt.datetime.now(dt.UTC),
            elapsed=time.monotonic,
            asked_hash=_asked_hash(request.state, self.messages_key, identity),
            pointer_also=also,
            tried_here=tried_here,
            repeat_index_key=repeat_key,
            enclosing_call=enclosing_call if repeat_key is not None else None,
            enclosing_answered=enclosing_answered or (lambda _tc, _ai: True),
        )
        running = RunningCall(
            rows_ns,
            self.label,
            identity,
            enclosing,
            also,
            gate=self,
            tool=facts.tool,
            args_hash=args_hash,
            stable_enclosing=stable_enclosing,
            answered=ctx.is_answered,
        )
        return store, ctx, running

    def _warn_setup(self, tool: str, store: Any, thread_id: Any, configurable: Any) -> None:
        problems = []
        if store is None:
            problems.append(
                "no store for the replay ledger (pass store= to the guard, or compile the "
                "graph with a store): an interrupted or crashed run may send it twice"
            )
        if thread_id is None:
            problems.append("no thread_id in the config: calls have no durable identity")
        checkpointer = run_checkpointer(configurable)
        if checkpointer is None or isinstance(checkpointer, InMemorySaver):
            problems.append(
                "no durable checkpointer (InMemorySaver or none): after a restart the thread, "
                "and the ids that make a call's identity, are gone"
            )
        durability = run_durability(configurable)
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

    # -- admitting a call: one plan, run by either driver ----------------------------------------

    def _admit_plan(
        self, request: ToolCallRequest, store: BaseStore, ctx: CallContext, running: RunningCall
    ) -> Generator[Any, Any, RunTicket | LedgerEntry]:
        """Admit a call; every replay stop it raises is a LangGraph control-flow signal.

        An unknown outcome, an identity conflict or a call still in flight needs an
        operator: retry and error middlewares (and `handle_tool_errors`) must pass it on
        (`signals.as_signal`).
        """
        try:
            return (yield from self._admission(request, store, ctx, running))
        except ReplayGuardError as exc:
            raise as_signal(exc) from exc.__cause__

    def _admission(
        self, request: ToolCallRequest, store: BaseStore, ctx: CallContext, running: RunningCall
    ) -> Generator[Any, Any, RunTicket | LedgerEntry]:
        admission = yield from admit(ctx)
        ctx = admission.context or ctx  # an argument variant records under its own row
        if admission.kind == "unknown":
            assert admission.entry is not None
            row = yield from block(ctx, admission.entry, admission.why)
            if self.config.on_unsafe != "interrupt":
                raise unknown_error(ctx, admission.entry, admission.why)
            value = interrupt(unknown_facts(ctx, admission.entry, admission.why))
            admission = yield from settle(ctx, self._resolution(ctx, value), row)
            if admission.kind == "unknown":  # resolved, yet another identical call is unknown
                assert admission.entry is not None
                raise unknown_error(ctx, admission.entry, admission.why)
        run = task_run(getattr(request.runtime, "config", None))
        if run is not None:  # a retry in this run with other arguments is a variant of it
            _TASK_RUNS.note(run, ctx.rows_ns, ctx.identity.base_key, ctx.identity.key)
        if admission.kind == "replay":
            assert admission.entry is not None
            return admission.entry
        run_request = request
        if admission.key is not None:
            run_request = self._deliver_key(request, ctx.tool, admission.key)
        running = dataclasses.replace(running, keys=(*running.keys, ctx.identity.key))
        return RunTicket(run_request, store, ctx, admission.entry, running=running)

    def check(
        self,
        request: ToolCallRequest,
        facts: CallFacts,
        ai_message_id: str | None,
        batch_size: int = 1,
    ) -> RunTicket | LedgerEntry | None:
        """Admit an allowed call: a ticket to run it, a recorded entry to replay, or None.

        None means there is no ledger (no store or no thread id): run as usual. The claims
        of the calls of one batch (`batch_size` calls of one AIMessage) arriving together
        are written in one transaction (`storage.batch_claims`).

        Raises:
            ReplayUnsafeError: An unsafe call's outcome is unknown (`on_unsafe="raise"`).
            ReplayConflictError: The identity was recorded with another tool or arguments.
            ReplayInFlightError: Another worker still runs this call after the wait.
        """
        found = self._context(request, facts, ai_message_id)
        if found is None:
            self.pass_by(request, ai_message_id, batch_size)
            return None
        store, ctx, running = found
        group = self._group(request, store, ctx.rows_ns, ai_message_id, batch_size)
        return run_plan(store, self._admit_plan(request, store, ctx, running), group=group)

    async def acheck(
        self,
        request: ToolCallRequest,
        facts: CallFacts,
        ai_message_id: str | None,
        batch_size: int = 1,
    ) -> RunTicket | LedgerEntry | None:
        """Async `check`."""
        found = self._context(request, facts, ai_message_id)
        if found is None:
            self.pass_by(request, ai_message_id, batch_size)
            return None
        store, ctx, running = found
        # The claim's owner names this host and process: read those facts off the event loop
        # (once per process), so the plan's `new_owner`/`is_alive` do no blocking I/O on it.
        await owners.aready()
        group = self._group(request, store, ctx.rows_ns, ai_message_id, batch_size)
        plan = self._admit_plan(request, store, ctx, running)
        return await arun_plan(store, plan, group=group)

    def pass_by(
        self, request: ToolCallRequest, ai_message_id: str | None = None, batch_size: int = 0
    ) -> None:
        """A call of a batch that claims nothing here: its siblings' claims stop waiting for it.

        For a call the guard answers without running (a duplicate, a stop) and one that
        needs no claim; the batch is read from the state when not given. No I/O.

        Args:
            request: The call.
            ai_message_id: Id of its AIMessage, if known.
            batch_size: How many calls that AIMessage has, if known.
        """
        runtime = request.runtime
        configurable = (getattr(runtime, "config", None) or {}).get("configurable", {})
        store = self.store if self.store is not None else getattr(runtime, "store", None)
        thread_id = configurable.get("thread_id")
        if store is None or thread_id is None:
            return
        rows_ns = row_namespace(self.prefix, str(thread_id))
        member = self._group(request, store, rows_ns, ai_message_id, batch_size or 2)
        if member is not None:
            member.leave()

    def _group(
        self,
        request: ToolCallRequest,
        store: BaseStore,
        rows_ns: tuple[str, ...],
        ai_message_id: str | None,
        batch_size: int,
    ) -> batch_claims.Member | None:
        """The call's place among the calls of its AIMessage still unanswered in the state.

        Those are the calls that arrive (ToolNode, a `Send` each): a call a middleware
        answered before (a human's rejection) or that finished before a crash does not.
        """
        if batch_size < 2:
            return None
        tool_call_id = request.tool_call.get("id")
        answered: set[str] = set()
        for message in reversed(state_messages(request.state, self.messages_key)):
            if isinstance(message, ToolMessage):
                answered.add(message.tool_call_id)
            elif isinstance(message, AIMessage) and (
                message.id == ai_message_id
                if ai_message_id is not None
                else any(call.get("id") == tool_call_id for call in message.tool_calls)
            ):
                ai_message_id = message.id
                batch_size = sum(1 for c in message.tool_calls if c.get("id") not in answered)
                break
        limit = (getattr(request.runtime, "config", None) or {}).get("max_concurrency")
        if isinstance(limit, int) and limit > 0:  # no more of them run at once
            batch_size = min(batch_size, limit)
        return batch_claims.join(store, (rows_ns, ai_message_id), batch_size)

    def continued(self, ticket: RunTicket, request: ToolCallRequest) -> RunTicket:
        """The claim of a call handed down, for the call as it arrived where the tool runs.

        The guard's hook claimed the call as the model asked it; a middleware inside may
        have edited it on the way. The run goes on under that claim (no second claim of one
        call), with the idempotency key delivered to the call that runs; the arguments it
        ran with are recorded beside the claim's (`ran_args`).

        Args:
            ticket: The hook's claim (`check`), not used to run anything yet.
            request: The call as it arrived at the tool.

        Returns:
            A ticket to run `request` under the claim.
        """
        key = ticket.entry.idempotency_key if ticket.entry is not None else None
        if key is not None:
            request = self._deliver_key(request, ticket.ctx.tool, key)
        return RunTicket(request, ticket.store, ticket.ctx, ticket.entry)

    def _resolution(self, ctx: CallContext, value: Any) -> Mapping[str, Any]:
        if (
            isinstance(value, Mapping)
            and value.get("outcome") is not None
            and value.get("tool_call_id") in (None, ctx.identity.tool_call_id)
        ):
            return value
        msg = (
            f"The guard's interrupt for tool call {ctx.identity.tool_call_id!r} of "
            f"'{ctx.tool}' was resumed with {value!r}: resume with "
            "guard.resolve(...) or Command(resume={'outcome': 'succeeded' | 'failed' | 'retry', "
            "'result': ...})."
        )
        raise ValueError(msg)

    def _deliver_key(self, request: ToolCallRequest, tool: str, key: str) -> ToolCallRequest:
        policy = self.policies.policy_for(tool)
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

    # -- after the run ---------------------------------------------------------------------------

    def finish(self, ticket: RunTicket, result: Any, error: BaseException | None = None) -> None:
        """Record how a call that ran ended: its result, or the exception that escaped it.

        Args:
            ticket: The admitted call.
            result: The tool's message or Command (ignored when `error` is given).
            error: An exception raised by the tool body, even when the node turned it into
                an error message: a non-`pure` call's outcome then stays unknown.
        """
        try:
            run_plan(ticket.store, self._finish_plan(ticket, result, error))
        finally:
            owners.REGISTRY.release(ticket.entry.owner if ticket.entry else None)

    async def afinish(
        self, ticket: RunTicket, result: Any, error: BaseException | None = None
    ) -> None:
        """Async `finish`."""
        try:
            await arun_plan(ticket.store, self._finish_plan(ticket, result, error))
        finally:
            owners.REGISTRY.release(ticket.entry.owner if ticket.entry else None)

    def _finish_plan(
        self, ticket: RunTicket, result: Any, error: BaseException | None
    ) -> Generator[Any, Any, None]:
        entry = self._after_run(ticket, result, error)
        if entry is not None:
            yield Write(((ticket.ctx.rows_ns, entry.key, entry.to_value()),))

    def _after_run(
        self, ticket: RunTicket, result: Any, error: BaseException | None
    ) -> LedgerEntry | None:
        ctx = ticket.ctx
        if ticket.entry is not None:
            ticket = dataclasses.replace(ticket, entry=_with_ran_args(ticket.entry, ticket, ctx))
        if error is not None:
            if ticket.entry is None:
                return None  # a pure call that raised: nothing to remember, it may run again
            if own_interrupt(error, getattr(ticket.request.runtime, "config", None)):
                # The tool called interrupt(): LangGraph re-runs it from the start on resume,
                # so the tool must interrupt before its side effect (LangGraph's own rule).
                return interrupted_entry(ticket.entry)
            # Any other exception, control-flow signals included (a nested guard's stop, a
            # `ParentCommand`, a sub-agent's interrupt), may come after the effect: unknown,
            # unless the framework provably refused the call before the tool's function
            # started (an async-only tool run through `invoke`) or the policy says so.
            no_effect = ticket.runs.body is False or self.policies.policy_for(
                ctx.tool
            ).raised_before_effect(error)
            return escaped_entry(ticket.entry, error, no_effect=no_effect)
        message = tool_message(result)
        entry = ticket.entry
        if entry is None:  # a pure call: one row, written once it finished, no arguments
            entry = started_entry(ctx, args=None, idempotency_key=None)
        update = _command_update(result)
        if ticket.sends:
            # Writes beside the answer are part of the outcome: a replay writes them again.
            update = {**(update or {}), SENDS_KEY: [list(write) for write in ticket.sends]}
        if message is None:  # a Command without a ToolMessage: its update, no answer of its own
            done = finished_entry(entry, "", None, "success", update=update)
        else:
            done = finished_entry(
                entry, message.content, message.artifact, message.status, update=update
            )
        return dataclasses.replace(done, answered_inside=True) if ticket.answered_inside else done
