"""``KafkaStreamWriter``: the ``keyedstate-kafka`` streaming sink (``df.writeStream.format("keyedstate-kafka")``).

Where each method runs:

* ``KafkaSource.streamWriter`` (in :mod:`connectors.kafka.data_source`) builds this writer in a Python worker the driver
  JVM starts when the query starts; options and input columns are validated there, so mistakes fail ``start()``.
* ``KafkaStreamWriter.write``: on executors, once per Spark partition and micro-batch (and per attempt). It does
  all the Kafka work, including committing the transaction (see :mod:`connectors.kafka.sink_writer`).
* ``KafkaStreamWriter.commit``/``abort``: on the driver, in a fresh Python worker per batch, after every write task
  succeeded (``commit``) or one failed (``abort``), before Spark writes the batch to its commit log. They only log:
  the records are already committed (exactly-once) or acknowledged (at-least-once) by then.

``KafkaBatchWriter`` (``df.write.format("keyedstate-kafka").mode("append").save()``) is the same sink for a batch
DataFrame inside ``foreachBatch``: exactly-once then uses the streaming query's id and the ``foreachBatch`` batch id,
so a replayed ``foreachBatch`` call writes nothing twice. Outside a streaming query only ``at_least_once`` works.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterator, List, Optional

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from connectors.kafka.sink_options import KafkaSinkOptions
from connectors.kafka.sink_records import validate_input_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["KafkaStreamWriter", "KafkaBatchWriter", "summarize"]

log = logging.getLogger("keyedstate.connectors.kafka.sink")


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Writes each micro-batch to Kafka, exactly once or at least once (option ``deliveryGuarantee``)."""

    def __init__(self, opts: KafkaSinkOptions, schema: StructType) -> None:
        validate_input_schema(schema, opts.topic)
        self.opts = opts

    def write(self, iterator: Iterator["pa.RecordBatch"]) -> WriterCommitMessage:
        """On executors: write this task's rows (see :func:`connectors.kafka.sink_writer.write_task`)."""
        from connectors.kafka.sink_writer import current_task, write_task

        return write_task(self.opts, iterator, current_task())

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        """Every task of batch ``batchId`` succeeded; its records are already visible. Logs the batch's counts."""
        log.info("keyedstate-kafka sink batch %d: %s", batchId, summarize(messages))

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        """A task of batch ``batchId`` failed for good; the query stops. Transactions the failed attempts left open
        are aborted when the restarted query replays the batch (or after ``kafka.transaction.timeout.ms``)."""
        log.warning("keyedstate-kafka sink batch %d aborted: %s", batchId, summarize(messages))


class KafkaBatchWriter(DataSourceArrowWriter):
    """The sink for ``df.write`` inside ``foreachBatch`` (see the module docstring). Every ``save()`` of one
    ``foreachBatch`` call needs its own ``transactionalIdPrefix``: the progress marker is per prefix, query, batch
    and partition, so a second write with the same prefix would find the batch already written."""

    def __init__(self, opts: KafkaSinkOptions, schema: StructType) -> None:
        validate_input_schema(schema, opts.topic)
        self.opts = opts

    def write(self, iterator: Iterator["pa.RecordBatch"]) -> WriterCommitMessage:
        from connectors.kafka.sink_writer import current_task, write_task

        return write_task(self.opts, iterator, current_task(allow_batch=not self.opts.exactly_once))

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        log.info("keyedstate-kafka sink (batch write): %s", summarize(messages))

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        log.warning("keyedstate-kafka sink (batch write) aborted: %s", summarize(messages))


def summarize(messages: List[Optional[WriterCommitMessage]]) -> str:
    """``"1200 records committed by 3 tasks, 1 task found the batch already written"``-style summary."""
    done = [m for m in messages if m is not None]
    records = sum(getattr(m, "records", 0) for m in done)
    replayed = sum(1 for m in done if getattr(m, "already_written", False))
    text = f"{records} records written by {len(done)} of {len(messages)} tasks"
    if replayed:
        text += f"; {replayed} task(s) found the batch already in Kafka (replay) and wrote nothing"
    return text
