"""The one local Spark session configuration of the test suite (tests/spark and tests/connectors share a session:
``getOrCreate`` returns the first one built, so every suite must ask for the same settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def local_spark_session(warehouse_dir: Path, app_name: str = "keyedstate-tests") -> Any:
    """``local[2]`` with 2 shuffle partitions, no UI, a 1 GiB driver and a 30 s stop timeout for streaming queries."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.warehouse.dir", str(warehouse_dir))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30000")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.conf.set("spark.sql.shuffle.partitions", "2")  # a session built earlier may have been changed since
    return session
