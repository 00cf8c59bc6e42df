"""Child Python processes forked from a warm zygote: real processes without the import cost.

A test that runs `python -m some.module ...` pays LangGraph's and LangChain's imports (1-2 s,
more under load) in every child. `run` takes the same arguments as `subprocess.run` and, for a
`[sys.executable, "-m", module, ...]`, `[sys.executable, script.py, ...]` or
`[sys.executable, "-c", code, ...]` command, forks the child from a zygote: a process that
imported the heavy modules once and does nothing else (no thread, no connection, no open
database), so what a forked child inherits is what its own imports would have made. Under
xdist the controller starts the run's zygotes and every worker uses them (`start_shared`);
a pytest in one process starts its own.
The child is a real process with its own pid, stdin/stdout/stderr, working directory and
environment; a SIGKILL (its own, or the test's through `pid`) ends it as it ends a cold one,
and its exit status is reported the way `subprocess` reports it (`-9`).

What differs from a cold start, and how it is kept out of the tests' way:
- Hash randomization: every child of one zygote shares its hash seed. Two zygotes run with
  different seeds and each thread's consecutive children alternate between them, so a crash
  test's killed run and its resume still see different seeds (as two cold processes would).
- Interpreter options read at start-up: the child applies `PYTHONWARNINGS`,
  `PYTHONUNBUFFERED` (its standard streams are rebuilt buffered as a fresh interpreter's),
  `PYTHONDONTWRITEBYTECODE` and the `PYTHONPATH` entries it adds (a checkout's own directory:
  the zygote imports from it already; an entry it lacks is not removed). A command with
  interpreter flags, or any other `PYTHON*` variable that differs from the zygote's, runs cold
  with `subprocess`. Tests that measure start-up itself
  (imports, memory, a missing extra) call `subprocess.run` directly.
- `REPLAY_GUARD_TEST_COLD=1` runs every child cold (to compare, or to rule the zygote out).

A library that starts a process itself (the MCP adapter's stdio servers, Jupyter's kernels)
is given `launcher_command(args)`: a small launcher (`tests/warm_launch.py`, no heavy import)
that hands its standard streams to a zygote's child running the command and exits with its
exit status.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import select
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
COLD_ENV = "REPLAY_GUARD_TEST_COLD"
ZYGOTE_ENV = "REPLAY_GUARD_TEST_ZYGOTE"  # the socket of the zygote `tests/warm_launch.py` uses
# The sockets of the zygotes the xdist controller started for all its workers (`start_shared`).
SHARED_ENV = "REPLAY_GUARD_TEST_ZYGOTES"
LAUNCHER = Path(__file__).with_name("warm_launch.py")
# What every process test's child imports anyway; imported once in each zygote.
PRELOAD = (
    "langchain_core.messages",
    "langchain_core.tools",
    "langchain.agents",
    "langgraph.graph",
    "langgraph.prebuilt",
    "langgraph.checkpoint.sqlite",
    "langgraph.store.sqlite",
    "langgraph.checkpoint.postgres",
    "langgraph.store.postgres",
    "langgraph_replay_guard",
    "langgraph_replay_guard.cli.main",
    "tests.integration.replay_graphs",
    # The crash tests' targets: each `crashtest` phase server (two per crash test, about 70 a
    # run) imported its module again (its tools' schemas: 50 ms for the compositions).
    "tests.integration.compositions",
    "tests.integration.attack_fidelity_graphs",
    "tests.integration.crashtest_graphs",
    "deepagents",
    "mcp.server.fastmcp",  # the MCP servers the MCP tests start (`stdio_command`)
    "ipykernel.kernelapp",  # the notebooks' kernels (tests/unit/test_notebooks.py)
)
PRELOAD_PACKAGE = "langgraph_replay_guard"  # and every module in it (the CLI's commands...)
_ZYGOTES = 2
# Start-up variables a child applies itself (the rest must match the zygote's, or it runs cold).
_APPLIED_VARS = ("PYTHONWARNINGS", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH")


# ---------------------------------------------------------------- the zygote (its own process)


def _apply_warnings(value: str | None, base: list[Any]) -> None:
    """Give the child the warning filters `PYTHONWARNINGS=value` gives a fresh interpreter."""
    import warnings

    warnings.filters[:] = base
    sys.warnoptions[:] = []
    if value:
        options = [part.strip() for part in value.split(",") if part.strip()]
        sys.warnoptions[:] = options
        processing = getattr(warnings, "_processoptions", None)
        if processing is not None:
            processing(options)


def _reopen_stdio(unbuffered: bool) -> None:
    """Standard streams on fds 0-2 buffered as a fresh interpreter's (`-u` / PYTHONUNBUFFERED)."""
    import io

    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
        buffered: Any
        if fd == 0:
            buffered = io.BufferedReader(raw)
        else:
            buffered = raw if unbuffered else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(
            buffered,
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=not unbuffered and (fd == 2 or (fd == 1 and raw.isatty())),
            write_through=unbuffered and fd != 0,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _child(request: dict[str, Any], fds: list[int], base_filters: list[Any]) -> None:
    """In the forked child: become the requested command, run it, exit as Python would."""
    import runpy
    import traceback

    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _apply_warnings(request["env"].get("PYTHONWARNINGS"), base_filters)
    _reopen_stdio(bool(request["env"].get("PYTHONUNBUFFERED")))
    sys.dont_write_bytecode = bool(request["env"].get("PYTHONDONTWRITEBYTECODE"))
    if request.get("python"):
        # `run(..., warm_python=True)`: the `python script` children this child starts itself
        # (`sys.executable`, as an example's MCP servers are) go through the launcher
        # (`launcher_executable`), so they are this zygote's children too, not cold starts.
        sys.executable = request["python"]
        os.environ[ZYGOTE_ENV] = request["zygote"]
    for entry in reversed(_paths(request["env"].get("PYTHONPATH"))):
        if entry not in sys.path:
            sys.path.insert(1, entry)
    mode, what, args = request["mode"], request["what"], request["args"]
    code = 0
    try:
        if mode == "-m":
            # A cold `python -m` runs the module once, as __main__: drop the zygote's copy so
            # runpy neither warns that it was imported already nor skips its import effects.
            sys.modules.pop(what, None)
            sys.argv = [what, *args]  # runpy sets argv[0] to the module's file
            sys.path[0] = os.getcwd()
            runpy.run_module(what, run_name="__main__", alter_sys=True)
        elif mode == "-c":
            sys.argv = ["-c", *args]
            sys.path[0] = ""
            exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = [what, *args]
            sys.path[0] = os.path.dirname(os.path.abspath(what))
            runpy.run_path(what, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    # The rest of a normal interpreter exit: non-daemon threads joined, atexit handlers run,
    # buffers flushed; then out without unwinding into the zygote's loop.
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(code)


def _warm_deepagents() -> None:
    """Build one deep agent, so a child's first `create_deep_agent` finds deepagents' caches full.

    Its first call in a process scans every installed distribution's metadata for its own
    version and loads its model profiles (about 90 ms); a crash-test phase of the deep-agent
    composition is a new process each time. Nothing runs and nothing stays open: a graph is
    built and dropped (no thread, no connection).
    """
    with contextlib.suppress(Exception):
        from deepagents import create_deep_agent

        from langgraph_replay_guard.testing import ScriptedChatModel

        create_deep_agent(model=ScriptedChatModel(script=[]), tools=[])


def _serve(path: str) -> None:
    """Import the heavy modules once, then fork a child per request on the socket at `path`."""
    import importlib
    import pkgutil
    import warnings

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    package = importlib.import_module(PRELOAD_PACKAGE)
    for found in pkgutil.walk_packages(package.__path__, f"{PRELOAD_PACKAGE}."):
        # Only what a child would import anyway: a module of an extra that is not installed
        # fails here and is left out.
        if found.name.rsplit(".", 1)[-1] != "__main__":  # a __main__ runs its program
            with contextlib.suppress(Exception):
                importlib.import_module(found.name)
    _warm_deepagents()
    base_filters = list(warnings.filters)
    # The children inherit the imports untouched by their collector (tests/gc_tuning.py).
    from tests import gc_tuning

    gc_tuning.tune()
    gc_tuning.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under another name and renamed once listening: a process that finds `path` (a
    # worker of the run, with `SHARED_ENV`) can connect at once.
    listener.bind(f"{path}.binding")
    listener.listen(64)
    os.rename(f"{path}.binding", path)
    print("ready", flush=True)
    waiting: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    while True:
        readable, _, _ = select.select([listener, sys.stdin, *waiting], [], [])
        for ready in readable:
            if ready is sys.stdin:
                if not sys.stdin.buffer.read1(1):  # the test worker is gone: stop
                    for pid, _ in waiting.values():
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)
                    return
            elif ready is listener:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    for pidfd, (_, other) in waiting.items():
                        os.close(pidfd)
                        other.close()
                    _child(request, fds, base_filters)
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                waiting[os.pidfd_open(pid)] = (pid, conn)
            else:
                pid, conn = waiting.pop(ready)
                os.close(ready)
                _, status, usage = os.wait4(pid, 0)
                cpu = usage.ru_utime + usage.ru_stime  # the child's (and its reaped children's)
                with contextlib.suppress(OSError):
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)} {cpu:.6f}\n".encode())
                conn.close()


