"""Sending the user's function to Spark's Python workers, with errors that name the problem and the fix.

Spark pickles the group function (and the ``KeyedProcessFunction`` instance it holds) on the driver and unpickles it
in every Python worker. Two things go wrong there for new users, and Spark reports both in its own words, deep in a
stack trace: an attribute that cannot be pickled (a client, a lock, an open file), and a class the workers cannot
import (defined in a test module or a notebook file that is not on the executors). :class:`ShippedFunction` pickles
the function itself: on the driver, when ``keyed_process`` is called (naming the attribute that fails), and unpickles
it on the worker inside our own error handling.
"""

from __future__ import annotations

import pickle
from typing import Any, Optional

from keyedstate.errors import FunctionShippingError

__all__ = ["ShippedFunction"]


class ShippedFunction:
    """A ``KeyedProcessFunction`` as it travels to the workers: the object itself in the driver process, its pickled
    bytes in a worker until :meth:`get` is first called."""

    def __init__(self, function: Any) -> None:
        self._function: Optional[Any] = function
        self._payload: Optional[bytes] = None
        self.class_name = type(function).__qualname__
        self.module = type(function).__module__

    def check(self) -> None:
        """Pickle now (on the driver), so an attribute that cannot travel is named before the query starts."""
        self._pickled()

    def get(self) -> Any:
        """The function (unpickled on first use in a worker)."""
        if self._function is None:
            assert self._payload is not None
            try:
                self._function = pickle.loads(self._payload)
            except (ImportError, AttributeError) as error:  # ModuleNotFoundError is an ImportError
                raise FunctionShippingError(
                    f"the Python workers cannot import the function class {self.class_name} from module "
                    f"{self.module!r} ({type(error).__name__}: {error}). Spark pickles the function on the driver "
                    f"and imports its class on the executors. Make the module importable there (install it, or "
                    f"spark.sparkContext.addPyFile(path) / --py-files), or, for a class defined in a test or notebook "
                    f"module, call pyspark.cloudpickle.register_pickle_by_value(module) before keyed_process so the "
                    f"class travels by value"
                ) from error
        return self._function

    def _pickled(self) -> bytes:
        if self._payload is None:
            from pyspark import cloudpickle  # Spark's own pickler: it honours register_pickle_by_value

            try:
                self._payload = cloudpickle.dumps(self._function)
            except Exception as error:
                raise FunctionShippingError(_why_not_picklable(self._function, error)) from error
        return self._payload

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _arrived, (self._pickled(), self.class_name, self.module)


def _arrived(payload: bytes, class_name: str, module: str) -> ShippedFunction:
    shipped = ShippedFunction.__new__(ShippedFunction)
    shipped._function = None
    shipped._payload = payload
    shipped.class_name = class_name
    shipped.module = module
    return shipped


def _why_not_picklable(function: Any, error: Exception) -> str:
    from pyspark import cloudpickle

    name = type(function).__qualname__
    for attribute, value in sorted(getattr(function, "__dict__", {}).items()):
        try:
            cloudpickle.dumps(value)
        except Exception as attribute_error:
            return (
                f"{name} cannot be sent to Spark's workers: its attribute {attribute!r} (a "
                f"{type(value).__module__}.{type(value).__qualname__}) cannot be pickled ({attribute_error}). Spark "
                f"pickles the function on the driver and runs a copy on every executor; create clients, connections, "
                f"locks and files in open(runtime_context), which runs on the worker, not in __init__"
            )
    return (
        f"{name} cannot be sent to Spark's workers: pickling it failed ({type(error).__name__}: {error}). Spark "
        f"pickles the function on the driver and runs a copy on every executor; keep only picklable values on it "
        f"and create other resources in open(runtime_context)"
    )
