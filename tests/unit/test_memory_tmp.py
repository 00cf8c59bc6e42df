"""The run's temporary files on tmpfs: where they go, and that a passing run leaves none behind."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import memory_tmp

ROOT = Path(__file__).resolve().parents[2]
PROBE_ENV = "REPLAY_GUARD_TEST_MEMORY_TMP_PROBE"

needs_shm = pytest.mark.skipif(
    not memory_tmp._room(Path("/dev/shm")), reason="/dev/shm is not a tmpfs with room for a run"
)


@pytest.mark.skipif(not os.environ.get(PROBE_ENV), reason="run by the nested pytest below")
def test_probe(tmp_path: Path) -> None:
    """What the nested run checks: where its `tmp_path` and `tempfile` files went."""
    Path(os.environ[PROBE_ENV]).write_text(f"{tmp_path}\n{tempfile.gettempdir()}")
    assert not os.environ.get("REPLAY_GUARD_TEST_MEMORY_TMP_FAIL"), "failing on purpose"


def _nested(tmp_path: Path, *, fail: bool) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """A pytest run of `test_probe` as a user starts one (no TMPDIR): its output, and the
    `tmp_path` and temporary directory it saw."""
    env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
    found = tmp_path / "found.txt"
    env[PROBE_ENV] = str(found)
    if fail:
        env["REPLAY_GUARD_TEST_MEMORY_TMP_FAIL"] = "1"
    probe = f"{Path(__file__).relative_to(ROOT)}::test_probe"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    seen_tmp_path, seen_tempdir = found.read_text().splitlines()
    return run, Path(seen_tmp_path), Path(seen_tempdir)


@needs_shm
def test_a_passing_run_writes_on_tmpfs_and_leaves_nothing_behind(tmp_path: Path) -> None:
    run, seen_tmp_path, seen_tempdir = _nested(tmp_path, fail=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert seen_tempdir.parent == Path("/dev/shm")
    assert seen_tempdir.name.startswith("replay-guard-tests-")
    assert seen_tmp_path.is_relative_to(seen_tempdir)
    assert not seen_tempdir.exists()


@needs_shm
def test_a_failing_run_keeps_its_files_and_says_where(tmp_path: Path) -> None:
    run, seen_tmp_path, seen_tempdir = _nested(tmp_path, fail=True)
    try:
        assert run.returncode == 1, run.stdout + run.stderr
        assert seen_tmp_path.is_relative_to(seen_tempdir)
        assert seen_tmp_path.is_dir()
        assert f"are kept in {seen_tempdir}" in run.stdout
    finally:
        memory_tmp.shutil.rmtree(seen_tempdir, ignore_errors=True)


def test_a_temporary_directory_chosen_already_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    # The user's TMPDIR, or the outer run's for a nested one: nothing is made or moved.
    monkeypatch.setenv("TMPDIR", "/somewhere/else")
    assert memory_tmp.use() is None
    assert os.environ["TMPDIR"] == "/somewhere/else"


@needs_shm
def test_only_the_process_that_made_the_directory_removes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)
    made = memory_tmp.use()
    assert made is not None
    try:
        assert tempfile.gettempdir() == str(made)
        assert made.stat().st_mode & 0o7777 == 0o1777  # as /tmp: other users' servers write
        owner = made / memory_tmp.OWNER
        assert owner.read_text() == str(os.getpid())
        owner.write_text("1")  # another process's directory
        memory_tmp.finish(made, passed=True)
        assert made.exists()
        owner.write_text(str(os.getpid()))
        memory_tmp.finish(made, passed=False)
        assert made.exists()
        memory_tmp.finish(made, passed=True)
        assert not made.exists()
    finally:
        memory_tmp.shutil.rmtree(made, ignore_errors=True)


def test_no_room_means_no_change(tmp_path: Path) -> None:
    # A directory that is not a tmpfs mount (the test's own): not used.
    assert not memory_tmp._room(tmp_path)


def test_only_the_newest_ended_runs_directories_stay(tmp_path: Path) -> None:
    # Runs that failed or were killed left theirs; a run still going (a live owner) keeps its.
    ended = []
    for age in range(4):
        made = tmp_path / f"{memory_tmp._PREFIX}{age}"
        made.mkdir()
        (made / memory_tmp.OWNER).write_text("999999999")  # no such process
        os.utime(made, (1_000_000 - age, 1_000_000 - age))
        ended.append(made)
    running = tmp_path / f"{memory_tmp._PREFIX}running"
    running.mkdir()
    (running / memory_tmp.OWNER).write_text(str(os.getpid()))
    os.utime(running, (1, 1))  # the oldest of all
    other = tmp_path / "someone-else"
    other.mkdir()
    memory_tmp._sweep(tmp_path)
    assert [p.exists() for p in ended] == [True, True, False, False]
    assert running.exists()
    assert other.exists()
