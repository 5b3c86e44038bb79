"""The ``python -m keyedstate`` command line: one module per subcommand.

A subcommand module defines ``register(subparsers)``, which adds its parser and sets ``run`` (a function of the
parsed arguments returning the exit status) as a default; adding a subcommand is one module and one line in
:data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Optional, Sequence

__all__ = ["COMMANDS", "main", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_REFUSED"]

COMMANDS = ("keyedstate.cli.cleanup", "keyedstate.cli.inspect_checkpoint")

EXIT_OK = 0
EXIT_FAILED = 1  # a keyedstate error: the message says what to fix
EXIT_USAGE = 2  # argparse's own status for bad arguments
EXIT_REFUSED = 3  # a safety check refused; --force overrides it


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the subcommand, return its exit status."""
    parser = argparse.ArgumentParser(prog="python -m keyedstate",
                                     description="Tools for keyedstate's streaming queries.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(subparsers)
    args = parser.parse_args(argv)
    return int(args.run(args))
