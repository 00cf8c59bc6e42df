"""The guard channel format: one pass that checks every field and entry, trimming oversize maps."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import islice
from reprlib import Repr
from typing import Any, NoReturn, NotRequired, TypedDict

__all__ = [
    "DEFAULT_CFG",
    "FORMAT_VERSION",
    "MAX_BLOCKED_LOG",
    "MAX_DELIVERED",
    "MAX_FAILURE_STREAKS",
    "MAX_RESULTS",
    "MAX_SHADOW_REASONS",
    "MAX_TRACKED_KEYS",
    "READABLE_VERSIONS",
    "Event",
    "InvalidStateError",
    "decode_cfg",
    "decode_events",
    "decode_fields",
    "trim_map",
]

FORMAT_VERSION = 3
"""Version of the channel format the guard writes (`"v"`)."""

READABLE_VERSIONS = (2, 3)
"""Versions a stored value may be in (format 2 is read as format 3, `decode_fields`); any
other resets the channel with a notice."""

DEFAULT_CFG: dict[str, Any] = {
    "w": 5,  # GuardConfig.history_window
    "cp": 4,  # GuardConfig.max_cycle_period
    "scope": "turn",  # GuardConfig.scope
    "rr": "progress",  # GuardConfig.repeat_reset
    "rd": True,  # GuardConfig.result_diff
    "cy": True,  # GuardConfig.cycle_detection
    "rm": True,  # GuardConfig.reminder (off in shadow mode)
}
"""The settings that shape the stored state, at their defaults.

The reducer is a module-level function with no access to the guard, so the settings a guard
changed from these travel with its writes (`cfg`); a guard with the defaults writes none."""

# The bounds `GuardConfig` enforces on the settings that travel with each write.
_MAX_WINDOW = 10_000
_MAX_CYCLE_PERIOD = 32

_OUTCOMES = frozenset({"success", "failure", "timeout", "denied", "answered"})
_SEQUENCES = (list, tuple)  # a tuple never comes from JSON, but reads the same
_SHOWN_CHARS = 40
_ABSENT = object()
# Shows a bad value in a notice: a few levels deep and a few entries wide, so that a value
# nested a thousand levels (an `update_state` from code) is named, not a RecursionError.
_SHOWN = Repr()
_SHOWN.maxlevel = _SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = 4
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = _SHOWN_CHARS


class InvalidStateError(ValueError):
    """A channel value, or a write to it, that is not in the guard state's format."""

    def __init__(self, path: str, expected: str, got: Any) -> None:
        """Say what belongs at `path` (such as `log[0].i`) instead of `got`."""
        shown = _SHOWN.repr(got)
        if len(shown) > _SHOWN_CHARS:
            shown = shown[: _SHOWN_CHARS - 3] + "..."
        super().__init__(f"{path} should be {expected}, not {shown}")
        self.path = path


class Event(TypedDict):
    """One recorded call, as `engine.make_event` builds it and the channel stores it.

    Keys are short because events sit in checkpoints; `EVENT` checks them. The fold reads each
    key once, into a local named as the comment below (`state._apply`).
    """

    b: str | None  # batch: id of the AIMessage that asked for the call (None: apply at once)
    i: int  # index: position of the call in its batch
    t: str | None  # turn: id of the user message that opened the turn
    k: str  # key: the call key
    n: str  # tool: the tool name
    a: str  # args: a short, sanitized argument summary (for reminders; never tool output)
    c: str  # replay: the call's replay class
    v: bool  # volatile: whether it is a volatile read
    s: bool  # short-circuits: whether result-diff may short-circuit this tool
    o: str  # outcome: success, failure, timeout, denied or answered (`state.Outcome`)
    h: str | None  # digest: hash of the result (a success) or of the error text (a failure)
    p: str | None  # preview: the result preview (goes to the model in ToolMessages only)
    # reason: why a denied call was denied (in shadow mode: why enforcing would have blocked
    # a call that ran)
    r: str | None
    x: bool  # abort: whether the denial stopped the run
    m: NotRequired[int]  # batch size: once every position reported, the batch is folded
    # [failure signature, the tool's same-failure limit] of a failed call the layer watches
    f: NotRequired[list[Any]]
    # call id: the tool_call_id of a call that ran under other arguments than the model asked
    # (a middleware changed one), kept in its result memo: a duplicate finds it by this id
    d: NotRequired[str]
    g: NotRequired[bool]  # background (only true): the call starts work that outlives it


def _fail(path: str, expected: str, got: Any) -> NoReturn:
    raise InvalidStateError(path, expected, got)


