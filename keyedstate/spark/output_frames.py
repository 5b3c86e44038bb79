"""Turn the records a function yields into one pandas DataFrame per group call, checked against the schema.

Spark would otherwise fail deep inside Arrow with a message that names neither the key group nor the batch, so
records are validated here: shape first (tuple arity, dict keys), then each column's Arrow conversion.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql.types import StructType

from keyedstate.errors import InvalidOutputError
from keyedstate.operator.output_buffer import short_repr
from keyedstate.spark.metrics import METRICS_TAG
from keyedstate.spark_compat import arrow_type_of

__all__ = ["OutputLayout", "SIDE_OUTPUT_TAG_COLUMN", "side_output_column"]

SIDE_OUTPUT_TAG_COLUMN = "output_tag"


def side_output_column(tag_id: str) -> str:
    return f"side_{tag_id}"


class OutputLayout:
    """The output struct of a keyed_process query: the main output's fields, plus (when side outputs are declared)
    an ``output_tag`` column and one struct column per side output."""

    def __init__(self, main_schema: StructType, side_schemas: Optional[dict[str, StructType]] = None) -> None:
        self.main_schema = main_schema
        self.side_schemas = dict(side_schemas or {})
        self.main_names = [f.name for f in main_schema.fields]
        # the side outputs the user declared: the metrics rows' side output is keyedstate's own
        self.user_side_outputs = [tag for tag in self.side_schemas if tag != METRICS_TAG]
        fields = list(main_schema.fields)
        if self.side_schemas:
            from pyspark.sql.types import StringType, StructField

            fields = [StructField(f.name, f.dataType, True) for f in fields]
            fields.append(StructField(SIDE_OUTPUT_TAG_COLUMN, StringType(), True))
            for tag_id, schema in self.side_schemas.items():
                # the metrics rows travel encoded as one string (keyedstate.spark.metrics says why)
                column_type = StringType() if tag_id == METRICS_TAG else schema
                fields.append(StructField(side_output_column(tag_id), column_type, True))
        self.output_schema = StructType(fields)
        self._arrow_types = {f.name: arrow_type_of(f.dataType) for f in self.output_schema.fields}

    def _as_tuple(self, record: Any, names: Sequence[str]) -> tuple[Any, ...]:
        if isinstance(record, dict):
            missing = [n for n in names if n not in record]
            extra = [k for k in record if k not in names]
            if missing or extra:
                raise InvalidOutputError(
                    f"a dict record does not match the output schema ({', '.join(names)}): "
                    f"{'missing ' + ', '.join(missing) if missing else ''}"
                    f"{'; unexpected ' + ', '.join(map(str, extra)) if extra else ''}. Record: {short_repr(record)}"
                )
            return tuple(record[n] for n in names)
        as_dict = getattr(record, "asDict", None)  # pyspark Row
        if callable(as_dict) and getattr(record, "__fields__", None):
            return self._as_tuple(as_dict(), names)
        if isinstance(record, (tuple, list)):
            if len(record) != len(names):
                raise InvalidOutputError(
                    f"a record has {len(record)} fields but the output schema has {len(names)} "
                    f"({', '.join(names)}). Record: {short_repr(record)}"
                )
            return tuple(record)
        if len(names) == 1:
            return (record,)
        raise InvalidOutputError(
            f"a {type(record).__qualname__} record cannot fill the {len(names)} output columns "
            f"({', '.join(names)}); yield a tuple, a dict or a Row. Record: {short_repr(record)}"
        )

    def to_frames(
        self,
        records: list[Any],
        side_outputs: dict[str, list[tuple[Any, Optional[int]]]],
        where: str,
        key_of: Optional[Callable[[int], Any]] = None,
    ) -> list[pd.DataFrame]:
        """The call's output as DataFrames of the output schema (what the group function yields).

        With the metrics side output as the only side output, the call's output is one frame, built in one step: the
        main records (checked as in a stream without side outputs: no per-record side columns) followed by the
        metrics rows. A call pays for each frame it yields twice, building it and PySpark concatenating it, so one
        frame per call is what keeps the fixed cost of a key-group call low."""
        if self.user_side_outputs or METRICS_TAG not in self.side_schemas:
            return [self.to_pandas(records, side_outputs, where, key_of)]
        metrics = side_outputs.pop(METRICS_TAG, [])
        if not records and not side_outputs and not metrics:
            return []
        names = self.main_names
        rows = self._checked_rows(records, side_outputs, where, key_of)
        count, extra = len(rows), len(metrics)
        columns: dict[str, Any] = {}
        for index, name in enumerate(names):
            values = [row[index] for row in rows]
            values.extend([_placeholder(values)] * extra)
            columns[name] = values
        columns[SIDE_OUTPUT_TAG_COLUMN] = [None] * count + [METRICS_TAG] * extra
        columns[side_output_column(METRICS_TAG)] = [None] * count + [value for value, _ in metrics]
        frame = pd.DataFrame(columns, copy=False)
        if count:
            self._checked(frame, where, key_of, names)
        return [frame]

    def _checked_rows(self, records: list[Any], side_outputs: dict[str, list[tuple[Any, Optional[int]]]], where: str,
                      key_of: Optional[Callable[[int], Any]]) -> list[tuple[Any, ...]]:
        """The main records as tuples of the main columns; refuses a record of the wrong shape and records sent to
        side outputs that were not declared."""
        names = self.main_names
        try:
            rows = [self._as_tuple(record, names) for record in records]
        except InvalidOutputError:
            for index, record in enumerate(records):  # again, only to find the record and name its key
                try:
                    self._as_tuple(record, names)
                except InvalidOutputError as error:
                    raise InvalidOutputError(f"{_at(where, key_of, index)}: {error}") from None
            raise
        undeclared = sorted(tag for tag in side_outputs if tag not in self.side_schemas)
        if undeclared and not self.user_side_outputs:
            raise InvalidOutputError(
                f"{where}: the function sent records to side output(s) {', '.join(undeclared)}, but keyed_process "
                f"was not given side_outputs={{tag_id: schema}}; declare them to receive side outputs"
            )
        if undeclared:
            raise InvalidOutputError(
                f"{where}: side output {undeclared[0]!r} is not declared; declared: "
                f"{', '.join(self.user_side_outputs)}"
            )
        return rows

    def to_pandas(
        self,
        records: list[Any],
        side_outputs: dict[str, list[tuple[Any, Optional[int]]]],
        where: str,
        key_of: Optional[Callable[[int], Any]] = None,
    ) -> pd.DataFrame:
        """``key_of(i)``: the key whose call produced ``records[i]``, named in errors."""
        names = self.main_names
        rows = self._checked_rows(records, side_outputs, where, key_of)
        if not self.side_schemas:
            frame = pd.DataFrame.from_records(rows, columns=names) if rows else pd.DataFrame(
                {n: pd.Series([], dtype=object) for n in names}
            )
            return self._checked(frame, where, key_of, names)
        columns: dict[str, list[Any]] = {n: [row[i] for row in rows] for i, n in enumerate(names)}
        total = len(rows)
        tag_column: list[Optional[str]] = [None] * total
        side_columns: dict[str, list[Any]] = {tag_id: [None] * total for tag_id in self.side_schemas}
        for tag_id, pairs in side_outputs.items():
            schema = self.side_schemas[tag_id]
            side_names = [f.name for f in schema.fields]
            for value, _ in pairs:
                for name in names:
                    columns[name].append(None)
                tag_column.append(tag_id)
                try:
                    side_row = value if tag_id == METRICS_TAG else dict(
                        zip(side_names, self._as_tuple(value, side_names)))
                except InvalidOutputError as error:
                    raise InvalidOutputError(f"{where}, side output {tag_id!r}: {error}") from None
                for other, column in side_columns.items():
                    column.append(side_row if other == tag_id else None)
        frame = pd.DataFrame(columns)
        frame[SIDE_OUTPUT_TAG_COLUMN] = tag_column
        for tag_id, column in side_columns.items():
            frame[side_output_column(tag_id)] = column
        return self._checked(frame, where, key_of)

    def _checked(self, frame: pd.DataFrame, where: str, key_of: Optional[Callable[[int], Any]],
                 names: Optional[Sequence[str]] = None) -> pd.DataFrame:
        """``frame`` after checking that its columns (``names``, default all) convert to their Arrow types."""
        if frame.empty:
            return frame
        for name in names if names is not None else self._arrow_types:
            arrow_type = self._arrow_types[name]
            try:
                pa.array(frame[name], type=arrow_type, from_pandas=True)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                    OverflowError) as error:
                index, bad = _first_bad_value(frame[name], arrow_type)
                raise InvalidOutputError(
                    f"{_at(where, key_of, index)}: output column {name!r} expects {arrow_type} but got {bad!r} "
                    f"({type(bad).__qualname__}): {error}"
                ) from error
        return frame


def _placeholder(values: list[Any]) -> Any:
    """The value that fills a main column in the metrics rows: one that leaves the dtype pandas infers from the
    column's main ``values`` as it is (0 among ints, False among bools, else None, which pandas reads as NaN or NaT
    in float and time columns). A None among ints would turn the column into floats, and a large int into an
    inexact one. Never read: main_output() takes the rows without a tag."""
    first = values[0] if values else None
    if isinstance(first, (np.integer, np.bool_)):
        return first.dtype.type(0)  # np.int32 values make an int32 column
    if isinstance(first, int):
        return False if isinstance(first, bool) else 0
    return None


def _first_bad_value(column: pd.Series, arrow_type: pa.DataType) -> tuple[Optional[int], Any]:
    for index, value in enumerate(column):
        try:
            pa.array([value], type=arrow_type, from_pandas=True)
        except Exception:  # the same conversion failures as above, value by value
            return index, value
    return None, None


def _at(where: str, key_of: Optional[Callable[[int], Any]], index: Optional[int]) -> str:
    key = key_of(index) if key_of is not None and index is not None else None
    return where if key is None else f"{where}, key {key!r}"
