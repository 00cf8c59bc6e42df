"""The path of one tool call through the guard: the package modules it passes, in order.

Run: python benchmarks/call_path.py [-v]
For each integration (the `ToolNode` wrapper, the `create_agent` middleware, the callback
handler) a guarded agent turn with one tool call runs twice (the first warms the caches); the
second is traced (`sys.setprofile`, also in the threads it starts) and the package modules
its code enters are listed in order. A *stop* is an entry into a module from another one; a
*return* is a stop in a module the path had already left; a *layer change* goes between
adapter, core and I/O (ARCHITECTURE.md). The goal (issue 24, "one path per call"): the
adapter gathers its inputs once, the core decides once, the adapter runs the tool, the core
records once. `-v` prints each path.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

os.environ.setdefault("LANGSMITH_TRACING", "false")

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from langgraph_replay_guard import ReplayGuard, ReplayGuardCallbackHandler, ReplayGuardMiddleware
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph

PACKAGE = "langgraph_replay_guard"


@tool
def lookup(id: str) -> str:
    """Look a customer up."""
    return f"{id}: premium"


def _model() -> ScriptedChatModel:
    # Each turn: one tool call, then an answer (the script starts over for the next turn).
    return ScriptedChatModel(script=[_step] * 1000)


def _step(messages: list[Any]) -> Any:
    return "done" if messages[-1].type == "tool" else [("lookup", {"id": "P1"})]


def traced(turn: Callable[[], Any]) -> list[tuple[str, str]]:
    """Run a turn; the package modules its code entered (with the function entered first),
    a module once per stay."""
    path: list[tuple[str, str]] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        if not name.startswith(PACKAGE + ".") or name == f"{PACKAGE}.testing":
            return
        module = name.removeprefix(PACKAGE + ".")
        if not path or path[-1][0] != module:
            path.append((module, frame.f_code.co_name))

    # ToolNode runs a sync tool call in a worker thread: profile new threads too.
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        turn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return path


def wrapper_turn() -> Callable[[], Any]:
    graph = agent_graph(_model(), [lookup], guard=ReplayGuard())
    return lambda: graph.invoke({"messages": [HumanMessage("who is P1?")]})


def middleware_turn() -> Callable[[], Any]:
    agent = create_agent(_model(), [lookup], middleware=[ReplayGuardMiddleware()])
    return lambda: agent.invoke({"messages": [HumanMessage("who is P1?")]})


def handler_turn() -> Callable[[], Any]:
    agent = create_agent(_model(), [lookup])
    config = {"callbacks": [ReplayGuardCallbackHandler()]}
    return lambda: agent.invoke({"messages": [HumanMessage("who is P1?")]}, config)


LAYERS = {"decisions": "core", "policy": "core", "replay": "core", "storage": "I/O"}


def layers(path: list[tuple[str, str]]) -> list[str]:
    """The path by layer (ARCHITECTURE.md), each stay named by the function it entered."""
    out: list[str] = []
    last = None
    for module, function in path:
        layer = LAYERS.get(module.split(".")[0], "adapter")
        if layer != last:
            out.append(f"{layer} {module}.{function}")
            last = layer
    return out


def summary(path: list[tuple[str, str]]) -> tuple[int, int, int]:
    """Stops, returns to a module already left, and distinct modules."""
    modules = [module for module, _ in path]
    left: set[str] = set()
    returns = 0
    for before, module in itertools.pairwise(modules):
        left.add(before)
        returns += module in left
    return len(modules), returns, len(set(modules))


def main() -> None:
    verbose = "-v" in sys.argv[1:]
    print(f"{'integration':<12} {'stops':>6} {'returns':>8} {'modules':>8} {'layer changes':>14}")
    for name, make in [
        ("wrapper", wrapper_turn),
        ("middleware", middleware_turn),
        ("callbacks", handler_turn),
    ]:
        turn = make()
        turn()  # warm: imports, caches, learned tools
        path = traced(turn)
        stops, returns, modules = summary(path)
        by_layer = layers(path)
        print(f"{name:<12} {stops:>6} {returns:>8} {modules:>8} {len(by_layer) - 1:>14}")
        if verbose:
            for stay in by_layer:
                print("   ", stay)


if __name__ == "__main__":
    main()
