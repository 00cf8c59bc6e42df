"""The path of one tool call through the guard: the package modules it passes, in order.

Run: python benchmarks/call_path.py [-v] [--tool-call]
For each integration (the `ToolNode` wrapper, the `create_agent` middleware, the callback
handler) a guarded agent turn with one tool call runs twice (the first warms the caches); the
second is traced (`sys.setprofile`, also in the threads it starts) and the package modules
its code enters are listed in order. A *stop* is an entry into a module from another one; a
*return* is a stop in a module the path had already left; a *layer change* goes between
adapter, core and I/O (ARCHITECTURE.md). The goal (issue 24, "one path per call"): the
adapter gathers its inputs once, the core decides once, the adapter runs the tool, the core
records once. `-v` prints each path.

`--tool-call` traces one tool call only (issue 37, "one path per call"): from the entry the
tools node calls (`ReplayGuardMiddleware.wrap_tool_call`, `ToolCallWrapper.wrap`) or LangChain's
callback manager calls (the handler's `on_tool_start`, then `on_tool_end`) until it returns,
and prints the package files entered, the returns to a file already left, and the layer
changes, counting the facade (the hook or callback entered) as a layer of its own. The goal:
no more than 10 files, each layer entered once on the way down and once on the way up. A
walk is the modules *entered* (calls, not returns): the way back up to the facade shows only
where it calls something, so `facade > adapter > core > adapter` is each layer once each way.
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

    _profiled(profile, turn)
    return path


def _profiled(profile: Callable[..., Any], turn: Callable[[], Any]) -> None:
    """Run `turn` with `profile` set in this thread and in the threads it starts.

    ToolNode runs a sync tool call in a worker thread: new threads are profiled too.
    """
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        turn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def wrapper_turn() -> Callable[[], Any]:
    graph = agent_graph(_model(), [lookup], guard=ReplayGuard())
    return lambda: graph.invoke({"messages": [HumanMessage("who is P1?")]})


def middleware_turn() -> Callable[[], Any]:
    agent = create_agent(_model(), [lookup], middleware=[ReplayGuardMiddleware()])
    return lambda: agent.invoke({"messages": [HumanMessage("who is P1?")]})


UNSAFE = {"tools": {"lookup": "unsafe"}}


def _threads() -> Callable[[], Any]:
    # A checkpointer and a thread of its own per turn: the ledger keys a call by its thread.
    counter = itertools.count()
    return lambda: {"configurable": {"thread_id": f"t{next(counter)}"}}


def ledger_middleware_turn() -> Callable[[], Any]:
    """An unsafe call under a store: the ledger claims it and records its outcome."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.memory import InMemoryStore

    guard = ReplayGuardMiddleware(UNSAFE, store=InMemoryStore())
    agent = create_agent(_model(), [lookup], middleware=[guard], checkpointer=InMemorySaver())
    thread = _threads()
    return lambda: agent.invoke({"messages": [HumanMessage("who is P1?")]}, thread())


def handed_middleware_turn() -> Callable[[], Any]:
    """The same, with a tool middleware inside the guard: the call is handed down."""
    from langchain.agents.middleware import ToolRetryMiddleware
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.memory import InMemoryStore

    guard = ReplayGuardMiddleware(UNSAFE, store=InMemoryStore())
    inner = ToolRetryMiddleware(max_retries=0)
    agent = create_agent(
        _model(), [lookup], middleware=[guard, inner], checkpointer=InMemorySaver()
    )
    thread = _threads()
    return lambda: agent.invoke({"messages": [HumanMessage("who is P1?")]}, thread())


