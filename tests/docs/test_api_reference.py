"""docs/api.md is generated from the docstrings and must match them; every public name is documented."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from gen_api_docs import PACKAGES  # noqa: E402


def test_api_reference_is_up_to_date():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_api_docs.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("package_name", PACKAGES)
def test_every_public_class_and_function_has_a_docstring(package_name):
    package = importlib.import_module(package_name)
    undocumented = [
        name for name in package.__all__
        if (inspect.isclass(getattr(package, name)) or inspect.isfunction(getattr(package, name)))
        and not inspect.getdoc(getattr(package, name))
    ]
    assert undocumented == []
