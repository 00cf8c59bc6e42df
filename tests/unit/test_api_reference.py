"""The API reference (mkdocs + mkdocstrings) builds strictly and covers the public API."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
DIRECTIVE = re.compile(r"^:::\s+(?P<path>[\w.]+)\s*$", re.MULTILINE)
# The modules whose `__all__` is public API, beside the package's own.
PUBLIC_MODULES = [
    "langgraph_replay_guard.records",
    "langgraph_replay_guard.testing",
    "langgraph_replay_guard.evaluation",
    "langgraph_replay_guard.calibration",
    "langgraph_replay_guard.errors",
]


def _need_mkdocs() -> None:
    missing = [m for m in ("mkdocs", "mkdocstrings_handlers.python") if not _importable(m)]
    if missing:
        msg = f"{missing} not installed: pip install -e '.[docs]'"
        if os.environ.get("CI"):
            pytest.fail(msg)  # CI installs the dev extra: a missing package is a failure there
        pytest.skip(msg)


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
         "--site-dir", str(site)],
        cwd=config.parent,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip


def _directives() -> set[str]:
    return {
        match["path"]
        for page in REFERENCE.glob("*.md")
        for match in DIRECTIVE.finditer(page.read_text(encoding="utf-8"))
    }


def _public_names(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module_name
    ]


def test_every_public_name_has_a_reference_entry() -> None:
    import langgraph_replay_guard as package

    directives = _directives()
    covered_modules = {path for path in directives if path in PUBLIC_MODULES}
    named = {path.rsplit(".", 1)[-1] for path in directives}
    # A module directive renders the names of that module's `__all__` (or, without one, the
    # public names it defines).
    in_modules = {n for m in covered_modules for n in _public_names(m)}
    missing = [
        name
        for name in package.__all__
        if name != "__version__" and name not in named and name not in in_modules
    ]
    for module_name in PUBLIC_MODULES:
        if module_name in covered_modules:
            continue
        missing += [f"{module_name}.{n}" for n in _public_names(module_name) if n not in named]
    assert not missing, f"no ::: directive in docs/reference/*.md for {missing}"


def test_the_reference_pages_hold_no_python_block_to_run() -> None:
    # The suite runs every ```python block of the docs: the reference pages pull the
    # docstrings in and have none of their own.
    for page in REFERENCE.glob("*.md"):
        assert "```python" not in page.read_text(encoding="utf-8"), page.name


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    _need_mkdocs()
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    config = (tmp_path / "site" / "reference" / "config" / "index.html").read_text("utf-8")
    assert "GuardOptions" in config
    assert "max_repeats" in config
    guard = (tmp_path / "site" / "reference" / "guard" / "index.html").read_text("utf-8")
    assert "ReplayGuardMiddleware" in guard


def test_a_broken_reference_fails_the_build(tmp_path: Path) -> None:
    _need_mkdocs()
    import yaml

    # The site's own configuration (strict, the same plugins and handler options) on a small
    # site: one reference page rendering one name, and a reference that resolves nowhere. (The
    # whole site is built by test_the_site_builds_strictly; rendering its reference pages again
    # is most of a build's time and adds nothing here.)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(
        "# Testing\n\n::: langgraph_replay_guard.testing.tool_call\n\n"
        "See [the guard][langgraph_replay_guard.guard.NoSuchGuard].\n",
        encoding="utf-8",
    )
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True
    config["docs_dir"] = str(docs)
    config["nav"] = ["index.md"]
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            plugin["mkdocstrings"]["handlers"]["python"]["paths"] = [str(ROOT)]
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    done = _build(path, tmp_path / "site")
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "langgraph_replay_guard.guard.NoSuchGuard" in output
    # The broken reference is what fails it: every warning names it.
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    assert warnings
    assert all("NoSuchGuard" in line for line in warnings), warnings
