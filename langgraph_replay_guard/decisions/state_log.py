"""Format 3 of the guard channel: a log of call events beside the fold of what left it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph_replay_guard.decisions.state import (
    _OUTCOME_RANK,
    _apply,
    _fold_settings,
    _reset,
    load_state,
    new_state,
)
from langgraph_replay_guard.decisions.state_format import (
    CallEvent,
    Event,
    InvalidStateError,
    decode_cfg,
    decode_events,
)

__all__ = ["LOG_CAP", "LOG_FORMAT", "derive", "log_write", "merge_log"]

LOG_FORMAT = 3
"""`"v"` of a format 3 value."""

LOG_CAP = 0
"""Most events the log keeps; the batch in progress stays whole until it is complete (0: the
log is that batch only, which keeps the value no larger than format 2; see bench_state.py)."""

_TOP = ("cfg", "notice", "reset", "unknown")
"""Fields of a channel value that are not the fold of events (they stay beside `base`)."""
_NOT_BASE = frozenset({"v", "pending", *_TOP})


def log_write(events: list[Event], cfg: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a guarded call writes: its events, and the fold settings when they change.

    The write is itself a format 3 value (a log and an empty `base`): LangGraph stores the
    first write to an empty channel as it is, and it reads as what it is.

    Args:
        events: Events built by `engine.make_event`.
        cfg: The fold settings, when the value the call was planned on has others.

    Returns:
        The write.
    """
    write: dict[str, Any] = {"v": LOG_FORMAT, "log": list(events)}
    if cfg is not None:
        write["cfg"] = dict(cfg)
    return write


def _value(state: Mapping[str, Any], log: list[Event]) -> dict[str, Any]:
    """A format 3 value from a checked format 2 state (its pending events join the log)."""
    pending = state.get("pending")
    base = {k: v for k, v in state.items() if k not in _NOT_BASE}
    value: dict[str, Any] = {"v": LOG_FORMAT, "base": base, "log": []}
    value.update({k: state[k] for k in _TOP if state.get(k) not in (None, {})})
    value["cfg"] = dict(state.get("cfg") or {})
    if pending:
        value["log"] = list(pending["events"])
    value["log"].extend(log)
    return value


def as_log(value: Any) -> dict[str, Any]:
    """A private, checked format 3 copy of a channel value (any readable format).

    A format 1 or 2 value (a checkpoint of an earlier release) becomes its fields as `base`,
    its pending batch as the log. A corrupt value is reset as `load_state` resets it.

    Args:
        value: The channel value.

    Returns:
        A value the caller may change (its `log` and `base` are its own).
    """
    if isinstance(value, Mapping) and value.get("v") == LOG_FORMAT:
        try:
            cfg = decode_cfg(value.get("cfg", {}))
            log = decode_events(value.get("log", []), "log")
        except InvalidStateError as exc:
            return _value(_reset(f"the guard channel is malformed: {exc}", value), [])
        base = value.get("base")
        state = load_state({**base, "v": 2, "cfg": cfg}) if isinstance(base, Mapping) else None
        if state is None:
            state = new_state()
            state["cfg"] = cfg
        for key in ("notice", "reset", "unknown"):
            if value.get(key) is not None and state.get(key) is None:
                state[key] = value[key]
        return _value(state, log)
    return _value(load_state(value), [])


def _batches(log: list[Event]) -> list[list[Event]]:
    """The log's events by batch, in the order batches first appear, each by position."""
    groups: dict[Any, list[Event]] = {}
    for ev in log:
        groups.setdefault(ev["b"], []).append(ev)
    return [sorted(group, key=_order) for group in groups.values()]


def _order(ev: Event) -> tuple[int, int, str]:
    return (ev["i"], _OUTCOME_RANK.get(ev["o"], -1), repr(sorted(ev.items())))


def _complete(events: list[Event]) -> bool:
    size = events[0].get("m")
    return isinstance(size, int) and len(events) == size


def _append(value: dict[str, Any], ev: Event) -> None:
    """Add one event: one per (batch, position), a deterministic winner for a position."""
    log: list[Event] = value["log"]
    batch = ev["b"]
    if batch is None:  # no position to deduplicate on: applied at once, after the log
        _fold(value, len(log))
        _apply(value["base"], CallEvent.decode(ev), _fold_settings(value["cfg"]))
        return
    same = [e for e in log if e["b"] == batch]
    if (same and _complete(same)) or (not same and _late(value, ev)):
        return  # a late copy of a write for a batch that already reported every position
    slot = [e for e in same if e["i"] == ev["i"]]
    if slot:
        winner = max([*slot, ev], key=_order)
        log[:] = [e for e in log if not (e["b"] == batch and e["i"] == ev["i"])]
        log.append(winner)
    else:
        log.append(ev)


def _late(value: dict[str, Any], ev: Event) -> bool:
    return ev.get("m") is not None and ev["b"] == value["base"].get("last_batch")


def _fold(value: dict[str, Any], count: int) -> None:
    """Fold the log's first `count` events' batches into `base`, oldest batch first."""
    settings = _fold_settings(value["cfg"])
    batches = _batches(value["log"])
    folded = 0
    while batches and folded < count:
        batch = batches.pop(0)
        folded += len(batch)
        for ev in batch:
            _apply(value["base"], CallEvent.decode(ev), settings)
    value["log"] = [ev for group in batches for ev in group]


def _compact(value: dict[str, Any], cap: int) -> None:
    """Keep at most `cap` events, and the latest batch whole until it is complete.

    Older batches, and a latest batch that reported every position, go to `base`.
    """
    log = value["log"]
    batches = _batches(log)
    if not batches:
        return
    latest = batches[-1]
    keep = 0 if _complete(latest) and len(log) > cap else len(latest)
    if len(log) > max(keep, cap):
        _fold(value, len(log) - max(keep, cap))


def merge_log(current: Any, update: Any, *, cap: int = LOG_CAP) -> dict[str, Any]:
    """Reducer of a format 3 channel: the update's events appended to the log, then compacted.

    Args:
        current: The channel's value (any readable format).
        update: A `log_write`, or a whole value (format 1 to 3).
        cap: Most events the log keeps beside its latest batch.

    Returns:
        The new value.
    """
    if (isinstance(update, Mapping) and "base" in update) or (
        isinstance(update, Mapping) and update.get("v") in (1, 2)
    ):
        return as_log(update)  # a whole state (update_state in Studio)
    value = as_log(current)
    if update is None:
        return value
    try:
        events = decode_events(update.get("log"), "log") if isinstance(update, Mapping) else None
        cfg = decode_cfg(update["cfg"]) if isinstance(update, Mapping) and "cfg" in update else None
    except InvalidStateError as exc:
        value["notice"] = f"ignored a write to the guard channel ({exc})"
        return value
    if events is None:
        value["notice"] = "ignored a write to the guard channel that is not a guard update"
        return value
    if cfg is not None:
        value["cfg"] = cfg
    for ev in events:
        _append(value, ev)
    _compact(value, cap)
    return value


def derive(value: Any) -> dict[str, Any]:
    """The state the engine decides on: `base` with the log folded in, batch by batch.

    Args:
        value: A channel value (any readable format).

    Returns:
        A settled state in the shape `state.settled` gives (format 2's fields).
    """
    log_value = as_log(value)
    _fold(log_value, len(log_value["log"]))
    state = new_state()
    state.update(log_value["base"])
    for key in _TOP:
        if key in log_value:
            state[key] = log_value[key]
    state["pending"] = None
    return state