# ---------------------------------------------------------------- the test side


class _Zygote:
    def __init__(self, seed: int) -> None:
        self.dir = tempfile.mkdtemp(prefix="replay-guard-zygote-")
        self.path = os.path.join(self.dir, "socket")
        env = {**os.environ, "PYTHONHASHSEED": str(seed), "LANGSMITH_TRACING": "false"}
        self.env = env
        self.ready = False
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.warm_children", self.path],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
        )

    def wait_ready(self) -> None:
        """Block until the zygote has imported everything and listens."""
        if self.ready:
            return
        assert self.proc.stdout is not None
        self.ready = self.proc.stdout.readline().strip() == "ready"
        if not self.ready:
            msg = f"the test zygote did not start (exit {self.proc.wait()})"
            raise RuntimeError(msg)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the zygote stops when its stdin ends
            self.proc.wait(timeout=10)
        with contextlib.suppress(Exception):
            self.proc.kill()
        for name in (self.path, os.path.join(self.dir, _LAUNCHER_EXECUTABLE)):
            with contextlib.suppress(OSError):
                os.unlink(name)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)


_LAUNCHER_EXECUTABLE = "python"  # `launcher_executable`'s file, in the first zygote's directory
_lock = threading.Lock()
_zygotes: list[_Zygote | _Shared] = []
_last = threading.local()
_child_cpu = [0.0]  # CPU seconds of the warm children this process waited for


