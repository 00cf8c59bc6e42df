"""The guard channel value: a bounded JSON document, its events, reducer and read-only view."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypedDict

from langgraph_replay_guard.decisions.failures import SAME_FAILURE
from langgraph_replay_guard.decisions.state_format import (
    DEFAULT_CFG,
    FORMAT_VERSION,
    MAX_BLOCKED_LOG,
    MAX_DELIVERED,
    MAX_FAILURE_STREAKS,
    MAX_RESULTS,
    MAX_SHADOW_REASONS,
    MAX_TRACKED_KEYS,
    READABLE_VERSIONS,
    Event,
    InvalidStateError,
    decode_cfg,
    decode_events,
    decode_fields,
    trim_map,
)
from langgraph_replay_guard.decisions.texts import UNKNOWN_TOOL

__all__ = [
    "FORMAT_VERSION",
    "MAX_BLOCKED_LOG",
    "MAX_FAILURE_STREAKS",
    "MAX_RESULTS",
    "MAX_TRACKED_KEYS",
    "UNKNOWN_TOOL",
    "Event",
    "GuardTotals",
    "GuardView",
    "Outcome",
    "PreviewFacts",
    "StateUpdate",
    "batch_in_progress",
    "delivered",
    "fold_events",
    "is_channel_value",
    "load_state",
    "may_have_written",
    "merge_guard_state",
    "new_state",
    "own_update",
    "preview_facts",
    "scrub_update",
    "settled",
    "show_update",
    "state_for_turn",
    "unrecorded_positions",
]

logger = logging.getLogger("langgraph_replay_guard")

Outcome = Literal["success", "failure", "timeout", "denied", "answered"]
"""How a call ended. `answered`: another piece answered it (a HITL reject, a call limit,
a structured-output retry, a cache): the attempt counts toward repeats and loops, nothing
ran, nothing is cached and no reminder is armed by it alone."""

_EXECUTED: frozenset[str] = frozenset({"success", "failure", "timeout"})


def may_have_written(replay: str, outcome: str) -> bool:
    """Whether a call may have changed the world: a non-`pure` call that ran, whatever it gave.

    A write that failed or timed out may have written part of its effect (sed on two files
    of which one is missing, a script that wrote then raised): the next identical read
    must run. The one rule the engine's epoch and the loop definition (`find_loops`) share.
    """
    return replay != "pure" and outcome in _EXECUTED


_OUTCOME_RANK = {"answered": 0, "denied": 0, "timeout": 1, "failure": 2, "success": 3}


class StateUpdate(TypedDict, total=False):
    """What a guarded node writes into the channel."""

    op: Literal["events"]
    cfg: dict[str, Any]
    events: list[Event]
    # Preview edits applied before the events (`own_update`'s `edits`): a scrub's previews
    # and a show's, the model's reading of the last batch carried by the guard's next write.
    scrub: list[str]
    show: dict[str, str]


def new_state() -> dict[str, Any]:
    """Return an empty guard state (`state_format.FIELDS` says what each field holds)."""
    return {
        "v": FORMAT_VERSION,
        "turn": None,
        "epoch": 0,
        "calls": 0,
        "recent_calls": [],  # the dedup window
        "counters": {},  # least recently used first
        "results": {},
        "tail": [],  # for cycle detection
        "cycle": None,  # while a cycle is active
        "failures": {},  # same-failure streaks
        "reminder": None,
        "stop": None,  # after an abort
        "background": False,  # a call started work that outlives it: reads are not deduped
        "blocked": [],
        "totals": {"calls": 0, "blocked": 0, "aborts": 0},  # whole thread, never reset
        "log": [],  # events of the batch in progress (one per position), not yet folded
        "last_batch": None,  # id of the AIMessage of the last folded call
        "cfg": {},
        "notice": None,  # set when a corrupt or unreadable value was reset
        "reset": None,
        "unknown": None,  # the callback handler's unknown-outcome marks of earlier releases
        # AIMessage ids of recent batches whose side effects were answered in the thread:
        # what the ledger asks instead of the message history, which a user or a
        # middleware may rewrite (Summarization, ContextEditing). Never reset.
        "delivered": [],
        # Shadow mode: reason -> [calls enforcing would have blocked, runs it would have
        # stopped], over the whole thread. Never reset.
        "shadow": {},
    }


MAX_RESET_REASON = 300
"""Longest `reset.reason` (and reason in `notice`) kept in the state."""


def _decode(value: Any) -> tuple[dict[str, Any] | None, str]:
    """The checked private copy of a channel value, or what is wrong with it.

    One pass over the whole value (every field, every entry, the log's events included): a
    value that passes cannot make the fold, the decisions or the views fail.
    """
    if not isinstance(value, Mapping):
        return None, f"the guard channel holds a {type(value).__name__}, not a guard state"
    version = value.get("v")
    if type(version) is not int or version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        return None, (
            f"the guard channel is in format version {version!r}; this version of "
            f"langgraph-replay-guard reads versions {readable}"
        )
    try:
        return decode_fields(value), ""
    except InvalidStateError as exc:
        old = "" if version == FORMAT_VERSION else f" (a format {version} value)"
        return None, f"the guard channel{old} is malformed: {exc}"


# -- one reader (`_checked`), one cache (`_KNOWN`) ----------------------------------------------
#
# What the guard derived from an object it met is kept by the object's identity: for a channel
# value its checked state (the value itself when the reducer returned it), settled state and
# preview facts; for a write, that the guard built it and the values it was merged into. One
# invalidation rule: an entry holds while the object's top-level values are what they were
# (`_known`; the same objects, or equal ones). The guard never mutates a value it returned or a
# write it built, and LangGraph never mutates channel values; a value edited is checked again.
# Each entry holds its object, so its id cannot be reused while the entry lives; past the cap
# the oldest entry goes. An entry keeps a whole channel value alive: at 128 a thread kept about
# 150 more objects than an unguarded one until its 50th step
# (`test_overhead.py::test_a_guarded_thread_keeps_no_more_objects_per_step_than_an_unguarded_one`).
_KNOWN: dict[int, tuple[Any, tuple[Any, ...] | None, dict[str, Any]]] = {}
_KNOWN_CAP = 64
_KNOWN_LOCK = threading.Lock()  # parallel tool calls remember at once


def _known(obj: Any) -> dict[str, Any] | None:
    """What was derived from `obj`, if it was met and its top-level values are unchanged."""
    entry = _KNOWN.get(id(obj))
    if entry is not None and entry[0] is obj and (entry[1] is None or entry[1] == (*obj.values(),)):
        return entry[2]
    return None


def _remember(obj: Any, **facts: Any) -> dict[str, Any]:
    """Remember `facts` about `obj` and its top-level values as they are now; returns them."""
    fields = (*obj.values(),) if isinstance(obj, dict | Mapping) else None
    with _KNOWN_LOCK:
        _KNOWN[id(obj)] = (obj, fields, facts)
        if len(_KNOWN) > _KNOWN_CAP:
            del _KNOWN[next(iter(_KNOWN))]
    return facts


def _facts(value: Any) -> dict[str, Any]:
    """The facts of a channel value, its checked state (`state`) first: the one reader.

    An empty value (`None` or `{}`, what LangGraph starts a channel with) is a new state; a
    first write stored as it is, the state its events fold into; a format 2 value, read as
    format 3; a corrupt value, the state it is reset to (reported once per value).
    """
    facts = _known(value)
    if facts is None:
        if value is None or (isinstance(value, Mapping) and not value):
            return {"state": new_state()}
        facts = _remember(value)
    elif "state" in facts:
        return facts
    facts["state"] = _state_of(value)
    return facts


def _state_of(value: Any) -> dict[str, Any]:
    if not _first_write(value):
        state, problem = _decode(value)
        return state if state is not None else _reset(problem, value)
    if value.keys() <= _WRITE_KEYS:
        return merge_guard_state(None, value)
    # A first write edited since (in Studio): the state it showed, with the edits.
    write = {key: value[key] for key in _WRITE_KEYS if key in value}
    edited = {
        **merge_guard_state(None, write),
        **{k: v for k, v in value.items() if k not in _WRITE_KEYS},
    }
    state, problem = _decode(edited)
    return state if state is not None else _reset(problem, value, edited)


def _checked(value: Any) -> Mapping[str, Any]:
    """The checked state of a channel value (its batch in progress in `log`); read-only."""
    state: Mapping[str, Any] = _facts(value)["state"]
    return state


def load_state(value: Any) -> dict[str, Any]:
    """Return a private, checked copy of a channel value.

    An empty value (`None` or `{}`) gives a new state, a format 2 value is read as format 3
    (`state_format.decode_fields`). Maps and lists above their caps keep their most recent
    entries. A corrupt value, or one in another format version, is never fatal: it is
    logged as a warning and replaced by a new state whose `reset` (`{"reason", "at"}`) and
    `notice` say what was wrong, keeping its thread totals (`totals`) when they are readable.
    """
    return _shallow(_checked(value))


_WRITE_KEYS = frozenset({"op", "cfg", "events", "scrub", "show"})
"""The keys of a guard write (`own_update`)."""


def is_channel_value(value: Any) -> bool:
    """Whether a mapping is a guard channel value (a state, or a first write stored as it is).

    A reader given a state dict or a channel value tells them apart by this: a channel with
    one write (a thread whose only step wrote it) holds that write, not a state.
    """
    return isinstance(value, Mapping) and ("v" in value or _first_write(value))


def _first_write(value: Any) -> bool:
    """Whether a stored channel value is a guard write rather than a guard state."""
    return isinstance(value, Mapping) and "v" not in value and value.get("op") == "events"


def own_update(
    cfg: dict[str, Any], events: list[Event], edits: Sequence[Mapping[str, Any]] = ()
) -> StateUpdate:
    """The channel write that records events the guard built itself (`make_event`).

    The reducer takes such a write without checking it again: its events come from checked
    facts. It is remembered by identity (`_KNOWN`); a write read back from a checkpoint
    (pending writes) is a new object and is checked like any other. LangGraph stores the
    first write to an empty channel as it is: such a value reads as the state its events
    fold into, so the first write needs no form of its own. `cfg`: the fold settings that
    differ from `DEFAULT_CFG` (`engine.fold_settings`), written only when there are any.
    `edits`: `scrub_update`s and `show_update`s carried by the same write (one channel
    version a step, not one per edit), applied before the events, a scrub before a show.
    """
    update: StateUpdate = {"op": "events", "events": events}
    if cfg:
        update["cfg"] = cfg
    for edit in edits:
        update[edit["op"]] = edit["previews"]  # type: ignore[literal-required]
    # The edits themselves: the model call merged them already (`_merged_already`).
    _remember(update, own=True, edits=tuple(edits))
    return update


# The fold appends to a state's lists and maps and bumps the counts in `shadow` and `totals`,
# but replaces their entries, never changing one in place: each list and map is copied, not
# what it holds.
_CONTAINERS = tuple(name for name, start in new_state().items() if isinstance(start, list | dict))


def _shallow(value: Mapping[str, Any]) -> dict[str, Any]:
    """Copy a checked state one level deep (far cheaper than a deep copy on every write)."""
    out = dict(value)
    for key in _CONTAINERS:
        item = out.get(key)
        if item is not None:
            out[key] = item.copy()
    return out


def _reset(problem: str, value: Any = None, readable: Any = None) -> dict[str, Any]:
    """A new state saying why `value` was reset; its totals from `readable` (or `value`)."""
    reason = _bounded(problem)
    notice = f"{reason}; the guard state was reset (counters start again from zero)."
    logger.warning("langgraph-replay-guard: %s", notice)
    state = new_state()
    state["totals"] = _readable_totals(value if readable is None else readable)
    state["notice"] = notice
    state["reset"] = {
        "reason": reason,
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    return state


def _bounded(text: str) -> str:
    if len(text) <= MAX_RESET_REASON:
        return text
    return text[: MAX_RESET_REASON - 3] + "..."


def _readable_totals(value: Any) -> dict[str, Any]:
    """The thread totals of a value in a readable format version, if they are readable."""
    fresh: dict[str, Any] = new_state()["totals"]
    if not isinstance(value, Mapping) or value.get("v") not in READABLE_VERSIONS:
        return fresh
    totals = value.get("totals")
    if type(totals) is not dict or totals.keys() != fresh.keys():
        return fresh
    return dict(totals) if all(type(n) is int and n >= 0 for n in totals.values()) else fresh


def state_for_turn(state: Mapping[str, Any], turn: str | None, scope: str) -> Mapping[str, Any]:
    """The state a call of `turn` is decided against: a settled `state` as `turn` sees it."""
    if state.get("turn") == turn:
        return state
    fresh = _shallow(state)
    _enter_turn(fresh, turn, scope)
    return fresh


# -- the fold: the layers' bookkeeping, one event at a time (no decisions) -----------------------
#
# Stored entries are read and built by position (`state_format.FIELDS` names the positions of
# each row): this runs for every call, on a state checked when it was loaded.

_TURN_FIELDS = {
    "epoch": 0,
    "calls": 0,
    "recent_calls": [],
    "counters": {},
    "results": {},
    "tail": [],
    "cycle": None,
    "background": False,
}
"""What a new turn starts again under `scope="turn"` (copied: the fold appends to them)."""


def _enter_turn(state: dict[str, Any], turn: str | None, scope: str) -> None:
    if state["turn"] == turn:
        return
    state["turn"] = turn
    # A new user message ends any stop (the user asked for something new) and breaks every
    # same-failure row, whatever the scope (it may bring what the failing call was missing).
    state["stop"] = state["reminder"] = None
    state["failures"] = {}
    if scope == "turn":
        for name, start in _TURN_FIELDS.items():
            state[name] = start.copy() if isinstance(start, list | dict) else start


def _bump(mapping: dict[str, Any], key: str, value: Any, cap: int) -> None:
    """Insert `key` as most recently used and evict the least recently used beyond `cap`.

    O(1): a map from `load_state` is within its cap, so one entry at most is evicted. A
    larger map (a state built by hand) is trimmed once, reading only the entries it keeps.
    """
    mapping.pop(key, None)
    mapping[key] = value
    excess = len(mapping) - cap
    if excess == 1:
        del mapping[next(iter(mapping))]
    elif excess > 1:
        kept = trim_map(mapping, cap)
        mapping.clear()
        mapping.update(kept)


def _apply(state: dict[str, Any], ev: Event, cfg: Mapping[str, Any]) -> None:
    """Fold one event into `state` in place (`Event` names its keys; `cfg`: `DEFAULT_CFG`'s)."""
    _enter_turn(state, ev["t"], cfg["scope"])
    key, tool, outcome, batch, replay = ev["k"], ev["n"], ev["o"], ev["b"], ev["c"]
    digest, preview, volatile = ev["h"], ev["p"], ev["v"]
    if batch is not None:
        state["last_batch"] = batch
    state["calls"] += 1
    totals = state["totals"]
    totals["calls"] += 1
    counted = state["counters"].get(key)
    count = (counted[0] if counted else 0) + 1
    _bump(state["counters"], key, [count, tool], MAX_TRACKED_KEYS)

    delivered = state["delivered"]
    if may_have_written(replay, outcome) and batch is not None and batch not in delivered:
        # What really ran, in either mode: the ledger asks it instead of the history.
        delivered.append(batch)
        del delivered[:-MAX_DELIVERED]

    shadowed = ev["r"] is not None and outcome != "denied"
    if shadowed:
        # A call that ran in shadow mode although enforcing would have blocked it (or that
        # shadow mode let another piece answer: a name that does not exist, a stopped
        # batch). Counted; and the loop layers below keep the state enforcing would have,
        # the call as the blocked one it would have been, so that every later call is
        # decided as enforcing decides it (an identical read that ran is no new result,
        # nor a step of a cycle).
        shadow = state["shadow"]
        blocked, stopped = shadow.get(ev["r"], (0, 0))
        if ev["r"] in shadow or len(shadow) < MAX_SHADOW_REASONS:
            shadow[ev["r"]] = [blocked + 1, stopped + ev["x"]]
        ev = {**ev, "o": "denied"}
        outcome = "denied"

    epoch_before = state["epoch"]
    executed = outcome in _EXECUTED
    # A failed write starts a new epoch (reads after it run again) but is no progress: it
    # resets no repeat count and ends no failure streak, so a write failing again and again
    # is still stopped by those layers.
    world_changed = outcome == "success" and replay != "pure"
    progress_resets = cfg["rr"] == "progress"
    if executed:
        state["recent_calls"].append([key, tool, outcome, epoch_before])
        del state["recent_calls"][: -cfg["w"]]
        if ev.get("g"):
            state["background"] = True  # whatever it returned: the job may run on
    if may_have_written(replay, outcome):
        state["epoch"] += 1
    if world_changed and progress_resets:
        # Progress: the agent changed the world, so other calls' repeats start over.
        state["counters"] = {key: state["counters"][key]}

    new_result = False
    if outcome == "success":
        previous = state["results"].get(key)  # [hash, epoch, same in a row, preview(, id)]
        # Something the agent had not seen (among the results the state remembers): progress
        # for the same-failure layer. An empty note or the same listing again is not.
        # Without previews (`store_previews=False`) a result that held something has its
        # digest and no preview; a blank one has the empty preview.
        new_result = (preview is None and digest is not None) or bool(
            preview and not preview.isspace()
        )
        if new_result:
            for memo in state["results"].values():  # a loop: no generator to resume
                if memo[0] == digest:
                    new_result = False
                    break
        same = (
            previous is not None
            and digest is not None
            and previous[0] == digest
            and previous[1] == epoch_before
        )
        if volatile and progress_resets and previous is not None and previous[0] != digest:
            state["counters"][key] = [1, tool]  # a volatile read that changed
        memo = [digest, state["epoch"], previous[2] + 1 if same and previous else 1, preview]
        if "d" in ev:  # four entries as before; the fifth (a call id) only with one
            memo.append(ev["d"])
        _bump(state["results"], key, memo, MAX_RESULTS)
        if same and not ev["s"] and not volatile and cfg["rd"]:
            # Side effects are never suppressed by result-diff: count and remind instead.
            # A poll that keeps its result is waiting, not looping, until its own limit.
            _arm(state, ev, cfg, "same_result", count)

    _track_cycle(state, ev, cfg, executed)
    streak = _track_failures(state, ev, cfg, world_changed or new_result)

    if outcome == "denied" and not shadowed:
        reason = ev["r"] or "denied"
        if streak is not None:
            count = streak  # a same-failure stop counts the failures, not identical calls
        totals["blocked"] += 1
        state["blocked"].append([tool, reason, count])
        del state["blocked"][:-MAX_BLOCKED_LOG]
        if reason != UNKNOWN_TOOL or count > 1:
            # One wrong name is a mistake the error fixes; the second is a loop starting.
            _arm(state, ev, cfg, reason, count)
        if ev["x"]:
            totals["aborts"] += 1
            state["stop"] = {"reason": reason, "tool": tool, "count": count, "args": ev["a"]}


def _arm(
    state: dict[str, Any],
    ev: Event,
    cfg: Mapping[str, Any],
    reason: str,
    count: int,
    detail: str | None = None,
) -> None:
    if cfg["rm"]:
        args = ev["a"] if detail is None else detail
        state["reminder"] = {
            "reason": reason,
            "tool": ev["n"],
            "args": args,
            "count": count,
            "batch": ev["b"],
        }


def _track_failures(
    state: dict[str, Any], ev: Event, cfg: Mapping[str, Any], progress: bool
) -> int | None:
    """The same-failure layer's bookkeeping; returns the streak a same-failure denial extends.

    "In a row" is per tool: each executed call of the tool extends its streak (the same
    failure signature), starts a new one (another failure) or ends it (a success). Calls
    of other tools do not break it, except progress: a successful world-changing call (an
    edit before re-running the tests), or a successful call that returns something new (an
    `ls` of a directory not listed before, between two failed `open`s of directories),
    ends every streak. Timeouts leave it as it is.
    """
    failures = state["failures"]
    tool = ev["n"]
    stored = failures.get(tool)  # [signature, same in a row]
    failure = ev.get("f")  # [signature, limit], only on a failed call the layer watches
    if failure is not None and ev["o"] in {"success", "failure"}:
        signature, limit = failure
        same = stored is not None and stored[0] == signature
        in_a_row = stored[1] + 1 if same and stored is not None else 1
        _bump(failures, tool, [signature, in_a_row], MAX_FAILURE_STREAKS)
        if in_a_row == limit:
            _arm(state, ev, cfg, SAME_FAILURE, in_a_row)
    elif ev["o"] == "success":
        if progress:
            state["failures"] = {}
        else:
            failures.pop(tool, None)
    elif ev["o"] == "denied" and ev["r"] == SAME_FAILURE and stored is not None:
        failures[tool] = [stored[0], stored[1] + 1]
        return int(stored[1] + 1)
    return None


def _track_cycle(state: dict[str, Any], ev: Event, cfg: Mapping[str, Any], executed: bool) -> None:
    key = ev["k"]
    cycle = state["cycle"]
    if cycle is not None:
        state["cycle"] = cycle = dict(cycle)  # never change a dict an older value shares
        if cycle["keys"][cycle["pos"]] == key:
            cycle["pos"] = (cycle["pos"] + 1) % len(cycle["keys"])
            if ev["r"] == "cycle":
                # Denied, or run in shadow mode although enforcing would have denied it:
                # either way the next call of the cycle is its second strike.
                cycle["strikes"] += 1
        else:
            state["cycle"] = cycle = None  # the agent did something else: the loop is broken
    if not executed:
        return
    max_period = cfg["cp"]
    tail = state["tail"]  # [key, result hash, tool]
    tail.append([key, ev["h"] if ev["h"] is not None else ev["o"], ev["n"]])
    del tail[: -2 * max_period]
    if cycle is not None or not cfg["cy"]:
        return
    for period in range(2, min(max_period, len(tail) // 2) + 1):
        if tail[-1 - period] != tail[-1]:
            continue  # cheap test before comparing whole blocks
        block = tail[-period:]
        keys = [item[0] for item in block]
        if block != tail[-2 * period : -period] or len(set(keys)) == 1:
            continue  # no cycle, or a plain repeat: the repeat counter's job
        tools = [item[2] for item in block]
        state["cycle"] = {"keys": keys, "tools": tools, "pos": 0, "strikes": 0}
        _arm(state, ev, cfg, "cycle", 2, " -> ".join(tools))
        return


def _event_order(ev: Event) -> tuple[int, int, str]:
    return (ev["i"], _OUTCOME_RANK.get(ev["o"], -1), repr(sorted(ev.items())))


def _add_to_log(state: dict[str, Any], ev: Event, cfg: Mapping[str, Any]) -> None:
    log = state["log"]
    if log and log[0]["b"] != ev["b"]:
        _fold_log(state, cfg)  # a new batch: the one in progress is over
        log = []
    if not log:
        if ev.get("m") is not None and ev["b"] == state.get("last_batch"):
            return  # a late copy of a write for a batch already complete and folded
        if _complete([ev]):  # a batch of one call: nothing to wait for
            _apply(state, ev, cfg)
        else:
            state["log"] = [ev]
        return
    # One event per position; a re-executed call keeps one deterministic winner, so the
    # result never depends on the order in which LangGraph applied the writes. A new list:
    # the previous channel value may share the old one.
    same_slot = [e for e in log if e["i"] == ev["i"]]
    events = [e for e in log if e["i"] != ev["i"]]
    events.append(max([*same_slot, ev], key=_event_order))
    events.sort(key=_event_order)
    state["log"] = events
    if _complete(events):
        # Every call of the batch reported: fold now, so the stored value (what Studio and
        # get_state show) is settled. The fold sorts by position, so the arrival order of
        # the writes still does not matter.
        _fold_log(state, cfg)


def _complete(events: list[Event]) -> bool:
    size = events[0].get("m")
    return isinstance(size, int) and len(events) == size and events[-1]["i"] == size - 1


def _fold_log(state: dict[str, Any], cfg: Mapping[str, Any]) -> None:
    log = state["log"]
    state["log"] = []
    for ev in log:
        _apply(state, ev, cfg)


def fold_events(state: dict[str, Any], events: list[Event], cfg: Mapping[str, Any]) -> None:
    """Apply events to a state in place.

    Events with a batch id wait in `log` until every call of the batch reported (events
    carry the batch size), a later batch arrives, or `settled` is called; then they are
    applied sorted by their position in the batch: parallel tool calls of one AIMessage
    give the same state whatever order their writes arrive in. `cfg`: the fold settings
    that differ from `DEFAULT_CFG`.
    """
    if state["cfg"] != cfg:
        state["cfg"] = dict(cfg)
    settings = {**DEFAULT_CFG, **cfg} if cfg else DEFAULT_CFG
    for ev in events:
        if ev["b"] is None:
            _fold_log(state, settings)
            _apply(state, ev, settings)
        else:
            _add_to_log(state, ev, settings)


# -- readers: each derives from the one checked state (`_checked`) -------------------------------


def _batch_of(state: Mapping[str, Any]) -> str | None:
    """The id of the batch whose events wait in a checked state's log, if any."""
    log = state["log"]
    batch: str | None = log[0]["b"] if log else None
    return batch


def delivered(value: Any, batch_id: str | None) -> bool:
    """Whether the channel records that a batch's side effects were answered in the thread.

    The guard writes its events in the same checkpoint write as the tools' messages: a
    batch it recorded reached the thread, even if its messages were summarized or cleared
    since. The batch in progress counts too.
    """
    if batch_id is None:
        return False
    state = _checked(value)
    return batch_id in state["delivered"] or _batch_of(state) == batch_id


def batch_in_progress(value: Any) -> str | None:
    """The id of the AIMessage whose calls' events wait in a channel value's log, if any."""
    return _batch_of(_checked(value))


def unrecorded_positions(value: Any, batch_id: str | None, size: int) -> list[int]:
    """Positions of a batch's calls for which the channel holds no event.

    The guard records every call it answers or runs; a call of the batch without an event
    was answered by another piece before it reached the guard.
    """
    if batch_id is None or size <= 0:
        return []
    state = _checked(value)
    if _batch_of(state) == batch_id:
        seen = {e["i"] for e in state["log"]}
        return [i for i in range(size) if i not in seen]
    if state["last_batch"] == batch_id:
        return []  # the whole batch reported and was folded
    return list(range(size))


def settled(value: Any) -> Mapping[str, Any]:
    """A checked channel value with its batch in progress folded in; read-only.

    Never raises: an unreadable value gives the reset state `load_state` gives. Derived
    once per value (`_KNOWN`), since a step reads the same value several times.
    """
    facts = _facts(value)
    state: Mapping[str, Any] | None = facts.get("settled")
    if state is None:
        state = facts["state"]
        if state["log"]:
            folded = _shallow(state)
            _fold_log(folded, {**DEFAULT_CFG, **folded["cfg"]})
            state = folded
        facts["settled"] = state
    return state


class PreviewFacts(NamedTuple):
    """What a channel value keeps of tool results (its result memos, tail and log's events)."""

    held: frozenset[str]  # the non-empty previews (what a scrub may have to drop)
    # Digests of results kept without a preview: where the guard cannot know yet what the
    # model will be given (in `create_agent`, a middleware may still change a result in its
    # `before_model`), the model call adds them (`show_update`).
    unshown: frozenset[str]
    # Every digest. A ToolMessage whose text hashes to none is not what the guard recorded: a
    # middleware changed it after the tool ran (or the guard answered it itself).
    recorded: frozenset[str]
    # The AIMessage id of the last batch the channel folded events of: when the guard's tool
    # hook recorded it, its writes carried the show of the batch before (`given_previews`).
    last_batch: str | None = None


def preview_facts(value: Any) -> PreviewFacts:
    """The `PreviewFacts` of a channel value, derived once per value (`_KNOWN`).

    A model call reads them all of the same value (`ReplayGuardMiddleware._scrub`, `_show`,
    `_given`).
    """
    facts = _facts(value)
    found: PreviewFacts | None = facts.get("previews")
    if found is not None:
        return found
    state = facts["state"]
    held: set[Any] = set()
    unshown: set[Any] = set()
    recorded: set[Any] = set()
    for memo in state["results"].values():  # [hash, epoch, same in a row, preview(, id)]
        digest, preview = memo[0], memo[3]
        recorded.add(digest)
        if preview:
            held.add(preview)
        elif preview is None and digest is not None:
            unshown.add(digest)
    recorded.update([item[1] for item in state["tail"]])  # [key, result hash, tool]
    for ev in state["log"]:
        digest, preview = ev["h"], ev["p"]
        recorded.add(digest)
        held.add(preview)
        if preview is None and ev["o"] == "success":
            unshown.add(digest)
    # Checked: each is a string or None, so dropping None (and the empty preview) leaves the
    # strings, without a comprehension's call per set.
    held.difference_update((None, ""))
    unshown.discard(None)
    recorded.discard(None)
    found = PreviewFacts(
        frozenset(held), frozenset(unshown), frozenset(recorded), state["last_batch"]
    )
    facts["previews"] = found
    return found


# -- the reducer and the writes ------------------------------------------------------------------


def merge_guard_state(current: Any, update: Any) -> dict[str, Any]:
    """Reducer of the guard channel (`Annotated[dict, merge_guard_state]`).

    Deterministic: the updates of one step (the parallel calls of one AIMessage) give the
    same value in any order. Never raises: an unreadable current value is reset (see
    `load_state`), a malformed update is ignored, and both are reported in `notice`.

    Args:
        current: The channel's current value.
        update: A `StateUpdate` written by a guarded node, or a whole guard state (for
            `graph.update_state`).

    Returns:
        The new channel value.
    """
    known = _known(update)
    merges: tuple[tuple[Any, dict[str, Any]], ...] = known.get("merges", ()) if known else ()
    if merges and (current is None or _known(current) is not None):
        # LangGraph merges a step's writes twice with the same objects (once for a
        # conditional edge's fresh read of the state, once into the channel), and the
        # model hook merges its scrub and show writes itself: the same merge again.
        for before, merged in merges:
            if before is current:
                return merged
    op = update.get("op") if isinstance(update, dict | Mapping) else None
    if op in (SCRUB_OP, SHOW_OP):
        edit = _scrubbed if op == SCRUB_OP else _shown
        merged = edit(_results_copy(current), update.get("previews"))
    else:
        merged = _merged(current, update, known if known is not None and "own" in known else None)
    _remember(merged, state=merged)
    if op is not None:
        known = known if known is not None else _remember(update)
        known["merges"] = ((current, merged), *merges[:3])
    return merged


def _merged(current: Any, update: Any, own: dict[str, Any] | None) -> dict[str, Any]:
    if own is not None:  # the guard's own write, unchanged since: its events are checked facts
        events = update["events"]
        if SHOW_OP in update or SCRUB_OP in update:
            edited = _merged_already(current, own["edits"])
            state = (
                load_state(edited)
                if edited is not None
                else _edited(load_state(current), update, events)
            )
        else:
            state = load_state(current)
        return _folded(state, events, update.get("cfg", {}))
    if update is None:
        return load_state(current)
    edited = _first_write(update) and not update.keys() <= _WRITE_KEYS
    if isinstance(update, Mapping) and ("v" in update or edited):
        # A whole state (update_state in Studio, a checkpoint of an older version, a format 2
        # first write): taken as it is when readable, otherwise reported and reset.
        return load_state(update)
    state = load_state(current)
    if not isinstance(update, Mapping) or update.get("op") != "events":
        return _ignored(state, f"that is not a guard update ({type(update).__name__})")
    try:
        events = decode_events(update.get("events", []), "events")
        cfg = decode_cfg(update.get("cfg", {}))
    except InvalidStateError as exc:
        return _ignored(state, f"that is not in the guard's format ({exc})")
    return _folded(_edited(state, update, events), events, cfg)


def _merged_already(current: Any, edits: tuple[Any, ...]) -> Any:
    """The value the model call made by merging these very edits into this very value, if any.

    The model call plans on the channel value with its edits merged (`merge_guard_state`
    remembers each merge); the write that carries them then meets that same value first.
    """
    if not edits or (current is not None and _known(current) is None):
        return None
    for edit in edits:
        known = _known(edit)
        merges = known.get("merges", ()) if known is not None else ()
        current = next((after for before, after in merges if before is current), None)
        if current is None:
            return None
    return current


def _edited(
    state: dict[str, Any], update: Mapping[str, Any], events: list[Event]
) -> dict[str, Any]:
    """`state` (a private copy) with the preview edits a write carries, before its events.

    A show carried by the tools node's writes (one per call of the batch) leaves the
    batch's own events alone: on its own, at the model call, it came before any of them.
    Each of the batch's writes may carry it; applied again, it changes nothing.
    """
    scrub = update.get(SCRUB_OP)
    if scrub is not None:
        state = _scrubbed(state, scrub)
    show = update.get(SHOW_OP)
    if show is not None:
        state = _shown(state, show, events[0]["b"] if events else None)
    return state


def _folded(state: dict[str, Any], events: list[Event], cfg: dict[str, Any]) -> dict[str, Any]:
    """`state` with checked events folded in (`fold_events`)."""
    try:
        fold_events(state, events, cfg)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        # Checked state and events cannot get here; never let a bug brick the thread.
        return _reset(f"the guard state could not be updated ({type(exc).__name__}: {exc})")
    return state


def _ignored(state: dict[str, Any], what: str) -> dict[str, Any]:
    """Keep `state` as it is, noting a write that was ignored."""
    state["notice"] = _bounded(
        f"ignored a write to the guard channel {what}; write guard state only through the guard."
    )
    logger.warning("langgraph-replay-guard: %s", state["notice"])
    return state


SCRUB_OP = "scrub"
"""`op` of a write that drops result previews the thread's messages no longer hold."""

SHOW_OP = "show"
"""`op` of a write that gives results their previews, cut from the messages the model is given."""


def scrub_update(previews: Collection[str]) -> dict[str, Any]:
    """The channel write that drops these previews (each result's digest stays).

    A middleware may change a tool's result after the tool ran (`PIIMiddleware` redacts
    tool results in its `before_model`): the guard then must not keep more of the result
    than the model was given. The integrations find the previews no message holds any
    more and write this.
    """
    return {"op": SCRUB_OP, "previews": sorted(previews)}


def show_update(previews: Mapping[str, str]) -> dict[str, Any]:
    """The channel write that gives results without a preview the one the model was given.

    `previews`: result digest -> the preview, cut from the ToolMessage whose text has that
    digest (a message a middleware changed has another digest: it gets none).
    """
    return {"op": SHOW_OP, "previews": dict(sorted(previews.items()))}


def _results_copy(value: Any) -> dict[str, Any]:
    """A private state for a preview edit (`_shown`, `_scrubbed`)."""
    # Those edits replace entries of `results`, and `log` and `notice` whole: only `results`
    # is copied, not every map and list (`_shallow`).
    state = dict(_checked(value))
    state["results"] = state["results"].copy()
    return state


def _shown(state: dict[str, Any], previews: Any, batch: str | None = None) -> dict[str, Any]:
    """`state` (`_results_copy`) with previews for the results that had none.

    `batch`: the AIMessage id of the events the write carries with it, whose results are
    not the ones the model read (left as they are).
    """
    if not isinstance(previews, Mapping) or not all(
        isinstance(h, str) and isinstance(p, str) for h, p in previews.items()
    ):
        return _ignored(state, "that is not in the guard's format (a preview write without texts)")
    results = state["results"]
    for key, memo in results.items():  # a memo without a call id stays four entries
        if memo[3] is None and memo[0] in previews:
            results[key] = [memo[0], memo[1], memo[2], previews[memo[0]], *memo[4:]]
    if state["log"]:
        state["log"] = [
            {**ev, "p": previews[ev["h"]]}
            if ev["p"] is None and ev["o"] == "success" and ev["h"] in previews and ev["b"] != batch
            else ev
            for ev in state["log"]
        ]
    return state


def _scrubbed(state: dict[str, Any], previews: Any) -> dict[str, Any]:
    """`state` (`_results_copy`) without the given previews."""
    if not isinstance(previews, list) or not all(isinstance(p, str) for p in previews):
        return _ignored(state, "that is not in the guard's format (a scrub without previews)")
    drop = set(previews)
    results = state["results"]
    for key, memo in results.items():
        if memo[3] in drop:
            results[key] = [memo[0], memo[1], memo[2], None, *memo[4:]]
    if state["log"]:
        state["log"] = [{**ev, "p": None} if ev["p"] in drop else ev for ev in state["log"]]
    return state


# -- the typed view ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallCount:
    """How often one distinct call was attempted in the current turn."""

    key: str
    tool: str
    count: int


@dataclass(frozen=True, slots=True)
class RecentCall:
    """One executed call in the dedup window."""

    key: str
    tool: str
    outcome: str
    epoch: int


@dataclass(frozen=True, slots=True)
class GuardTotals:
    """Counts over the whole thread (never reset by a new turn or a state reset).

    Attributes:
        calls: Calls recorded (executed or not).
        blocked: Calls the guard did not execute (denied, short-circuited or aborted).
        aborts: Times the guard stopped the run.
    """

    calls: int
    blocked: int
    aborts: int


@dataclass(frozen=True, slots=True)
class GuardView:
    """A typed, read-only view of the guard channel (what `guard.inspect` returns).

    Fields are named as the channel's keys (what Studio and `replay-guard inspect` show).

    Attributes:
        turn: Id of the user message that opened the current turn.
        epoch: How many world-changing calls the turn has run (failed ones included: they
            may have written part of their effect).
        calls: Calls recorded in the current turn (executed or not).
        recent_calls: The dedup window: recent executed calls, oldest first.
        counters: Repeat counts of recently seen distinct calls, most recent last.
        cycle: Tool names of an active A-B-A-B cycle, or None.
        failures: Same-failure streaks as (tool, failures in a row), most recent last.
        shadow: In shadow mode, what enforcing would have changed, over the whole thread:
            (reason, calls it would have blocked, runs it would have stopped).
        reminder: The reminder text the next model call will get, or None.
        stop: Details of the stop (`reason`, `tool`, `count`, `args`), or None.
        stop_reason: Why the guard stopped the run (`"repeat_limit"`, `"cycle"`...), or None.
        blocked: Recent blocked calls as (tool, reason, count).
        totals: Calls, blocked calls and aborts in the whole thread.
        notice: Set when a corrupt or unreadable channel value was reset, or a write to
            the channel was ignored.
        reset: `{"reason", "at"}` (ISO 8601 UTC) of the last time a corrupt or unreadable
            channel value was reset, or None.
    """

    turn: str | None
    epoch: int
    calls: int
    recent_calls: tuple[RecentCall, ...]
    counters: tuple[CallCount, ...]
    cycle: tuple[str, ...] | None
    reminder: str | None
    stop: Mapping[str, Any] | None
    stop_reason: str | None
    blocked: tuple[tuple[str, str, int], ...]
    totals: GuardTotals
    notice: str | None
    reset: Mapping[str, Any] | None = None
    failures: tuple[tuple[str, int], ...] = ()
    shadow: tuple[tuple[str, int, int], ...] = ()

    @classmethod
    def from_state(cls, state: Mapping[str, Any], reminder_text: str | None) -> GuardView:
        """Build a view of a guard state.

        Args:
            state: A guard state or channel value; it is checked (and an unreadable one
                shown as the state it is reset to), so this never raises.
            reminder_text: The rendered pending reminder, if any.

        Returns:
            The view.
        """
        state = settled(state)
        stop, cycle = state["stop"], state["cycle"]
        return cls(
            turn=state["turn"],
            epoch=state["epoch"],
            calls=state["calls"],
            recent_calls=tuple(RecentCall(*entry) for entry in state["recent_calls"]),
            counters=tuple(CallCount(k, tool, n) for k, (n, tool) in state["counters"].items()),
            cycle=tuple(cycle["tools"]) if cycle else None,
            reminder=reminder_text,
            stop=dict(stop) if stop else None,
            stop_reason=stop["reason"] if stop else None,
            blocked=tuple((tool, reason, n) for tool, reason, n in state["blocked"]),
            totals=GuardTotals(**state["totals"]),
            notice=state["notice"],
            reset=dict(state["reset"]) if state["reset"] else None,
            failures=tuple((tool, n) for tool, (_, n) in state["failures"].items()),
            shadow=tuple((reason, b, s) for reason, (b, s) in state["shadow"].items()),
        )
