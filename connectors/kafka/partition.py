"""The unit of work of one Spark read task, in a module of its own.

The driver's stream-reader process builds these in ``partitions()`` and executors unpickle them; neither should have
to import the executor-side fetch code (pyarrow.compute, the consumer loop) just to name the class.
"""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

__all__ = ["KafkaInputPartition"]


class KafkaInputPartition(InputPartition):
    """One Spark task: records ``[start, end)`` of ``topic``/``partition`` (picklable, built on the driver)."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.value = (topic, partition, start, end)

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}[{self.partition}] {self.start}..{self.end})"
