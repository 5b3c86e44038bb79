"""``KafkaStreamReader``: the reading side of the ``keyedstate-kafka`` data source
(:class:`connectors.kafka.data_source.KafkaSource`), a PySpark Python streaming reader for Kafka that commits
consumer-group offsets only after Spark has committed the micro-batch covering them.

Where each method runs:

* ``KafkaStreamReader.initialOffset``/``latestOffset``/``partitions``/``commit``/``stop``: in ONE long-lived Python
  process started by the driver JVM (not the user's process).
* ``KafkaStreamReader.read``: on executors, one call per Kafka partition range (see :mod:`connectors.kafka.fetch`).

Checkpoint mapping: ``partitions(start, end)`` is called when a micro-batch is planned; the reader then snapshots
``end`` (next offsets to read) as a pending checkpoint. ``commit(end)`` is Spark saying that the batch ending at
``end`` is in the commit log: the committer commits that checkpoint's offsets and drops older pending ones.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

from keyedstate.spark_compat import PYTHON_STREAMING_READ_LIMITS, require_spark

# Before pyspark.sql.datasource is imported: on older Spark that import fails without saying what is needed.
require_spark(PYTHON_STREAMING_READ_LIMITS, "The keyedstate-kafka source (a Python streaming data source with read "
              "limits)", "Spark's built-in Kafka source (format('kafka')) works on older Spark but commits no "
              "consumer-group offsets")

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from connectors.kafka.committer import CheckpointOffsetCommitter
from connectors.kafka.errors import KafkaDataLossError
from connectors.kafka.offsets import TP, fmt_offsets, from_offset_json, to_offset_json
from connectors.kafka.partition import KafkaInputPartition
from connectors.kafka.source_options import KafkaOptions

if TYPE_CHECKING:
    import pyarrow as pa

    from connectors.kafka.client import KafkaClient

# Spark unpickles this module in several short-lived Python processes per query (option validation, read planning,
# the stream-reader process, executor workers), and each start-up is part of every query's latency. So the
# confluent-kafka clients (driver side) and pyarrow/the fetch loop (executor side) are imported where they are used.

__all__ = ["FORMAT_NAME", "SCHEMA", "KafkaStreamReader"]

log = logging.getLogger("keyedstate.connectors.kafka.source")

#: The name to use with ``spark.readStream.format(...)`` after ``spark.dataSource.register(KafkaSource)``.
FORMAT_NAME = "keyedstate-kafka"

#: Identical to Spark's Kafka source with ``includeHeaders=true``.
SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "timestampType int, headers array<struct<key: string, value: binary>>")


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The micro-batch reader. Constructing it is cheap (no connections); clients are opened on first use."""

    def __init__(self, opts: KafkaOptions) -> None:
        self.opts = opts
        self._client: Optional[KafkaClient] = None
        self._committer: Optional[CheckpointOffsetCommitter] = None
        self._seq = 0
        self._checkpoint_of_end: dict[str, int] = {}
        self._target: Optional[dict[TP, int]] = None  # Trigger.AvailableNow end
        self._latest: Optional[dict[TP, int]] = None
        self._initial: Optional[dict] = None  # initialOffset's answer

    def __getstate__(self) -> dict:  # shipped to executors for read(); leave driver-only clients behind
        return {"opts": self.opts}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["opts"])

    @property
    def client(self) -> KafkaClient:
        if self._client is None:
            from connectors.kafka.client import KafkaClient

            self._client = KafkaClient(self.opts)
        return self._client

    @property
    def committer(self) -> Optional[CheckpointOffsetCommitter]:
        if self._committer is None and self.opts.commit_offsets:
            assert self.opts.group_id is not None
            self._committer = CheckpointOffsetCommitter(self.client.async_commit_function(self.opts.group_id),
                                                        name=f"group {self.opts.group_id!r}")
        return self._committer

    # -- DataSourceStreamReader (driver's data-source process) ------------------------------------------------
    def initialOffset(self) -> dict:
        """Runs for a NEW query (never on restart from a checkpoint): resolve the startup mode.

        Spark may ask more than once while starting the query; every answer is the first one, so ``latest`` or a
        timestamp cannot resolve to different offsets in between (and the broker is asked once).
        """
        if self._initial is None:
            from connectors.kafka.startup import resolve_starting_offsets

            offsets = resolve_starting_offsets(self.opts, self.client)
            log.info("starting offsets for %s: %s", self.opts.topics_description, fmt_offsets(offsets))
            self._initial = to_offset_json(offsets)
        return {topic: dict(partitions) for topic, partitions in self._initial.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: fix the end offsets now; later records belong to the next run."""
        self._target = self._latest_offsets()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Plan the end of the next batch: discover partitions, read end offsets, apply ``maxOffsetsPerTrigger``."""
        begin = from_offset_json(start)
        latest = self._target if self._target is not None else self._latest_offsets()
        self._latest = latest
        current = dict(latest)
        for tp in sorted(set(begin) - set(latest)):
            if self._target is not None:
                current[tp] = begin[tp]  # AvailableNow: partitions we know stay where they are
                continue
            self._data_loss(f"{tp[0]}[{tp[1]}] was deleted or shrunk (topic deleted?) while the query was reading it")
        new = sorted(set(current) - set(begin))
        if new:
            log.info("new partitions discovered, reading them from earliest: %s",
                     ", ".join(f"{t}[{p}]" for t, p in new))
        earliest_new = self.client.list_offsets(new, "earliest") if new and isinstance(limit, ReadMaxRows) else {}
        sizes: dict[TP, int] = {}
        for tp, hi in current.items():
            lo = begin.get(tp, earliest_new.get(tp, 0))
            if hi < lo:
                self._data_loss(f"{tp[0]}[{tp[1]}]: end offset {hi} is below the already-read offset {lo} "
                                f"(topic recreated or truncated)")
            sizes[tp] = max(0, hi - lo)
        end = dict(current)
        if isinstance(limit, ReadMaxRows):
            total = sum(sizes.values())
            if total > limit.max_rows:
                for tp, size in sizes.items():
                    lo = begin.get(tp, earliest_new.get(tp, 0))
                    share = limit.max_rows * size / total
                    end[tp] = lo + (int(share) if share >= 1 else (1 if size else 0))
        return to_offset_json(end)

    def reportLatestOffset(self) -> Optional[dict]:
        return to_offset_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The batch ``start -> end`` is being executed: snapshot ``end`` and split it into Spark tasks."""
        begin = from_offset_json(start)
        stop = from_offset_json(end)
        if self.committer is not None and stop:
            key = json.dumps(to_offset_json(stop), sort_keys=True)
            if key not in self._checkpoint_of_end:
                self._seq += 1
                self._checkpoint_of_end[key] = self._seq
                self.committer.snapshot_offsets(self._seq, stop)
                while len(self._checkpoint_of_end) > CheckpointOffsetCommitter.MAX_PENDING_CHECKPOINTS:
                    self._checkpoint_of_end.pop(next(iter(self._checkpoint_of_end)))
        ranges: list[tuple[str, int, int, int]] = []
        for (t, p), hi in sorted(stop.items()):
            lo = begin.get((t, p), -2)  # partitions new in this batch start at earliest
            if lo >= 0 and hi <= lo:
                continue
            ranges.append((t, p, lo, hi))
        want = self.opts.min_partitions or 0
        if want <= len(ranges) or not ranges:
            return [KafkaInputPartition(*r) for r in ranges]
        known = [r for r in ranges if r[2] >= 0]
        total = sum(r[3] - r[2] for r in known) or 1
        out: list[InputPartition] = []
        for t, p, lo, hi in ranges:
            if lo < 0:
                out.append(KafkaInputPartition(t, p, lo, hi))
                continue
            pieces = max(1, min(hi - lo, round(want * (hi - lo) / total)))
            step = (hi - lo) / pieces
            bounds = [lo + round(i * step) for i in range(pieces)] + [hi]
            out.extend(KafkaInputPartition(t, p, a, b) for a, b in zip(bounds, bounds[1:]) if b > a)
        return out

    def read(self, partition: InputPartition) -> Iterator["pa.RecordBatch"]:
        """On executors: the records of one partition range as Arrow batches."""
        from connectors.kafka.fetch import read_range

        assert isinstance(partition, KafkaInputPartition)
        return read_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Spark has committed the batch ending at ``end``: complete that checkpoint (commit asynchronously)."""
        committer = self.committer
        if committer is None:
            return
        offsets = from_offset_json(end)
        key = json.dumps(to_offset_json(offsets), sort_keys=True)
        cid = self._checkpoint_of_end.pop(key, None)
        if cid is None:
            # e.g. the first commit after a restart: the batch was planned by an earlier process. Spark only calls
            # commit() for batches in its commit log, so this end is safe to commit.
            self._seq += 1
            cid = self._seq
            committer.snapshot_offsets(cid, offsets)
        committer.notify_checkpoint_complete(cid)

    def stop(self) -> None:
        """Not reliably called by Spark; gives an in-flight commit a moment to finish."""
        if self._committer is not None:
            self._committer.wait_idle(timeout=self.opts.request_timeout_ms / 1000)

    def _latest_offsets(self) -> dict[TP, int]:
        parts = self.client.topic_partitions(fail_on_unknown=False)  # vanished partitions: see latestOffset
        tps = [(t, p) for t, ps in parts.items() for p in ps]
        return self.client.list_offsets(tps, "latest")

    def _data_loss(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise KafkaDataLossError(f"{message} (brokers {self.opts.bootstrap_servers}); set failOnDataLoss=false to "
                                     "skip lost data and keep running")
        log.warning("%s; failOnDataLoss=false, continuing", message)
