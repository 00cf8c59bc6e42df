"""Run the crash test: learn the tool calls, then crash and resume each in fresh processes."""

from __future__ import annotations

import importlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph_replay_guard.crashtest.child import DATABASES, empty_databases
from langgraph_replay_guard.crashtest.report import (
    POINTS,
    PURE_HINT,
    CallSeen,
    CrashReport,
    Trial,
)
from langgraph_replay_guard.crashtest.target import CrashTestError, split_target

__all__ = ["DEFAULT_INPUT", "crashtest", "target_name"]

DEFAULT_INPUT: dict[str, Any] = {"messages": [{"role": "user", "content": "Go."}]}
"""The input when none is given: one user message."""

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def _check_extras(postgres: str | None) -> None:
    """Refuse at once when a backend the phases need is not installed.

    Every phase's process server imports LangGraph's SQLite classes first: without them it
    dies before it answers, which said only "the process server died".
    """
    needed = [("sqlite", "SQLite", ("langgraph.checkpoint.sqlite", "langgraph.store.sqlite"))]
    if postgres is not None:
        modules = ("langgraph.checkpoint.postgres", "langgraph.store.postgres")
        needed.append(("postgres", "PostgreSQL", modules))
    for extra, label, modules in needed:
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError:
                msg = (
                    f"the crash test runs its processes on {label} and {module} is not "
                    f"installed: pip install 'langgraph-replay-guard[{extra}]'"
                )
                raise CrashTestError(msg) from None


