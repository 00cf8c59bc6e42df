"""Guard decisions as pure functions over a guard state (no LangChain imports)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, NamedTuple

from langgraph_replay_guard.decisions.failures import SAME_FAILURE, failure_signature
from langgraph_replay_guard.decisions.keys import call_key, content_hash
from langgraph_replay_guard.decisions.state import (
    Event,
    GuardView,
    Outcome,
    settled,
    state_for_turn,
)
from langgraph_replay_guard.decisions.state_format import DEFAULT_CFG
from langgraph_replay_guard.decisions.texts import (
    STOP_IGNORED,
    UNKNOWN_TOOL,
    cycle_message,
    duplicate_preview_message,
    ignored_stop_error,
    loop_error,
    render_reminder,
    repeat_message,
    same_batch_message,
    same_failure_message,
    same_result_message,
    stop_error,
    stopped_message,
    summarize_args,
    tool_list,
    unknown_tool_message,
)
from langgraph_replay_guard.errors import InvalidArgumentsError
from langgraph_replay_guard.policy.config import GuardConfig, PolicySource, keeps_previews
from langgraph_replay_guard.policy.patterns import SafePattern
from langgraph_replay_guard.policy.resolver import PolicyResolver, resolver_of

__all__ = [
    "UNKNOWN_TOOL_KEY",
    "CallDecisions",
    "CallFacts",
    "DecidedCall",
    "Decision",
    "Verdict",
    "call_facts",
    "call_failed",
    "decide",
    "decide_calls",
    "earlier_call_id",
    "fold_settings",
    "ignored_stop_error",
    "last_result_digest",
    "loop_error",
    "make_event",
    "raises_on_abort",
    "render_reminder",
    "state_view",
    "stop_error",
    "stop_was_ignored",
    "stops_on_abort",
    "summarize_args",
    "tool_list",
]


UNKNOWN_TOOL_KEY = "unknown_tool"
"""The call key every call to an unknown tool shares (never a hash, so it meets no real call).

Varied hallucinated names (`browser-type`, `browser_typ`, `mcp__browser_type`) and their
arguments are one loop: the model is not finding the tool. Counting them under one key makes
the repeat counter count every call to a name the tools node lacks in the turn, until
progress (a successful world-changing call) or a new user message resets it.
"""


class Verdict(StrEnum):
    """What the guard does with a call."""

    ALLOW = "allow"
    """Run the tool."""
    DENY = "deny"
    """Do not run it; the model is told why."""
    SHORT_CIRCUIT = "short_circuit"
    """Do not run it; the model gets the identical result it got last time (a preview)."""
    ABORT = "abort"
    """Do not run it and stop the run (`exit_behavior`)."""
    REPLAY = "replay"
    """Do not run it; return the outcome recorded for this very call (replay ledger)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The guard's decision about one call.

    Attributes:
        verdict: What happens to the call.
        reason: Why, for anything but a plain allow: `"duplicate"`, `"repeat_limit"`,
            `"same_result"`, `"cycle"`, `"unknown_tool"` (a name the tools node does not
            have), `"same_failure"` (one tool failing the same way whatever the
            arguments), `"stopped"`, `"stop_ignored"` (the model asked for more tool
            calls after the stop), `"replayed"`.
        call_key: The call's canonical key.
        message: What the model is told when the call is not executed.
        previous_result: Preview of the earlier result the model is pointed to, or None.
        tool: Tool name.
        count: Which identical attempt this call is in the turn (1 for the first).
        shadowed: In shadow mode (`GuardConfig.mode="shadow"`), the decision enforcing
            would have made; this one then lets the call run.
    """

    verdict: Verdict
    reason: str | None
    call_key: str
    message: str | None = None
    previous_result: str | None = None
    tool: str = ""
    count: int = 1
    shadowed: Decision | None = None

    @property
    def executes(self) -> bool:
        """Whether the tool body runs."""
        return self.verdict is Verdict.ALLOW


class CallFacts(NamedTuple):
    """Everything the engine needs to know about one call, computed once per call.

    A named tuple: every call builds one, and a tuple is built several times faster than
    a frozen dataclass.
    """

    tool: str
    key: str
    replay: str
    volatile: bool
    short_circuit: bool
    max_repeats: int
    args: Any
    unknown: bool = False
    """The name is not a tool of the tools node (`tools` lists the ones it has)."""
    tools: tuple[str, ...] = ()
    max_same_failures: int = 0
    """The tool's same-failure threshold (0: the layer is off for it)."""
    failure_pattern: SafePattern | None = None
    """`GuardConfig.failure_pattern`, compiled: a result matching it is a failure too."""
    source: PolicySource | None = None
    """Where the tool's policy comes from (`GuardConfig.policy_source`); None: unknown tool."""
    preview_chars: int = 200
    """`GuardConfig.result_preview_chars`: how much of a result its event keeps."""
    store_previews: bool = True
    """`GuardConfig.store_previews` where no messages hold the results (`keeps_previews`):
    False, its event keeps no result text (a digest only). An integration that reads the
    thread's messages asks for none itself (`make_event(previews=...)`)."""
    background: bool = False
    """The call starts work that outlives it (`CallClass.background`): once it ran, reads
    are no longer deduplicated in the thread (or turn)."""

    @property
    def args_summary(self) -> str:
        """Short, sanitized argument summary for reminders (computed only when needed).

        For a call to an unknown tool: the tools the node has, which is what the model
        needs to read (the arguments of a tool that does not exist tell it nothing).
        """
        if self.unknown:
            return tool_list(self.tools)
        return summarize_args(self.args)


