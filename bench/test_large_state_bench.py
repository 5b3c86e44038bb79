"""Large-state benchmark (issue 17): per-batch cost, durable bytes and Python worker memory when state is large
but each batch changes little — keyed_process in row mode (``heap``) and in RocksDB mode (``rocksdb``) vs
transformWithStateInPandas (``tws``). Workload and measurement: bench/large_state_workload.py. Results:
bench/RESULTS.md (``make bench``; ``bench/run.py --suites large_state`` runs this suite alone).

    PYSPARK_PYTHON=$PWD/.venv/bin/python PYTHONPATH=$PWD \\
        .venv/bin/python -m pytest bench/test_large_state_bench.py --benchmark-only -s

Environment knobs (all optional):
    LARGE_STATE_BENCH_SIZES      comma list of smoke,200k,1M,4M keys of state   (default: 200k,1M,4M)
    LARGE_STATE_BENCH_VARIANTS   comma list of heap,rocksdb,rocksdb_kg8,rocksdb_s3,tws   (default: all; rocksdb_kg8
                                 is RocksDB mode with num_key_groups=8, reported beside the defaults; rocksdb_s3 keeps
                                 the state on a local S3-compatible server, S3Proxy, started by the run)
    LARGE_STATE_BENCH_S3_SIZES   sizes rocksdb_s3 runs at (default: 1M, where issue 18's target is set)
    LARGE_STATE_BENCH_TWS_SIZES  sizes tws runs at (default: smoke,200k; filling 4M keys through tws takes about an
                                 hour, and its per-batch cost does not depend on the state's size)
    LARGE_STATE_BENCH_BATCHES    later batches after the fill (default 6; the first is a warm-up for the time)
    LARGE_STATE_BENCH_ROCKSDB_BATCHES  later batches of the rocksdb variant (default: enough for every key group to
                                 write a new base snapshot, so the bytes per batch amortize them)
    LARGE_STATE_BENCH_ROUNDS     rounds per size, each running every variant in turn (default 1)
    LARGE_STATE_BENCH_SNAPSHOT_SPREAD  SnapshotPolicy.spread of the RocksDB variants (default 0, the default policy)
    LARGE_STATE_BENCH_INSPECT    variants whose checkpoint the inspector (inspect_keyed_state) reads after the last
                                 measured batch, measuring its driver memory (default: heap,rocksdb; empty: none)
    LARGE_STATE_BENCH_INSPECT_SIZES  the sizes it does that at (default: smoke,200k,4M)
    SPARK_BENCH_RESULTS          the jsonl every run is appended to (shared with bench/test_spark_bench.py)

Every run is a fresh process with a fresh JVM (its Python workers' peak memory is its own), a fresh checkpoint
and state storage; the smoke size also checks the output once the timers fire.
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
import spark_workloads as W  # noqa: E402
from keyedstate.spark import SnapshotPolicy  # noqa: E402

W.prepare_environment()


def _env_list(name: str, default: str) -> list[str]:
    return [part.strip() for part in os.environ.get(name, default).split(",") if part.strip()]


SELECTED_SIZES = _env_list("LARGE_STATE_BENCH_SIZES", "200k,1M,4M")
SELECTED_VARIANTS = _env_list("LARGE_STATE_BENCH_VARIANTS", ",".join(L.VARIANTS))
TWS_SIZES = _env_list("LARGE_STATE_BENCH_TWS_SIZES", "smoke,200k")
S3_SIZES = _env_list("LARGE_STATE_BENCH_S3_SIZES", "1M")
LATER_BATCHES = int(os.environ.get("LARGE_STATE_BENCH_BATCHES", "6"))
ROCKSDB_LATER_BATCHES = int(os.environ.get("LARGE_STATE_BENCH_ROCKSDB_BATCHES",
                                           str(SnapshotPolicy().max_changelogs + 6)))
ROUNDS = int(os.environ.get("LARGE_STATE_BENCH_ROUNDS", "1"))
RUN_ID = time.strftime("%Y%m%dT%H%M%S")
VALIDATE_UP_TO_KEYS = 50_000  # firing every timer and collecting the output is cheap only for small sizes


def _variants(size_name: str) -> list[str]:
    return [v for v in L.VARIANTS if v in SELECTED_VARIANTS and (v != "tws" or size_name in TWS_SIZES)
            and (v != "rocksdb_s3" or size_name in S3_SIZES)]


def later_batches(variant: str) -> int:
    """RocksDB mode writes a key group's new base snapshot only every few dozen batches (SnapshotPolicy: at most 64
    changelogs); it runs long enough that its bytes per batch include every key group's base, amortized."""
    return max(LATER_BATCHES, ROCKSDB_LATER_BATCHES) if variant.startswith("rocksdb") else LATER_BATCHES


def run_in_subprocess(variant: str, size: L.Size, scratch: Path, validate: bool) -> dict:
    """One run in a fresh interpreter (fresh JVM and Python workers); its progress lines pass through."""
    result = scratch / "result.json"
    args = [sys.executable, str(Path(L.__file__).resolve()), "--variant", variant, "--size", size.name,
            "--later-batches", str(later_batches(variant)), "--scratch", str(scratch), "--result", str(result)]
    subprocess.run(args + (["--validate"] if validate else []), check=True, timeout=4 * 3600)
    return json.loads(result.read_text())


@pytest.fixture
def scratch(tmp_path_factory):
    base = tmp_path_factory.mktemp("large-state")
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(8 * 3600)  # the full profile fills 4M keys through tws (about an hour)
@pytest.mark.parametrize("size_name", list(L.SIZES))
def test_large_state(benchmark, scratch, size_name):
    """Per round, every variant in turn: fill ``keys`` keys, then LATER_BATCHES batches changing ``changes`` keys."""
    if size_name not in SELECTED_SIZES:
        pytest.skip("not selected (LARGE_STATE_BENCH_SIZES)")
    variants = _variants(size_name)
    if not variants:
        pytest.skip("no variant selected (LARGE_STATE_BENCH_VARIANTS / LARGE_STATE_BENCH_TWS_SIZES)")
    size = L.SIZES[size_name]
    L.ensure_input(size, max(later_batches(v) for v in variants))  # written before timing starts, once per size
    rounds = iter(range(ROUNDS))

    def one_round() -> None:
        round_index = next(rounds)
        for variant in variants:
            load = W.load_average()
            result = run_in_subprocess(variant, size, scratch / f"{variant}-{round_index}",
                                       validate=size.keys <= VALIDATE_UP_TO_KEYS)
            row = {"run": RUN_ID, "workload": "large_state", "round": round_index, "load": load,
                   "load_after": W.load_average(), "time": time.strftime("%H:%M:%S", time.gmtime()), **result}
            W.record(row)
            print(f"\n[large-state] {variant} {size.name}: fill {row['fill_s']:.1f} s, later batch "
                  f"{row['later_median_s']:.2f} s (median), {row['durable_bytes_per_later_batch'] / 1e6:.2f} MB "
                  f"durable per later batch, Python worker peak {row['peak_worker_mb']:.0f} MB", flush=True)
            benchmark.extra_info.setdefault("runs", []).append(row)
            shutil.rmtree(scratch / f"{variant}-{round_index}", ignore_errors=True)  # 4M heap leaves GBs

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
