"""The guard channel format: one pass that checks every field and entry, trimming oversize maps."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import islice
from operator import itemgetter
from typing import Any, NamedTuple, NoReturn, NotRequired, TypedDict

__all__ = [
    "DEFAULT_CYCLE_PERIOD",
    "DEFAULT_WINDOW",
    "FORMAT_VERSION",
    "READABLE_VERSIONS",
    "BlockedCall",
    "CallCounter",
    "CallEvent",
    "Event",
    "ExecutedCall",
    "FailureStreak",
    "FoldSettings",
    "InvalidStateError",
    "ResultMemo",
    "TailItem",
    "decode_cfg",
    "decode_events",
    "decode_fields",
    "migrate",
    "trim_map",
]

FORMAT_VERSION = 2
"""Version of the channel format the guard writes (`"v"`)."""

READABLE_VERSIONS = (1, 2)
"""Versions a stored value may be in: an older one is migrated (`migrate`), not reset."""

V1_RENAMED = {"window": "recent_calls", "counts": "counters", "stats": "totals"}
"""Keys version 2 renamed (version 1 name -> version 2 name); every other key kept its name."""

DEFAULT_WINDOW = 5
"""Dedup window when the stored settings do not say (`GuardConfig.history_window`)."""

DEFAULT_CYCLE_PERIOD = 4
"""Longest cycle when the stored settings do not say (`GuardConfig.max_cycle_period`)."""

# The bounds `GuardConfig` enforces on the settings that travel with each write.
_MAX_WINDOW = 10_000
_MAX_CYCLE_PERIOD = 32

_OUTCOMES = frozenset({"success", "failure", "timeout", "denied", "answered"})
_EVENT_KEYS = frozenset({"b", "i", "t", "k", "n", "a", "c", "v", "s", "o", "h", "p", "r", "x"})
_ALL_EVENT_KEYS = _EVENT_KEYS | {"m", "f", "d", "g"}  # `m`, `f`, `d` and `g` are optional
_CYCLE_KEYS = frozenset({"keys", "tools", "pos", "strikes"})
_REMINDER_KEYS = frozenset({"reason", "tool", "args", "count", "batch"})
_STOP_KEYS = frozenset({"reason", "tool", "count", "args"})
_TOTALS_KEYS = frozenset({"calls", "blocked", "aborts"})
_PENDING_KEYS = frozenset({"batch", "events"})
_RESET_KEYS = frozenset({"reason", "at"})
_CFG_CHOICES: dict[str, frozenset[str]] = {
    "scope": frozenset({"turn", "thread"}),
    "rr": frozenset({"progress", "turn"}),
}
_CFG_FLAGS = frozenset({"rd", "cy", "rm"})
_CFG_NUMBERS = {"w": (1, _MAX_WINDOW), "cp": (2, _MAX_CYCLE_PERIOD)}
_SEQUENCES = (list, tuple)  # a tuple never comes from JSON, but reads the same
_SHOWN_CHARS = 40
_ABSENT = object()


class InvalidStateError(ValueError):
    """A channel value, or a write to it, that is not in the guard state's format.

    Args:
        path: Where in the value, such as `pending.events[0].i`.
        expected: What belongs there.
        got: What is there.
    """

    def __init__(self, path: str, expected: str, got: Any) -> None:
        """Describe the problem."""
        shown = repr(got)
        if len(shown) > _SHOWN_CHARS:
            shown = shown[: _SHOWN_CHARS - 3] + "..."
        super().__init__(f"{path} should be {expected}, not {shown}")
        self.path = path


# -- named types of the stored entries (the channel stores them as plain JSON) ----------------


class CallCounter(NamedTuple):
    """`counters[key]`, stored as `[attempts, tool]`: attempts of one distinct call."""

    attempts: int
    tool: str


class ResultMemo(NamedTuple):
    """`results[key]`, stored as `[result_hash, epoch, in_a_row, preview]` (`, call_id`).

    The last result of one distinct call, the epoch after it, how many identical results it
    gave in a row, and a preview for the model. `call_id` (a fifth entry, only when set) is
    the tool_call_id of the call that gave it when that call ran under other arguments than
    the model's message holds (a middleware changed one): the model's messages cannot name
    that call by its key, so a duplicate finds the earlier answer by this id.
    """

    result_hash: str | None
    epoch: int
    in_a_row: int
    preview: str | None
    call_id: str | None = None


class ExecutedCall(NamedTuple):
    """An entry of `recent_calls` (the dedup window), stored as `[key, tool, outcome, epoch]`."""

    key: str
    tool: str
    outcome: str
    epoch: int


class TailItem(NamedTuple):
    """An entry of `tail` (cycle detection), stored as `[key, result, tool]`."""

    key: str
    result: str
    tool: str


class FailureStreak(NamedTuple):
    """`failures[tool]`, stored as `[signature, in_a_row]`: the tool's current failure streak.

    The signature of its last failure (`failures.failure_signature`) and how many calls of
    the tool in a row ended in it (a call the layer blocked counts too).
    """

    signature: str
    in_a_row: int


class BlockedCall(NamedTuple):
    """An entry of `blocked`, stored as `[tool, reason, attempt]`."""

    tool: str
    reason: str
    attempt: int


class Event(TypedDict):
    """One recorded call as it is written into the channel (see `CallEvent` for the names).

    Keys are short because events sit in checkpoints; code reads them as a `CallEvent`.
    """

    b: str | None
    i: int
    t: str | None
    k: str
    n: str
    a: str
    c: str
    v: bool
    s: bool
    o: str
    h: str | None
    p: str | None
    r: str | None
    x: bool
    m: NotRequired[int]
    f: NotRequired[list[Any]]
    d: NotRequired[str]
    g: NotRequired[bool]


@dataclass(slots=True)
class CallEvent:
    """One recorded call, with names (its stored form is an `Event`).

    Not frozen, though nothing changes one: every recorded call builds one and every fold
    reads one, and a frozen dataclass is built several times slower.

    Attributes:
        batch: Id of the AIMessage that asked for the call (None: apply at once).
        index: Position of the call in its batch.
        turn: Id of the user message that opened the turn.
        key: The call key.
        tool: The tool name.
        args: A short, sanitized argument summary (for reminders; never tool output).
        replay: The call's replay class.
        volatile: Whether it is a volatile read.
        short_circuits: Whether result-diff may short-circuit this tool.
        outcome: `"success"`, `"failure"`, `"timeout"` or `"denied"`.
        result_hash: Hash of the result (a success) or of the error text (a failure).
        preview: Result preview (goes to the model in ToolMessages only).
        reason: The decision's reason for a denied call.
        abort: Whether the denial stopped the run.
        batch_size: How many calls the batch has; once every position reported, it is folded.
        failure: For a call that failed, `(signature, limit)`: its failure signature and the
            tool's same-failure threshold (stored as `f`; absent on a success, on a denied
            call and when the layer is off for the tool).
        call_id: The tool_call_id of a call that ran under other arguments than the model
            asked (stored as `d`, only then; see `ResultMemo.call_id`).
        background: The call starts work that outlives it (stored as `g`, only then; see
            `CallClass.background`).
    """

    batch: str | None
    index: int
    turn: str | None
    key: str
    tool: str
    args: str
    replay: str
    volatile: bool
    short_circuits: bool
    outcome: str
    result_hash: str | None
    preview: str | None
    reason: str | None
    abort: bool
    batch_size: int | None = None
    failure: tuple[str, int] | None = None
    call_id: str | None = None
    background: bool = False

    def encode(self) -> Event:
        """The stored form."""
        event: Event = {
            "b": self.batch,
            "i": self.index,
            "t": self.turn,
            "k": self.key,
            "n": self.tool,
            "a": self.args,
            "c": self.replay,
            "v": self.volatile,
            "s": self.short_circuits,
            "o": self.outcome,
            "h": self.result_hash,
            "p": self.preview,
            "r": self.reason,
            "x": self.abort,
        }
        if self.batch_size is not None:
            event["m"] = self.batch_size
        if self.failure is not None:
            event["f"] = [*self.failure]
        if self.call_id is not None:
            event["d"] = self.call_id
        if self.background:
            event["g"] = True
        return event

    @classmethod
    def decode(cls, event: Mapping[str, Any]) -> CallEvent:
        """The named form of a stored event already checked by `decode_events`."""
        b, i, t, k, n, a, c, v, s, o, h, p, r, x = _EVENT_FIELDS(event)
        f = event.get("f")
        failure = (f[0], f[1]) if f is not None else None
        return cls(
            b,
            i,
            t,
            k,
            n,
            a,
            c,
            v,
            s,
            o,
            h,
            p,
            r,
            x,
            event.get("m"),
            failure,
            event.get("d"),
            event.get("g", False),
        )


@dataclass(frozen=True, slots=True)
class FoldSettings:
    """The settings that shape the stored state; they travel with each write as `cfg`.

    The reducer is a module-level function with no access to the guard, so these few
    settings are written with the events, under short keys (`w`, `cp`, `scope`, `rr`, `rd`,
    `cy`, `rm`).

    Attributes:
        window: `GuardConfig.history_window` (`w`).
        cycle_period: `GuardConfig.max_cycle_period` (`cp`).
        scope: `GuardConfig.scope`.
        repeat_reset: `GuardConfig.repeat_reset` (`rr`).
        result_diff: `GuardConfig.result_diff` (`rd`).
        cycles: `GuardConfig.cycle_detection` (`cy`).
        reminders: `GuardConfig.reminder` (`rm`).
    """

    window: int = DEFAULT_WINDOW
    cycle_period: int = DEFAULT_CYCLE_PERIOD
    scope: str = "turn"
    repeat_reset: str = "progress"
    result_diff: bool = True
    cycles: bool = True
    reminders: bool = True

    def encode(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "w": self.window,
            "cp": self.cycle_period,
            "scope": self.scope,
            "rr": self.repeat_reset,
            "rd": self.result_diff,
            "cy": self.cycles,
            "rm": self.reminders,
        }

    @classmethod
    def decode(cls, cfg: Mapping[str, Any]) -> FoldSettings:
        """The named form of stored settings already checked by `decode_cfg` (absent: default)."""
        return cls(
            cfg.get("w", DEFAULT_WINDOW),
            cfg.get("cp", DEFAULT_CYCLE_PERIOD),
            cfg.get("scope", "turn"),
            cfg.get("rr", "progress"),
            cfg.get("rd", True),
            cfg.get("cy", True),
            cfg.get("rm", True),
        )


def _fail(path: str, expected: str, got: Any) -> NoReturn:
    raise InvalidStateError(path, expected, got)


def _optional_text(value: Any, path: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    _fail(path, "a string or null", value)


def _natural(value: Any, path: str) -> int:
    # `type(...) is int` also refuses booleans, which JSON keeps apart from numbers.
    if type(value) is int and value >= 0:
        return value
    _fail(path, "a whole number >= 0", value)


def _object(
    value: Any, keys: frozenset[str], path: str, texts: tuple[str, ...] = ()
) -> dict[str, Any]:
    """An object with exactly `keys`, of which `texts` are strings or null."""
    if type(value) is not dict or value.keys() != keys:
        _fail(path, f"an object with exactly the keys {', '.join(sorted(keys))}", value)
    for key in texts:
        _optional_text(value[key], f"{path}.{key}")
    return value


def trim_map(mapping: dict[str, Any], cap: int) -> dict[str, Any]:
    """The last `cap` entries of a map (the most recently used), in order.

    Reads only those entries (a reversed dict view starts at the end), so trimming a huge
    map costs the size of the cap, not of the map.

    Args:
        mapping: A map in least-recently-used-first order.
        cap: Most entries kept.

    Returns:
        A new map.
    """
    if len(mapping) <= cap:
        return dict(mapping)
    kept = list(islice(reversed(mapping.items()), cap))
    kept.reverse()
    return dict(kept)


def _tail_list(value: Any, cap: int, path: str) -> list[Any]:
    if type(value) is not list:
        _fail(path, "a list", value)
    return value[-cap:] if len(value) > cap else list(value)


def decode_cfg(value: Any, path: str = "cfg") -> dict[str, Any]:
    """Check the fold settings (`w`, `cp`, `scope`, `rr`, `rd`, `cy`, `rm`; any may be absent).

    Args:
        value: The settings.
        path: Where they are, for the error message.

    Returns:
        A copy.

    Raises:
        InvalidStateError: A setting is unknown or out of its range.
    """
    if type(value) is not dict:
        _fail(path, "an object", value)
    for key, item in value.items():
        if key in _CFG_FLAGS:
            if type(item) is not bool:
                _fail(f"{path}.{key}", "true or false", item)
        elif key in _CFG_NUMBERS:
            low, high = _CFG_NUMBERS[key]
            if type(item) is not int or not low <= item <= high:
                _fail(f"{path}.{key}", f"a whole number from {low} to {high}", item)
        elif key in _CFG_CHOICES:
            if not isinstance(item, str) or item not in _CFG_CHOICES[key]:
                _fail(f"{path}.{key}", " or ".join(sorted(_CFG_CHOICES[key])), item)
        else:
            _fail(f"{path}.{key}", "absent (not a guard setting)", item)
    return dict(value)


def decode_events(value: Any, path: str) -> list[Any]:
    """Check a list of recorded calls (`Event`s).

    Args:
        value: The events.
        path: Where they are, for the error message.

    Returns:
        A new list holding the same event objects.

    Raises:
        InvalidStateError: The list or one of its events is malformed.
    """
    if type(value) not in _SEQUENCES:
        _fail(path, "a list of recorded calls", value)
    for index, event in enumerate(value):
        if not _event_ok(event):
            _event_problem(event, f"{path}[{index}]")
    return list(value)


_EVENT_FIELDS = itemgetter("b", "i", "t", "k", "n", "a", "c", "v", "s", "o", "h", "p", "r", "x")


def _event_ok(event: Any) -> bool:
    """Whether an event is well formed (the fast check; `_event_problem` says what is not)."""
    if type(event) is not dict:
        return False
    keys = event.keys()
    if keys != _EVENT_KEYS and not (_EVENT_KEYS < keys <= _ALL_EVENT_KEYS):
        return False
    b, i, t, k, n, a, c, v, s, o, h, p, r, x = _EVENT_FIELDS(event)
    size = event.get("m", _ABSENT)
    failure = event.get("f", _ABSENT)
    call_id = event.get("d", _ABSENT)
    background = event.get("g", _ABSENT)
    return (
        type(i) is int
        and i >= 0
        and isinstance(o, str)
        and o in _OUTCOMES
        and (size is _ABSENT or (type(size) is int and size >= 0))
        and (failure is _ABSENT or _failure_ok(failure))
        and (call_id is _ABSENT or isinstance(call_id, str))
        and (background is _ABSENT or background is True)
        and isinstance(k, str)
        and isinstance(n, str)
        and isinstance(a, str)
        and isinstance(c, str)
        and type(v) is bool
        and type(s) is bool
        and type(x) is bool
        and (b is None or isinstance(b, str))
        and (t is None or isinstance(t, str))
        and (h is None or isinstance(h, str))
        and (p is None or isinstance(p, str))
        and (r is None or isinstance(r, str))
    )


def _failure_ok(failure: Any) -> bool:
    """`f`: `[signature, limit]`, a string and a whole number >= 1."""
    return (
        type(failure) is list
        and len(failure) == 2
        and isinstance(failure[0], str)
        and type(failure[1]) is int
        and failure[1] >= 1
    )


def _event_problem(event: Any, path: str) -> NoReturn:
    if type(event) is not dict or not (_EVENT_KEYS <= event.keys() <= _ALL_EVENT_KEYS):
        _fail(path, "a recorded call (keys b i t k n a c v s o h p r x, optional m f d g)", event)
    for key in ("k", "n", "a", "c"):
        if not isinstance(event[key], str):
            _fail(f"{path}.{key}", "a string", event[key])
    for key in ("b", "t", "h", "p", "r"):
        _optional_text(event[key], f"{path}.{key}")
    for key in ("v", "s", "x"):
        if type(event[key]) is not bool:
            _fail(f"{path}.{key}", "true or false", event[key])
    _natural(event["i"], f"{path}.i")
    if not isinstance(event["o"], str) or event["o"] not in _OUTCOMES:
        _fail(f"{path}.o", "success, failure, timeout or denied", event["o"])
    if "f" in event and not _failure_ok(event["f"]):
        _fail(f"{path}.f", "[failure signature, limit >= 1]", event["f"])
    if "d" in event and not isinstance(event["d"], str):
        _fail(f"{path}.d", "a tool_call_id (a string)", event["d"])
    if "g" in event and event["g"] is not True:
        _fail(f"{path}.g", "true (a call that starts background work), or absent", event["g"])
    _fail(f"{path}.m", "the batch size (a whole number >= 0)", event.get("m"))


# The entry checks below are a fast loop that stops at the first bad entry, then says what
# is wrong with it (every value is checked on each load, so the common, valid case must stay
# cheap: one call of the entry's test per entry).


@dataclass(frozen=True, slots=True)
class _Entries:
    """A list or map field whose entries are fixed-length lists of typed fields."""

    name: str
    shape: str  # what an entry is, for the error message
    arity: int
    ok: Callable[..., bool]  # (the entry's key or position, *its fields) -> well formed
    optional: int = 0  # trailing fields an entry may lack (absent in earlier releases)


def _check_entries(entries: _Entries, items: Iterable[tuple[Any, Any]]) -> None:
    name, shape, arity, ok = entries.name, entries.shape, entries.arity, entries.ok
    least = arity - entries.optional
    for where, entry in items:
        if not (type(entry) in _SEQUENCES and least <= len(entry) <= arity and ok(where, *entry)):
            # `!r` of a list position is the number itself: `tail[3]`, `counters['k']`.
            _fail(f"{name}[{where!r}]", shape, entry)


def _entry_list(value: Any, cap: int, entries: _Entries) -> list[Any]:
    """A list field: its last `cap` entries, checked."""
    kept = _tail_list(value, cap, entries.name)
    _check_entries(entries, enumerate(kept))
    return kept


def _entry_map(value: Any, cap: int, entries: _Entries) -> dict[str, Any]:
    """A map field: its `cap` most recent entries, checked."""
    if type(value) is not dict:
        _fail(entries.name, "an object", value)
    kept = trim_map(value, cap)
    _check_entries(entries, kept.items())
    return kept


# Each entry test takes the entry's key (a map's) or position (a list's), then its fields.


def _recent_call_ok(_: int, key: Any, tool: Any, outcome: Any, epoch: Any) -> bool:
    return (
        isinstance(key, str)
        and isinstance(tool, str)
        and isinstance(outcome, str)
        and (type(epoch) is int)
    )


def _counter_ok(key: Any, count: Any, tool: Any) -> bool:
    return type(count) is int and isinstance(tool, str) and isinstance(key, str)


def _result_ok(
    key: Any, digest: Any, epoch: Any, in_a_row: Any, preview: Any, call_id: Any = None
) -> bool:
    return (
        type(epoch) is int
        and type(in_a_row) is int
        and (digest is None or isinstance(digest, str))
        and (preview is None or isinstance(preview, str))
        and isinstance(key, str)
        and (call_id is None or isinstance(call_id, str))
    )


def _tail_item_ok(_: int, key: Any, digest: Any, tool: Any) -> bool:
    return isinstance(key, str) and isinstance(digest, str) and isinstance(tool, str)


def _blocked_call_ok(_: int, tool: Any, reason: Any, count: Any) -> bool:
    return isinstance(tool, str) and isinstance(reason, str) and type(count) is int


def _failure_streak_ok(_: Any, signature: Any, in_a_row: Any) -> bool:
    return isinstance(signature, str) and type(in_a_row) is int and in_a_row >= 1


_RECENT_CALLS = _Entries("recent_calls", "[key, tool, outcome, epoch]", 4, _recent_call_ok)
_COUNTERS = _Entries("counters", "[count, tool]", 2, _counter_ok)
# A fifth entry, the tool_call_id of a call that ran changed (`ResultMemo.call_id`), is
# optional: absent in values of earlier releases and for calls that ran as asked.
_RESULTS = _Entries(
    "results", "[result hash, epoch, same in a row, preview(, call id)]", 5, _result_ok, 1
)
_TAIL = _Entries("tail", "[key, result hash, tool]", 3, _tail_item_ok)
_BLOCKED = _Entries("blocked", "[tool, reason, count]", 3, _blocked_call_ok)
# tool -> `[signature, in_a_row]`; absent in values of earlier releases.
_FAILURES = _Entries("failures", "[failure signature, same in a row]", 2, _failure_streak_ok)


def _cycle(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    cycle = _object(value, _CYCLE_KEYS, "cycle")
    keys, tools = cycle["keys"], cycle["tools"]
    if type(keys) is not list or not 2 <= len(keys) <= _MAX_CYCLE_PERIOD:
        _fail("cycle.keys", f"a list of 2 to {_MAX_CYCLE_PERIOD} call keys", keys)
    if type(tools) is not list or len(tools) != len(keys):
        _fail("cycle.tools", "a list of tool names as long as cycle.keys", tools)
    for index, (key, tool) in enumerate(zip(keys, tools, strict=True)):
        if not isinstance(key, str):
            _fail(f"cycle.keys[{index}]", "a string", key)
        if not isinstance(tool, str):
            _fail(f"cycle.tools[{index}]", "a string", tool)
    pos = _natural(cycle["pos"], "cycle.pos")
    if pos >= len(keys):
        _fail("cycle.pos", f"a position in cycle.keys (below {len(keys)})", pos)
    _natural(cycle["strikes"], "cycle.strikes")
    return cycle


def _loop_note(value: Any, keys: frozenset[str], path: str) -> dict[str, Any]:
    """A reminder or a stop: `reason`, `tool` and `args` strings and a `count`."""
    note = _object(value, keys, path)
    for key in ("reason", "tool", "args"):
        if not isinstance(note[key], str):
            _fail(f"{path}.{key}", "a string", note[key])
    _natural(note["count"], f"{path}.count")
    return note


def _reminder(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    reminder = _loop_note(value, _REMINDER_KEYS, "reminder")
    _optional_text(reminder["batch"], "reminder.batch")
    return reminder


def _stop(value: Any) -> dict[str, Any] | None:
    return None if value is None else _loop_note(value, _STOP_KEYS, "stop")


def _totals(value: Any) -> dict[str, Any]:
    totals = _object(value, _TOTALS_KEYS, "totals")
    for key, count in totals.items():
        if type(count) is not int or count < 0:
            _fail(f"totals.{key}", "a whole number >= 0", count)
    return dict(totals)  # the fold counts in it: a copy


def _pending(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    pending = _object(value, _PENDING_KEYS, "pending", texts=("batch",))
    events = pending["events"]
    if type(events) is not list or not events:
        _fail("pending.events", "a non-empty list of recorded calls", events)
    for index, event in enumerate(events):
        if not _event_ok(event):
            _event_problem(event, f"pending.events[{index}]")
    return pending


def _reset_info(value: Any) -> dict[str, Any] | None:
    return None if value is None else _object(value, _RESET_KEYS, "reset", ("reason", "at"))


_MARK_KEYS = frozenset({"k", "n", "a", "e"})
MAX_UNKNOWN_MARKS = 32
"""Most marks a thread state of an earlier release held (the callback handler now keeps each
mark in a store item of its own, uncapped, and only reads and clears these)."""


def _unknown_marks(value: Any) -> list[dict[str, Any]] | None:
    """The callback handler's unknown-outcome marks: `{"k", "n", "a", "e"}` strings each."""
    if value is None:
        return None
    if type(value) is not list:
        _fail("unknown", "a list of unknown-outcome marks", value)
    marks = value[-MAX_UNKNOWN_MARKS:]
    for index, mark in enumerate(marks):
        _object(mark, _MARK_KEYS, f"unknown[{index}]")
        for key in sorted(_MARK_KEYS):
            if type(mark[key]) is not str:
                _fail(f"unknown[{index}].{key}", "a string", mark[key])
    return list(marks)


