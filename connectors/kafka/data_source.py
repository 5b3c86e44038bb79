"""``KafkaSource``: the ``keyedstate-kafka`` data source Spark registers, one class for both directions as Spark's
Python data source API requires: it reads with :class:`connectors.kafka.source.KafkaStreamReader` and writes with
the sink's writers (:mod:`connectors.kafka.sink`).

Its methods run in Python workers the driver JVM starts: at ``load()`` for validation, then once for the query's
long-lived reader process, and once to build the executor read function (or, for writes, when the query starts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, MutableMapping, Optional

# The reader's module first: it checks the Spark version before pyspark.sql.datasource is imported.
from connectors.kafka.source import FORMAT_NAME, SCHEMA, KafkaStreamReader  # isort: skip
from pyspark.sql.datasource import DataSource  # isort: skip
from pyspark.sql.types import StructType  # isort: skip

from connectors.kafka.source_options import KafkaOptions, parse_options

if TYPE_CHECKING:
    from connectors.kafka.sink import KafkaBatchWriter, KafkaStreamWriter

__all__ = ["KafkaSource"]


class KafkaSource(DataSource):
    """Register with ``spark.dataSource.register(KafkaSource)``; read with ``spark.readStream.format(
    "keyedstate-kafka")`` and write with ``df.writeStream.format("keyedstate-kafka")`` (the sink:
    :class:`connectors.kafka.sink.KafkaStreamWriter`).

    Source options are validated in ``schema()``, which Spark calls at ``load()``, so a bad option fails ``load()``
    with a :class:`KafkaConfigurationError` (inside Spark's ``AnalysisException``: this runs in a Python worker
    Spark starts; :func:`keyedstate.errors.unwrapped` gives ours back); sink options are validated in
    ``streamWriter()``, when the query starts, and fail it before its first batch.
    """

    def __init__(self, options: MutableMapping[str, str]) -> None:  # runs in a Spark-started Python worker
        super().__init__(options)
        self._kafka_options: Optional[KafkaOptions] = None

    @property
    def kafka_options(self) -> KafkaOptions:
        """The source options (parsed on first use: the same class also serves writes, with other options)."""
        if self._kafka_options is None:
            self._kafka_options = parse_options(dict(self.options))
        return self._kafka_options

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        self.kafka_options  # noqa: B018 - validates the source options at load()
        return SCHEMA

    def streamReader(self, schema: StructType) -> "KafkaStreamReader":
        return KafkaStreamReader(self.kafka_options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> "KafkaStreamWriter":
        from connectors.kafka.sink import KafkaStreamWriter
        from connectors.kafka.sink_options import parse_sink_options

        return KafkaStreamWriter(parse_sink_options(dict(self.options)), schema)

    def writer(self, schema: StructType, overwrite: bool) -> "KafkaBatchWriter":
        """``df.write.format("keyedstate-kafka")``, meant for ``foreachBatch`` (see :class:`KafkaBatchWriter`)."""
        from connectors.kafka.sink import KafkaBatchWriter
        from connectors.kafka.sink_options import parse_sink_options

        return KafkaBatchWriter(parse_sink_options(dict(self.options)), schema)
