"""keyedstate's warnings from Spark's Python workers, which are other processes than the test's."""

from __future__ import annotations

import logging
import os


def log_warnings_to(directory: str) -> None:
    """Called in the user function's ``open``: the worker's ``keyedstate.spark`` records go to a file per process."""
    handler = logging.FileHandler(os.path.join(directory, f"worker-{os.getpid()}.log"))
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    logging.getLogger("keyedstate.spark").addHandler(handler)