def call_facts(
    policies: GuardConfig | PolicyResolver,
    tool: str,
    args: Any,
    *,
    tools: Collection[str] | None = None,
) -> CallFacts:
    """Classify a call and compute its key.

    A tool classified per call (`ToolPolicy.classify`, `preset` or `classifier`) gets the
    class its rules give this call; every other tool gets its policy's class. A name that
    is not in `tools` is an unknown tool: it never runs, and every such call shares one key
    (`UNKNOWN_TOOL_KEY`).

    Args:
        policies: The guard's `PolicyResolver` (with the classes it learned), or a
            configuration on its own (its `GuardConfig.resolver`).
        tool: Tool name.
        args: Tool arguments.
        tools: The names of the tools that exist (the tools node's), when the caller knows
            them; None: every name is taken as a tool.

    Returns:
        The call's facts.

    Raises:
        InvalidArgumentsError: If the arguments cannot be hashed (the message names the
            tool and the argument).
    """
    # `resolver_of`, inline: this runs for every call.
    resolver = policies if isinstance(policies, PolicyResolver) else policies.resolver
    config = resolver.config
    if tools is not None and tool not in tools:
        return CallFacts(
            tool=tool,
            key=UNKNOWN_TOOL_KEY,
            replay="pure",
            volatile=False,
            short_circuit=False,
            max_repeats=config.default_policy.max_repeats or config.max_repeats,
            args=args,
            unknown=True,
            tools=tuple(tools),
            preview_chars=config.result_preview_chars,
            store_previews=keeps_previews(config, messages=False),
        )
    rules = resolver.rules(tool)
    classifier = rules.policy.classifier_fn
    if classifier is None:
        key = call_key(tool, args, ignore_args=rules.ignore_args)
        replay, volatile, short_circuit = rules.replay, rules.volatile, rules.short_circuit
        background = False
    else:
        # A multi-purpose tool (a shell, an editor): this call's own class and key.
        call_class, key_args = classifier(tool, args)
        key = call_key(tool, key_args, ignore_args=rules.ignore_args)
        replay, volatile = call_class.replay, call_class.volatile
        short_circuit = rules.policy.short_circuits(replay, volatile)
        background = call_class.background
    return CallFacts(
        tool,
        key,
        replay,
        volatile,
        short_circuit,
        rules.max_repeats,
        args,
        False,
        (),
        rules.max_same_failures,
        rules.failure_pattern,
        rules.source,
        config.result_preview_chars,
        keeps_previews(config, messages=False),
        background,
    )


