"""The large-state part of bench/RESULTS.md (issue 17): targets, table and plot from the run's spark.jsonl rows with
``workload == "large_state"`` (one per run, written by bench/test_large_state_bench.py).

The targets are defined at 200k and 4M keys of state; a run without those sizes (smoke) evaluates them at its
smallest and largest size and says so. transformWithStateInPandas's later batches do not grow with the state (its
state is in Spark's RocksDB state store, touched per changed key), so where it was not run at the large size its
figure at the largest size it ran stands in, labelled as such and drawn hollow in the plot.
"""

from __future__ import annotations

import statistics
from pathlib import Path

LABELS = {
    "heap": "keyed_process, row mode (heap)",
    "rocksdb": "keyed_process, RocksDB mode",
    "rocksdb_kg8": "keyed_process, RocksDB mode, num_key_groups=8 (tuned; not a target)",
    "rocksdb_s3": "keyed_process, RocksDB mode, state on a local S3-compatible server (S3Proxy)",
    "tws": "transformWithStateInPandas",
}
ORDER = ["heap", "rocksdb", "rocksdb_kg8", "rocksdb_s3", "tws"]
SMALL, LARGE = 200_000, 4_000_000
HUGE = 40_000_000  # issue 35's size: its own run (make bench-40m), with its own, tighter targets
S3_SIZE = 1_000_000  # issue 18's S3 target
# the row-mode figures the issue was opened with, shown when this run has no row-mode run at the large size
EARLIER_ROW_MODE = {"bytes": "354 MB", "memory": "1.0 GB"}


