"""The test servers start from the run's template cluster instead of running initdb each."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import pg_template

from .conftest import _Server


def test_a_server_starts_from_the_runs_template_without_initdb(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    initdb, pg_ctl = pg_template.find_binary("initdb"), pg_template.find_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("no PostgreSQL server binaries")
    import psycopg

    # Not tmp_path: as root, initdb runs as `postgres`, which cannot enter pytest's directory.
    template = Path(tempfile.mkdtemp(prefix="replay-guard-pg-template-test-"))
    try:
        prefix = pg_template.runuser_prefix(template)
        subprocess.run(
            [*prefix, initdb, *pg_template.INITDB_OPTIONS, "-D", str(template / "data")],
            capture_output=True,
            check=True,
        )
        monkeypatch.setenv(pg_template.TEMPLATE_ENV, str(template))
        # An initdb that fails: the server can only come from the template's copy.
        server = _Server(shutil.which("false") or "/bin/false", pg_ctl)
        try:
            uri = server.start()
            with psycopg.connect(uri, autocommit=True) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        finally:
            server.stop()
        # The template itself never ran: every later copy starts from the same clean cluster.
        assert not (template / "data" / "postmaster.pid").exists()
        assert (template / "data" / "PG_VERSION").exists()
    finally:
        shutil.rmtree(template, ignore_errors=True)


def test_a_template_whose_initdb_failed_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server then runs initdb itself (and reports its error), without waiting 60 s.
    (tmp_path / "failed").write_bytes(b"initdb: error")
    monkeypatch.setenv(pg_template.TEMPLATE_ENV, str(tmp_path))
    assert not pg_template.copy_into(tmp_path / "copy", [], timeout=0.5)
    assert not (tmp_path / "copy").exists()
