"""The guard channel format: one pass that checks every field and entry, trimming oversize maps."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any, NamedTuple, NoReturn, NotRequired, TypedDict

__all__ = [
    "DEFAULT_CYCLE_PERIOD",
    "DEFAULT_WINDOW",
    "FORMAT_VERSION",
    "MAX_BLOCKED_LOG",
    "MAX_DELIVERED",
    "MAX_FAILURE_STREAKS",
    "MAX_RESULTS",
    "MAX_TRACKED_KEYS",
    "READABLE_VERSIONS",
    "BlockedCall",
    "CallCounter",
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

FORMAT_VERSION = 3
"""Version of the channel format the guard writes (`"v"`)."""

READABLE_VERSIONS = (1, 2, 3)
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
    """One recorded call, as the guard builds it (`engine.make_event`) and the channel stores it.

    Keys are short because events sit in checkpoints; `EVENT` checks them. The fold reads each
    key once, into a local named as below (`state._apply`).

    Attributes:
        b: batch, id of the AIMessage that asked for the call (None: apply at once).
        i: index, position of the call in its batch.
        t: turn, id of the user message that opened the turn.
        k: key, the call key.
        n: tool, the tool name.
        a: args, a short, sanitized argument summary (for reminders; never tool output).
        c: replay, the call's replay class.
        v: volatile, whether it is a volatile read.
        s: short-circuits, whether result-diff may short-circuit this tool.
        o: outcome, `"success"`, `"failure"`, `"timeout"`, `"denied"` or `"answered"`.
        h: digest, hash of the result (a success) or of the error text (a failure).
        p: preview, the result preview (goes to the model in ToolMessages only).
        r: reason, the decision's reason for a denied call (in shadow mode: for a call that
            ran although enforcing would have blocked it).
        x: abort, whether the denial stopped the run.
        m: batch size (optional); once every position reported, the batch is folded.
        f: `[signature, limit]` (optional) of a failed call: its failure signature and the
            tool's same-failure threshold (absent on a success, on a denied call and when
            the layer is off for the tool).
        d: call id (optional), the tool_call_id of a call that ran under other arguments than
            the model asked (see `ResultMemo.call_id`).
        g: background (optional, only `true`): the call starts work that outlives it (see
            `CallClass.background`).
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


