"""Real file systems that fail writes the way production disks do: a full one and a read-only one (tmpfs mounts).

Mounting needs root (or CAP_SYS_ADMIN); without it the tests that need these skip, saying why: chmod does not stop
root's writes and a file system cannot be filled reliably otherwise."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


@contextmanager
def tmpfs(path: Path, *, size: str = "64k", read_only: bool = False) -> Iterator[Path]:
    """``path`` as the mount point of a fresh tmpfs of ``size`` (read-only: nothing can be written below it)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a real full or read-only file system) needs root; this test runs as uid "
                    f"{os.geteuid()}")
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)