def _delivered(value: Any, cap: int) -> list[str]:
    """`delivered`: AIMessage ids (strings); absent in values of earlier releases."""
    if value is None:
        return []
    if type(value) is not list:
        _fail("delivered", "a list of AIMessage ids", value)
    kept = value[-cap:]
    for index, item in enumerate(kept):
        if type(item) is not str:
            _fail(f"delivered[{index}]", "a string", item)
    return list(kept)


MAX_SHADOW_REASONS = 16
"""Most reasons `shadow` counts (the engine has fewer; a hostile value cannot grow it)."""


def _shadow(value: Any) -> dict[str, list[int]]:
    """`shadow`: reason -> [calls enforcing would have blocked, runs it would have stopped].

    Absent in values of earlier releases and of guards that never ran in shadow mode.
    """
    if value is None:
        return {}
    if type(value) is not dict:
        _fail("shadow", "an object of reason -> [blocked, stopped]", value)
    for reason, counts in list(value.items())[:MAX_SHADOW_REASONS]:
        if (
            type(counts) is not list
            or len(counts) != 2
            or any(type(n) is not int or n < 0 for n in counts)
        ):
            _fail(f"shadow.{reason}", "[blocked, stopped], whole numbers >= 0", counts)
    return {reason: list(counts) for reason, counts in list(value.items())[:MAX_SHADOW_REASONS]}


