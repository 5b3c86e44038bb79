"""The latency part of bench/RESULTS.md (issue 35): its targets, its table and its plot of latency against rate,
from the latency suite's one benchmark (``bench/test_latency_bench.py``)."""

from __future__ import annotations

import statistics
from pathlib import Path

from report_large_state import bounded_target
from report_sections import find_bench

#: (ratio key in the suite's extra_info, limit, target text, short name)
RATIO_TARGETS = (
    ("heap at-least-once / floor at-least-once [p99]", 1.5,
     "keyed_process heap at-least-once p99 latency vs the at-least-once floor's", "latency heap / floor (ALO)"),
    ("heap exactly-once / floor exactly-once [p99]", 1.5,
     "keyed_process heap exactly-once p99 latency vs the exactly-once floor's", "latency heap / floor (EO)"),
    ("rocksdb at-least-once / heap at-least-once [p99]", 1.2,
     "keyed_process RocksDB mode p99 latency vs heap's (at-least-once)", "latency RocksDB / heap"),
)

WHY = ("keyed_process pays a fixed cost per micro-batch above the floor (a Python call per key group with data, "
       "state rows read and written for each, and the stateful stage's shuffle), so its batches take longer and "
       "events wait longer for the next one. Much of that cost is Spark's stateful operator itself: no design on "
       "Spark's API gets below a hand-written applyInPandasWithState function with one Spark group per task, about "
       "2x the floor's p99 at the pipeline's 4 shuffle partitions (bench/PROFILE-spark.md, last section). "
       "docs/operations.md, \"Tuning\", lists what sets it.")
WHY_ROCKSDB = ("RocksDB mode writes a changelog per key group and batch, and in a new query each Python worker that "
               "runs a key group opens its own copy of the key group's database on its first call (about 12 ms): "
               "with the Python sink, local[2] runs four such workers, so a 30-second run pays up to 512 opens of its "
               "128 key groups while it is measured. docs/rocksdb-mode-design.md, \"A copy per worker process\".")


def _info(run: dict) -> dict:
    bench = find_bench(run, "latency", "test_latency_interleaved")
    return (bench or {}).get("extra_info", {})


def targets(run: dict) -> list[dict]:
    info = _info(run)
    top = max(info.get("rates") or [10_000])
    out = []
    for name, limit, text, short in RATIO_TARGETS:
        r = info.get("ratios", {}).get(name)
        value = r and r["median"]
        out.append(bounded_target(f"{text}, {top:,} events/s", value, limit, True,
                           value is not None and f"{value:.2f}x (median of {len(r['rounds'])} rounds)",
                           f"<= {limit:g}x", short, why=WHY_ROCKSDB if name.startswith("rocksdb") else WHY,
                           issue="35"))
    rounds = info.get("rounds") or []
    kept = [run_ for r in rounds for run_ in r.values()]
    behind = sorted({f"{run_['variant']} @ {run_['rate']:,}/s" for run_ in kept if not run_["kept_up"]})
    measured = kept and (f"all {len(kept)} runs kept up" if not behind else f"fell behind: {'; '.join(behind)}")
    out.append({"issue": "35", "target": "every latency run keeps up with its rate", "measured": measured or "-",
                "goal": "all",
                "status": ("met" if not behind else "**missed**") if kept else "not measured in this run",
                "value": None, "why": None})
    return out


def _by_pair(rounds: list[dict]) -> dict[str, list[dict]]:
    pairs: dict[str, list[dict]] = {}
    for r in rounds:
        for name, result in r.items():
            pairs.setdefault(name, []).append(result)
    return pairs


def _median(results: list[dict], metric: str) -> float | None:
    values = [r[metric] for r in results if r.get(metric) is not None]
    return statistics.median(values) if values else None


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def section(run: dict, plot: bool) -> list[str]:
    title = ["## Latency, Kafka to Kafka (issue 35)", ""]
    info = _info(run)
    rounds = info.get("rounds")
    if not rounds:
        return title + ["Not measured in this run.", ""]
    lines = title + [
        f"Events over {info['keys']:,} keys sent at a steady rate into a 4-partition topic, read by the "
        "keyedstate-kafka source, written one output per input by the keyedstate-kafka sink; latency = arrival at a "
        "read_committed consumer minus send time, over the events sent after the first "
        f"{info['warmup_s']:g} s of each {info['warmup_s'] + info['seconds']:g}-second run. `local[2]`, 4 shuffle "
        "partitions and 128 key groups unless the pipeline says otherwise; the floor is a projection-only query "
        "on the same source and sink. Medians over the rounds of each run's figures "
        f"({len(rounds)} interleaved rounds). Workload: `bench/latency_workload.py`.", "",
        "| pipeline | rate (events/s) | p50 | p95 | p99 | median batch | kept up |",
        "|---|---:|---:|---:|---:|---:|---|"]
    for results in _by_pair(rounds).values():
        first = results[0]
        kept = "yes" if all(r["kept_up"] for r in results) else "**no**"
        lines.append(f"| {first['variant']} | {first['rate']:,} | {_seconds(_median(results, 'p50'))} | "
                     f"{_seconds(_median(results, 'p95'))} | {_seconds(_median(results, 'p99'))} | "
                     f"{_seconds(_median(results, 'median_batch_s'))} | {kept} |")
    lines += _explained(info.get("ratios") or {}, max(info.get("rates") or [10_000]))
    if plot:
        lines += ["", "![p50 and p99 latency against event rate](latency.png)"]
    return lines + [""]


