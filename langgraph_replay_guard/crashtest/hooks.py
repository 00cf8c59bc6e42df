"""The crash test's hooks inside a child process: count body starts, kill at a crash point."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

from langgraph_replay_guard._compat import tool_nodes, wrap_node_tools
from langgraph_replay_guard.integrations.ledger_gate import (
    IDEMPOTENCY_KEY_CONFIG,
    LedgerGate,
    RunTicket,
)
from langgraph_replay_guard.integrations.ledgered_tool import with_invoke

__all__ = ["Hooks", "call_where", "effect", "json_args", "ordered_calls"]

Where = tuple[str, int]
"""A call as the crash test names it: its tool and its ordinal among that tool's calls."""


def ordered_calls(messages: Sequence[Any]) -> list[tuple[str, int, str, dict[str, Any]]]:
    """Every tool call the AIMessages of a thread asked for, in order.

    Returns:
        (tool, ordinal among the calls of that tool (1-based), tool_call_id, args) tuples.
    """
    counts: Counter[str] = Counter()
    found = []
    for message in messages:
        for call in getattr(message, "tool_calls", None) or []:
            counts[call["name"]] += 1
            found.append((call["name"], counts[call["name"]], call.get("id") or "", call["args"]))
    return found


def call_where(messages: Sequence[Any], tool_call_id: str) -> Where | None:
    """The tool and ordinal of the call with this id, or None when no message asked for it."""
    for tool, ordinal, call_id, _ in ordered_calls(messages):
        if call_id == tool_call_id:
            return tool, ordinal
    return None


def json_args(args: Any) -> str:
    """A call's arguments as one canonical JSON text (sorted keys), to count calls by them.

    Values JSON cannot hold (a `ToolRuntime`, injected state) are left out: they are not the
    model's arguments and differ from process to process.
    """
    return json.dumps(_plain(args), sort_keys=True)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if _is_plain(v)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value if _is_plain(v)]
    return value


def _is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, dict):
        return all(isinstance(k, str) for k in value)
    return isinstance(value, (list, tuple))


_installed: Hooks | None = None
"""The hooks of this process (a crash-test phase), or None outside a crash test."""

_running: ContextVar[Where | None] = ContextVar("replay_guard_crashtest_call", default=None)
"""The call whose tool body runs in this context (set where the ledger gate checks it and
where a counted tool starts): an effect is counted for it."""


def effect(tool: str, args: dict[str, Any], key: str | None = None) -> None:
    """Count one side effect of a tool body in the running crash test (no-op outside one).

    The crash test counts body starts of the tools it finds in `ToolNode`s. A tool that runs
    elsewhere (one a middleware swaps in or serves, a sub-agent's tool built inside another
    tool) is seen when its body calls this: the verdict then counts the effects per tool and
    arguments, whatever tool call id they ran under.

    Args:
        tool: The tool's name.
        args: The arguments the effect was made with (the model's arguments).
        key: The idempotency key the effect carried, if any.
    """
    hooks = _installed
    if hooks is not None:
        where = _running.get()
        line = {"kind": "effect", "tool": tool, "ordinal": 0, "args": json_args(args), "key": key}
        hooks.write({**line, "call": list(where) if where is not None else None})


