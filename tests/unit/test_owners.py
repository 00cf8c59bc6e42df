"""Who holds a claim and whether it is alive: a local holder by its process, others by lease."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Iterator

import pytest

from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.owners import OwnerRegistry, describe, machine_id

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
EXPIRED = (NOW - dt.timedelta(seconds=5)).isoformat(timespec="milliseconds")
LIVE = (NOW + dt.timedelta(seconds=5)).isoformat(timespec="milliseconds")


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _holder(pid: int, until: str, **changes: object) -> dict[str, object]:
    owner: dict[str, object] = {
        "id": "x",
        "machine": machine_id(),
        "pid": pid,
        "pst": owners._start_ticks(pid),
        "until": until,
    }
    owner.update(changes)
    return owner


def test_a_live_local_process_is_alive_after_its_lease(other_process):
    registry = OwnerRegistry()
    assert registry.is_alive(_holder(other_process.pid, EXPIRED), NOW)


def test_a_dead_local_process_is_dead_within_its_lease(other_process):
    owner = _holder(other_process.pid, LIVE)
    other_process.kill()
    other_process.wait()
    assert not OwnerRegistry().is_alive(owner, NOW)


def test_a_reused_pid_is_not_the_holder(other_process):
    owner = _holder(other_process.pid, LIVE, pst="1")
    assert not OwnerRegistry().is_alive(owner, NOW)


def test_a_holder_elsewhere_or_without_start_time_trusts_the_lease(other_process):
    registry = OwnerRegistry()
    for changes in ({"machine": "elsewhere|boot|ns"}, {"pst": None}):
        assert registry.is_alive(_holder(other_process.pid, LIVE, **changes), NOW)
        assert not registry.is_alive(_holder(other_process.pid, EXPIRED, **changes), NOW)


def test_a_claim_of_this_process_is_alive_while_its_attempt_runs():
    registry = OwnerRegistry()
    owner = registry.new_owner(0.001, NOW - dt.timedelta(seconds=5))
    assert registry.is_alive(owner, NOW)
    registry.release(owner)
    assert not registry.is_alive(owner, NOW)


def test_describe_names_host_and_pid():
    assert describe({"machine": "web-1|boot|ns", "pid": 42}) == "host 'web-1', pid 42"
    assert describe({}) == "host 'unknown', pid None"
