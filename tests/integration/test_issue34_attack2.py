"""Issue 34 items 4, 7, 8 attacked as merged: shapes the first tests did not cover.

- 4: one guard over several `create_agent` agents (the documented pattern for sub-agents and
  supervisor workers: one guard, one middleware per agent), the agent without the configured
  name built first. That is the two-`ToolNode` setup of the issue with agents: it must run.
- 7: `require_classes=True` must refuse an unclassified tool wherever the guard stands.
- 8: the guard's factories (`guard.middleware()`, `guard.callback_handler()`) refuse a
  `GuardConfig` option with a message that names where it goes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Annotated, Any, NotRequired

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt.chat_agent_executor import AgentState

from langgraph_replay_guard import GuardConfig, ReplayGuard, ReplayGuardWarning, merge_guard_state
from langgraph_replay_guard.testing import ScriptedChatModel

# (the tool of the agent built first, the tool of the agent built next: named by the config)
PAIRS = [("get_order", "set_order"), ("send_email", "send_emails"), ("read_file", "write_file")]


def _tool(name: str, effects: list[str]) -> BaseTool:
    def body(key: str) -> str:
        effects.append(f"{name}:{key}")
        return f"{name} done for {key}"

    return tool(name, description=f"The {name} tool.")(body)


def _agent(guard: ReplayGuard, name: str, effects: list[str]) -> Any:
    model = ScriptedChatModel(script=[[(name, {"key": "1"})]])
    return create_agent(model, [_tool(name, effects)], middleware=[guard.middleware(name=name)])


@pytest.mark.parametrize("first_built", ["without_the_name", "with_the_name"])
@pytest.mark.parametrize(("other", "named"), PAIRS)
def test_one_guard_over_two_agents_runs_whichever_is_built_first(
    other: str, named: str, first_built: str
) -> None:
    # docs/using-it-with.md: "One ReplayGuard for the application ... one middleware per
    # agent". The guard cannot know at the first agent's run that the next has `named`.
    effects: list[str] = []
    guard = ReplayGuard(GuardConfig(tools={named: "unsafe"}))
    order = [other, named] if first_built == "without_the_name" else [named, other]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agents = {name: _agent(guard, name, effects) for name in order}
        for name in order:
            out = agents[name].invoke({"messages": [HumanMessage("go")]})
            assert out["messages"][-1].content == "Done."
    assert effects == [f"{name}:1" for name in order]
    near = [
        str(w.message)
        for w in caught
        if issubclass(w.category, ReplayGuardWarning) and f"policy for {named!r}" in str(w.message)
    ]
    # Issue 37 item 1: `create_agent` tells a middleware nothing when it builds the agent, so
    # each middleware learns its agent's tools at its first model call. The agent without the
    # name runs first while another middleware of the guard has not run: one warning.
    assert len(near) == (1 if first_built == "without_the_name" else 0), near
    if near:
        assert f"did you mean {other!r}?" in near[0]


@pytest.mark.parametrize(("other", "named"), PAIRS)
def test_a_typo_in_one_agent_of_a_guard_stops_it_at_its_first_call(other: str, named: str) -> None:
    # The same guard and agent, but no agent has the configured name: a typo, stopped before
    # any tool runs, at every invoke until it is fixed.
    effects: list[str] = []
    guard = ReplayGuard(GuardConfig(tools={named: "unsafe"}))
    agent = _agent(guard, other, effects)
    for _ in range(2):
        with pytest.raises(ValueError, match=f"did you mean {other!r}") as raised:
            agent.invoke({"messages": [HumanMessage("go")]})
        assert "strict_tool_names=False" in str(raised.value)
    assert effects == []


def test_an_unclassified_tool_of_two_agents_is_listed_once_per_guard() -> None:
    from langgraph_replay_guard import UnclassifiedToolsWarning

    guard = ReplayGuard(GuardConfig(tools={"send_email": "unsafe"}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agents = [_agent(guard, "lookup", []) for _ in range(3)]  # a sub-agent each
        for agent in agents:
            agent.invoke({"messages": [HumanMessage("go")]})
    listed = [str(w.message) for w in caught if issubclass(w.category, UnclassifiedToolsWarning)]
    assert len(listed) == 1, listed
    assert "'lookup'" in listed[0]


# --- 8: the guard's factories name where a GuardConfig option goes -----------------------

FACTORY_CASES = [
    # (factory, keyword, what the message must say)
    ("middleware", "max_repeat", "Did you mean 'max_repeats'? 'max_repeats' is a GuardConfig"),
    ("middleware", "max_repeats", "'max_repeats' is a GuardConfig option"),
    ("middleware", "nmae", "Did you mean 'name'?"),
    ("callback_handler", "max_thread", "Did you mean 'max_threads'?"),
    ("callback_handler", "mode", "'mode' is a GuardConfig option"),
    ("callback_handler", "tols", "Did you mean 'tools'?"),
]


@pytest.mark.parametrize(("factory", "keyword", "said"), FACTORY_CASES)
def test_the_guard_factories_name_the_fix_for_a_config_option(
    factory: str, keyword: str, said: str
) -> None:
    guard = ReplayGuard()
    with pytest.raises(TypeError) as raised:
        getattr(guard, factory)(**{keyword: 3})
    text = str(raised.value)
    head = f"ReplayGuard.{factory}() got an unexpected keyword argument {keyword!r}."
    assert text.startswith(head)
    assert said in text, text
    if "GuardConfig option" in said:
        assert "ReplayGuard(...)" in text  # where the option goes


# --- 7: require_classes wherever the guard stands ------------------------------------------


class _OrderDesk(AgentMiddleware[Any, Any]):
    """Offers `set_order` to the model and answers its calls itself (no tools node has it)."""

    def __init__(self, effects: list[str]) -> None:
        super().__init__()
        self.effects = effects
        self.offered = _tool("set_order", effects)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request.override(tools=[*request.tools, self.offered]))

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        if call["name"] != "set_order":
            return handler(request)
        self.effects.append(f"desk:{call['args']['key']}")
        return ToolMessage("order set", tool_call_id=call["id"], name="set_order")


class _AsyncOrderDesk(_OrderDesk):
    """`_OrderDesk` with the async hooks."""

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return await handler(request.override(tools=[*request.tools, self.offered]))

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        if request.tool_call["name"] != "set_order":
            return await handler(request)
        return self.wrap_tool_call(request, handler)


@pytest.mark.parametrize(
    "guard_at",
    [
        "first",
        "last",
    ],
)
def test_require_classes_refuses_a_tool_a_middleware_serves(guard_at: str) -> None:
    effects: list[str] = []
    guard = ReplayGuard(GuardConfig(tools={"get_order": "pure"}, require_classes=True))
    desk = _OrderDesk(effects)
    middleware = [guard.middleware(), desk] if guard_at == "first" else [desk, guard.middleware()]
    script = [[("get_order", {"key": "1"})], [("set_order", {"key": "1"})]]
    agent = create_agent(
        ScriptedChatModel(script=script), [_tool("get_order", effects)], middleware=middleware
    )
    refused: ValueError | None = None
    try:
        agent.invoke({"messages": [HumanMessage("go")]})
    except ValueError as error:
        refused = error
    assert refused is not None, effects
    assert "require_classes=True" in str(refused)
    assert "desk:1" not in effects


def test_require_classes_refuses_a_tool_a_middleware_inside_serves_async() -> None:
    import asyncio

    effects: list[str] = []
    guard = ReplayGuard(GuardConfig(tools={"get_order": "pure"}, require_classes=True))
    script = [[("get_order", {"key": "1"})], [("set_order", {"key": "1"})]]
    agent = create_agent(
        ScriptedChatModel(script=script),
        [_tool("get_order", effects)],
        middleware=[guard.middleware(), _AsyncOrderDesk(effects)],
    )
    with pytest.raises(ValueError, match=r"require_classes=True") as refused:
        asyncio.run(agent.ainvoke({"messages": [HumanMessage("go")]}))
    assert "'set_order'" in str(refused.value)
    assert "a middleware inside the guard" in str(refused.value)
    assert effects == []


@pytest.mark.parametrize("called", ["set_order", "made_up"])
def test_require_classes_runs_a_classified_tool_a_middleware_inside_serves(called: str) -> None:
    # Classified, the served tool runs; a made-up name is still the tools node's to answer.
    effects: list[str] = []
    guard = ReplayGuard(
        GuardConfig(tools={"get_order": "pure", "set_order": "unsafe"}, require_classes=True)
    )
    script = [[(called, {"key": "1"})]]
    agent = create_agent(
        ScriptedChatModel(script=script),
        [_tool("get_order", effects)],
        middleware=[guard.middleware(), _OrderDesk(effects)],
    )
    out = agent.invoke({"messages": [HumanMessage("go")]})
    answer = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    if called == "set_order":
        assert (effects, answer.text) == (["desk:1"], "order set")
    else:
        assert effects == []
        assert "made_up is not a valid tool" in answer.text


# --- 10: a database of another application whose table has LangGraph's name ---------------

# (the other application's tables, what the refusal says it lacks)
OTHER_APPS = [
    (
        ["CREATE TABLE checkpoints (id INTEGER PRIMARY KEY, name TEXT)"],
        "its 'checkpoints' table is another application's: it has no 'thread_id' column",
    ),
    (
        [
            "CREATE TABLE checkpoints (thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, "
            "checkpoint BLOB, metadata BLOB)"
        ],
        "it has no 'writes' table",
    ),
]


def _cli(*args: object, timeout: float = 300) -> Any:
    import os
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(root)}
    from tests import warm_children

    command = [sys.executable, "-m", "langgraph_replay_guard.cli.main", *map(str, args)]
    return warm_children.run(
        command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _refused(done: Any, command: str, db: object, lacks: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        f"replay-guard {command}: {db} is not a LangGraph checkpoint database ({lacks}): give "
        "--db the database your graph's checkpointer (SqliteSaver, PostgresSaver) writes to"
    ]
    assert done.stdout == ""


@pytest.mark.parametrize(("tables", "lacks"), OTHER_APPS)
@pytest.mark.parametrize("command", ["inspect", "export"])
def test_an_sqlite_file_of_another_app_with_a_checkpoints_table_is_refused(
    tmp_path: Any, command: str, tables: list[str], lacks: str
) -> None:
    import sqlite3

    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        for statement in tables:
            conn.execute(statement)
    output = tmp_path / "out.jsonl"
    args = ["--thread", "t"] if command == "inspect" else ["-o", output]
    _refused(_cli(command, "--db", db, *args), command, db, lacks)
    assert not output.exists()  # nothing written on failure


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["inspect", "export"])
def test_a_postgres_database_of_another_app_with_a_checkpoints_table_is_refused(
    tmp_path: Any, pg_uri: str, command: str
) -> None:
    import psycopg

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(OTHER_APPS[0][0][0].replace("INTEGER PRIMARY KEY", "SERIAL PRIMARY KEY"))
    output = tmp_path / "out.jsonl"
    args = ["--thread", "t"] if command == "inspect" else ["-o", output]
    done = _cli(command, "--db", pg_uri, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "its 'checkpoints' table is another application's: it has no 'thread_id'" in (
        done.stderr
    )
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not output.exists()


# --- 11: export marks the guard's answers, and only them ------------------------------------

SCRIPTS: dict[str, list[list[tuple[str, dict[str, Any]]]]] = {
    "repeat": [[("lookup", {"id": "P1"})]] * 8,
    "unknown_tool": [[("lokup", {"id": "P1"})]] * 8,
    "cycle": [[("lookup", {"id": "P1"})], [("status", {"id": "P1"})]] * 6,
}


def _history_of(mode: str, script: list[list[tuple[str, dict[str, Any]]]]) -> list[list[Any]]:
    from langgraph.checkpoint.memory import InMemorySaver

    @tool
    def lookup(id: str) -> str:
        """Look up a plan."""
        return f"plan {id}"

    @tool
    def status(id: str) -> str:
        """A plan's status."""
        return "active"

    model = ScriptedChatModel(script=script)
    guard = ReplayGuard(GuardConfig(mode=mode))
    agent = create_agent(
        model, [lookup, status], middleware=[guard.middleware()], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("go")]}, config)
    return [s.values.get("messages", []) for s in reversed(list(agent.get_state_history(config)))]