@dataclass(frozen=True, slots=True)
class FoldSettings:
    """The settings that shape the stored state; those not at their default travel as `cfg`.

    The reducer is a module-level function with no access to the guard, so the settings a
    guard changed from their defaults are written with its events, under short keys (`w`,
    `cp`, `scope`, `rr`, `rd`, `cy`, `rm`); a guard with the default ones writes none.

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
        """The stored form: only the settings that differ from the defaults."""
        stored = {
            "w": self.window,
            "cp": self.cycle_period,
            "scope": self.scope,
            "rr": self.repeat_reset,
            "rd": self.result_diff,
            "cy": self.cycles,
            "rm": self.reminders,
        }
        return {key: value for key, value in stored.items() if value != _DEFAULTS[key]}

    @classmethod
    def decode(cls, cfg: Mapping[str, Any]) -> FoldSettings:
        """The named form of stored settings already checked by `decode_cfg` (absent: default)."""
        if not cfg:  # a guard with the default settings writes none
            return _DEFAULT_SETTINGS
        return cls(
            cfg.get("w", DEFAULT_WINDOW),
            cfg.get("cp", DEFAULT_CYCLE_PERIOD),
            cfg.get("scope", "turn"),
            cfg.get("rr", "progress"),
            cfg.get("rd", True),
            cfg.get("cy", True),
            cfg.get("rm", True),
        )


_DEFAULT_SETTINGS = FoldSettings()

_DEFAULTS = {
    "w": DEFAULT_WINDOW,
    "cp": DEFAULT_CYCLE_PERIOD,
    "scope": "turn",
    "rr": "progress",
    "rd": True,
    "cy": True,
    "rm": True,
}
"""The stored form of the default settings (`FoldSettings()`)."""


def _fail(path: str, expected: str, got: Any) -> NoReturn:
    raise InvalidStateError(path, expected, got)


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


# -- the schema: one table of what each stored field is, checked by one function (`_check`) ---
#
# A spec is a tuple whose first item is its kind. Leaves test one value; containers name their
# entries' spec and their cap (a number, or `"window"`/`"tail"`: bounds `decode_fields` takes
# from the stored settings). Adding a field is one row in a table below.

Spec = tuple[Any, ...]
"""`(kind, ok, test, ...)`: `test(x)` is the spec's test as a Python expression over the
expression `x`, and `ok` that expression compiled (nested entries included, no trimming):
one compiled test per field, as fast as a hand-written one. The rest says what to report
when it fails, and for containers their entries and cap."""

_NAMES: dict[str, Any] = {"SEQ": _SEQUENCES}
"""The constants the compiled tests name (choice sets, key sets)."""


def _named(value: Any) -> str:
    name = f"C{len(_NAMES)}"
    _NAMES[name] = value
    return name


def _compiled(test: Callable[[str], str]) -> Callable[[Any], bool]:
    # The source is built only from this module's own tables, never from stored data.
    ok: Callable[[Any], bool] = eval(f"lambda v: {test('v')}", _NAMES)
    return ok


def _leaf(test: Callable[[str], str], expected: str) -> Spec:
    return ("leaf", _compiled(test), test, expected)


TEXT = _leaf(lambda x: f"isinstance({x}, str)", "a string")
OPT_TEXT = _leaf(lambda x: f"({x} is None or isinstance({x}, str))", "a string or null")
FLAG = _leaf(lambda x: f"type({x}) is bool", "true or false")
# `type(...) is int` also refuses booleans, which JSON keeps apart from numbers.
INT = _leaf(lambda x: f"type({x}) is int", "a whole number")
NAT = _leaf(lambda x: f"(type({x}) is int and {x} >= 0)", "a whole number >= 0")
POSITIVE = _leaf(lambda x: f"(type({x}) is int and {x} >= 1)", "a whole number >= 1")
TRUE = _leaf(lambda x: f"{x} is True", "true")


def _choice(values: frozenset[str]) -> Spec:
    name = _named(values)
    return _leaf(lambda x: f"(isinstance({x}, str) and {x} in {name})", " or ".join(sorted(values)))


def _range(low: int, high: int) -> Spec:
    return _leaf(
        lambda x: f"(type({x}) is int and {low} <= {x} <= {high})",
        f"a whole number from {low} to {high}",
    )


def _row(shape: str, *fields: Spec, optional: int = 0) -> Spec:
    """A fixed-length list of leaves (`optional` trailing ones may be absent)."""
    most, least = len(fields), len(fields) - optional

    def test(x: str) -> str:
        parts = [f"type({x}) in SEQ", f"{least} <= len({x}) <= {most}"]
        for index, field in enumerate(fields):
            item = field[2](f"{x}[{index}]")
            parts.append(item if index < least else f"(len({x}) <= {index} or {item})")
        return f"({' and '.join(parts)})"

    return ("row", _compiled(test), test, shape)


def _object(fields: Mapping[str, Spec], *, optional: Iterable[str] = (), what: str = "") -> Spec:
    """An object with exactly these keys (the `optional` ones may be absent)."""
    keys = frozenset(fields)
    required = keys - frozenset(optional)
    required_name, keys_name = _named(required), _named(keys)

    def test(x: str) -> str:
        parts = [f"type({x}) is dict", f"{required_name} <= {x}.keys() <= {keys_name}"]
        for key, field in fields.items():
            item = field[2](f"{x}[{key!r}]")
            parts.append(item if key in required else f"({key!r} not in {x} or {item})")
        return f"({' and '.join(parts)})"

    shown = what or f"an object with exactly the keys {', '.join(sorted(keys))}"
    return ("object", _compiled(test), test, dict(fields), required, keys, shown)


def _nullable(spec: Spec) -> Spec:
    def test(x: str) -> str:
        return f"({x} is None or {spec[2](x)})"

    return ("null", _compiled(test), test, spec)


def _list(item: Spec, cap: int | str | None = None, what: str = "a list") -> Spec:
    """A list; above `cap`, its last entries are kept (only those are checked)."""
    name = _named(item[1])

    def test(x: str) -> str:
        return f"(type({x}) in SEQ and all(map({name}, {x})))"

    return ("list", _compiled(test), test, item, cap, what)


def _map(value: Spec, cap: int | str, what: str = "an object", *, first: bool = False) -> Spec:
    """A map of strings to entries; above `cap`, its most recent entries (`first`: oldest)."""

    def test(x: str) -> str:
        return (
            f"(type({x}) is dict and all([isinstance(k, str) and {value[2]('e')} "
            f"for k, e in {x}.items()]))"
        )

    return ("map", _compiled(test), test, value, cap, what, first)


def _check(value: Any, spec: Spec, path: str, bounds: Mapping[str, int]) -> Any:
    """`value` checked against `spec`: the copy to keep, or `InvalidStateError` at `path`.

    Lists and maps come back as new containers holding the same entries (trimmed to their
    cap); objects and rows come back as they are (nothing mutates an entry in place). The
    compiled test runs first; only a value that fails it is walked again to say where.
    """
    kind = spec[0]
    if kind == "null":
        return None if value is None else _check(value, spec[3], path, bounds)
    if kind == "list":
        item, cap, what = spec[3:]
        if type(value) not in _SEQUENCES:
            _fail(path, what, value)
        if cap is not None:
            cap = bounds[cap] if isinstance(cap, str) else cap
            value = value[-cap:] if len(value) > cap else value
        if not all(map(item[1], value)):
            for index, entry in enumerate(value):
                _check(entry, item, f"{path}[{index}]", bounds)
        return list(value)
    if kind == "map":
        item, cap, what, first = spec[3:]
        if type(value) is not dict:
            _fail(path, what, value)
        cap = bounds[cap] if isinstance(cap, str) else cap
        kept = dict(list(value.items())[:cap]) if first else trim_map(value, cap)
        if not spec[1](kept):
            for key, entry in kept.items():  # `!r`: `counters['k']`
                if not isinstance(key, str):
                    _fail(f"{path}[{key!r}]", "an entry under a string key", key)
                _check(entry, item, f"{path}[{key!r}]", bounds)
        return kept
    if spec[1](value):
        return value
    # Say what is wrong (the value failed its test).
    if kind == "object":
        fields, required, keys, shown = spec[3:]
        if type(value) is not dict or not required <= value.keys() <= keys:
            _fail(path, shown, value)
        for key, entry in value.items():
            _check(entry, fields[key], f"{path}.{key}", bounds)
    _fail(path, spec[3], value)  # a leaf or a row: what it should be


EVENT = _object(
    {
        "b": OPT_TEXT,  # batch: the AIMessage id
        "i": NAT,  # position in the batch
        "t": OPT_TEXT,  # turn
        "k": TEXT,  # call key
        "n": TEXT,  # tool name
        "a": TEXT,  # argument summary
        "c": TEXT,  # replay class
        "v": FLAG,  # volatile
        "s": FLAG,  # short-circuits
        "o": _choice(_OUTCOMES),
        "h": OPT_TEXT,  # result digest
        "p": OPT_TEXT,  # preview
        "r": OPT_TEXT,  # reason
        "x": FLAG,  # abort
        "m": NAT,  # batch size
        "f": _row("[failure signature, limit >= 1]", TEXT, POSITIVE),
        "d": TEXT,  # tool_call_id of a call that ran changed
        "g": TRUE,
    },
    optional=("m", "f", "d", "g"),
    what="a recorded call (keys b i t k n a c v s o h p r x, optional m f d g)",
)
"""An `Event` (its keys named there)."""

EVENTS = _list(EVENT, what="a list of recorded calls")

CFG = _object(
    {
        "w": _range(1, _MAX_WINDOW),
        "cp": _range(2, _MAX_CYCLE_PERIOD),
        "scope": _choice(frozenset({"turn", "thread"})),
        "rr": _choice(frozenset({"progress", "turn"})),
        "rd": FLAG,
        "cy": FLAG,
        "rm": FLAG,
    },
    optional=("w", "cp", "scope", "rr", "rd", "cy", "rm"),
    what="an object of guard settings (w cp scope rr rd cy rm)",
)
"""The fold settings (`FoldSettings`); any may be absent (then its default)."""

MAX_TRACKED_KEYS = 32
"""Most distinct calls whose repeat counts are kept (least recently used evicted first)."""

MAX_RESULTS = 8
"""Most distinct calls whose last result hash and preview are kept (for result-diff)."""

MAX_BLOCKED_LOG = 5
"""Most recent blocked decisions kept in the state for Studio and `GuardView`."""

MAX_DELIVERED = 16
"""Most batches remembered as answered (`delivered`), most recent kept."""

MAX_FAILURE_STREAKS = 8
"""Most tools whose same-failure streak is kept (least recently failed evicted first)."""

_LOOP_NOTE = {"reason": TEXT, "tool": TEXT, "args": TEXT, "count": NAT}

MAX_UNKNOWN_MARKS = 32
"""Most marks a thread state of an earlier release held (the callback handler now keeps each
mark in a store item of its own, uncapped, and only reads and clears these)."""

MAX_SHADOW_REASONS = 16
"""Most reasons `shadow` counts (the engine has fewer; a hostile value cannot grow it)."""

FIELDS: dict[str, tuple[Spec, Any]] = {
    # name: (spec, the value when absent: fields an earlier release lacked, or None)
    "turn": (OPT_TEXT, None),
    "epoch": (NAT, _ABSENT),
    "calls": (NAT, _ABSENT),
    "recent_calls": (
        _list(_row("[key, tool, outcome, epoch]", TEXT, TEXT, TEXT, INT), "window"),
        _ABSENT,
    ),
    "counters": (_map(_row("[count, tool]", INT, TEXT), MAX_TRACKED_KEYS), _ABSENT),
    # A fifth entry, the tool_call_id of a call that ran changed (`ResultMemo.call_id`), is
    # optional: absent in values of earlier releases and for calls that ran as asked.
    "results": (
        _map(
            _row(
                "[result hash, epoch, same in a row, preview(, call id)]",
                OPT_TEXT,
                INT,
                INT,
                OPT_TEXT,
                OPT_TEXT,
                optional=1,
            ),
            MAX_RESULTS,
        ),
        _ABSENT,
    ),
    "tail": (_list(_row("[key, result hash, tool]", TEXT, TEXT, TEXT), "tail"), _ABSENT),
    "cycle": (
        _nullable(
            _object(
                {
                    "keys": _list(TEXT, what="a list of call keys"),
                    "tools": _list(TEXT, what="a list of tool names"),
                    "pos": NAT,
                    "strikes": NAT,
                }
            )
        ),
        None,
    ),
    "failures": (
        _map(_row("[failure signature, same in a row]", TEXT, POSITIVE), MAX_FAILURE_STREAKS),
        {},
    ),
    "reminder": (_nullable(_object({**_LOOP_NOTE, "batch": OPT_TEXT})), None),
    "stop": (_nullable(_object(_LOOP_NOTE)), None),
    "blocked": (_list(_row("[tool, reason, count]", TEXT, TEXT, INT), MAX_BLOCKED_LOG), _ABSENT),
    "totals": (_object({"calls": NAT, "blocked": NAT, "aborts": NAT}), _ABSENT),
    # The events of the batch in progress (one per position), folded once it is complete.
    "log": (EVENTS, []),
    "last_batch": (OPT_TEXT, None),
    "notice": (OPT_TEXT, None),
    "reset": (_nullable(_object({"reason": OPT_TEXT, "at": OPT_TEXT})), None),
    "unknown": (
        _nullable(
            _list(
                _object({"k": TEXT, "n": TEXT, "a": TEXT, "e": TEXT}),
                MAX_UNKNOWN_MARKS,
                "a list of unknown-outcome marks",
            )
        ),
        None,
    ),
    "delivered": (_list(TEXT, MAX_DELIVERED, "a list of AIMessage ids"), []),
    "shadow": (
        _map(
            _row("[blocked, stopped], whole numbers >= 0", NAT, NAT),
            MAX_SHADOW_REASONS,
            "an object of reason -> [blocked, stopped]",
            first=True,
        ),
        {},
    ),
    "background": (FLAG, False),
}
"""Every field of a stored guard state (format 2), in the order they are checked."""


def _cross_checks(state: dict[str, Any]) -> None:
    """The rules one field's spec cannot say (they relate two fields or bound a length)."""
    cycle = state["cycle"]
    if cycle is not None:
        keys, tools = cycle["keys"], cycle["tools"]
        if not 2 <= len(keys) <= _MAX_CYCLE_PERIOD:
            _fail("cycle.keys", f"a list of 2 to {_MAX_CYCLE_PERIOD} call keys", keys)
        if len(tools) != len(keys):
            _fail("cycle.tools", "a list of tool names as long as cycle.keys", tools)
        if cycle["pos"] >= len(keys):
            _fail("cycle.pos", f"a position in cycle.keys (below {len(keys)})", cycle["pos"])
    state["totals"] = dict(state["totals"])  # the fold counts in it: a copy


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
    if type(value) is dict and not value.keys() <= CFG[5]:
        extra = sorted(value.keys() - CFG[5], key=str)[0]
        _fail(f"{path}.{extra}", "absent (not a guard setting)", value[extra])
    # Settings at their default are dropped: a value of an earlier release, which wrote them
    # all, reads as the same settings this release writes.
    return {k: v for k, v in _check(value, CFG, path, {}).items() if v != _DEFAULTS[k]}


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
    events: list[Any] = _check(value, EVENTS, path, {})
    return events


