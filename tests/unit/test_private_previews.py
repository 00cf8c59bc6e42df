"""What of a result the guard channel keeps: `store_previews` and the scrub write (issue 33)."""

from __future__ import annotations

import json
from typing import Any

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.decisions.engine import Verdict
from langgraph_replay_guard.decisions.state import (
    merge_guard_state,
    preview_facts,
    scrub_update,
)

SECRET = "Customer C1: jane.doe@example.com"


def _held(value: Any) -> frozenset[str]:
    return preview_facts(value).held


def _recorded(value: Any) -> frozenset[str]:
    return preview_facts(value).recorded


def _state(ctl: Any) -> dict[str, Any]:
    state: dict[str, Any] = ctl._state  # the control's own channel value, read as stored
    return state


def test_without_previews_the_channel_keeps_no_result_text() -> None:
    ctl = ReplayGuard(GuardConfig(store_previews=False)).control()
    ctl.record_success("lookup", {"id": "C1"}, result=SECRET)
    assert "jane" not in json.dumps(_state(ctl))
    assert _held(_state(ctl)) == set()
    assert _recorded(_state(ctl)), "the digest stays"
    decision = ctl.evaluate("lookup", {"id": "C1"})
    assert (decision.verdict, decision.reason) == (Verdict.DENY, "duplicate")
    assert decision.previous_result is None
    assert "jane" not in (decision.message or "")


def test_without_previews_a_new_result_is_still_progress_for_the_same_failure_layer() -> None:
    def play(config: GuardConfig) -> list[str | None]:
        ctl = ReplayGuard(config).control()
        reasons = []
        for n in range(12):
            skip, reason = ctl.should_skip("bash", {"c": n})
            reasons.append(reason)
            if skip:
                break
            ctl.record_failure("bash", {"c": n}, "javac: command not found")
            if n % 3 == 2:  # something the agent had not seen: progress
                ctl.record_success("ls", {"n": n}, result=f"listing {n}")
        return reasons

    assert play(GuardConfig(store_previews=False)) == play(GuardConfig())
    assert set(play(GuardConfig(store_previews=False))) == {None}


def test_the_scrub_write_drops_previews_and_keeps_digests() -> None:
    ctl = ReplayGuard().control()
    ctl.record_success("lookup", {"id": "C1"}, result=SECRET)
    ctl.record_success("lookup", {"id": "C2"}, result="Customer C2: no email")
    before = _state(ctl)
    kept = json.dumps(before)
    assert _held(before) == {SECRET, "Customer C2: no email"}
    after = merge_guard_state(before, scrub_update([SECRET]))
    assert _held(after) == {"Customer C2: no email"}
    assert "jane" not in json.dumps(after)
    assert _recorded(after) == _recorded(before)
    assert json.dumps(before) == kept, "the previous value is not changed in place"


def test_a_malformed_scrub_is_ignored_with_a_notice() -> None:
    ctl = ReplayGuard().control()
    ctl.record_success("lookup", {"id": "C1"}, result=SECRET)
    after = merge_guard_state(_state(ctl), {"op": "scrub", "previews": "all"})
    assert _held(after) == {SECRET}
    assert "ignored a write" in after["notice"]
