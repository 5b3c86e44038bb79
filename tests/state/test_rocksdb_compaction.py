"""RocksDB compaction and base snapshots: a batch changes a few keys spread over a key group's whole key range, and a
new base must upload about what changed, not the whole database again (issue 35: at most 10 MB per batch at 40M
keys). Level compaction merges such changes into every file below, so it is kept only as an option."""

from __future__ import annotations

import random

import pytest

from keyedstate import Types, ValueStateDescriptor
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from keyedstate.state.rocksdb.key_group_backend import KeyGroupRocksDBBackend
from keyedstate.state.rocksdb.versions import KeyGroupVersions

KEYS = 40_000
CHANGED_PER_BATCH = 40
BATCHES_PER_BASE = 8


def base_uploads(tmp_path, options: RocksDBOptions, bases: int = 4) -> list[tuple[int, int]]:
    """(bytes uploaded, bytes of the base) of each base after the first; every batch closes the database (as a
    Spark worker does when it hands the key group's copy on), which flushes what the batch changed to a new file."""
    versions = KeyGroupVersions(CheckpointStorage(tmp_path / "storage"), key_group=0, num_key_groups=1)
    backend = KeyGroupRocksDBBackend(tmp_path / "idle", num_key_groups=1, options=options)
    value = backend.get_or_create_state(ValueStateDescriptor("value", Types.STRING()))
    rng = random.Random(7)
    record, uploads = None, []
    for batch in range(1 + bases * BATCHES_PER_BASE):
        backend.open_key_group(str(tmp_path / "local"))
        for key in range(KEYS) if batch == 0 else rng.sample(range(KEYS), CHANGED_PER_BATCH):
            backend.set_current_key(f"k{key:06d}")
            value.update(f"{rng.getrandbits(256):064x}")
        backend.take_changes()
        if batch % BATCHES_PER_BASE == 0:
            backend.checkpoint(str(tmp_path / f"ckpt-{batch}"))
            record, uploaded = versions.write_base(record, str(tmp_path / f"ckpt-{batch}"), batch, f"{batch:04x}",
                                                   backend.state_metadata(), backend.raw_column_names(),
                                                   retain_batches=100)
            if batch:
                uploads.append((uploaded, record.base_bytes))
        backend.close_key_group()
    backend.close()
    return uploads


def test_by_default_a_new_base_uploads_what_changed_not_the_database_again(tmp_path):
    uploads = base_uploads(tmp_path, RocksDBOptions(reuse_existing=True))
    assert all(uploaded < base / 5 for uploaded, base in uploads), uploads


def test_level_compaction_rewrites_the_database_between_bases(tmp_path):
    """Why universal is the default: the same changes under level compaction upload (nearly) the whole base again."""
    uploads = base_uploads(tmp_path, RocksDBOptions(reuse_existing=True, compaction_style="level"))
    assert any(uploaded > base / 2 for uploaded, base in uploads), uploads


@pytest.mark.parametrize("first, second", [("level", "universal"), ("universal", "level")])
def test_a_database_written_with_one_compaction_style_opens_with_the_other(tmp_path, first, second):
    path = str(tmp_path / "db")
    with RocksDBKeyedStateBackend(path, options=RocksDBOptions(compaction_style=first)) as backend:
        value = backend.get_or_create_state(ValueStateDescriptor("value", Types.LONG()))
        for key in range(2_000):
            backend.set_current_key(f"k{key}")
            value.update(key)
    with RocksDBKeyedStateBackend(path, options=RocksDBOptions(compaction_style=second,
                                                               reuse_existing=True)) as backend:
        value = backend.get_or_create_state(ValueStateDescriptor("value", Types.LONG()))
        backend.set_current_key("k1234")
        assert value.value() == 1234
        backend.set_current_key("k1999")
        assert value.value() == 1999
