"""The conversions behind `replay-guard export`: checkpoint histories and LangSmith runs."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_replay_guard import _compat
from langgraph_replay_guard.evaluation import iter_trajectories
from langgraph_replay_guard.export import (
    LangSmithExportError,
    parse_langsmith_runs,
    trajectories_from_langsmith,
    trajectory_from_history,
)


def _ai(ident: str, *calls: tuple[str, str, dict], model: str | None = None) -> AIMessage:
    return AIMessage(
        content="",
        id=ident,
        tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for i, n, a in calls],
        response_metadata={"model_name": model} if model else {},
    )


def _answer(call_id: str, text: str, status: str = "success") -> ToolMessage:
    return ToolMessage(text, tool_call_id=call_id, id=f"tm-{call_id}", status=status)


def test_calls_summarized_away_are_kept_in_order_with_their_turns():
    h1, h2 = HumanMessage("find A", id="h1"), HumanMessage("and B?", id="h2")
    a1 = _ai("a1", ("c1", "lookup", {"id": "A"}), model="gpt-4.1")
    t1 = _answer("c1", "record A")
    summary = HumanMessage(
        "Here is a summary: A was found.",
        id="s1",
        additional_kwargs={"lc_source": "summarization"},
    )
    a2 = _ai("a2", ("c2", "lookup", {"id": "B"}), ("c3", "fail", {}))
    history = [
        [h1],
        [h1, a1],
        [h1, a1, t1],
        [h1, a1, t1, h2],
        # Summarization replaced everything before the last user message.
        [summary, h2, a2, _answer("c2", "record B"), _answer("c3", "Error: boom", "error")],
    ]
    exported = trajectory_from_history("t-1", history)
    trajectory = exported.trajectory
    assert trajectory["id"] == "t-1"
    assert trajectory["model"] == "gpt-4.1"
    assert [
        (c["tool_call_id"], c["turn"], c["result"], c["error"]) for c in trajectory["calls"]
    ] == [
        ("c1", 0, "record A", False),
        ("c2", 1, "record B", False),
        ("c3", 1, "Error: boom", True),
    ]
    assert exported.unanswered == 0
    # It reads as an eval trajectory.
    malformed: list[tuple[int, str]] = []
    assert list(iter_trajectories([json.dumps(trajectory)], malformed)) == [trajectory]
    assert malformed == []


def test_a_call_without_an_answer_is_left_out_unless_the_ledger_has_its_outcome():
    history = [[HumanMessage("send", id="h"), _ai("a", ("c1", "send", {"to": "x"}))]]
    waiting = trajectory_from_history("t", history, model="m")
    assert waiting.trajectory["calls"] == []
    assert waiting.unanswered == 1
    assert waiting.trajectory["model"] == "m"
    ledgered = trajectory_from_history("t", history, outcomes={"c1": ("sent", False)})
    assert [c["result"] for c in ledgered.trajectory["calls"]] == ["sent"]
    assert ledgered.unanswered == 0


def test_the_first_answer_seen_wins_and_non_messages_are_ignored():
    a = _ai("a", ("c1", "lookup", {"id": "A"}))
    rewritten = ToolMessage("[trimmed]", tool_call_id="c1", id="tm-c1-2")
    history = [[a, _answer("c1", "full record"), RemoveMessage(id="x"), {"not": "a message"}]]
    history.append([a, rewritten])
    (call,) = trajectory_from_history("t", history).trajectory["calls"]
    assert call["result"] == "full record"
    assert call["turn"] == 0


def _run(ident: str, run_type: str, **fields: object) -> dict[str, object]:
    return {"id": ident, "run_type": run_type, "name": ident, **fields}


def test_langsmith_runs_become_one_trajectory_per_trace():
    human = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "HumanMessage"],
    }
    runs = [
        _run("root", "chain", trace_id="T", start_time="2025-01-01T00:00:00"),
        _run(
            "llm",
            "llm",
            trace_id="T",
            parent_run_id="root",
            start_time="2025-01-01T00:00:01",
            inputs={"messages": [[{**human, "kwargs": {"content": "hi"}}, {"role": "user"}]]},
            extra={"metadata": {"ls_model_name": "claude-x"}},
        ),
        # Out of order in the file: ordered by start_time.
        _run(
            "second",
            "tool",
            trace_id="T",
            parent_run_id="root",
            name="lookup",
            start_time="2025-01-01T00:00:03",
            inputs={"input": "not a dict"},
            outputs={"output": {"type": "tool", "data": {"content": "no", "status": "error"}}},
        ),
        _run(
            "first",
            "tool",
            trace_id="T",
            parent_run_id="root",
            name="lookup",
            start_time="2025-01-01T00:00:02",
            inputs={"id": "A"},
            outputs={"output": "record A"},
        ),
        _run(
            "inner", "tool", trace_id="T", parent_run_id="first", start_time="2025-01-01T00:00:02"
        ),
        # A trace without trace_id: grouped under its root.
        _run("root2", "chain"),
        _run("t2", "tool", parent_run_id="root2", name="send", error="Timeout()", outputs=None),
    ]
    first, second = trajectories_from_langsmith(runs)
    assert first["id"] == "T"
    assert first["model"] == "claude-x"
    assert [(c["name"], c["args"], c["result"], c["error"], c["turn"]) for c in first["calls"]] == [
        ("lookup", {"id": "A"}, "record A", False, 1),
        ("lookup", {"input": "not a dict"}, "no", True, 1),
    ]
    assert second["id"] == "root2"
    assert second["model"] == "unknown"
    assert second["calls"] == [
        {
            "name": "send",
            "args": {},
            "result": "Error: Timeout()",
            "error": True,
            "turn": 0,
            "run_id": "t2",
        }
    ]


@pytest.mark.parametrize(
    "text",
    [
        '[{"id": "a", "run_type": "tool", "trace_id": "T"}]',
        '{"runs": [{"id": "a", "run_type": "tool", "trace_id": "T"}]}',
        '{"id": "a", "run_type": "tool", "trace_id": "T"}\n\n',
    ],
)
def test_langsmith_exports_read_as_array_object_or_lines(text):
    assert [run["id"] for run in parse_langsmith_runs(text)] == ["a"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("[1, 2", "not JSON"),
        ('{"id": "a", "run_type": "tool"}\nnope', "line 2 is not JSON"),
        ('[{"id": "a"}]', "run 0 is not a LangSmith run"),
    ],
)
def test_a_file_that_is_not_a_runs_export_is_refused(text, problem):
    with pytest.raises(LangSmithExportError, match=problem):
        parse_langsmith_runs(text)


def test_checkpoint_thread_ids_of_a_saver_without_a_table():
    saver = InMemorySaver()
    for thread in ("a", "b"):
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        checkpoint = {"v": 1, "id": f"1-{thread}", "ts": "", "channel_values": {}}
        checkpoint |= {"channel_versions": {}, "versions_seen": {}}
        saver.put(config, checkpoint, {}, {})
    assert sorted(_compat.checkpoint_thread_ids(saver)) == ["a", "b"]


def test_checkpoint_thread_ids_of_a_sqlite_saver_oldest_first(tmp_path):
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
        for n, thread in enumerate(("z", "a")):
            config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            checkpoint = {"v": 1, "id": f"{n}", "ts": "", "channel_values": {}}
            checkpoint |= {"channel_versions": {}, "versions_seen": {}}
            saver.put(config, checkpoint, {}, {})
        assert _compat.checkpoint_thread_ids(saver) == ["z", "a"]
