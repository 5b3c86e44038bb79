"""The elements of one key-group call, column-wise: their order (by key, then event time) and their records.

The records ``process_element`` receives are ``pyspark.sql.Row`` s.

``Row(*names)(*values)`` costs ~5 us per row (keyword plumbing in ``Row.__call__`` / ``_create_row`` and an
instance ``__dict__`` per row); a per-schema subclass of ``Row`` with the field names on the class, instantiated
with ``tuple.__new__`` over zipped columns, costs ~0.1 us and is still a ``Row`` in every respect users see:
``isinstance(value, Row)``, ``value.user``, ``value["user"]``, ``value[0]``, slices, ``asDict()``, ``in`` (field
names), equality with tuples and other Rows, ``repr`` (``Row(user='a', ...)``) and pickling (to a plain ``Row``).

Timestamp columns: Spark hands pandas tz-naive ``datetime64[ns]`` columns, or (value columns of ``keyed_process``,
see :mod:`keyedstate.spark.timestamps`) int64 microseconds that :class:`ElementColumns` reads as
``datetime64[us]``; they become ``datetime.datetime`` s (what ``DataFrame.collect()`` Rows hold, and microsecond
precision like Spark's TIMESTAMP), nulls become ``None``.
"""

from __future__ import annotations

from functools import partial
from operator import itemgetter
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import pandas as pd
from pyspark.sql import Row

from keyedstate.fastpath import fastpath

__all__ = ["row_factory", "rows_builder", "column_values", "key_codes", "group_order", "first_null",
           "ElementColumns", "Column"]

#: A column of a call's elements: the batch's Series, or the decoded array of a microseconds column.
Column = Union[pd.Series, np.ndarray]


def row_factory(names: Sequence[str]) -> Callable[[tuple[Any, ...]], Row]:
    """A function ``values tuple -> Row`` with fields ``names``; map it over ``zip(*columns)``."""
    return partial(tuple.__new__, _row_type(names))


def rows_builder(names: Sequence[str]) -> Callable[[Sequence[list[Any]]], list[Row]]:
    """A function ``columns -> [Row, ...]``: one Row with fields ``names`` per position of the equally long column
    lists (in C where the compiled fast path is built)."""
    row_type = _row_type(names)
    if fastpath is not None:
        return partial(fastpath.rows_from_columns, row_type)
    make_row = partial(tuple.__new__, row_type)
    return lambda columns: list(map(make_row, zip(*columns, strict=True)))


def _row_type(names: Sequence[str]) -> type:
    fields = list(names)
    namespace: dict[str, Any] = {"__fields__": fields, "__slots__": ()}
    for index, name in enumerate(fields):
        # A property is ~10x faster than Row.__getattr__'s list.index + exception path. Names Row already resolves
        # (tuple methods such as ``count``, ``asDict``), dunders and repeated names keep Row's own lookup.
        if name not in namespace and not name.startswith("__") and not hasattr(Row, name):
            namespace[name] = property(itemgetter(index))
    return type("Row", (Row,), namespace)


def column_values(column: Column, order: np.ndarray) -> list[Any]:
    """``column`` reordered by ``order`` as Python objects (what ``Series.tolist`` gives, but cheaper)."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype):
        array = column if isinstance(column, np.ndarray) else column.to_numpy()
        if dtype.kind == "M":
            # numpy builds datetime.datetime for [us] units in C; NaT becomes None
            return array[order].astype("datetime64[us]").tolist()
        if dtype.kind in "biufO":
            return array[order].tolist()
    return column.take(order).tolist()


class ElementColumns:
    """The columns of a call's elements by name: ``batch``'s, except that its int64 wall-clock microsecond
    ``micros_columns`` read as ``datetime64[us]`` arrays (the unit covers years 1-9999, and the encoding's null,
    int64's minimum, is numpy's NaT). The batch itself is left as it is: assigning a column of a DataFrame costs
    more than the rest of a small call's bookkeeping."""

    __slots__ = ("batch", "_decoded")

    def __init__(self, batch: pd.DataFrame, micros_columns: Sequence[str]) -> None:
        self.batch = batch
        self._decoded = {name: batch[name].to_numpy().astype("int64", copy=False).view("datetime64[us]")
                         for name in micros_columns}

    def __getitem__(self, name: str) -> Column:
        decoded = self._decoded.get(name)
        return self.batch[name] if decoded is None else decoded

    def values_at(self, position: int, names: Sequence[str]) -> dict[str, Any]:
        """The values of the element at ``position`` in ``names`` (for error messages)."""
        return {name: column_values(self[name], np.array([position]))[0] for name in names}


def _codes(column: Column) -> np.ndarray:
    values = column.to_numpy() if isinstance(column, pd.Series) and isinstance(column.dtype, np.dtype) else column
    return pd.factorize(values)[0]


def key_codes(key_series: Sequence[Column]) -> tuple[list[np.ndarray], Optional[int]]:
    """One integer code per element and key column (equal codes = pandas-equal keys), and the position of the first
    element with a null key (or None)."""
    codes = [_codes(series) for series in key_series]
    for column in codes:
        nulls = column < 0  # factorize's code for None / NaN / NaT
        if nulls.any():
            return codes, int(nulls.argmax())
    return codes, None


def group_order(codes: Sequence[np.ndarray], times: Optional[np.ndarray]) -> tuple[np.ndarray, list[int]]:
    """The stable order that groups the elements by key, each key's elements in event-time order; and where each
    key's run of elements starts in it.

    Keys come in the order of their first element in the batch: sorting them would cost more than the grouping,
    and Spark promises no order of the input rows of a group either.
    """
    # lexsort sorts by its last key first and is stable
    order = np.lexsort(([] if times is None else [times]) + list(codes[::-1]))
    total = len(order)
    change = np.zeros(total, dtype=bool)
    if total:
        change[0] = True
    for column in codes:
        ordered = column[order]
        change[1:] |= ordered[1:] != ordered[:-1]
    return order, np.flatnonzero(change).tolist()


def first_null(column: Column) -> Optional[int]:
    """The position of the first null of ``column``, or None."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iub":
        return None  # numpy ints and bools cannot hold nulls
    if isinstance(column, np.ndarray):
        nulls = pd.isna(column)
    else:
        nulls = pd.isna(column.to_numpy()) if isinstance(dtype, np.dtype) else column.isna().to_numpy()
    return int(nulls.argmax()) if nulls.any() else None
