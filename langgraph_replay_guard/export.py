"""Recorded runs as `replay-guard eval` trajectories: from checkpoint histories and LangSmith."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langgraph_replay_guard import json_depth
from langgraph_replay_guard.evaluation import GUARD_FIELD
from langgraph_replay_guard.integrations.answers import ANSWER_MARK

__all__ = [
    "ExportedThread",
    "LangSmithExportError",
    "parse_langsmith_runs",
    "trajectories_from_langsmith",
    "trajectory_from_history",
]

Trajectory = dict[str, Any]

SUMMARY_SOURCE = "summarization"
"""`additional_kwargs["lc_source"]` of the message LangChain's SummarizationMiddleware writes in
place of the history it summarized: a HumanMessage that is not a user turn."""


_BY_TEXT = "refused"
"""`GUARD_FIELD` of a guard's answer known by its text only: the callback handler's refusals
(a `ToolNode` writes their message) and answers recorded before the guard marked its own."""

# A guard answer without ANSWER_MARK: an error ToolMessage whose text is one of the engine's
# refusals, or the callback handler's error as a ToolNode shows it. Only error answers are
# read this way, so a tool's own success is never taken for one.
_GUARD_TEXT = re.compile(
    r"^(?:Error: ToolCallBlockedError\((?:'|\")?)?(?:Not executed|Stopped): ",
)

# The engine's own wording after that prefix. A tool may fail with the same prefix (a
# `ToolException("Not executed: the card was declined")` under `handle_tool_error=True`
# reads as is): without a phrase the guard writes, an unmarked error is the tool's.
_ENGINE_WORDING = re.compile(
    "|".join(
        re.escape(phrase)
        for phrase in (
            "loop guard",
            "already succeeded with exactly these arguments",
            "identical result again",
            "times with the same arguments in this",
            "round the cycle",
            "is not a valid tool",
            "tools that do not exist",
            "an earlier call in this same batch",
            "an earlier identical call of unsafe tool",
            "Do not retry it with other arguments",
        )
    )
    + r"|^Not executed: Argument '"
)


class LangSmithExportError(ValueError):
    """A LangSmith runs export that cannot be read."""


@dataclass(frozen=True)
class ExportedThread:
    """One thread converted.

    Attributes:
        trajectory: The trajectory (`id`, `model`, `source`, `calls`).
        unanswered: Tool calls left out because no result was found for them: calls that
            never ran (waiting on an interrupt, stopped, or the run ended before the tools).
    """

    trajectory: Trajectory
    unanswered: int


def trajectory_from_history(
    thread_id: str,
    history: Iterable[Sequence[Any]],
    *,
    outcomes: Mapping[str, tuple[Any, bool]] | None = None,
    model: str | None = None,
) -> ExportedThread:
    """Collect every tool call of a thread from its checkpoint history.

    Each checkpoint holds the messages of its time; a middleware such as Summarization may
    have removed or rewritten earlier ones since. Every AIMessage tool call and ToolMessage
    seen in any checkpoint is kept, once (by message id and tool call id), in the order it
    first appeared. A call's user turn is the number of user messages before it, from 0 (the
    message a summarization leaves in place of the history is not a user message).

    A call the guard answered itself (a duplicate answered with the earlier result, a loop
    stop, a refusal) is kept with `GUARD_FIELD` set to the guard's reason: its result is the
    guard's message, not the tool's.

    Args:
        thread_id: The thread, as the trajectory's `id`.
        history: The message lists of the thread's checkpoints, oldest first (anything that
            is not a message is ignored).
        outcomes: Results known from elsewhere (the replay ledger), by tool call id:
            `(result, failed)`, used for calls no ToolMessage answers.
        model: The trajectory's `model`; by default the model name the first AIMessage's
            response metadata gives, else "unknown".

    Returns:
        The trajectory, and how many calls were left out for want of a result.
    """
    seen: set[str] = set()
    users = 0
    calls: dict[str, Trajectory] = {}
    answers: dict[str, tuple[Any, bool]] = {}
    by_guard: dict[str, str] = {}
    found_model: str | None = None
    for messages in history:
        for message in messages:
            if not isinstance(message, BaseMessage):
                continue
            key = _message_key(message)
            if key in seen:
                continue
            seen.add(key)
            if isinstance(message, HumanMessage):
                users += message.additional_kwargs.get("lc_source") != SUMMARY_SOURCE
            elif isinstance(message, AIMessage):
                found_model = found_model or _model_of(message.response_metadata)
                for index, asked in enumerate(message.tool_calls):
                    call_id = asked.get("id") or f"{key}:{index}"
                    calls.setdefault(
                        call_id,
                        {
                            "name": asked["name"],
                            "args": dict(asked["args"]),
                            "turn": max(users - 1, 0),
                        },
                    )
            elif isinstance(message, ToolMessage):
                if message.tool_call_id in answers:
                    continue
                answers[message.tool_call_id] = (message.content, message.status == "error")
                reason = _guard_reason(message)
                if reason is not None:
                    by_guard[message.tool_call_id] = reason
    exported: list[Trajectory] = []
    unanswered = 0
    for call_id, call in calls.items():
        answer = answers.get(call_id) or (outcomes or {}).get(call_id)
        if answer is None:
            unanswered += 1
            continue
        result, failed = answer
        row = {
            "name": call["name"],
            "args": call["args"],
            "result": result,
            "error": failed,
            "turn": call["turn"],
            "tool_call_id": call_id,
        }
        if call_id in by_guard:
            row[GUARD_FIELD] = by_guard[call_id]
        exported.append(row)
    trajectory = {
        "id": thread_id,
        "model": model or found_model or "unknown",
        "source": "langgraph-checkpoint",
        "calls": exported,
    }
    return ExportedThread(trajectory, unanswered)


def _guard_reason(message: ToolMessage) -> str | None:
    """The reason the guard answered a call itself, or None for the tool's own answer."""
    marks = message.response_metadata
    reason = marks.get(ANSWER_MARK) if isinstance(marks, Mapping) else None
    if isinstance(reason, str) and reason:
        return reason
    content = message.content
    if (
        message.status == "error"
        and isinstance(content, str)
        and _GUARD_TEXT.match(content)
        and (content.startswith("Error: ToolCallBlockedError(") or _ENGINE_WORDING.search(content))
    ):
        return _BY_TEXT
    return None