def trim_map(mapping: dict[str, Any], cap: int) -> dict[str, Any]:
    """A new map of the last `cap` entries of a least-recently-used-first map, in order.

    Reads only those entries (a reversed dict view starts at the end), so trimming a huge
    map costs the size of the cap, not of the map.
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
        "b": OPT_TEXT,
        "i": NAT,
        "t": OPT_TEXT,
        "k": TEXT,
        "n": TEXT,
        "a": TEXT,
        "c": TEXT,
        "v": FLAG,
        "s": FLAG,
        "o": _choice(_OUTCOMES),
        "h": OPT_TEXT,
        "p": OPT_TEXT,
        "r": OPT_TEXT,
        "x": FLAG,
        "m": NAT,
        "f": _row("[failure signature, limit >= 1]", TEXT, POSITIVE),
        "d": TEXT,
        "g": TRUE,
    },
    optional=("m", "f", "d", "g"),
    what="a recorded call (keys b i t k n a c v s o h p r x, optional m f d g)",
)
"""An `Event` (its docstring names each key)."""

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
"""The fold settings (`DEFAULT_CFG`); any may be absent (then its default)."""

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
        _list(_row("[key, tool, outcome, epoch]", TEXT, TEXT, TEXT, NAT), "window"),
        _ABSENT,
    ),
    # A count is at least 1 (the fold writes the call it counts): a count below would let
    # that many more identical calls run before the repeat limit stops them.
    "counters": (_map(_row("[count, tool]", POSITIVE, TEXT), MAX_TRACKED_KEYS), _ABSENT),
    # A fifth entry, the tool_call_id of a call that ran changed (event key `d`), is
    # optional: absent in values of earlier releases and for calls that ran as asked.
    "results": (
        _map(
            _row(
                "[result hash, epoch, same in a row, preview(, call id)]",
                OPT_TEXT,
                NAT,
                POSITIVE,
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
    "blocked": (
        _list(_row("[tool, reason, count]", TEXT, TEXT, POSITIVE), MAX_BLOCKED_LOG),
        _ABSENT,
    ),
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
"""Every field of a stored guard state, in the order they are checked; the row names say
what each position of a stored entry holds (the fold and the engine read them by position)."""


PENDING = _nullable(
    _object(
        {"batch": OPT_TEXT, "events": EVENTS},
        what="the batch in progress of format 2 (an object with the keys batch, events)",
    )
)
"""Format 2's `pending`: the batch in progress, read as format 3's `log` (`decode_fields`)."""


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


def decode_cfg(value: Any, path: str = "cfg") -> dict[str, Any]:
    """A checked copy of fold settings (`DEFAULT_CFG`), or `InvalidStateError`."""
    if type(value) is dict and not value.keys() <= CFG[5]:
        extra = sorted(value.keys() - CFG[5], key=str)[0]
        _fail(f"{path}.{extra}", "absent (not a guard setting)", value[extra])
    # Settings at their default are dropped: a value of an earlier release, which wrote them
    # all, reads as the same settings this release writes.
    return {k: v for k, v in _check(value, CFG, path, {}).items() if v != DEFAULT_CFG[k]}


def decode_events(value: Any, path: str) -> list[Any]:
    """A checked new list of recorded calls (`Event`), or `InvalidStateError`."""
    events: list[Any] = _check(value, EVENTS, path, {})
    return events


def decode_fields(value: Mapping[str, Any]) -> dict[str, Any]:
    """Check every field of a channel value (one pass over `FIELDS`) and return its copy.

    The copy holds new top-level lists and maps (the fold appends to them) but shares the
    entries, which nothing mutates. Maps and lists above their cap keep their most recent
    entries (the fold would evict the others next); only kept entries are checked. A field
    a value of an earlier release may lack takes its value for absence (`FIELDS`); unknown
    fields are dropped. Format 2 differs only in keeping the batch in progress as
    `pending` (`{"batch", "events"}`), read as the log (a malformed one is named there).

    Args:
        value: A mapping whose `v` is one of `READABLE_VERSIONS`.

    Returns:
        The checked copy.

    Raises:
        InvalidStateError: The first malformed field or entry.
    """
    if value.get("v") == 2 and value.get("pending") is not None:
        # Checked as it was stored, so that a notice names `pending`, not a `log` the
        # value does not have; its events are then checked again as the log (a no-op).
        pending = _check(value["pending"], PENDING, "pending", {})
        value = {**value, "log": pending["events"]}
    cfg = decode_cfg(value.get("cfg"))
    # The two caps that are settings; the others are numbers in `FIELDS`.
    bounds = {
        "window": cfg.get("w", DEFAULT_CFG["w"]),
        "tail": 2 * cfg.get("cp", DEFAULT_CFG["cp"]),
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
