"""Execute the notebooks and store their outputs (`make notebooks`); compare outputs (the suite).

Run from `notebooks/` (as `make notebooks` does): `python ../tests/notebook_runner.py *.ipynb`
executes each notebook in that directory, with `LANGSMITH_TRACING=false`, and writes it back
with its outputs. Outputs are deterministic (fixed thread ids and tool call ids, no timings
or paths), so executing twice gives identical files; the suite (`tests/unit/test_notebooks.py`)
executes each notebook again and compares its outputs with the stored ones.
"""

from __future__ import annotations

import copy
import os
import struct
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

__all__ = ["comparable_outputs", "execute", "png_size"]

TIMEOUT = 600  # seconds per cell


def execute(path: Path, kernel_manager_class: type | None = None) -> Any:
    """Run a notebook top to bottom in its own directory and return it with its outputs.

    The notebook's own metadata (kernelspec, language) is kept as stored, so the file does
    not change with the Python version that ran it; cells get no timing metadata.

    Args:
        path: The notebook file.
        kernel_manager_class: How the kernel is started (the suite's starts it from its warm
            zygote); nbclient's default when None.

    Returns:
        The executed notebook (an `nbformat.NotebookNode`).
    """
    os.environ["LANGSMITH_TRACING"] = "false"  # the kernel inherits it
    notebook = nbformat.read(path, as_version=4)
    metadata = copy.deepcopy(notebook.metadata)
    client = NotebookClient(
        notebook,
        timeout=TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.resolve().parent)}},
        record_timing=False,
        coalesce_streams=True,  # one output per stream, however the kernel flushed it
        **({"kernel_manager_class": kernel_manager_class} if kernel_manager_class else {}),
    )
    client.execute()
    notebook.metadata = metadata
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    return notebook


def png_size(data: str) -> tuple[int, int]:
    """Width and height of a base64 PNG (from its header)."""
    import base64

    header = base64.b64decode(data[:64])
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def comparable_outputs(notebook: Any) -> list[list[dict[str, Any]]]:
    """Each code cell's outputs without execution counts and metadata.

    A PNG is compared by its size in pixels: its bytes depend on the matplotlib and FreeType
    builds that rendered it, not on the notebook (the data it plots is in the text outputs and
    in the figure's text representation, compared exactly).
    """
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for output in cell.outputs:
            item: dict[str, Any] = {"output_type": output.output_type}
            if output.output_type == "stream":
                item.update(name=output.name, text=output.text)
            elif output.output_type in ("execute_result", "display_data"):
                item["data"] = {
                    mime: png_size(value) if mime == "image/png" else value
                    for mime, value in output.data.items()
                }
            elif output.output_type == "error":
                item.update(ename=output.ename, evalue=output.evalue)
            outputs.append(item)
        cells.append(outputs)
    return cells


def main(paths: list[str]) -> int:
    """Execute each notebook in place."""
    for name in paths:
        path = Path(name)
        nbformat.write(execute(path), path)
        print(f"executed {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
