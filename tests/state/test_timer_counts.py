"""The timer counts kept beside a key group's local databases (keyedstate.state.key_groups.timer_counts): a count is
used only for the version it was written for, and a damaged file reads as no count (the next call scans)."""

from __future__ import annotations

from keyedstate.state.key_groups.timer_counts import read_timer_counts, write_timer_counts


def test_a_count_is_read_back_only_for_its_version(tmp_path):
    path = str(tmp_path / "kg-00001.timer-counts")
    write_timer_counts(path, "a1b2c3d4e5f60718", (123_456_789, 7))
    assert read_timer_counts(path, "a1b2c3d4e5f60718") == (123_456_789, 7)
    assert read_timer_counts(path, "ffffffffffffffff") is None


def test_a_shorter_count_overwrites_a_longer_one_whole(tmp_path):
    path = str(tmp_path / "counts")
    write_timer_counts(path, "first-version-tag", (10**15, 10**15))
    write_timer_counts(path, "v2", (1, 0))
    assert read_timer_counts(path, "v2") == (1, 0)
    assert read_timer_counts(path, "first-version-tag") is None


def test_a_torn_or_damaged_file_reads_as_no_count(tmp_path):
    path = tmp_path / "counts"
    write_timer_counts(str(path), "tag", (40, 2))
    data = bytearray(path.read_bytes())
    data[data.index(b"40")] = ord("9")  # another count under the same tag, as two interleaved writes could leave
    path.write_bytes(bytes(data))
    assert read_timer_counts(str(path), "tag") is None
    path.write_bytes(b"tag 40 2")  # no checksum
    assert read_timer_counts(str(path), "tag") is None
    assert read_timer_counts(str(tmp_path / "missing"), "tag") is None


def test_a_count_that_cannot_be_written_is_skipped(tmp_path):
    write_timer_counts(str(tmp_path / "no-such-directory" / "counts"), "tag", (1, 1))  # best effort: no error
    write_timer_counts(str(tmp_path / "counts"), "t" * 200, (1, 1))  # too long for the record: not written
    assert not (tmp_path / "counts").exists()
