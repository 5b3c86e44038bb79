"""The one local Spark session configuration of the test suite (tests/spark and tests/connectors share a session:
``getOrCreate`` returns the first one built, so every suite must ask for the same settings).

``KEYEDSTATE_TEST_SPARK_REMOTE=local[2]`` makes it a Spark Connect session instead: the compatibility job
(scripts/compat.sh) runs a subset of the suite through Spark Connect that way. A Connect client cannot share a
process with a classic session, so the whole pytest run is either one or the other."""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import sys
from pathlib import Path
from typing import Any, Iterator

REMOTE_ENV = "KEYEDSTATE_TEST_SPARK_REMOTE"
_CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
JVM_LOG_DIR = Path(__file__).resolve().parents[1] / ".cache" / "spark-jvm"
"""Where the output of each test process's Spark JVM goes (``<pid>.log``); `make test` prints their ends when it
fails."""


@contextlib.contextmanager
def jvm_output_to_log() -> Iterator[None]:
    """Standard output and error of a JVM launched inside go to ``JVM_LOG_DIR/<pid>.log``, not to the capture of
    the test that happened to start it: pytest closes that capture when the test ends, so whatever the JVM said
    later, such as why it exited in a later test, was lost."""
    JVM_LOG_DIR.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    log = os.open(JVM_LOG_DIR / f"{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for descriptor in (*saved, log):
            os.close(descriptor)


def note_jvm_exit_at_the_end(session: Any) -> None:
    """When the test process ends, append to the JVM's log how it exited if it exited before: code 0 with nothing
    logged is PySpark's gateway exiting because its standard input closed, 50-52 Spark's handler of a fatal error,
    negative a signal."""
    gateway = getattr(session.sparkContext, "_gateway", None)
    process = getattr(gateway, "proc", None)
    if process is None or getattr(process, "_keyedstate_noted", False):
        return
    process._keyedstate_noted = True
    log = JVM_LOG_DIR / f"{os.getpid()}.log"

    def note() -> None:
        code = process.poll()
        if code is not None:
            with open(log, "a", encoding="utf-8") as file:
                file.write(f"\n[tests/local_spark.py] this Spark JVM (pid {process.pid}) exited with code {code} "
                           f"before the test process ended\n")

    atexit.register(note)


def local_spark_session(warehouse_dir: Path, app_name: str = "keyedstate-tests") -> Any:
    """``local[2]`` with 2 shuffle partitions, no UI, a 2 GiB driver and a 30 s stop timeout for streaming queries.

    The whole suite's queries share this JVM, and in local mode the executor's task threads are the driver's: an
    OutOfMemoryError in a task makes Spark's handler exit the JVM, failing every later test with "Connection refused".
    With 1 GiB the JVM exited that way once, two thirds through the suite, with no kernel OOM kill and no crash
    file."""
    conf = {
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # progress bars would fill the JVM's log (jvm_output_to_log)
        "spark.sql.warehouse.dir": str(warehouse_dir),
        "spark.driver.memory": "2g",
        "spark.sql.streaming.stopTimeout": "30000",
        # collect() hands rows over a local socket the JVM closes if Python has not connected within this time (15 s
        # by default). With `make test`'s streams and the drivers they start sharing 2 cores, a connect once
        # came later than that and the test failed with "Connection refused".
        "spark.python.authenticate.socketTimeout": "180s",
    }
    remote = os.environ.get(REMOTE_ENV)
    if remote:
        session = local_connect_session(remote, app_name, conf)
    else:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.master("local[2]").appName(app_name)
        for key, value in conf.items():
            builder = builder.config(key, value)
        with jvm_output_to_log():
            session = builder.getOrCreate()
        note_jvm_exit_at_the_end(session)
        session.sparkContext.setLogLevel("ERROR")
    session.conf.set("spark.sql.shuffle.partitions", "2")  # a session built earlier may have been changed since
    return session


def local_connect_session(master: str, app_name: str, conf: dict[str, str]) -> Any:
    """A Spark Connect client session of a Connect server this process starts with ``master`` on a free port.

    ``SparkSession.builder.remote("local[2]")`` does the same on the fixed port 15002, which a second such process
    on the machine (the exactly-once job the tests start and kill, another test run) cannot bind."""
    from pyspark.sql import SparkSession

    from keyedstate.spark_compat import is_connect_session

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)  # inherited from a parent process that is a Connect client
    builder = (SparkSession.builder.master(master).appName(app_name).config("spark.plugins", _CONNECT_PLUGIN)
               .config("spark.connect.grpc.binding.port", str(port)))
    for key, value in conf.items():
        builder = builder.config(key, value)
    with jvm_output_to_log():
        server = builder.getOrCreate()
    server.sparkContext.setLogLevel("ERROR")  # the server, in this process

    from pyspark.sql.connect.session import SparkSession as ConnectSession

    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # pyspark.sql.functions build Connect columns from now on
    session = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
    assert is_connect_session(session)
    return session