def fold_settings(config: GuardConfig) -> dict[str, Any]:
    """The configuration values the channel reducer needs, written with each update.

    The reducer is a module-level function with no access to the guard, so the few
    settings that shape the stored state travel with the events.

    Args:
        config: Guard configuration.

    Returns:
        A small JSON object, shared by every write of this config: read it, never change it
        (the reducer copies it into the state).
    """
    last = _LAST_SETTINGS[0]
    if last is not None and last[0] is config:
        return last[1]
    stored = {
        "w": config.history_window,
        "cp": config.max_cycle_period,
        "scope": config.scope,
        "rr": config.repeat_reset,
        "rd": config.result_diff,
        "cy": config.cycle_detection,
        # Shadow mode never reminds: the agent behaves as it would without the guard.
        "rm": config.reminder and config.mode == "enforce",
    }
    settings = {key: value for key, value in stored.items() if value != DEFAULT_CFG[key]}
    _LAST_SETTINGS[0] = (config, settings)
    return settings


# (config, its fold settings): every recorded call writes them, and a config is frozen. One
# tuple, read and replaced atomically, like the plan cache.
_LAST_SETTINGS: list[tuple[GuardConfig, dict[str, Any]] | None] = [None]


def decide(
    state: Mapping[str, Any],
    facts: CallFacts,
    config: GuardConfig,
    *,
    turn: str | None = None,
    earlier_in_batch: Sequence[str] = (),
    batch: str | None = None,
) -> Decision:
    """Decide what to do with a call. Pure: reads the state, never changes it.

    In shadow mode (`GuardConfig.mode="shadow"`) every call runs: a decision that would
    deny, short-circuit or stop comes back as an allow that carries it (`shadowed`), for
    the integrations to report and the channel to count. The one place shadow mode is
    decided: every integration decides through here.

    Args:
        state: A settled guard state (see `settled`).
        facts: The call's facts from `call_facts`.
        config: Guard configuration.
        turn: Id of the current turn; a different turn than the state's starts afresh
            (with `scope="turn"`).
        earlier_in_batch: Keys of the calls before this one in the same AIMessage, in
            order: parallel calls see one snapshot, so position decides between them.
        batch: Id of the AIMessage holding the call. After a stop, a call of another
            batch than the stopped one is a come-back (`"stop_ignored"`): the graph went
            back to the model although the run was stopped.

    Returns:
        The decision.
    """
    view = state_for_turn(state, turn, config.scope)
    decision = _decide(view, facts, config, earlier_in_batch, batch)
    if config.mode == "shadow" and decision.verdict is not Verdict.ALLOW:
        return Decision(
            Verdict.ALLOW,
            None,
            decision.call_key,
            tool=decision.tool,
            count=decision.count,
            shadowed=decision,
        )
    return decision