def large_state_runs(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """(variant, keys) -> the runs measured, in run order."""
    runs: dict[tuple[str, int], list[dict]] = {}
    for row in rows:
        if row.get("workload") == "large_state":
            runs.setdefault((row["variant"], row["keys"]), []).append(row)
    return runs


def _time(runs: list[dict]) -> float:
    return statistics.median(r["later_median_s"] for r in runs)


def _bytes(runs: list[dict]) -> float:
    return statistics.mean(r["durable_bytes_per_later_batch"] for r in runs)


def _memory(runs: list[dict]) -> float:
    return max(r["peak_worker_mb"] for r in runs)


def _changes(runs: dict) -> str:
    """Keys changed per later batch: one number, or one per size (the smoke size changes fewer)."""
    by_keys = {k: rs[0]["changes"] for (_, k), rs in sorted(runs.items(), key=lambda item: item[0][1])}
    if len(set(by_keys.values())) == 1:
        return f"{next(iter(by_keys.values())):,}"
    return ", ".join(f"{c:,} (of {k:,})" for k, c in by_keys.items())


def _sizes(runs: dict) -> tuple[int | None, int | None]:
    sizes = sorted({k for (v, k) in runs if v == "rocksdb"})
    if not sizes:
        return None, None
    return (SMALL if SMALL in sizes else sizes[0]), (HUGE if HUGE in sizes else LARGE if LARGE in sizes else sizes[-1])


def _later(run: dict) -> list[dict]:
    return run["batches"][run.get("fill_batches", 1):]


def _bases(run: dict) -> str:
    """How many bases the steady batches wrote and how many uploaded their whole database (runs that counted)."""
    if "steady_bases" not in run:
        return ""
    return (f"; those {run['steady_batches']} batches wrote {run['steady_bases']} bases, {run['steady_whole_bases']} "
            "of them uploading more than half of their database")


def huge_targets(runs: dict, small: int, large: int) -> list[dict]:
    """Issue 35: a later batch at 40M keys costs at most 1.2x its cost at 200k, in the same run, with at most 10 MB
    written durably per batch and Python workers under 600 MB; the fill time is reported."""
    rocks_large, rocks_small = runs[("rocksdb", large)], runs.get(("rocksdb", small))
    growth = rocks_small and small != large and _time(rocks_large) / _time(rocks_small)
    at = f"{large:,} keys"
    fill = statistics.median(r["fill_s"] for r in rocks_large)
    fill_batches = rocks_large[0].get("fill_batches", 1)
    steady = [r for r in rocks_large if r.get("steady_durable_bytes_per_batch") is not None]
    written = (statistics.mean(r["steady_durable_bytes_per_batch"] for r in steady) if steady
               else _bytes(rocks_large)) / 1e6
    return [
        bounded_target(f"RocksDB mode later-batch time, {at} vs {small:,} keys", growth or None, 1.2, True,
                       growth and f"{growth:.2f}x ({_time(rocks_large):.2f} s vs {_time(rocks_small):.2f} s, median "
                                  "later batch)", "<= 1.2x", "RocksDB mode time, 40M / 200k", why=WHY["growth"],
                       issue="35"),
        bounded_target(f"bytes written durably per later batch, RocksDB mode, {at}", written, 10, True,
                       f"{written:.2f} MB" + (f" (the last {steady[0]['steady_batches']} later batches, one base per "
                                              f"key group; {_bytes(rocks_large) / 1e6:.2f} MB over all "
                                              f"{steady[0]['later_batches']}, whose first bases also upload the "
                                              "fill's files merged once" + _bases(steady[0]) + ")" if steady else ""),
                       "<= 10 MB", "RocksDB mode durable MB / batch", why=WHY["bytes"], issue="35"),
        bounded_target(f"Python worker peak memory, RocksDB mode, {at}", _memory(rocks_large), 600, True,
                       f"{_memory(rocks_large):,.0f} MB", "< 600 MB", "RocksDB mode worker peak MB", strict=True,
                       why=WHY["memory"], issue="35"),
        {"issue": "35", "target": f"fill time, RocksDB mode, {at}", "goal": "report", "status": "reported",
         "measured": f"{fill:,.0f} s ({fill_batches} batches of {large // fill_batches:,} keys, "
                     f"{large / fill:,.0f} keys/s)", "value": None, "why": None},
    ]


WHY = {
    "growth": "RocksDB mode's later batch should cost what changed; growth with state means opening a key group's "
              "database, its compactions or a base snapshot got slower with its size.",
    "tws": "Each worker keeps its own copy of every key group's database open and catches up with the changelogs "
           "the other worker wrote (docs/rocksdb-mode-design.md), so a later batch costs ~128 calls of fixed work "
           "(a changelog file and the row written, missed changelogs read) plus the changed keys; a worker's first "
           "call of a key group, and copies behind a new base, rebuild from storage. transformWithStateInPandas "
           "pays per changed key (4 JVM round trips here). The tuned row (num_key_groups=8) shows the per-call "
           "share. Breakdown: bench/PROFILE-spark.md, RocksDB mode.",
    "bytes": "RocksDB mode writes a changelog per key group and batch and, every 64 changelogs or when they "
             "outgrow the base, a new base's new SSTs; more means bigger changelogs or bases written more often.",
    "s3": "A later batch writes one changelog object per changed key group (one PUT each), and a worker whose copy "
          "of a key group is behind reads the changelogs it missed (one GET each, usually one per call); more than "
          "local means those requests' latency adds up per call, or a base upload's multipart requests do. "
          "Keeping each changelog an executor's workers wrote on its local disk too would remove the GETs.",
    "memory": "A RocksDB-mode worker keeps its copies of the databases open within one block cache and one memtable "
              "budget (64 MiB each by default) plus one key group's elements; more means something is held across "
              "key groups.",
}


def bounded_target(text: str, value: float | None, threshold: float, at_most: bool, measured: str, goal: str,
            short: str, strict: bool = False, why: str | None = None, issue: str = "17") -> dict:
    """A target row in report.py's shape; ``score`` (>= 1: met) and ``label`` drive its targets plot."""
    if value is None:
        return {"issue": issue, "target": text, "measured": "-", "goal": goal, "status": "not measured in this run",
                "value": None, "threshold": threshold, "short": f"#{issue} {short}", "why": None}
    score = (threshold / value if value else float("inf")) if at_most else value / threshold
    met = (value < threshold if strict else value <= threshold) if at_most else value >= threshold
    off = abs(value / threshold - 1) * 100
    status = "met" if met else f"**missed** ({off:.0f}% {'over' if at_most else 'short'})"
    return {"issue": issue, "target": text, "measured": measured, "goal": goal, "status": status, "value": value,
            "threshold": threshold, "score": score, "short": f"#{issue} {short}",
            "label": f"{measured.split(' (')[0]} (target {goal})", "why": None if met else why}


def targets(rows: list[dict]) -> list[dict]:
    runs = large_state_runs(rows)
    small, large = _sizes(runs)
    if large is not None and large >= HUGE:
        return huge_targets(runs, small, large)
    rocks_large = runs.get(("rocksdb", large)) if large else None
    at = f"{large:,} keys" if large else f"{LARGE:,} keys"
    out = []
    growth = None
    if rocks_large and small != large:
        growth = _time(rocks_large) / _time(runs[("rocksdb", small)])
    pair = f"{large:,} keys vs {small:,} keys" if growth else f"{LARGE:,} keys vs {SMALL:,} keys"
    out.append(bounded_target(f"RocksDB mode later-batch time, {pair}", growth, 1.5, True,
                       growth and f"{growth:.2f}x ({_time(rocks_large):.2f} s vs "
                                  f"{_time(runs[('rocksdb', small)]):.2f} s, median later batch)",
                       "<= 1.5x", "RocksDB mode time, large / small state", why=WHY["growth"]))
    tws_sizes = sorted(k for (v, k) in runs if v == "tws")
    tws_at = large if large in tws_sizes else (tws_sizes[-1] if tws_sizes else None)
    speedup = None
    if rocks_large and tws_at:
        speedup = _time(runs[("tws", tws_at)]) / _time(rocks_large)
        stand_in = "" if tws_at == large else f"; tws not run at {large:,} keys, its {tws_at:,}-key figure stands in"
    out.append(bounded_target(f"RocksDB mode speed per later batch vs transformWithStateInPandas, {at}", speedup, 4,
                       False, speedup and f"{speedup:.2f}x (tws {_time(runs[('tws', tws_at)]):.2f} s vs "
                                          f"{_time(rocks_large):.2f} s, median later batch{stand_in})",
                       ">= 4x", "RocksDB mode vs TWS per batch", why=WHY["tws"]))
    heap_large = runs.get(("heap", large)) if large else None
    written = rocks_large and _bytes(rocks_large) / 1e6
    row_mode = (f"row mode {_bytes(heap_large) / 1e6:,.1f} MB in this run" if heap_large
                else f"row mode measured earlier: {EARLIER_ROW_MODE['bytes']}")
    out.append(bounded_target(f"bytes written durably per later batch, RocksDB mode, {at}", written, 10, True,
                       written is not None and f"{written:.2f} MB ({row_mode})", "<= 10 MB",
                       "RocksDB mode durable MB / batch", why=WHY["bytes"]))
    memory = rocks_large and _memory(rocks_large)
    row_mode = (f"row mode {_memory(heap_large):,.0f} MB in this run" if heap_large
                else f"row mode measured earlier: {EARLIER_ROW_MODE['memory']}")
    out.append(bounded_target(f"Python worker peak memory, RocksDB mode, {at}", memory, 600, True,
                       memory is not None and f"{memory:,.0f} MB ({row_mode})", "< 600 MB",
                       "RocksDB mode worker peak MB", strict=True, why=WHY["memory"]))
    s3_sizes = sorted(k for (v, k) in runs if v == "rocksdb_s3" and ("rocksdb", k) in runs)
    s3_at = S3_SIZE if S3_SIZE in s3_sizes else (s3_sizes[-1] if s3_sizes else None)
    on_s3 = s3_at and _time(runs[("rocksdb_s3", s3_at)]) / _time(runs[("rocksdb", s3_at)])
    out.append(bounded_target(f"RocksDB mode later-batch time, state on a local S3-compatible server vs the local file "
                       f"system, {s3_at or S3_SIZE:,} keys", on_s3 or None, 1.5, True,
                       on_s3 and f"{on_s3:.2f}x ({_time(runs[('rocksdb_s3', s3_at)]):.2f} s vs "
                                 f"{_time(runs[('rocksdb', s3_at)]):.2f} s, median later batch)",
                       "<= 1.5x", "RocksDB mode time, S3 / local", why=WHY["s3"], issue="18"))
    return out + [_inspector_target(runs)]


def _inspector_target(runs: dict) -> dict:
    """The checkpoint inspector's driver memory at the largest size it ran at (issue 33: bounded at 4M keys)."""
    measured = [(keys, variant, r) for (variant, keys), rs in runs.items() for r in rs if "inspect_s" in r]
    largest = max((keys for keys, _, _ in measured), default=None)
    text = f"checkpoint inspector, driver memory at {largest or 4_000_000:,} keys"
    if largest is None:
        return {"issue": "33", "target": text, "measured": "-", "goal": "report", "status": "not measured in this run",
                "value": None, "why": None}
    parts = [f"{LABELS[variant].split(', ')[-1]}: Python peak {r['inspect_driver_python_peak_mb']:.1f} MB, RSS growth "
             + ("-" if r.get("inspect_driver_rss_growth_mb") is None else f"{r['inspect_driver_rss_growth_mb']:.1f} MB")
             for keys, variant, r in sorted(measured, key=lambda item: item[1]) if keys == largest]
    return {"issue": "33", "target": text, "measured": "; ".join(parts), "goal": "report", "status": "reported",
            "value": None, "why": None}


def section(rows: list[dict], plot: bool) -> list[str]:
    title = ["## Large state (issues 17, 35)", ""]
    runs = large_state_runs(rows)
    if not runs:
        return title + ["Not measured in this run.", ""]
    batches = sorted({r["later_batches"] for rs in runs.values() for r in rs})
    split = sorted({(k, r.get("fill_batches", 1)) for (_, k), rs in runs.items() for r in rs
                    if r.get("fill_batches", 1) > 1})
    fill = "Batch 0 fills the keys" + "".join(f" ({k:,} keys: the first {n} batches, {k // n:,} keys each, event "
                                              "times ascending)" for k, n in split)
    lines = title + [
        f"`bench/test_large_state_bench.py` (workload: `bench/large_state_workload.py`): every key holds a ~80-byte "
        "ValueState record and ONE pending event-time timer (30 days after its event, so none fires). "
        f"{fill}; each of the {'/'.join(map(str, batches))} later batches changes {_changes(runs)} keys (new "
        "value, timer moved forward). One Parquet file per micro-batch, fed into the file source "
        "(maxFilesPerTrigger=1) only once the previous batch has finished, memory sink, `local[2]`, 4 shuffle "
        "partitions, RocksDB state store; every run is a fresh process and JVM with a fresh checkpoint.", "",
        "- **later batch s**: Spark's `durationMs.triggerExecution`, median over the later batches except the first "
        "(a warm-up).",
        "- **MB durable per later batch**: the files under the Spark checkpoint directory plus (RocksDB mode) the "
        "`state_storage` directory, sampled (path, inode, size) before the first later batch and after each batch "
        "while the query is idle; a new or replaced file counts whole, a grown file its growth, files deleted later "
        "still count. Summed over ALL later batches and divided by their number, so a base snapshot written in one "
        "of them is amortized. Not counted: files created and deleted between two samples, and background writes "
        "(Spark's state-store maintenance) landing after the last sample. The local RocksDB databases are not "
        "durable and not counted.",
        "- **Python worker peak MB**: the largest VmHWM (/proc/<pid>/status, 10^6 bytes) of the run's Spark Python "
        "processes (command line naming `pyspark.daemon` or `pyspark.worker`, descendants of the run's driver), "
        "sampled every second and after the last batch; it includes the fill.", "",
        "| keys of state | variant | fill s | later batch s (median) | later batches s | MB durable per later "
        "batch | of which state storage MB | largest batch MB | Python worker peak MB | load at start |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for keys in sorted({k for _, k in runs}):
        for variant in [v for v in ORDER if (v, keys) in runs]:
            rs = runs[(variant, keys)]
            later = [b["trigger_ms"] / 1000 for r in rs for b in _later(r)]
            largest = max(b["durable_bytes"] for r in rs for b in _later(r)) / 1e6
            storage = statistics.mean(r["storage_bytes_per_later_batch"] for r in rs) / 1e6
            later_s = ", ".join(f"{x:.2f}" for x in later)
            loads = ", ".join(f"{r['load']:.1f}" for r in rs)
            lines.append(f"| {keys:,} | {LABELS[variant]} | {statistics.median(r['fill_s'] for r in rs):.1f} | "
                         f"**{_time(rs):.2f}** | {later_s} | **{_bytes(rs) / 1e6:,.2f}** | {storage:,.2f} | "
                         f"{largest:,.2f} | **{_memory(rs):,.0f}** | {loads} |")
    lines.append("")
    large = max(k for _, k in runs)
    tws = sorted(k for v, k in runs if v == "tws")
    if tws and tws[-1] < large:
        lines += [f"transformWithStateInPandas was run up to {tws[-1]:,} keys (`LARGE_STATE_BENCH_TWS_SIZES`): filling "
                  "millions of keys through it takes about an hour, and its later batches do not grow with the state; "
                  f"its {tws[-1]:,}-key figure stands in for larger sizes in the targets.", ""]
    if plot:
        lines += ["![later-batch time against keys of state](large_state.png)", ""]
    return lines + _inspector(runs)


def _inspector(runs: dict) -> list[str]:
    """The checkpoint inspector's driver memory on the same checkpoints (issue 33; bench/inspect_memory.py)."""
    measured = [(keys, variant, r) for (variant, keys), rs in sorted(runs.items(), key=lambda item: item[0][1])
                for r in rs if "inspect_s" in r]
    if not measured:
        return []
    lines = ["### Checkpoint inspector (issue 33)", "",
             "`inspect_keyed_state` on the run's checkpoint after its last measured batch, in the run's driver "
             "process: **driver Python peak MB** is tracemalloc's peak of the Python heap while it runs, **driver "
             "RSS growth MB** the process's peak resident memory (VmHWM, reset before it starts) minus its resident "
             "memory before. The JVM (in local mode the driver and the executors) is not included. The inspector "
             "checks that it found every key and timer.", "",
             "| keys of state | variant | inspect s | driver Python peak MB | driver RSS growth MB | key groups | "
             "state MB |", "|---:|---|---:|---:|---:|---:|---:|"]
    for keys, variant, r in measured:
        growth = r.get("inspect_driver_rss_growth_mb")
        lines.append(f"| {keys:,} | {LABELS[variant]} | {r['inspect_s']:.1f} | "
                     f"**{r['inspect_driver_python_peak_mb']:.1f}** | {'-' if growth is None else f'{growth:.1f}'} | "
                     f"{r['inspect_key_groups']} | {r['inspect_state_bytes'] / 1e6:,.1f} |")
    return lines + [""]


def plot(rows: list[dict], path: Path) -> bool:
    """Median later-batch seconds against keys of state per variant (log-log); hollow = a smaller size standing in."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = large_state_runs(rows)
    sizes = sorted({k for _, k in runs})
    if not sizes:
        return False
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for variant in ORDER:
        points = [(k, _time(runs[(variant, k)])) for k in sizes if (variant, k) in runs]
        if not points:
            continue
        line, = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=LABELS[variant])
        if points[-1][0] < sizes[-1]:
            ax.plot([points[-1][0], sizes[-1]], [points[-1][1]] * 2, linestyle=":", color=line.get_color())
            ax.plot([sizes[-1]], [points[-1][1]], marker="o", mfc="white", color=line.get_color())
            ax.annotate(f"{points[-1][0]:,} keys stands in,\nnot measured", (sizes[-1], points[-1][1]),
                        textcoords="offset points", xytext=(6, -4), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{k:,}" for k in sizes])
    ax.minorticks_off()
    ax.set_xlim(sizes[0] / 1.6, sizes[-1] * 3)
    ax.set_xlabel("keys of state (one ValueState record and one pending timer each)")
    ax.set_ylabel("later batch s (median triggerExecution)")
    ax.set_title(f"large state, keys changed per later batch: {_changes(runs)}", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
