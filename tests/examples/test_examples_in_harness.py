"""Each example run in the harness with its expected output, on both backends."""

from __future__ import annotations

import pytest

from examples.count_with_timeout import CountWithTimeoutFunction
from examples.fraud_detection import ONE_MINUTE, FraudDetector
from examples.order_payments import LATE, OrderPaymentMatcher
from examples.session_gap import SessionGapFunction
from keyedstate.testing import KeyedCoProcessHarness, KeyedProcessHarness


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


def test_order_payments_matches_times_out_on_both_inputs_and_routes_late_elements(backend_kind):
    harness = KeyedCoProcessHarness(OrderPaymentMatcher(timeout_ms=60_000), lambda o: o["order_id"],
                                    lambda p: p["order"], backend=backend_kind).open()

    def orders(*items):
        for order_id, amount, second in items:
            harness.process_element1({"order_id": order_id, "amount": amount}, timestamp=second * 1_000)

    def payments(*items):
        for order_id, paid, second in items:
            harness.process_element2({"order": order_id, "paid": paid}, timestamp=second * 1_000)

    orders(("A", 10.0, 0), ("C", 30.0, 10))
    payments(("A", 10.0, 8), ("X", 5.0, 12))
    assert harness.extract_output() == [("A", "paid", 10.0, 10.0)]
    harness.process_watermark1(40_000)
    harness.process_watermark2(45_000)
    orders(("F", 60.0, 2))  # late, nothing to match: side output
    payments(("E", 50.0, 41))
    orders(("E", 50.0, 20))  # late, but E's payment waits: matched
    assert harness.side_output(LATE) == [("F", "order", 2_000)]
    assert harness.extract_output() == [("E", "paid", 50.0, 50.0)]
    harness.process_watermark1(80_000)  # payments still at 45 s: C's (70 s) and X's (72 s) deadlines wait
    assert harness.extract_output() == []
    snapshot = harness.snapshot()
    harness.close()

    harness = KeyedCoProcessHarness.restore(OrderPaymentMatcher(timeout_ms=60_000), lambda o: o["order_id"],
                                            lambda p: p["order"], snapshot, backend=backend_kind)
    harness.process_watermark(80_000)  # after a restore both inputs' watermarks start over, as in Flink
    assert sorted(harness.extract_output(with_timestamps=True)) == [
        (("C", "unpaid", 30.0, None), 70_000), (("X", "unexpected_payment", None, 5.0), 72_000),
    ]
    assert harness.num_event_time_timers() == 0
    harness.close()
