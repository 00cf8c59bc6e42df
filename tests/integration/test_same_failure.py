"""The same tool failing the same way, arguments varied, is stopped; look-alikes run untouched."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_replay_guard import (
    GuardConfig,
    LoopAbortedError,
    ReplayGuard,
    ReplayGuardState,
    ToolPolicy,
)
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.graphs import ToolRuns

os.environ["LANGSMITH_TRACING"] = "false"
# The writes of the look-alikes are `unsafe`: the ledger's deployment warnings are not the point.
pytestmark = pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")

# A shell prints "command not found" in a normal result: the failure pattern recognizes it.
CONFIG = GuardConfig(
    failure_pattern=r"command not found|\bFAILED\b",
    tools={"write_file": "unsafe"},
)
LIMIT = CONFIG.max_same_failures
# The reminder after LIMIT failures, one more failure, then the stop.
EXECUTED = LIMIT + 1
WARNING = "keeps failing with the same error"
JAVAC = [[("bash", {"command": f"javac -Xflag{n} Main.java"})] for n in range(25)]
CREATE = [
    [("str_replace_editor", {"command": "create", "file_text": f"print({n})\n"})] for n in range(29)
]


CAT_ERRORS = [
    "Is a directory",
    "Permission denied",
    "No such file or directory",
    "Input/output error",
    "File name too long",
]
VIEW_ERRORS = [
    "The path does not exist",
    "The file is binary",
    "The file is too large to view",
    "Permission denied",
    "The path is a directory: give a file",
]


def make_tools(runs: ToolRuns, fixed_after: int = 1_000) -> list[BaseTool]:
    """A shell, an editor and a few tools whose bodies count their runs."""

    @tool
    def bash(command: str) -> str:
        """Run a shell command."""
        runs.hit("bash")
        if command.startswith("javac"):
            return f"bash: line {runs['bash']}: javac: command not found"
        if "pytest" in command:
            if runs["write_file"] >= fixed_after:
                return "2 passed in 0.31s"
            return f"FAILED tests/test_a.py::test_a - AssertionError\n1 failed in 0.{runs['bash']}s"
        if command.startswith("cat"):
            n = int(command[-1])
            msg = f"cat: {command.split()[-1]}: {CAT_ERRORS[n % len(CAT_ERRORS)]}"
            raise ToolException(msg)
        return ""

    @tool
    def str_replace_editor(command: str, path: str = "", file_text: str = "") -> str:
        """View, create and edit files."""
        runs.hit("str_replace_editor")
        if not path:
            msg = f"Parameter `path` is required for command: {command}."
            raise ToolException(msg)
        if command == "view":
            n = int(path[-4])
            msg = f"{VIEW_ERRORS[n % len(VIEW_ERRORS)]}: {path}"
            raise ToolException(msg)
        return f"File created successfully at: {path}"

    @tool
    def write_file(path: str, text: str) -> str:
        """Write a file (prints nothing)."""
        runs.hit("write_file")
        return ""

    @tool
    def search_flights(date: str) -> str:
        """Search flights on a date."""
        runs.hit("search_flights")
        return "[]"

    @tool
    def find_file(name: str) -> str:
        """Find a file by name."""
        runs.hit("find_file")
        msg = f"Invalid glob {name!r}" if "*" in name else f"Error: no file named {name}"
        raise ToolException(msg)

    for each in (bash, str_replace_editor, find_file):
        each.handle_tool_error = True  # answered as an error ToolMessage
    return [bash, str_replace_editor, write_file, search_flights, find_file]


def custom_graph(guard: ReplayGuard, model: ScriptedChatModel, tools: list[BaseTool]) -> Any:
    """A hand-written agent graph with `guard.wrap(ToolNode(...))`."""

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def aagent(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", RunnableLambda(agent, afunc=aagent))
    builder.add_node("tools", guard.wrap(ToolNode(tools)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    return builder.compile(checkpointer=InMemorySaver())


def run(
    integration: str,
    script: list[Any],
    config: GuardConfig = CONFIG,
    *,
    use_async: bool = False,
    fixed_after: int = 1_000,
) -> tuple[ScriptedChatModel, ToolRuns, ReplayGuard, Any, dict[str, Any], Exception | None]:
    """Play `script` on one integration; return the model, the tool runs and the graph."""
    model = ScriptedChatModel(script=script)
    guard = ReplayGuard(config)
    runs = ToolRuns()
    tools = make_tools(runs, fixed_after)
    cfg: dict[str, Any] = {"configurable": {"thread_id": "t"}, "recursion_limit": 500}
    if integration == "middleware":
        graph = create_agent(
            model, tools, middleware=[guard.middleware()], checkpointer=InMemorySaver()
        )
    elif integration == "wrap":
        graph = custom_graph(guard, model, tools)
    else:
        graph = create_agent(model, tools, checkpointer=InMemorySaver())
        cfg["callbacks"] = [guard.callback_handler()]
    inputs = {"messages": [HumanMessage("build it")]}
    error = None
    try:
        if use_async:
            asyncio.run(graph.ainvoke(inputs, cfg))
        else:
            graph.invoke(inputs, cfg)
    except LoopAbortedError as exc:
        error = exc
    return model, runs, guard, graph, cfg, error


def warned(model: ScriptedChatModel) -> list[bool]:
    """For each model call, whether its system prompt carried the same-failure warning."""

    def has_warning(messages: list[BaseMessage]) -> bool:
        return any(isinstance(m, SystemMessage) and WARNING in m.text for m in messages)

    return [has_warning(seen) for seen in model.seen]


LOOPS = {"javac": ("bash", JAVAC), "create": ("str_replace_editor", CREATE)}


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("integration", ["middleware", "wrap"])
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_the_same_failure_with_varied_arguments_is_stopped(loop, integration, use_async):
    tool_name, script = LOOPS[loop]
    model, runs, guard, graph, cfg, error = run(integration, script, use_async=use_async)
    assert error is None, "the run ends gracefully"
    assert runs[tool_name] == EXECUTED, f"{runs[tool_name]} of {len(script)} calls ran"
    view = guard.inspect(graph.get_state(cfg))
    assert view.stop_reason == "same_failure"
    assert view.stop is not None
    assert view.stop["tool"] == tool_name
    assert view.totals.aborts == 1
    final = graph.get_state(cfg).values["messages"][-1]
    assert final.response_metadata["replay_guard_stop"] == "same_failure"
    assert "kept failing with the same error" in final.text
    assert model.calls == EXECUTED + 1, "the model is not called after the stop"
    if integration == "middleware":
        # Reminded once, right after the LIMIT-th failure; the stop comes after one more.
        assert warned(model) == [False] * LIMIT + [True, False]


def test_the_callback_handler_stops_the_javac_loop():
    model, runs, _guard, _graph, _cfg, error = run("callback_handler", JAVAC)
    assert runs["bash"] == EXECUTED
    assert error is not None
    assert error.reason in {"same_failure", "stop_ignored"}
    # The failures, the call that stops the run, and the come-back that raises.
    assert model.calls == EXECUTED + 2, f"{model.calls} model calls"


def test_the_callback_handler_stops_the_create_loop():
    model, runs, _guard, _graph, _cfg, _error = run("callback_handler", CREATE)
    assert runs["str_replace_editor"] == EXECUTED
    # The failures, the call that stops the run, and the come-back that raises.
    assert model.calls == EXECUTED + 2, f"{model.calls} model calls"


def test_exit_behavior_error_raises_with_the_reason():
    config = CONFIG.model_copy(update={"exit_behavior": "error"})
    _model, runs, _guard, _graph, _cfg, error = run("middleware", JAVAC, config)
    assert error is not None
    assert error.reason == "same_failure"
    assert error.tool == "bash"
    assert runs["bash"] == EXECUTED


def test_continue_blocks_then_stops_bounded():
    config = CONFIG.model_copy(update={"exit_behavior": "continue"})
    model, runs, guard, graph, cfg, error = run("middleware", JAVAC, config)
    assert error is None
    assert runs["bash"] == EXECUTED
    # The failures that ran, then blocked attempts until the streak passes twice the limit:
    # that attempt stops the run (the model is not called after it).
    assert model.calls == 2 * LIMIT + 1, f"{model.calls} model calls"
    view = guard.inspect(graph.get_state(cfg))
    assert view.stop_reason == "same_failure"
    assert {reason for _tool, reason, _count in view.blocked} == {"same_failure"}


def test_the_decision_reaches_the_custom_stream():
    model = ScriptedChatModel(script=JAVAC)
    guard = ReplayGuard(CONFIG)
    agent = create_agent(
        model, make_tools(ToolRuns()), middleware=[guard.middleware()], checkpointer=InMemorySaver()
    )
    cfg = {"configurable": {"thread_id": "s"}, "recursion_limit": 500}
    chunks = agent.stream({"messages": [HumanMessage("build")]}, cfg, stream_mode="custom")
    decisions = [c["replay_guard"] for c in chunks if isinstance(c, dict) and "replay_guard" in c]
    assert [(d["tool"], d["verdict"], d["reason"]) for d in decisions] == [
        ("bash", "abort", "same_failure")
    ]


class ToolRunMetadata(BaseCallbackHandler):
    """What a tracer records of each tool run: the guard's decision in its metadata."""

    run_inline = True

    def __init__(self) -> None:
        self.decisions: list[Any] = []

    def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
        self.decisions.append((kwargs.get("metadata") or {}).get("replay_guard"))


