"""Shadow mode reports, call for call, what enforcing decides: every integration, every reason.

Each case runs one scripted model twice on one integration, once enforcing and once in
shadow mode, and compares what shadow mode reported (the decision events, the channel's
`shadow` counts) with what enforcing decided on the same calls (its decision events, its
blocked calls and stop). Each script ends where enforcing stops, so both runs see the same
calls; enforcing's own decisions are checked against the documented stop as well, so a
change that moves both sides (a stop at the 5th call instead of the 4th) fails too.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import BaseTool, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_replay_guard import (
    GuardConfig,
    ReplayGuard,
    ReplayGuardCallbackHandler,
    ReplayGuardMiddleware,
    ToolPolicy,
)
from langgraph_replay_guard.integrations.calls import DECISION_EVENT
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph
from tests import async_run

# The tests that build a langchain_classic AgentExecutor run on one xdist worker: every worker
# collects this module, and only the one that runs them imports langchain_classic (0.3 s).
CLASSIC = pytest.mark.xdist_group("langchain-classic")

os.environ["LANGSMITH_TRACING"] = "false"
pytestmark = pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")

LOOKUP = ("lookup", {"id": "P1"})
TOGGLE = ("toggle", {})
STATUS = ("status", {})
GHOST = ("lookup_customer", {"id": "P1"})  # a name no tool has


# The run whose tool calls the tools below count (a worker runs one test at a time).
_RUNS: list[Counter[str]] = [Counter()]


@tool
def lookup(id: str) -> str:
    """Look a customer up."""
    _RUNS[0]["lookup"] += 1
    return f"{id}: premium plan"


@tool
def toggle() -> str:
    """Toggle airplane mode."""
    _RUNS[0]["toggle"] += 1
    return "Airplane mode toggled. No signal."


@tool
def status() -> str:
    """Check the network status."""
    _RUNS[0]["status"] += 1
    return "no_service"


@tool
def build(flag: str) -> str:
    """Compile the project with a flag."""
    _RUNS[0]["build"] += 1
    msg = "error: Main.java:3: cannot find symbol"
    raise ToolException(msg)


build.handle_tool_error = True  # the model sees the error and tries other flags
# Built once per worker (four tool schemas cost about as much as a short run, and every test
# here makes two runs or more): each run counts its own tool bodies' runs (`_tools`).
TOOLS: list[BaseTool] = [lookup, toggle, status, build]


def _tools(runs: Counter[str]) -> list[BaseTool]:
    """The four tools, each run counted in `runs` (the counter of the run about to start)."""
    _RUNS[0] = runs
    return TOOLS


BASE = GuardConfig(
    tools={"toggle": "idempotent", "status": ToolPolicy(volatile=True)},
    max_same_failures=2,
)


@dataclass(frozen=True)
class Case:
    """A loop, the configuration it runs under, and what enforcing decides on it."""

    script: list[Any]
    expected: list[tuple[str, str]]
    """Enforcing's decisions other than allow, in order: (reason, verdict)."""
    config: GuardConfig = BASE


def _repeat(times: int) -> list[Any]:
    return [[LOOKUP] for _ in range(times)]


CASES: dict[str, Case] = {
    # The 2nd and 3rd identical reads are duplicates, the 4th is over the repeat limit.
    "repeat_limit": Case(
        _repeat(4),
        [("duplicate", "deny"), ("duplicate", "deny"), ("repeat_limit", "abort")],
    ),
    # A name that does not exist: three answers, then the 4th stops the run.
    "unknown_tool": Case(
        [[GHOST] for _ in range(4)],
        [("unknown_tool", "deny")] * 3 + [("unknown_tool", "abort")],
    ),
    # A-B-A-B with identical results: the cycle is denied once, then stops the run.
    "cycle": Case(
        [[TOGGLE], [STATUS]] * 3,
        [("cycle", "deny"), ("cycle", "abort")],
    ),
    # The same failure whatever the arguments: past the limit and one more, a stop.
    "same_failure": Case(
        [[("build", {"flag": f"-X{n}"})] for n in range(4)],
        [("same_failure", "abort")],
    ),
    # Two reads per batch: the 4th batch stops on its first call; enforcing answers the
    # other one "stopped" too (a blocked call, reported in the channel, not on the stream).
    "batch_stop": Case(
        [[LOOKUP, ("lookup", {"id": "P2"})] for _ in range(4)],
        [("duplicate", "deny")] * 4 + [("repeat_limit", "abort")],
    ),
    # "continue": blocked calls are denied, and a call insisted on past twice the limit stops.
    "continue": Case(
        _repeat(7),
        [("duplicate", "deny")] * 2 + [("repeat_limit", "deny")] * 3 + [("repeat_limit", "abort")],
        BASE.model_copy(update={"exit_behavior": "continue"}),
    ),
    # Without dedup, an identical result twice in a row is answered from the last one.
    "same_result": Case(
        _repeat(4),
        [("same_result", "short_circuit"), ("repeat_limit", "abort")],
        BASE.model_copy(update={"dedup": False}),
    ),
}