def _decide(
    view: Mapping[str, Any],
    facts: CallFacts,
    config: GuardConfig,
    earlier_in_batch: Sequence[str],
    batch: str | None,
) -> Decision:
    """`decide`, enforcing, on the state as the call's turn sees it.

    Layers, strongest first: a stopped run, the repeat limit, cycles, the same failure
    whatever the arguments, dedup, and the identical-result short-circuit.
    """
    key, tool = facts.key, facts.tool
    counted = view["counters"].get(key)
    in_batch = earlier_in_batch.count(key) if earlier_in_batch else 0
    # `counters` rows are [attempts, tool] (`state_format.FIELDS` names every row's positions).
    attempt = (counted[0] if counted else 0) + in_batch + 1
    final = stops_on_abort(config)

    stop = view.get("stop")
    if stop is not None:
        come_back = _comes_back(view, batch)
        msg = stopped_message(stop, come_back=come_back)
        reason = STOP_IGNORED if come_back else "stopped"
        return Decision(Verdict.ABORT, reason, key, msg, None, tool, attempt)

    if facts.unknown:
        return _unknown_tool_decision(facts, attempt, final=final, limit=config.repeat_limit)

    # A volatile read (a poll) starts its count over when its result changes, and its first
    # answer of a result is not a repeat of it: it may get that result `max_repeats` times
    # again before it is stopped.
    limit = facts.max_repeats + 1 if facts.volatile else facts.max_repeats
    if config.repeat_limit and attempt > limit:
        ends = _stops_past_limit(attempt, limit, final=final)
        return Decision(
            Verdict.ABORT if ends else Verdict.DENY,
            "repeat_limit",
            key,
            repeat_message(tool, attempt, limit, final=ends),
            None,
            tool,
            attempt,
        )

    cycle = view.get("cycle")
    if config.cycle_detection and cycle is not None and cycle["keys"][cycle["pos"]] == key:
        aborting = cycle["strikes"] >= 1
        return Decision(
            Verdict.ABORT if aborting and final else Verdict.DENY,
            "cycle",
            key,
            cycle_message(cycle["tools"], final=aborting and final),
            None,
            tool,
            attempt,
        )

    failing = _same_failure(view, facts, final)
    if failing is not None:
        return failing

    # After a call that started background work, a read may see what the job wrote since:
    # it runs (still counted by the repeat limit, like a volatile read).
    reads_settle = not view.get("background")
    if config.dedup and facts.replay == "pure" and not facts.volatile and reads_settle:
        if in_batch:
            msg = same_batch_message(tool)
            return Decision(Verdict.DENY, "duplicate", key, msg, None, tool, attempt)
        epoch = view["epoch"]
        for recent_key, _tool, outcome, call_epoch in reversed(view["recent_calls"]):
            if recent_key != key:
                continue
            if outcome == "success" and call_epoch == epoch:
                preview = _preview(view, key)
                return Decision(
                    Verdict.DENY,
                    "duplicate",
                    key,
                    duplicate_preview_message(tool, preview),
                    preview,
                    tool,
                    attempt,
                )
            break  # the latest identical call failed or timed out: a retry is allowed

    if config.result_diff and facts.short_circuit and (reads_settle or facts.replay != "pure"):
        stored = view["results"].get(key)
        # [result hash, epoch, same in a row, preview(, call id)]
        if stored is not None and stored[2] >= 2 and stored[1] == view["epoch"]:
            preview = stored[3]
            return Decision(
                Verdict.SHORT_CIRCUIT,
                "same_result",
                key,
                same_result_message(tool, stored[2], preview),
                preview,
                tool,
                attempt,
            )

    return Decision(Verdict.ALLOW, None, key, None, None, tool, attempt)


def _stops_past_limit(attempt: int, limit: int, *, final: bool) -> bool:
    """Whether an attempt past a loop layer's limit stops the run rather than being denied.

    `final` (the exit behavior stops at an abort) stops at once. With "continue" a call
    insisted on `limit` more times after it was blocked escalates to a stop: the model is not
    listening, and every blocked attempt costs a model call.
    """
    return final or attempt > 2 * limit


def _unknown_tool_decision(facts: CallFacts, attempt: int, *, final: bool, limit: bool) -> Decision:
    """A call to a tool that does not exist: answered, never run; past `max_repeats`, a stop.

    The first one gets the tools node's own error text, so a model that corrects itself
    after one mistake sees what it would see without the guard. Later ones (any unknown
    name, in the turn) say how often; past the limit, as for a repeat, the run ends (with
    `"continue"`, after twice the limit).
    """
    most = facts.max_repeats
    over = limit and attempt > most
    ends = over and _stops_past_limit(attempt, most, final=final)
    message = unknown_tool_message(facts.tool, facts.tools, attempt, most, ends=ends)
    verdict = Verdict.ABORT if ends else Verdict.DENY
    return Decision(verdict, UNKNOWN_TOOL, facts.key, message, None, facts.tool, attempt)


