"""How big each key's state is, and what each key group keeps in storage, as Spark DataFrames decoded in the
executors: what the checkpoint inspector (:mod:`keyedstate.spark.inspection`) aggregates.

:func:`key_sizes_frame` has one row per key with state or timers, like :func:`read_keyed_state_frame` (the same
state rows, read the same way: a RocksDB-mode key group is restored from the version its row names), but it
decodes no value, so it needs no descriptors and works for any state type::

    key_group    INT     the key's key group
    key          STRING  the key's repr (cut to KEY_TEXT_CHARS characters)
    state_bytes  BIGINT  the bytes of the key's stored records, every state
    states       ARRAY<STRUCT<state STRING, entries BIGINT, bytes BIGINT>>   per state: entries (1 for value,
                 reducing and aggregating state, elements of a list, entries of a map) and stored bytes
    timers       ARRAY<STRUCT<domain STRING, timestamp BIGINT>>               the key's pending timers

A stored record is what both backends keep for one entry: the stored key (key group, key, namespace, and the map
key for map state) and the serialized value (with its TTL timestamp); both backends store the same records, so
the same state gives the same bytes in either. Timers are counted, not sized.

:func:`key_group_storage_frame` has one row per key group with its Spark state row's bytes and, in RocksDB mode,
the bytes of the base snapshot and changelogs its version names (what a restore reads) and the storage location
they are in (without credentials).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional

from keyedstate.keygroups import key_group_of_stored_key
from keyedstate.redaction import without_credentials
from keyedstate.serialization import decode_key
from keyedstate.spark.state_reader import stored_records
from keyedstate.state.base.layout import KEY_GROUP_PREFIX_BYTES
from keyedstate.state.key_groups.row_format import STATE_ROW_FORMAT_ROCKSDB, StateRow
from keyedstate.state.rocksdb.version_record import VersionRecord

__all__ = ["KEY_SIZES_DDL", "KEY_GROUP_STORAGE_DDL", "KEY_TEXT_CHARS", "key_sizes_frame", "key_group_storage_frame"]

KEY_TEXT_CHARS = 200
"""Keys are shown as their repr, cut to this many characters (a key is a label here, not data to join on)."""

KEY_SIZES_DDL = ("key_group INT, key STRING, state_bytes BIGINT, "
                 "states ARRAY<STRUCT<state: STRING, entries: BIGINT, bytes: BIGINT>>, "
                 "timers ARRAY<STRUCT<domain: STRING, timestamp: BIGINT>>")
KEY_GROUP_STORAGE_DDL = ("key_group INT, format INT, num_key_groups INT, row_bytes BIGINT, base_bytes BIGINT, "
                         "changelog_bytes BIGINT, changelogs INT, base_batch BIGINT, location STRING")

_ROWS_PER_BATCH = 10_000  # rows of one output batch: a key group of millions of keys never sits in one DataFrame


def key_sizes_frame(rows: Any, state_storage: Optional[str] = None,
                    state_storage_options: Optional[Mapping[str, Any]] = None) -> Any:
    """One row per key of the state rows frame ``rows`` (:func:`keyedstate.spark_compat.state_rows_frame`), laid out
    as in this module's docstring."""
    return rows.mapInPandas(_KeySizes(state_storage, state_storage_options), KEY_SIZES_DDL)


def key_group_storage_frame(rows: Any) -> Any:
    """One row per key group of the state rows frame ``rows`` with what it keeps in storage; reads no state file."""
    return rows.mapInPandas(_key_group_storage, KEY_GROUP_STORAGE_DDL)


def _is_null_row(row: tuple[Any, ...]) -> bool:
    return row[0] is None or row[0] != row[0]  # a removed state row (NaN in pandas)


class _KeySizes:
    """Runs in the executors: state rows in, one row per key out."""

    def __init__(self, state_storage: Optional[str], state_storage_options: Optional[Mapping[str, Any]]) -> None:
        self.storage = (state_storage, state_storage_options)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        columns = ["key_group", "key", "state_bytes", "states", "timers"]
        for batch in batches:
            for row in batch.itertuples(index=False):
                if _is_null_row(row):
                    continue
                records = list(self._keys(StateRow.from_row(row)))
                for start in range(0, len(records), _ROWS_PER_BATCH):
                    yield pd.DataFrame.from_records(records[start:start + _ROWS_PER_BATCH], columns=columns)

    def _keys(self, row: StateRow) -> Iterator[tuple[Any, ...]]:
        states, timers = stored_records(row, *self.storage)
        # per key (its stored-key prefix: key group + encoded key): {state: [entries, bytes]}, [timers]
        sizes: dict[bytes, dict[str, list[int]]] = {}
        for metadata, entries in states:
            for stored_key, entry in entries:
                _, end = decode_key(stored_key, KEY_GROUP_PREFIX_BYTES)
                counts = sizes.setdefault(stored_key[:end], {}).setdefault(metadata.name, [0, 0])
                counts[0] += 1
                counts[1] += len(stored_key) + len(entry)
        timers_of: dict[bytes, list[dict[str, Any]]] = {}
        for domain, timer in timers:
            timers_of.setdefault(timer.key_prefix, []).append({"domain": domain, "timestamp": timer.timestamp})
        for prefix in sizes.keys() | timers_of.keys():
            of_key = sizes.get(prefix, {})
            key_text = repr(decode_key(prefix, KEY_GROUP_PREFIX_BYTES)[0])[:KEY_TEXT_CHARS]
            yield (key_group_of_stored_key(prefix), key_text, sum(bytes_ for _, bytes_ in of_key.values()),
                   [{"state": name, "entries": entries, "bytes": bytes_} for name, (entries, bytes_) in of_key.items()],
                   sorted(timers_of.get(prefix, ()), key=lambda timer: (timer["domain"], timer["timestamp"])))


def _key_group_storage(batches: Iterator[Any]) -> Iterator[Any]:
    import pandas as pd

    for batch in batches:
        records: list[tuple[Any, ...]] = []
        for row in batch.itertuples(index=False):
            if _is_null_row(row):
                continue
            state_row = StateRow.from_row(row)
            row_bytes = len(state_row.state) + len(state_row.timers)
            if state_row.format == STATE_ROW_FORMAT_ROCKSDB:
                version = VersionRecord.from_bytes(state_row.state)
                named = version.base or (version.changelogs[0] if version.changelogs else None)
                key_group = None if named is None else int(named.path.split("/", 1)[0][len("kg-"):])
                records.append((key_group, state_row.format, state_row.key_groups, row_bytes, version.base_bytes,
                                version.changelog_bytes, len(version.changelogs), version.base_batch,
                                without_credentials(version.location)))
            else:
                records.append((_heap_key_group(state_row), state_row.format, state_row.key_groups, row_bytes,
                                None, None, None, None, None))
        if records:
            yield pd.DataFrame.from_records(records, columns=["key_group", "format", "num_key_groups", "row_bytes",
                                                              "base_bytes", "changelog_bytes", "changelogs",
                                                              "base_batch", "location"])


def _heap_key_group(row: StateRow) -> Optional[int]:
    from keyedstate.state.key_groups.row_format import decode_state_payload
    from timers import decode_key_group_blob

    if row.timers:
        return decode_key_group_blob(row.timers)[0]
    for _, records in decode_state_payload(row.state):
        for stored_key, _ in records:
            return key_group_of_stored_key(stored_key)
    return None
