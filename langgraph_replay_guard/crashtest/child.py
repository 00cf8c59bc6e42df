"""One phase of a crash test in a forked process: build the user's graph on SQLite and run it.

Phases: `learn` (run the input to its end), `plain` (the same on the graph the target builds
with `guarded=False`), `crash` (the same as `learn`, dying at `kill`: `[tool, ordinal,
point]`), `resume` (`invoke(None, config)` on the thread); with `asynchronous`, every run is
`ainvoke`. The options also name the target
(`FILE_OR_MODULE:FUNCTION`), the input and the directory of the trial's databases and its
`starts` file. Every phase that ends says which tool calls the thread holds (`calls`), so the
parent can tell a run that went another way than the learning run.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from langgraph_replay_guard.crashtest.hooks import Hooks, json_args, ordered_calls
from langgraph_replay_guard.crashtest.target import CrashTestError, build_graph, load_function
from langgraph_replay_guard.errors import ReplayGuardError

__all__ = ["DATABASES", "THREAD_ID", "empty_databases", "run"]

THREAD_ID = "crashtest"


DATABASES = ("checkpoints.db", "store.db")
"""The SQLite files of a trial's directory: the checkpointer's and the store's."""

_PRAGMAS = ("PRAGMA busy_timeout = 10000", "PRAGMA synchronous = OFF")
"""Per connection. No fsync per commit: the crash test kills processes, not the machine, and
what a killed process committed is in the kernel's page cache for the next process to read
(SQLite: with `synchronous` OFF a crash of the application loses nothing, only the
operating system's). The fsyncs were a third of a phase's system CPU."""


def empty_databases(directory: Path) -> None:
    """Create the checkpointer's and the store's databases, set up and empty, in `directory`.

    The crash test makes them once and copies them into each phase's directory
    (`fresh_databases`): the same schema as `setup()` on a new file makes (the phase still
    calls `setup()`, a no-op on it), without its DDL and commits in every process.
    """
    saver, store = _persistence(directory)
    saver.conn.close()  # the last connection: SQLite folds its WAL into the file
    store.conn.close()


def _connect(directory: Path, name: str) -> sqlite3.Connection:
    conn = sqlite3.connect(directory / name, check_same_thread=False, isolation_level=None)
    for pragma in _PRAGMAS:
        conn.execute(pragma)
    return conn