def _same_failure(view: Mapping[str, Any], facts: CallFacts, final: bool) -> Decision | None:
    """The same-failure layer: a tool that failed the same way again after the reminder.

    The reminder is armed when the streak reaches the threshold (see `state`); the call
    after one more identical failure stops the run. With `exit_behavior="continue"` the
    calls are denied, and a tool insisted on up to twice the threshold stops the run.
    """
    limit = facts.max_same_failures
    stored = view.get("failures", {}).get(facts.tool) if limit else None
    if stored is None:
        return None
    in_a_row = stored[1]  # [failure signature, same in a row]
    if in_a_row <= limit:
        return None
    attempt = in_a_row + 1
    ends = _stops_past_limit(attempt, limit, final=final)
    return Decision(
        Verdict.ABORT if ends else Verdict.DENY,
        SAME_FAILURE,
        facts.key,
        same_failure_message(facts.tool, in_a_row, final=ends),
        None,
        facts.tool,
        attempt,
    )


def _comes_back(view: Mapping[str, Any], batch: str | None) -> bool:
    """Whether a call of `batch` comes after the stop of this turn rather than being in it.

    The stop is recorded by the batch that aborted, the last batch the state folded; a
    re-run of that batch (a resume, a retry) gets its first answers again. The first
    come-back is answered and recorded (`stop_was_ignored`): it is that batch from then on.
    """
    return batch is not None and view.get("last_batch") not in (None, batch)


def _preview(view: Mapping[str, Any], key: str) -> str | None:
    stored = view["results"].get(key)
    return stored[3] if stored is not None else None  # the memo's preview


def earlier_call_id(view: Mapping[str, Any], key: str) -> str | None:
    """The tool_call_id of the call that gave `key`'s last result, when the state names it.

    It does when that call ran under other arguments than the model asked (a middleware
    changed one; its result memo's fifth entry keeps it): the model's messages cannot name it.

    Args:
        view: A settled guard state.
        key: The call key of a duplicate.

    Returns:
        The id, or None (find the earlier call by its key in the model's messages).
    """
    stored = view["results"].get(key)
    return stored[4] if stored is not None and len(stored) > 4 else None


def last_result_digest(view: Mapping[str, Any], key: str) -> str | None:
    """The digest of `key`'s last result (its result memo's first entry), if the state has it.

    Args:
        view: A settled guard state.
        key: A call key.

    Returns:
        The digest, or None.
    """
    stored = view["results"].get(key)
    return stored[0] if stored is not None and isinstance(stored[0], str) else None


def make_event(
    facts: CallFacts,
    outcome: Outcome,
    *,
    result: str | None = None,
    reason: str | None = None,
    abort: bool = False,
    batch: str | None = None,
    index: int = 0,
    turn: str | None = None,
    batch_size: int | None = None,
    call_id: str | None = None,
    previews: bool = True,
) -> Event:
    """Build the event that records a call.

    Args:
        facts: The call's facts.
        outcome: `"success"`, `"failure"`, `"timeout"` or `"denied"` (not executed).
        result: Result text of a success, or the error text of a failure.
        reason: For a denied call, the decision's reason; for a call that ran in shadow
            mode, the reason enforcing would have blocked it for (counted in `shadow`).
        abort: Whether the denial was an abort that stops the run (in shadow mode: would
            have stopped it).
        batch: Id of the AIMessage holding the call (parallel calls share it).
        index: Position of the call in its AIMessage.
        turn: Id of the current turn.
        batch_size: How many calls the batch has; with it, the batch is folded into the
            state as soon as every call reported (otherwise when the next batch arrives).
        call_id: The call's tool_call_id, for a call that ran under other arguments than
            the model asked (a success remembers it: `earlier_call_id`).
        previews: False: keep the result's digest and no text, as with
            `store_previews=False` (the caller adds the preview later).

    Returns:
        The event.
    """
    executed_with_text = result is not None and outcome in {"success", "failure"}
    failure = None
    if facts.max_same_failures and call_failed(facts, outcome, result):
        failure = (failure_signature(result, facts.args), facts.max_same_failures)
    # The summary feeds reminders and stops only: denied calls and repeated side effects.
    needs_summary = outcome == "denied" or facts.replay != "pure"
    event: Event = {
        "b": batch,
        "i": index,
        "t": turn,
        "k": facts.key,
        "n": facts.tool,
        "a": facts.args_summary if needs_summary else "",
        "c": facts.replay,
        "v": facts.volatile,
        "s": facts.short_circuit,
        "o": outcome,
        "h": content_hash(result) if executed_with_text and result is not None else None,
        "p": _event_preview(facts, outcome, result, previews=previews),
        "r": reason,
        "x": abort,
    }
    # The optional keys only when set: an event stays as small as it was without them.
    if batch_size is not None:
        event["m"] = batch_size
    if failure is not None:
        event["f"] = [*failure]
    if call_id is not None:
        event["d"] = call_id
    if facts.background:
        event["g"] = True
    return event


