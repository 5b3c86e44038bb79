"""The Spark part of bench/RESULTS.md: tables, target ratios and the scaling plot, from the run's spark.jsonl.

spark.jsonl has one line per measured round (written by bench/test_spark_bench.py). Variants the profile does not
run at 2M (per_key, PyFlink in the default profile) are shown as "not measured" with a linear projection from the
200k round (their cost is per key and per event, and the keys grow with the events); a projection is never mixed
into a measured column and is drawn hollow in the plot.
"""

from __future__ import annotations

import statistics
from pathlib import Path

LABELS = {
    "keyed_process": "keyed_process (128 key groups)",
    "keyed_process_rocksdb": "keyed_process, state_backend=\"rocksdb\" (128 key groups)",
    "bucketed": "hand-written applyInPandasWithState, 128 buckets",
    "per_key": "hand-written applyInPandasWithState per key",
    "tws": "transformWithStateInPandas",
    "pyflink": "PyFlink KeyedProcessFunction (local mode)",
}
ORDER = ["bucketed", "keyed_process", "keyed_process_rocksdb", "tws", "per_key", "pyflink"]
SMALL, LARGE = 200_000, 2_000_000
# why a variant is left out at 2M by default; shown only when it was not measured
NOT_AT_2M = {
    "per_key": "left out of the default profile (`make bench-full` runs it): Spark's per-group overhead is linear "
               "in keys",
    "pyflink": "left out of the default profile (`make bench-full` runs it, over an hour): PyFlink's per-key "
               "gRPC state access is linear in events",
}


