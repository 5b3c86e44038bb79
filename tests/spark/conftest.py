"""A local Spark session shared by the Spark tests (Spark's start-up is the expensive part)."""

from __future__ import annotations

import pytest
from local_spark import local_spark_session

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
DEFAULT_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    yield local_spark_session(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(params=[ROCKSDB_PROVIDER, DEFAULT_PROVIDER], ids=["rocksdb-store", "default-store"])
def state_store_provider(request, spark):
    previous = spark.conf.get("spark.sql.streaming.stateStore.providerClass", None)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", request.param)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    yield request.param
    if previous is None:
        spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
    else:
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", previous)


@pytest.fixture(autouse=True, scope="module")
def functions_of_this_module_are_pickled_by_value(request):
    """Test modules are not importable by Spark's Python workers; ship their classes and functions by value."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)


@pytest.fixture(scope="session")
def heap_run(spark, tmp_path_factory):
    """Output and read-back state of tests/spark/rocksdb_runs.py's workload in row mode, BATCHES batches: what every
    RocksDB-mode run of it must equal."""
    from keyedstate.spark import read_keyed_state
    from tests.spark.rocksdb_runs import BATCHES, output_of, run_batches

    base = tmp_path_factory.mktemp("heap-run")
    run_batches(spark, base, range(BATCHES), state_backend="heap")
    return output_of(spark, base), read_keyed_state(spark, str(base / "checkpoint"))


@pytest.fixture(params=["heap", "rocksdb"])
def state_backend(request, tmp_path):
    """keyed_process's state-backend arguments: row mode, or RocksDB mode with its storage and local databases
    below the test's tmp_path."""
    if request.param == "heap":
        return {"state_backend": "heap"}
    return {"state_backend": "rocksdb", "state_storage": str(tmp_path / "state-storage"),
            "state_local_dir": str(tmp_path / "local-rocksdb")}