def crashtest(
    target: str | Callable[..., Any],
    input: Any = None,
    *,
    allow_rerun: Sequence[str] = (),
    jobs: int = 2,
    timeout: float = 120.0,
    compare_unguarded: bool = False,
    points: Sequence[str] | None = None,
    answer: str | Callable[[Any], Any] | None = None,
    postgres: str | None = None,
    asynchronous: bool = False,
    crashes: int = 1,
) -> CrashReport:
    """Crash-test a guarded graph: SIGKILL each tool call at each crash point, then resume.

    `target` names a function taking `checkpointer=` and `store=` keyword arguments that
    returns the compiled, guarded graph (the guard given that store, or the graph compiled
    with it). The input runs once to learn the tool calls; then, for each call and each
    crash point (`POINTS`), a fresh process runs the graph on fresh SQLite databases
    (`SqliteSaver`, `SqliteStore`, `durability="sync"`) and is killed with SIGKILL there,
    and another process resumes the thread (`invoke(None, config)`). The graph must be
    deterministic (a scripted model, `ScriptedChatModel`): every process replays the input.

    Each trial is checked against the learning run: the thread's tool calls after the resume
    must be the learning run's (a prefix of them when the resume stopped), and every body
    start and every effect a tool counted (`crashtest.effect`) must be one the learning run
    made. A trial that went another way (a model that restarts its script on resume makes new
    calls) is *not verified*: the report names the call and the crash point, and it is not
    `ok`. Body starts are counted per call and per tool and arguments, so an unsafe body run
    again under a new tool call id fails the trial too, as does an unsafe call whose outcome
    the crash left unknown and whose resume went on without raising or interrupting.

    Args:
        target: `path/to/file.py:FUNCTION` or `package.module:FUNCTION`, or the function
            itself (defined at the top level of an importable module: each process imports
            it). A *composition*: any function that builds the graph or agent.
        input: The graph's input (JSON-serializable); one user message when None.
        allow_rerun: Tools whose second run after a crash is fine: `pure` tools you checked
            have no side effect. Any other `pure` tool that runs twice fails the test.
        jobs: How many trials run at once.
        timeout: Seconds each child process may take.
        compare_unguarded: Also run the input once on the graph the function builds with
            `guarded=False` and compare its tool calls and final answer with the guarded
            learning run (the guard must not change a clean run).
        points: The crash points to use (default: all of `POINTS`).
        answer: A function (or `FILE_OR_MODULE:FUNCTION`) that answers the graph's
            interrupts: it gets an interrupt's value and returns the resume value (a
            human-in-the-loop decision), or None to leave it pending. Every phase answers
            the interrupts it meets with it, so a graph that pauses for a person runs to its
            end.
        postgres: A PostgreSQL URI: run every phase on `PostgresSaver` and `PostgresStore`
            (a schema per trial, left on the server) instead of fresh SQLite files.
        asynchronous: Run every phase with `ainvoke` (the async hooks and tools) instead of
            `invoke`.
        crashes: How many processes die at each trial's point: 2 kills the first resume at
            the same point again (when it gets there) before the last resume.

    Returns:
        The report; `report.ok` is False when an `unsafe` or `idempotent` call's body started
        twice without its stable idempotency key, a `pure` call ran twice, an unsafe call's
        unknown outcome did not surface, a trial could not be verified, or the unguarded run
        differed.

    Raises:
        CrashTestError: The target cannot be loaded, does not build a compiled graph with a
            `ToolNode`, makes no tool call, or its calls never reach a guard's ledger.

    Example:
        ```text
        from langgraph_replay_guard.testing import crashtest

        def test_my_agent_survives_crashes():
            report = crashtest("my_agent.py:build_graph")
            assert report.ok, report.render()
        ```
    """
    _check_extras(postgres)
    target = target_name(target)
    split_target(target)  # a malformed target fails here, before any process starts
    if crashes < 1:
        msg = f"crashes={crashes}: at least one process must die per trial"
        raise CrashTestError(msg)
    given = DEFAULT_INPUT if input is None else input
    answering = None if answer is None else target_name(answer)
    allowed = frozenset(allow_rerun)
    chosen = tuple(POINTS) if points is None else tuple(points)
    unknown = [p for p in chosen if p not in POINTS]
    if unknown:
        msg = f"unknown crash point(s) {unknown}: choose from {list(POINTS)}"
        raise CrashTestError(msg)
    with tempfile.TemporaryDirectory(prefix="replay-guard-crashtest-") as root:
        servers = _Servers(target, timeout, max(1, jobs), root)
        try:
            # The phases' fresh SQLite databases are copies of one pair set up here (the
            # async phases' too: same tables; their setup() adds what a connection needs).
            empty = None if postgres else _empty_databases(root)

            def fresh(name: str) -> str:
                return _fresh(root, name, empty)

            learn_dir = fresh("learn")
            base = {
                "target": target,
                "input": given,
                "answer": answering,
                "postgres": postgres,
                "asynchronous": asynchronous,
            }
            learned = servers.ask({**base, "dir": learn_dir, "phase": "learn"})
            if "error" in learned:
                raise CrashTestError(str(learned["error"]))
            calls = tuple(CallSeen(**call) for call in learned["calls"])
            path = _Path(
                calls=learned["thread"],
                starts=_read_starts(Path(learn_dir) / "starts"),
                allowed=allowed,
                classes=_classes(calls, _read_starts(Path(learn_dir) / "starts")),
                final=learned.get("final"),
                crashes=crashes,
            )
            plan = [(call, point) for call in calls for point in chosen]

            def one(index: int) -> Trial:
                call, point = plan[index]
                opts = {**base, "dir": fresh(f"trial-{index}")}
                return _trial(servers, opts, call, point, path)

            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                trials = tuple(pool.map(one, range(len(plan))))
            unguarded = None
            if compare_unguarded:
                plain = servers.ask({**base, "dir": fresh("plain"), "phase": "plain"})
                unguarded = _compare_unguarded(learned, plain)
        finally:
            servers.close()
    return CrashReport(
        calls=calls,
        trials=trials,
        unguarded=unguarded,
        learning=tuple(_learning_reruns(path)),
        unclassified=tuple(learned.get("unclassified", ())),
    )


def _learning_reruns(path: _Path) -> list[str]:
    """The unsafe or idempotent bodies that ran twice for one call in the learning run itself.

    No crash is needed for a middleware inside the guard to run a body again (a retry after
    the effect): the trials only compare with the learning run, so it is checked here.
    """
    found = []
    for (tool, ordinal), keys in _per_call(path.starts, path.starts).items():
        replay = path.classes.get(tool)
        if len(keys) < 2 or replay not in ("unsafe", "idempotent"):
            continue
        problem = _rerun_problem(path, tool, keys)
        if problem is not None:
            found.append(f"{tool} #{ordinal} started {len(keys)} times in one run: {problem}")
    return found


