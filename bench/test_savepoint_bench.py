"""Savepoint benchmark (issue 31): write and restore time and savepoint size at 1M and 4M keys of state, RocksDB
mode, with the restore compared to filling the same state from its events in one batch (target: restore <= 2x fill).
Workload and measurement: bench/savepoint_workload.py. Results: bench/RESULTS.md (``make bench``;
``bench/run.py --suites savepoint`` runs this suite alone).

    PYSPARK_PYTHON=$PWD/.venv/bin/python PYTHONPATH=$PWD \\
        .venv/bin/python -m pytest bench/test_savepoint_bench.py --benchmark-only -s

Environment knobs (optional):
    SAVEPOINT_BENCH_SIZES   comma list of smoke,200k,1M,4M keys of state (default: 1M,4M)
    SPARK_BENCH_RESULTS     the jsonl every run is appended to (shared with the other Spark suites)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import large_state_workload as L  # noqa: E402
import savepoint_workload  # noqa: E402
import spark_workloads as W  # noqa: E402

W.prepare_environment()

SELECTED_SIZES = [s.strip() for s in os.environ.get("SAVEPOINT_BENCH_SIZES", "1M,4M").split(",") if s.strip()]
RUN_ID = time.strftime("%Y%m%dT%H%M%S")


@pytest.mark.timeout(4 * 3600)
@pytest.mark.parametrize("size_name", list(L.SIZES))
def test_savepoint(benchmark, tmp_path_factory, size_name):
    """Fill ``keys`` keys in one batch, write a savepoint, restore it in a new query."""
    if size_name not in SELECTED_SIZES:
        pytest.skip("not selected (SAVEPOINT_BENCH_SIZES)")
    size = L.SIZES[size_name]
    L.ensure_input(size, 1)  # written before timing starts
    scratch = tmp_path_factory.mktemp(f"savepoint-{size_name}")

    def one_round() -> None:
        result = scratch / "result.json"
        subprocess.run([sys.executable, str(Path(savepoint_workload.__file__).resolve()), "--size", size.name,
                        "--scratch", str(scratch / "run"), "--result", str(result)], check=True, timeout=4 * 3600)
        row = {"run": RUN_ID, "load": W.load_average(), "time": time.strftime("%H:%M:%S", time.gmtime()),
               **json.loads(result.read_text())}
        W.record(row)
        benchmark.extra_info.setdefault("runs", []).append(row)
        shutil.rmtree(scratch / "run", ignore_errors=True)

    benchmark.pedantic(one_round, rounds=1, iterations=1)