#: (ratio key, what it says) of the ratios that explain the heap / floor target
EXPLAINING = (
    ("bare 4 buckets / floor at-least-once [p99]",
     "the ceiling of Spark's API at the pipeline's 4 shuffle partitions: a hand-written applyInPandasWithState count "
     "over 4 buckets (one Spark group per task), against the floor"),
    ("bare 4 buckets exactly-once / floor exactly-once [p99]",
     "the same ceiling with the exactly-once sink, against the exactly-once floor"),
    ("bare 2 buckets, one per shuffle partition of 2 / floor at-least-once [p99]",
     "the ceiling of Spark's API with one task per core: the hand-written function over 2 buckets, one on each of "
     "2 shuffle partitions, against the floor"),
    ("bare 2 buckets, one per shuffle partition of 2, exactly-once / floor exactly-once [p99]",
     "the same with the exactly-once sink, against the exactly-once floor"),
    # runs before the bare function grouped by balanced values: its buckets 0 and 1 hashed to the same partition
    ("bare 2 buckets, 2 shuffle partitions / floor at-least-once [p99]",
     "the hand-written function over 2 buckets on 2 shuffle partitions, both buckets in one partition (one task "
     "ran both, the other none), against the floor"),
    ("bare 2 buckets, 2 shuffle partitions exactly-once / floor exactly-once [p99]",
     "the same with the exactly-once sink, against the exactly-once floor"),
    ("heap 8 key groups, 2 shuffle partitions / floor at-least-once [p99]",
     "keyed_process heap tuned for latency (8 key groups, 2 shuffle partitions), against the floor"),
    ("heap 8 key groups, 2 shuffle partitions exactly-once / floor exactly-once [p99]",
     "the same with the exactly-once sink, against the exactly-once floor"),
    ("heap at-least-once / bare 128 buckets [p99]",
     "what keyedstate adds: keyed_process heap against the hand-written function over as many buckets as it has key "
     "groups"),
    ("heap at-least-once / heap without progress metrics [p99]",
     "what the progress metrics (on by default) cost: keyed_process heap with them against without"),
)


def _explained(ratios: dict, top: int) -> list[str]:
    lines = [f"- {text}: p99 {r['median']:.2f}x (median of {len(r['rounds'])} rounds, {top:,} events/s)"
             for name, text in EXPLAINING if (r := ratios.get(name))]
    return ["", "What the heap / floor ratio is made of:", ""] + lines if lines else []


def plot_latency(run: dict, path: Path) -> bool:
    """p50 (dashed) and p99 (solid) latency against rate for each pipeline measured at more than one rate; the
    others as single points at their rate."""
    rounds = _info(run).get("rounds")
    if not rounds:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_variant: dict[str, list[tuple[int, float | None, float | None]]] = {}
    for results in _by_pair(rounds).values():
        by_variant.setdefault(results[0]["variant"], []).append(
            (results[0]["rate"], _median(results, "p50"), _median(results, "p99")))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for index, (variant, points) in enumerate(sorted(by_variant.items())):
        points.sort()
        color = f"C{index % 10}"
        rates = [p[0] for p in points]
        marker = "os^D"[index // 10 % 4]  # the color cycle has 10 colors: the marker tells variants 11-20 apart
        style = marker if len(points) == 1 else marker + "-"
        ax.plot(rates, [p[2] for p in points], style, color=color, label=f"{variant} (p99)")
        ax.plot(rates, [p[1] for p in points], style.replace("-", "--"), color=color, alpha=0.5, markersize=4)
    ax.set_xscale("log")
    ax.set_xlabel("events per second (log)")
    ax.set_ylabel("latency, seconds (p99 solid, p50 dashed)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: it hid points
    ax.set_title("end-to-end latency, Kafka to Kafka, one run of make bench")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True
