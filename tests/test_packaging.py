"""What pyproject.toml promises about types: every package of the wheel ships ``py.typed`` (PEP 561), and every name
the public packages export is defined in a module mypy checks as fully typed (``make test`` runs mypy)."""

from __future__ import annotations

import fnmatch
import importlib
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parent.parent
PUBLIC_PACKAGES = ["keyedstate", "keyedstate.api", "keyedstate.state", "keyedstate.testing", "keyedstate.spark",
                   "timers", "connectors", "connectors.kafka"]
FIRST_PARTY = ("keyedstate", "timers", "connectors")


@pytest.fixture(scope="module")
def pyproject() -> dict:
    with open(REPO / "pyproject.toml", "rb") as file:
        return tomllib.load(file)


def test_every_package_of_the_wheel_ships_py_typed(pyproject):
    tool = pyproject["tool"]["setuptools"]
    packages = [pattern.rstrip("*").rstrip(".") for pattern in tool["packages"]["find"]["include"]]
    assert sorted(packages) == sorted(FIRST_PARTY)
    for package in packages:
        assert "py.typed" in tool["package-data"].get(package, []), f"{package}: py.typed is not package data"
        assert (REPO / package / "py.typed").is_file(), f"{package}/py.typed is missing"


def test_every_exported_name_is_defined_in_a_module_checked_as_fully_typed(pyproject):
    strict = [override["module"] for override in pyproject["tool"]["mypy"]["overrides"]
              if override.get("disallow_untyped_defs")]
    assert len(strict) == 1
    patterns = strict[0]

    def checked(module: str) -> bool:
        return any(fnmatch.fnmatchcase(module, pattern) if "*" in pattern else module == pattern
                   for pattern in patterns)

    unchecked = set()
    for package in PUBLIC_PACKAGES:
        if not checked(package):
            unchecked.add(package)
        module = importlib.import_module(package)
        for name in module.__all__:
            defined_in = getattr(getattr(module, name), "__module__", None)
            if isinstance(defined_in, str) and defined_in.split(".")[0] in FIRST_PARTY and not checked(defined_in):
                unchecked.add(f"{defined_in} (defines {package}.{name})")
    assert not unchecked, (f"add these modules to the disallow_untyped_defs override of [tool.mypy] in "
                           f"pyproject.toml: {sorted(unchecked)}")