def test_the_decision_reaches_the_trace_metadata():
    tracer = ToolRunMetadata()
    model = ScriptedChatModel(script=JAVAC)
    guard = ReplayGuard(CONFIG)
    agent = create_agent(
        model, make_tools(ToolRuns()), middleware=[guard.middleware()], checkpointer=InMemorySaver()
    )
    cfg = {"configurable": {"thread_id": "m"}, "recursion_limit": 500, "callbacks": [tracer]}
    agent.invoke({"messages": [HumanMessage("build")]}, cfg)
    decisions = [(d["verdict"], d["reason"]) for d in tracer.decisions]
    assert decisions == [("allow", None)] * EXECUTED + [("abort", "same_failure")]


def test_a_per_tool_threshold():
    config = CONFIG.model_copy(
        update={"tools": {**CONFIG.tools, "bash": ToolPolicy(max_same_failures=2)}}
    )
    _model, runs, guard, graph, cfg, _error = run("middleware", JAVAC, config)
    assert runs["bash"] == 3
    assert guard.inspect(graph.get_state(cfg)).stop_reason == "same_failure"


@pytest.mark.parametrize(
    "config",
    [
        CONFIG.model_copy(update={"max_same_failures": 0}),
        CONFIG.model_copy(
            update={"tools": {**CONFIG.tools, "bash": ToolPolicy(max_same_failures=0)}}
        ),
    ],
    ids=["global", "per_tool"],
)
def test_the_layer_turned_off(config):
    model, runs, guard, graph, cfg, _error = run("middleware", JAVAC, config)
    assert runs["bash"] == 25
    view = guard.inspect(graph.get_state(cfg))
    assert view.stop_reason is None
    assert view.blocked == ()
    assert not any(warned(model))


