"""`make demo`: the rich fraud detector on local Spark with the RocksDB state store, batch by batch.

Generates card transactions (with planted fraud) into a local directory, streams them through ``keyed_process``
one file per micro-batch, and prints per-batch progress from the query's progress (Spark's rows and duration, and
keyed_process's metrics: elements, late elements, keys with state, timers fired and pending, state size, bytes
written, time in the function; see docs/operations.md, "Monitoring") and the alerts.

With ``--kafka`` (`make demo-kafka`) the same transactions are produced into a Kafka topic on a running broker
(`make broker`) in waves and read with the ``keyedstate-kafka`` source, and the alerts are written to another topic
by the ``keyedstate-kafka`` sink, exactly once; every batch also prints how many alerts the sink committed and the
consumer group's committed offset, end offset and lag per partition (see ``examples/demo_kafka.py``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from examples.rich_fraud import ALERT_SCHEMA, RichFraudDetector

logger = logging.getLogger("keyedstate.demo")

INPUT_SCHEMA = "account_id STRING, amount DOUBLE, merchant STRING, ts TIMESTAMP"
START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def generate_batches(batches: int, per_batch: int, accounts: int, seed: int) -> list[list[dict[str, Any]]]:
    """Ordinary transactions plus planted fraud: small-then-large pairs and bursts."""
    rng = random.Random(seed)
    result = []
    for batch in range(batches):
        base_ms = batch * 20_000
        rows = []
        for _ in range(per_batch):
            rows.append((base_ms + rng.randrange(20_000), f"acct-{rng.randrange(accounts):05d}",
                         round(rng.uniform(1.0, 400.0), 2), f"m{rng.randrange(50)}"))
        for _ in range(max(1, per_batch // 500)):
            account, at = f"acct-{rng.randrange(accounts):05d}", base_ms + rng.randrange(10_000)
            rows.append((at, account, 0.42, "m-test"))
            rows.append((at + rng.randrange(1_000, 9_000), account, round(rng.uniform(600, 3000), 2), "m-luxury"))
        for _ in range(max(1, per_batch // 1000)):
            account, at = f"acct-{rng.randrange(accounts):05d}", base_ms + rng.randrange(10_000)
            rows.extend((at + i * 1_500, account, 25.0, "m-vending") for i in range(6))
        rows.sort()
        result.append([
            {"account_id": a, "amount": amount, "merchant": m,
             "ts": (START + dt.timedelta(milliseconds=at)).isoformat().replace("+00:00", "Z")}
            for at, a, amount, m in rows
        ])
    return result


def write_files(directory: Path, batches: list[list[dict[str, Any]]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for index, rows in enumerate(batches):
        (directory / f"transactions-{index:04d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))


def build_spark(shuffle_partitions: int):
    from pyspark.sql import SparkSession

    from keyedstate.spark import recommended_spark_conf

    # PySpark's worker concatenates the per-group output frames; pandas warns about all-null side-output columns.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    builder = (SparkSession.builder.master("local[2]").appName("keyedstate-demo").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in recommended_spark_conf(shuffle_partitions=shuffle_partitions).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class Progress:
    """Per-batch lines printed from the query's progress: keyed_process's metrics (``observedMetrics``, read with
    ``keyed_state_metrics``) and Spark's batch duration; the alerts are collected in foreachBatch."""

    def __init__(self) -> None:
        self.batches: dict[int, list[Any]] = {}
        self.alerts: list[tuple[str, str, float, int]] = []

    def on_batch(self, output, batch_id: int, write_alerts: Optional[Callable[[Any, int, int], None]] = None) -> None:
        """Collect the batch's alerts; ``write_alerts(alerts_frame, count, batch_id)`` also gets them while the
        output is cached (evaluating it again would run keyed_process twice, and count its metrics twice)."""
        output.persist()
        alerts = output.orderBy("event_time_ms").collect()
        if write_alerts is not None:
            write_alerts(output, len(alerts), batch_id)
        output.unpersist()
        self.alerts.extend((a.account_id, a.rule, a.amount, a.event_time_ms) for a in alerts)
        self.batches[batch_id] = alerts

    def report(self, progress: Any) -> bool:
        """Print the batch's lines; False when foreachBatch did not see the batch (nothing printed)."""
        from keyedstate.spark import keyed_state_metrics

        batch_id = progress["batchId"]
        alerts = self.batches.pop(batch_id, None)
        if alerts is None:
            return False
        metrics = keyed_state_metrics(progress).get("RichFraudDetector", {})
        value = lambda name: metrics.get(name) or 0  # noqa: E731  (a batch without calls reports no metrics)
        print(
            f"batch {batch_id:>3}: rows={progress['numInputRows']:>6} processed={value('numRecordsIn'):>6} "
            f"late={value('numLateRecords'):>3} active_keys={value('numKeysWithState'):>6} "
            f"timers_fired={value('numExpiredTimers'):>6} pending_timers={value('numPendingTimers'):>6} "
            f"state={value('stateSizeBytes') / 1024:8.1f} KiB written={value('stateBytesWritten') / 1024:7.1f} KiB "
            f"in_function={value('userFunctionTimeMs') / 1000:5.2f}s "
            f"duration={progress['durationMs'].get('triggerExecution', 0) / 1000:5.2f}s alerts={len(alerts)}",
            flush=True,
        )
        for alert in alerts[:3]:
            at = (START.replace(tzinfo=None) + dt.timedelta(milliseconds=alert.event_time_ms - int(START.timestamp() * 1000)))
            print(f"    ALERT {alert.rule:<16} account {alert.account_id} amount {alert.amount:9.2f} at {at:%H:%M:%S}")
        if len(alerts) > 3:
            print(f"    ... and {len(alerts) - 3} more alerts")
        return True

    def finish(self, started: float, batches: int, alerts_out: str | None) -> None:
        by_rule: dict[str, int] = {}
        for _, rule, _, _ in self.alerts:
            by_rule[rule] = by_rule.get(rule, 0) + 1
        rules = ", ".join(f"{rule}={n}" for rule, n in sorted(by_rule.items()))
        print(f"done in {time.monotonic() - started:.1f}s: {batches} batches, {len(self.alerts)} alerts"
              + (f" ({rules})" if rules else ""), flush=True)
        if alerts_out:
            # Sorted so runs that batch the same data differently write identical files.
            Path(alerts_out).write_text("".join(json.dumps(list(a)) + "\n" for a in sorted(self.alerts)))


