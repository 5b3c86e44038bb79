"""`python -m examples.demo --kafka` against a real broker: alerts, per-batch offsets and lag, and a missing broker."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connectors.kafka import BrokersUnavailableError
from examples.demo import generate_batches
from examples.demo_kafka import check_broker
from examples.rich_fraud import RichFraudDetector
from kafka_helpers import committed_offsets, read_committed, unique
from keyedstate.testing import KeyedProcessHarness
from tests.short_lived_jvms import short_lived_jvm_environment

ROOT = Path(__file__).resolve().parents[2]
BATCHES, PER_BATCH, ACCOUNTS, SEED = 3, 600, 250, 11
ALERTS_LINE = re.compile(r"^\s+kafka (?P<topic>\S+): (?P<n>\d+) alerts committed by the keyedstate-kafka sink "
                         r"\(exactly once\), (?P<total>\d+) in total$")
OFFSETS_LINE = re.compile(r"^\s+kafka (?P<topic>\S+)\[(?P<p>\d+)\] group (?P<group>\S+): "
                          r"committed=\s*(?P<committed>-|\d+) end=\s*(?P<end>\d+) lag=\s*(?P<lag>-?\d+)$")
WATERMARK_DELAY_MS = 5_000


def oracle_alerts(waves) -> list[list]:
    """The detector in the test harness, one wave per micro-batch: Spark's watermark for a batch is the previous
    batches' maximum event time minus the delay, and elements of a key are processed in event-time order."""
    harness = KeyedProcessHarness(RichFraudDetector(), key_selector=lambda t: t["account_id"]).open()
    try:
        max_ms = None
        for wave in waves:
            if max_ms is not None:
                harness.process_watermark(max_ms - WATERMARK_DELAY_MS)
            timed = [(_ms(row["ts"]), row) for row in wave]
            for at, row in sorted(timed, key=lambda item: (item[1]["account_id"], item[0])):
                harness.process_element(row, timestamp=at)
            max_ms = max([max_ms or 0] + [at for at, _ in timed])
        return sorted(list(alert) for alert in harness.extract_output())
    finally:
        harness.close()


def _ms(text: str) -> int:
    return round(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def run_demo(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = short_lived_jvm_environment(PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "examples.demo", "--kafka", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("probe"), "enable.auto.commit": "false"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_demo_in_kafka_mode_alerts_like_the_oracle_and_ends_with_zero_lag(kafka_broker, tmp_path):
    bootstrap, topic, group = kafka_broker.bootstrap, unique("demo-transactions"), unique("demo-group")
    alerts_topic = unique("demo-alerts")
    alerts_file = tmp_path / "alerts.jsonl"
    result = run_demo("--bootstrap-servers", bootstrap, "--topic", topic, "--group-id", group,
                      "--alerts-topic", alerts_topic,
                      "--batches", str(BATCHES), "--per-batch", str(PER_BATCH), "--accounts", str(ACCOUNTS),
                      "--seed", str(SEED), "--key-groups", "4", "--workdir", str(tmp_path / "work"),
                      "--alerts-out", str(alerts_file), timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("done in"), lines[-5:]

    # Per batch: the progress line, then one offsets line per partition of the (new, 4-partition) topic.
    blocks: list[tuple[str, list[re.Match]]] = []
    for line in lines:
        if line.startswith("batch "):
            blocks.append((line, []))
        elif (match := OFFSETS_LINE.match(line)) and blocks:
            blocks[-1][1].append(match)
    assert len(blocks) >= BATCHES
    for progress, offsets in blocks:
        assert all(f"{name}=" in progress for name in ("rows", "active_keys", "timers_fired", "state", "duration"))
        assert sorted(int(m["p"]) for m in offsets) == [0, 1, 2, 3], progress
        assert all(m["topic"] == topic and m["group"] == group for m in offsets)

    # Every wave is one Kafka transaction and lands in one micro-batch, as every file does in file mode.
    waves = generate_batches(BATCHES, PER_BATCH, ACCOUNTS, SEED)
    data_rows = [int(re.search(r"rows=\s*(\d+)", p)[1]) for p, _ in blocks]
    assert [n for n in data_rows if n] == [len(w) for w in waves]

    alerts = [json.loads(line) for line in alerts_file.read_text().splitlines()]
    assert alerts == oracle_alerts(waves)
    assert {rule for _, rule, _, _ in alerts} == {"small-then-large", "velocity"}

    # The sink wrote exactly these alerts to the alerts topic, once each, and every batch reported all of its own.
    in_kafka = [json.loads(value) for _, _, value, _ in read_committed(bootstrap, alerts_topic)]
    assert sorted([a["account_id"], a["rule"], a["amount"], a["event_time_ms"]] for a in in_kafka) == alerts
    counted = [ALERTS_LINE.match(line) for line in lines if line.startswith(f"    kafka {alerts_topic}:")]
    assert all(counted) and len(counted) >= BATCHES
    assert sum(int(m["n"]) for m in counted) == int(counted[-1]["total"]) == len(alerts)

    # After the last batch the group has committed everything: what the demo printed is the topic's real end and
    # the group's real committed offsets, read independently here.
    last = {int(m["p"]): m for m in blocks[-1][1]}
    ends = end_offsets(bootstrap, topic, 4)
    assert {p: int(m["end"]) for p, m in last.items()} == ends
    assert {p: int(m["committed"]) for p, m in last.items()} == ends
    assert all(int(m["lag"]) == 0 for m in last.values())
    assert committed_offsets(bootstrap, group, topic, 4) == ends
    assert sum(ends.values()) == sum(len(w) for w in waves) + BATCHES * 4  # plus one commit marker per partition


@pytest.mark.slow
def test_an_unreachable_broker_fails_fast_with_a_hint_to_start_one():
    from keyedstate_kafka_cluster import free_port  # loaded by conftest

    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(BrokersUnavailableError, match=re.escape(address) + ".*make broker"):
        check_broker(address, timeout_s=2)
    assert time.monotonic() - started < 10

    started = time.monotonic()
    result = run_demo("--bootstrap-servers", address, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(f"BrokersUnavailableError: no Kafka broker answered at "
                                                             f"{address}")
    assert "make broker" in result.stderr and "Traceback" not in result.stderr
    assert elapsed < 30, f"took {elapsed:.1f}s"