def _message_key(message: BaseMessage) -> str:
    if message.id:
        return f"id:{message.id}"
    if isinstance(message, ToolMessage):
        return f"tool:{message.tool_call_id}"
    if isinstance(message, AIMessage) and message.tool_calls:
        return "ai:" + ",".join(str(c.get("id")) for c in message.tool_calls)
    return f"{message.type}:{message.content!r}"


def _model_of(metadata: Any) -> str | None:
    if not isinstance(metadata, Mapping):
        return None
    for key in ("model_name", "model", "ls_model_name"):
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def parse_langsmith_runs(text: str) -> list[dict[str, Any]]:
    """Read a LangSmith runs export: a JSON array of runs, `{"runs": [...]}`, or JSON lines.

    Args:
        text: The file's text.

    Returns:
        The runs (JSON objects).

    Raises:
        LangSmithExportError: The text is not such an export; the message says where.
    """
    stripped = text.strip()
    if not stripped:
        msg = "the file is empty; export the runs of your project from LangSmith (JSON or JSONL)"
        raise LangSmithExportError(msg)
    runs: list[Any]
    if stripped[0] == "[" or (stripped[0] == "{" and "\n" not in stripped):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            msg = f"not JSON ({json_depth.describe_error(exc, line=True)})"
            raise LangSmithExportError(msg) from None
        if isinstance(data, Mapping) and isinstance(data.get("runs"), list):
            runs = data["runs"]
        else:
            runs = data if isinstance(data, list) else [data]
    else:
        runs = []
        for number, line in enumerate(stripped.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                runs.append(json.loads(line))
            except json.JSONDecodeError as exc:
                msg = (
                    f"line {number} is not JSON ({json_depth.describe_error(exc)}); "
                    "expected a JSON array of runs or one run a line"
                )
                raise LangSmithExportError(msg) from None
    for index, run in enumerate(runs):
        if not isinstance(run, Mapping) or not isinstance(run.get("run_type"), str):
            msg = (
                f"run {index} is not a LangSmith run (a JSON object with 'run_type'); "
                "export runs, not datasets or feedback"
            )
            raise LangSmithExportError(msg)
    return [dict(run) for run in runs]


def trajectories_from_langsmith(runs: Iterable[Mapping[str, Any]]) -> list[Trajectory]:
    """Convert LangSmith runs to trajectories, one per trace, in the order traces first appear.

    A trace's tool calls are its `tool` runs (a tool run inside another tool run is part of
    that call), in execution order (`dotted_order`, else `start_time`). A call's arguments are
    the run's `inputs`; its result the tool's output (the ToolMessage content) or, when the
    run failed, `"Error: <error>"`; its user turn the number of user messages, from 0, in the
    input of the last `llm` run before it. The model is the first `llm` run's model name.

    Args:
        runs: The runs (as `parse_langsmith_runs` reads them).

    Returns:
        The trajectories, with `source` "langsmith" and the trace id as `id`.
    """
    by_id = {str(run.get("id")): run for run in runs if run.get("id") is not None}
    traces: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        traces.setdefault(_trace_of(run, by_id), []).append(run)
    trajectories: list[Trajectory] = []
    for trace_id, members in traces.items():
        ordered = sorted(members, key=_run_order)
        calls: list[Trajectory] = []
        turn, model = 0, None
        for run in ordered:
            if run.get("run_type") == "llm":
                turn = _user_turn(run.get("inputs"), turn)
                model = model or _llm_model(run)
            elif run.get("run_type") == "tool" and not _inside_tool(run, by_id):
                calls.append(_tool_call(run, turn))
        trajectories.append(
            {"id": trace_id, "model": model or "unknown", "source": "langsmith", "calls": calls}
        )
    return trajectories


def _trace_of(run: Mapping[str, Any], by_id: Mapping[str, Mapping[str, Any]]) -> str:
    if run.get("trace_id"):
        return str(run["trace_id"])
    seen: set[str] = set()
    while run.get("parent_run_id") and str(run["parent_run_id"]) in by_id:
        parent = str(run["parent_run_id"])
        if parent in seen:  # a cycle in a hand-made file: stop somewhere stable
            break
        seen.add(parent)
        run = by_id[parent]
    return str(run.get("id", "?"))


def _run_order(run: Mapping[str, Any]) -> tuple[str, str]:
    return (str(run.get("dotted_order") or ""), str(run.get("start_time") or ""))


def _inside_tool(run: Mapping[str, Any], by_id: Mapping[str, Mapping[str, Any]]) -> bool:
    seen: set[str] = set()
    parent = run.get("parent_run_id")
    while parent is not None and str(parent) in by_id and str(parent) not in seen:
        seen.add(str(parent))
        ancestor = by_id[str(parent)]
        if ancestor.get("run_type") == "tool":
            return True
        parent = ancestor.get("parent_run_id")
    return False


def _tool_call(run: Mapping[str, Any], turn: int) -> Trajectory:
    error = run.get("error")
    result, failed = _tool_output(run.get("outputs"))
    if error:
        failed = True
        if result in (None, ""):
            result = f"Error: {error}"
    call: Trajectory = {
        "name": str(run.get("name", "?")),
        "args": _tool_args(run.get("inputs")),
        "result": "" if result is None else result,
        "error": failed,
        "turn": turn,
    }
    if run.get("id") is not None:
        call["run_id"] = str(run["id"])
    return call


def _tool_args(inputs: Any) -> dict[str, Any]:
    """The call's arguments: LangChain records a tool's input dict, or `{"input": "<text>"}`."""
    if not isinstance(inputs, Mapping):
        return {} if inputs is None else {"input": inputs}
    if set(inputs) == {"input"}:
        value = inputs["input"]
        if isinstance(value, str):
            value = _literal(value)
        return dict(value) if isinstance(value, Mapping) else {"input": value}
    return dict(inputs)


def _literal(text: str) -> Any:
    """A dict written as JSON or as a Python literal (LangChain's `str(dict)`), else the text."""
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, Mapping):
            return value
    return text


