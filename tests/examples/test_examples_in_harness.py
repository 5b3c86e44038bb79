"""Each example run in the harness with its expected output, on both backends."""

from __future__ import annotations

import pytest

from examples.count_with_timeout import CountWithTimeoutFunction
from examples.fraud_detection import ONE_MINUTE, FraudDetector
from examples.session_gap import SessionGapFunction
from keyedstate.testing import KeyedProcessHarness


@pytest.fixture(params=["heap", "rocksdb"])
def backend_kind(request):
    return request.param


def test_fraud_detector_alerts_on_small_then_large_within_a_minute(backend_kind):
    harness = KeyedProcessHarness(FraudDetector(), key_selector=lambda t: t["account_id"], backend=backend_kind).open()
    harness.set_processing_time(1_000)
    harness.process_element({"account_id": "1", "amount": 0.50})
    harness.process_element({"account_id": "1", "amount": 600.00})  # alert
    harness.process_element({"account_id": "2", "amount": 0.50})
    harness.process_element({"account_id": "3", "amount": 0.50})
    harness.process_element({"account_id": "3", "amount": 20.00})  # a medium one resets the flag
    harness.process_element({"account_id": "3", "amount": 600.00})
    assert harness.extract_output() == [("1",)]
    assert harness.num_processing_time_timers() == 1  # only account 2's flag is pending
    harness.set_processing_time(1_000 + ONE_MINUTE)  # account 2's minute passes: flag cleared
    harness.process_element({"account_id": "2", "amount": 600.00})
    assert harness.extract_output() == []
    assert harness.num_processing_time_timers() == 0
    harness.close()


def test_count_with_timeout_emits_after_sixty_seconds_without_updates(backend_kind):
    harness = KeyedProcessHarness(CountWithTimeoutFunction(), key_selector=lambda e: e[0], backend=backend_kind).open()
    harness.process_element(("a", "x"), timestamp=1_000)
    harness.process_element(("a", "y"), timestamp=30_000)
    harness.process_element(("b", "x"), timestamp=40_000)
    harness.process_watermark(61_000)  # a's first timer fires but a was updated since: nothing
    assert harness.extract_output() == []
    harness.process_watermark(90_000)
    assert harness.extract_output(with_timestamps=True) == [(("a", 2), 90_000)]
    harness.end_input()
    assert harness.extract_output() == [("b", 1)]
    harness.close()


def test_session_gap_emits_one_record_per_session(backend_kind):
    harness = KeyedProcessHarness(SessionGapFunction(gap_ms=10_000), key_selector=lambda e: e["user"],
                                  backend=backend_kind).open()
    for timestamp, user, action in [(0, "u", "open"), (4_000, "u", "read"), (5_000, "v", "open"), (9_000, "u", "buy")]:
        harness.process_element({"user": user, "action": action}, timestamp=timestamp)
    harness.process_watermark(15_000)
    assert harness.extract_output() == [("v", 5_000, 5_000, 1, "open")]
    harness.process_element({"user": "u", "action": "open"}, timestamp=40_000)  # after the gap: closes u's session
    assert harness.extract_output() == [("u", 0, 9_000, 3, "open,read,buy")]
    harness.end_input()
    assert harness.extract_output() == [("u", 40_000, 40_000, 1, "open")]
    harness.close()
