"""The bytes Spark's ``xxhash64`` reads for one key column value of each scalar Spark type.

Spark hashes an int-like value (boolean, tinyint, smallint, int, date) with ``XXH64.hashInt`` and a long-like one
(bigint, timestamp, timestamp_ntz, a decimal of precision <= 18) with ``XXH64.hashLong``; both equal standard XXH64
of the value's 4 or 8 little-endian bytes, so every scalar is "bytes, then XXH64". The encoders here produce those
bytes from Python values and refuse values that do not fit the declared type, naming the type and the fix.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import struct
from typing import Any, Callable

from keyedstate.errors import ConfigurationError
from keyedstate.key_types import KeyColumnType

__all__ = ["Encoder", "scalar_encoder", "key_value_mismatch"]

# value -> the bytes XXH64 hashes for it
Encoder = Callable[[Any], bytes]

_pack_int = struct.Struct("<i").pack
_pack_long = struct.Struct("<q").pack
_pack_float = struct.Struct("<f").pack
_pack_double = struct.Struct("<d").pack
_FLOAT_ZERO = b"\x00" * 4
_FLOAT_NAN = struct.pack("<I", 0x7FC00000)  # Java's Float.floatToIntBits of every NaN
_DOUBLE_ZERO = b"\x00" * 8
_DOUBLE_NAN = struct.pack("<Q", 0x7FF8000000000000)  # Double.doubleToLongBits of every NaN
_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH_ORDINAL = _EPOCH.toordinal()
_MICROSECOND = _dt.timedelta(microseconds=1)
_MAX_LONG_DIGITS = 18

try:
    import numpy as _np

    _NUMPY_GENERIC: tuple[type[Any], ...] = (_np.generic,)
except ImportError:  # pragma: no cover - numpy is a transitive dependency
    _NUMPY_GENERIC = ()


def _plain(value: Any) -> Any:
    return value.item() if _NUMPY_GENERIC and isinstance(value, _NUMPY_GENERIC) else value


def key_value_mismatch(column_type: KeyColumnType, value: Any, needs: str) -> ConfigurationError:
    """The error for a key column value that does not fit the column's declared type."""
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return ConfigurationError(
        f"the key value {shown} ({type(value).__qualname__}) does not fit key column type {column_type}: {needs}. "
        f"Declare the type the Spark key column has (see df.schema), or convert the key to it"
    )


def _integer_encoder(column_type: KeyColumnType) -> Encoder:
    bits = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}[column_type.name]
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    pack = _pack_long if bits == 64 else _pack_int  # Spark widens tinyint and smallint to int before hashing

    def encode(value: Any) -> bytes:
        if type(value) is not int:
            value = _plain(value)
            if not isinstance(value, int) or isinstance(value, bool):
                raise key_value_mismatch(column_type, value, "it takes an int")
        if not low <= value <= high:
            raise key_value_mismatch(column_type, value, f"it holds {low}..{high}")
        return pack(value)

    return encode


def _real(column_type: KeyColumnType, value: Any) -> float:
    if type(value) is not float:
        value = _plain(value)
        if not isinstance(value, (float, int)) or isinstance(value, bool):
            raise key_value_mismatch(column_type, value, "it takes a float")
        try:
            return float(value)
        except OverflowError:
            raise key_value_mismatch(column_type, value, "it is beyond the double range") from None
    return value


def _ieee_encoder(column_type: KeyColumnType) -> Encoder:
    single = column_type.name == "float"
    pack, nan, zero = (_pack_float, _FLOAT_NAN, _FLOAT_ZERO) if single else (_pack_double, _DOUBLE_NAN, _DOUBLE_ZERO)
    negative_zero = pack(-0.0)

    def encode(value: Any) -> bytes:
        value = _real(column_type, value)
        if value != value:
            return nan
        try:
            raw = pack(value)  # a float column rounds to the nearest float, as Spark's cast to FloatType does
        except OverflowError:
            raw = pack(math.copysign(math.inf, value))
        return zero if raw == negative_zero else raw  # also a tiny negative double rounded to a float -0.0

    return encode


