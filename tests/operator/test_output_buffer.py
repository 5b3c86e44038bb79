"""What a function may return or yield, and the errors for what it may not."""

from __future__ import annotations

import pytest
from pyspark.sql import Row

from keyedstate.errors import InvalidOutputError
from keyedstate.operator.output_buffer import OutputBuffer


def collect(result):
    buffer = OutputBuffer()
    buffer.collect(result, 5, lambda: "Fn.process_element")
    return buffer.drain()[0]


def test_generators_lists_tuples_of_records_and_empty_results_are_walked():
    assert collect(iter([("a", 1)])) == [("a", 1)]
    assert collect([("a", 1), ("b", 2)]) == [("a", 1), ("b", 2)]
    assert collect((("a", 1), ("b", 2))) == [("a", 1), ("b", 2)]
    assert collect(()) == [] and collect(None) == []


def test_a_returned_record_tuple_says_to_yield_it():
    with pytest.raises(InvalidOutputError, match=r"returned the tuple \('a', 1\), which would be read as 2 separate "
                                                 r"records; yield the record instead \(`yield 'a', 1`\)"):
        collect(("a", 1))


def test_a_returned_row_says_to_yield_it():
    with pytest.raises(InvalidOutputError, match=r"returned the tuple Row\(user='a', n=1\).*`yield Row\(user='a'"):
        collect(Row(user="a", n=1))
