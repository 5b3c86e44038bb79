"""v3 of the lifecycle test (tests/connectors/test_job_lifecycle.py), run as a script on another PySpark (the Spark 4.0
compatibility virtualenv): Spark's own Kafka source from the savepoint's source offsets, keyed_process started from
the savepoint, Spark's own Kafka sink; Trigger.AvailableNow, then the final keyed state as JSON.

    python lifecycle_job.py CONFIG.json

CONFIG: bootstrap, in_topic, out_topic, savepoint (path), starting_offsets (Spark's offset JSON), checkpoint,
num_key_groups, state_local_dir, state_json (where the Spark version and the final state go), jars (the
spark-sql-kafka jars).
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    config = json.loads(open(sys.argv[1]).read())
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from pyspark.sql import SparkSession

    from keyedstate.spark import keyed_process, read_keyed_state
    from tests.connectors.lifecycle_functions import OUTPUT, ScoreV2

    spark = (SparkSession.builder.master("local[2]").appName("keyedstate-lifecycle-v3")
             .config("spark.jars", ",".join(config["jars"]))
             .config("spark.sql.shuffle.partitions", "3")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    events = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", config["bootstrap"]).option("subscribe", config["in_topic"])
              .option("startingOffsets", json.dumps(config["starting_offsets"]))
              .option("kafka.isolation.level", "read_committed").load()
              .selectExpr("cast(key as string) as user", "cast(cast(value as string) as bigint) as amount",
                          "timestamp as ts")
              .withWatermark("ts", "0 seconds"))
    scored = keyed_process(events, ["user"], ScoreV2(), OUTPUT, event_time_column="ts",
                           num_key_groups=config["num_key_groups"], state_backend="rocksdb",
                           state_local_dir=config["state_local_dir"], initial_state=config["savepoint"])
    query = (scored.selectExpr("user as key", "concat_ws(':', user, cast(count as string), cast(total as string)) "
                               "as value")
             .writeStream.format("kafka").option("kafka.bootstrap.servers", config["bootstrap"])
             .option("topic", config["out_topic"]).option("checkpointLocation", config["checkpoint"])
             .trigger(availableNow=True).start())
    query.awaitTermination()
    state = read_keyed_state(spark, config["checkpoint"])
    with open(config["state_json"], "w") as out:
        json.dump({"spark_version": spark.version, "state": plain(state)}, out, sort_keys=True)
    spark.stop()
    return 0


def plain(value):
    """JSON-able: tuples and Rows as lists, dict keys as strings."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
