"""`ReplayGuardMiddleware`: the guard as `create_agent` middleware."""

from __future__ import annotations

import logging
import operator
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Annotated, Any, NotRequired, Unpack, cast

try:
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelCallResult,
        ModelRequest,
        ModelResponse,
        PrivateStateAttr,
    )
except ModuleNotFoundError as exc:
    # `langchain` is an extra: say which one, not only the bare module name.
    if (exc.name or "").partition(".")[0] != "langchain":
        raise
    _msg = (
        "ReplayGuardMiddleware needs the langchain package (create_agent's middleware): "
        "pip install 'langgraph-replay-guard[langchain]'. Without it, guard a ToolNode "
        "with ReplayGuard.wrap or use ReplayGuardCallbackHandler."
    )
    raise ModuleNotFoundError(_msg, name=exc.name) from None
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command
from typing_extensions import TypedDict

from langgraph_replay_guard._compat import (
    agent_being_built,
    agent_build,
    bind_hooks,
    channel_without_reducer,
    channel_writer,
    dynamic_tool_error,
    run_checkpointer,
    signature_once,
    watching_model_requests,
)
from langgraph_replay_guard.decisions.engine import loop_error, raises_on_abort
from langgraph_replay_guard.decisions.keys import content_hash
from langgraph_replay_guard.decisions.state import (
    Event,
    merge_guard_state,
    preview_facts,
    scrub_update,
    show_update,
    unrecorded_positions,
)
from langgraph_replay_guard.guard import ReplayGuard
from langgraph_replay_guard.integrations.answers import STOP_MARK, abort_answer, final_ai_message
from langgraph_replay_guard.integrations.batches import (
    ToolCallBatch,
    current_turn,
    previous_batch,
    turn_anchors,
)
from langgraph_replay_guard.integrations.calls import (
    GUARD_CHANNEL,
    PlannedValues,
    answered_event,
    emit,
    given_previews,
    guard_update,
    message_text,
)
from langgraph_replay_guard.integrations.ledger_gate import given_update
from langgraph_replay_guard.integrations.prompt import (
    next_call_reminder,
    system_prompt_with_reminder,
)
from langgraph_replay_guard.integrations.signals import as_signal
from langgraph_replay_guard.integrations.tool_node import (
    ToolCallWrapper,
    abort_trace,
    misdeclared_channel_message,
)
from langgraph_replay_guard.integrations.tracing import BlockedRun, blocked_run
from langgraph_replay_guard.policy.config import GuardConfig, GuardOptions
from langgraph_replay_guard.policy.options import guard_config, with_config_signature
from langgraph_replay_guard.policy.tool_hints import hinted_tools
from langgraph_replay_guard.replay.ledger import (
    CallIdentity,
    args_digest,
    call_scope,
    given_plan,
    node_path,
)
from langgraph_replay_guard.storage import store_cas
from langgraph_replay_guard.storage.ledger_io import arun_plan, run_plan

if TYPE_CHECKING:
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.store.base import BaseStore
    from langgraph.types import Command

    from langgraph_replay_guard._compat import AgentInputs
    from langgraph_replay_guard.replay.ledger import LedgerPlan

__all__ = ["ReplayGuardMiddleware"]

logger = logging.getLogger("langgraph_replay_guard")

_DEFAULT_NAME = "ReplayGuardMiddleware"


TOOLS_NODE = "tools"
"""The name of `create_agent`'s tools node (its `ToolNode`, where the guard records calls)."""


def _state_schema(channel: str) -> type:
    """A state schema holding one private, checkpointed guard channel.

    `PrivateStateAttr` keeps the channel out of the agent's input and output schema, but it
    is in the thread state (Studio shows it). The reducer must come last in `Annotated`.
    `dict | None` (not `dict`): LangGraph starts a channel whose type it cannot build with
    no arguments empty, so the channel is absent from streamed states until the guard first
    writes it (the reducer reads a first write stored as it is).
    """
    annotation = NotRequired[Annotated[dict[str, Any] | None, PrivateStateAttr, merge_guard_state]]
    schema: type = TypedDict(f"ReplayGuardState_{channel}", {channel: annotation})  # type: ignore[misc]
    return schema


class ReplayGuardMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Loop, duplicate and replay protection for `create_agent`.

    Every tool call goes through the guard (`wrap_tool_call`): duplicates, identical
    results and cycles are answered with an explanatory error `ToolMessage` instead of
    running the tool, and calls to a tool the agent does not have (a hallucinated name, no
    middleware serving it) are counted as one loop per turn, reason `unknown_tool`. A batch
    that would abort the run is stopped right after the model asked for it (`after_model`,
    jumping to the end with a final message). The loop
    reminder is added to the system prompt of exactly the next model call
    (`wrap_model_call`), never to the history. The guard state is a private, checkpointed
    channel.

    Example:
        ```python
        from langchain.agents import create_agent
        from langgraph_replay_guard import GuardConfig, ReplayGuardMiddleware

        agent = create_agent(
            model,
            tools,
            middleware=[ReplayGuardMiddleware(GuardConfig(tools={"send_email": "unsafe"}))],
        )
        ```

    Args:
        config: Guard configuration (`GuardConfig()` defaults when omitted).
        store: A LangGraph `BaseStore` for the replay ledger; when omitted, the agent's
            store (`create_agent(store=...)`) is used.
        name: Instance name. Several guard middlewares in one agent need distinct names;
            each named instance keeps its state in its own channel, `replay_guard__<name>`.
        namespace: Namespace prefix of the guard's ledger rows and records in a store (one
            per tenant, see `ReplayGuard`).
        record: Record runs as execution records (see `ReplayGuard`); wrap the agent with
            `middleware.guard.record(agent)`.
        **options: `GuardConfig` fields as flat keywords, like `ToolCallLimitMiddleware`'s
            options: `ReplayGuardMiddleware(tools={"send_email": "unsafe"}, max_repeats=2)`.
            Not together with `config`. Typed keyword-only options (`GuardOptions`), each
            with its `GuardConfig` field's meaning and default.

    At the first model call, a `ReplayGuardWarning` names each tool of `config.tools` that
    the agent does not offer the model (a typo there would leave the real tool with the
    default policy).

    Raises:
        TypeError: An unknown option (naming the nearest one), an option of the wrong type
            (a path as `store`, `namespace=(1, 2)`, `record="yes"`).
        ValueError: `record=True` without a `store`, or an empty `namespace`.
    """

    # A plain attribute (each instance sets its own), over `AgentMiddleware`'s property.
    name: str = _DEFAULT_NAME

    @with_config_signature
    def __init__(
        self,
        config: GuardConfig | dict[str, Any] | None = None,
        *,
        store: BaseStore | None = None,
        name: str | None = None,
        namespace: Sequence[str] = ("replay_guard",),
        record: bool | BaseStore = False,
        **options: Unpack[GuardOptions],
    ) -> None:
        """Create the middleware."""
        super().__init__()
        checked = guard_config(
            config,
            options,
            owner="ReplayGuardMiddleware",
            own=("config", "store", "name", "namespace", "record"),
        )
        self.guard = ReplayGuard(checked, store=store, namespace=namespace, record=record)
        # A plain attribute, as LangChain's own middlewares have it: what the guard needs to
        # know of the agent it learns at its first model call (`_check_agent`), but for
        # what `tools` fits while the agent is built.
        self.name: str = name or _DEFAULT_NAME
        self.channel = GUARD_CHANNEL if name is None else f"{GUARD_CHANNEL}__{name}"
        self.state_schema = _state_schema(self.channel)
        # Previews are written at the model call, from the messages the model is given:
        # a middleware may change a result after the tools node (`_show`).
        self._calls = ToolCallWrapper(
            self.guard,
            channel=self.channel,
            end_batches=False,
            defer_previews=True,
            watch_resets=False,  # the agent loops inside one run of its graph
        )
        self._planned = PlannedValues()
        self._calls.planned_values = self._planned
        self._tools_checked = False
        self._agent_tools_learned = False
        self._offered: tuple[Any, ...] | None = None  # the tools the last model call offered
        self._others_run_tools = False
        self._build_unread = False  # said once: `_compat.agent_build` found no agent
        # The hooks as `create_agent` reads them (`m.wrap_model_call`): see `bind_hooks`.
        bind_hooks(self, ReplayGuardMiddleware, _HOOKS)

    def __copy__(self) -> ReplayGuardMiddleware:
        """A shallow copy whose hooks are its own (`bind_hooks`), as a bound method's are."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        bind_hooks(clone, ReplayGuardMiddleware, _HOOKS)
        return clone

    @property
    def tools(self) -> Sequence[BaseTool]:
        """The guard adds no tools of its own (always empty).

        A property for one job, which LangChain gives no public way to do: `create_agent`
        reads `m.tools` of every middleware first while it builds an agent, before it looks
        for tool hooks and before its duplicate-name check. Read there (and only there:
        `_compat.agent_being_built`, the one frame read of the package), it fits the
        instance's tool hooks to the agent being built: an agent without tools whose other
        middlewares have no tools and no tool hook gets no tools node, and the guard then
        leaves its own tool hooks out so that it does not add one (its class is
        `_ToolFreeReplayGuardMiddleware` until a build with tools reads it again). Anywhere
        else, reading it does nothing.

        Raises:
            ValueError: Read by `create_agent` while another guard middleware of the same
                agent has the same name (two unnamed instances share the default name and
                the `replay_guard` channel), naming `name=` before LangChain's generic
                "Please remove duplicate middleware instances.".
        """
        building = agent_being_built()
        if building is not None:
            _check_unique_name(self, building.middleware)
            _fit_tool_hooks(self, building)
        return []

    @tools.setter
    def tools(self, tools: Sequence[BaseTool]) -> None:
        if tools:
            msg = "ReplayGuardMiddleware has no tools of its own; give tools to create_agent"
            raise TypeError(msg)

    def _check_agent(self, handler: Callable[..., Any]) -> frozenset[str] | None:
        """Check the agent this model call runs in, and learn every tool it has.

        Runs at the guard's first model call in an agent (`_check_tools`), before the model
        is called and before any tool runs: `create_agent` tells a middleware nothing when
        it builds the agent. A request offers the tools a middleware outside the guard left
        it (a tool selector offers a selection); the agent's tools node still runs the
        others, so they exist (`_compat.agent_build` reads them, with the middlewares whose
        tool hooks the node runs).

        Returns:
            The names of the tools the agent's tools node runs, when the guard's tool hooks
            are its only ones (`create_agent` then checks each model request for tools
            nothing runs: see `_check_dynamic_tools`); None: no such check, as another
            middleware may run such tools, or the agent could not be read.

        Raises:
            ValueError: The user's `state_schema` declares the guard's channel without its
                reducer; `require_classes` and a tool of the agent is unclassified. (Two
                guards with one name are refused while the agent is built: `tools`.)
        """
        kind = channel_without_reducer(_run_config(), self.channel, merge_guard_state)
        if kind is not None:
            # `create_agent` merges the user's schema last: its key would be a last-value
            # channel, and the guard would stop no loop.
            raise ValueError(misdeclared_channel_message(self.channel, kind))
        build = agent_build(handler)
        if build is None:
            if not self._build_unread:
                self._build_unread = True
                logger.warning(
                    "langgraph-replay-guard: %s could not read the tools node of its agent "
                    "(a create_agent this version does not know): offered tools nothing "
                    "runs and strict_tool_names typos are not checked",
                    self.name,
                )
            return None
        self._agent_tools_learned = True
        others = any(not isinstance(m, ReplayGuardMiddleware) for m in build.tool_hook_owners)
        self._others_run_tools = self._others_run_tools or others
        tools = list(build.tools)
        names = self._learn(tools)
        # Listed once (refused with `require_classes`).
        self.guard._unclassified.check(self._calls.policies, tools, where="the agent")
        # The names are only learned here (`warn=False`, `complete=False`): one guard may
        # guard several agents (sub-agents, supervisor workers; docs/using-it-with.md), and
        # the agent with `set_order` may run after the one with `get_order`. `_check_tools`
        # checks them (`strict_tool_names`), when every agent run so far is known.
        self.guard._tool_names.check(names, where="the agent", warn=False, complete=False)
        return None if others else frozenset(t.name for t in tools if isinstance(t, BaseTool))

    def _answered_elsewhere(
        self, request: ModelRequest[Any], value: Any
    ) -> tuple[Any, list[Event]]:
        """The previous batch's calls that another piece answered, and the value with them.

        A HITL reject, `ToolCallLimitMiddleware(exit_behavior="continue")`, a structured
        output retry or a wrapper outside the guard answer calls that never reach the
        guard's tool hook. Every call the model makes counts toward repeats and loops,
        whoever answers it: such calls are recorded here, at the next model call, as
        `answered` (counted; nothing cached, nothing ledgered). The value returned already
        holds them, so this model call's decisions count them too; `_write` records them.
        """
        state = request.state
        found = previous_batch(state.get("messages") or ())
        if found is None:
            return value, []
        ai, answered = found
        missing = unrecorded_positions(value, ai.id, len(ai.tool_calls))
        if not missing:
            return value, []
        config = self._calls.config
        batch = ToolCallBatch(ai, current_turn(state, anchors=turn_anchors(value)))
        plan = self._calls.decisions.decide(self._calls.policies, value, batch, self._calls.tools)
        events = [
            answered_event(planned, batch)
            for planned in plan.calls
            if planned.index in missing
            and planned.facts is not None
            and planned.tool_call.get("id") in answered
        ]
        if not events:
            return value, []
        return merge_guard_state(value, guard_update(config, events)), events

    def _scrub(self, request: ModelRequest[Any], value: Any) -> tuple[Any, dict[str, Any] | None]:
        """Drop the result previews that no message of the thread holds any more.

        The tools node records a preview of what the tool returned; a middleware may change
        the result after that (`PIIMiddleware(apply_to_tool_results=True)` redacts the
        ToolMessages in its `before_model`, and its `before_model` may run before or after
        the guard's hooks). The model node runs after every `before_model`: the messages it
        reads are what the model is given, so the channel keeps no more of a result than
        they hold (its digest stays, for the loop layers). No I/O, no write: `_write` sends it.

        Returns:
            The channel value with the scrub, and the scrub (None: nothing to drop).
        """
        previews = set(preview_facts(value).held)
        if not previews:
            return value, None
        # Newest messages first, stopping once every preview is found: the channel keeps the
        # previews of the most recently used results, so they sit in the last few messages.
        # Reading every message for every preview made each step cost O(thread length).
        messages: Sequence[Any] = request.state.get("messages") or ()
        missing = previews
        if _SEPARATOR not in "".join(previews):
            # One substring search per preview in the newest messages' texts joined (two
            # messages per preview): a match cannot span two texts, as the separator is in
            # no preview (a one-character separator). Most steps find every preview there;
            # the rest are looked for message by message.
            newest = messages[-(2 * len(previews) + 2) :]
            texts = [getattr(m, "content", "") for m in newest]  # `message_text`, inlined
            joined = _SEPARATOR.join([t if isinstance(t, str) else repr(t) for t in texts])
            missing = {p for p in previews if p not in joined}
            if not missing:
                return value, None
            messages = messages[: -len(newest)] if newest else messages
        for message in reversed(messages):
            text = message_text(message)
            missing = {p for p in missing if p not in text}
            if not missing:
                return value, None
        update = scrub_update(sorted(missing))
        return merge_guard_state(value, update), update

    def _show(self, request: ModelRequest[Any], value: Any) -> tuple[Any, dict[str, Any] | None]:
        """Give the last batch's results their previews, cut from what the model is given.

        The tools node records a result's digest and no text (`defer_previews`): a
        middleware may still change the result (`PIIMiddleware` redacts it in its
        `before_model`), and the checkpoint of that middleware's own step would otherwise
        keep the raw preview. The model node runs after every `before_model`: a ToolMessage
        of the batch whose text still has the recorded digest reached the model unchanged
        and gets its preview; a changed one keeps its digest only (`calls.given_previews`).
        No I/O, no write: the guard's next write carries it (`_write`).

        Returns:
            The channel value with the previews, and their `show_update` (None: none).
        """
        messages = request.state.get("messages") or ()
        previews = given_previews(self._calls.config, messages, value)
        if not previews:
            return value, None
        update = show_update(previews)
        return merge_guard_state(value, update), update

    def _given(self, request: ModelRequest[Any]) -> tuple[BaseStore, LedgerPlan] | None:
        """The ledger plan that makes the last batch's rows hold what the model is given.

        The ledger records what the tool returned, in the tools node; a middleware may
        change it afterwards (see `_scrub`). Only ToolMessages whose text hashes to no
        digest the channel recorded are looked up, so an agent whose results reach the
        model unchanged does no store I/O here. The sync and async hooks run the plan.
        """
        gate = self._calls.gate
        store = gate.store if gate.store is not None else getattr(request.runtime, "store", None)
        if store is None:
            return None
        messages = request.state.get("messages") or ()
        batch = _last_batch(messages)
        config = _run_config() or {}
        configurable = config.get("configurable", {})
        thread_id = configurable.get("thread_id")
        if not batch or store is None or thread_id is None:
            return None
        known = preview_facts(request.state.get(self.channel)).recorded
        given = {
            m.tool_call_id: m.content for m in batch if content_hash(message_text(m)) not in known
        }
        if not given:
            return None
        # A pure call has no lookup row: its row is where create_agent's tools node, beside
        # this model node, wrote it (a call in another place is found through a lookup row).
        ns = str(configurable.get("checkpoint_ns") or "")
        node = node_path("|".join([*ns.split("|")[:-1], TOOLS_NODE]))
        ai = _last_ai(messages)
        ai_id = ai.id if ai is not None else None
        scope = call_scope(gate.label, "")
        keys = {tc: [CallIdentity(str(thread_id), node, ai_id, tc, scope).key] for tc in given}
        # Only a row of the call as the model asked it holds that call's answer (a fan-out or
        # a corrected retry outside the guard ran other arguments under its id).
        asked = _asked_hashes(ai, given)
        # One SQLite connection for the checkpointer and the store: see `LedgerGate`.
        store_cas.share_connection(store, run_checkpointer(configurable))
        return store, given_plan(gate.prefix, str(thread_id), given, keys, asked, given_update)

    def _write(
        self,
        response: Any,
        seen: Any,
        planned: Any,
        scrub: dict[str, Any] | None,
        show: dict[str, Any] | None,
        events: list[Event],
    ) -> None:
        """The model call's guard write: none when the tools node's writes carry it, else one.

        The channel gets one version a step: when the answer's calls go to the guard's tool
        hook (the usual step) and the model call has only the last batch's previews to
        write, the tools node's writes carry them (`calls.PlannedValues`, which also gives
        the tool hook the value the batch was planned on). Otherwise (a final answer, a stop,
        calls answered elsewhere, a scrub) the scrub, the show and the events go as ONE write.

        Args:
            response: The model call's result.
            seen: The channel value the model call read.
            planned: The value its answer's batch was planned on.
            scrub: The `scrub_update`, if any.
            show: The `show_update`, if any.
            events: The events the model call records.
        """
        ai = _answer_message(response)
        values = self._planned
        # Nothing to write, or a show alone that the tool hook's writes will carry.
        if not events and scrub is None and (show is None or self._tools_record(response, ai)):
            values.remember(seen, ai, planned, show)
            return
        send = channel_writer(_run_config())
        if send is None:
            return
        edits = [edit for edit in (scrub, show) if edit is not None]
        update = guard_update(self._calls.config, events, edits)
        send([(self.channel, update)])
        # The reducer gets these very objects and returns this value (`merge_guard_state`
        # remembers the merge): the tools node's plan is found under it.
        values.remember(merge_guard_state(seen, update), ai, planned, None)

    def _tools_record(self, response: Any, ai: AIMessage | None) -> bool:
        """Whether the guard's tool hook gets a call of the answer (its write follows)."""
        if ai is None or not ai.tool_calls:
            return False
        if type(self) is not ReplayGuardMiddleware and not _has_tool_hook(self):
            return False
        messages = _response_messages(response)
        if len(messages) < 2:  # the answer alone (the usual step): none of its calls answered
            return True
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        return any(call.get("id") not in answered for call in ai.tool_calls)

    def _stop_after(
        self, request: ModelRequest[Any], response: Any, value: Any
    ) -> tuple[ModelCallResult[Any], list[Event]]:
        """The model's answer, or, when its batch would abort, the answer plus the stop.

        Runs inside the model node, right after the model answered: a batch that aborts is
        answered there (every call, a final message, the guard's write), so no tool runs
        and the run ends without an extra graph node per step (LangChain's
        `ToolCallLimitMiddleware` pays one for its `after_model` hook).

        Returns:
            The model call's result and the events that record the stop.

        Raises:
            LoopAbortedError: With `exit_behavior="error"`.
        """
        result: ModelCallResult[Any] = response
        ai = _answer_message(response)
        if ai is None or not ai.tool_calls:
            return result, []
        config = self._calls.config
        # The answer is the batch; its turn is that of the messages it answers.
        batch = ToolCallBatch(ai, current_turn(request.state, anchors=turn_anchors(value)))
        plan = self._calls.decisions.decide(self._calls.policies, value, batch, self._calls.tools)
        aborting = plan.abort
        if aborting is None or aborting.decision is None:
            return result, []
        run_config = _run_config()
        if raises_on_abort(config):
            error = as_signal(loop_error(aborting.decision))
            for planned in plan.calls:
                trace = abort_trace(planned, aborting)
                blocked_run(BlockedRun(run_config, planned.tool_call, None, trace, error=error))
            raise error
        answers: list[ToolMessage | AIMessage] = []
        events: list[Event] = []
        # A structured-output call the model node answered already keeps its answer.
        answered = {
            m.tool_call_id for m in _response_messages(response) if isinstance(m, ToolMessage)
        }
        for planned in plan.calls:
            answer, recorded = abort_answer(planned, aborting, batch)
            if answer.tool_call_id not in answered:
                answers.append(answer)
            events.extend(recorded)
            # The tools node never sees these calls: report each as a tool run of its own.
            blocked_run(
                BlockedRun(
                    run_config, planned.tool_call, None, abort_trace(planned, aborting), answer
                )
            )
        # The final message comes last, so create_agent's routing ends the run.
        answers.append(final_ai_message(aborting.decision, batch))
        emit(getattr(request.runtime, "stream_writer", None), aborting.decision, aborting.tool_call)
        return _with_answers(response, answers), events

    @signature_once
    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Decide, run or answer, and record one tool call."""
        # A tool may return a list of Commands and ToolMessages, which the tools node takes
        # (the hook's type names the usual forms): a replay gives such a list back too.
        return cast("ToolMessage | Command[Any]", self._calls.wrap(request, handler))

    @signature_once
    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async twin of `wrap_tool_call`."""
        return cast("ToolMessage | Command[Any]", await self._calls.awrap(request, handler))

    @signature_once
    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        """Add the pending reminder to this call's prompt; stop a batch that would abort."""
        stop = _stop_by_tools(request)
        if stop is not None:
            # Its own message again: `add_messages` replaces it by id, and the run ends.
            return ModelResponse(result=[stop])
        self._check_tools(request, handler)
        seen = request.state.get(self.channel)
        scrubbed, scrub = self._scrub(request, seen)
        shown, show = self._show(request, scrubbed)
        given = self._given(request)
        if given is not None:
            store, plan = given
            try:
                run_plan(store, plan)
            except Exception as exc:
                _given_failed(exc)
        value, answered = self._answered_elsewhere(request, shown)
        handed = self._with_reminder(request)
        if not self.guard.config.require_classes:
            response = handler(handed)
        else:
            with watching_model_requests(handed) as (watched, below):
                response = handler(watched)
            self._check_below(request, below)
        result, stopped = self._stop_after(request, response, value)
        self._write(response, seen, value, scrub, show, [*answered, *stopped])
        return result

    @signature_once
    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        """Async twin of `wrap_model_call`."""
        stop = _stop_by_tools(request)
        if stop is not None:
            # Its own message again: `add_messages` replaces it by id, and the run ends.
            return ModelResponse(result=[stop])
        self._check_tools(request, handler)
        seen = request.state.get(self.channel)
        scrubbed, scrub = self._scrub(request, seen)
        shown, show = self._show(request, scrubbed)
        given = self._given(request)
        if given is not None:
            store, plan = given
            try:
                await arun_plan(store, plan)
            except Exception as exc:
                _given_failed(exc)
        value, answered = self._answered_elsewhere(request, shown)
        handed = self._with_reminder(request)
        if not self.guard.config.require_classes:
            response = await handler(handed)
        else:
            with watching_model_requests(handed) as (watched, below):
                response = await handler(watched)
            self._check_below(request, below)
        result, stopped = self._stop_after(request, response, value)
        self._write(response, seen, value, scrub, show, [*answered, *stopped])
        return result

    def _check_below(self, request: ModelRequest[Any], below: Sequence[Any]) -> None:
        """Refuse an unclassified tool a middleware inside the guard offered (`require_classes`).

        A middleware inside the guard may offer the model a tool no tools node has and
        serve its calls itself; the guard's own request never shows it. With
        `require_classes` the model hook watches the requests made below its own
        (`_compat.watching_model_requests`) and checks the tools they added once the model
        call returns, before any of its calls reaches a tool hook.

        Raises:
            ValueError: An added tool is unclassified.
        """
        mine = {id(tool) for tool in request.tools}
        added = [tool for made in below for tool in made.tools if id(tool) not in mine]
        if added:
            self._learn(added)
            self.guard._unclassified.check(
                self._calls.policies, added, where="a middleware inside the guard"
            )

    def _check_tools(self, request: ModelRequest[Any], handler: Callable[..., Any]) -> None:
        """Learn the agent's tools; check the configured names it does not have, once.

        `create_agent` tells a middleware nothing about the agent's tools at build time;
        the model calls are the first place they are seen (`_check_agent`). A tool call to any
        other name is a call to a tool that does not exist (reason `unknown_tool`). A tool
        with MCP annotations in its `metadata` that the configuration does not name gets
        the class they give, from this model call's batch on.
        """
        offered: Sequence[Any] = request.tools
        if request.response_format is not None:
            offered = [*offered, *_structured_output_tools(request.response_format)]
        seen = self._offered
        if seen is not None and len(offered) == len(seen) and all(map(operator.is_, offered, seen)):
            return  # the same tools as at the last model call (create_agent passes one list)
        # Checked once per new list: tools that passed stay known (another agent only adds).
        self._check_dynamic_tools(request.tools, self._check_agent(handler))
        names = self._learn(offered)
        # Tools first seen here (no agent built, or added at model-call time); not the
        # structured output's, which `create_agent` answers itself.
        self.guard._unclassified.check(self._calls.policies, request.tools, where="the agent")
        if not self._tools_checked:
            # Raises for a misspelt policy name (`strict_tool_names`): before any tool runs,
            # and again at every invoke until the name is fixed.
            # Every tool the graph can run is known when the guard saw its whole agent, no
            # other middleware serves tools, and no other middleware of the same guard is in
            # an agent that has not run yet (each learns its agent at its first model call).
            complete = (
                self._agent_tools_learned
                and not self._others_run_tools
                and self.guard._tool_names.middlewares <= 1
            )
            self.guard._tool_names.check(
                self._calls.tools or names, where="the agent", complete=complete
            )
            self._tools_checked = True
        self._offered = tuple(offered)

    def _check_dynamic_tools(
        self, offered: Sequence[Any], registered: frozenset[str] | None
    ) -> None:
        """Raise `create_agent`'s own error for offered tools that nothing would run.

        `create_agent` skips that check when any middleware has a tool hook, since such a
        middleware may run tools added at model-call time. The guard runs none, so when its
        hooks are the only ones it makes the check itself, on the request it sees: the
        final one when it is last in the middleware list.

        Args:
            offered: The tools the request offers.
            registered: The tools of the agent's tools node (None: no check).

        Raises:
            ValueError: A tool the request offers is not in the agent's tools node.
        """
        if registered is None:
            return
        unknown = [t.name for t in offered if isinstance(t, BaseTool) and t.name not in registered]
        if unknown:
            raise ValueError(dynamic_tool_error(unknown, registered))

    def _learn(self, tools: Sequence[Any]) -> list[str]:
        """Learn tools that exist: their names, and the classes their MCP annotations give."""
        names = [n for n in map(_tool_name, tools) if n]
        self._calls.learn_tools(names)
        self._calls.policies.learn(hinted_tools(tools))
        return names

    def _with_reminder(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        if not self.guard.config.reminder:
            return request
        reminder = next_call_reminder(request.state, channel=self.channel)
        if reminder is None:
            return request
        message = system_prompt_with_reminder(request.system_message, reminder)
        return request.override(system_message=message)


_HOOKS = ("wrap_tool_call", "awrap_tool_call", "wrap_model_call", "awrap_model_call")


class _ToolFreeReplayGuardMiddleware(ReplayGuardMiddleware):
    """The guard in an agent that gets no tools node: without its tool hooks.

    `create_agent` adds a tools node whenever a middleware's class has a tool hook, even to
    an agent without tools, which changes its graph and its routing. `_fit_tool_hooks`
    switches an instance to this class while such an agent is built, and back for the next
    build that has tools.
    """

    wrap_tool_call = AgentMiddleware.wrap_tool_call
    awrap_tool_call = AgentMiddleware.awrap_tool_call


def _stop_by_tools(request: ModelRequest[Any]) -> AIMessage | None:
    """The guard's final message, when the tools node just ended the run with it.

    The guard stops a batch at the model call that asked for it (`_stop_after`), on the
    model's answer as it sees it. A model middleware outside the guard that rewrites the
    answer's tool calls changes what the model asked after that: the guard's tool hook
    then stops the batch, and its final message is the last one. `create_agent` routes the
    tools node back to the model whatever it answered; the model is not called again.
    """
    messages = request.state.get("messages") if isinstance(request.state, dict) else None
    if not messages:
        return None
    last = messages[-1]
    if not isinstance(last, AIMessage) or last.tool_calls or last.id is None:
        return None
    return last if STOP_MARK in last.response_metadata else None


def _has_tool_hook(middleware: Any) -> bool:
    """Whether `create_agent` sees a tool hook on a middleware (its own test, on the class)."""
    cls = type(middleware)
    return (
        getattr(cls, "wrap_tool_call", None) is not AgentMiddleware.wrap_tool_call
        or getattr(cls, "awrap_tool_call", None) is not AgentMiddleware.awrap_tool_call
    )


def _fit_tool_hooks(middleware: ReplayGuardMiddleware, building: AgentInputs) -> None:
    """Give the guard its tool hooks exactly when the agent being built has a tools node.

    Args:
        middleware: The guard `create_agent` is reading.
        building: The `tools` and `middleware` given to that `create_agent`.
    """
    if type(middleware) not in (ReplayGuardMiddleware, _ToolFreeReplayGuardMiddleware):
        return  # a subclass keeps what it defines
    tool_free = not any(not isinstance(t, dict) for t in building.tools) and not any(
        _has_tool_hook(m) or getattr(m, "tools", None)
        for m in building.middleware
        if not isinstance(m, ReplayGuardMiddleware)
    )
    middleware.__class__ = _ToolFreeReplayGuardMiddleware if tool_free else ReplayGuardMiddleware


def _check_unique_name(middleware: ReplayGuardMiddleware, siblings: Sequence[Any]) -> None:
    """Name the fix when `create_agent` gets two guard middlewares with one name (one channel).

    Args:
        middleware: The guard `create_agent` is reading.
        siblings: The middleware list given to that `create_agent`.

    Raises:
        ValueError: Another guard of the agent keeps its state in the same channel.
    """
    same = [
        m
        for m in siblings
        if isinstance(m, ReplayGuardMiddleware) and m.channel == middleware.channel
    ]
    if len(same) < 2:
        return
    if middleware.channel == GUARD_CHANNEL:
        msg = (
            f"create_agent got {len(same)} ReplayGuardMiddleware instances without a name; "
            "they would share the default name and the 'replay_guard' state channel. Pass a "
            "distinct name= to each (ReplayGuardMiddleware(..., name='billing')); each named "
            "instance keeps its state in its own channel, replay_guard__<name>."
        )
    else:
        msg = (
            f"create_agent got {len(same)} ReplayGuardMiddleware instances named "
            f"{middleware.name!r}; give each a distinct name= (each name is its own state "
            "channel, replay_guard__<name>)."
        )
    raise ValueError(msg)


def _structured_output_tools(response_format: Any) -> list[str]:
    """The tool names a `ToolStrategy` response format gives the model (its answer's tools).

    The model node answers these calls itself; they are tools that exist, not made-up names.
    """
    specs = getattr(response_format, "schema_specs", None) or ()
    return [
        name for name in (getattr(spec, "name", None) for spec in specs) if isinstance(name, str)
    ]


def _response_messages(response: Any) -> list[Any]:
    """The messages of a model call's response (a ModelResponse, an AIMessage, or extended)."""
    if isinstance(response, ExtendedModelResponse):
        response = response.model_response
    if isinstance(response, AIMessage):
        return [response]
    return list(getattr(response, "result", None) or ())


def _answer_message(response: Any) -> AIMessage | None:
    """The AIMessage a model call returned (a ModelResponse, an AIMessage, or extended)."""
    if isinstance(response, ExtendedModelResponse):
        response = response.model_response
    if isinstance(response, AIMessage):
        return response
    for message in reversed(getattr(response, "result", None) or ()):
        if isinstance(message, AIMessage):
            return message
    return None


def _with_answers(response: Any, answers: Sequence[BaseMessage]) -> ModelCallResult[Any]:
    """The model's answer followed by the guard's answers, as one model response.

    The answers join the response's messages (as structured output's tool answer does), so
    the model node writes its messages once and its `updates` chunk keeps its usual shape.
    """
    if isinstance(response, ExtendedModelResponse):
        inner = response.model_response
        return ExtendedModelResponse(
            model_response=ModelResponse([*inner.result, *answers], inner.structured_response),
            command=response.command,
        )
    if isinstance(response, AIMessage):
        return ModelResponse(result=[response, *answers])
    model_response: ModelResponse[Any] = response
    return ModelResponse([*model_response.result, *answers], model_response.structured_response)


def _run_config() -> Any:
    """The config of the running node (its callbacks), or None outside a graph."""
    from langgraph.config import get_config

    try:
        return get_config()
    except RuntimeError:
        return None


def _last_batch(messages: Sequence[Any]) -> list[ToolMessage]:
    """The ToolMessages after the last AIMessage (the batch the tools node just answered)."""
    batch: list[ToolMessage] = []
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            batch.append(message)
        elif isinstance(message, AIMessage):
            break
    return batch


def _last_ai(messages: Sequence[Any]) -> AIMessage | None:
    """The last AIMessage (the one whose calls the last batch answered)."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message
    return None


def _asked_hashes(message: AIMessage | None, ids: Collection[str]) -> dict[str, str]:
    """tool_call_id -> hash of the arguments the model asked, for the calls in `ids`."""
    asked: dict[str, str] = {}
    for call in message.tool_calls if message is not None else ():
        call_id = call.get("id")
        if call_id in ids:
            try:
                asked[str(call_id)] = args_digest(call.get("args", {}))
            except (TypeError, ValueError):  # arguments the ledger could not key either
                continue
    return asked


def _given_failed(exc: Exception) -> None:
    """Log a failed rewrite: the rows keep the raw result until the next one succeeds."""
    logger.warning(
        "langgraph-replay-guard: could not rewrite ledger rows to the tool results the model "
        "was given (%s: %s); they keep the results as the tools returned them",
        type(exc).__name__,
        exc,
    )


# `_scrub` first searches the newest messages' texts joined by a character tool results
# hardly ever hold (the channel keeps the previews of the most recently used results: their
# messages are among the last two per preview).
_SEPARATOR = "\x00"


def _tool_name(tool: Any) -> str | None:
    """The name of a tool the model is offered: a `BaseTool`, a provider tool's dict, a name."""
    if isinstance(tool, str):
        return tool
    if isinstance(tool, dict):
        name = tool.get("name") or tool.get("function", {}).get("name")
        return name if isinstance(name, str) else None
    name = getattr(tool, "name", None)
    return name if isinstance(name, str) else None
