"""Secrets are never written in clear text: a real query (Kafka source -> keyed_process in RocksDB mode with its
state on S3 -> exactly-once Kafka sink) runs in a driver of its own with a canary secret in every place one can be
given, then every file the run wrote is searched for the canaries.

Where secrets go in: the S3 secret in state_storage_options (executors) and in the environment
(AWS_SECRET_ACCESS_KEY: read_keyed_state on the driver), a storage URI with user:password@ (refused), kafka.*
security properties of the source and the sink that a plaintext broker ignores, and a JAAS line the sink refuses.
Where it is searched: the driver's stdout and stderr (Spark's log4j at INFO, executor and Python worker stderr in
local mode), every Python process's logging (the driver, Spark's Python workers and data-source workers: keyedstate.*
at DEBUG, the rest at INFO), the Spark event log, the checkpoints, the state storage (S3Proxy's files), the local
state directory, Spark's local directory, the error texts, ``explain()`` output and the query's progress JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kafka_helpers import create_topic, produce, read_committed
from tests.short_lived_jvms import short_lived_jvm_environment

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.driver_process]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
APP = HERE / "secret_canary_app.py"
RECORDS = 100

# Every Python process of the run (Spark's workers import sitecustomize from PYTHONPATH too) logs to a file.
_SITECUSTOMIZE = '''
import logging, os
directory = os.environ.get("CANARY_LOG_DIR")
if directory:
    handler = logging.FileHandler(os.path.join(directory, f"python-{os.getpid()}.log"))
    handler.setFormatter(logging.Formatter("%(process)d %(name)s %(levelname)s %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger("keyedstate").setLevel(logging.DEBUG)
'''


# Spark's log4j at INFO, to a file: a PySpark driver counts as a shell, and Spark filters what its console appenders
# print down to WARN
_LOG4J = """rootLogger.level = info
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def _canary(place: str) -> str:
    return f"canary-{place}-{uuid.uuid4().hex[:12]}"


def _hits(roots: list[Path], canaries: dict[str, str]) -> list[str]:
    found = []
    for root in roots:
        for path in ([root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())):
            data = path.read_bytes()
            found += [f"{place} in {path}" for place, canary in canaries.items() if canary.encode() in data]
    return found


def _text(roots: list[Path]) -> str:
    return "".join(p.read_text(errors="replace") for root in roots for p in sorted(root.rglob("*")) if p.is_file())


def test_no_canary_secret_is_written_anywhere(kafka_broker, tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    from s3proxy_server import ACCESS_KEY, S3ProxyServer, s3proxy_jar

    canaries = {place: _canary(place) for place in (
        "s3", "uri", "source-ssl-key", "source-sasl", "source-keystore", "sink-ssl-key", "sink-sasl", "jaas")}
    server = S3ProxyServer(s3proxy_jar(), tmp_path / "s3proxy" / "data", secret_key=canaries["s3"])
    server.start()
    try:
        bucket = server.new_bucket()
        bs = kafka_broker.bootstrap
        source, sink = create_topic(bs, 2), create_topic(bs, 2)
        produce(bs, source, RECORDS, 2)
        out, logs, site = tmp_path / "out", tmp_path / "logs", tmp_path / "site"
        for directory in (out, logs, site, tmp_path / "events", tmp_path / "spark-local"):
            directory.mkdir()
        (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        spark_log = tmp_path / "spark-driver.log"
        (tmp_path / "log4j2.properties").write_text(_LOG4J.format(path=spark_log))
        marker = _canary("marker")
        spec = {
            "bootstrap": bs, "source": source, "sink": sink, "out": str(out), "marker": marker,
            "log4j": str(tmp_path / "log4j2.properties"),
            "checkpoint": str(tmp_path / "checkpoint"), "events": str(tmp_path / "events"),
            "spark_local": str(tmp_path / "spark-local"), "state_local": str(tmp_path / "state-local"),
            "s3": {"endpoint": server.endpoint_url, "bucket": bucket, "access_key": ACCESS_KEY},
            "canaries": {
                "s3": canaries["s3"], "uri": canaries["uri"],
                "source": {"ssl.key.password": canaries["source-ssl-key"], "sasl.password": canaries["source-sasl"],
                           "ssl.keystore.password": canaries["source-keystore"]},
                "sink": {"ssl.key.password": canaries["sink-ssl-key"], "sasl.password": canaries["sink-sasl"]},
                "jaas": ('org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
                         f'password="{canaries["jaas"]}";'),
            },
        }
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        env = short_lived_jvm_environment(**{
            "CANARY_LOG_DIR": str(logs), "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": canaries["s3"], "AWS_REGION": "us-east-1",
            "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])})
        driver_log = tmp_path / "driver.log"
        with open(driver_log, "wb") as log:
            finished = subprocess.run([sys.executable, str(APP), str(tmp_path / "spec.json")], env=env, stdout=log,
                                      stderr=subprocess.STDOUT, timeout=900)
        assert finished.returncode == 0, f"the canary driver failed; see {driver_log}"
        result = json.loads((out / "result.json").read_text())

        # the secrets did their work: the query authenticated to S3 with them and ran end to end
        assert "ConfigurationError" in result["refused"] and "carries credentials" in result["refused"]
        assert "KafkaConfigurationError" in result["rejected"] and "sasl.jaas.config" in result["rejected"]
        assert len(read_committed(bs, sink)) == RECORDS
        assert sum(result["state_counts"].values()) == RECORDS  # read back with the environment's credentials
        assert list((server.data_dir / bucket / "state").rglob("kg-*"))
        # and what is searched below is what the run wrote
        assert _hits([tmp_path / "events"], {"marker": marker}) != []
        python_logs = _text([logs])
        assert "keyedstate.connectors.kafka.sink" in python_logs and "records committed in transaction" in python_logs
        assert "INFO MicroBatchExecution" in spark_log.read_text(errors="replace")

        written = [driver_log, spark_log, logs, tmp_path / "events", tmp_path / "checkpoint",
                   tmp_path / "checkpoint-jaas", server.data_dir, tmp_path / "state-local", tmp_path / "spark-local",
                   out]
        assert _hits([p for p in written if p.exists()], canaries) == []
    finally:
        server.kill()