INTEGRATIONS = ["wrap", "wrap_async", "middleware", "middleware_async", "callbacks", "executor"]


class Decisions(BaseCallbackHandler):
    """The guard's decision events (`replay_guard_decision`), as a tracer receives them."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def on_custom_event(
        self, name: str, data: Any, *, run_id: UUID, **kwargs: Any
    ) -> None:  # LangChain's signature
        if name == DECISION_EVENT:
            self.events.append(dict(data))


@dataclass
class Run:
    decisions: list[tuple[str, str]]
    """Decisions other than allow, in order (for shadow mode: what enforcing would do)."""
    modes: set[str | None]
    blocked: list[tuple[str, str, int]]
    shadow: dict[str, tuple[int, int]]
    stop: str | None
    totals: tuple[int, int, int]
    runs: Counter[str]


def _run(integration: str, case: Case, mode: str, *, check: bool = True) -> Run:
    runs: Counter[str] = Counter()
    config = case.config.model_copy(update={"mode": mode})
    model = ScriptedChatModel(script=list(case.script), final="Here is what I found.")
    tools = _tools(runs)
    decisions = Decisions()
    cfg: dict[str, Any] = {
        "configurable": {"thread_id": "t"},
        "recursion_limit": 200,
        "callbacks": [decisions],
    }
    inputs: dict[str, Any] = {"messages": [HumanMessage("help me")]}
    if integration.startswith("wrap"):
        guard = ReplayGuard(config)
        graph = agent_graph(model, tools, guard=guard, checkpointer=InMemorySaver())
        _invoke(graph, inputs, cfg, integration.endswith("async"))
        view = guard.inspect(graph.get_state(cfg))
    elif integration.startswith("middleware"):
        middleware = ReplayGuardMiddleware(config)
        graph = create_agent(model, tools, middleware=[middleware], checkpointer=InMemorySaver())
        _invoke(graph, inputs, cfg, integration.endswith("async"))
        view = middleware.guard.inspect(graph.get_state(cfg))
    elif integration == "callbacks":
        handler = ReplayGuardCallbackHandler(config)
        graph = create_agent(model, tools, checkpointer=InMemorySaver())
        cfg["callbacks"].append(handler.check(graph))
        graph.invoke(inputs, cfg)
        view = handler.inspect("t")
    else:
        from langchain_classic.agents import AgentExecutor, create_tool_calling_agent

        handler = ReplayGuardCallbackHandler(config)
        prompt = ChatPromptTemplate.from_messages(
            [("system", "You help."), ("human", "{input}"), ("placeholder", "{agent_scratchpad}")]
        )
        executor = AgentExecutor(
            agent=create_tool_calling_agent(model, tools, prompt),
            tools=tools,
            handle_parsing_errors=True,
            max_iterations=100,
        )
        executor.invoke(
            {"input": "help me"},
            {
                "callbacks": [decisions, handler.check(executor) if check else handler],
                "metadata": {"thread_id": "t"},
            },
        )
        view = handler.inspect("t")
    shown = [e for e in decisions.events if e["verdict"] != "allow"]
    return Run(
        decisions=[(e["reason"], e["verdict"]) for e in shown],
        modes={e.get("mode") for e in shown},
        blocked=[tuple(b) for b in view.blocked],  # type: ignore[misc]
        shadow={reason: (blocked, stopped) for reason, blocked, stopped in view.shadow},
        stop=view.stop_reason,
        totals=(view.totals.calls, view.totals.blocked, view.totals.aborts),
        runs=runs,
    )


def _invoke(graph: Any, inputs: dict[str, Any], cfg: dict[str, Any], use_async: bool) -> None:
    if use_async:
        async_run.run(graph.ainvoke(inputs, cfg))
    else:
        graph.invoke(inputs, cfg)


def _counts(decisions: list[tuple[str, str]]) -> dict[str, tuple[int, int]]:
    """Per reason: (calls blocked, runs stopped), from enforcing's decisions."""
    out: dict[str, tuple[int, int]] = {}
    for reason, verdict in decisions:
        blocked, stopped = out.get(reason, (0, 0))
        out[reason] = (blocked + 1, stopped + (verdict == "abort"))
    return out


# An AgentExecutor hands a tool's handled error to its callbacks as a plain output (no
# ToolMessage, no error status): the handler sees no failure there, in either mode.
PAIRS = [
    (integration, case)
    for integration in INTEGRATIONS
    for case in sorted(CASES)
    if (integration, case) != ("executor", "same_failure")
]


