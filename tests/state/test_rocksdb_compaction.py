"""RocksDB compaction and base snapshots: a batch changes a few keys spread over a key group's whole key range, and a
new base must upload about what changed, not the whole database again (issue 35: at most 10 MB per batch at 40M
keys). Level compaction merges such changes into every file below, so it is kept only as an option. And on Spark
each worker keeps its own copy of a key group: only a copy that holds the stored base's files writes the next base,
while the chain stays within the policy's wait, or the one that wrote (or downloaded) it, even after compaction
replaced its files."""

from __future__ import annotations

import os
import random
import time

import pytest
import rocksdict

from keyedstate import Types, ValueStateDescriptor
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.state.key_groups.copy_markers import BASE_FILE, mark_base
from keyedstate.state.key_groups.versioned import save_version
from keyedstate.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from keyedstate.state.rocksdb.db import DEFAULT_CF
from keyedstate.state.rocksdb.key_group_backend import KeyGroupRocksDBBackend
from keyedstate.state.rocksdb.versions import KeyGroupVersions, SnapshotPolicy

KEYS = 40_000
CHANGED_PER_BATCH = 40
BATCHES_PER_BASE = 8
REUSED = RocksDBOptions(reuse_existing=True)  # a worker's copy is opened again for each call


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
        settle_compactions(backend)
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


def settle_compactions(backend: KeyGroupRocksDBBackend, quiet_s: float = 0.05, timeout_s: float = 120.0) -> None:
    """Flush, then wait until no compaction has run for ``quiet_s``, so every call sees the files a machine with time
    to spare would: whether a compaction finishes within a call otherwise depends on the machine's load, and one
    that finishes a call later rewrites the files the next base would have shared. (RocksDB's "compaction-pending"
    stays set when universal compaction has nothing to pick, so only running compactions are watched.)"""
    backend.write_pending_values()
    database = backend._database.db
    for name in backend._database.column_families:
        (database if name == DEFAULT_CF else database.get_column_family(name)).flush(True)
    deadline = quiet_since = time.monotonic()
    deadline += timeout_s
    while time.monotonic() - quiet_since < quiet_s:
        assert time.monotonic() < deadline, "compactions still running"
        if database.property_int_value("rocksdb.num-running-compactions"):
            quiet_since = time.monotonic()
        time.sleep(0.01)


class LocalCopy:
    """One worker's copy of the key group, as on Spark's store: it catches up from the changelogs it missed, or is
    rebuilt from storage when it holds no version of the record's chain (and marks the base it downloaded, as the
    store does). ``marks_bases`` False: every mark of a base is lost."""

    def __init__(self, tmp_path, name: str, marks_bases: bool = True,
                 options: RocksDBOptions = REUSED) -> None:
        self.path = str(tmp_path / name)
        self.marks_bases = marks_bases
        self.backend = KeyGroupRocksDBBackend(tmp_path / f"idle-{name}", num_key_groups=1, options=options)
        self.value = self.backend.get_or_create_state(ValueStateDescriptor("value", Types.STRING()))
        self.tag = None

    def call(self, versions, record, batch: int, keys, rng: random.Random, policy: SnapshotPolicy):
        changelogs = versions.changelogs_after(record, self.tag) if record is not None else []
        if changelogs is None:
            changelogs = versions.restore(record, self.path)
            if self.marks_bases:
                mark_base(self.path, record)
        self.backend.open_key_group(self.path, record_changes=record is not None)
        for changelog in changelogs:
            self.backend.replay(changelog)
        for key in keys:
            self.backend.set_current_key(f"k{key:06d}")
            self.value.update(f"{rng.getrandbits(256):064x}")
        settle_compactions(self.backend)
        new, written = save_version(self.backend, versions, record, self.backend.take_changes(), batch, policy,
                                    100, self.path)
        if not self.marks_bases and os.path.exists(os.path.join(self.path, BASE_FILE)):
            os.remove(os.path.join(self.path, BASE_FILE))
        self.backend.close_key_group()
        self.tag = new.tag
        return new, written


# Bases by count only; the fill is a changelog, so the second copy builds its own files by replaying it.
EVERY_8_CALLS = SnapshotPolicy(max_changelogs=8, min_changelog_bytes=1 << 40)


class WithoutCompactions(RocksDBOptions):
    """No compaction runs: what a base uploads then depends only on which copy writes it, not on what compactions
    made of a state that grows every batch."""

    def build(self) -> rocksdict.Options:
        options = super().build()
        options.set_disable_auto_compactions(True)  # RocksDB then also skips its L0 write stalls
        return options


def bases_of_two_copies(tmp_path, policy: SnapshotPolicy, schedule, new_keys_per_batch=lambda batch: 0,
                        marks_bases: bool = True, options: RocksDBOptions = REUSED) -> list[tuple[int, int, int, str]]:
    """(batch, bytes uploaded, bytes of the base, copy) of each base after the first, the copies ``a`` and ``b``
    running the calls in the order ``schedule(batch)`` names them; every later batch changes a few keys, and adds
    ``new_keys_per_batch(batch)`` new ones."""
    versions = KeyGroupVersions(CheckpointStorage(tmp_path / "storage"), key_group=0, num_key_groups=1)
    copies = {name: LocalCopy(tmp_path, name, marks_bases, options) for name in "ab"}
    rng = random.Random(11)
    record, bases, next_key = None, [], KEYS
    for batch in range(48):
        keys = range(KEYS) if batch == 0 else rng.sample(range(KEYS), CHANGED_PER_BATCH)
        if batch and new_keys_per_batch(batch):
            keys = list(keys) + list(range(next_key, next_key + new_keys_per_batch(batch)))
            next_key += new_keys_per_batch(batch)
        previous = record
        record, written = copies[schedule(batch)].call(versions, record, batch, keys, rng, policy)
        if record.base_batch != (previous.base_batch if previous else None) and previous.base is not None:
            bases.append((batch, written, record.base_bytes, schedule(batch)))
    for local in copies.values():
        local.backend.close()
    return bases


