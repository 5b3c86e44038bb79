"""Cold point lookups in one key group's database as the 40M-key run has it, by block size: the evidence for
``RocksDBOptions.block_size_bytes`` (docs/state-backends.md). Run: ``.venv/bin/python bench/rocksdb_block_size.py``.

A key group there holds 312k keys, each with a value (a pickled (payload, ts) tuple) and one event-time timer, in a
few universal-compaction runs; a later batch looks up both for 78 random keys. The block cache (64 MiB per worker
for 128 key groups of about 30 MB each) rarely holds the block, so a lookup reads and decompresses one block per
column family: its size sets the cost. The cache here is 1 MiB to match that."""

from __future__ import annotations

import os
import pickle
import random
import shutil
import sys
import tempfile
import time

import rocksdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from keyedstate.state.rocksdb.options import RocksDBOptions  # noqa: E402

KEYS = 312_000
FILL_BATCHES = 8
LATER_BATCHES = 30
CHANGED_PER_BATCH = 78
LOOKUPS = 20_000


def _state_key(index: int) -> bytes:
    return b"\x00\x05" + f"user-{index:09d}".encode()


def _timer_key(index: int) -> bytes:
    return b"\x00\x05" + (1_800_000_000_000 + index).to_bytes(8, "big") + _state_key(index)


def build(path: str, options: RocksDBOptions) -> None:
    built = options.build()
    database = rocksdict.Rdict(path, built)
    state = database.create_column_family("state", built)
    timers = database.create_column_family("timers", built)
    rng = random.Random(1)
    order = list(range(KEYS))
    rng.shuffle(order)
    per_batch = KEYS // FILL_BATCHES
    for start in range(0, KEYS, per_batch):
        for index in order[start:start + per_batch]:
            state[_state_key(index)] = pickle.dumps((f"{rng.getrandbits(256):064x}", 1_700_000_000_000 + index))
            timers[_timer_key(index)] = b"\x01" + bytes(8)
        database.flush()
    for _ in range(LATER_BATCHES):
        for index in rng.sample(range(KEYS), CHANGED_PER_BATCH):
            state[_state_key(index)] = pickle.dumps((f"{rng.getrandbits(256):064x}", 1_800_000_000_000 + index))
        database.flush()
    time.sleep(2)  # background compactions
    database.close()


def microseconds_per_lookup(path: str, options: RocksDBOptions) -> float:
    built = options.build()
    database = rocksdict.Rdict(path, built, column_families={"state": built, "timers": built})
    state, timers = database.get_column_family("state"), database.get_column_family("timers")
    rng = random.Random(2)
    keys = [rng.randrange(KEYS) for _ in range(LOOKUPS)]
    start = time.perf_counter()
    for index in keys:
        state.get(_state_key(index))
        timers.get(_timer_key(index))
    elapsed = time.perf_counter() - start
    database.close()
    return elapsed / LOOKUPS * 1e6


def main() -> None:
    work = tempfile.mkdtemp(prefix="block-size-")
    try:
        print("block size | SST MB | us per value + timer lookup")
        for block_size in (16 * 1024, 8 * 1024, 4 * 1024):
            options = RocksDBOptions(block_size_bytes=block_size, block_cache_bytes=1024 * 1024)
            path = os.path.join(work, str(block_size))
            build(path, options)
            size = sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path) if name.endswith(".sst"))
            print(f"{block_size // 1024} KiB | {size / 1e6:.1f} | {microseconds_per_lookup(path, options):.1f}",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
