"""The notebooks are committed stripped (no outputs) and listed in notebooks/README.md.

They are executed by `pytest --nbmake` (see pyproject.toml); this checks how they are stored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_there_are_notebooks():
    assert PATHS, f"no notebooks found in {NOTEBOOKS}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    dirty = [
        index
        for index, cell in enumerate(notebook["cells"])
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, (
        f"{path.name}: cells {dirty} have outputs or an execution count; clear them before "
        "committing: `.venv/bin/python tests/unit/test_notebooks.py`"
    )


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_notebook_runs_offline_and_is_listed(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    first_code = next(c for c in notebook["cells"] if c["cell_type"] == "code")
    assert 'os.environ["LANGSMITH_TRACING"] = "false"' in "".join(first_code["source"])
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    assert path.name in (NOTEBOOKS / "README.md").read_text(encoding="utf-8")


def strip(path: Path) -> None:
    """Clear the outputs and execution counts of a notebook, in place."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)  # timings added by nbclient
    nbformat.write(notebook, path)


if __name__ == "__main__":
    for notebook_path in PATHS:
        strip(notebook_path)
        print(f"stripped {notebook_path.name}")
