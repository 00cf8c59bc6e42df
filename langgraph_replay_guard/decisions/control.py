"""Framework-free, per-turn guard control: `should_skip`, `record_*`, `evaluate`, `reminder`."""

from __future__ import annotations

import reprlib
import threading
from collections.abc import Sequence
from typing import Any

from langgraph_replay_guard.decisions.engine import (
    CallFacts,
    Decision,
    Verdict,
    call_facts,
    decide,
    fold_settings,
    loop_error,
    make_event,
    raises_on_abort,
    render_reminder,
    state_view,
)
from langgraph_replay_guard.decisions.keys import canonical_json
from langgraph_replay_guard.decisions.state import GuardView, Outcome, fold_events, new_state
from langgraph_replay_guard.policy.config import GuardConfig
from langgraph_replay_guard.policy.resolver import PolicyResolver, resolver_of

__all__ = ["GuardControl", "result_text"]


def _bounded_repr() -> reprlib.Repr:
    # A result canonical JSON refuses (not JSON-like, too deep, too big, cyclic) is written
    # with these bounds: a plain `repr` of a list nested 10,000 deep raised RecursionError, and
    # of a list holding itself twice per level (`x = [x, x]`, 30 deep) never ended.
    bounded = reprlib.Repr()
    bounded.maxlevel = 8
    bounded.maxtuple = bounded.maxlist = bounded.maxarray = bounded.maxdeque = 200
    bounded.maxdict = bounded.maxset = bounded.maxfrozenset = 200
    bounded.maxstring = bounded.maxother = bounded.maxlong = 10_000
    return bounded


_BOUNDED = _bounded_repr()


def _repr_text(value: Any) -> str:
    """`repr(value)` within `_BOUNDED`'s bounds; its type's name when even that fails."""
    try:
        return _BOUNDED.repr(value)
    except (ValueError, RecursionError, MemoryError):  # an int of 4,300+ digits, say
        return f"<{type(value).__name__}>"


def result_text(result: Any) -> str | None:
    """Text of a tool result for hashing and previews (JSON for structured results)."""
    if result is None or isinstance(result, str):
        return result
    try:
        return canonical_json(result, root="result")
    except TypeError:
        return _repr_text(result)


def error_text(error: Any) -> str:
    """Text of a failure: the string, an exception's message, or a bounded repr of the rest."""
    if isinstance(error, str):
        return error
    if isinstance(error, BaseException):
        message = type(error).__str__
        args = error.args
        if message is KeyError.__str__ and len(args) == 1:
            # `KeyError(key)` prints `repr(key)`, a string key too: bounded the same way.
            return _repr_text(args[0])
        if message is BaseException.__str__ or message is KeyError.__str__:
            # The default message, built as `str()` builds it but with values printed bounded:
            # `ValueError(value)` prints `value` whole.
            if len(args) == 1:
                return args[0] if isinstance(args[0], str) else _repr_text(args[0])
            return _repr_text(args) if args else ""
        try:
            return str(error)
        except (ValueError, RecursionError, MemoryError):
            pass  # a message of its own, built from a value too deep or too big to print
    return _repr_text(error)


def _tool_names(tools: Sequence[str] | None) -> tuple[str, ...] | None:
    """The tool names, checked, in order and without repeats; None when not given."""
    if tools is None:
        return None
    if isinstance(tools, str):
        msg = f"tools must be a sequence of tool names, not a string ({tools!r})"
        raise TypeError(msg)
    names = tuple(dict.fromkeys(tools))
    bad = [name for name in names if not isinstance(name, str)]
    if bad:
        msg = f"tools must hold tool names (strings), got {bad[0]!r}"
        raise TypeError(msg)
    return names


