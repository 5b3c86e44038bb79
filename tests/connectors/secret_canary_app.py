"""A Spark driver run as a subprocess by test_secret_canary.py: every place a secret can be given gets a canary, and
everything the run shows is written below OUT for the test to search.

usage: python secret_canary_app.py SPEC.json
SPEC holds: bootstrap, source and sink topics, out (a directory), checkpoint, events (the event log directory),
s3 (endpoint, bucket, access_key) and the canaries (uri, s3, source and sink properties, jaas). The S3 canary is the
server's secret: state_storage_options carry it to the executors, and the environment (AWS_SECRET_ACCESS_KEY)
carries it to read_keyed_state on the driver.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from pathlib import Path

from keyedstate import KeyedProcessFunction, Types, ValueStateDescriptor


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield value["key"], count


def _explained(frame) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame.explain(extended=True)
    return out.getvalue()


def _failure(action) -> str:
    try:
        action()
    except Exception as error:  # noqa: BLE001 - py4j/pyspark wrappers: the text is what is checked
        logging.getLogger("keyedstate.test").error("canary run: expected failure", exc_info=True)
        return f"{type(error).__name__}: {error}"
    raise AssertionError("expected a failure")


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out, canary, s3 = Path(spec["out"]), spec["canaries"], spec["s3"]
    from pyspark.sql import SparkSession

    from connectors.kafka import FORMAT_NAME, KafkaSource
    from keyedstate.spark import keyed_process, read_keyed_state

    spark = (SparkSession.builder.master("local[2]").appName("secret-canary")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", spec["events"])
             .config("spark.eventLog.compress", "false")  # searched as text
             .config("spark.local.dir", spec["spark_local"])
             .config("spark.keyedstate.test.marker", spec["marker"])  # shows the event log is read
             .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{spec['log4j']}")
             .getOrCreate())
    spark.dataSource.register(KafkaSource)

    source_options = {"kafka.bootstrap.servers": spec["bootstrap"], "subscribe": spec["source"],
                      "startingOffsets": "earliest", "commitOffsets": "false", "maxOffsetsPerTrigger": "40",
                      **{f"kafka.{name}": value for name, value in canary["source"].items()}}
    events = spark.readStream.format(FORMAT_NAME).options(**source_options).load()
    events = events.selectExpr("cast(key as string) as key", "timestamp").withWatermark("timestamp", "10 seconds")
    storage_options = {"endpoint_url": s3["endpoint"], "access_key": s3["access_key"], "secret_key": canary["s3"],
                       "region": "us-east-1"}
    refused = _failure(lambda: keyed_process(
        events, ["key"], CountPerKey(), "key STRING, count BIGINT", event_time_column="timestamp",
        state_backend="rocksdb", state_storage=f"s3://{s3['access_key']}:{canary['uri']}@{s3['bucket']}/state",
        state_storage_options={"endpoint_url": s3["endpoint"]}))
    counted = keyed_process(
        events, ["key"], CountPerKey(), "key STRING, count BIGINT", event_time_column="timestamp",
        state_backend="rocksdb", state_storage=f"s3://{s3['bucket']}/state", state_storage_options=storage_options,
        state_local_dir=spec["state_local"])
    output = counted.selectExpr("key", "concat(key, ':', cast(count as string)) as value")
    explained = _explained(output)
    sink_options = {"kafka.bootstrap.servers": spec["bootstrap"], "topic": spec["sink"],
                    "transactionalIdPrefix": f"secret-canary-{spec['sink']}",
                    **{f"kafka.{name}": value for name, value in canary["sink"].items()}}
    query = (output.writeStream.format(FORMAT_NAME).options(**sink_options)
             .option("checkpointLocation", spec["checkpoint"]).trigger(availableNow=True).start())
    query.awaitTermination(300)
    progress = json.dumps(query.recentProgress, default=str)
    with contextlib.redirect_stdout(io.StringIO()) as query_plan:
        query.explain(extended=True)
    # no secret_key: the environment's AWS_SECRET_ACCESS_KEY opens the storage the state's records name
    state = read_keyed_state(spark, spec["checkpoint"], state_storage_options={"endpoint_url": s3["endpoint"]})

    jaas = {**sink_options, "kafka.sasl.jaas.config": canary["jaas"]}
    rejected = _failure(lambda: output.writeStream.format(FORMAT_NAME).options(**jaas)
                        .option("checkpointLocation", spec["checkpoint"] + "-jaas").trigger(availableNow=True)
                        .start().awaitTermination(300))
    (out / "result.json").write_text(json.dumps({
        "refused": refused, "rejected": rejected, "explain": explained + query_plan.getvalue(),
        "progress": progress, "state_counts": {str(key): value["count"] for key, value in state.items()},
    }))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
