"""RocksDB compaction and base snapshots: a batch changes a few keys spread over a key group's whole key range, and a
new base must upload about what changed, not the whole database again (issue 35: at most 10 MB per batch at 40M
keys). Level compaction merges such changes into every file below, so it is kept only as an option. And on Spark
each worker keeps its own copy of a key group: only a copy that holds the stored base's files writes the next base,
while the chain stays within the policy's wait."""

from __future__ import annotations

import random

import pytest

from keyedstate import Types, ValueStateDescriptor
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.state.key_groups.versioned import save_version
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from keyedstate.state.rocksdb.key_group_backend import KeyGroupRocksDBBackend
from keyedstate.state.rocksdb.versions import KeyGroupVersions, SnapshotPolicy

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


class LocalCopy:
    """One worker's copy of the key group, as on Spark: it catches up from the changelogs it missed, or is rebuilt
    from storage when it holds no version of the record's chain."""

    def __init__(self, tmp_path, name: str) -> None:
        self.path = str(tmp_path / name)
        self.backend = KeyGroupRocksDBBackend(tmp_path / f"idle-{name}", num_key_groups=1,
                                              options=RocksDBOptions(reuse_existing=True))
        self.value = self.backend.get_or_create_state(ValueStateDescriptor("value", Types.STRING()))
        self.tag = None

    def call(self, versions, record, batch: int, keys, rng: random.Random, policy: SnapshotPolicy):
        changelogs = versions.changelogs_after(record, self.tag) if record is not None else []
        if changelogs is None:
            changelogs = versions.restore(record, self.path)
        self.backend.open_key_group(self.path, record_changes=record is not None)
        for changelog in changelogs:
            self.backend.replay(changelog)
        for key in keys:
            self.backend.set_current_key(f"k{key:06d}")
            self.value.update(f"{rng.getrandbits(256):064x}")
        new, written = save_version(self.backend, versions, record, self.backend.take_changes(), batch, policy,
                                    100, self.path)
        self.backend.close_key_group()
        self.tag = new.tag
        return new, written


# Bases by count only; the fill is a changelog, so the second copy builds its own files by replaying it.
EVERY_8_CALLS = SnapshotPolicy(max_changelogs=8, min_changelog_bytes=1 << 40)


def bases_of_two_copies(tmp_path, policy: SnapshotPolicy, schedule, new_keys_per_batch: int = 0
                        ) -> list[tuple[int, int, int]]:
    """(batch, bytes uploaded, bytes of the base) of each base after the first, the copies ``a`` and ``b`` running
    the calls in the order ``schedule(batch)`` names them; every later batch changes a few keys, and adds
    ``new_keys_per_batch`` new ones."""
    versions = KeyGroupVersions(CheckpointStorage(tmp_path / "storage"), key_group=0, num_key_groups=1)
    copies = {name: LocalCopy(tmp_path, name) for name in "ab"}
    rng = random.Random(11)
    record, bases = None, []
    for batch in range(48):
        keys = range(KEYS) if batch == 0 else rng.sample(range(KEYS), CHANGED_PER_BATCH)
        if batch and new_keys_per_batch:
            keys = list(keys) + list(range(KEYS + batch * new_keys_per_batch, KEYS + (batch + 1) * new_keys_per_batch))
        previous = record
        record, written = copies[schedule(batch)].call(versions, record, batch, keys, rng, policy)
        if record.base_batch != (previous.base_batch if previous else None) and previous.base is not None:
            bases.append((batch, written, record.base_bytes))
    for local in copies.values():
        local.backend.close()
    return bases


def alternate(batch: int) -> str:
    return "ab"[batch % 2]


def test_a_base_waits_for_the_copy_that_holds_the_stored_base_and_uploads_what_changed(tmp_path):
    bases = bases_of_two_copies(tmp_path, EVERY_8_CALLS, alternate)
    assert len(bases) >= 3, bases
    assert all(uploaded < base / 5 for _, uploaded, base in bases), bases
    assert all(alternate(batch) == alternate(bases[0][0]) for batch, _, _ in bases), bases  # one line of bases


def test_the_copy_that_holds_the_base_writes_the_next_even_when_the_state_grew_past_it(tmp_path):
    """As while a bulk load runs: what the next base uploads is mostly new, yet the copy holding the stored base's
    files uploads only that, while the other would upload all of it again."""
    bases = bases_of_two_copies(tmp_path, EVERY_8_CALLS, alternate, new_keys_per_batch=KEYS // 8)
    assert [batch for batch, _, _ in bases] == [18, 28, 38], bases  # one call after the policy asks: no wait
    grown = [base - previous for (_, _, previous), (_, _, base) in zip([(0, 0, 0)] + bases, bases)][1:]
    assert all(uploaded < 1.5 * growth for (_, uploaded, _), growth in zip(bases[1:], grown)), (bases, grown)


def test_without_the_wait_the_other_copy_uploads_the_whole_database(tmp_path):
    """Why the wait exists: a copy with its own files (its own flushes and compactions) stores all of them again."""
    bases = bases_of_two_copies(tmp_path, SnapshotPolicy(max_changelogs=8, min_changelog_bytes=1 << 40,
                                                         wait_for_descendant=0.0), alternate)
    assert any(uploaded > base / 2 for _, uploaded, base in bases), bases


def test_a_copy_without_the_base_files_writes_the_base_once_the_chain_passes_the_wait(tmp_path):
    """The copy that wrote the first base is gone (its worker died): the other writes the next one, 16 changelogs
    after the base instead of 8, and starts a new line of bases."""
    bases = bases_of_two_copies(tmp_path, EVERY_8_CALLS, lambda batch: "a" if batch in (0, 8) else "b")
    waited = bases[0]
    assert waited[0] == 8 + 2 * EVERY_8_CALLS.max_changelogs + 1, bases
    assert waited[1] > waited[2] / 2, bases  # its own files: all uploaded
    assert all(uploaded < base / 5 for _, uploaded, base in bases[1:]), bases  # it descends from its own base