def migrate(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A stored value in the current format: an older value is migrated, nothing lost.

    Version 1 (written by earlier releases) stored the dedup window as `window`, the repeat
    counters as `counts` and the thread totals as `stats`; version 2 names them as
    `GuardView` does (`recent_calls`, `counters`, `totals`), with the same contents. A
    thread checkpointed by an older release so resumes with its counters. The result is
    not checked: `decode_fields` checks it like any current value.

    Args:
        value: A channel value whose `v` is one of `READABLE_VERSIONS`.

    Returns:
        `value` itself when it is current, else a renamed copy (entries shared).
    """
    if value.get("v") != 1:
        return value
    renamed = set(V1_RENAMED.values())
    migrated = {V1_RENAMED.get(k, k): item for k, item in value.items() if k not in renamed}
    migrated["v"] = FORMAT_VERSION
    return migrated


def _flag(value: Any, path: str) -> bool:
    """A true/false field a value of an earlier release may lack (then false)."""
    if value is None:
        return False
    if type(value) is not bool:
        _fail(path, "true or false", value)
    return value


def decode_fields(
    value: Mapping[str, Any],
    *,
    max_keys: int,
    max_results: int,
    max_blocked: int,
    max_failures: int,
    max_delivered: int = 16,
) -> dict[str, Any]:
    """Check every field of a channel value in the current format and return its copy.

    The copy holds new top-level lists and maps (the fold appends to them) but shares the
    entries, which nothing mutates. Maps and lists above their cap keep their most recent
    entries (the fold would evict the others next); only kept entries are checked. Fields a
    value of an earlier release may lack (`turn`, `cycle`, `reminder`, `stop`, `pending`,
    `last_batch`, `notice`, `reset`, `unknown`) are null when absent (`failures`, the
    same-failure streaks, and `delivered`: empty); unknown fields are dropped. `unknown`
    holds the callback handler's unknown-outcome marks.

    Args:
        value: A mapping in the current format version (see `migrate`).
        max_keys: Cap of `counters`.
        max_results: Cap of `results`.
        max_blocked: Cap of `blocked`.
        max_failures: Cap of `failures` (tools with a failure streak).
        max_delivered: Cap of `delivered` (batches whose side effects were answered).

    Returns:
        The checked copy.

    Raises:
        InvalidStateError: The first malformed field or entry.
    """
    cfg = decode_cfg(value.get("cfg"))
    period = cfg.get("cp", DEFAULT_CYCLE_PERIOD)
    get = value.get
    failures = get("failures")  # absent in values of earlier releases
    return {
        "v": FORMAT_VERSION,
        "turn": _optional_text(get("turn"), "turn"),
        "epoch": _natural(get("epoch"), "epoch"),
        "calls": _natural(get("calls"), "calls"),
        "recent_calls": _entry_list(
            get("recent_calls"), cfg.get("w", DEFAULT_WINDOW), _RECENT_CALLS
        ),
        "counters": _entry_map(get("counters"), max_keys, _COUNTERS),
        "results": _entry_map(get("results"), max_results, _RESULTS),
        "tail": _entry_list(get("tail"), 2 * period, _TAIL),
        "cycle": _cycle(get("cycle")),
        "failures": {} if failures is None else _entry_map(failures, max_failures, _FAILURES),
        "reminder": _reminder(get("reminder")),
        "stop": _stop(get("stop")),
        "blocked": _entry_list(get("blocked"), max_blocked, _BLOCKED),
        "totals": _totals(get("totals")),
        "pending": _pending(get("pending")),
        "last_batch": _optional_text(get("last_batch"), "last_batch"),
        "cfg": cfg,
        "notice": _optional_text(get("notice"), "notice"),
        "reset": _reset_info(get("reset")),
        "unknown": _unknown_marks(get("unknown")),
        "delivered": _delivered(get("delivered"), max_delivered),
        "shadow": _shadow(get("shadow")),
        "background": _flag(get("background"), "background"),
    }
