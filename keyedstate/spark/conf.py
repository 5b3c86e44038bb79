"""The Spark configuration keyedstate recommends for stateful queries."""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["recommended_spark_conf", "apply_recommended_conf"]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def recommended_spark_conf(*, shuffle_partitions: Optional[int] = None, rocksdb: bool = True) -> dict[str, str]:
    """Settings for ``SparkSession.builder.config(...)`` (or ``spark.conf.set``, before the query first starts).

    * RocksDB state store with changelog checkpointing: each micro-batch persists only the changed state rows.
    * A Python worker runs for every shuffle partition in every batch, so keep ``spark.sql.shuffle.partitions``
      small: about the number of cores where latency matters (a second wave of tasks adds its fixed cost to every
      batch, docs/operations.md "Tuning"), up to twice the cores for large batches. It is fixed once a streaming
      checkpoint exists.
    * Arrow batches large enough that a key group's elements arrive in few DataFrames.
    """
    conf = {
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
    }
    if rocksdb:
        conf["spark.sql.streaming.stateStore.providerClass"] = ROCKSDB_PROVIDER
        conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] = "true"
    if shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    return conf


def apply_recommended_conf(builder_or_session: Any, **options: Any) -> Any:
    """Apply :func:`recommended_spark_conf` to a ``SparkSession.Builder`` (returns it) or a session's runtime conf."""
    settings = recommended_spark_conf(**options)
    if hasattr(builder_or_session, "config") and not hasattr(builder_or_session, "sparkContext"):
        for key, value in settings.items():
            builder_or_session = builder_or_session.config(key, value)
        return builder_or_session
    for key, value in settings.items():
        builder_or_session.conf.set(key, value)
    return builder_or_session
