"""LangGraph Studio's server (`langgraph dev`) serves the guarded example graphs offline.

Starts `langgraph dev --no-browser --no-reload` on 127.0.0.1 and a free port from the repository
root (`langgraph.json`), runs both exported graphs through `langgraph-sdk`, and checks that the
guard channel is in the thread state, as Studio shows it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("studio") / "langgraph-dev.log"
    env = {
        **os.environ,
        "LANGSMITH_TRACING": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    }
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
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
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"langgraph dev exited: {log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/ok", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"langgraph dev did not answer on {url}: {log.read_text()[-3000:]}")
            time.sleep(0.5)
        # It silently moves to another port when the one asked for is busy: make sure the
        # server answering is ours, on the port we asked for.
        assert f"http://127.0.0.1:{port}" in log.read_text()
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.parametrize("graph_id", ["custom_graph", "agent"])
def test_studio_serves_guarded_graphs_and_shows_the_guard_channel(server, graph_id):
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=server)
    assistants = {a["graph_id"] for a in client.assistants.search()}
    assert {"custom_graph", "agent"} <= assistants

    thread = client.threads.create()
    client.runs.wait(
        thread["thread_id"],
        assistant_id=graph_id,
        input={"messages": [{"role": "user", "content": "What plan is P1002?"}]},
    )
    values = client.threads.get_state(thread["thread_id"])["values"]

    guard = values["replay_guard"]  # the private channel is in the thread state
    assert guard["v"] == 3
    # Named as GuardView and `replay-guard inspect --json` name them.
    assert {"recent_calls", "counters", "totals", "reminder", "stop", "blocked"} <= guard.keys()
    assert guard["totals"] == {"calls": 4, "blocked": 3, "aborts": 1}
    assert guard["log"] == []  # the last batch is settled in the stored value
    # The looping model asked for the same lookup until the guard stopped it: counted...
    (count,) = guard["counters"].values()
    assert count == [4, "get_details_by_id"]
    # ...stopped, with a machine-readable reason...
    assert guard["stop"]["reason"] == "repeat_limit"
    assert guard["stop"]["tool"] == "get_details_by_id"
    # ...and the model was reminded before the stop.
    assert guard["reminder"]["tool"] == "get_details_by_id"
    lookups = [m for m in values["messages"] if m["type"] == "tool"]
    assert len(lookups) == 4
    assert sum(1 for m in lookups if m["status"] == "success") == 1  # the tool ran once
    assert "stopped" in values["messages"][-1]["content"]