def _unmarked(history: list[list[Any]]) -> list[list[Any]]:
    """The history as a guard that did not mark its answers yet wrote it (old files)."""
    from langgraph_replay_guard.integrations.answers import ANSWER_MARK

    def strip(message: Any) -> Any:
        if isinstance(message, ToolMessage) and ANSWER_MARK in message.response_metadata:
            marks = {k: v for k, v in message.response_metadata.items() if k != ANSWER_MARK}
            return message.model_copy(update={"response_metadata": marks})
        return message

    return [[strip(m) for m in messages] for messages in history]


@pytest.mark.parametrize("mode", ["enforce", "shadow"])
@pytest.mark.parametrize("stop", sorted(SCRIPTS))
def test_export_marks_exactly_the_guards_answers_marked_or_old(stop: str, mode: str) -> None:
    from langgraph_replay_guard.evaluation import GUARD_FIELD
    from langgraph_replay_guard.export import trajectory_from_history
    from langgraph_replay_guard.integrations.answers import ANSWER_MARK

    history = _history_of(mode, SCRIPTS[stop])
    answered = {
        m.tool_call_id
        for messages in history
        for m in messages
        if isinstance(m, ToolMessage) and ANSWER_MARK in m.response_metadata
    }
    assert (len(answered) > 0) == (mode == "enforce")  # shadow mode answers nothing
    calls = trajectory_from_history("t", history).trajectory["calls"]
    assert {c["tool_call_id"] for c in calls if GUARD_FIELD in c} == answered
    # Unmarked (old files): every answer in the engine's wording is still found. The first
    # call to a tool that does not exist is answered by the ToolNode's own text ("Error: lokup
    # is not a valid tool"), which only the mark tells.
    worded = {
        c["tool_call_id"]
        for c in calls
        if c["tool_call_id"] in answered and not str(c["result"]).startswith("Error: ")
    }
    calls = trajectory_from_history("t", _unmarked(history)).trajectory["calls"]
    assert {c["tool_call_id"] for c in calls if GUARD_FIELD in c} == worded
    assert len(worded) >= len(answered) - 1