def _add_child_cpu(seconds: float) -> None:
    with _lock:
        _child_cpu[0] += seconds


def children_cpu() -> float:
    """CPU seconds (user + system) of the warm children this process has waited for.

    A warm child is the zygote's child, so `RUSAGE_CHILDREN` never sees it: the zygote sends
    its usage with its exit status (tests/conftest.py adds it to the test's CPU time).
    """
    return _child_cpu[0]


def start() -> None:
    """Start the zygotes if they are not running; they import in the background meanwhile.

    In an xdist worker whose controller started them (`start_shared`), use those instead.
    """
    with _lock:
        if not _zygotes:
            shared = os.environ.get(SHARED_ENV)
            if shared:
                _zygotes.extend(_Shared(path) for path in shared.split(os.pathsep))
                return
            seeds = random.sample(range(1, 2**31), _ZYGOTES)
            _zygotes.extend(_Zygote(seed) for seed in seeds)  # they import side by side
            atexit.register(_close_all)


def start_shared() -> None:
    """Start the zygotes in the xdist controller, for every worker it starts afterwards.

    The workers find them through `SHARED_ENV` (inherited, as the controller's environment
    is): one pair of zygotes for the run instead of a pair per worker, each importing
    LangGraph, LangChain and the package (about 3 s of CPU a zygote). A zygote serves any
    number of processes (it forks a child per request); each worker still alternates its
    children between the two seeds. The controller stops them at its exit (`_close_all`),
    when their CPU, and their children's, is reaped.
    """
    if os.environ.get(SHARED_ENV) or os.environ.get(COLD_ENV) == "1":
        return  # a nested run uses its outer run's (a worker's environment names them)
    start()
    with _lock:
        os.environ[SHARED_ENV] = os.pathsep.join(zygote.path for zygote in _zygotes)


