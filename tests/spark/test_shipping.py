"""The function's trip to Spark's workers: it pickles on the driver or the error names the attribute; a worker that
cannot import its class says which class, which module and how to fix it."""

from __future__ import annotations

import pickle
import sys
import textwrap

import pytest

from keyedstate import KeyedProcessFunction
from keyedstate.errors import FunctionShippingError
from keyedstate.spark.shipping import ShippedFunction


class Plain(KeyedProcessFunction):
    def __init__(self, limit: int = 3):
        self.limit = limit

    def process_element(self, value, ctx):
        yield value


class WithAGenerator(Plain):
    def __init__(self):
        super().__init__()
        self.numbers = (n for n in range(3))  # generators cannot be pickled


def test_in_the_driver_process_the_function_is_the_object_itself():
    function = Plain()
    assert ShippedFunction(function).get() is function


def test_after_the_trip_the_worker_gets_an_equal_copy():
    arrived = pickle.loads(pickle.dumps(ShippedFunction(Plain(limit=7))))
    copy = arrived.get()
    assert isinstance(copy, Plain) and copy.limit == 7 and arrived.get() is copy  # unpickled once


def test_an_attribute_that_cannot_be_pickled_is_named_with_the_fix():
    with pytest.raises(FunctionShippingError) as failure:
        ShippedFunction(WithAGenerator()).check()
    message = str(failure.value)
    assert "WithAGenerator" in message and "'numbers'" in message and "generator" in message
    assert "open(runtime_context)" in message


def test_a_class_the_worker_cannot_import_names_class_module_and_fix(tmp_path, monkeypatch):
    (tmp_path / "gone_on_workers.py").write_text(textwrap.dedent("""
        from keyedstate import KeyedProcessFunction

        class Vanishing(KeyedProcessFunction):
            def process_element(self, value, ctx):
                yield value
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    from gone_on_workers import Vanishing  # type: ignore[import-not-found]

    data = pickle.dumps(ShippedFunction(Vanishing()))
    del sys.modules["gone_on_workers"]
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])  # as on an executor
    arrived = pickle.loads(data)  # the trip itself needs only keyedstate
    with pytest.raises(FunctionShippingError) as failure:
        arrived.get()
    message = str(failure.value)
    assert "Vanishing" in message and "'gone_on_workers'" in message and "ModuleNotFoundError" in message
    assert "register_pickle_by_value" in message and "addPyFile" in message