def _event_preview(
    facts: CallFacts, outcome: Outcome, result: str | None, *, previews: bool = True
) -> str | None:
    """What of a successful result its event keeps: a preview, or no text at all.

    Without previews (`store_previews=False`, or `previews=False`) the event still tells
    the fold whether the result was blank (`""`) or held something (None, its digest beside
    it), which is all the same-failure layer reads of it; no character of the result is kept.
    """
    if outcome != "success" or result is None:
        return None
    if not (previews and facts.store_previews):
        return "" if result.isspace() or not result else None
    return result[: facts.preview_chars]


def call_failed(facts: CallFacts, outcome: Outcome, result: str | None) -> bool:
    """Whether an executed call failed, for the same-failure layer and the loop definition.

    Args:
        facts: The call's facts (its tool's `failure_pattern`).
        outcome: `"failure"` for an error (an error ToolMessage, an exception; in a
            recording, a result matching eval's error pattern), else `"success"`.
        result: The result or error text.

    Returns:
        True for an error, or a result that matches the configured `failure_pattern` (a
        shell prints `command not found` in a normal result).
    """
    if outcome == "failure":
        return True
    pattern = facts.failure_pattern
    return outcome == "success" and pattern is not None and pattern.search(result or "") is not None


def stops_on_abort(config: GuardConfig) -> bool:
    """Whether an abort ends the run (`exit_behavior` `"end"` or `"error"`).

    With `"continue"` an abort only blocks the call, until the model ignores it (see
    `STOP_IGNORED`).
    """
    return config.exit_behavior != "continue"


def raises_on_abort(config: GuardConfig) -> bool:
    """Whether an abort raises `LoopAbortedError` (`exit_behavior="error"`)."""
    return config.exit_behavior == "error"


def stop_was_ignored(state: Mapping[str, Any]) -> bool:
    """Whether the guard already answered a come-back after this turn's stop.

    A graph that goes back to the model after the stop (a static `tools -> agent` edge)
    cannot be ended by the tools node: a node that raises loses its writes, so raising at
    the first come-back would leave that AIMessage without answers in the saved history,
    which model providers reject on the next user turn. The first come-back is therefore
    answered like a stop (every call, a final message) and recorded as blocked calls with
    reason `"stop_ignored"`; the turn's `stop` keeps the reason the run was stopped for.
    From then on the run ends with `LoopAbortedError`: in the model node before the model
    is called (`guard.system_prompt`), or at the next come-back, whichever the graph
    reaches first. Model calls after an abort stay bounded.

    The stop's own batch records its calls as blocked, so a `"stop_ignored"` entry last in
    `blocked` can only come from a come-back after the stop of this turn (a user message
    ends the stop).

    Args:
        state: A settled guard state, in the turn being decided.

    Returns:
        True when this turn's stop was ignored once and answered.
    """
    blocked = state.get("blocked")
    if state.get("stop") is None or not blocked:
        return False
    return bool(blocked[-1][1] == STOP_IGNORED)  # [tool, reason, count]


@dataclass(slots=True)
class DecidedCall:
    """The guard's decision for one call of a batch (or why it could not decide).

    Not frozen, though nothing changes one: every call of every batch builds one.
    """

    tool_call: Any  # a LangChain ToolCall: {"name", "args", "id"}
    index: int
    facts: CallFacts | None
    decision: Decision | None
    error: InvalidArgumentsError | None