def _persistence(directory: Path) -> tuple[Any, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    saver = SqliteSaver(_connect(directory, DATABASES[0]))
    store = SqliteStore(_connect(directory, DATABASES[1]))
    saver.setup()
    store.setup()
    return saver, store


def _postgres(uri: str, directory: Path) -> tuple[Any, Any]:
    """A `PostgresSaver` and a `PostgresStore` in a schema of their own for the trial.

    The schema is named after the trial's directory, so its crash and resume phases share it
    and no two trials (or two crash tests) see each other's rows.
    """
    import hashlib

    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row

    schema = "replay_guard_crashtest_" + hashlib.sha256(str(directory).encode()).hexdigest()[:16]
    with psycopg.connect(uri, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")

    def connect() -> Any:
        return psycopg.connect(
            uri,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            options=f"-c search_path={schema}",
        )

    saver, store = PostgresSaver(connect()), PostgresStore(connect())
    saver.setup()
    store.setup()
    return saver, store


def _messages(graph: Any, config: dict[str, Any]) -> list[Any]:
    values = graph.get_state(config).values
    found = values.get("messages") if isinstance(values, dict) else None
    return list(found or [])


def run(opts: dict[str, Any]) -> dict[str, Any]:
    """Run one phase and say what happened.

    Args:
        opts: The options (see the module's usage).

    Returns:
        The phase's result (JSON).
    """
    directory = Path(opts["dir"])
    phase = opts["phase"]
    given = opts.get("kill")
    kill = (str(given[0]), int(given[1]), str(given[2])) if given else None
    hooks = Hooks(phase, str(directory / "starts"), kill)
    postgres = opts.get("postgres")
    loop = _new_loop() if opts.get("asynchronous") else None
    if loop is not None:
        if postgres:
            return {"error": "the async crash test runs on SQLite only (leave out postgres)"}
        saver, store = _apersistence(directory, loop)
    else:
        saver, store = _postgres(postgres, directory) if postgres else _persistence(directory)
    plain = phase == "plain"
    try:
        graph = build_graph(opts["target"], checkpointer=saver, store=store, guarded=not plain)
    except CrashTestError as exc:
        return {"error": str(exc)}
    if hooks.install(graph) == 0 and not plain:
        msg = f"{opts['target']} built a graph without a ToolNode: nothing to crash-test"
        return {"error": msg}
    config: dict[str, Any] = {"configurable": {"thread_id": THREAD_ID}}
    hooks.watch(graph, config)
    raised: BaseException | None = None
    answered: list[Any] = []
    try:
        answer = load_function(opts["answer"]) if opts.get("answer") else None
        if loop is not None:
            graph = _AsyncRuns(graph, loop)
        graph.invoke(None if phase == "resume" else opts["input"], config, durability="sync")
        _answer_interrupts(graph, config, answer, answered)
    except CrashTestError as exc:
        return {"error": str(exc)}
    except Exception as exc:  # reported: what the run did
        raised = exc
    if phase == "learn":
        return _learned(opts["target"], graph, config, hooks, raised)
    if plain:
        if raised is not None:
            return {"error": f"the run without the guard failed: {type(raised).__name__}: {raised}"}
        return {"calls": _thread_calls(graph, config), "final": _final(graph, config)}
    if phase == "crash":
        calls = _thread_calls(graph, config)
        return {"killed": False, "raised": repr(raised) if raised else None, "calls": calls}
    call = (str(opts["call"][0]), int(opts["call"][1]))
    return _resumed(graph, config, hooks, call, raised, answered)


_MAX_ANSWERS = 20
"""How many interrupts one phase answers at most (an answer that never ends the run)."""


def _new_loop() -> Any:
    import asyncio

    return asyncio.new_event_loop()


def _apersistence(directory: Path, loop: Any) -> tuple[Any, Any]:
    """`AsyncSqliteSaver` and `AsyncSqliteStore` on the phase's event loop."""
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    async def connect(name: str) -> Any:
        conn = await aiosqlite.connect(directory / name)
        for pragma in _PRAGMAS:
            await conn.execute(pragma)
        return conn

    async def open_both() -> tuple[Any, Any]:
        saver = AsyncSqliteSaver(await connect(DATABASES[0]))
        store = AsyncSqliteStore(await connect(DATABASES[1]))
        await saver.setup()
        await store.setup()
        return saver, store

    result: tuple[Any, Any] = loop.run_until_complete(open_both())
    return result


class _AsyncRuns:
    """The graph as the phase drives it, every run and state read on one event loop.

    The async checkpointer and store are bound to that loop, so `invoke` is `ainvoke` (the
    async path of every hook and tool) and `get_state` is `aget_state`, run to their end.
    """

    def __init__(self, graph: Any, loop: Any) -> None:
        self.graph = graph
        self.loop = loop

    def invoke(self, input: Any, config: dict[str, Any], **kwargs: Any) -> Any:
        return self.loop.run_until_complete(self.graph.ainvoke(input, config, **kwargs))

    def get_state(self, config: dict[str, Any]) -> Any:
        return self.loop.run_until_complete(self.graph.aget_state(config))


def _answer_interrupts(
    graph: Any, config: dict[str, Any], answer: Any, answered: list[Any]
) -> None:
    """Answer the graph's interrupts with `answer(value)` until it ends or `answer` says None.

    A human-in-the-loop review or a tool's own `interrupt()` is part of the run the crash
    test replays; a value `answer` returns None for is left pending (the guard's own
    interrupt for an unknown outcome: what the resume surfaced).
    """
    from langgraph.types import Command

    if answer is None:
        return
    for _ in range(_MAX_ANSWERS):
        pending = graph.get_state(config).interrupts
        replies = {i.id: answer(i.value) for i in pending}
        if not pending or any(reply is None for reply in replies.values()):
            return
        answered.extend(i.value for i in pending)
        resume: Any = next(iter(replies.values())) if len(replies) == 1 else replies
        graph.invoke(Command(resume=resume), config, durability="sync")


def _thread_calls(graph: Any, config: dict[str, Any]) -> list[list[str]]:
    """The thread's tool calls in order, as `[tool, canonical JSON arguments]` pairs."""
    return [[tool, json_args(args)] for tool, _, _, args in ordered_calls(_messages(graph, config))]


def _final(graph: Any, config: dict[str, Any]) -> str | None:
    """The text of the thread's last AIMessage (the final answer), or None."""
    for message in reversed(_messages(graph, config)):
        if getattr(message, "type", None) == "ai":
            return str(message.text)
    return None


def _learned(
    target: str, graph: Any, config: dict[str, Any], hooks: Hooks, raised: BaseException | None
) -> dict[str, Any]:
    if raised is not None:
        return {"error": f"the learning run of {target} failed: {type(raised).__name__}: {raised}"}
    if graph.get_state(config).interrupts:
        msg = f"the learning run of {target} stopped at an interrupt: give an input that finishes"
        return {"error": msg}
    calls = ordered_calls(_messages(graph, config))
    found = [
        {
            "tool": tool,
            "ordinal": ordinal,
            "replay": hooks.classes.get((tool, ordinal)),
            "args": args,
        }
        for tool, ordinal, _, args in calls
    ]
    # Calls the ledger saw that the thread's messages do not hold (a sub-agent's, a worker's
    # inside a tool, a subgraph's that handed off with a Command): crashed at too.
    known = {(tool, ordinal) for tool, ordinal, _, _ in calls}
    found.extend(
        {"tool": tool, "ordinal": ordinal, "replay": replay, "args": hooks.seen_args[tool, ordinal]}
        for (tool, ordinal), replay in hooks.classes.items()
        if (tool, ordinal) not in known
    )
    if not found:
        return {"error": f"the input made no tool call in {target}: give one that does (--input)"}
    if hooks.ledgered == 0:
        msg = (
            f"the tool calls of {target} never reached a replay guard's ledger: guard the graph "
            "(guard.middleware() or guard.wrap(ToolNode)) and give the guard the store "
            "(ReplayGuard(store=store) or compile(store=store))"
        )
        return {"error": msg}
    return {
        "calls": found,
        "thread": _thread_calls(graph, config),
        "final": _final(graph, config),
        "unclassified": sorted(hooks.unclassified),
    }


def _resumed(
    graph: Any,
    config: dict[str, Any],
    hooks: Hooks,
    call: tuple[str, int],
    raised: BaseException | None,
    answered: list[Any],
) -> dict[str, Any]:
    did: list[str] = []
    surfaced = raised is not None
    if hooks.starts[call]:
        did.append("ran again" if _started_before(hooks.starts_file, call) else "ran")
    messages = _messages(graph, config)
    ids = [i for tool, ordinal, i, _ in ordered_calls(messages) if (tool, ordinal) == call]
    for message in messages:
        if getattr(message, "tool_call_id", None) in ids:
            metadata = getattr(message, "response_metadata", {}) or {}
            if metadata.get("replay_guard") == "replayed":
                did.append("replayed")
    if isinstance(raised, ReplayGuardError):
        facts = getattr(raised, "facts", None) or {}
        tool = facts.get("tool")
        did.append(f"{type(raised).__name__} ({tool})" if tool else type(raised).__name__)
    elif raised is not None:
        did.append(f"raised {type(raised).__name__}: {raised}")
    elif graph.get_state(config).interrupts:
        did.append("interrupt")
        surfaced = True
    elif call in hooks.refused:
        # The callback handler refuses by telling the model (a blocked call is an
        # observation, it does not crash the run): the call did not run, the model knows.
        did.append("refused (the model was told)")
        surfaced = True
    if answered:
        did.append(f"{len(answered)} interrupt(s) answered")
    return {
        "resume": ", ".join(did) or "went on",
        "surfaced": surfaced,
        "calls": _thread_calls(graph, config),
        "final": _final(graph, config),
    }


def _started_before(starts_file: str, call: tuple[str, int]) -> bool:
    """Whether the crashed process started the call's body."""
    with open(starts_file, encoding="utf-8") as lines:
        for line in lines:
            start = json.loads(line)
            if start["phase"] == "crash" and (start["tool"], start["ordinal"]) == call:
                return True
    return False