def test_a_tools_own_error_worded_like_a_refusal_is_not_the_guards() -> None:
    from langchain_core.tools import ToolException
    from langgraph.checkpoint.memory import InMemorySaver

    from langgraph_replay_guard.evaluation import GUARD_FIELD
    from langgraph_replay_guard.export import trajectory_from_history

    @tool
    def pay(card: str) -> str:
        """Pay with a card."""
        msg = "Not executed: the card was declined"
        raise ToolException(msg)

    pay.handle_tool_error = True  # the tool's own error message, as written
    model = ScriptedChatModel(script=[[("pay", {"card": "1"})]])
    guard = ReplayGuard(GuardConfig(tools={"pay": "unsafe"}))
    agent = create_agent(
        model, [pay], middleware=[guard.middleware()], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "p"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no store, no durable checkpointer: not the point
        agent.invoke({"messages": [HumanMessage("pay")]}, config)
    states = reversed(list(agent.get_state_history(config)))
    history = [state.values.get("messages", []) for state in states]
    (call,) = trajectory_from_history("p", history).trajectory["calls"]
    assert call["result"] == "Not executed: the card was declined"
    assert call["error"] is True
    assert GUARD_FIELD not in call  # eval scores it: the guard never answered this call


def test_one_callback_handler_checked_over_two_agents_together_runs() -> None:
    from langgraph_replay_guard import ReplayGuardCallbackHandler

    effects: list[str] = []
    handler = ReplayGuardCallbackHandler(GuardConfig(tools={"set_order": "unsafe"}))
    agents = {}
    for name in ("get_order", "set_order"):
        model = ScriptedChatModel(script=[[(name, {"key": "1"})]])
        agents[name] = create_agent(model, [_tool(name, effects)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checked = handler.check(*agents.values())
    assert checked is handler
    assert not [w for w in caught if "policy for 'set_order'" in str(w.message)]
    for name, agent in agents.items():
        config: Any = {"callbacks": [handler], "metadata": {"thread_id": name}}
        agent.invoke({"messages": [HumanMessage("go")]}, config)
    assert effects == ["get_order:1", "set_order:1"]


def test_a_check_of_one_agent_names_checking_them_together() -> None:
    from langgraph_replay_guard import ReplayGuardCallbackHandler

    handler = ReplayGuardCallbackHandler(GuardConfig(tools={"set_order": "unsafe"}))
    agent = create_agent(ScriptedChatModel(script=[]), [_tool("get_order", [])])
    with pytest.raises(ValueError, match="did you mean 'get_order'") as raised:
        handler.check(agent)
    assert "handler.check(agent, other_agent)" in str(raised.value)
    with pytest.raises(TypeError, match=r"check\(agent\)"):
        handler.check()


# --- 8: the configuration classes as the docs write them pass mypy --strict -----------------

DOCUMENTED_FORMS = """\
from langgraph_replay_guard import ClassRule, GuardConfig, ToolPolicy
GuardConfig(tools={"send_email": "unsafe"}, toolkits=["deepagents"], max_repeats=2)
GuardConfig(tools={"run": {"replay": "unsafe"}}, default_policy={"replay": "unsafe"})
ToolPolicy(replay="idempotent", ignore_args=["trace_id"], no_effect_errors=["GraphInterrupt"])
ToolPolicy(classify=[ClassRule(arg="command", prefixes=["git status"], replay="pure")])
GuardConfig(tools={"send_email": ToolPolicy(replay="unsafe")}).tools["send_email"].replay
"""
MISSPELT_FORMS = """\
GuardConfig(max_repeat=3)
ToolPolicy(replya="unsafe")
ClassRule(prefixes=["git "])
GuardConfig(tools={"send_email": "unsaef"})
"""


def test_the_configuration_classes_as_documented_pass_mypy_strict(
    tmp_path: Any, mypy_cache_dir: Any
) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    snippet = tmp_path / "configured.py"
    snippet.write_text(DOCUMENTED_FORMS + MISSPELT_FORMS, encoding="utf-8")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "mypy", "--strict", "--no-error-summary"),
            *("--cache-dir", str(mypy_cache_dir), str(snippet)),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "MYPYPATH": str(root)},
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    documented = DOCUMENTED_FORMS.count("\n")
    # The documented forms (a replay class as a string, lists, mappings) pass...
    assert [e for e in errors if int(e.split(":")[1]) <= documented] == [], done.stdout
    # ...and each misspelt one is still caught (a key, a value, a required rule argument).
    lines = {int(e.split(":")[1]) for e in errors}
    assert lines == set(range(documented + 1, documented + 1 + MISSPELT_FORMS.count("\n")))


def test_the_typed_inputs_name_every_field() -> None:
    import typing

    from langgraph_replay_guard import ClassRule, ToolPolicy
    from langgraph_replay_guard.policy.config import ClassRuleOptions, ToolPolicyOptions

    for model, options in ((ToolPolicy, ToolPolicyOptions), (ClassRule, ClassRuleOptions)):
        hints = typing.get_type_hints(options, include_extras=True)
        assert list(hints) == list(model.model_fields)
        required = {n for n, f in model.model_fields.items() if f.is_required()}
        assert {n for n, h in hints.items() if typing.get_origin(h) is typing.Required} == required


# --- 6: the channel declared in a sub-graph only ---------------------------------------------


def _sub_graph_app(parent_state: Any, runs: list[str], *, times: int = 10) -> Any:
    """A parent graph whose `tools` node is a sub-graph running a guarded ToolNode."""
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.prebuilt import ToolNode

    from langgraph_replay_guard import ReplayGuardState

    @tool
    def lookup(id: str) -> str:
        """Look a plan up."""
        runs.append(id)
        return "premium plan"

    guard = ReplayGuard(GuardConfig(tools={"lookup": "pure"}))
    model = ScriptedChatModel.looping("lookup", {"id": "1"}, times=times)
    tools_graph = StateGraph(ReplayGuardState)
    tools_graph.add_node("tools", guard.wrap(ToolNode([lookup])))
    tools_graph.add_edge(START, "tools")

    def agent(state: Any) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: Any) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    parent = StateGraph(parent_state)
    parent.add_node("agent", agent)
    parent.add_node("tools", tools_graph.compile())
    parent.add_edge(START, "agent")
    parent.add_conditional_edges("agent", route, ["tools", END])
    parent.add_edge("tools", "agent")
    return parent.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_channel_declared_in_a_sub_graph_only_is_not_silently_reset(mode: str) -> None:
    import asyncio

    from langgraph.graph import MessagesState

    runs: list[str] = []
    graph = _sub_graph_app(MessagesState, runs)
    config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 100}
    inputs = {"messages": [HumanMessage("go")]}
    # Refused at the second call (the first is a first call), naming the line to write.
    run = graph.invoke if mode == "sync" else lambda *a: asyncio.run(graph.ainvoke(*a))
    with pytest.raises(ValueError, match="the parent graph's state has no 'replay_guard'") as e:
        run(inputs, config)
    assert "node 'tools' of its parent graph" in str(e.value)
    assert "merge_guard_state" in str(e.value)
    assert runs == ["1"]