@CLASSIC
@pytest.mark.parametrize(("integration", "case"), PAIRS)
def test_shadow_mode_reports_what_enforcing_decides_call_for_call(integration, case):
    spec = CASES[case]
    enforced = _run(integration, spec, "enforce")
    shadow = _run(integration, spec, "shadow")

    calls = sum(len(step) for step in spec.script)
    # Enforcing decides the documented stop, on every integration. (The callback handler
    # reports the other calls of a stopped batch on the stream too, as "stopped".)
    assert [d for d in enforced.decisions if d[0] != "stopped"] == spec.expected
    assert enforced.stop == spec.expected[-1][0]
    stopped = [("stopped", "deny")] * (len(spec.script[-1]) - 1) if case == "batch_stop" else []
    assert enforced.totals == (calls, len(spec.expected) + len(stopped), 1)
    # The channel's log of blocked calls keeps the latest ones only.
    kept = [reason for _, reason, _ in enforced.blocked]
    assert kept == [r for r, _ in spec.expected + stopped][-len(kept) :]
    assert enforced.shadow == {}

    # Shadow mode reports the same decisions on the same calls, and counts exactly them
    # (the calls of the stopped batch included, which enforcing leaves off the stream).
    reported = [d for d in shadow.decisions if d[0] != "stopped"]
    assert reported == spec.expected
    assert shadow.modes == {"shadow"}
    assert shadow.shadow == _counts(spec.expected + stopped)
    assert sum(blocked for blocked, _ in shadow.shadow.values()) == enforced.totals[1]
    assert sum(stops for _, stops in shadow.shadow.values()) == enforced.totals[2]
    # ...and acts on none of them.
    assert shadow.stop is None
    assert shadow.blocked == []
    assert shadow.totals == (calls, 0, 0)
    assert enforced.modes == {None}


@CLASSIC
@pytest.mark.parametrize("integration", INTEGRATIONS)
def test_shadow_mode_keeps_counting_past_where_enforcing_stops(integration):
    # Past the would-be stop every further call is one more stop that did not happen
    # (docs/how-it-decides.md, "Shadow mode"): 12 reads, 2 duplicates, 9 over the limit.
    case = Case(_repeat(12), [])
    shadow = _run(integration, case, "shadow")
    assert shadow.runs["lookup"] == 12
    assert shadow.shadow == {"duplicate": (2, 0), "repeat_limit": (9, 9)}
    assert shadow.decisions == [("duplicate", "deny")] * 2 + [("repeat_limit", "abort")] * 9


ANSWERED_ELSEWHERE = ["cache_inside", "emulator_first", "emulator_last"]


@pytest.mark.parametrize("stack", ANSWERED_ELSEWHERE)
def test_a_call_another_middleware_answers_counts_as_enforcing_decides(stack):
    # A cache inside the guard, or a tool emulator inside or outside it, answers the repeats:
    # enforcing hands a repeat it would deny to them (they answer it, nothing is blocked)
    # and stops the 4th call itself. Shadow mode counts that stop, and nothing else.
    from langchain.agents.middleware import LLMToolEmulator

    from tests.integration.test_composition import _Cache

    def run(mode: str) -> Any:
        runs: Counter[str] = Counter()
        model = ScriptedChatModel(script=_repeat(4), final="Here is what I found.")
        guard = ReplayGuardMiddleware(dedup=False, mode=mode)
        if stack == "cache_inside":
            middleware = [guard, _Cache()]
        else:
            emulator = LLMToolEmulator(
                tools=["lookup"], model=ScriptedChatModel(script=["P1: premium plan"] * 5)
            )
            middleware = [guard, emulator] if stack == "emulator_first" else [emulator, guard]
        agent = create_agent(
            model, _tools(runs), middleware=middleware, checkpointer=InMemorySaver()
        )
        cfg = {"configurable": {"thread_id": "t"}}
        agent.invoke({"messages": [HumanMessage("help me")]}, cfg)
        return guard.guard.inspect(agent.get_state(cfg))

    enforced, shadow = run("enforce"), run("shadow")
    assert enforced.blocked == (("lookup", "repeat_limit", 4),)
    assert (enforced.totals.blocked, enforced.totals.aborts) == (1, 1)
    assert shadow.shadow == (("repeat_limit", 1, 1),)
    assert shadow.stop is None


@CLASSIC
def test_an_executor_that_names_its_tools_itself_counts_the_unknown_tool_stop():
    # Without `check(executor)` the handler learns the tool names from the executor's own
    # answer to the first unknown name. Shadow mode reported each such call as a denial
    # (blocked, never the stop); it counts what enforcing decides: 4 blocks, 1 stop.
    case = CASES["unknown_tool"]
    enforced = _run("executor", case, "enforce", check=False)
    shadow = _run("executor", case, "shadow", check=False)
    assert enforced.stop == "unknown_tool"
    assert enforced.totals == (4, 4, 1)
    assert shadow.shadow == {"unknown_tool": (4, 1)}
    assert shadow.totals == (4, 0, 0)
    assert shadow.blocked == []
    assert shadow.stop is None
