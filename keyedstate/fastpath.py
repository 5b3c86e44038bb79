"""The optional compiled fast path (C sources in ``keyedstate/_fastpath_src/``) and the switch that turns it off.

A ``KeyedProcessFunction`` calls ``ValueState.value()``/``update()`` and the timer service once or twice per
element. Over the heap backend each of those calls is one dict operation; as a Python method the call costs several
times the operation. When the extension is built (``pip install`` compiles it where a C compiler is available;
without one the install still succeeds), these calls run in C for the common case and fall back to the Python
implementation for everything else. So do two steps the Spark group function takes per key or element: applying a
key's collected timer calls to timer queues that keep their timers as a set (the heap's, and RocksDB mode's for a key
group's first call), and building the ``Row`` each element is handed as; and so does encoding a batch of timers as
raw-column records (a key group's first call in RocksDB mode writes every timer it holds), and encoding a new key
group database's whole content as a changelog (what that first call stores). The Python code stays the
definition of the behaviour, and the test suite runs the affected specifications both ways.
The C code names no attribute: the objects it reads are passed to its constructors with the names to read, taken
from their declarations (see ``docs/architecture.md``).

Set ``KEYEDSTATE_PURE_PYTHON=1`` (before keyedstate is imported, and for Spark's Python workers too) to use the
Python implementation only.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import Optional

__all__ = ["fastpath", "PURE_PYTHON_VARIABLE", "pure_python_requested"]

PURE_PYTHON_VARIABLE = "KEYEDSTATE_PURE_PYTHON"

logger = logging.getLogger("keyedstate.fastpath")


def pure_python_requested() -> bool:
    """True when ``KEYEDSTATE_PURE_PYTHON`` asks for the Python implementations only (the Kafka sink's bulk path
    in ``connectors/kafka/librdkafka.py`` obeys it too)."""
    return os.environ.get(PURE_PYTHON_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")


def _load() -> Optional[ModuleType]:
    if pure_python_requested():
        return None
    try:
        from keyedstate import _fastpath
    except ImportError:
        logger.debug("keyedstate._fastpath is not built; using the pure-Python implementation")
        return None
    return _fastpath


fastpath: Optional[ModuleType] = _load()
"""The compiled module, or None when it is not built or ``KEYEDSTATE_PURE_PYTHON`` is set."""
