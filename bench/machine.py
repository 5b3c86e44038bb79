"""Machine, versions and load of a benchmark run, recorded into the run's meta.json by bench/run.py.

Collected by the run itself (not copied from a previous report) so that RESULTS.md states the machine and the
library versions the numbers were measured with. Every probe is best effort: a missing tool gives "n/a", never an
error, because a report with one unknown version is better than no report.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
FLINK_PYTHON = REPO_ROOT / ".cache" / "flink-venv" / "bin" / "python"
KAFKA_LIB = REPO_ROOT / ".cache" / "kafka" / "lib"
SPARK_KAFKA_JARS = REPO_ROOT / ".cache" / "kafka" / "spark-jars"


def _run(args: list[str], timeout: float = 60) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (done.stdout + done.stderr).strip()


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "n/a"


def _jar_version(directory: Path, prefix: str) -> str:
    # The broker and the built-in source are jars in the cache; their file names carry the version.
    for jar in sorted(directory.glob(f"{prefix}*.jar")):
        match = re.match(re.escape(prefix) + r"(\d[\w.\-]*?)\.jar$", jar.name)
        if match:
            return match.group(1)
    return "n/a"


def machine() -> dict:
    cpu = "n/a"
    lscpu = _run(["lscpu"])
    for line in lscpu.splitlines():
        if line.startswith("Model name:"):
            cpu = line.split(":", 1)[1].strip()
    hypervisor = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                       if line.startswith("Hypervisor vendor:")), "")
    mem_gib = "n/a"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = f"{int(line.split()[1]) / 2**20:.1f}"
    except OSError:
        pass
    os_name = platform.platform()
    try:
        pretty = re.search(r'^PRETTY_NAME="?([^"\n]*)', Path("/etc/os-release").read_text(), re.M)
        if pretty:
            os_name = f"{pretty.group(1)}, kernel {platform.release()}"
    except OSError:
        pass
    return {"cpu": cpu + (f" ({hypervisor} VM)" if hypervisor else ""), "cores": os.cpu_count(),
            "ram_gib": mem_gib, "os": os_name}


def versions() -> dict:
    java = _run(["java", "-version"]).splitlines()
    try:
        import confluent_kafka

        librdkafka = confluent_kafka.libversion()[0]
    except ImportError:
        librdkafka = "n/a"
    flink = "n/a (no .cache/flink-venv)"
    if FLINK_PYTHON.exists():
        flink = _run([str(FLINK_PYTHON), "-c", "import importlib.metadata as m; print(m.version('apache-flink'))"])
    return {
        "python": platform.python_version(),
        "java": java[0] if java else "n/a",
        "pyspark": _version("pyspark"),
        "pandas": _version("pandas"),
        "pyarrow": _version("pyarrow"),
        "numpy": _version("numpy"),
        "rocksdict": _version("rocksdict"),
        "msgpack": _version("msgpack"),
        "confluent-kafka": _version("confluent-kafka"),
        "librdkafka": librdkafka,
        "Kafka broker": _jar_version(KAFKA_LIB, "kafka_2.13-"),
        "spark-sql-kafka (built-in source)": _jar_version(SPARK_KAFKA_JARS, "spark-sql-kafka-0-10_2.13-"),
        "apache-flink (PyFlink venv)": flink or "n/a",
        "matplotlib": _version("matplotlib"),
        "pytest": _version("pytest"),
        "pytest-benchmark": _version("pytest-benchmark"),
    }


# What make bench itself rewrites; changes there say nothing about the code being measured.
_BENCH_OUTPUTS = (":(exclude)bench/results", ":(exclude)bench/RESULTS.md", ":(exclude)bench/*.png")


def git_commit() -> str:
    commit = _run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"])
    dirty = _run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no", "--", ".",
                  *_BENCH_OUTPUTS])
    return (commit or "n/a") + (" (with uncommitted changes)" if dirty else "")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


if __name__ == "__main__":
    import json

    json.dump({"machine": machine(), "versions": versions(), "commit": git_commit(), "load": load_average()},
              sys.stdout, indent=2)
    print()