def _tool_output(outputs: Any) -> tuple[Any, bool]:
    """The tool's result and whether it reports an error: a ToolMessage, in any dump form."""
    value = outputs.get("output", outputs) if isinstance(outputs, Mapping) else outputs
    if isinstance(value, Mapping):
        message = _message_fields(value)
        if "content" in message:
            return message["content"], message.get("status") == "error"
    return value, False


def _message_fields(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A dumped message's fields: LangChain's `dumpd` (`kwargs`), `message_to_dict` (`data`)."""
    for key in ("kwargs", "data"):
        inner = value.get(key)
        if isinstance(inner, Mapping):
            return inner
    return value


def _user_turn(inputs: Any, default: int) -> int:
    messages = inputs.get("messages") if isinstance(inputs, Mapping) else None
    if not isinstance(messages, list):
        return default
    if messages and isinstance(messages[0], list):  # a chat model's batch: the first prompt
        messages = messages[0]
    users = sum(_is_user_message(m) for m in messages if isinstance(m, Mapping))
    return max(users - 1, 0) if users else default


def _is_user_message(message: Mapping[str, Any]) -> bool:
    fields = _message_fields(message)
    extra = fields.get("additional_kwargs")
    if isinstance(extra, Mapping) and extra.get("lc_source") == SUMMARY_SOURCE:
        return False
    ident = message.get("id")
    if isinstance(ident, list) and ident:
        return ident[-1] in ("HumanMessage", "HumanMessageChunk")
    kind = message.get("type", fields.get("type"))
    return kind == "human" or message.get("role") == "user"


def _llm_model(run: Mapping[str, Any]) -> str | None:
    extra = run.get("extra")
    if isinstance(extra, Mapping):
        for key in ("metadata", "invocation_params"):
            found = _model_of(extra.get(key))
            if found:
                return found
    outputs = run.get("outputs")
    if isinstance(outputs, Mapping):
        return _model_of(outputs.get("llm_output"))
    return None
