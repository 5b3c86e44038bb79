"""Checking what users pass about a DataFrame's shape: DDL or StructType schemas, and key columns."""

from __future__ import annotations

from typing import Any, Sequence, Union

from pyspark.sql.types import DataType, StructType, _parse_datatype_string

from keyedstate.errors import ConfigurationError

__all__ = ["parse_schema", "column_types", "check_key_columns"]


def parse_schema(schema: Union[StructType, str], what: str) -> StructType:
    """``schema`` (a StructType or a DDL string) as a StructType; ``what`` names the argument in errors."""
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        try:
            parsed = _parse_datatype_string(schema)
        except Exception as error:  # Spark's parser raises its own ParseException (or a JVM error on Connect)
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ConfigurationError(
                f"{what} {schema!r} is not a valid DDL schema ({reason}); write it as 'name TYPE, ...' such as "
                f"'user STRING, count BIGINT', or pass a StructType"
            ) from error
        if isinstance(parsed, StructType):
            return parsed
    raise ConfigurationError(f"{what} must be a StructType or a DDL string such as 'user STRING, count BIGINT', "
                             f"got {schema!r}")


def column_types(df: Any) -> dict[str, DataType]:
    """``df``'s columns and their Spark types."""
    return {field.name: field.dataType for field in df.schema.fields}


def check_key_columns(df: Any, key_columns: Sequence[str]) -> None:
    """Raise :class:`~keyedstate.errors.ConfigurationError` unless ``key_columns`` are a non-empty list of ``df``'s
    columns."""
    if isinstance(key_columns, str) or not key_columns:
        raise ConfigurationError("key_columns must be a non-empty list of column names, e.g. ['user_id']")
    missing = [c for c in key_columns if c not in column_types(df)]
    if missing:
        raise ConfigurationError(
            f"key column(s) {', '.join(map(repr, missing))} are not in the DataFrame (columns: {', '.join(df.columns)})"
        )