# -- look-alikes: every call runs, no reminder, no stop -----------------------------------------

DATES = [[("search_flights", {"date": f"2024-05-{day:02d}"})] for day in range(1, 31)]
WRITES = [[("write_file", {"path": f"pkg/mod_{n}.py", "text": f"X = {n}\n"})] for n in range(20)]
RERUN_TESTS = [
    step
    for n in range(8)
    for step in (
        [("bash", {"command": "python -m pytest -q"})],
        [("write_file", {"path": "src/a.py", "text": f"attempt {n}\n"})],
    )
] + [[("bash", {"command": "python -m pytest -q"})]]
DIFFERENT_FAILURES = [
    step
    for n in range(5)
    for step in (
        [("bash", {"command": f"cat build/{n}"})],
        [("str_replace_editor", {"command": "view", "path": f"/repo/f{n}.py"})],
        [("find_file", {"name": f"*{n}.cfg" if n % 2 else f"conf{n}.yaml"})],
    )
]
LOOKALIKES = {
    "search_over_dates_returning_empty": (DATES, {"search_flights": 30}),
    "different_writes_printing_nothing": (WRITES, {"write_file": 20}),
    "rerunning_tests_after_each_edit": (RERUN_TESTS, {"bash": 9, "write_file": 8}),
    "different_tools_failing": (
        DIFFERENT_FAILURES,
        {"bash": 5, "str_replace_editor": 5, "find_file": 5},
    ),
}


@pytest.mark.parametrize("integration", ["middleware", "wrap", "callback_handler"])
@pytest.mark.parametrize("lookalike", sorted(LOOKALIKES))
def test_lookalikes_run_untouched(lookalike, integration):
    script, expected = LOOKALIKES[lookalike]
    model, runs, guard, graph, cfg, error = run(integration, script, fixed_after=8)
    assert error is None
    assert dict(runs.counts) == expected, "every call ran"
    assert model.calls == len(script) + 1
    assert not any(warned(model)), "no reminder"
    view = guard.inspect(graph.get_state(cfg))
    assert view.stop_reason is None
    assert view.blocked == ()


