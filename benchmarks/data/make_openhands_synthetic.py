"""Write openhands-synthetic.jsonl: the SYNTHETIC coding runs again, in OpenHands' tool names.

Run: python benchmarks/data/make_openhands_synthetic.py

The project has no recorded OpenHands runs. OpenHands' CodeAct agent has the two tools these
runs use, under its own names: `execute_bash` (a command line, as `bash`) and
`str_replace_editor` (the same editor commands). So every run of coding-synthetic.jsonl and
coding-same-failure.jsonl (both SYNTHETIC, see their generators) that uses only `bash` and
`str_replace_editor` is written again with `bash` renamed `execute_bash`, and each call
carries the `security_risk` label OpenHands' model adds (left out of the call key by the
toolkit). Results are unchanged. Ids are kept, so the loop runs (`loop-`, `weak-`) are known.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
SOURCES = ("coding-synthetic.jsonl", "coding-same-failure.jsonl")
OUT = HERE / "openhands-synthetic.jsonl"
RENAMED = {"bash": "execute_bash", "str_replace_editor": "str_replace_editor"}


def convert(run: dict[str, Any]) -> dict[str, Any] | None:
    """The run in OpenHands' names, or None when it uses a tool OpenHands does not have."""
    if any(call["name"] not in RENAMED for call in run["calls"]):
        return None
    calls = [
        {
            **call,
            "name": RENAMED[call["name"]],
            "args": {**call.get("args", {}), "security_risk": "LOW"},
        }
        for call in run["calls"]
    ]
    return {**run, "calls": calls}


def trajectories() -> list[dict[str, Any]]:
    """The runs of `SOURCES` that OpenHands' tools can make, in its names."""
    runs = []
    for name in SOURCES:
        for line in (HERE / name).read_text().splitlines():
            run = convert(json.loads(line))
            if run is not None:
                runs.append(run)
    return runs


def main() -> None:
    runs = trajectories()
    OUT.write_text("".join(json.dumps(run) + "\n" for run in runs))
    print(f"wrote {len(runs)} SYNTHETIC trajectories to {OUT.name}")


if __name__ == "__main__":
    main()
