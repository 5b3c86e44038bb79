"""Options of the subcommands that come as ``KEY=VALUE`` flags or from files, and the warning for secrets typed on
the command line (a command line ends up in the shell's history and in the process list)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

from keyedstate.cli import EXIT_USAGE
from keyedstate.redaction import is_secret

__all__ = ["key_value_pairs", "storage_option_pairs", "options_file", "properties_file", "warn_about_secrets",
           "flag_and_file_options"]

# state_storage_options that are numbers; every other option (a key, a region, an endpoint) is text
_NUMERIC_STORAGE_OPTIONS = frozenset({"retry_seconds", "connect_timeout", "request_timeout"})

_PROPERTY = re.compile(r"^([^\s=]+)\s*[=\s]\s*(.*)$")


def _usage_error(command: str, message: str) -> NoReturn:
    print(f"keyedstate {command}: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def key_value_pairs(values: list[str], flag: str, command: str) -> dict[str, str]:
    """``["k=v", ...]`` of a repeatable flag as a dict; a value without ``=`` is a usage error naming the flag."""
    pairs: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            _usage_error(command, f"{flag} takes KEY=VALUE, got {value!r}")
        pairs[key.strip()] = text
    return pairs


def storage_option_pairs(values: list[str], flag: str, command: str) -> dict[str, Any]:
    """:func:`key_value_pairs` of storage options, with the numeric ones (``retry_seconds``, ...) as numbers."""
    pairs: dict[str, Any] = key_value_pairs(values, flag, command)
    for key in pairs.keys() & _NUMERIC_STORAGE_OPTIONS:
        try:
            pairs[key] = float(pairs[key])
        except ValueError:
            pass  # the storage options' own check names the option and the value
    return pairs


def options_file(path: Optional[str], flag: str, command: str) -> dict[str, Any]:
    """Options from a file: a JSON object, or ``KEY=VALUE`` lines (``#`` comments, blank lines ignored)."""
    if path is None:
        return {}
    try:
        text = Path(path).read_text()
    except OSError as error:
        _usage_error(command, f"{flag}: cannot read {path}: {error.strerror}")
    if text.lstrip().startswith("{"):
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as error:
            _usage_error(command, f"{flag}: {path} is not valid JSON ({error.msg} at line {error.lineno})")
        if not isinstance(loaded, dict):
            _usage_error(command, f"{flag}: {path} must hold a JSON object")
        return loaded
    lines = [line.strip() for line in text.splitlines()]
    return key_value_pairs([line for line in lines if line and not line.startswith("#")], f"{flag} {path}", command)


def properties_file(path: Optional[str], flag: str, command: str) -> dict[str, str]:
    """Spark properties as ``spark-defaults.conf`` writes them: ``key value`` or ``key=value`` per line."""
    if path is None:
        return {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        _usage_error(command, f"{flag}: cannot read {path}: {error.strerror}")
    properties = {}
    for line in (line.strip() for line in lines):
        if not line or line.startswith("#"):
            continue
        match = _PROPERTY.match(line)
        if match is None:
            _usage_error(command, f"{flag}: {path} has a line that is not 'key value': {line.split()[0]!r}")
        properties[match.group(1)] = match.group(2).strip()
    return properties


def warn_about_secrets(options: dict[str, Any], flag: str, command: str, instead: str) -> None:
    """Warn (naming the option, never its value) when a secret was typed on the command line."""
    for name, value in options.items():
        if is_secret(name, value):
            print(f"keyedstate {command}: warning: {flag} {name}=... looks like a secret; the command line ends up "
                  f"in your shell's history and the process list: {instead}", file=sys.stderr)


def flag_and_file_options(pairs: list[str], path: Optional[str], flag: str, file_flag: str, command: str, *,
                          storage: bool = True) -> dict[str, Any]:
    """The options of a repeatable ``KEY=VALUE`` flag (storage options with their numbers, else text) and of its
    file, the file's winning; a secret typed as a flag is warned about, pointing to the file."""
    given = storage_option_pairs(pairs, flag, command) if storage else key_value_pairs(pairs, flag, command)
    instead = f"put it in {file_flag}" + (", or use the AWS_* environment" if storage else "")
    warn_about_secrets(given, flag, command, instead)
    return {**given, **options_file(path, file_flag, command)}
