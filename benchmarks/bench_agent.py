"""Per-step cost of a guarded agent, side by side, and the guard channel's size over 10,000 calls.

Run: python benchmarks/bench_agent.py [rounds]
Goals (DESIGN.md): a guarded create_agent step costs no more than ToolCallLimitMiddleware's
overhead ("guard overhead / ToolCallLimitMiddleware overhead": at most 1.00x; read step by
step, each step less the unguarded step of the same round and index, which cancels the thread's
growth; and again with each configuration running 10 steps in turn); the channel stays a few
KB, flat, after 10,000 calls.
Steps are timed in CPU time (`time.process_time`, all threads of this process), so other work on
a shared machine does not count; the configurations advance in lockstep, one round each in
turn, so a slow stretch hits them all alike. One run, medians, ratios: compare the columns, not
the absolute numbers. Python function calls per step are counted too: they do not depend on
the machine at all.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("LANGSMITH_TRACING", "false")

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ToolCallLimitMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_replay_guard import GUARD_CHANNEL, GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph

STEPS = 200
ROUNDS = 5
WARM_BLOCK = 10  # steps a configuration runs in turn for the second reading of the ratio
BASE = "create_agent, no middleware"
GUARD = "create_agent + ReplayGuardMiddleware"
LIMIT = "create_agent + ToolCallLimitMiddleware"


@tool
def lookup(id: str) -> str:
    """Look up a record."""
    return f'{{"id": "{id}", "status": "active", "plan": "Premium", "data_limit_gb": 15}}'


class PassThrough(AgentMiddleware[Any, Any, Any]):
    """Two `wrap_*` hooks that only call their handler: what any such middleware pays.

    `create_agent` wraps each `wrap_*` hook in langsmith's `traceable`, tracing on or off; the
    guard has the same two hooks, so this row is the part of its overhead that is not its work.
    """

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request)

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request)


def _script(steps: int, per_step: int = 1) -> list[Any]:
    return [[("lookup", {"id": f"R{step}-{i}"}) for i in range(per_step)] for step in range(steps)]


def _steps(graph: Any, steps: int) -> Iterator[None]:
    """Advance a graph one agent+tools round per `next()`."""
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": 10 * steps + 10}
    # durability="sync": no checkpoint is left to a background thread after a round, so
    # the CPU time of a round is this graph's alone.
    stream = graph.stream(
        {"messages": [HumanMessage("go")]}, config, stream_mode="updates", durability="sync"
    )
    for update in stream:
        if "tools" in update:
            yield


class GcMeter:
    """The garbage collector's runs during each configuration's measured steps.

    A `gc.callbacks` hook: each collection (generation 0, 1 or 2) and its CPU time (the
    collecting thread's) is charged to the configuration whose step is running. What a step
    leaves alive decides how much each collection scans: an object that outlives its step is
    scanned by the next collection of its generation, and a full collection scans every
    object of the process.
    """

    def __init__(self, labels: list[str]) -> None:
        """Count nothing yet for each of `labels`."""
        self.label: str | None = None
        self.collections = {label: [0, 0, 0] for label in labels}
        self.cpu = dict.fromkeys(labels, 0.0)
        self.in_step = 0.0  # the collector's CPU time in the step running now
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        """Charge a collection to the step running now (none between steps)."""
        if self.label is None:
            return
        if phase == "start":
            self._start = time.thread_time()
            return
        spent = time.thread_time() - self._start
        self.collections[self.label][info["generation"]] += 1
        self.cpu[self.label] += spent
        self.in_step += spent


def _median_steps(
    rows: list[tuple[str, Any]], rounds: int, meter: GcMeter, block: int = 1
) -> tuple[dict[str, float], dict[str, list[float]], dict[str, list[float]]]:
    """Median CPU time of one round for each configuration, measured in lockstep.

    All configurations advance together, `block` rounds each in turn (1: one step each),
    so a slow stretch of a shared machine (another process, a CPU frequency change) hits
    all of them alike; the order rotates from round to round, so no configuration always
    follows the same one. One step each in turn runs every step right after the other
    configurations' steps (their code and data in the caches); a block of 10 runs most
    steps after the same graph's own, as one agent's steps run in a process.

    Returns the medians of each step's CPU time, each step's CPU time less the collector's
    CPU time in that step (`meter`), and each step's CPU time, round after round. In lockstep the
    configurations share one collector: a collection runs in the step whose allocation
    crosses the threshold, whichever steps allocated what it scans, so it falls most in the
    steps that allocate most before they free (the ones with `wrap_*` hooks: `traceable`'s
    run context lives across the handler).
    """
    samples: dict[str, list[float]] = {label: [] for label, _ in rows}
    outside: dict[str, list[float]] = {label: [] for label, _ in rows}
    for round_ in range(rounds):
        # Each round starts with another configuration: the one measured right after
        # another sees the caches that one left, and rotating spreads that over all.
        shift = round_ % len(rows)
        order = rows[shift:] + rows[:shift]
        runs = [(label, _steps(make_graph(), STEPS)) for label, make_graph in order]
        for run in runs:
            next(run[1])  # the first round builds caches; not measured
        done = 0
        while done < STEPS - 1:
            turn = min(block, STEPS - 1 - done)
            for label, run in runs:
                for _ in range(turn):
                    meter.label, meter.in_step = label, 0.0
                    start = time.process_time()
                    next(run)
                    spent = time.process_time() - start
                    meter.label = None
                    samples[label].append(spent)
                    outside[label].append(spent - meter.in_step)
            done += turn
    return (
        {label: statistics.median(times) for label, times in samples.items()},
        outside,
        samples,
    )


def _round_medians(times: list[float], rounds: int) -> list[float]:
    """The median of each round's steps (`times` holds the rounds one after the other)."""
    size = len(times) // rounds
    return [
        statistics.median(times[start : start + size]) for start in range(0, size * rounds, size)
    ]


def _round_ratios(steps: dict[str, list[float]], rounds: int) -> list[float]:
    """The guard's overhead over ToolCallLimitMiddleware's, from each round's medians alone.

    How far one round's ratio is from another's shows how much of a difference between two
    runs the machine makes.
    """
    base, guard, limit = (_round_medians(steps[label], rounds) for label in (BASE, GUARD, LIMIT))
    return [(g - b) / (lim - b) for b, g, lim in zip(base, guard, limit, strict=True)]


def _paired(steps: dict[str, list[float]], rounds: int) -> tuple[float, float, list[float]]:
    """Each step's overhead against the unguarded step of the same round and index, medians.

    A step's CPU time grows with its thread (LangChain reads the whole history at each model
    call: about 4 ms early in a round, 13 ms late, here), so the difference of two medians
    moves with where each median falls on that ramp. In lockstep every configuration runs
    step `i` of round `r` beside the others' step `i`: the difference of those two steps
    holds the ramp and the stretch of the machine once each, and cancels both.

    Returns:
        The guard's and ToolCallLimitMiddleware's median overhead a step, and the ratio of
        the two from each round's steps alone.
    """
    base = steps[BASE]
    guard, limit = (
        [spent - unguarded for spent, unguarded in zip(steps[label], base, strict=True)]
        for label in (GUARD, LIMIT)
    )
    ratios = [
        g / lim
        for g, lim in zip(_round_medians(guard, rounds), _round_medians(limit, rounds), strict=True)
    ]
    return statistics.median(guard), statistics.median(limit), ratios


def _own_gc(make_graph: Callable[[], Any], steps: int = 150) -> tuple[list[float], float]:
    """Collections a step (per generation) and the collector's CPU a step, this graph alone.

    What a process running only this configuration pays the collector: its own allocations
    trigger the collections, and they scan what its own steps left alive.
    """
    meter = GcMeter(["alone"])
    run = _steps(make_graph(), 20 + steps + 1)
    for _ in range(20):
        next(run)
    gc.collect()
    gc.callbacks.append(meter)
    try:
        meter.label = "alone"
        for _ in range(steps):
            next(run)
    finally:
        gc.callbacks.remove(meter)
    return [n / steps for n in meter.collections["alone"]], meter.cpu["alone"] / steps


def _calls_per_step(make_graph: Callable[[], Any], start: int = 10) -> float:
    """Python function calls per round (deterministic, unlike time on a shared machine).

    Rounds `start` to `start + 40` of one thread: the guard's state is bounded, so its calls
    a step must be the same late in a thread as early (the unguarded step grows: LangChain
    reads the whole history each model call).
    """
    run = _steps(make_graph(), start + 50)
    for _ in range(start):
        next(run)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(40):
        next(run)
    profile.disable()
    return pstats.Stats(profile).total_calls / 40  # type: ignore[attr-defined]


def _agent(middleware: list[Any]) -> Any:
    model = ScriptedChatModel(script=_script(STEPS))
    return create_agent(model, [lookup], middleware=middleware, checkpointer=InMemorySaver())


def _custom(guard: ReplayGuard | None, steps: int = STEPS, per_step: int = 1) -> Any:
    model = ScriptedChatModel(script=_script(steps, per_step))
    return agent_graph(
        model, [lookup], guard=guard, system_prompt="sys", checkpointer=InMemorySaver()
    )


def _channel_sizes() -> list[tuple[int, int, int]]:
    """Serialized size of the guard channel as calls accumulate in one thread."""
    guard = ReplayGuard(GuardConfig(scope="thread"))
    per_step = 10
    graph = _custom(guard, steps=1000, per_step=per_step)
    config = {"configurable": {"thread_id": "size"}, "recursion_limit": 10_000}
    serde = JsonPlusSerializer()
    sizes = []
    checkpoints = {100, 1_000, 5_000, 10_000}
    calls = 0
    for update in graph.stream({"messages": [HumanMessage("go")]}, config, stream_mode="updates"):
        if "tools" in update:
            calls += per_step
            if calls in checkpoints:
                value = graph.get_state(config).values[GUARD_CHANNEL]
                _, blob = serde.dumps_typed(value)
                sizes.append((calls, len(json.dumps(value)), len(blob)))
    return sizes


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS
    print(f"{STEPS} tool-calling steps x {rounds} rounds, InMemorySaver, scripted model, CPU time")
    print()
    rows = [
        (BASE, lambda: _agent([])),
        (GUARD, lambda: _agent([ReplayGuard().middleware()])),
        (
            LIMIT,
            lambda: _agent([ToolCallLimitMiddleware(thread_limit=1_000_000)]),
        ),
        ("create_agent + pass-through wrap hooks", lambda: _agent([PassThrough()])),
        ("custom graph, plain ToolNode", lambda: _custom(None)),
        ("custom graph, guard.wrap(ToolNode)", lambda: _custom(ReplayGuard())),
    ]
    meter = GcMeter([label for label, _ in rows])
    gc.callbacks.append(meter)
    try:
        medians, outside, samples = _median_steps(rows, rounds, meter)
    finally:
        gc.callbacks.remove(meter)
    base_agent = medians[BASE]
    base_custom = medians["custom graph, plain ToolNode"]
    print(f"{'':42}{'median step (CPU)':>18}{'vs unguarded':>14}")
    for label, median in medians.items():
        base = base_agent if label.startswith("create_agent") else base_custom
        print(f"{label:42}{median * 1000:>16.3f}ms{median / base:>13.3f}x")
    guard_cost = medians[GUARD] - base_agent
    limit_cost = medians[LIMIT] - base_agent
    print()
    print(
        f"guard overhead per step: {guard_cost * 1e6:.0f} us "
        f"({guard_cost / base_agent:.1%}); ToolCallLimitMiddleware: {limit_cost * 1e6:.0f} us "
        f"({limit_cost / base_agent:.1%})"
    )
    guarded = medians[GUARD]
    limited = medians[LIMIT]
    print(f"guarded step / ToolCallLimitMiddleware step: {guarded / limited:.3f}x")
    print(
        f"guard overhead / ToolCallLimitMiddleware overhead: {guard_cost / limit_cost:.2f}x "
        "(a difference of two medians over the thread's growth: read the goal step by step)"
    )
    per_round = sorted(_round_ratios(samples, rounds))
    print(
        f"  the same ratio round by round (each round's medians): {per_round[0]:.2f}x to "
        f"{per_round[-1]:.2f}x ({', '.join(f'{ratio:.2f}' for ratio in per_round)})"
    )
    paired_guard, paired_limit, per_round = _paired(samples, rounds)
    per_round.sort()
    print(
        "the same ratio step by step (each step less the unguarded step of its round and index, "
        f"medians): {paired_guard / paired_limit:.2f}x ({paired_guard * 1e6:.0f} us vs "
        f"{paired_limit * 1e6:.0f} us; rounds {', '.join(f'{r:.2f}' for r in per_round)}; "
        "goal: at most 1.00x)"
    )
    warm_rows = rows[:3]  # the unguarded agent, the guard's, ToolCallLimitMiddleware's
    warm_meter = GcMeter([label for label, _ in warm_rows])  # not a gc callback: no split
    _, _, warm_samples = _median_steps(warm_rows, rounds, warm_meter, block=WARM_BLOCK)
    # Step by step too: step `i` of each configuration still falls in the same stretch of
    # the round (at most two blocks apart), and the ramp cancels the same way.
    warm_guard, warm_limit, per_round = _paired(warm_samples, rounds)
    per_round.sort()
    print(
        f"the same ratio with each configuration running {WARM_BLOCK} steps in turn (most steps "
        f"after the same graph's own), step by step: {warm_guard / warm_limit:.2f}x "
        f"({warm_guard * 1e6:.0f} us vs {warm_limit * 1e6:.0f} us; rounds "
        f"{', '.join(f'{r:.2f}' for r in per_round)})"
    )
    hooks_cost = medians["create_agent + pass-through wrap hooks"] - base_agent
    print(
        f"of which two pass-through wrap hooks (create_agent's traceable): {hooks_cost * 1e6:.0f} "
        f"us = {hooks_cost / limit_cost:.2f}x ToolCallLimitMiddleware's overhead; the guard's "
        f"own work: {(guard_cost - hooks_cost) * 1e6:.0f} us = "
        f"{(guard_cost - hooks_cost) / limit_cost:.2f}x"
    )
    print()
    measured = rounds * (STEPS - 1)
    agents = [(label, make_graph) for label, make_graph in rows if label.startswith("create_agent")]
    alone = {label: _own_gc(make_graph) for label, make_graph in agents}
    print("Garbage collections a step (gc.callbacks; CPU time of the collecting thread):")
    print(f"  {'':40}{'in its steps above (lockstep)':>36}{'its own, run alone':>36}")
    print(f"  {'':40}" + f"{'gen0':>8}{'gen1':>8}{'gen2':>8}{'CPU':>12}" * 2)
    for label, _ in agents:
        shared = "".join(f"{n / measured:>8.3f}" for n in meter.collections[label])
        shared += f"{meter.cpu[label] / measured * 1e6:>10.1f}us"
        own_counts, own_cpu = alone[label]
        own = "".join(f"{n:>8.3f}" for n in own_counts) + f"{own_cpu * 1e6:>10.1f}us"
        print(f"  {label:40}{shared}{own}")

    # Step by step, each step less the collections that fell in it (`_paired`), plus the
    # collector's cost of that configuration when it runs alone.
    outside_guard, outside_limit, _ = _paired(outside, rounds)
    alone_base = alone[BASE][1]
    own_guard = outside_guard + alone[GUARD][1] - alone_base
    own_limit = outside_limit + alone[LIMIT][1] - alone_base
    print(
        "guard overhead / ToolCallLimitMiddleware overhead step by step, each step less the "
        "collections that fell in it, plus the collector's cost of that configuration alone: "
        f"{own_guard * 1e6:.0f} us vs {own_limit * 1e6:.0f} us = {own_guard / own_limit:.2f}x"
    )
    print()
    early = {label: _calls_per_step(make_graph) for label, make_graph in rows[:4]}
    late = {label: _calls_per_step(make_graph, start=150) for label, make_graph in rows[:4]}
    print("Python function calls per step (cProfile; the same on every run):")
    print(f"  {'':40}{'steps 10-50':>18}{'steps 150-190':>18}")
    for label in early:
        extra = [
            f"{calls[label]:>8.0f} (+{calls[label] - calls['create_agent, no middleware']:.0f})"
            for calls in (early, late)
        ]
        print(f"  {label:40}{extra[0]:>18}{extra[1]:>18}")
    print()
    print(f"{'calls in the thread':>20}{'channel JSON (bytes)':>22}{'checkpoint blob':>17}")
    for calls, json_size, blob_size in _channel_sizes():
        print(f"{calls:>20,}{json_size:>22,}{blob_size:>17,}")


if __name__ == "__main__":
    main()