def test_a_parent_that_declares_the_channel_is_guarded_across_its_steps() -> None:
    from langgraph_replay_guard import ReplayGuardState

    runs: list[str] = []
    graph = _sub_graph_app(ReplayGuardState, runs)
    config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 100}
    from langgraph_replay_guard import LoopAbortedError

    # The repeats are answered from the first run, then the loop is stopped (a static
    # `tools -> agent` edge: the come-back raises, as in any graph built that way).
    with pytest.raises(LoopAbortedError, match="on 'lookup'"):
        graph.invoke({"messages": [HumanMessage("go")]}, config)
    assert runs == ["1"]


class _WorkerState(AgentState):  # type: ignore[misc]
    """A `create_react_agent` state with the guard channel."""

    replay_guard: NotRequired[Annotated[dict[str, Any] | None, merge_guard_state]]


def test_a_worker_agent_sub_graph_run_again_by_its_parent_stays_silent() -> None:
    # A create_react_agent worker (guard.wrap) as a node of a MessagesState parent that runs
    # it twice: it loops inside each run with its own channel, as before.

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, create_react_agent

    runs: list[str] = []

    @tool
    def lookup(id: str) -> str:
        """Look a plan up."""
        runs.append(id)
        return "premium plan"

    guard = ReplayGuard(GuardConfig(tools={"lookup": "pure"}))
    model = ScriptedChatModel(script=[[("lookup", {"id": "1"})], [], [("lookup", {"id": "2"})], []])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in LangGraph 1
        worker = create_react_agent(
            model, guard.wrap(ToolNode([lookup])), state_schema=_WorkerState
        )
    visits: list[int] = []

    def again(state: Any) -> str:
        visits.append(1)
        return "worker" if len(visits) < 2 else END

    parent = StateGraph(MessagesState)
    parent.add_node("worker", worker)
    parent.add_edge(START, "worker")
    parent.add_conditional_edges("worker", again, ["worker", END])
    graph = parent.compile(checkpointer=InMemorySaver())
    graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t"}})
    assert runs == ["1", "2"]