def target_name(target: str | Callable[..., Any]) -> str:
    """`FILE_OR_MODULE:FUNCTION` for a target given as a string or as the function itself.

    Raises:
        CrashTestError: The function is not reachable by import (a lambda, a nested function,
            or one defined in `__main__`).
    """
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", "")
    if not module or module == "__main__" or not name.isidentifier():
        msg = (
            f"crashtest cannot import {target!r} in its processes: define the function at the "
            "top level of a module and pass it, or pass 'package.module:FUNCTION'"
        )
        raise CrashTestError(msg)
    return f"{module}:{name}"


def _compare_unguarded(learned: dict[str, Any], plain: dict[str, Any]) -> str | None:
    """How the clean run without the guard differs from the guarded learning run, or None."""
    if "error" in plain:
        return str(plain["error"])
    guarded = learned["thread"]
    if plain["calls"] != guarded:
        return f"its tool calls were {plain['calls']}, guarded {guarded}"
    if plain.get("final") != learned.get("final"):
        return f"its final answer was {plain.get('final')!r}, guarded {learned.get('final')!r}"
    return None


@dataclass(frozen=True)
class _Path:
    """What the learning run did, which every trial is checked against."""

    calls: list[list[str]]
    """The thread's tool calls, `[tool, canonical arguments]` in order."""
    starts: list[dict[str, Any]]
    """Its body starts and counted effects."""
    allowed: frozenset[str]
    classes: dict[str, str]
    """The replay class of each tool the ledger saw."""
    final: str | None
    """The text of the last AIMessage (the final answer)."""
    crashes: int = 1
    """How many processes die at the trial's point before the last resume."""


def _empty_databases(root: str) -> Path:
    """The directory of the empty, set-up databases each phase's directory gets a copy of."""
    path = Path(root) / "empty"
    path.mkdir()
    empty_databases(path)
    return path


def _fresh(root: str, name: str, empty: Path | None) -> str:
    """A new directory for a trial (or the learning run): its own copies of the empty databases.

    A copy of a database `setup()` made is what `setup()` makes on a new file, for each
    trial's processes to open; copying two small files costs less than the DDL and the
    commits in each of them.
    """
    path = Path(root) / name
    path.mkdir()
    if empty is not None:
        for database in DATABASES:
            shutil.copyfile(empty / database, path / database)
    return str(path)


def _trial(
    servers: _Servers, opts: dict[str, Any], call: CallSeen, point: str, path: _Path
) -> Trial:
    where = [call.tool, call.ordinal]
    crash = servers.ask({**opts, "phase": "crash", "kill": [*where, point]})
    error = crash.get("error")
    killed = bool(crash.get("killed"))
    resume = "-"
    surfaced = None
    resumed: dict[str, Any] = {}
    thread = crash.get("calls")
    if error is None:
        again = 0
        for attempt in range(path.crashes):
            ask = {**opts, "phase": "resume", "call": where}
            if attempt < path.crashes - 1:  # the resume dies at the same point too
                ask["kill"] = [*where, point]
            resumed = servers.ask(ask)
            if not resumed.get("killed"):
                break
            again += 1
        error = resumed.get("error")
        resume = str(resumed.get("resume", "-"))
        if again:
            resume = f"killed again {again}x, {resume}"
        surfaced = resumed.get("surfaced")
        thread = resumed.get("calls", thread)
    starts = _read_starts(Path(opts["dir"]) / "starts")
    keys = _per_call(path.starts, starts).get((call.tool, call.ordinal), [])
    diverged = None
    if error is None:
        diverged = _diverged(path, thread or [], starts)
    if error is None and diverged is None and surfaced is False:
        # A resume that went on to the end must end where the learning run ended: a
        # replayed hand-off that lost its `goto` ends elsewhere with the same tool calls.
        final = resumed.get("final")
        if final != path.final:
            diverged = f"the resumed run ended with {final!r}, the learning run with {path.final!r}"
    return Trial(
        call=call,
        point=point,
        killed=killed,
        starts=len(keys),
        keys=tuple(keys),
        resume=resume,
        error=None if error is None else str(error),
        allowed_rerun=call.tool in path.allowed,
        diverged=diverged,
        reruns=tuple(_reruns(path, starts, call)),
        surfaced=None if surfaced is None else bool(surfaced),
    )


