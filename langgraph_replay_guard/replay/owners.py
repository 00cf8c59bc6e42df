"""Who holds a ledger claim, and whether that worker is still alive."""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = ["Owner", "OwnerRegistry", "describe", "is_alive", "machine_id"]

Owner = dict[str, Any]
"""A claim holder as stored in a ledger row: `id`, `machine`, `pid`, `pst`, `until`."""


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read().strip()
    except OSError:
        return ""


def _ns_inode(kind: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{kind}")
    except OSError:
        return ""


def machine_id() -> str:
    """An id shared by the processes that can see each other's pids.

    Host name, kernel boot id and pid namespace: two containers with one host name but their
    own pid namespaces get different ids, so a pid is only ever checked where it means
    something.
    """
    boot = _read("/proc/sys/kernel/random/boot_id")
    return f"{socket.gethostname()}|{boot}|{_ns_inode('pid')}"


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):  # a zombie or dead process is not running
        return None
    return fields[19]


class OwnerRegistry:
    """The claims this process holds right now.

    A claim names its owner's machine, pid and process start time, and carries a lease
    (`until`). Another process on the same machine checks the pid and start time: the
    holder is alive exactly while that process runs, however old its lease (the lease never
    declares a live local process dead). A process elsewhere, or a holder whose start time
    is unknown, trusts the lease. A claim of this very process is alive while its attempt
    runs.
    """

    def __init__(self) -> None:
        """Create the registry (one per process, see `REGISTRY`)."""
        self._lock = threading.Lock()
        self._active: set[str] = set()
        self._pid = -1
        self._machine = ""
        self._pst: str | None = None

    def _refresh(self) -> None:
        pid = os.getpid()
        if pid != self._pid:  # first use, or a forked child
            self._pid = pid
            self._machine = machine_id()
            self._pst = _start_ticks(pid)
            self._active = set()

    def new_owner(self, lease_seconds: float, now: dt.datetime) -> Owner:
        """A fresh claim holder for one attempt; it counts as alive until `release`."""
        with self._lock:
            self._refresh()
            owner_id = uuid.uuid4().hex
            self._active.add(owner_id)
            until = now + dt.timedelta(seconds=lease_seconds)
            return {
                "id": owner_id,
                "machine": self._machine,
                "pid": self._pid,
                "pst": self._pst,
                "until": until.isoformat(timespec="milliseconds"),
            }

    def release(self, owner: Mapping[str, Any] | None) -> None:
        """The attempt ended (any way): its claim no longer counts as alive here."""
        if owner is not None:
            with self._lock:
                self._active.discard(str(owner.get("id")))

    def is_alive(self, owner: Mapping[str, Any], now: dt.datetime) -> bool:
        """Whether the worker holding a claim may still be running the tool."""
        with self._lock:
            self._refresh()
            machine, pid, active = self._machine, self._pid, owner.get("id") in self._active
        if owner.get("machine") != machine or not machine:
            return _lease_live(owner, now)
        if owner.get("pid") == pid:
            return active
        other = owner.get("pid")
        if not isinstance(other, int) or other <= 0:
            return _lease_live(owner, now)
        started = owner.get("pst")
        if started is None:  # the holder could not read its own start time: no process check
            return _lease_live(owner, now)
        # A local holder is checked by its process, never by the lease: a worker inside a
        # slow tool is alive however long it takes (issue 27), and a dead one is seen at once.
        return bool(_start_ticks(other) == started)


def _lease_live(owner: Mapping[str, Any], now: dt.datetime) -> bool:
    until = owner.get("until")
    if not isinstance(until, str):
        return False
    try:
        expires = dt.datetime.fromisoformat(until)
    except ValueError:
        return False
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=dt.UTC)
    return now < expires


REGISTRY = OwnerRegistry()
"""This process's claims."""


def is_alive(owner: Mapping[str, Any] | None, now: dt.datetime) -> bool:
    """Whether a claim's holder may still be running (False for no holder)."""
    return owner is not None and REGISTRY.is_alive(owner, now)


def describe(owner: Mapping[str, Any]) -> str:
    """A claim holder for people: `host 'web-1', pid 4242`."""
    machine = owner.get("machine")
    host = machine.split("|", 1)[0] if isinstance(machine, str) and machine else "unknown"
    return f"host {host!r}, pid {owner.get('pid')}"
