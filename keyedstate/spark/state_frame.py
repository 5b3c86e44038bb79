"""The keyed state of a keyed_process query as a Spark DataFrame (the State Processor API's reader).

``read_keyed_state_frame`` reads the key-group rows with Spark's state data source and decodes them in the
executors (``mapInPandas``), so state of any size is never collected to the driver. One row per key and state:

    <key columns>   the key (``key_schema``; inferred from the first key group when not given)
    state           the state's name, or ``"__timers__"`` for the key's pending timers
    value           BINARY: the pickled Python value (a list for list state, a dict for map state), for states
                    without a typed column
    <state name>    a typed column per descriptor whose type Spark can hold (Types.LONG() -> BIGINT, list state ->
                    ARRAY, map state -> MAP, ...); set only on that state's rows
    timers          ARRAY<STRUCT<domain STRING, timestamp BIGINT>>, set only on the ``__timers__`` rows

A row-mode key group is decoded from its row; a RocksDB-mode one is restored from the version its row names (base
snapshot plus changelogs, checksummed) into a temporary database in the executor, as ``read_keyed_state`` does.
"""

from __future__ import annotations

import pickle
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

from keyedstate.errors import ConfigurationError
from keyedstate.spark.state_reader import decode_state_row
from keyedstate.spark_compat import state_rows_frame
from keyedstate.state.descriptors import ListStateDescriptor, MapStateDescriptor, StateDescriptor
from keyedstate.state.key_groups.row_format import StateRow

__all__ = ["read_keyed_state_frame", "TIMERS_STATE", "spark_type_of"]

TIMERS_STATE = "__timers__"
"""The ``state`` of the rows that carry a key's pending timers."""

_FIXED_COLUMNS = ("state", "value", "timers")
_TIMERS_TYPE = "ARRAY<STRUCT<domain: STRING, timestamp: BIGINT>>"
_SCALARS = {
    "BOOLEAN": "BOOLEAN", "BYTE": "TINYINT", "SHORT": "SMALLINT", "INT": "INT", "LONG": "BIGINT",
    "BIG_INT": "DECIMAL(38,0)", "FLOAT": "FLOAT", "DOUBLE": "DOUBLE", "BIG_DEC": "DECIMAL(38,18)", "STRING": "STRING",
    "CHAR": "STRING", "SQL_DATE": "DATE", "SQL_TIMESTAMP": "TIMESTAMP", "INSTANT": "TIMESTAMP",
    "LOCAL_DATE_TIME": "TIMESTAMP_NTZ", "BYTES": "BINARY", "PRIMITIVE_ARRAY<BYTE>": "BINARY",
    # Python types given as descriptor types (to_type_information)
    "bool": "BOOLEAN", "int": "BIGINT", "float": "DOUBLE", "str": "STRING",
}
_ARRAY = re.compile(r"^(?:LIST|BASIC_ARRAY|PRIMITIVE_ARRAY|OBJECT_ARRAY)<(.*)>$")
_MAP = re.compile(r"^MAP<(.*)>$")


def spark_type_of(type_name: str) -> Optional[str]:
    """The Spark SQL type (DDL) holding values of the keyedstate type named ``type_name``, or None when values stay
    pickled (PICKLED_BYTE_ARRAY, ANY, tuples, rows, classes, custom serializers)."""
    if type_name in _SCALARS:
        return _SCALARS[type_name]
    array = _ARRAY.match(type_name)
    if array:
        element = spark_type_of(array.group(1))
        return None if element is None else f"ARRAY<{element}>"
    mapping = _MAP.match(type_name)
    if mapping:
        key_name, value_name = _split_pair(mapping.group(1))
        key, value = spark_type_of(key_name), spark_type_of(value_name)
        return None if key is None or value is None else f"MAP<{key}, {value}>"
    return None


def _split_pair(text: str) -> tuple[str, str]:
    depth = 0
    for position, char in enumerate(text):
        depth += char == "<"
        depth -= char == ">"
        if char == "," and depth == 0:
            return text[:position], text[position + 1:]
    return text, ""


def _column_type(descriptor: StateDescriptor) -> Optional[str]:
    element = spark_type_of(descriptor.type_info.name)
    if element is None:
        return None
    if isinstance(descriptor, ListStateDescriptor):
        return f"ARRAY<{element}>"
    if isinstance(descriptor, MapStateDescriptor):
        key = spark_type_of(descriptor.key_type_info.name)
        return None if key is None else f"MAP<{key}, {element}>"
    return element