def _classes(calls: Sequence[CallSeen], starts: list[dict[str, Any]]) -> dict[str, str]:
    """The replay class of each tool a ledger saw in the learning run (sub-agents' too)."""
    found = {s["tool"]: s["replay"] for s in starts if s.get("replay")}
    found.update({c.tool: c.replay for c in calls if c.replay is not None})
    return found


def _read_starts(path: Path) -> list[dict[str, Any]]:
    """The body starts and counted effects of a phase's `starts` file, in order."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [{"kind": "body", "args": "{}", **json.loads(line)} for line in lines if line]


def _diverged(path: _Path, thread: list[list[str]], starts: list[dict[str, Any]]) -> str | None:
    """How the trial's runs left the learning run's path, or None when they kept to it.

    The thread's tool calls must be the learning run's, in order (a prefix when the resume
    stopped); every body that started and every effect counted must be one of the learning
    run's (a sub-agent's calls are not in the thread's messages, its bodies are).
    """
    for index, (tool, args) in enumerate(thread):
        if index >= len(path.calls):
            return f"the thread made {tool}({args}), a call the learning run never made"
        if [tool, args] != path.calls[index]:
            learned_tool, learned_args = path.calls[index]
            return (
                f"the thread's call {index + 1} was {tool}({args}) where the learning run "
                f"made {learned_tool}({learned_args})"
            )
    # A tool that counts its effects is judged by them: its body's input may carry what a
    # middleware added per process (a trace id).
    effect_tools = _effect_tools([*path.starts, *starts])
    known = {(s["kind"], s["tool"], s["args"]) for s in path.starts}
    for start in starts:
        if start["kind"] == "body" and start["tool"] in effect_tools:
            continue
        if (start["kind"], start["tool"], start["args"]) not in known:
            what = "effect" if start["kind"] == "effect" else "body"
            return (
                f"the {what} of {start['tool']}({start['args']}) ran, "
                "which the learning run never ran"
            )
    return None


def _effect_tools(lines: list[dict[str, Any]]) -> set[str]:
    """The tools judged by the effects they count.

    Those named by an effect, and those whose calls counted one (a tool that asks a person,
    then sends, counts a `send`).
    """
    found = {s["tool"] for s in lines if s["kind"] == "effect"}
    found.update(str(s["call"][0]) for s in lines if s["kind"] == "effect" and s.get("call"))
    return found


def _reruns(path: _Path, starts: list[dict[str, Any]], call: CallSeen) -> list[str]:
    """The bodies and effects that started more often than in the learning run, unsafely.

    Counted per call (tool and ordinal) and per tool and arguments: a call made again under a
    new tool call id has a new ordinal but the same arguments. Where a tool counts its own
    effects (`crashtest.effect`), they are what counts for that tool. The trial's own call
    per ordinal is `Trial.starts`' job.
    """
    effect_tools = _effect_tools([*path.starts, *starts])

    def counts(lines: list[dict[str, Any]]) -> dict[tuple[str, str], list[str | None]]:
        keys: dict[tuple[str, str], list[str | None]] = {}
        for s in lines:
            if s["kind"] == ("effect" if s["tool"] in effect_tools else "body"):
                keys.setdefault((s["tool"], s["args"]), []).append(s["key"])
        return keys

    before, now = counts(path.starts), counts(starts)
    found: list[str] = []
    for (tool, args), keys in now.items():
        learned = len(before.get((tool, args), []))
        if len(keys) <= learned:
            continue
        problem = _rerun_problem(path, tool, keys)
        if problem is not None:
            found.append(
                f"{tool}({args}) started {len(keys)} times in the crash and the resume, "
                f"{learned} in the learning run: {problem}"
            )
    for (tool, ordinal), keys in _per_call(path.starts, starts).items():
        if len(keys) < 2 or (tool, ordinal) == (call.tool, call.ordinal):
            continue
        problem = _rerun_problem(path, tool, keys)
        if problem is not None:
            found.append(f"{tool} #{ordinal} started {len(keys)} times: {problem}")
    return found


def _per_call(
    learned: list[dict[str, Any]], starts: list[dict[str, Any]]
) -> dict[tuple[str, int], list[str | None]]:
    """The key of each start of each call, by the call's tool and ordinal.

    A call whose body counts its effects (`crashtest.effect`) is counted by them: a body
    that LangGraph reruns by design (after an `interrupt()`) starts again without acting
    again. Other calls are counted by their body starts.
    """
    counted = {
        tuple(s["call"]) for s in [*learned, *starts] if s["kind"] == "effect" and s.get("call")
    }
    keys: dict[tuple[str, int], list[str | None]] = {}
    for s in starts:
        if s["kind"] == "effect" and s.get("call"):
            where = (str(s["call"][0]), int(s["call"][1]))
        elif s["kind"] == "body" and s["ordinal"] and (s["tool"], s["ordinal"]) not in counted:
            where = (s["tool"], int(s["ordinal"]))
        else:
            continue
        keys.setdefault(where, []).append(s["key"])
    return keys


def _rerun_problem(path: _Path, tool: str, keys: list[str | None]) -> str | None:
    """Why a body that started again is a problem (its class and keys), or None."""
    replay = path.classes.get(tool)
    if replay == "idempotent" and None not in keys and len(set(keys)) == 1:
        return None
    if replay in ("pure", None) and tool in path.allowed:
        return None
    if replay in ("pure", None):
        return f"{'pure' if replay else 'not ledgered'}: {PURE_HINT}"
    if replay == "idempotent":
        return "idempotent, without its stable idempotency key"
    return f"{replay}: its body ran again"


class _Server:
    """One phase server (`server.serve` in a new interpreter): forks a process per phase."""

    def __init__(self, target: str, timeout: float, log: Path) -> None:
        path = os.environ.get("PYTHONPATH")
        env = {
            **os.environ,
            "LANGSMITH_TRACING": "false",
            "PYTHONPATH": os.pathsep.join([_PACKAGE_ROOT, *([path] if path else [])]),
        }
        command = [sys.executable, "-m", "langgraph_replay_guard.crashtest", target, f"{timeout}"]
        with log.open("ab") as errors:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env
            )
        self.ready = False
        self.timeout = timeout

    def ask(self, opts: dict[str, Any]) -> dict[str, Any]:
        """Run one phase; its result, `{"killed": True}` or `{"error": ...}`."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None
        assert stdout is not None
        # The server bounds each phase; this bounds the server (an import that hangs).
        watchdog = threading.Timer(2 * self.timeout + 60, self.process.kill)
        watchdog.start()
        try:
            if not self.ready:
                self.ready = stdout.readline() == b"ready\n"
            stdin.write(json.dumps(opts).encode() + b"\n")
            stdin.flush()
            line = stdout.readline()
        except OSError:
            line = b""
        finally:
            watchdog.cancel()
        if not self.ready or not line:
            return {"error": "the crash test's process server died (see --timeout)"}
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        """End the server (it exits when its input ends)."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Servers:
    """A pool of phase servers, one per job; each trial borrows one."""

    def __init__(self, target: str, timeout: float, jobs: int, root: str) -> None:
        self.idle: queue.Queue[_Server] = queue.Queue()
        self.all = [_Server(target, timeout, Path(root) / "servers.log") for _ in range(jobs)]
        for server in self.all:
            self.idle.put(server)

    def ask(self, opts: dict[str, Any]) -> dict[str, Any]:
        server = self.idle.get()
        try:
            return server.ask(opts)
        finally:
            self.idle.put(server)

    def close(self) -> None:
        for server in self.all:
            server.close()
