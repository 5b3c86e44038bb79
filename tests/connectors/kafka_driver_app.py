"""A Spark driver run as a subprocess by test_kafka_crash.py (so the test can SIGKILL it mid-batch).

usage: python kafka_driver_app.py BOOTSTRAP TOPIC GROUP CHECKPOINT OUTDIR MODE
MODE "slow": processingTime trigger, 100 records per batch, each batch sleeps 2 s after writing a started marker.
MODE "finish": Trigger.AvailableNow, 200 records per batch, no sleeping; exits 0 when everything available is processed.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kafka_helpers import BatchFileSink  # noqa: E402


def main() -> int:
    bootstrap, topic, group, checkpoint, outdir, mode = sys.argv[1:7]
    from pyspark.sql import SparkSession

    from connectors.kafka import FORMAT_NAME, KafkaSource, attach_commit_listener

    spark = (SparkSession.builder.master("local[2]").appName(f"kafka-driver-{mode}")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaSource)
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "group.id": group,
            "startingOffsets": "earliest", "maxOffsetsPerTrigger": "100" if mode == "slow" else "200"}
    sink = BatchFileSink(outdir)

    def each(df, batch_id):
        open(os.path.join(outdir, f"started-{batch_id}"), "w").close()
        if mode == "slow":
            time.sleep(2)
        sink(df, batch_id)

    writer = spark.readStream.format(FORMAT_NAME).options(**opts).load().writeStream \
        .option("checkpointLocation", checkpoint).foreachBatch(each)
    writer = writer.trigger(processingTime="100 milliseconds") if mode == "slow" else writer.trigger(availableNow=True)
    query = writer.start()
    listener = attach_commit_listener(spark, query, opts, checkpoint)
    query.awaitTermination()
    ok = listener.wait_committed(60)
    spark.stop()
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