def migrate(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A stored value in the current format: an older value is migrated, nothing lost.

    Version 1 (written by earlier releases) stored the dedup window as `window`, the repeat
    counters as `counts` and the thread totals as `stats`; version 2 names them as
    `GuardView` does (`recent_calls`, `counters`, `totals`), with the same contents, and
    kept the batch in progress as `pending` (`{"batch", "events"}`), which version 3 keeps
    as `log` (its events). A thread checkpointed by an older release so resumes with its
    counters. The result is not checked: `decode_fields` checks it like any current value.

    Args:
        value: A channel value whose `v` is one of `READABLE_VERSIONS`.

    Returns:
        `value` itself when it is current, else a migrated copy (entries shared).
    """
    version = value.get("v")
    if version == FORMAT_VERSION:
        return value
    migrated = dict(value)
    if version == 1:
        renamed = set(V1_RENAMED.values())
        migrated = {V1_RENAMED.get(k, k): item for k, item in value.items() if k not in renamed}
    pending = migrated.pop("pending", None)
    if pending is not None:
        # A malformed `pending` is kept under `log`, where the check names it.
        events = pending.get("events") if type(pending) is dict else None
        migrated["log"] = events if type(events) is list and events else pending
    migrated["v"] = FORMAT_VERSION
    return migrated


def decode_fields(value: Mapping[str, Any]) -> dict[str, Any]:
    """Check every field of a channel value in the current format and return its copy.

    One pass over `FIELDS`. The copy holds new top-level lists and maps (the fold appends
    to them) but shares the entries, which nothing mutates. Maps and lists above their cap
    keep their most recent entries (the fold would evict the others next); only kept
    entries are checked. A field a value of an earlier release may lack takes its value
    for absence (`FIELDS`); unknown fields are dropped.

    Args:
        value: A mapping in the current format version (see `migrate`).

    Returns:
        The checked copy.

    Raises:
        InvalidStateError: The first malformed field or entry.
    """
    cfg = decode_cfg(value.get("cfg"))
    # The two caps that are settings; the others are numbers in `FIELDS`.
    bounds = {
        "window": cfg.get("w", DEFAULT_WINDOW),
        "tail": 2 * cfg.get("cp", DEFAULT_CYCLE_PERIOD),
    }
    state: dict[str, Any] = {"v": FORMAT_VERSION}
    get = value.get
    for name, (spec, absent) in FIELDS.items():
        item = get(name)
        if item is None and absent is not _ABSENT:
            state[name] = absent.copy() if isinstance(absent, dict | list) else absent
        else:
            state[name] = _check(item, spec, name, bounds)
    state["cfg"] = cfg
    _cross_checks(state)
    return state
