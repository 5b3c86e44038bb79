"""What needs which Spark: features newer than the installed PySpark fail early, naming the version and the fix."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from keyedstate import spark_compat as compat
from keyedstate.errors import UnsupportedSparkVersionError


def test_a_feature_of_a_newer_spark_names_the_version_needed_and_the_installed_one(monkeypatch):
    monkeypatch.setattr(compat, "PYSPARK_VERSION", (3, 5))
    with pytest.raises(UnsupportedSparkVersionError, match=r"needs Spark 4\.0 or newer, and this is PySpark .*pip "
                                                           r"install 'pyspark>=4\.0'.*docs/operations\.md"):
        compat.require_spark(compat.STATE_DATA_SOURCE, "Something")
    compat.require_spark((3, 5), "Something")  # the installed version is enough


@pytest.mark.parametrize("version", [(3, 5), (4, 0), (4, 1)])
def test_the_kafka_source_fails_at_import_on_spark_before_4_2_naming_what_it_needs(monkeypatch, version):
    monkeypatch.setattr(compat, "PYSPARK_VERSION", version)
    for name in [n for n in sys.modules if n.startswith("connectors.kafka")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(UnsupportedSparkVersionError, match=r"keyedstate-kafka source .* needs Spark 4\.2 or newer"):
        from connectors.kafka import KafkaSource  # noqa: F401  (spark.dataSource.register(KafkaSource) needs it)


def test_the_kafka_source_imports_on_spark_4_2_and_newer():
    if compat.PYSPARK_VERSION < compat.PYTHON_STREAMING_READ_LIMITS:
        with pytest.raises(UnsupportedSparkVersionError):
            importlib.import_module("connectors.kafka.data_source")
    else:
        assert importlib.import_module("connectors.kafka.data_source").KafkaSource.name() == "keyedstate-kafka"


def test_pyspark_3_5_with_a_pyarrow_it_breaks_with_is_refused_naming_the_extra_that_pins_a_working_set(monkeypatch):
    import pyarrow

    monkeypatch.setattr(compat, "PYSPARK_VERSION", (3, 5))
    monkeypatch.setattr(pyarrow, "__version__", "26.0.1")
    with pytest.raises(UnsupportedSparkVersionError, match=r"pyarrow 26\.0\.1.*pyarrow<26.*keyedstate\[spark35\]"):
        compat.check_arrow()
    monkeypatch.setattr(pyarrow, "__version__", "24.0.0")
    compat.check_arrow()


def test_the_kafka_data_source_loads_neither_the_operator_nor_timers_nor_state_storage():
    """Spark unpickles the data source in several short-lived Python processes per query; the version gate it needs
    must not pull in keyedstate's operator (and with it timers and rocksdict)."""
    probe = ("import sys\nfrom keyedstate.errors import UnsupportedSparkVersionError\n"  # refused before Spark 4.2
             "try:\n    import connectors.kafka.data_source\nexcept UnsupportedSparkVersionError:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('timers', 'rocksdict') "
             "or m.startswith(('keyedstate.operator', 'keyedstate.spark.', 'keyedstate.state', "
             "'keyedstate.checkpoint.storage'))))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