def alternate(batch: int) -> str:
    return "ab"[batch % 2]


def test_a_base_waits_for_the_copy_that_holds_the_stored_base_and_uploads_what_changed(tmp_path):
    bases = bases_of_two_copies(tmp_path, EVERY_8_CALLS, alternate)
    assert len(bases) >= 3, bases
    assert all(uploaded < base / 5 for _, uploaded, base, _ in bases), bases
    assert len({copy for *_, copy in bases}) == 1, bases  # one line of bases


def test_the_copy_that_holds_the_base_writes_the_next_even_when_the_state_grew_past_it(tmp_path):
    """As while a bulk load runs: what the next base uploads is mostly new, yet the copy holding the stored base's
    files uploads only that, while the other would upload all of it again."""
    bases = bases_of_two_copies(tmp_path, EVERY_8_CALLS, alternate, new_keys_per_batch=lambda batch: KEYS // 8,
                                options=WithoutCompactions(reuse_existing=True))
    assert [batch for batch, *_ in bases] == [18, 28, 38], bases  # one call after the policy asks: no wait
    grown = [base - previous for (_, _, previous, _), (_, _, base, _) in zip([(0, 0, 0, "")] + bases, bases)][1:]
    assert all(uploaded < 1.5 * growth for (_, uploaded, _, _), growth in zip(bases[1:], grown)), (bases, grown)


def test_without_the_wait_the_other_copy_uploads_the_whole_database(tmp_path):
    """Why the wait exists: a copy with its own files (its own flushes and compactions) stores all of them again."""
    bases = bases_of_two_copies(tmp_path, SnapshotPolicy(max_changelogs=8, min_changelog_bytes=1 << 40,
                                                         wait_for_descendant=0.0), alternate)
    assert any(uploaded > base / 2 for _, uploaded, base, _ in bases), bases


def test_a_copy_without_the_base_files_writes_the_base_once_the_chain_passes_the_wait(tmp_path):
    """The copy that wrote the first base is gone (its worker died): the other writes the next one, 16 changelogs
    after the base instead of 8, and starts a new line of bases."""
    bases = bases_of_two_copies(tmp_path, EVERY_8_CALLS, lambda batch: "a" if batch in (0, 8) else "b")
    waited = bases[0]
    assert waited[0] == 8 + 2 * EVERY_8_CALLS.max_changelogs + 1, bases
    assert waited[1] > waited[2] / 2, bases  # its own files: all uploaded
    assert all(uploaded < base / 5 for _, uploaded, base, _ in bases[1:]), bases  # it descends from its own base


def bulk_load_past_a_base(batch: int) -> int:
    """New keys per batch: a base at batch 8, then four times its keys: universal compaction's size-amplification
    rule merges every sorted run, the base's files among them, as a bulk load does at 40M keys."""
    return 5_000 if batch <= 8 else 40_000 if batch <= 16 else 0


def test_after_compaction_replaced_the_base_files_the_copy_that_wrote_it_writes_the_next_at_once(tmp_path):
    """No copy holds the files of a base written during a bulk load any more: waiting for one would only lengthen
    the chain, so the copy that wrote the base writes the next one when the policy asks (whole, once)."""
    bases = bases_of_two_copies(tmp_path, EVERY_8_CALLS, alternate, bulk_load_past_a_base)
    assert (bases[0][0], bases[0][3]) == (18, "a"), bases  # one call after the policy asks, as without compaction
    assert bases[0][1] > bases[0][2] / 2, bases  # compaction left none of the base's files: all uploaded
    assert all(uploaded < base / 5 for _, uploaded, base, _ in bases[1:]), bases  # then the line holds


def test_without_knowing_which_copy_wrote_the_base_every_copy_waits_to_the_bound(tmp_path):
    bases = bases_of_two_copies(tmp_path, EVERY_8_CALLS, alternate, bulk_load_past_a_base, marks_bases=False)
    assert bases[0][0] == 8 + 2 * EVERY_8_CALLS.max_changelogs + 1, bases
    assert bases[0][1] > bases[0][2] / 2, bases  # as much uploaded, only later


def test_each_key_group_writes_its_bases_at_its_own_spread_bound(tmp_path):
    """Two key groups with the same history, as after a bulk load: the store asks each one's own bound."""
    policy = SnapshotPolicy(max_changelogs=8, min_changelog_bytes=1 << 40, spread=0.5)
    base_batches = {}
    for key_group in (1, 2):
        versions = KeyGroupVersions(CheckpointStorage(tmp_path / f"storage-{key_group}"), key_group=key_group,
                                    num_key_groups=4)
        local, rng, record = LocalCopy(tmp_path / str(key_group), "a", True), random.Random(5), None
        base_batches[key_group] = []
        for batch in range(24):
            keys = range(2_000) if batch == 0 else rng.sample(range(2_000), 20)
            previous = record
            record, _ = local.call(versions, record, batch, keys, rng, policy)
            if previous is not None and record.base_batch != previous.base_batch:
                base_batches[key_group].append(batch)
        local.backend.close()
        bound = 8 * policy.scale(key_group)
        cycle = next(count for count in range(1, 100) if count > bound)  # changelogs + 1 when a base is asked for
        assert base_batches[key_group][1] - base_batches[key_group][0] == cycle, (key_group, base_batches)
    assert base_batches[1] != base_batches[2], base_batches
