"""The files beside RocksDB's own in a key group's local database (keyedstate.state.key_groups.copy_markers): the
mark of the stored base a copy wrote or downloaded decides which copy writes the next base, and never fails a call."""

from __future__ import annotations

from keyedstate.checkpoint.manifest import FileEntry
from keyedstate.state.key_groups.copy_markers import holds_base, mark_base
from keyedstate.state.rocksdb.version_record import VersionRecord


def version_on_base(name: str) -> VersionRecord:
    return VersionRecord("tag", FileEntry(f"kg-00001/{name}", name, 100, "0" * 64), 8, 100)


def test_a_copy_holds_the_base_it_was_marked_with_and_no_other(tmp_path):
    mark_base(str(tmp_path), version_on_base("b000000000008-aa.json"))
    assert holds_base(str(tmp_path), version_on_base("b000000000008-aa.json"))
    assert not holds_base(str(tmp_path), version_on_base("b000000000072-bb.json"))
    assert not holds_base(str(tmp_path), VersionRecord("tag", None, None, 0))  # changelogs only: no base to hold
    assert not holds_base(str(tmp_path / "elsewhere"), version_on_base("b000000000008-aa.json"))


def test_a_mark_that_cannot_be_written_leaves_nothing_and_raises_nothing(tmp_path):
    (tmp_path / "KEYEDSTATE-BASE").mkdir()  # in the way, as a full or read-only disk would be
    mark_base(str(tmp_path), version_on_base("b000000000008-aa.json"))
    assert not holds_base(str(tmp_path), version_on_base("b000000000008-aa.json"))
    assert [path.name for path in tmp_path.iterdir()] == ["KEYEDSTATE-BASE"]  # no temporary file left
    mark_base(str(tmp_path / "removed"), version_on_base("b000000000008-aa.json"))  # the directory is gone
    assert not (tmp_path / "removed").exists()