class GuardControl:
    """The guard for one turn, without any framework.

    Create one per user turn with `guard.control()`. `evaluate` and `should_skip` only
    decide; the `record_*` methods change the state. Safe to share between the threads
    that run parallel tool calls: every method holds an internal lock.

    Example:
        ```python
        ctl = guard.control()
        skip, reason = ctl.should_skip("web_search", {"q": "capital of France"})
        if not skip:
            ctl.record_success("web_search", {"q": "capital of France"}, result="Paris")
        ```
    """

    def __init__(
        self, config: GuardConfig | PolicyResolver, *, tools: Sequence[str] | None = None
    ) -> None:
        """Create a control with an empty state.

        Args:
            config: Guard configuration, or a guard's `PolicyResolver` (its configuration
                and the classes it learned from MCP annotations: `guard.control()`).
            tools: The names of the tools that exist. A call to any other name is a tool
                that does not exist (reason `"unknown_tool"`: never to be run, one loop per
                turn whatever the name). None (the default): every name is taken as a tool.

        Raises:
            TypeError: If `tools` is a string or holds something that is not a string.
        """
        self._policies = resolver_of(config)
        self._config = self._policies.config
        self._tools = _tool_names(tools)
        self._settings = fold_settings(self._config)
        self._state = new_state()
        self._seen: set[str] = set()
        self._lock = threading.RLock()

    def evaluate(self, name: str, args: Any) -> Decision:
        """Decide what to do with a call, without changing anything.

        Args:
            name: Tool name.
            args: Tool arguments.

        Returns:
            The decision.

        Raises:
            InvalidArgumentsError: If the arguments cannot be hashed.
        """
        facts = self._facts(name, args)
        with self._lock:
            return decide(self._state, facts, self._config)

    def should_skip(self, name: str, args: Any) -> tuple[bool, str | None]:
        """Whether a call should not be executed, and why.

        Args:
            name: Tool name.
            args: Tool arguments.

        Returns:
            `(skip, reason)`: `(False, None)` to run the tool; otherwise `True` and the
            reason (`"duplicate"`, `"repeat_limit"`, `"same_result"`, `"cycle"`,
            `"same_failure"`, `"unknown_tool"` (with `tools=`), `"stopped"`). Record a
            skipped call with `record_denied`.

        Raises:
            LoopAbortedError: When the decision is an abort and `exit_behavior="error"`.
            InvalidArgumentsError: If the arguments cannot be hashed.
        """
        decision = self.evaluate(name, args)
        if decision.verdict is Verdict.ABORT and raises_on_abort(self._config):
            raise loop_error(decision)
        return (not decision.executes, decision.reason)

    def record_success(self, name: str, args: Any, result: Any = None) -> None:
        """Record that a call ran and succeeded.

        Args:
            name: Tool name.
            args: Tool arguments.
            result: What the tool returned (used for result-diff and previews).
        """
        self._record(name, args, "success", result=result_text(result))

    def record_failure(self, name: str, args: Any, error: Any = None) -> None:
        """Record that a call ran and failed (a later identical call is a retry).

        Args:
            name: Tool name.
            args: Tool arguments.
            error: The error or its text, if known.
        """
        text = None if error is None else error_text(error)
        self._record(name, args, "failure", result=text)

    def record_timeout(self, name: str, args: Any) -> None:
        """Record that a call timed out (a later identical call is a retry).

        Args:
            name: Tool name.
            args: Tool arguments.
        """
        self._record(name, args, "timeout")

    def record_denied(self, name: str, args: Any, reason: str | Decision | None = None) -> None:
        """Record a call that was not executed (denied, short-circuited or aborted).

        It counts as an attempt and arms the reminder.

        Args:
            name: Tool name.
            args: Tool arguments.
            reason: The decision, or its reason; when omitted the current decision is used.
        """
        facts = self._facts(name, args)
        with self._lock:
            if isinstance(reason, Decision):
                decision = reason
            else:
                decision = decide(self._state, facts, self._config)
            why = reason if isinstance(reason, str) else decision.reason
            aborts = decision.verdict is Verdict.ABORT and why == decision.reason
            self._fold(facts, "denied", reason=why or "denied", abort=aborts)

    def _record(self, name: str, args: Any, outcome: Outcome, *, result: str | None = None) -> None:
        facts = self._facts(name, args)
        if self._config.mode != "shadow":
            self._fold(facts, outcome, result=result)
            return
        with self._lock:
            # Shadow mode: the call ran; count what enforcing would have done with it.
            shadowed = decide(self._state, facts, self._config).shadowed
            reason = shadowed.reason if shadowed is not None else None
            aborts = shadowed is not None and shadowed.verdict is Verdict.ABORT
            self._fold(facts, outcome, result=result, reason=reason, abort=aborts)

    def _facts(self, name: str, args: Any) -> CallFacts:
        return call_facts(self._policies, name, args, tools=self._tools)

    def _fold(
        self,
        facts: CallFacts,
        outcome: Outcome,
        *,
        result: str | None = None,
        reason: str | None = None,
        abort: bool = False,
    ) -> None:
        """Record one call whose facts are already known (the key is computed once)."""
        event = make_event(
            facts,
            outcome,
            result=result,
            reason=reason,
            abort=abort,
        )
        with self._lock:
            fold_events(self._state, [event], self._settings)
            self._seen.add(facts.key)

    def history_size(self) -> int:
        """Number of distinct calls (tool and canonical arguments) recorded this turn."""
        with self._lock:
            return len(self._seen)

    def reminder(self) -> str | None:
        """Return the pending loop reminder and clear it (it is shown once).

        Returns:
            Text for the next system prompt, or None when no layer tripped since the last
            read.
        """
        with self._lock:
            pending = self._state["reminder"]
            self._state["reminder"] = None
        return render_reminder(pending) if pending else None

    def inspect(self) -> GuardView:
        """Return a read-only view of the control's state (the reminder is not cleared)."""
        with self._lock:
            return state_view(self._state)
