"""The guard inside a real `langgraph dev` server, driven through the SDK (issue 32, seams 11, 12).

`langgraph dev` runs as the docs start it (no browser, no reload, no `--allow-blocking`), on a
free loopback port, in a temporary directory with its own `langgraph.json` serving
`served_graphs.py` and the graph of docs/replay-safety.md's "Settling an unknown outcome on a
served graph". The server checks for blocking calls on its event loop (`blockbuster`). Effects
are lines a real tool body appends to a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DOC = ROOT / "docs" / "replay-safety.md"
SECTION = "## Settling an unknown outcome on a served graph"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _langgraph_cli() -> str:
    found = shutil.which("langgraph", path=str(Path(sys.executable).parent)) or shutil.which(
        "langgraph"
    )
    if found is None:
        message = 'langgraph-cli is not installed: pip install -e ".[studio]"'
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def doc_blocks() -> list[str]:
    """The python blocks of the docs section, in order (the graph module, the operator's code)."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


@dataclass
class Server:
    """A `langgraph dev` process serving the test graphs from `home`."""

    home: Path
    effects: Path
    url: str = ""
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "LANGSMITH_TRACING": "false",
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "REPLAY_GUARD_SERVED_DIR": str(self.effects),
            "OUTBOX": str(self.effects / "outbox.txt"),  # the docs' graph's effects
            # The server imports this checkout's package (not another installed copy).
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        log = (self.home / "server.log").open("a", encoding="utf-8")
        self.proc = subprocess.Popen(
            [
                _langgraph_cli(),
                "dev",
                "--no-browser",
                "--no-reload",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=self.home,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"langgraph dev exited: {self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/ok", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"langgraph dev did not answer on {self.url}: {self.log()[-3000:]}")
            time.sleep(0.3)
        assert self.url in self.log()  # ours, on the port asked for

    def log(self) -> str:
        return (self.home / "server.log").read_text(encoding="utf-8", errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def client(self) -> Any:
        from langgraph_sdk import get_sync_client

        return get_sync_client(url=self.url)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("served")
    effects = home / "effects"
    effects.mkdir()
    docs_graph, _ = doc_blocks()
    (home / "agent.py").write_text(docs_graph, encoding="utf-8")
    config = {
        "dependencies": [str(ROOT)],
        "graphs": {
            "guarded": f"{HERE / 'served_graphs.py'}:guarded",
            "guarded_interrupt": f"{HERE / 'served_graphs.py'}:guarded_interrupt",
            "agent": "./agent.py:agent",  # the docs' graph, under the id its steps use
        },
        "env": {"LANGSMITH_TRACING": "false", "LANGGRAPH_CLI_NO_ANALYTICS": "1"},
    }
    (home / "langgraph.json").write_text(json.dumps(config), encoding="utf-8")
    served = Server(home, effects)
    served.start()
    try:
        yield served
    finally:
        if served.proc is not None:
            served.kill(signal.SIGTERM)


@pytest.fixture
def effects(server: Server) -> Iterator[Callable[[], list[str]]]:
    folder = server.effects
    for name in ("sent.txt", "outbox.txt", "hold", "release", "in_tool"):
        (folder / name).unlink(missing_ok=True)

    def sent() -> list[str]:
        """The recipients, one per effect (each line also names its tool call id)."""
        return [line.split()[0] for line in _lines(folder)]

    yield sent
    (folder / "release").write_text("")  # never leave a tool waiting


def _lines(folder: Path) -> list[str]:
    path = folder / "sent.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _at_most_once_per_call(folder: Path) -> None:
    calls = [line.split()[1] for line in _lines(folder)]
    assert len(calls) == len(set(calls)), f"a call ran twice: {_lines(folder)}"


def _hold(folder: Path) -> None:
    (folder / "hold").write_text("")


def _in_tool(folder: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not (folder / "in_tool").exists():
        assert time.monotonic() < deadline, "the tool never started"
        time.sleep(0.05)


def _release(folder: Path) -> None:
    (folder / "hold").unlink(missing_ok=True)
    (folder / "release").write_text("")


def _error(result: Any) -> dict[str, Any]:
    assert isinstance(result, dict), result
    assert "__error__" in result, result
    error: dict[str, Any] = result["__error__"]
    return error


def _ask(to: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"send {to}"}]}


def _last_text(client: Any, thread_id: str) -> str:
    values = client.threads.get_state(thread_id)["values"]
    return str(values["messages"][-1]["content"])


def test_the_first_unsafe_call_of_a_server_process_works(server: Server, effects: Any) -> None:
    client = server.client()
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "guarded", input=_ask("ann"))
    assert effects() == ["ann"]
    assert _last_text(client, thread) == "Done: sent to ann"
    assert "BlockingError" not in server.log()


def test_the_docs_settle_an_unknown_outcome_on_a_served_graph(server: Server, effects: Any) -> None:
    _, operator = doc_blocks()
    namespace: dict[str, Any] = {}
    exec(compile(operator, f"{DOC}:settle", "exec"), namespace)
    client = server.client()
    thread = client.threads.create()["thread_id"]
    ask = {"messages": [{"role": "user", "content": "Email Ann."}]}
    failed = client.runs.wait(thread, "agent", input=ask, raise_error=False)
    assert _error(failed)["error"] == "ConnectionError"  # sent, then the connection dropped
    # Run again: no second email; the run pauses on the call, the interrupt in its state.
    paused = client.runs.wait(thread, "agent", input=None, raise_error=False)
    (interrupt,) = paused["__interrupt__"]
    assert interrupt["value"]["tool"] == "send_email"
    assert interrupt["value"]["resume"].startswith(f"client.runs.wait({thread!r}")
    assert client.threads.get(thread)["status"] == "interrupted"
    out = namespace["settle"](server.url, thread, "succeeded", "sent to ann")
    assert out["messages"][-2]["content"] == "sent to ann"  # the model got the confirmed result
    outbox = (server.effects / "outbox.txt").read_text(encoding="utf-8").split()
    assert outbox == ["ann@example.com"]
    assert _last_text(client, thread) == "Sent."


@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
def test_double_texting_runs_each_call_at_most_once(
    server: Server, effects: Any, strategy: str
) -> None:
    from langgraph_sdk.errors import ConflictError

    client = server.client()
    thread = client.threads.create()["thread_id"]
    _hold(server.effects)
    first = client.runs.create(thread, "guarded", input=_ask(f"{strategy}-1"))
    _in_tool(server.effects)  # the first send ran; its run is inside the tool
    second = None
    try:
        second = client.runs.create(
            thread, "guarded", input=_ask(f"{strategy}-2"), multitask_strategy=strategy
        )
    except ConflictError:
        assert strategy == "reject"
    time.sleep(0.5)  # let an interrupt or rollback act on the first run while it is in the tool
    _release(server.effects)
    for run in (first, second):
        if run is not None:
            client.runs.join(thread, run["run_id"])
    # Anything left to resume on the thread is resumed: still at most one effect per call.
    client.runs.wait(thread, "guarded", input=None, raise_error=False)
    _at_most_once_per_call(server.effects)
    sent = effects()
    assert sent.count(f"{strategy}-1") == 1
    assert sent.count(f"{strategy}-2") == (0 if strategy == "reject" else 1)


def test_a_run_cancelled_mid_tool_is_an_unknown_outcome_not_a_rerun(
    server: Server, effects: Any
) -> None:
    client = server.client()
    thread = client.threads.create()["thread_id"]
    _hold(server.effects)
    run = client.runs.create(thread, "guarded", input=_ask("cancelled"))
    _in_tool(server.effects)
    client.runs.cancel(thread, run["run_id"], wait=True)
    _release(server.effects)
    time.sleep(0.3)  # the body's thread ends after the cancel
    resumed = client.runs.wait(thread, "guarded", input=None, raise_error=False)
    error = _error(resumed)
    assert error["error"] == "ReplayUnsafeError", error
    assert effects() == ["cancelled"]
    _names_the_served_way(error["message"], thread)


def test_after_sigkill_and_restart_a_resume_is_unknown_at_once(
    server: Server, effects: Any
) -> None:
    client = server.client()
    thread = client.threads.create()["thread_id"]
    _hold(server.effects)
    client.runs.create(thread, "guarded", input=_ask("killed"), durability="sync")
    _in_tool(server.effects)
    # `langgraph dev` writes its in-memory checkpoints and store to disk every 10 s: wait for
    # one write after the claim, so the restarted server has the thread and the claim.
    _wait_for_a_write(server.home, since=time.time())
    server.kill(signal.SIGKILL)
    _release(server.effects)
    server.start()  # same directory: same data
    client = server.client()
    started = time.monotonic()
    resumed = client.runs.wait(thread, "guarded", input=None, raise_error=False)
    elapsed = time.monotonic() - started
    error = _error(resumed)
    # The dead server's claim names its machine and start time: seen dead at once, an
    # unknown outcome (not ReplayInFlightError after waiting out a 900 s lease).
    assert error["error"] == "ReplayUnsafeError", error
    assert elapsed < 8
    assert effects() == ["killed"]
    # The operator of a served graph is told the way that works there (seam 12).
    _names_the_served_way(error["message"], thread)


def _wait_for_a_write(home: Path, since: float) -> None:
    """Wait until `langgraph dev` has written all its data files after `since` (a wall time).

    Its flush thread rewrites every file (each one atomically, by a rename) every 10 s; a
    write that began 0.5 s after `since` holds all that was in memory then. At most 11 s (one
    whole period, what this test waited before), whatever the files show.
    """
    folder = home / ".langgraph_api"
    after = since + 0.5
    deadline = time.monotonic() + 11
    while time.monotonic() < deadline:
        files = [path for path in folder.glob("*.pckl") if path.is_file()]
        with contextlib.suppress(FileNotFoundError):
            if files and all(path.stat().st_mtime > after for path in files):
                time.sleep(0.5)  # the files this write creates rather than replaces
                return
        time.sleep(0.1)


def _names_the_served_way(message: str, thread: str) -> None:
    assert "GuardConfig(on_unsafe='interrupt')" in message, message
    assert f"client.runs.wait({thread!r}, assistant_id, command={{'resume': " in message
    assert "guard.resolve(graph, config, " in message  # for an in-process graph