def _unscaled(column_type: KeyColumnType, value: Any) -> int:
    """The value's digits at the column's scale, exactly (Spark would round, or overflow to null; a key that does
    not fit its declared type is a mistake worth reporting). Works on the digits, so an exponent such as
    ``1E+999999999`` is refused without building the number."""
    precision, scale = column_type.precision, column_type.scale
    value = _plain(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) >= 10 ** (precision - scale):
            raise key_value_mismatch(column_type, value, f"it has {precision - scale} digits before the point")
        return value * 10**scale
    if not isinstance(value, decimal.Decimal) or not value.is_finite():
        raise key_value_mismatch(column_type, value, "it takes a finite decimal.Decimal or an int")
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # not 'n', 'N' or 'F': the value is finite
    if not any(digits):
        return 0
    shift = exponent + scale  # unscaled = digits * 10**shift
    if shift < 0:
        digits, dropped = digits[:shift], digits[shift:]
        if any(dropped):
            raise key_value_mismatch(column_type, value, f"it has {scale} digits after the point")
        shift = 0
    if len(digits) + shift > precision:  # digits has no leading zero
        raise key_value_mismatch(column_type, value, f"it has {precision - scale} digits before the point")
    unscaled = int("".join(map(str, digits))) * 10**shift
    return -unscaled if sign else unscaled


def _decimal_encoder(column_type: KeyColumnType) -> Encoder:
    def encode(value: Any) -> bytes:
        unscaled = _unscaled(column_type, value)
        if column_type.precision <= _MAX_LONG_DIGITS:
            return _pack_long(unscaled)
        magnitude_bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
        return unscaled.to_bytes(magnitude_bits // 8 + 1, "big", signed=True)  # BigInteger.toByteArray

    return encode


class _Checked:
    """No value has this type: the values of a column type without one sure Python type are all checked."""


# type name -> (the Python type taken without a check, accepts the Python value, what it takes, the value's bytes)
_SIMPLE_ENCODINGS: dict[str, tuple[type, Callable[[Any], bool], str, Encoder]] = {
    "string": (str, lambda v: isinstance(v, str), "it takes a str", lambda v: v.encode("utf-8")),
    "binary": (bytes, lambda v: isinstance(v, (bytes, bytearray, memoryview)), "it takes bytes", bytes),
    "boolean": (bool, lambda v: isinstance(v, bool), "it takes a bool", lambda v: _pack_int(1 if v else 0)),
    "date": (_dt.date, lambda v: isinstance(v, _dt.date) and not isinstance(v, _dt.datetime),
             "it takes a datetime.date (use .date() of a datetime)",
             lambda v: _pack_int(v.toordinal() - _EPOCH_ORDINAL)),
    "timestamp": (_Checked, lambda v: isinstance(v, _dt.datetime) and v.utcoffset() is not None,
                  "it takes a tz-aware datetime.datetime (a naive one is ambiguous: attach the Spark session time "
                  "zone with .replace(tzinfo=...), or declare the column timestamp_ntz)",
                  lambda v: _pack_long((v - _EPOCH_UTC) // _MICROSECOND)),
    "timestamp_ntz": (_Checked, lambda v: isinstance(v, _dt.datetime) and v.utcoffset() is None,
                      "it takes a naive datetime.datetime (a wall-clock time without tzinfo)",
                      lambda v: _pack_long((v - _EPOCH) // _MICROSECOND)),
    "void": (_Checked, lambda v: False, "it only holds None", bytes),
}


def _simple_encoder(column_type: KeyColumnType) -> Encoder:
    sure_type, accepts, needs, to_bytes = _SIMPLE_ENCODINGS[column_type.name]

    def encode(value: Any) -> bytes:
        if type(value) is not sure_type:
            value = _plain(value)
            if not accepts(value):
                raise key_value_mismatch(column_type, value, needs)
        try:
            return to_bytes(value)
        except UnicodeEncodeError as error:
            raise key_value_mismatch(column_type, value, f"it is not valid Unicode ({error.reason})") from None

    return encode


_BUILDERS: dict[str, Callable[[KeyColumnType], Encoder]] = {
    **dict.fromkeys(("tinyint", "smallint", "int", "bigint"), _integer_encoder), "float": _ieee_encoder,
    "double": _ieee_encoder, "decimal": _decimal_encoder, **dict.fromkeys(_SIMPLE_ENCODINGS, _simple_encoder),
}


def scalar_encoder(column_type: KeyColumnType) -> Encoder:
    """The encoder of a scalar key column type (any but array and struct)."""
    return _BUILDERS[column_type.name](column_type)
