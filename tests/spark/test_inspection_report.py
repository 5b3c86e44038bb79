"""The inspection's text and plot without Spark: a hand-made inspection (timers of both domains, one at
Long.MAX_VALUE) is described and drawn, and without matplotlib plotting says how to install it."""

from __future__ import annotations

import sys

import pytest

from keyedstate.errors import ConfigurationError
from keyedstate.spark import (
    KeyedStateInspection,
    KeyGroupSummary,
    LargestKey,
    StateSummary,
    StorageSummary,
    TimerSummary,
    plot_inspection,
)

LONG_MAX = (1 << 63) - 1


def inspection() -> KeyedStateInspection:
    return KeyedStateInspection(
        checkpoint="s3a://bucket/chk", batch_id=41, backend="rocksdb", num_key_groups=4, keys=3, state_bytes=700,
        states=(StateSummary("events", 2, 9, 600), StateSummary("count", 3, 3, 100)),
        timers=(TimerSummary("event_time", 3, 1_000, 5_000, 1, ((1_000, 3_001, 2), (3_001, 5_002, 1))),
                TimerSummary("processing_time", 1, LONG_MAX, LONG_MAX, 0, (), far_future=1)),
        key_groups=(KeyGroupSummary(0, 2, 650, 3, 90, 4_000, 300, 2), KeyGroupSummary(3, 1, 50, 1, 60, 1_000, 0, 0)),
        largest_keys=(LargestKey("'alice'", 0, 600, 10, 2), LargestKey("'bob'", 3, 50, 1, 1)),
        key_bytes_histogram=((32, 64, 2), (512, 1024, 1)),
        storage=StorageSummary(150, 5_000, 300, 2, ("/state/q/Fn",), 9, 7_000), watermark_ms=2_000,
        batch_timestamp_ms=1_700_000_000_000)


def test_the_text_names_every_part():
    text = inspection().describe()
    assert "batch 41, state backend rocksdb, 4 key groups" in text
    assert "keys: 3 in 2 key groups; state: 700 B; pending timers: 4" in text
    assert "event_time: 3, next due 1970-01-01 00:00:01.000Z, last 1970-01-01 00:00:05.000Z, 1 already due" in text
    assert f"processing_time: 1, next due {LONG_MAX} ms" in text and "after the year 9999        1" in text
    assert "'alice'" in text and "bases 5.0 kB, changelogs 300 B in 2 files" in text
    assert "in /state/q/Fn: 9 files, 7.0 kB (every retained version)" in text


def test_the_plot_is_a_png(tmp_path):
    path = tmp_path / "inspection.png"
    plot_inspection(inspection(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_plotting_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    from keyedstate.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if not installed
    with pytest.raises(ConfigurationError, match=r'pip install "keyedstate\[plot\]"'):
        plot_inspection(inspection(), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
    # the command says so before it starts Spark or reads anything
    assert main(["inspect", str(tmp_path / "no-checkpoint"), "--plot", str(tmp_path / "x.png")]) == 1
    assert 'pip install "keyedstate[plot]"' in capsys.readouterr().err
