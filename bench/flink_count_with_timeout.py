"""PyFlink side of the count-with-timeout benchmark (run by bench/test_spark_bench.py in its own venv):

    .cache/flink-venv/bin/python bench/flink_count_with_timeout.py EVENTS.csv KEYS [PARALLELISM]

Reads the same events as the Spark variants (``key,ts_ms`` text lines written by bench/spark_workloads.py) with a
bounded FileSource, assigns event time (watermark lagging two hours: no timer fires mid-input), keys by ``key`` and runs
the same KeyedProcessFunction (ValueState (count, last), one event-time timer per key, 60 s after the key's last event)
in local mode with parallelism 2 (as local[2]). At the end of the bounded input Flink emits the final watermark, so
every key's timer fires and emits ``(key, count)``: PyFlink does that extra work (one on_timer per key and the
output), which the one-batch Spark runs do not. Prints one JSON line: job seconds (execute to last result),
process seconds, number of outputs.
"""

from __future__ import annotations

import json
import sys
import time

PROCESS_START = time.perf_counter()

from pyflink.common import Duration, Types, WatermarkStrategy  # noqa: E402
from pyflink.common.watermark_strategy import TimestampAssigner  # noqa: E402
from pyflink.datastream import StreamExecutionEnvironment  # noqa: E402
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat  # noqa: E402
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext  # noqa: E402
from pyflink.datastream.state import ValueStateDescriptor  # noqa: E402

TIMEOUT_MS = 60_000
# The events span one hour. A watermark lagging two hours never passes a timer while the input is read, as in the
# one-micro-batch Spark runs (whose watermark is fixed for the batch); the final watermark then fires every key's
# timer once.
WATERMARK_LAG_MS = 2 * 3_600_000


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


class CountWithTimeout(KeyedProcessFunction):
    """Identical logic to bench/spark_workloads.py's CountWithTimeout."""

    def open(self, runtime_context: RuntimeContext):
        self.state = runtime_context.get_state(
            ValueStateDescriptor("count", Types.TUPLE([Types.LONG(), Types.LONG()])))

    def process_element(self, value, ctx):
        current = self.state.value()
        timers = ctx.timer_service()
        timestamp = ctx.timestamp()
        if current is None:
            current = (0, timestamp)
        else:
            timers.delete_event_time_timer(current[1] + TIMEOUT_MS)
        last = max(current[1], timestamp)
        self.state.update((current[0] + 1, last))
        timers.register_event_time_timer(last + TIMEOUT_MS)

    def on_timer(self, timestamp, ctx):
        current = self.state.value()
        if current is not None and timestamp == current[1] + TIMEOUT_MS:
            self.state.clear()
            yield ctx.get_current_key(), current[0]


def parse(line: str):
    key, ts = line.split(",")
    return key, int(ts)


def main() -> None:
    path, keys = sys.argv[1], int(sys.argv[2])
    parallelism = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_python_executable(sys.executable)  # the workers must use this venv's python
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), path).build()
    events = (env.from_source(source, WatermarkStrategy.no_watermarks(), "events")
              .map(parse, output_type=Types.TUPLE([Types.STRING(), Types.LONG()]))
              .assign_timestamps_and_watermarks(
                  WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(WATERMARK_LAG_MS))
                  .with_timestamp_assigner(EventTime())))
    counts = (events.key_by(lambda e: e[0], key_type=Types.STRING())
              .process(CountWithTimeout(), output_type=Types.TUPLE([Types.STRING(), Types.LONG()])))
    job_start = time.perf_counter()
    outputs = 0
    total = 0
    with counts.execute_and_collect("count-with-timeout") as results:
        for _, count in results:
            outputs += 1
            total += count
    job_s = time.perf_counter() - job_start
    print(json.dumps({"job_s": job_s, "process_s": time.perf_counter() - PROCESS_START, "outputs": outputs,
                      "events_counted": total, "keys": keys, "parallelism": parallelism}))


if __name__ == "__main__":
    main()
