"""JVMs that live for a test only (a Spark driver a test starts and kills, its ``local-cluster`` executors, a Kafka
cluster of the test's own) run with the C1 compiler only.

On 2 cores the C2 compiler's threads took a third of the JVMs' CPU time in `make test`, compiling code that runs for a
few batches: test_executor_loss took 184 core-seconds with C2 and 101 with C1 only, test_kafka_crash 83 and 53. A JVM
that lives for the whole run (the suite's shared Spark session, the session's Kafka broker) keeps C2, which pays
there: with C1 only the tests sharing the session ran slower."""

from __future__ import annotations

import os

__all__ = ["C1_ONLY", "short_lived_jvm_environment"]

C1_ONLY = "-XX:TieredStopAtLevel=1"


def short_lived_jvm_environment(**overrides: str) -> dict[str, str]:
    """This process's environment with ``overrides`` and C1 only for every JVM started with it.

    ``JDK_JAVA_OPTIONS`` reaches each ``java`` launched below the process: spark-submit's driver JVM and the
    executors a ``local-cluster`` worker starts from the driver's environment."""
    environment = {**os.environ, **overrides}
    inherited = environment.get("JDK_JAVA_OPTIONS", "")
    if C1_ONLY not in inherited.split():
        environment["JDK_JAVA_OPTIONS"] = f"{inherited} {C1_ONLY}".strip()
    return environment
