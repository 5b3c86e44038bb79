"""Which local versions a committed version record lets catch up (its chain, and right after a new base, the bridge
from the previous chain), and that the record survives its byte form."""

from __future__ import annotations

import hashlib

import msgpack
import pytest

from keyedstate.checkpoint.manifest import FileEntry
from keyedstate.errors import SnapshotCorruptedError
from keyedstate.state.rocksdb import version_record
from keyedstate.state.rocksdb.version_record import BRIDGE_LENGTH, VersionRecord


def changelog(batch: int, tag: str) -> FileEntry:
    name = f"c{batch:012d}-{tag}.log"
    return FileEntry(f"kg-00003/{name}", name, 10 + batch, hashlib.sha256(name.encode()).hexdigest())


def base(batch: int, tag: str) -> FileEntry:
    name = f"b{batch:012d}-{tag}.json"
    return FileEntry(f"kg-00003/{name}", name, 100, hashlib.sha256(name.encode()).hexdigest())


def chain(length: int, start: int = 0) -> VersionRecord:
    """A record whose base was written at batch ``start`` (tag b<start>), then ``length`` changelogs (tags t<batch>)."""
    record = VersionRecord(f"b{start}", base(start, f"b{start}"), start, 100)
    for batch in range(start + 1, start + 1 + length):
        record = record.with_changelog(f"t{batch}", changelog(batch, f"t{batch}"))
    return record


def next_base(record: VersionRecord, batch: int) -> VersionRecord:
    bridge_from, bridge = record.bridge_to_next_base(changelog(batch, f"b{batch}"))
    return VersionRecord(f"b{batch}", base(batch, f"b{batch}"), batch, 100, (), ((record.base_batch, batch),),
                         bridge_from=bridge_from, bridge=bridge)


def names(entries) -> list[str]:
    return [entry.name.split("-")[1].split(".")[0] for entry in entries]


def test_a_version_of_the_chain_replays_the_changelogs_after_it():
    record = chain(3)
    assert names(record.changelogs_from("b0")) == ["t1", "t2", "t3"]
    assert names(record.changelogs_from("t1")) == ["t2", "t3"]
    assert names(record.changelogs_from("t3")) == []
    assert record.changelogs_from("elsewhere") is None and record.changelogs_from(None) is None


def test_after_a_new_base_a_version_of_the_previous_chain_replays_the_bridge_then_the_new_changelogs():
    record = next_base(chain(3), 4).with_changelog("t5", changelog(5, "t5"))
    assert names(record.changelogs_from("b0")) == ["t1", "t2", "t3", "b4", "t5"]
    assert names(record.changelogs_from("t2")) == ["t3", "b4", "t5"]
    assert names(record.changelogs_from("b4")) == ["t5"]  # the base's own version: only the new chain


def test_the_bridge_names_the_last_changelogs_of_a_long_chain_from_the_version_before_them():
    record = next_base(chain(BRIDGE_LENGTH + 5), 100)
    first_named = 5 + 1  # t1..t5 are older than the bridge
    assert record.bridge_from == "t5" and len(record.bridge) == BRIDGE_LENGTH + 1
    assert names(record.changelogs_from("t5")) == [f"t{b}" for b in range(first_named, BRIDGE_LENGTH + 6)] + ["b100"]
    assert record.changelogs_from("t4") is None and record.changelogs_from("b0") is None  # too far behind: rebuild


def test_the_bridge_is_named_for_bridge_length_changelogs_after_the_base_then_dropped():
    record = next_base(chain(2), 3)
    for batch in range(4, 4 + BRIDGE_LENGTH):
        record = record.with_changelog(f"t{batch}", changelog(batch, f"t{batch}"))
    assert record.bridge and record.changelogs_from("t1") is not None
    record = record.with_changelog("last", changelog(99, "last"))
    assert record.bridge == () and record.bridge_from == "" and record.changelogs_from("t1") is None


def test_a_chain_that_started_from_no_state_bridges_from_its_changelogs():
    record = VersionRecord("t1", None, None, 0, (changelog(1, "t1"),)).with_changelog("t2", changelog(2, "t2"))
    bridge_from, bridge = record.bridge_to_next_base(changelog(3, "b3"))
    assert bridge_from == "" and names(bridge) == ["t1", "t2", "b3"]
    after = VersionRecord("b3", base(3, "b3"), 3, 100, bridge_from=bridge_from, bridge=bridge)
    assert names(after.changelogs_from("t1")) == ["t2", "b3"] and after.changelogs_from("") is None


@pytest.mark.parametrize("record", [chain(3), next_base(chain(3), 4),
                                    VersionRecord("x", None, None, 0, (changelog(1, "x"),), origin="bootstrap-1")],
                         ids=["chain", "with-bridge", "with-origin"])
def test_a_record_survives_its_byte_form(record):
    data = record.to_bytes()
    version_record._RECENT.clear()  # decode the bytes, not the record remembered when they were encoded
    decoded = VersionRecord.from_bytes(data)
    assert decoded == record and decoded is not record


def test_the_record_a_call_encoded_is_not_decoded_again_by_the_next_call():
    record = next_base(chain(3), 4)
    assert VersionRecord.from_bytes(record.to_bytes()) is record
    assert len(version_record._RECENT) <= version_record._RECENT_LIMIT


def test_a_record_without_bridge_or_origin_keeps_the_nine_fields_it_always_had():
    assert len(msgpack.unpackb(chain(3).to_bytes())) == 9


def test_a_record_with_unknown_fields_is_refused_as_corrupt():
    fields = msgpack.unpackb(next_base(chain(1), 2).to_bytes()) + ["from a newer keyedstate"]
    with pytest.raises(SnapshotCorruptedError, match="at most 12"):
        VersionRecord.from_bytes(msgpack.packb(fields, use_bin_type=True))
