"""Spark's ``local-cluster[workers,cores,memory]`` master (a real standalone master and workers, executors in their
own JVMs) with the pip-installed pyspark.

The workers launch executors from ``$SPARK_HOME`` (``bin/``, ``jars/``) and write each application's logs and files
to ``$SPARK_HOME/work``, which for pip's pyspark is inside site-packages. So the job points ``SPARK_HOME`` at a
directory of its own whose ``bin`` and ``jars`` link to the installed package and whose ``work`` is real.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["use_private_spark_home", "executor_jvm_pid"]


def use_private_spark_home(directory: Path) -> Path:
    """Make ``directory`` a SPARK_HOME for local-cluster masters and set ``$SPARK_HOME`` (before Spark starts)."""
    import pyspark

    package = Path(pyspark.__file__).resolve().parent
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("bin", "jars", "python", "sbin"):
        link = directory / name
        if (package / name).exists() and not link.exists():
            link.symlink_to(package / name)
    (directory / "work").mkdir(exist_ok=True)
    os.environ["SPARK_HOME"] = str(directory)
    return directory


def executor_jvm_pid() -> int:
    """The pid of the executor JVM this Python worker runs under (worker -> pyspark daemon -> JVM)."""
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            if b"CoarseGrainedExecutorBackend" in file.read():
                return pid
        with open(f"/proc/{pid}/stat") as file:
            pid = int(file.read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("not running under a Spark executor JVM")
