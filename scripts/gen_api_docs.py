"""Generate docs/api.md from the public API's docstrings (`__all__` of each public package).

    .venv/bin/python scripts/gen_api_docs.py          # rewrite docs/api.md
    .venv/bin/python scripts/gen_api_docs.py --check  # exit 1 if docs/api.md is out of date
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any, ForwardRef, is_typeddict

PACKAGES = ["keyedstate", "keyedstate.testing", "keyedstate.spark", "keyedstate.cleanup", "timers", "connectors.kafka"]
OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def _doc(obj: object) -> str:
    return inspect.cleandoc(inspect.getdoc(obj) or "(no docstring)")


_ADDRESS = re.compile(r" at 0x[0-9a-f]+>")


def _signature(obj: object) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""
    # Defaults that are functions or objects print with a memory address; keep the docs reproducible.
    return _ADDRESS.sub(">", text)


def _annotation(kind: Any) -> str:
    """A field's type as written (a string under ``from __future__ import annotations``)."""
    if isinstance(kind, ForwardRef):
        return kind.__forward_arg__
    return kind if isinstance(kind, str) else getattr(kind, "__name__", None) or str(kind)


def _members(cls: type, exported: set[str]) -> list[tuple[str, object]]:
    """The class's own methods, then those it inherits from helper bases of its own package that the package does
    not export (so are not documented themselves)."""
    package = cls.__module__.rpartition(".")[0]
    classes = [cls] + [base for base in cls.__mro__[1:]
                       if base.__module__.rpartition(".")[0] == package and base.__name__ not in exported]
    members, seen = [], set()
    for klass in classes:
        for name, member in vars(klass).items():
            if name in seen or (name.startswith("_") and name != "__init__"):
                continue
            seen.add(name)
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if inspect.isfunction(member) and (member.__doc__ or name == "__init__"):
                members.append((name, member))
    return members


def render() -> str:
    lines = ["# API reference", "",
             "Generated from the docstrings by `scripts/gen_api_docs.py`; do not edit by hand.", ""]
    for package_name in PACKAGES:
        try:
            package = importlib.import_module(package_name)
        except ImportError:
            continue
        lines += [f"## `{package_name}`", "", _doc(package), ""]
        for name in sorted(getattr(package, "__all__", [])):
            obj = getattr(package, name, None)
            if obj is None or isinstance(obj, (int, str, float, tuple, frozenset)):
                continue
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                continue  # errors are listed together below
            if inspect.isclass(obj) and is_typeddict(obj):
                lines += [f"### class `{name}` (keyword arguments)", "", _doc(obj), ""]
                lines += [f"- `{field}: {_annotation(kind)}`" for field, kind in obj.__annotations__.items()]
                lines.append("")
            elif inspect.isclass(obj):
                lines += [f"### class `{name}{_signature(obj)}`", "", _doc(obj), ""]
                for member_name, member in _members(obj, set(package.__all__)):
                    if member_name == "__init__":
                        continue
                    lines += [f"- `{member_name}{_signature(member)}`: {_doc(member).splitlines()[0]}"]
                lines.append("")
            elif callable(obj):
                lines += [f"### `{name}{_signature(obj)}`", "", _doc(obj), ""]
        errors = sorted(
            n for n in getattr(package, "__all__", [])
            if inspect.isclass(getattr(package, n, None)) and issubclass(getattr(package, n), BaseException)
        )
        if errors:
            lines += ["### Errors", ""]
            lines += [f"- `{n}`: {_doc(getattr(package, n)).splitlines()[0]}" for n in errors]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print("docs/api.md is out of date: run .venv/bin/python scripts/gen_api_docs.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
