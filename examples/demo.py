"""`make demo`: generated card transactions through Flink's fraud detector, batch by batch, with progress.

This placeholder runs in-process through the test harness (no Spark, no services); the Spark pipeline replaces it
once `keyedstate.spark` exists.
"""

from __future__ import annotations

import argparse
import logging
import random
import time

from examples.fraud_detection import FraudDetector
from keyedstate.testing import KeyedProcessHarness

logger = logging.getLogger("keyedstate.demo")


def generate_batch(rng: random.Random, batch: int, size: int, accounts: int) -> list[dict]:
    transactions = []
    for _ in range(size):
        account = f"acct-{rng.randrange(accounts):05d}"
        roll = rng.random()
        amount = round(rng.uniform(0.01, 0.99), 2) if roll < 0.05 else (
            round(rng.uniform(501, 2000), 2) if roll < 0.08 else round(rng.uniform(1, 400), 2)
        )
        transactions.append({"account_id": account, "amount": amount, "batch": batch})
    return transactions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=20_000)
    parser.add_argument("--accounts", type=int, default=5_000)
    parser.add_argument("--backend", choices=["heap", "rocksdb"], default="rocksdb")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    rng = random.Random(args.seed)
    harness = KeyedProcessHarness(FraudDetector(), key_selector=lambda t: t["account_id"], backend=args.backend)
    harness.open()
    processing_time = 1_700_000_000_000
    total_alerts = 0
    try:
        for batch in range(args.batches):
            started = time.perf_counter()
            processing_time += 20_000  # one batch every 20 s of processing time
            fired = harness.set_processing_time(processing_time)
            rows = generate_batch(rng, batch, args.batch_size, args.accounts)
            harness.process_elements(rows)
            alerts = harness.extract_output()
            total_alerts += len(alerts)
            snapshot = harness.snapshot()
            manifest = snapshot.manifests[0]
            logger.info(
                "batch %d: rows=%d timers_fired=%d pending_timers=%d alerts=%d snapshot=%d bytes (%d uploaded) "
                "in %.2fs",
                batch, len(rows), fired, harness.num_processing_time_timers(), len(alerts),
                manifest.total_bytes, manifest.uploaded_bytes, time.perf_counter() - started,
            )
            for (account,) in alerts[:3]:
                print(f"  ALERT: account {account}: small transaction followed by a large one within a minute")
    finally:
        harness.close()
    print(f"done: {args.batches} batches, {total_alerts} alerts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
