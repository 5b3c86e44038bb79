"""End-to-end latency (issue 35): Kafka -> keyed_process -> Kafka against the projection-only floor on the same
source and sink, at steady event rates (``latency_workload.py`` says how a run measures).

Every round runs each (variant, rate) pair once, in turn, on one ``local[2]`` session and a local KRaft broker; the
targets are medians of per-round ratios of p99 latency at 10,000 events/s:

* keyed_process heap, at-least-once <= 1.5x the at-least-once floor;
* keyed_process heap, exactly-once <= 1.5x the exactly-once floor;
* keyed_process RocksDB mode, at-least-once <= 1.2x heap;

and every run keeps up with its rate. More ratios say what the first one is made of: the bare
``applyInPandasWithState`` function over 4 buckets (one Spark group per task at the pipeline's 4 shuffle partitions)
and over 2 buckets and 2 shuffle partitions against the floor (the lowest latency Spark's API gives this pipeline;
with either guarantee, against the floor of the same guarantee), keyed_process
tuned the same way (8 key groups, 2 shuffle partitions) against the floor, keyed_process against the bare function
over as many buckets as it has key groups (what keyedstate adds), and keyed_process with its progress metrics
against without. The benchmark's ``extra_info`` keeps every run (p50, p95, p99, max, median micro-batch, events sent
and received) for the report's table and its plot of latency against rate.

    PYSPARK_PYTHON=$PWD/.venv/bin/python PYTHONPATH=$PWD \\
        .venv/bin/python -m pytest bench/test_latency_bench.py --benchmark-only -s

Environment knobs: LATENCY_BENCH_RATES (events/s, default ``1000,10000``: floor and keyed_process heap at-least-once
run at each, the other pipelines at the highest), LATENCY_BENCH_SECONDS (measured seconds per run, default 25),
LATENCY_BENCH_WARMUP_SECONDS (default 5), LATENCY_BENCH_ROUNDS (default 2), LATENCY_BENCH_VARIANTS (labels from
``latency_workload.VARIANTS``, separated by ``;`` since labels hold commas; default all).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency_workload as L  # noqa: E402
import spark_workloads as W  # noqa: E402
from test_kafka_source import broker  # noqa: E402,F401 - the broker fixture

W.prepare_environment()

RATES = sorted(int(r) for r in os.environ.get("LATENCY_BENCH_RATES", "1000,10000").split(","))
SECONDS = float(os.environ.get("LATENCY_BENCH_SECONDS", "25"))
WARMUP_S = float(os.environ.get("LATENCY_BENCH_WARMUP_SECONDS", "5"))
ROUNDS = int(os.environ.get("LATENCY_BENCH_ROUNDS", "2"))
CHOSEN = [v.strip() for v in os.environ.get("LATENCY_BENCH_VARIANTS", "").split(";") if v.strip()]
#: The pipelines run at every rate (the plot's lines); the others run at the highest rate only.
AT_EVERY_RATE = (L.FLOOR_ALO, L.HEAP_ALO)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def runs() -> list[tuple[L.Variant, int]]:
    """The (variant, rate) pairs of one round, in the order they run: floor and keyed_process alternate."""
    unknown = set(CHOSEN) - set(L.VARIANTS)
    if unknown:
        raise ValueError(f"LATENCY_BENCH_VARIANTS names unknown pipelines {sorted(unknown)}; known: "
                         f"{', '.join(L.VARIANTS)}")
    chosen = [L.VARIANTS[c] for c in CHOSEN] if CHOSEN else list(L.VARIANTS.values())
    pairs = [(v, rate) for rate in RATES for v in AT_EVERY_RATE if v in chosen]
    pairs += [(v, RATES[-1]) for v in chosen if v not in AT_EVERY_RATE]
    return pairs


def key(variant: L.Variant, rate: int) -> str:
    return f"{variant.label} @ {rate}"


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from connectors.kafka import KafkaSource

    # recommended_spark_conf as a user runs it: no-data batches on (the bench default turns them off)
    session = W.spark_session(tmp_path_factory.mktemp("warehouse"),
                              {"spark.sql.streaming.noDataMicroBatches.enabled": "true",
                               "spark.sql.streaming.numRecentProgressUpdates": "1000"})
    session.dataSource.register(KafkaSource)
    yield session
    session.stop()


#: (name, numerator, denominator) of the p99 ratios at the highest rate: the three targets, then what explains them
RATIOS = (
    ("heap at-least-once / floor at-least-once [p99]", L.HEAP_ALO, L.FLOOR_ALO),
    ("heap exactly-once / floor exactly-once [p99]", L.HEAP_EO, L.FLOOR_EO),
    ("rocksdb at-least-once / heap at-least-once [p99]", L.ROCKSDB_ALO, L.HEAP_ALO),
    ("bare 4 buckets / floor at-least-once [p99]", L.BARE_4, L.FLOOR_ALO),
    ("bare 4 buckets exactly-once / floor exactly-once [p99]", L.BARE_4_EO, L.FLOOR_EO),
    ("bare 2 buckets, one per shuffle partition of 2 / floor at-least-once [p99]", L.BARE_2_SP2, L.FLOOR_ALO),
    ("bare 2 buckets, one per shuffle partition of 2, exactly-once / floor exactly-once [p99]", L.BARE_2_SP2_EO,
     L.FLOOR_EO),
    ("heap 8 key groups, 2 shuffle partitions / floor at-least-once [p99]", L.HEAP_ALO_8_SP2, L.FLOOR_ALO),
    ("heap 8 key groups, 2 shuffle partitions exactly-once / floor exactly-once [p99]", L.HEAP_EO_8_SP2, L.FLOOR_EO),
    ("heap at-least-once / bare 128 buckets [p99]", L.HEAP_ALO, L.BARE_128),
    ("heap at-least-once / heap without progress metrics [p99]", L.HEAP_ALO, L.HEAP_ALO_NO_METRICS),
)


def summary(rounds: list[dict]) -> dict:
    top = RATES[-1]
    return {name: L.ratio(rounds, key(numerator, top), key(denominator, top))
            for name, numerator, denominator in RATIOS}


@pytest.mark.timeout(3600)  # 14 pipelines x 2 rounds of about 30 s each, plus set-up: past pytest's 900 s default
def test_latency_interleaved(benchmark, spark, broker):  # noqa: F811 - the fixture imported above
    """Every (variant, rate) once per round, in turn; the benchmark's own time is that of a whole round."""
    pairs = runs()
    rounds: list[dict] = []
    # The session's first queries run while the JVM compiles Spark's code: one short unrecorded run of each kind.
    for variant in AT_EVERY_RATE:
        L.run_pipeline(spark, broker, variant, RATES[0], 3, 2)

    def one_round() -> None:
        results = {}
        for variant, rate in pairs:
            result = L.run_pipeline(spark, broker, variant, rate, SECONDS, WARMUP_S, seed=len(rounds))
            results[key(variant, rate)] = result
            print(f"round {len(rounds)}: {key(variant, rate)}/s: p50 {result['p50']} s, p99 {result['p99']} s, "
                  f"median batch {result['median_batch_s']} s, {result['received']}/{result['sent']} received, "
                  f"kept up: {result['kept_up']} (load {os.getloadavg()[0]:.1f})", flush=True)
        rounds.append(results)

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    ratios = {name: r for name, r in summary(rounds).items() if r}
    benchmark.extra_info.update({"rates": RATES, "seconds": SECONDS, "warmup_s": WARMUP_S, "keys": L.KEYS,
                                 "rounds": rounds, "ratios": ratios})
    for name, r in ratios.items():
        print(f"latency {name}: {r['median']:.2f}x (median of {len(r['rounds'])} rounds: {r['rounds']})")
    missing = [f"{k} (round {i})" for i, r in enumerate(rounds) for k, v in r.items() if v["received"] < v["sent"]]
    assert not missing, f"events sent but never received: {missing}"