def watch_query(query: Any, progress: "Progress", step: Callable[[int], None], interval_s: float,
                on_batch_reported: Optional[Callable[[], None]] = None) -> int:
    """Poll ``query`` until it stops: print each new batch's progress line (then call ``on_batch_reported`` when the
    batch ran keyed_process), and call ``step(last reported batch id)`` every ``interval_s`` while it runs (the
    caller stops the query from there). Returns the last reported batch id; re-raises the query's failure."""
    reported = -1
    while True:
        finished = not query.isActive
        for update in query.recentProgress:
            if update["batchId"] > reported:
                reported = update["batchId"]
                if progress.report(update) and on_batch_reported is not None:
                    on_batch_reported()
        if finished:
            break
        step(reported)
        time.sleep(interval_s)
    if query.exception():
        raise query.exception()
    return reported


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=12, help="micro-batches (file mode) or produced waves (Kafka)")
    parser.add_argument("--per-batch", type=int, default=4_000, help="ordinary transactions per batch")
    parser.add_argument("--accounts", type=int, default=5_000)
    parser.add_argument("--key-groups", type=int, default=32)
    parser.add_argument("--shuffle-partitions", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", help="where input and checkpoint go (default: a temporary directory)")
    parser.add_argument("--alerts-out", help="also write every alert as a JSON line [account, rule, amount, ms]")
    kafka = parser.add_argument_group("Kafka input (start a broker first: make broker)")
    kafka.add_argument("--kafka", action="store_true", help="produce the transactions into Kafka and read them back "
                       "with the keyedstate-kafka source")
    kafka.add_argument("--bootstrap-servers", default="127.0.0.1:9092", help="default: %(default)s")
    kafka.add_argument("--topic", default="keyedstate-demo-transactions", help="created if missing (default: "
                       "%(default)s)")
    kafka.add_argument("--partitions", type=int, default=4, help="partitions of a newly created topic")
    kafka.add_argument("--group-id", default="keyedstate-demo", help="consumer group the query commits to")
    kafka.add_argument("--alerts-topic", default="keyedstate-demo-alerts", help="where the keyedstate-kafka sink "
                       "writes the alerts, exactly once (created if missing; default: %(default)s)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if args.kafka:
        from examples.demo_kafka import run_kafka_demo

        return run_kafka_demo(args)

    from keyedstate.spark import keyed_process

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="keyedstate-demo-"))
    print(f"keyedstate demo: {args.batches} batches of ~{args.per_batch} transactions over {args.accounts} accounts "
          f"in {workdir}", flush=True)
    write_files(workdir / "input", generate_batches(args.batches, args.per_batch, args.accounts, args.seed))
    spark = build_spark(args.shuffle_partitions)
    transactions = (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(workdir / "input"))
                    .withWatermark("ts", "5 seconds"))
    alerts = keyed_process(transactions, ["account_id"], RichFraudDetector(), ALERT_SCHEMA, event_time_column="ts",
                           num_key_groups=args.key_groups)
    progress = Progress()
    query = (alerts.writeStream.foreachBatch(progress.on_batch)
             .option("checkpointLocation", str(workdir / "checkpoint")).start())
    started = time.monotonic()
    reported = -1

    def stop_when_all_batches_ran(last_reported: int) -> None:
        status = query.status
        if not status["isDataAvailable"] and not status["isTriggerActive"] and last_reported >= args.batches - 1:
            query.stop()

    try:
        reported = watch_query(query, progress, stop_when_all_batches_ran, interval_s=0.5)
    finally:
        if query.isActive:
            query.stop()
        spark.stop()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    progress.finish(started, reported + 1, args.alerts_out)
    return 0


if __name__ == "__main__":
    from keyedstate.errors import KeyedStateError

    try:
        raise SystemExit(main())
    except KeyedStateError as error:
        # Our errors carry the fix in their message; a traceback would bury it.
        print(f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
