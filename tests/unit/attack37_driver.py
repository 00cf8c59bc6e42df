"""Replays generated call sequences through the reducer and the engine; prints what they decided.

Run as `python attack37_driver.py < scenarios.json` with the package to test first on
`PYTHONPATH` (the current one, or an old commit's exported by `git archive`): the issue 37
attack (`test_attack_issue37_format.py`) runs it against both and compares the outputs. Uses
only public functions both versions have.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import asdict
from typing import Any

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.decisions.engine import (
    Verdict,
    decide_calls,
    fold_settings,
    make_event,
    state_view,
)
from langgraph_replay_guard.decisions.state import merge_guard_state, own_update, settled


def _as_v2(value: Any) -> Any:
    """The value as format 2 stored it (the batch in progress as `pending`)."""
    if not isinstance(value, dict) or value.get("v") != 3:
        return value
    v2 = copy.deepcopy(value)
    v2["v"] = 2
    log = v2.pop("log")
    v2["pending"] = {"batch": log[0]["b"], "events": log} if log else None
    return v2


def _event(config: GuardConfig, planned: Any, step: dict[str, Any], scripted: list[Any]) -> Any:
    """The event the integrations record for a planned call (`integrations.calls`)."""
    decision = planned.decision
    size = len(step["calls"])
    where = {"batch": step["batch"], "index": planned.index, "turn": step["turn"]}
    if step.get("sized", True):
        where["batch_size"] = size
    if decision.executes:
        outcome, text = scripted[planned.index]
        shadowed = decision.shadowed
        return make_event(
            planned.facts,
            outcome,
            result=text,
            reason=shadowed.reason if shadowed is not None else None,
            abort=shadowed is not None and shadowed.verdict is Verdict.ABORT,
            # As the core keeps them (no messages): `store_previews=None` is True here.
            previews=config.store_previews is not False,
            **where,
        )
    return make_event(
        planned.facts,
        "denied",
        reason=decision.reason,
        abort=decision.verdict is Verdict.ABORT,
        **where,
    )


def run(scenario: dict[str, Any]) -> list[Any]:
    """Every step's decisions, channel value, settled state and view."""
    config = GuardConfig(**scenario["config"])
    guard = ReplayGuard(config)
    value: Any = None
    out: list[Any] = []
    for step in scenario["steps"]:
        if step.get("as_v2"):
            value = merge_guard_state(None, _as_v2(value))  # update_state with a format 2 value
        state = settled(value)
        planned = decide_calls(config, state, step["calls"], step["turn"], batch_id=step["batch"])
        decisions = []
        events = []
        for call in planned:
            d = call.decision
            shown = d.shadowed
            decisions.append(
                [
                    d.verdict.value,
                    d.reason,
                    d.count,
                    d.message,
                    d.previous_result,
                    None if shown is None else [shown.verdict.value, shown.reason, shown.count],
                ]
            )
            events.append(_event(config, call, step, step["results"]))
        # Send fan-out: one write per call, merged in the step's order (or one write).
        cfg = fold_settings(config)
        if step.get("one_write"):
            value = merge_guard_state(value, own_update(cfg, events))
        else:
            for index in step["order"]:
                # A write read back from a checkpoint is a new object: checked again.
                write = own_update(cfg, [events[index]])
                if step.get("reread"):
                    write = json.loads(json.dumps(write))
                value = merge_guard_state(value, write)
        view = asdict(state_view(value))
        view["reset"] = None if view["reset"] is None else "reset"
        out.append(
            {
                "decisions": decisions,
                "value": _stable(value),
                "settled": _stable(dict(settled(value))),
                "view": view,
                "inspect": repr(guard.inspect({"replay_guard": value}))
                if hasattr(guard, "inspect")
                else None,
                "prompt": _prompt(guard, value),
            }
        )
    return out


def _prompt(guard: ReplayGuard, value: Any) -> str:
    """The system prompt's text, or the error it raised (after an ignored stop)."""
    try:
        return str(guard.system_prompt({"replay_guard": value}).content)
    except Exception as exc:
        return f"raised {type(exc).__name__}: {exc}"


def _stable(value: Any) -> Any:
    """JSON of a state without the reset time (`reset.at`), which differs between runs."""
    value = json.loads(json.dumps(value, default=repr))
    if isinstance(value, dict) and isinstance(value.get("reset"), dict):
        value["reset"] = {**value["reset"], "at": "-"}
    return value


def main() -> None:
    scenarios = json.load(sys.stdin)
    results = []
    for scenario in scenarios:
        try:
            results.append(run(scenario))
        except Exception as exc:  # reported, compared like any other output
            results.append(f"raised {type(exc).__name__}: {exc}")
    json.dump(results, sys.stdout, default=repr)


if __name__ == "__main__":
    main()
