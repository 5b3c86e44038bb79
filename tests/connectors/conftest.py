"""Fixtures for the Kafka connector tests: real KRaft brokers on 127.0.0.1 and a local Spark session.

* ``kafka_broker``: one broker for the whole session (topics are unique per test).
* ``kafka_cluster3``: a fresh 3-node KRaft cluster (combined broker+controller, replication factor 3) per test, for
  broker-loss tests.
* ``spark``: ``local[2]`` with 2 shuffle partitions and :class:`connectors.kafka.KafkaSource` registered.

Broker processes die with the test process (PR_SET_PDEATHSIG) and are killed by finalizers/atexit.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest
from local_spark import local_spark_session

from tests.short_lived_jvms import C1_ONLY

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / ".cache" / "kafka" / "lib"

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def _load_cluster_module():
    spec = importlib.util.spec_from_file_location("keyedstate_kafka_cluster", ROOT / "scripts" / "kafka" / "cluster.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


cluster_mod = _load_cluster_module()
KafkaCluster = cluster_mod.KafkaCluster

HERE = Path(__file__).resolve().parent

#: Idempotent cleanups of this directory's session-scoped resources (broker, Spark session). They run as soon as
#: the last test of tests/connectors is done, so the rest of the suite does not run next to an idle broker.
_CLEANUPS: list[Callable[[], None]] = []


def _in_here(item) -> bool:
    return item is not None and HERE in Path(str(item.path)).resolve().parents


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if _in_here(item) and not _in_here(nextitem):
        while _CLEANUPS:
            _CLEANUPS.pop()()


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    done = []

    def run() -> None:
        if not done:
            done.append(True)
            fn()

    return run


@pytest.fixture(scope="session")
def kafka_lib() -> Path:
    if not any(LIB.glob("kafka_2.13-*.jar")):
        subprocess.run(["bash", str(ROOT / "scripts" / "kafka.sh"), "fetch"], check=True, timeout=600)
    return LIB


@pytest.fixture(scope="session")
def kafka_broker(kafka_lib: Path, tmp_path_factory) -> Iterator["KafkaCluster"]:
    cluster = KafkaCluster(kafka_lib, tmp_path_factory.mktemp("kafka1"), nodes=1)

    def cleanup() -> None:
        from kafka_helpers import close_clients

        close_clients()
        cluster.stop(kill=True)

    cleanup = _once(cleanup)
    _CLEANUPS.insert(0, cleanup)  # runs after the Spark session is stopped (cleanups pop from the end)
    try:
        cluster.start()
        yield cluster
    finally:
        cleanup()


@pytest.fixture()
def kafka_cluster3(kafka_lib: Path, tmp_path_factory) -> Iterator["KafkaCluster"]:
    cluster = KafkaCluster(kafka_lib, tmp_path_factory.mktemp("kafka3"), nodes=3, heap_mb=384, jvm_options=[C1_ONLY])
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop(kill=True)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    from connectors.kafka import KafkaSource

    existing = SparkSession.getActiveSession()  # built by tests/spark's fixture with the same settings: share it
    session = local_spark_session(tmp_path_factory.mktemp("warehouse"), "keyedstate-kafka-tests")
    session.dataSource.register(KafkaSource)

    def cleanup() -> None:
        try:
            for q in session.streams.active:
                q.stop()
        except Exception:
            pass
        if existing is None:
            session.stop()

    cleanup = _once(cleanup)
    _CLEANUPS.append(cleanup)
    yield session
    cleanup()


@pytest.fixture()
def empty_producer_pool() -> Iterator[None]:
    """No at-least-once sink producer kept from an earlier test, and none left for the next one."""
    from connectors.kafka import sink_producers

    sink_producers.close_all()
    yield
    sink_producers.close_all()
