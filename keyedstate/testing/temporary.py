"""The temporary directories of test harnesses: each is removed when its harness closes, and at the latest when the
process that made it exits, so a harness that is never closed (a test that fails before ``close``, an example that
does not use ``with``) leaves nothing behind."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

__all__ = ["temporary_directory", "remove_temporary_directory"]

_MADE: dict[str, int] = {}
"""Directories not removed yet, with the pid of the process that made each: a forked child that exits normally must
not remove its parent's."""


def temporary_directory(prefix: str) -> str:
    """A new directory below the system temporary directory, removed at exit unless removed before."""
    path = tempfile.mkdtemp(prefix=prefix)
    _MADE[path] = os.getpid()
    return path


def remove_temporary_directory(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    _MADE.pop(path, None)


@atexit.register
def _remove_what_is_left() -> None:
    pid = os.getpid()
    for path, maker in list(_MADE.items()):
        if maker == pid:
            remove_temporary_directory(path)