def _die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class Hooks:
    """What one child process installs: the ledger gate's hooks and the counting tools.

    Args:
        phase: `learn`, `crash` or `resume`; written beside each body start.
        starts_file: The file each body start appends a line to (O_APPEND: a SIGKILL right
            after cannot lose it).
        kill: The call and point to die at (`crash` phase), else None.
    """

    def __init__(self, phase: str, starts_file: str, kill: tuple[str, int, str] | None) -> None:
        """Create the hooks; `install` puts them in place."""
        self.phase = phase
        self.starts_file = starts_file
        self.kill = kill
        self.checked = 0
        self.ledgered = 0
        self.refused: set[Where] = set()
        """Calls the callback handler refused (it tells the model instead of raising)."""
        """How many calls the ledger admitted or answered (no store: none)."""
        self.classes: dict[Where, str] = {}
        self.unclassified: set[str] = set()
        """Tools whose calls got `default_policy`: nothing classified them."""
        self.seen_args: dict[Where, dict[str, Any]] = {}
        """The arguments of each call the ledger gate saw (a sub-agent's too)."""
        self.starts: Counter[Where] = Counter()
        self._where: dict[str, Where] = {}
        self._args: dict[str, str] = {}
        self._keys: dict[str, str | None] = {}
        self._arrivals: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._thread: tuple[Any, dict[str, Any]] | None = None

    # -- what the hooks see ------------------------------------------------------------------

    def _locate(self, request: Any) -> Where:
        call = request.tool_call
        call_id = str(call.get("id") or "")
        with self._lock:
            where = self._where.get(call_id)
            if where is None:
                state = request.state
                messages = state.get("messages") if isinstance(state, dict) else None
                messages = messages or getattr(state, "messages", None) or []
                asked = [c for c in ordered_calls(messages) if c[2] == call_id]
                if asked:  # the model's arguments: a middleware may have decorated the call's
                    where, args = (asked[0][0], asked[0][1]), asked[0][3]
                else:  # no message in the state asked for it: order of arrival
                    self._arrivals[call["name"]] += 1
                    where, args = (call["name"], self._arrivals[call["name"]]), call.get("args")
                self._where[call_id] = where
                self._args[call_id] = json_args(args or {})
            return where

    def _point(self, point: str, where: Where) -> None:
        if self.kill is not None and (where[0], where[1], point) == self.kill:
            _die()

    def _started(self, tool: str, input: Any) -> None:
        call_id = str(input.get("id") or "") if isinstance(input, dict) else ""
        given = input.get("args") if isinstance(input, dict) else None
        with self._lock:
            where = self._where.get(call_id)
            if where is None:
                self._arrivals[tool] += 1
                where = (tool, self._arrivals[tool])
            self.starts[where] += 1
            key = self._keys.get(call_id)
            # The model's arguments when a message asked for the call; else the body's input
            # without what ToolNode injected.
            args = self._args.get(call_id) or json_args(given if given is not None else input)
            replay = self.classes.get(where)
        _running.set(where)
        line = {"kind": "body", "tool": where[0], "ordinal": where[1], "args": args, "key": key}
        self.write({**line, "replay": replay})

    def write(self, line: dict[str, Any]) -> None:
        """Append one start or effect to the starts file (one `write`: a SIGKILL keeps it)."""
        fd = os.open(self.starts_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps({"phase": self.phase, **line}) + "\n").encode())
        finally:
            os.close(fd)

    # -- installing --------------------------------------------------------------------------

    def install(self, graph: Any) -> int:
        """Hook the ledger gate (class-wide) and wrap the tools of every tools node of `graph`.

        Returns:
            How many tools nodes were found.
        """
        global _installed
        nodes = tool_nodes(graph)
        for node in nodes:
            wrap_node_tools(node, self._counting)
        self._hook_gate()
        self._hook_callbacks()
        _installed = self
        return len(nodes)

    def watch(self, graph: Any, config: dict[str, Any]) -> None:
        """Name the running thread: the callback handler's calls are located in its messages."""
        self._thread = (graph, config)

    def _locate_call(self, name: str, args: Any, call_id: str | None) -> Where:
        """Where a call the callback handler sees is (no request: the thread's messages)."""
        key = str(call_id or "")
        with self._lock:
            where = self._where.get(key) if key else None
        if where is not None:
            return where
        messages: list[Any] = []
        if key and self._thread is not None:
            graph, config = self._thread
            values = graph.get_state(config).values  # the model's turn is checkpointed
            messages = list((values.get("messages") if isinstance(values, dict) else None) or [])
        asked = [c for c in ordered_calls(messages) if c[2] == key] if key else []
        with self._lock:
            if asked:
                where, given = (asked[0][0], asked[0][1]), asked[0][3]
            else:
                self._arrivals[name] += 1
                where, given = (name, self._arrivals[name]), args
            if key:
                self._where[key] = where
                self._args[key] = json_args(given if isinstance(given, dict) else {})
            return where

    def _hook_callbacks(self) -> None:
        """The crash points of `ReplayGuardCallbackHandler`: its admission and its record."""
        from langgraph_replay_guard.integrations.callbacks.decisions import (
            Admitted,
            CallbackDecider,
            Refusal,
        )

        tool_start, record, failed = (
            CallbackDecider.tool_start,
            CallbackDecider.record,
            CallbackDecider.failed,
        )
        hooks = self
        recording: ContextVar[bool] = ContextVar("replay_guard_crashtest_failed", default=False)

        def hooked_tool_start(decider: CallbackDecider, key: Any, call: Any, **kw: Any) -> Any:
            where = hooks._locate_call(call[0], call[1], call[2])
            hooks._classified(decider.policies, str(call[0]))
            hooks._point("before_claim", where)
            result = tool_start(decider, key, call, **kw)
            if isinstance(result, Admitted):
                facts = result.planned.facts
                with hooks._lock:
                    hooks.ledgered += 1
                    if facts is not None:
                        hooks.classes[where] = str(facts.replay)
                        hooks.seen_args[where] = json.loads(hooks._args.get(str(call[2]), "{}"))
                _running.set(where)
                hooks._point("after_claim", where)
            elif isinstance(result, Refusal):
                with hooks._lock:
                    hooks.refused.add(where)
            return result

        def admitted_where(admitted: Any) -> Where:
            call = admitted.planned.tool_call
            return hooks._locate_call(call["name"], call["args"], call.get("id"))

        def hooked_record(decider: CallbackDecider, admitted: Any, *args: Any) -> None:
            if recording.get():  # inside `failed`, which has its own points
                record(decider, admitted, *args)
                return
            where = admitted_where(admitted)
            hooks._point("after_tool", where)
            record(decider, admitted, *args)
            hooks._point("after_outcome", where)

        def hooked_failed(decider: CallbackDecider, admitted: Any, error: BaseException) -> None:
            where = admitted_where(admitted)
            hooks._point("after_tool", where)
            token = recording.set(True)
            try:
                failed(decider, admitted, error)
            finally:
                recording.reset(token)
            hooks._point("after_outcome", where)

        replacements: dict[str, Callable[..., Any]] = {
            "tool_start": hooked_tool_start,
            "record": hooked_record,
            "failed": hooked_failed,
        }
        for name, function in replacements.items():
            setattr(CallbackDecider, name, function)

    def _counting(self, tool: Any) -> Any:
        invoke, ainvoke = tool.invoke, tool.ainvoke
        name = str(getattr(tool, "name", ""))

        def counted(input: Any, config: Any = None, **kwargs: Any) -> Any:
            self._started(name, input)
            return invoke(input, config, **kwargs)

        async def acounted(input: Any, config: Any = None, **kwargs: Any) -> Any:
            self._started(name, input)
            return await ainvoke(input, config, **kwargs)

        return with_invoke(tool, counted, acounted)

    def _admitted(self, where: Where, facts: Any, result: Any) -> None:
        if result is not None:
            with self._lock:
                self.ledgered += 1
        if not isinstance(result, RunTicket):
            return
        runtime_config = getattr(result.request.runtime, "config", None) or {}
        key = runtime_config.get("configurable", {}).get(IDEMPOTENCY_KEY_CONFIG)
        with self._lock:
            self._keys[str(result.request.tool_call.get("id") or "")] = key
        self._point("after_claim", where)

    def _classified(self, policies: Any, tool: str) -> None:
        """Note a tool that nothing classified (the report lists them)."""
        if policies.policy_source(tool) == "default":
            with self._lock:
                self.unclassified.add(tool)

    def _seen(self, request: Any, facts: Any) -> Where:
        where = self._locate(request)
        _running.set(where)  # the body runs below the gate, in this context
        with self._lock:
            self.checked += 1
            self.classes[where] = str(facts.replay)
            self.seen_args[where] = json.loads(self._args[str(request.tool_call.get("id") or "")])
        self._point("before_claim", where)
        return where

    def _hook_gate(self) -> None:
        check, acheck = LedgerGate.check, LedgerGate.acheck
        finish, afinish = LedgerGate.finish, LedgerGate.afinish
        hooks = self

        def hooked_check(
            gate: LedgerGate, request: Any, facts: Any, ai_id: Any, batch_size: int = 1
        ) -> Any:
            where = hooks._seen(request, facts)
            hooks._classified(gate.policies, facts.tool)
            result = check(gate, request, facts, ai_id, batch_size)
            hooks._admitted(where, facts, result)
            return result

        async def hooked_acheck(
            gate: LedgerGate, request: Any, facts: Any, ai_id: Any, batch_size: int = 1
        ) -> Any:
            where = hooks._seen(request, facts)
            hooks._classified(gate.policies, facts.tool)
            result = await acheck(gate, request, facts, ai_id, batch_size)
            hooks._admitted(where, facts, result)
            return result

        def hooked_finish(gate: LedgerGate, ticket: RunTicket, *args: Any, **kw: Any) -> None:
            where = hooks._locate(ticket.request)
            hooks._point("after_tool", where)
            finish(gate, ticket, *args, **kw)
            hooks._point("after_outcome", where)

        async def hooked_afinish(
            gate: LedgerGate, ticket: RunTicket, *args: Any, **kw: Any
        ) -> None:
            where = hooks._locate(ticket.request)
            hooks._point("after_tool", where)
            await afinish(gate, ticket, *args, **kw)
            hooks._point("after_outcome", where)

        replacements: dict[str, Callable[..., Any]] = {
            "check": hooked_check,
            "acheck": hooked_acheck,
            "finish": hooked_finish,
            "afinish": hooked_afinish,
        }
        for name, function in replacements.items():
            setattr(LedgerGate, name, function)