class _Shared:
    """A zygote the xdist controller started (`start_shared`), known by its socket."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.dir = os.path.dirname(path)
        self.env = {k: v for k, v in os.environ.items() if k != SHARED_ENV}
        self.env["LANGSMITH_TRACING"] = "false"

    def wait_ready(self) -> None:
        """Wait until it listens: its socket appears under `path` once it does (`_serve`)."""
        deadline = time.monotonic() + 300
        while not os.path.exists(self.path):
            if time.monotonic() > deadline:
                msg = f"the run's test zygote at {self.path} did not start"
                raise RuntimeError(msg)
            time.sleep(0.02)

    def close(self) -> None:
        """Nothing: the controller that started it stops it."""


class _Remote:
    """A zygote started by another process (the test worker's), known by its socket."""

    def __init__(self, path: str) -> None:
        self.path = path


def _zygote() -> _Zygote | _Shared | _Remote:
    """The zygote for this thread's next child: not the one its previous child came from."""
    remote = os.environ.get(ZYGOTE_ENV)
    if remote:  # in tests/warm_launch.py: the worker's zygote
        return _Remote(remote)
    start()
    with _lock:
        for zygote in _zygotes:
            zygote.wait_ready()
        index = (getattr(_last, "index", -1) + 1) % len(_zygotes)
        _last.index = index
        return _zygotes[index]


def _close_all() -> None:
    for zygote in _zygotes:
        zygote.close()
    _zygotes.clear()


def _split(argv: Sequence[Any]) -> tuple[str, str, list[str]] | None:
    """(mode, module/code/script, args) for a command a zygote can run, else None."""
    parts = [os.fspath(part) for part in argv]
    if len(parts) < 2 or parts[0] != sys.executable:
        return None
    if parts[1] == "-u":
        # Unbuffered streams (execnet starts pytest-xdist's workers so): PYTHONUNBUFFERED=1,
        # which a warm child honours as a cold one does (`WarmProcess` sets it).
        return _split([parts[0], *parts[2:]])
    if parts[1] in ("-m", "-c") and len(parts) >= 3:
        return parts[1], parts[2], parts[3:]
    if parts[1].startswith("-"):
        return None  # interpreter flags: a cold start honours them
    return "script", parts[1], parts[2:]


def _paths(value: str | None) -> list[str]:
    return [os.path.abspath(part) for part in (value or "").split(os.pathsep) if part]


def _warmable(env: Mapping[str, str], zygote_env: Mapping[str, str]) -> bool:
    """Whether a child with `env` starts as a zygote's child would (same interpreter options)."""

    def python_vars(source: Mapping[str, str]) -> dict[str, str]:
        skip = (*_APPLIED_VARS, "PYTHONHASHSEED")
        return {k: v for k, v in source.items() if k.startswith("PYTHON") and k not in skip}

    # A PYTHONPATH naming this checkout adds nothing: the zygote imports from it already.
    extra = set(_paths(env.get("PYTHONPATH"))) - set(_paths(zygote_env.get("PYTHONPATH")))
    return (
        python_vars(env) == python_vars(zygote_env)
        and "PYTHONHASHSEED" not in env
        and extra <= {str(ROOT)}
    )


class WarmProcess:
    """A child forked from a zygote, driven like `subprocess.Popen` (pid, wait, kill, pipes)."""

    def __init__(
        self,
        argv: Sequence[Any],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        text: bool = False,
        warm_python: bool = False,
    ) -> None:
        split = _split(argv)
        assert split is not None, argv
        mode, what, args = split
        self.args = list(argv)
        self._text = text
        self.returncode: int | None = None
        zygote = _zygote()
        ours: list[int] = []  # the parent's ends, closed once sent
        sent: list[int] = []
        self.stdin: IO[Any] | None = None
        self.stdout: IO[Any] | None = None
        self.stderr: IO[Any] | None = None

        def fd_for(spec: Any, reading: bool, name: str) -> int:
            if spec is subprocess.PIPE:
                read, write = os.pipe()
                child, parent = (read, write) if reading else (write, read)
                ours.append(child)
                mode_ = "w" if reading else "r"
                handle = os.fdopen(parent, mode_ + ("" if text else "b"), closefd=True)
                setattr(self, name, handle)
                return child
            if spec is subprocess.DEVNULL or (spec is None and reading):
                fd = os.open(os.devnull, os.O_RDONLY if reading else os.O_WRONLY)
                ours.append(fd)
                return fd
            if spec is None:
                return {"stdout": 1, "stderr": 2}[name]
            if isinstance(spec, int):
                return spec
            return int(spec.fileno())

        sent.append(fd_for(stdin, True, "stdin"))
        sent.append(fd_for(stdout, False, "stdout"))
        sent.append(sent[1] if stderr is subprocess.STDOUT else fd_for(stderr, False, "stderr"))
        child_env = dict(env if env is not None else os.environ)
        child_env.pop(ZYGOTE_ENV, None)
        if os.fspath(self.args[1]) == "-u":
            child_env["PYTHONUNBUFFERED"] = "1"  # what `-u` means (`_split`)
        request = {
            "mode": mode,
            "what": what,
            "args": args,
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "env": child_env,
        }
        if warm_python:
            request["python"] = launcher_executable()
            request["zygote"] = zygote.path
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._conn.connect(zygote.path)
            socket.send_fds(self._conn, [json.dumps(request).encode()], sent)
        finally:
            for fd in ours:
                os.close(fd)
        self._answers = self._conn.makefile("r")
        self.pid = int(self._answers.readline())

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], 0)
            if ready:
                self._finish()
        return self.returncode

    def _finish(self) -> None:
        fields = self._answers.readline().split()
        self.returncode = int(fields[0]) if fields else -signal.SIGKILL
        if len(fields) > 1:
            _add_child_cpu(float(fields[1]))
        self._answers.close()
        self._conn.close()

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._finish()
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Write `input`, read stdout and stderr to their ends, wait (as `Popen.communicate`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        outputs: dict[str, list[Any]] = {"stdout": [], "stderr": []}

        def drain(name: str) -> None:
            stream = getattr(self, name)
            if stream is not None:
                outputs[name].append(stream.read())
                stream.close()

        threads = [threading.Thread(target=drain, args=(n,), daemon=True) for n in outputs]
        for thread in threads:
            thread.start()
        if self.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                if input is not None:
                    self.stdin.write(input)
                self.stdin.close()
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        empty = "" if self._text else b""

        def joined(name: str) -> Any:
            if getattr(self, name) is None and not outputs[name]:
                return None
            return outputs[name][0] if outputs[name] else empty

        return joined("stdout"), joined("stderr")


def popen(argv: Sequence[Any], **kwargs: Any) -> Any:
    """`subprocess.Popen(argv, **kwargs)`, forked from a zygote when the command allows it."""
    warm_python = kwargs.pop("warm_python", False)  # a cold child's own children start cold
    env = kwargs.get("env")
    unknown = set(kwargs) - {"cwd", "env", "stdin", "stdout", "stderr", "text"}
    if os.environ.get(COLD_ENV) == "1" or unknown or _split(argv) is None:
        return subprocess.Popen(argv, **kwargs)
    zygote = _zygote_env()
    if not _warmable(env if env is not None else os.environ, zygote):
        return subprocess.Popen(argv, **kwargs)
    return WarmProcess(argv, warm_python=warm_python, **kwargs)


def launcher_executable() -> str:
    """An executable that runs `python *args` as a warm child: `sys.executable` of a child
    started with `run(..., warm_python=True)`.

    A POSIX shell script (`exec python tests/warm_launch.py "$@"`, the launcher of
    `launcher_command`) written once per process beside the first zygote's socket. For a
    program that starts its own Python processes with `sys.executable` (an example's MCP
    servers): each is a real process running its script, forked from the zygote instead of
    importing `mcp` and LangGraph again.
    """
    start()
    with _lock:
        path = os.path.join(_zygotes[0].dir, _LAUNCHER_EXECUTABLE)
        if not os.path.exists(path):
            command = f"{shlex.quote(sys.executable)} {shlex.quote(str(LAUNCHER))}"
            script = f'#!/bin/sh\nexec {command} "$@"\n'
            partial = f"{path}.{os.getpid()}"  # two workers may write it at once
            with open(partial, "w", encoding="utf-8") as handle:
                handle.write(script)
            os.chmod(partial, 0o755)
            os.replace(partial, path)
    return path


def launcher_command(args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(command, extra environment) that run `python *args` as a warm child.

    For a library that starts the process itself (the MCP adapter's stdio servers, Jupyter's
    kernels): the command is `tests/warm_launch.py`, which passes its standard streams to a
    zygote's child running `args` (a script, `-m module` or `-c code`, as `run` takes) and
    exits as that child does. The child is a real process with its own pid, streams and
    environment (the launcher's), as a cold one; it skips the imports. Cold (no extra
    environment) under `REPLAY_GUARD_TEST_COLD=1`, for a command a zygote cannot run, or when
    this worker's interpreter options differ from the zygote's.
    """
    args = [os.fspath(arg) for arg in args]
    if (
        os.environ.get(COLD_ENV) == "1"
        or _split([sys.executable, *args]) is None
        or not _warmable(os.environ, _zygote_env())
    ):
        return [sys.executable, *args], {}
    zygote = _zygote()
    return [sys.executable, str(LAUNCHER), *args], {ZYGOTE_ENV: zygote.path}


def stdio_command(script: str | os.PathLike[str]) -> tuple[str, list[str], dict[str, str]]:
    """(command, args, extra environment) that start `python script` as a warm child
    (`launcher_command`), in the form the MCP adapter's stdio connections take."""
    command, extra = launcher_command([os.fspath(script)])
    return command[0], command[1:], extra


def _zygote_env() -> Mapping[str, str]:
    with _lock:
        if _zygotes:
            return _zygotes[0].env
    return {**os.environ, "LANGSMITH_TRACING": "false"}


def run(
    argv: Sequence[Any],
    *,
    input: Any = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(argv, ...)`, forked from a zygote when the command allows it."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    proc = popen(argv, **kwargs)
    if isinstance(proc, subprocess.Popen):
        with proc:
            try:
                out, err = proc.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise
            code = proc.poll()
    else:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        code = proc.returncode
    assert code is not None
    done = subprocess.CompletedProcess(list(argv), code, out, err)
    if check:
        done.check_returncode()
    return done


if __name__ == "__main__":
    _serve(sys.argv[1])
