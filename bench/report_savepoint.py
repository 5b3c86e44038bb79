"""The savepoint part of bench/RESULTS.md (issue 31): one row per size from the run's spark.jsonl rows with
``workload == "savepoint"`` (written by bench/test_savepoint_bench.py): fill, savepoint write and restore time,
savepoint size, and the target restore <= 2x fill."""

from __future__ import annotations

TARGET_RATIO = 2.0


def section(rows: list[dict]) -> list[str]:
    runs = sorted((r for r in rows if r.get("workload") == "savepoint"), key=lambda r: r["keys"])
    if not runs:
        return []
    lines = ["## Savepoints (RocksDB mode)", "",
             "`bench/savepoint_workload.py`: the large-state workload's keys (one ~80-byte value and one pending "
             "timer each) filled in one batch, then `write_savepoint` of the stopped query, then a new query from "
             "the savepoint whose first batch (10,000 changed keys) restores every key group. Target: restore <= "
             f"{TARGET_RATIO:g}x fill.", "",
             "| keys | fill (1 batch) | savepoint write | restore (1st batch) | restore / fill | savepoint size "
             "| target |",
             "|---:|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        met = "met" if r["restore_to_fill"] <= TARGET_RATIO else "**missed**"
        lines.append(f"| {r['keys']:,} | {r['fill_s']:.1f} s | {r['write_s']:.1f} s | {r['restore_s']:.1f} s | "
                     f"{r['restore_to_fill']:.2f} | {r['savepoint_bytes'] / 1e6:.1f} MB | {met} |")
    return lines + [""]