@dataclass(frozen=True)
class CallDecisions:
    """Decisions for the calls of one model answer, all against the same state."""

    calls: list[DecidedCall]
    abort: DecidedCall | None = field(init=False)
    """The first call whose decision aborts the run, if any (every hook reads it)."""

    def __post_init__(self) -> None:
        """Find the call that aborts the run, once."""
        aborting = next(
            (
                call
                for call in self.calls
                if call.decision is not None and call.decision.verdict is Verdict.ABORT
            ),
            None,
        )
        object.__setattr__(self, "abort", aborting)  # a frozen dataclass's own field

    @property
    def stop_ignored(self) -> DecidedCall | None:
        """The first call asked for after the guard stopped the run in this turn, if any."""
        aborting = self.abort
        decision = aborting.decision if aborting is not None else None
        return aborting if decision is not None and decision.reason == STOP_IGNORED else None

    def call(self, tool_call_id: str | None) -> DecidedCall | None:
        """The planned call with this id."""
        for call in self.calls:
            if call.tool_call.get("id") == tool_call_id:
                return call
        return None


def decide_calls(
    policies: GuardConfig | PolicyResolver,
    state: Mapping[str, Any],
    tool_calls: Sequence[Mapping[str, Any]],
    turn: str | None,
    *,
    batch_id: str | None = None,
    tools: Collection[str] | None = None,
) -> list[DecidedCall]:
    """Decide calls by position against one state (identical calls: the first one runs).

    Args:
        policies: The guard's `PolicyResolver`, or a configuration on its own (see
            `call_facts`).
        state: Settled guard state.
        tool_calls: The calls, in order; `args` may be a plain string (executors pass one).
        turn: The current turn.
        batch_id: Id of their AIMessage: after a stop, another batch is a come-back.
        tools: Names of the tools that exist, when known: a call to another name is an
            unknown tool (see `call_facts`).

    Returns:
        One planned call per tool call.
    """
    resolver = resolver_of(policies)
    config = resolver.config
    earlier: list[str] = []
    calls = []
    for index, tool_call in enumerate(tool_calls):
        try:
            facts = call_facts(resolver, tool_call["name"], tool_call.get("args", {}), tools=tools)
        except InvalidArgumentsError as exc:
            calls.append(DecidedCall(tool_call, index, None, None, exc))
            continue
        decision = decide(state, facts, config, turn=turn, earlier_in_batch=earlier, batch=batch_id)
        earlier.append(facts.key)
        calls.append(DecidedCall(tool_call, index, facts, decision, None))
    if config.mode == "shadow":
        _shadow_the_batch_stop(calls)
    return calls


def _shadow_the_batch_stop(calls: list[DecidedCall]) -> None:
    """Shadow mode: the other calls of a batch that enforcing would stop were `stopped`.

    Enforcing answers every call of a batch that aborts, the aborting one with its reason
    and the others with `"stopped"` (`integrations.answers.abort_answer`); in shadow mode they
    all run, and each carries what enforcing would have done with it.
    """
    aborting = next(
        (
            call
            for call in calls
            if call.decision is not None
            and call.decision.shadowed is not None
            and call.decision.shadowed.verdict is Verdict.ABORT
        ),
        None,
    )
    if aborting is None:
        return
    for call in calls:
        decision = call.decision
        if call is aborting or decision is None:
            continue
        stopped = Decision(
            Verdict.DENY, "stopped", decision.call_key, None, None, decision.tool, decision.count
        )
        call.decision = replace(decision, shadowed=stopped)


def state_view(value: Any, reminder: str | None = None) -> GuardView:
    """The typed view of a guard state or channel value (`guard.inspect`, Studio's fields).

    Args:
        value: A guard state or channel value (checked; an unreadable one shows as reset).
        reminder: The rendered reminder for the next model call, when the caller knows it;
            otherwise the state's armed reminder is rendered.

    Returns:
        The view.
    """
    state = settled(value)
    if reminder is None and state.get("reminder"):
        reminder = render_reminder(state["reminder"])
    return GuardView.from_state(state, reminder)