def ledger_handler_turn() -> Callable[[], Any]:
    """An unsafe call under a store, seen by the callback handler (marks and ledger)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.memory import InMemoryStore

    agent = create_agent(_model(), [lookup], checkpointer=InMemorySaver())
    handler = ReplayGuardCallbackHandler(UNSAFE, store=InMemoryStore())
    thread = _threads()

    def turn() -> Any:
        config = {**thread(), "callbacks": [handler]}
        return agent.invoke({"messages": [HumanMessage("who is P1?")]}, config)

    return turn


def handler_turn() -> Callable[[], Any]:
    agent = create_agent(_model(), [lookup])
    config = {"callbacks": [ReplayGuardCallbackHandler()]}
    return lambda: agent.invoke({"messages": [HumanMessage("who is P1?")]}, config)


LAYERS = {
    "decisions": "core",
    "policy": "core",
    "replay": "core",
    "errors": "core",
    "storage": "I/O",
    "records.store": "I/O",
    "guard": "facade",
    "integrations.middleware": "facade",
    "integrations.callbacks.handler": "facade",
}


def layer_of(module: str) -> str:
    """The layer of a package module (ARCHITECTURE.md): the longest prefix named in LAYERS."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        layer = LAYERS.get(".".join(parts[:n]))
        if layer is not None:
            return layer
    return "adapter"


def layers(path: list[tuple[str, str]]) -> list[str]:
    """The path by layer (ARCHITECTURE.md), each stay named by the function it entered."""
    out: list[str] = []
    last = None
    for module, function in path:
        layer = layer_of(module)
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


# -- one tool call ----------------------------------------------------------------------------

_HOOK = {("integrations.middleware", "wrap_tool_call")}
_CALLBACKS = {
    ("integrations.callbacks.handler", "on_tool_start"),
    ("integrations.callbacks.handler", "on_tool_end"),
}
WALKS: list[tuple[str, Callable[[], Callable[[], Any]], set[tuple[str, str]]]] = [
    ("wrapper", wrapper_turn, {("integrations.tool_node", "wrap")}),
    ("middleware", middleware_turn, _HOOK),
    ("mw+ledger", ledger_middleware_turn, _HOOK),
    ("mw+handed", handed_middleware_turn, _HOOK),
    ("callbacks", handler_turn, _CALLBACKS),
    ("cb+ledger", ledger_handler_turn, _CALLBACKS),
]


def traced_calls(turn: Callable[[], Any], entries: set[tuple[str, str]]) -> list[list[str]]:
    """Run a turn; for each call of an entry (module, function), the package modules its
    code entered, in order (a module once per stay), the entry's own module first."""
    walks: list[list[str]] = []
    local = threading.local()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        name = frame.f_globals.get("__name__", "")
        if not name.startswith(PACKAGE + "."):
            return
        module = name.removeprefix(PACKAGE + ".")
        entry = getattr(local, "entry", None)
        if entry is None:
            if event == "call" and (module, frame.f_code.co_name) in entries:
                local.entry = frame
                local.walk = [module]
                walks.append(local.walk)
            return
        if event == "return":
            if frame is entry:
                local.entry = None
            return
        if module != "testing" and local.walk[-1] != module:
            local.walk.append(module)

    _profiled(profile, turn)
    return walks


def walk_summary(walk: list[str]) -> tuple[int, int, int, list[str]]:
    """Files entered, returns to a file already left, layer changes, and the layer path."""
    left: set[str] = set()
    returns = 0
    for before, module in itertools.pairwise(walk):
        left.add(before)
        returns += module in left
    by_layer: list[str] = []
    for module in walk:
        layer = layer_of(module)
        if not by_layer or by_layer[-1] != layer:
            by_layer.append(layer)
    return len(set(walk)), returns, len(by_layer) - 1, by_layer


def main_tool_call(verbose: bool) -> None:
    """`--tool-call`: the walk of one tool call per integration entry."""
    print(
        f"{'integration':<12} {'entry':<14} {'files':>6} {'stays':>6} {'returns':>8} "
        f"{'layer changes':>14}"
    )
    for name, make, entries in WALKS:
        turn = make()
        turn()  # warm: imports, caches, learned tools
        for walk in traced_calls(turn, entries):
            files, returns, changes, by_layer = walk_summary(walk)
            entry = walk[0].rsplit(".", 1)[-1]
            print(f"{name:<12} {entry:<14} {files:>6} {len(walk):>6} {returns:>8} {changes:>14}")
            if verbose:
                print("    layers:", " > ".join(by_layer))
                print("    files: ", " > ".join(walk))


def main() -> None:
    verbose = "-v" in sys.argv[1:]
    if "--tool-call" in sys.argv[1:]:
        main_tool_call(verbose)
        return
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
