"""The names docs/architecture.md and the package's docstrings point to exist: every file path, every first-party
module, and every ``module.name`` or ``Class.member`` of ours they cite. Read with ``ast``, nothing is imported."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("keyedstate", "timers", "connectors")
ARCHITECTURE = ROOT / "docs" / "architecture.md"

_BACKTICKED = re.compile(r"`([^`\s]+)`")
_SPHINX_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc):`~?([\w.]+)`")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


@cache
def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    found["keyedstate._fastpath"] = ROOT / "keyedstate" / "_fastpath_src" / "module.c"  # compiled; names not read
    return found


@cache
def _tree(module: str) -> ast.Module:
    if module == "keyedstate._fastpath":
        return ast.Module(body=[], type_ignores=[])
    return ast.parse(_modules()[module].read_text())


def _assigned(node: ast.AST) -> Iterator[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    for target in targets:
        for name in ast.walk(target) if target is not None else ():
            if isinstance(name, ast.Name):
                yield name.id


@cache
def _module_names(module: str) -> frozenset[str]:
    names: set[str] = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            names.update(_assigned(node))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Dict):  # the lazy packages: {"Name": "module", ...}
            names.update(key.value for key in node.keys if isinstance(key, ast.Constant) and isinstance(key.value, str))
    return frozenset(names) | {name for name in _modules() if name.startswith(module + ".")}


@cache
def _classes() -> dict[str, list[ast.ClassDef]]:
    classes: dict[str, list[ast.ClassDef]] = {}
    for module in _modules():
        for node in ast.walk(_tree(module)):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(node)
    return classes


def _members(node: ast.ClassDef, seen: frozenset[str] = frozenset()) -> set[str]:
    members: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members.add(child.name)
        elif isinstance(child, (ast.Assign, ast.AnnAssign)):
            members.update(_assigned(child))
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            members.update(t.attr for t in targets if isinstance(t, ast.Attribute))
        elif isinstance(child, ast.Constant) and isinstance(child.value, str) and child.value.isidentifier():
            members.add(child.value)  # __slots__ entries
    for base in node.bases:
        name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
        if name and name not in seen:
            for parent in _classes().get(name, []):
                members |= _members(parent, seen | {node.name})
    return members


def _unresolved(name: str) -> Optional[str]:
    """Why ``name`` (``package.module[.Name[.member]]``) does not exist, or None when it does."""
    parts = name.split(".")
    for length in range(len(parts), 0, -1):
        module = ".".join(parts[:length])
        if module in _modules():
            break
    else:
        return f"no module {'.'.join(parts[:2])}"
    rest = parts[length:]
    if not rest or module == "keyedstate._fastpath":
        return None
    if rest[0] not in _module_names(module):
        return f"{module} defines no {rest[0]}"
    if len(rest) > 1:
        classes = [node for node in _classes().get(rest[0], []) if node in ast.walk(_tree(module))]
        if classes and not any(rest[1] in _members(node) for node in classes):
            return f"{module}.{rest[0]} has no member {rest[1]}"
    return None


def _cited_in_architecture() -> Iterator[tuple[str, str]]:
    for token in _BACKTICKED.findall(ARCHITECTURE.read_text()):
        token = token.split("(")[0].rstrip(",.:")
        if "/" in token or token.endswith((".py", ".c", ".h")):
            yield "path", token
        elif _DOTTED.fullmatch(token):
            yield "name", token


def _path_exists(token: str) -> bool:
    if "/" in token:
        return (ROOT / token).exists()
    return any(ROOT.glob(f"{package}/**/{token}") for package in (*PACKAGES, "tests", "bench", "scripts"))


def test_every_path_the_architecture_page_names_exists():
    missing = [token for kind, token in _cited_in_architecture() if kind == "path" and not _path_exists(token)]
    assert missing == [], f"docs/architecture.md names files that do not exist: {missing}"


def test_every_module_and_name_of_ours_the_architecture_page_names_exists():
    problems = []
    for kind, token in _cited_in_architecture():
        if kind != "name":
            continue
        if token.split(".")[0] in PACKAGES:
            reason = _unresolved(token)
        elif token.split(".")[0] in _classes():  # Class.member
            reason = None if any(token.split(".")[1] in _members(node) for node in _classes()[token.split(".")[0]]) \
                else f"no class {token.split('.')[0]} has a member {token.split('.')[1]}"
        else:
            continue
        if reason:
            problems.append(f"{token}: {reason}")
    assert problems == [], "docs/architecture.md names what the code does not have:\n" + "\n".join(problems)


def test_every_first_party_module_docstrings_point_to_exists():
    problems = []
    for _, path in sorted(_modules().items()):
        for name in _SPHINX_ROLE.findall(path.read_text()):
            if name.split(".")[0] in PACKAGES:
                reason = _unresolved(name)
                if reason:
                    problems.append(f"{path.relative_to(ROOT)}: {name}: {reason}")
    assert problems == [], "docstrings point to names that do not exist:\n" + "\n".join(problems)


def test_a_name_that_does_not_exist_is_caught():
    assert _unresolved("keyedstate.key_hashing") == "keyedstate defines no key_hashing"
    assert _unresolved("keyedstate.keygroups.no_such_function") == "keyedstate.keygroups defines no no_such_function"
    assert _unresolved("keyedstate.spark.group_function.GroupRuntime.no_such_step") is not None
    assert _unresolved("keyedstate.spark.group_function.GroupRuntime.enter_task") is None


def test_every_test_file_the_scripts_and_the_makefile_name_exists():
    """The compatibility job and the make targets select tests by path; a moved test file would leave them running
    nothing (``pytest`` stops with "file or directory not found")."""
    named = {match for source in [ROOT / "Makefile", *sorted((ROOT / "scripts").glob("*.sh"))]
             for match in re.findall(r"\btests/[\w/]+\.py", source.read_text())}
    assert named, "the scripts select tests by path: the pattern no longer finds them"
    assert sorted(path for path in named if not (ROOT / path).exists()) == []
