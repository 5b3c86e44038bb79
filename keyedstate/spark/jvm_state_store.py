"""Reading a stateful operator's state rows on Spark 3.5, which has no state data source (``format("statestore")``).

Spark's own state store provider classes are driven through the driver's JVM (a classic session's py4j gateway):
the provider the query ran with (from its offset log), Spark's SQL configuration as the query had it, and the key
and value schemas Spark wrote next to the state. So every provider (HDFS-backed, RocksDB, with or without changelog
checkpointing) and its file format are read by Spark itself, exactly as a restart would read them.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from keyedstate.errors import ConfigurationError

__all__ = ["read_group_state_rows"]

_DEFAULT_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
_STORE_NAME = "default"


def read_group_state_rows(spark: Any, checkpoint_location: str, operator_id: int,
                          batch_id: Optional[int]) -> list[Optional[tuple[Any, ...]]]:
    """The group state rows of operator ``operator_id`` as of ``batch_id`` (default: the last committed batch),
    as tuples of the state struct's fields (None where a group's state was removed)."""
    jvm = spark._jvm
    session = spark._jsparkSession
    hadoop_conf = session.sessionState().newHadoopConf()
    root_path = jvm.org.apache.hadoop.fs.Path(checkpoint_location)
    fs = root_path.getFileSystem(hadoop_conf)
    root = fs.makeQualified(root_path).toString()
    if batch_id is None:
        batch_id = _last_committed_batch(jvm, fs, root, checkpoint_location)
    query_conf = _offset_log_conf(jvm, fs, root, batch_id, checkpoint_location)

    sql_conf = session.sessionState().conf().clone()
    for key, value in query_conf.items():
        sql_conf.setConfString(key, value)
    state = jvm.org.apache.spark.sql.execution.streaming.state
    store_conf = state.StateStoreConf.apply(sql_conf)
    provider_class = query_conf.get("spark.sql.streaming.stateStore.providerClass", _DEFAULT_PROVIDER)
    partitions = int(query_conf.get("spark.sql.shuffle.partitions", sql_conf.numShufflePartitions()))
    state_root = root + "/state"

    first_store = state.StateStoreId(state_root, operator_id, 0, _STORE_NAME)
    provider_id = state.StateStoreProviderId(first_store, jvm.java.util.UUID.randomUUID())
    schemas = state.StateSchemaCompatibilityChecker(provider_id, hadoop_conf).readSchemaFile()
    key_schema, value_schema = schemas._1(), schemas._2()
    value_fields = list(value_schema.fieldNames())
    nested = bool(value_fields) and value_fields[0] == "groupState"  # Spark's state format 2
    state_schema = value_schema.apply(0).dataType() if nested else value_schema
    field_types = [field.dataType().typeName() for field in state_schema.fields()]
    providers = getattr(getattr(state, "StateStoreProvider$"), "MODULE$")

    rows: list[Optional[tuple[Any, ...]]] = []
    for partition in range(partitions):
        provider = providers.create(provider_class)
        provider.init(state.StateStoreId(state_root, operator_id, partition, _STORE_NAME), key_schema, value_schema,
                      0, store_conf, hadoop_conf)
        try:
            store = provider.getReadStore(batch_id + 1)  # the state after batch N is store version N + 1
            try:
                pairs = store.iterator()
                while pairs.hasNext():
                    value = pairs.next().value()
                    if nested and value.isNullAt(0):
                        rows.append(None)
                        continue
                    row = value.getStruct(0, len(field_types)) if nested else value
                    rows.append(tuple(_field(row, index, kind) for index, kind in enumerate(field_types)))
            finally:
                store.abort()
        finally:
            provider.close()
    return rows


def _field(row: Any, index: int, kind: str) -> Any:
    if row.isNullAt(index):
        return None
    if kind == "integer":
        return row.getInt(index)
    if kind == "long":
        return row.getLong(index)
    if kind == "binary":
        return bytes(row.getBinary(index))
    if kind == "string":
        return row.getUTF8String(index).toString()
    raise ConfigurationError(f"the state rows hold a {kind} column; this reader knows keyed_process's state row only")


def _last_committed_batch(jvm: Any, fs: Any, root: str, location: str) -> int:
    commits = jvm.org.apache.hadoop.fs.Path(root + "/commits")
    batches = [int(status.getPath().getName()) for status in (fs.listStatus(commits) if fs.exists(commits) else [])
               if status.getPath().getName().isdigit()]
    if not batches:
        raise ConfigurationError(f"{location} has no committed micro-batch (no {root}/commits/N): it is not the "
                                 f"checkpointLocation of a query that has run a batch")
    return max(batches)


def _offset_log_conf(jvm: Any, fs: Any, root: str, batch_id: int, location: str) -> dict[str, str]:
    """The SQL configuration the query ran batch ``batch_id`` with (its offset log's metadata line)."""
    path = jvm.org.apache.hadoop.fs.Path(f"{root}/offsets/{batch_id}")
    if not fs.exists(path):
        raise ConfigurationError(f"{location} has no offset log entry for batch {batch_id}; pass a batch_id the "
                                 f"query has run")
    stream = fs.open(path)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    metadata = json.loads(text.splitlines()[1])
    return {str(key): str(value) for key, value in metadata.get("conf", {}).items()}