# -- defaults: the shell preset's own failure pattern, per-tool patterns, progress ---------------

SHELL_ONLY = GuardConfig(tools={"bash": ToolPolicy(preset="shell")})


@pytest.mark.parametrize("integration", ["middleware", "wrap", "callbacks"])
def test_the_shell_preset_alone_stops_the_javac_loop(integration):
    # No failure_pattern configured: "command not found" comes back as a normal result,
    # and the shell preset's own pattern recognizes it.
    model, runs, *_ = run(integration, JAVAC, SHELL_ONLY)
    assert runs["bash"] == EXECUTED, f"{runs['bash']} of {len(JAVAC)} calls ran"
    assert model.calls < len(JAVAC)


def test_without_the_preset_the_javac_loop_runs_to_the_end():
    _, runs, *_ = run("middleware", JAVAC, GuardConfig(tools={"bash": "unsafe"}))
    assert runs["bash"] == len(JAVAC)


def test_a_tool_s_own_failure_pattern():
    # A tool that answers "quota exceeded" in a normal result, whatever the day asked.
    config = GuardConfig(
        tools={"search_flights": ToolPolicy(replay="pure", failure_pattern="quota exceeded")}
    )
    script = [[("search_flights", {"date": f"2026-12-{n:02d}"})] for n in range(1, 20)]
    model = ScriptedChatModel(script=script)
    guard = ReplayGuard(config)
    ran: list[str] = []

    @tool
    def search_flights(date: str) -> str:
        """Search flights on a date."""
        ran.append(date)
        return "error: daily quota exceeded, try again tomorrow"

    agent = create_agent(model, [search_flights], middleware=[guard.middleware()])
    agent.invoke({"messages": [HumanMessage("find a flight")]})
    assert len(ran) == EXECUTED


def test_a_directory_walk_between_failed_opens_is_not_stopped():
    # SWE-agent's `open` on a directory fails ("is a directory"); the model then lists a NEW
    # directory with success, one level deeper each time, until it reaches the file. Each
    # new listing is progress: the failures of `open` never count as a loop.
    depth = 12
    script: list[Any] = []
    for level in range(depth):
        here = "/".join(f"d{n}" for n in range(level + 1))
        script.append([("open", {"path": here})])
        script.append([("bash", {"command": f"ls {here}"})])
    script.append([("open", {"path": "/".join(f"d{n}" for n in range(depth)) + "/Main.java"})])
    opened: list[str] = []

    @tool
    def open(path: str) -> str:
        """Open a file in the viewer."""
        opened.append(path)
        if path.endswith(".java"):
            return "[File: Main.java (3 lines total)]\n1:class Main {}"
        msg = f"Error: {path} is a directory. You can only open files. Use cd or ls."
        raise ToolException(msg)

    @tool
    def bash(command: str) -> str:
        """Run a shell command."""
        return f"{command.split()[-1]}/d_next  README.md"

    open.handle_tool_error = True
    guard = ReplayGuard(GuardConfig(toolkits=["swe-agent"]))
    model = ScriptedChatModel(script=script)
    agent = create_agent(model, [open, bash], middleware=[guard.middleware()])
    out = agent.invoke({"messages": [HumanMessage("find Main.java")]})
    assert opened[-1].endswith("Main.java")
    assert len(opened) == depth + 1
    assert "replay_guard_stop" not in out["messages"][-1].response_metadata


def test_the_same_listing_between_failed_opens_does_not_reset_the_count():
    # A listing that shows the same as before is nothing new, whatever its flags: the
    # failing opens are a loop and are stopped.
    script: list[Any] = []
    for n in range(15):
        script.append([("open", {"path": f"src{n}"})])
        script.append([("bash", {"command": f"ls -w{80 + n} ."})])
    opened: list[str] = []

    @tool
    def open(path: str) -> str:
        """Open a file in the viewer."""
        opened.append(path)
        msg = f"Error: {path} is a directory. You can only open files. Use cd or ls."
        raise ToolException(msg)

    @tool
    def bash(command: str) -> str:
        """Run a shell command."""
        return "src0  src1  README.md"

    open.handle_tool_error = True
    guard = ReplayGuard(GuardConfig(toolkits=["swe-agent"]))
    agent = create_agent(
        ScriptedChatModel(script=script), [open, bash], middleware=[guard.middleware()]
    )
    out = agent.invoke({"messages": [HumanMessage("find Main.java")]})
    assert len(opened) < 15
    assert out["messages"][-1].response_metadata.get("replay_guard_stop") == "same_failure"