def read_keyed_state_frame(
    spark: Any,
    checkpoint_location: str,
    *,
    descriptors: Sequence[StateDescriptor] = (),
    key_schema: Union[str, Any, None] = None,
    batch_id: Optional[int] = None,
    operator_id: int = 0,
    state_storage: Optional[str] = None,
    state_storage_options: Optional[Mapping[str, Any]] = None,
) -> Any:
    """Every key's state and pending timers of a keyed_process query as of ``batch_id`` (default: the last committed
    batch), as a DataFrame decoded in the executors (layout in this module's docstring).

    ``descriptors``: the function's state descriptors; each one with a type Spark can hold gets a typed column named
    after the state (and custom serializers decode). ``key_schema``: the key columns as a DDL string or StructType
    (``"user STRING"``; several columns for a tuple key); by default they are inferred from the first key group
    (``key`` for one column, ``key_1``, ``key_2``, ... for tuple keys). ``state_storage`` as in
    ``read_keyed_state``, ``state_storage_options`` (credentials and endpoint of ``s3://`` storage) as in
    ``keyed_process``."""
    from keyedstate.spark.schemas import parse_schema

    rows = state_rows_frame(spark, checkpoint_location, operator_id, batch_id, "read_keyed_state_frame")
    descriptors = tuple(descriptors)
    if key_schema is None:
        key_fields = _inferred_key_fields(rows, descriptors, state_storage, state_storage_options)
    else:
        key_fields = [(field.name, field.dataType.simpleString())
                      for field in parse_schema(key_schema, "key_schema").fields]
    typed = {d.name: column_type for d in descriptors if (column_type := _column_type(d)) is not None}
    taken = {name for name, _ in key_fields} | set(_FIXED_COLUMNS)
    clashes = sorted(name for name in typed if name in taken)
    if clashes:
        raise ConfigurationError(
            f"read_keyed_state_frame: the typed column of state(s) {', '.join(map(repr, clashes))} would clash with a "
            f"key column or one of {', '.join(_FIXED_COLUMNS)}; pass key_schema with other column names, or leave "
            f"that descriptor out (its values then come pickled in 'value')"
        )
    columns = [*key_fields, ("state", "STRING"), ("value", "BINARY"), *typed.items(), ("timers", _TIMERS_TYPE)]
    ddl = ", ".join(f"`{name}` {kind}" for name, kind in columns)
    key_names = [name for name, _ in key_fields]
    decode = _Decoder(descriptors, key_names, list(typed), (state_storage, state_storage_options))
    return rows.mapInPandas(decode, ddl)


@dataclass(frozen=True)
class _Decoder:
    """Runs in the executors: state rows in, one output row per key and state out (a batch per key group)."""

    descriptors: tuple[StateDescriptor, ...]
    key_names: list[str]
    typed: list[str]
    storage: tuple[Optional[str], Optional[Mapping[str, Any]]]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        names = [*self.key_names, "state", "value", *self.typed, "timers"]
        for batch in batches:
            for row in batch.itertuples(index=False):
                if row[0] is None or row[0] != row[0]:  # a null state row (NaN in pandas)
                    continue
                records = list(self._records(StateRow.from_row(row)))
                if records:
                    yield pd.DataFrame.from_records(records, columns=names)

    def _records(self, row: StateRow) -> Iterator[tuple[Any, ...]]:
        width = len(self.key_names)
        typed = self.typed
        for key, states in decode_state_row(row, self.descriptors, *self.storage).items():
            key_values = tuple(key) if width > 1 else (key,)
            if len(key_values) != width:
                raise ConfigurationError(
                    f"read_keyed_state_frame: key {key!r} has {len(key_values)} column(s) but key_schema has {width}; "
                    f"pass a key_schema with one column per key column"
                )
            for name, value in states.items():
                if name == TIMERS_STATE:
                    timers = [{"domain": domain, "timestamp": timestamp} for domain, timestamp in value]
                    yield (*key_values, TIMERS_STATE, None, *([None] * len(typed)), timers)
                elif name in typed:
                    cells = [value if column == name else None for column in typed]
                    yield (*key_values, name, None, *cells, None)
                else:
                    yield (*key_values, name, pickle.dumps(value), *([None] * len(typed)), None)


def _inferred_key_fields(rows: Any, descriptors: tuple[StateDescriptor, ...], state_storage: Optional[str],
                         state_storage_options: Optional[Mapping[str, Any]]) -> list[tuple[str, str]]:
    sampler = _KeySampler(descriptors, (state_storage, state_storage_options))
    sample = rows.mapInPandas(sampler, "key BINARY").limit(1).collect()
    if not sample:
        # No state at all: the frame is empty whatever the key columns are.
        return [("key", "STRING")]
    key = pickle.loads(sample[0][0])
    values = key if isinstance(key, tuple) else (key,)
    kinds = [_python_key_type(value) for value in values]
    if len(kinds) == 1:
        return [("key", kinds[0])]
    return [(f"key_{position}", kind) for position, kind in enumerate(kinds, start=1)]


@dataclass(frozen=True)
class _KeySampler:
    descriptors: tuple[StateDescriptor, ...]
    storage: tuple[Any, Any]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        for batch in batches:
            for row in batch.itertuples(index=False):
                if row[0] is None or row[0] != row[0]:
                    continue
                for key in decode_state_row(StateRow.from_row(row), self.descriptors, *self.storage):
                    yield pd.DataFrame({"key": [pickle.dumps(key)]})
                    return


def _python_key_type(value: Any) -> str:
    import datetime
    import decimal

    for kind, sql in ((bool, "BOOLEAN"), (int, "BIGINT"), (float, "DOUBLE"), (str, "STRING"), (bytes, "BINARY"),
                      (datetime.datetime, "TIMESTAMP"), (datetime.date, "DATE"), (decimal.Decimal, "DECIMAL(38,18)")):
        if isinstance(value, kind):
            return sql
    raise ConfigurationError(
        f"read_keyed_state_frame cannot infer a Spark type for the key value {value!r} ({type(value).__name__}); "
        f"pass key_schema, e.g. key_schema='user STRING'"
    )
