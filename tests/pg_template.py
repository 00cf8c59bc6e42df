"""One `initdb` per test run: a cluster the xdist controller makes and each test server copies."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

# The directory of the run's template, set by the controller for its workers (inherited).
TEMPLATE_ENV = "REPLAY_GUARD_TEST_PG_TEMPLATE"
# initdb's options for every throwaway cluster: no fsync of its files, trust on localhost.
INITDB_OPTIONS = ("--no-sync", "-A", "trust", "-U", "postgres")

_BUILDING: list[tuple[threading.Thread, Path]] = []


def find_binary(name: str) -> str | None:
    """A PostgreSQL server binary: on PATH, else the newest of Debian's versioned ones."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def runuser_prefix(directory: Path) -> list[str]:
    """The command prefix initdb and pg_ctl need here: as root, the `postgres` user's.

    initdb refuses to run as root, so the directory is handed to that user.
    """
    if os.name != "posix" or os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        msg = "running as root and `runuser` is missing (initdb refuses to run as root)"
        raise RuntimeError(msg)
    try:
        shutil.chown(directory, user="postgres")
    except LookupError as exc:
        msg = "running as root and there is no `postgres` user to run initdb as"
        raise RuntimeError(msg) from exc
    return [runuser, "-u", "postgres", "--"]


def start(initdb: str) -> None:
    """In the xdist controller: run initdb once, in the background, for all its workers.

    It writes `<dir>/building` and renames it to `<dir>/data` when initdb succeeded (a worker
    sees the whole cluster or none), or leaves `<dir>/failed`; the workers find `<dir>` in
    `TEMPLATE_ENV` and wait for either (`copy_into`). initdb runs while the workers start
    and collect, so no worker waits for it in practice.
    """
    directory = Path(tempfile.mkdtemp(prefix="replay-guard-pg-template-"))
    try:
        prefix = runuser_prefix(directory)
    except RuntimeError:
        shutil.rmtree(directory, ignore_errors=True)
        return  # each worker's server reports it, as without a template

    def build() -> None:
        building = directory / "building"
        try:
            done = subprocess.run(
                [*prefix, initdb, *INITDB_OPTIONS, "-D", str(building)],
                capture_output=True,
                timeout=120,
                check=False,
            )
            if done.returncode == 0:
                building.rename(directory / "data")
                return
            why = done.stderr[-2000:]
        except (OSError, subprocess.SubprocessError) as exc:
            why = str(exc).encode()
        # The workers stop waiting and run initdb themselves (which reports the error).
        with contextlib.suppress(OSError):
            (directory / "failed").write_bytes(why)

    thread = threading.Thread(target=build, name="pg-template", daemon=True)
    thread.start()
    _BUILDING.append((thread, directory))
    os.environ[TEMPLATE_ENV] = str(directory)


def stop() -> None:
    """In the controller, at the end of the run: remove the template."""
    while _BUILDING:
        thread, directory = _BUILDING.pop()
        thread.join(timeout=120)
        shutil.rmtree(directory, ignore_errors=True)
    os.environ.pop(TEMPLATE_ENV, None)


def copy_into(data: Path, prefix: list[str], timeout: float = 60) -> bool:
    """Copy the run's template cluster to `data` (as `prefix`'s user); False when there is none.

    False (the caller runs its own initdb) without a template, when its initdb failed, or when
    it is not ready within `timeout` seconds.
    """
    directory = os.environ.get(TEMPLATE_ENV)
    if not directory:
        return False
    template = Path(directory) / "data"
    deadline = time.monotonic() + timeout
    while not template.is_dir():
        if (Path(directory) / "failed").exists() or not Path(directory).is_dir():
            return False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    # `cp -a` as the cluster's user keeps its owner and its 0700 mode, which the server checks.
    done = subprocess.run(
        [*prefix, "cp", "-a", str(template), str(data)], capture_output=True, check=False
    )
    if done.returncode != 0:
        with contextlib.suppress(OSError):
            shutil.rmtree(data)
        return False
    return True
