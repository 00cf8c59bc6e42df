"""The notebooks are stored with their outputs, and a fresh run reproduces them.

`make notebooks` executes them and stores their outputs (`tests/notebook_runner.py`). Here
each notebook runs again, top to bottom and offline, and its outputs must equal the stored
ones (execution counts and metadata aside; a PNG by its size in pixels), so a notebook whose
behaviour or output drifted fails. The stored outputs carry no machine paths, temporary
directories, timings or memory addresses, and the checks sit in one final "Checks" cell.
"""

from __future__ import annotations

import base64
import difflib
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests import warm_children

# nbformat, nbclient and jupyter_client are imported by the tests, not at collection: every
# xdist worker collects this module, and only the one that runs its tests (one group:
# tests/conftest.py) imports them (about 0.35 s of CPU).

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
MAX_PNG_BYTES = 60_000
HOW_TO_UPDATE = "run `make notebooks` and commit the notebooks it updates"


def read(path: Path) -> Any:
    import nbformat

    return nbformat.read(path, as_version=4)


def code_cells(notebook: Any) -> list[Any]:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def output_texts(notebook: Any) -> list[str]:
    """Every text of every output (streams, text/* and JSON data, errors)."""
    texts = []
    for cell in code_cells(notebook):
        for output in cell.outputs:
            if output.output_type == "stream":
                texts.append(output.text)
            elif output.output_type == "error":
                texts.append("\n".join(output.traceback))
            else:
                texts.extend(
                    value if isinstance(value, str) else json.dumps(value)
                    for mime, value in output.get("data", {}).items()
                    if mime != "image/png"
                )
    return texts


def test_there_are_notebooks():
    assert PATHS, f"no notebooks found in {NOTEBOOKS}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_notebook_runs_offline_and_is_listed(path):
    notebook = read(path)
    first_code = code_cells(notebook)[0]
    assert 'os.environ["LANGSMITH_TRACING"] = "false"' in first_code.source
    assert notebook.metadata.kernelspec.name == "python3"
    assert path.name in (NOTEBOOKS / "README.md").read_text(encoding="utf-8")
    source = "\n".join(cell.source for cell in code_cells(notebook))
    if "ScriptedChatModel" in source:  # the model is the public scripted one
        assert "from langgraph_replay_guard.testing import" in source
        assert "_testing" not in source


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_notebook_is_stored_executed_in_order_without_errors(path):
    cells = code_cells(read(path))
    counts = [cell.execution_count for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), f"{path.name}: {HOW_TO_UPDATE}"
    assert any(cell.outputs for cell in cells), f"{path.name} is stored without outputs"
    errors = [
        i for i, cell in enumerate(cells) if any(o.output_type == "error" for o in cell.outputs)
    ]
    assert not errors, f"{path.name}: code cells {errors} stored an error"


MACHINE_SPECIFIC = {
    "the repository's path": re.escape(str(ROOT)),
    "the temporary directory": re.escape(tempfile.gettempdir().rstrip("/") + "/"),
    "a home directory": r"/(home|Users)/\w",
    "an installed package's path": r"site-packages",
    "a memory address": r"\bat 0x[0-9a-fA-F]{4,}",
    "a time of day": r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d",
    "a duration": r"\b\d+\.\d+ ?(s|ms|seconds)\b",
}


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_stored_outputs_carry_nothing_that_changes_from_run_to_run(path):
    text = "\n".join(output_texts(read(path)))
    for what, pattern in MACHINE_SPECIFIC.items():
        found = re.search(pattern, text)
        assert found is None, (
            f"{path.name} shows {what}: {text[found.start() - 60 : found.end() + 20]!r}"
        )


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_stored_images_are_small_pngs(path):
    for cell in code_cells(read(path)):
        for output in cell.outputs:
            for mime, value in output.get("data", {}).items():
                assert not mime.startswith("image/") or mime == "image/png", mime
                if mime == "image/png":
                    size = len(base64.b64decode(value))
                    assert size < MAX_PNG_BYTES, f"{path.name}: a {size:,}-byte PNG"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_checks_are_one_final_cell_out_of_the_story(path):
    notebook = read(path)
    cells = code_cells(notebook)
    asserting = [i for i, cell in enumerate(cells) if re.search(r"^\s*assert\b", cell.source, re.M)]
    assert asserting == [len(cells) - 1], (
        f"{path.name}: assert statements in code cells {asserting}"
    )
    title = notebook.cells[notebook.cells.index(cells[-1]) - 1]
    assert title.cell_type == "markdown"
    assert title.source.startswith("## Checks")


def warm_kernel_manager() -> type[Any]:
    """The kernel manager the fresh runs use (jupyter_client imported only here)."""
    from jupyter_client.manager import AsyncKernelManager

    class WarmKernelManager(AsyncKernelManager):
        """Starts the kernel (`python -m ipykernel_launcher -f ...`) from the warm zygote.

        The kernel is a real process of its own running the notebook's cells as written; forked
        from a process that imported ipykernel and LangGraph once (tests/warm_children.py), it
        skips those imports (a few seconds of CPU per notebook).
        """

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            if kernel_cmd and kernel_cmd[0] == sys.executable:
                kernel_cmd, extra = warm_children.launcher_command(kernel_cmd[1:])
                kw["env"] = {**(kw.get("env") or os.environ), **extra}
            await super()._async_launch_kernel(kernel_cmd, **kw)

    return WarmKernelManager


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_a_fresh_run_reproduces_the_stored_outputs(path):
    from tests.notebook_runner import comparable_outputs, execute

    stored = comparable_outputs(read(path))
    # raises if a cell (a check included) fails
    fresh = comparable_outputs(execute(path, warm_kernel_manager()))
    if fresh == stored:
        return
    index = next(i for i, (a, b) in enumerate(zip(stored, fresh, strict=False)) if a != b)
    diff = difflib.unified_diff(
        json.dumps(stored[index], indent=1).splitlines(),
        json.dumps(fresh[index], indent=1).splitlines(),
        "stored",
        "fresh run",
        lineterm="",
    )
    pytest.fail(
        f"{path.name}: the outputs of code cell {index} drifted; {HOW_TO_UPDATE}.\n"
        + "\n".join(diff)
    )
