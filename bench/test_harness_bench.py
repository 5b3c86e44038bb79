"""Harness throughput: Flink's count-with-timeout over 100,000 keys, heap vs RocksDB (issue 4).

Per round: 200,000 elements over 100,000 keys (each registers an event-time timer), then a watermark that fires
every timer. Reported as elements per second in bench/RESULTS.md.
``KEYEDSTATE_BENCH_SMOKE=1`` shrinks the input to check the pipeline only.
"""

from __future__ import annotations

import os
import random

import pytest

from examples.count_with_timeout import CountWithTimeoutFunction
from keyedstate.testing import KeyedProcessHarness

SMOKE = os.environ.get("KEYEDSTATE_BENCH_SMOKE") == "1"
KEYS = 2_500 if SMOKE else 100_000
ELEMENTS = 5_000 if SMOKE else 200_000
ROUNDS = 1 if SMOKE else 3


@pytest.fixture(scope="module")
def elements():
    rng = random.Random(11)
    return [((f"key-{rng.randrange(KEYS)}", "payload"), 1_000 + i) for i in range(ELEMENTS)]


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_count_with_timeout_harness_throughput(benchmark, backend, elements):
    def setup():
        harness = KeyedProcessHarness(CountWithTimeoutFunction(), key_selector=lambda e: e[0], backend=backend)
        return (harness.open(),), {}

    def run(harness):
        for value, timestamp in elements:
            harness.process_element(value, timestamp)
        harness.process_watermark(2**62)
        emitted = len(harness.extract_output())
        harness.close()
        assert emitted > 0.6 * KEYS  # every key that got an element emits once

    benchmark.extra_info.update({"elements": ELEMENTS, "keys": KEYS, "backend": backend})
    benchmark.pedantic(run, setup=setup, rounds=ROUNDS, iterations=1)
