"""A call that starts background work: reads after it are not deduplicated (issue 35).

A job started with `cmd &`, `nohup`, `setsid` or `disown` keeps writing after its call
returned, so the same read again may see something new. Must-not-dedup next to must-dedup.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.decisions.call_class import CallClass
from langgraph_replay_guard.decisions.engine import call_facts, fold_settings, make_event
from langgraph_replay_guard.decisions.state import fold_events, load_state, new_state
from langgraph_replay_guard.decisions.state_format import (
    InvalidStateError,
    decode_events,
)
from langgraph_replay_guard.evaluation import evaluate_trajectories
from langgraph_replay_guard.policy.classify import _shell
from langgraph_replay_guard.testing import ScriptedChatModel

SHELLS = {"mini-swe-agent": "bash", "swe-agent": "bash", "openhands": "execute_bash"}

STARTS_BACKGROUND_WORK = [
    "nohup python server.py > out.log 2>&1 &",
    "python server.py > out.log 2>&1 &",
    "python server.py &",
    "python server.py & sleep 1",
    "cd app && python server.py > out.log &",
    "nohup python server.py",
    "sudo nohup python server.py",
    "setsid python server.py > out.log",
    "python server.py > out.log & disown",
    "(python server.py > out.log &)",
    "(sleep 1; echo ready >> out.log) > /dev/null 2>&1 &",
]
RUNS_IN_THE_FOREGROUND = [
    "python server.py > out.log 2>&1",
    "make && make test",
    "cat out.log 2>&1",
    "ls &> /dev/null",
    "echo nohup",
    "grep '&' out.log",
    "cat out.log |& head",
]


@pytest.mark.parametrize("line", STARTS_BACKGROUND_WORK)
def test_the_shell_classifier_says_the_call_starts_background_work(line):
    assert _shell().classify(line, fallback=CallClass("unsafe")).background


@pytest.mark.parametrize("line", RUNS_IN_THE_FOREGROUND)
def test_a_foreground_command_starts_no_background_work(line):
    assert not _shell().classify(line, fallback=CallClass("unsafe")).background


def _run(tool: str, *calls: tuple[str, str], turn: int | None = None) -> dict:
    return {
        "id": "r",
        "model": "m",
        "calls": [
            {
                "name": tool,
                "args": {"command": c},
                "result": r,
                **({} if turn is None else {"turn": turn}),
            }
            for c, r in calls
        ],
    }


@pytest.mark.parametrize("toolkit", sorted(SHELLS))
@pytest.mark.parametrize("start", STARTS_BACKGROUND_WORK[:5])
def test_a_read_again_after_a_background_job_started_runs(toolkit, start):
    shell = SHELLS[toolkit]
    run = _run(
        shell,
        (start, "[1] 4242"),
        ("cat out.log", "starting"),
        ("cat out.log", "starting\nready"),
        ("cat out.log", "starting\nready\nserving"),
    )
    report = evaluate_trajectories([run], GuardConfig(toolkits=[toolkit]))
    assert report.total.blocked == 0
    assert report.total.wrong == 0


@pytest.mark.parametrize("toolkit", sorted(SHELLS))
def test_a_read_again_after_a_foreground_run_is_still_deduplicated(toolkit):
    shell = SHELLS[toolkit]
    run = _run(
        shell,
        ("python server.py > out.log 2>&1", ""),
        ("cat out.log", "done"),
        ("cat out.log", "done"),
    )
    report = evaluate_trajectories([run], GuardConfig(toolkits=[toolkit]))
    assert report.total.by_reason == {"duplicate": 1}
    assert report.total.wrong == 0


def test_a_new_turn_ends_it_with_the_turn_scope_not_with_the_thread_scope():
    calls = [("python server.py &", ""), ("cat out.log", "a"), ("cat out.log", "a")]
    run = _run("bash", *calls[:1], turn=0)
    run["calls"] += _run("bash", *calls[1:], turn=1)["calls"]
    turn = GuardConfig(toolkits=["mini-swe-agent"])
    assert turn.scope == "turn"
    assert evaluate_trajectories([run], turn).total.by_reason == {"duplicate": 1}
    thread = turn.model_copy(update={"scope": "thread"})
    assert evaluate_trajectories([run], thread).total.blocked == 0


def test_a_read_after_a_background_job_is_still_stopped_when_it_loops():
    # Not deduplicated, still counted: the same log read again and again is stopped.
    run = _run("bash", ("python server.py &", ""), *[("cat out.log", "same")] * 8)
    report = evaluate_trajectories([run], GuardConfig(toolkits=["mini-swe-agent"]))
    assert report.total.aborts == 1
    assert report.total.wrong == 0


# -- engine state ------------------------------------------------------------------------------

CONFIG = GuardConfig(toolkits=["mini-swe-agent"])


def _event(command: str, outcome: str = "success") -> dict:
    facts = call_facts(CONFIG, "bash", {"command": command})
    return make_event(facts, outcome, result="", turn="h1")  # type: ignore[arg-type]


def test_the_event_marks_the_call_and_the_fold_keeps_it():
    started = _event("python server.py &")
    assert started["g"] is True
    assert "g" not in _event("python server.py")
    assert started.get("g") is True
    state = new_state()
    fold_events(state, [_event("ls")], fold_settings(CONFIG))
    assert state["background"] is False
    fold_events(state, [started], fold_settings(CONFIG))
    assert state["background"] is True
    # A denied call started nothing.
    other = new_state()
    denied = make_event(
        call_facts(CONFIG, "bash", {"command": "python server.py &"}), "denied", reason="cycle"
    )
    fold_events(other, [denied], fold_settings(CONFIG))
    assert other["background"] is False


def test_a_state_of_an_earlier_release_loads_without_it():
    state = new_state()
    fold_events(state, [_event("ls")], fold_settings(CONFIG))
    old = copy.deepcopy(state)
    del old["background"]
    assert load_state(old)["background"] is False


@pytest.mark.parametrize("bad", ["yes", 1, [], {}])
def test_a_corrupt_value_is_refused_like_the_others(bad, caplog):
    state = new_state()
    fold_events(state, [_event("python server.py &")], fold_settings(CONFIG))
    assert load_state(copy.deepcopy(state))["background"] is True
    state["background"] = bad
    with caplog.at_level("WARNING", logger="langgraph_replay_guard"):
        loaded = load_state(state)
    assert loaded["reset"]["reason"].startswith("the guard channel is malformed: background")
    assert loaded["background"] is False


@pytest.mark.parametrize("bad", [False, 1, "true", None])
def test_a_corrupt_event_mark_is_refused(bad):
    event = dict(_event("python server.py &"))
    event["g"] = bad
    with pytest.raises(InvalidStateError, match=r"events\[0\]\.g"):
        decode_events([event], "events")


# -- a real agent, a real shell, a real background job ---------------------------------------


def _agent(tmp_path: Path, commands: list[str]):
    ran: list[str] = []

    @tool
    def bash(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=30
        )
        return done.stdout + done.stderr

    model = ScriptedChatModel(script=[[("bash", {"command": c})] for c in commands])
    guard = ReplayGuard(toolkits=["mini-swe-agent"])
    return create_agent(model, [bash], middleware=[guard.middleware()]), ran


def _tool_texts(result: dict) -> list[str]:
    return [m.content for m in result["messages"] if m.type == "tool"]


def test_a_log_a_real_background_job_writes_is_read_again(tmp_path):
    job = "echo starting > out.log; (sleep 0.5; echo ready >> out.log) > /dev/null 2>&1 &"
    commands = [job, "cat out.log", "sleep 1", "cat out.log"]
    agent, ran = _agent(tmp_path, commands)
    texts = _tool_texts(agent.invoke({"messages": [("user", "start it")]}))
    assert ran == commands  # every call ran: the second read is no repeat of the first
    assert texts[1] == "starting\n"
    assert texts[3] == "starting\nready\n"


def test_a_log_written_in_the_foreground_is_answered_from_the_first_read(tmp_path):
    commands = ["echo starting > out.log", "cat out.log", "sleep 0.1", "cat out.log"]
    agent, ran = _agent(tmp_path, commands)
    texts = _tool_texts(agent.invoke({"messages": [("user", "write it")]}))
    assert ran == commands[:3]  # the second read is answered with the first one's result
    assert "starting" in texts[3]
