"""Every ```python block in README.md and docs/ runs: the blocks of one file in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text())


def as_param(document: Path):
    """A document whose blocks start Spark is a Spark test: `make test` runs it beside no other Spark session."""
    uses_spark = any("SparkSession" in block for block in python_blocks(document))
    return pytest.param(document, id=document.name, marks=[pytest.mark.spark] if uses_spark else [])


@pytest.mark.parametrize("document", [as_param(d) for d in DOCUMENTS if python_blocks(d)])
def test_code_blocks_run(document, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{document.stem.replace('-', '_')}"}
    for index, block in enumerate(python_blocks(document)):
        code = compile(block, f"{document.name}[block {index}]", "exec")
        exec(code, namespace)


def test_there_are_code_blocks_to_run():
    assert sum(len(python_blocks(d)) for d in DOCUMENTS) >= 5
