"""`replay-guard crashtest` and `testing.crashtest`: real subprocesses killed with SIGKILL."""

from __future__ import annotations

import json
import time

import pytest

from langgraph_replay_guard.cli.main import main
from langgraph_replay_guard.crashtest import CallSeen, CrashTestError, Trial
from langgraph_replay_guard.testing import crashtest

EXAMPLE = "examples/crashtest_agent.py:build_graph"
GRAPHS = "tests.integration.crashtest_graphs"


def _by(report: dict) -> dict[tuple[str, str], dict]:
    return {(t["call"]["tool"], t["point"]): t for t in report["trials"]}


def test_the_example_with_an_unsafe_an_idempotent_and_a_pure_tool_passes(capsys):
    started = time.monotonic()
    status = main(["crashtest", EXAMPLE, "--allow-rerun", "lookup", "--json"])
    report = json.loads(capsys.readouterr().out)
    print(f"crashtest of {EXAMPLE}: {time.monotonic() - started:.1f} s")
    assert status == 0, report
    assert report["ok"]
    assert [(c["tool"], c["replay"]) for c in report["calls"]] == [
        ("lookup", "pure"),
        ("charge_card", "idempotent"),
        ("send_email", "unsafe"),
    ]
    trials = _by(report)
    assert len(trials) == 12
    assert all(t["killed"] for t in trials.values())
    # unsafe: never sent twice; an unknown outcome stops for an operator
    assert trials["send_email", "before_claim"]["starts"] == 1
    assert trials["send_email", "after_claim"]["starts"] == 0
    assert trials["send_email", "after_claim"]["resume"].startswith("ReplayUnsafeError")
    assert trials["send_email", "after_tool"]["starts"] == 1
    assert trials["send_email", "after_tool"]["resume"].startswith("ReplayUnsafeError")
    assert trials["send_email", "after_outcome"]["resume"] == "replayed"
    # idempotent: run again after a crash, with the same key
    charge = trials["charge_card", "after_tool"]
    assert charge["starts"] == 2
    assert charge["keys"][0] == charge["keys"][1]
    assert charge["keys"][0].startswith("rg-")
    assert charge["resume"].startswith("ran again")
    # pure: a crash before its outcome reruns it (allowed here); after it, a replay
    assert trials["lookup", "after_tool"]["starts"] == 2
    assert trials["lookup", "after_outcome"]["resume"] == "replayed"


def test_an_email_tool_declared_pure_is_flagged(capsys):
    status = main(["crashtest", f"{GRAPHS}:email_declared_pure"])
    out = capsys.readouterr().out
    assert status == 1, out
    assert "send_email #1" in out
    assert "declare it unsafe or idempotent if it has a side effect" in out


def test_the_function_reports_the_same_for_pytest():
    report = crashtest(f"{GRAPHS}:email_declared_pure", jobs=2)
    assert not report.ok
    [bad] = report.problems
    assert (bad.point, bad.starts, bad.call.replay) == ("after_tool", 2, "pure")
    assert report.exit_status == 1


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("no_colon_here", "is not FILE_OR_MODULE:FUNCTION"),
        (f"{GRAPHS}:missing", "has no function 'missing'"),
        ("does/not/exist.py:build", "no file"),
        (f"{GRAPHS}:not_a_graph", "returned dict, not a compiled graph"),
        (f"{GRAPHS}:unguarded", "never reached a replay guard's ledger"),
        (f"{GRAPHS}:guard_without_store", "never reached a replay guard's ledger"),
    ],
)
def test_clear_errors_for_a_target_it_cannot_test(target, says, capsys):
    with pytest.raises(CrashTestError, match=says):
        crashtest(target, jobs=1)
    if target == "no_colon_here":
        assert main(["crashtest", target]) == 2
        assert says in capsys.readouterr().err


def _trial(replay: str, keys: tuple[str | None, ...], allowed: bool = False) -> Trial:
    call = CallSeen(tool="t", ordinal=1, replay=replay, args={})
    return Trial(call, "after_tool", True, len(keys), keys, "ran again", allowed_rerun=allowed)


def test_the_verdict_of_a_call_that_started_twice():
    assert _trial("unsafe", (None, None)).problem is not None
    assert _trial("idempotent", ("rg-1", "rg-1")).problem is None
    assert "without its stable key" in str(_trial("idempotent", ("rg-1", "rg-2")).problem)
    assert "declare it unsafe" in str(_trial("pure", (None, None)).problem)
    assert _trial("pure", (None, None), allowed=True).problem is None
    assert _trial("unsafe", (None,)).problem is None


def test_a_resumed_run_that_leaves_the_learning_run_is_not_verified(capsys):
    """Seam 10: a model that restarts its script on resume made the transfer run twice while
    crashtest said ok. Now each such trial names the call that diverged, is not verified,
    and the unsafe body run again under a new tool call id is counted by its arguments."""
    status = main(
        ["crashtest", f"{GRAPHS}:restarting_script", "--allow-rerun", "get_details_by_id"]
    )
    out = capsys.readouterr().out
    assert status == 1, out
    assert "ok:" not in out
    assert "could not be verified" in out
    assert "NOT VERIFIED" in out
    # The read nothing classified is listed (issue 34 item 7).
    assert "default_policy): get_details_by_id. A side effect among them" in out
    report = crashtest(f"{GRAPHS}:restarting_script", allow_rerun=["get_details_by_id"])
    assert not report.ok
    trials = {(t.call.tool, t.point): t for t in report.trials}
    after = trials["transfer_to_human_agents", "after_outcome"]
    assert not after.verified
    assert "a call the learning run never made" in str(after.diverged)
    # the transfer ran in the crashed process and again, under a new id, in the resume
    assert any(
        r.startswith('transfer_to_human_agents({"summary": "roaming issue"}) started 2 times')
        for r in after.reruns
    ), after.reruns
    assert "unsafe: its body ran again" in str(after.problem)
    # the trials that stayed on the learning run's path are verified
    assert trials["transfer_to_human_agents", "after_tool"].verified
    assert len(report.unverified) == 6


def test_the_verdict_of_an_unknown_outcome_that_did_not_surface():
    call = CallSeen(tool="send", ordinal=1, replay="unsafe", args={})
    quiet = Trial(call, "after_tool", True, 1, (None,), "went on", surfaced=False)
    assert "instead of raising or stopping at an interrupt" in str(quiet.problem)
    loud = Trial(call, "after_tool", True, 1, (None,), "ReplayUnsafeError", surfaced=True)
    assert loud.problem is None
    off_path = Trial(call, "after_tool", True, 1, (None,), "went on", diverged="x", surfaced=True)
    assert not off_path.verified
    assert str(off_path.problem).startswith("not verified: x")


def test_compare_unguarded_reports_a_clean_run_the_guard_changed(capsys):
    status = main(
        [
            "crashtest",
            f"{GRAPHS}:changed_by_the_guard",
            "--compare-unguarded",
            "--point",
            "before_claim",
            "--allow-rerun",
            "get_details_by_id",
        ]
    )
    out = capsys.readouterr().out
    assert status == 1, out
    assert "- without the guard: its tool calls were" in out
    assert "ok:" not in out