def test_a_fresh_sub_graph_run_per_call_of_a_task_tool_stays_silent() -> None:
    # deepagents' `task` shape with guard.wrap: a tool of the parent runs a guarded
    # ToolNode sub-graph on new messages each time; its channel is fresh, and rightly so.
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import ToolNode

    from langgraph_replay_guard import ReplayGuardState

    runs: list[str] = []

    @tool
    def lookup(id: str) -> str:
        """Look a plan up."""
        runs.append(id)
        return "premium plan"

    guard = ReplayGuard(GuardConfig(tools={"lookup": "pure", "task": "pure"}))
    inner = StateGraph(ReplayGuardState)
    inner.add_node("tools", guard.wrap(ToolNode([lookup])))
    inner.add_edge(START, "tools")
    worker = inner.compile()

    @tool
    def task(description: str) -> str:
        """Hand a task to a worker."""
        call = AIMessage("", tool_calls=[{"name": "lookup", "args": {"id": "1"}, "id": "w1"}])
        done = worker.invoke({"messages": [HumanMessage(description), call]})
        return done["messages"][-1].text

    model = ScriptedChatModel(
        script=[[("task", {"description": f"job {n}"})] for n in range(4)], final="Done."
    )
    outer = ReplayGuard(GuardConfig(tools={"task": "pure"}))
    agent = create_agent(
        model, [task], middleware=[outer.middleware()], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = agent.invoke({"messages": [HumanMessage("go")]}, config)
    assert out["messages"][-1].text == "Done."
    assert runs == ["1"] * 4
    assert not [w for w in caught if issubclass(w.category, ReplayGuardWarning)]


# --- 10: --calibrate into a FIFO fails before the search --------------------------------------


def test_calibrate_into_a_fifo_fails_before_the_search(tmp_path: Any) -> None:
    import os
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "langgraph_replay_guard/data/tau_sample.jsonl"
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(sample.read_text(encoding="utf-8").splitlines()[:3]) + "\n")
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    # Before: the whole search ran, then opening the FIFO to write waited for a reader forever.
    done = _cli("eval", runs, "--calibrate", fifo, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"replay-guard eval: --calibrate {fifo}: is not a regular file; give the configuration "
        "file's name (OUT.json)"
    ]  # no "calibrate: pass 1 ..." line: the search never started
    assert done.stdout == ""
