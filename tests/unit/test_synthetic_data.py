"""Each SYNTHETIC trajectory file in benchmarks/data/ is exactly what its generator writes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent.parent.parent / "benchmarks" / "data"


@pytest.mark.parametrize(
    ("generator", "stored"),
    [
        ("make_coding_synthetic.py", "coding-synthetic.jsonl"),
        ("make_swe_synthetic.py", "swe-synthetic.jsonl"),
        ("make_same_failure_synthetic.py", "coding-same-failure.jsonl"),
        ("make_openhands_synthetic.py", "openhands-synthetic.jsonl"),
    ],
)
def test_the_data_file_is_what_its_generator_writes(generator, stored):
    spec = importlib.util.spec_from_file_location(generator.removesuffix(".py"), DATA / generator)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written = [json.loads(line) for line in (DATA / stored).read_text().splitlines()]
    assert written == module.trajectories()
    assert {run["source"] for run in written} == {"synthetic"}