def count_rounds(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """(variant, events) -> the rounds measured, in run order."""
    rounds: dict[tuple[str, int], list[dict]] = {}
    for row in rows:
        if row.get("workload") in ("count", "flink"):
            rounds.setdefault((row["variant"], row["events"]), []).append(row)
    return rounds


def _median(rounds: list[dict]) -> float:
    return statistics.median(r["wall_s"] for r in rounds)


def target_size(rounds: dict) -> int | None:
    """The size the targets are defined at (200k); a smoke run falls back to its largest Spark size."""
    sizes = sorted({e for (v, e) in rounds if v != "pyflink"})
    if not sizes:
        return None
    return SMALL if SMALL in sizes else sizes[-1]


def target_ratios(rounds: dict, size: int | None = None) -> dict[str, dict]:
    """variant -> {median, best}: the variant's seconds over keyed_process's, at ``size`` (default: the target size)."""
    size = size or target_size(rounds)
    kp = rounds.get(("keyed_process", size))
    out: dict[str, dict] = {}
    if not kp:
        return out
    for variant in ("tws", "per_key", "bucketed", "pyflink", "keyed_process_rocksdb"):
        other = rounds.get((variant, size))
        if other:
            paired = _interleaved_ratio(other, kp)
            out[variant] = {"median": _median(other) / _median(kp) if paired is None else paired,
                            "best": min(r["wall_s"] for r in other) / min(r["wall_s"] for r in kp),
                            "events": size, "interleaved": paired is not None}
    return out


def _interleaved_ratio(other: list[dict], kp: list[dict]) -> float | None:
    """The median of per-round ratios where both ran in the same interleaved rounds: the machine's drift between
    minutes then cancels out of each ratio."""
    ours = {r["interleaved_round"]: r["wall_s"] for r in kp if "interleaved_round" in r}
    theirs = {r["interleaved_round"]: r["wall_s"] for r in other if "interleaved_round" in r}
    common = sorted(ours.keys() & theirs.keys())
    return statistics.median(theirs[i] / ours[i] for i in common) if common else None


def _fmt_loads(rounds: list[dict]) -> str:
    return ", ".join(f"{r['load']:.1f}" for r in rounds)


def _fmt_rounds(rounds: list[dict]) -> str:
    return ", ".join(f"{r['wall_s']:.1f}" for r in rounds)


def count_tables(rounds: dict) -> list[str]:
    lines: list[str] = []
    sizes = sorted({e for (v, e) in rounds if v != "pyflink" or e >= SMALL} | ({LARGE} if any(
        e == SMALL for _, e in rounds) else set()))
    for events in sizes:
        present = [v for v in ORDER if (v, events) in rounds]
        keys = next((rounds[(v, events)][0]["keys"] for v in present), events // 4)
        kp = rounds.get(("keyed_process", events))
        lines += [f"#### {events:,} events over {keys:,} keys\n",
                  "| variant | median s | best s | all rounds (s) | addBatch s (best) | events/s (median) | "
                  "variant s / keyed_process s (median) | load at start |",
                  "|---|---:|---:|---|---:|---:|---:|---|"]
        for variant in sorted(present, key=lambda v: _median(rounds[(v, events)])):
            rs = rounds[(variant, events)]
            med = _median(rs)
            best = min(rs, key=lambda r: r["wall_s"])
            add = best.get("addBatch_s")
            ratio = f"{med / _median(kp):.2f}" if kp else "-"
            lines.append(f"| {LABELS[variant]} | {med:.1f} | {best['wall_s']:.1f} | {_fmt_rounds(rs)} | "
                         f"{'-' if add is None else f'{add:.1f}'} | {events / med:,.0f} | {ratio} | "
                         f"{_fmt_loads(rs)} |")
        if events == LARGE:
            for variant in ORDER:
                small = rounds.get((variant, SMALL))
                if (variant, LARGE) in rounds or not small:
                    continue
                projected = _median(small) * LARGE / SMALL
                ratio = f"~{projected / _median(kp):.1f} (extrapolated)" if kp else "-"
                lines.append(f"| {LABELS[variant]} | not measured; ~{projected:,.0f} extrapolated (10 x the 200k "
                             f"median) | - | - | - | ~{LARGE / projected:,.0f} (extrapolated) | {ratio} | - |")
        lines.append("")
        not_measured = [v for v in ORDER if events == LARGE and (v, LARGE) not in rounds and (v, SMALL) in rounds]
        for variant in not_measured:
            lines.append(f"- {LABELS[variant]} at 2M: {NOT_AT_2M.get(variant, 'not selected in this run')}.")
        if not_measured:
            lines.append("")
    flink_smoke = rounds.get(("pyflink", 2_000))
    if flink_smoke:
        lines += [f"PyFlink's fixed cost per job (mini-cluster and Python harness start), measured with 2,000 "
                  f"events: {_fmt_rounds(flink_smoke)} s.", ""]
    return lines


def heavy_table(rows: list[dict]) -> list[str]:
    heavy = [r for r in rows if r.get("workload") == "heavy"]
    if not heavy:
        return []
    lines = ["| variant | keys x entries | touches per key and batch | batch 0 (fill) s | median later batch s | "
             "later batches s | load at start |", "|---|---|---:|---:|---:|---|---:|"]
    for r in heavy:
        later = [b["trigger_ms"] / 1000 for b in r["batches"][1:]]
        lines.append(f"| {LABELS.get(r['variant'], r['variant'])} | {r['keys']} x {r['entries']:,} | "
                     f"{r['touches']:,} | {r['batches'][0]['trigger_ms'] / 1000:.2f} | "
                     f"{statistics.median(later) if later else float('nan'):.2f} | "
                     f"{', '.join(f'{x:.2f}' for x in later)} | {r['load']:.1f} |")
    return lines + [""]


def heavy_summary(rows: list[dict]) -> str | None:
    """The state-heavy comparison: median later-batch seconds of both variants and TWS's over keyed_process's."""
    medians = {}
    for r in rows:
        if r.get("workload") == "heavy" and len(r["batches"]) > 1:
            medians[r["variant"]] = statistics.median(b["trigger_ms"] for b in r["batches"][1:])
    if "keyed_process" in medians and "tws" in medians:
        kp, tws = medians["keyed_process"] / 1000, medians["tws"] / 1000
        return f"keyed_process {kp:.2f} s vs TWS {tws:.2f} s per batch (median later batch): TWS / keyed_process = " \
               f"{tws / kp:.2f}x"
    return None


def plot_scaling(rounds: dict, path: Path) -> bool:
    """events/s (median round) per variant at every measured size; hollow markers = extrapolated, not measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({e for (v, e) in rounds if v != "pyflink" or e >= SMALL})
    if not sizes:
        return False
    fig, ax = plt.subplots(figsize=(10, 5))
    for variant in ORDER:
        points = [(e, e / _median(rounds[(variant, e)])) for e in sizes if (variant, e) in rounds]
        if not points:
            continue
        line, = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=LABELS[variant])
        if (variant, SMALL) in rounds and (variant, LARGE) not in rounds:
            x0, y0 = SMALL, SMALL / _median(rounds[(variant, SMALL)])
            ax.plot([x0, LARGE], [y0, y0], linestyle=":", color=line.get_color())
            ax.plot([LARGE], [y0], marker="o", mfc="white", color=line.get_color())
            ax.annotate("extrapolated,\nnot measured", (LARGE, y0), textcoords="offset points", xytext=(6, -4),
                        fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = sorted(set(sizes) | ({LARGE} if SMALL in sizes else set()))
    ax.set_xticks(ticks, [f"{e:,} events" for e in ticks])
    ax.minorticks_off()
    ax.set_xlim(min(ticks) / 1.6, max(ticks) * 2.6)
    ax.set_xlabel("events in the one micro-batch (keys = events / 4)")
    ax.set_ylabel("events / s (median round, wall time of the query)")
    ax.set_title("count-with-timeout, local[2], one micro-batch")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
