"""The "Run to run" section of bench/RESULTS.md: every ratio target of this run beside the same target in the
previous benchmark runs committed to this repository (each `make bench` run's results are committed in
bench/results/), so a change can be told from the spread the same code shows between runs.

The earlier runs are read with git from the commits that changed bench/results/meta.json; without git or history the
section says so. A target counts as worse beyond run-to-run noise when this run's value is more than MARGIN below the
lowest value of the earlier runs shown (for targets with an upper bound, above the highest); the earlier runs
measured different commits, so their spread is an upper bound of the noise, and a value outside it is worth a second
look, not proof.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

EARLIER_RUNS = 4
MARGIN = 0.02
"""A value this much (relative) past the earlier runs' range counts as outside it: the report rounds ratios to two
digits, and a 0.60x beside an earlier 0.61x is not a finding."""


def _git(repo: Path, *args: str) -> bytes | None:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _earlier_results(repo: Path, results: Path, current_started: str | None, limit: int,
                     into: Path) -> list[tuple[str, Path]]:
    """Up to ``limit`` earlier runs as (commit measured, directory with its results files), newest first; the run
    being reported (same start time) is skipped, since a regenerated report's results are committed too."""
    try:
        relative = results.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:
        relative = "bench/results"
    log = _git(repo, "log", "--format=%H", "-n", str(limit + 1), "--", f"{relative}/meta.json")
    runs: list[tuple[str, Path]] = []
    for commit in (log or b"").decode().split():
        meta = _git(repo, "show", f"{commit}:{relative}/meta.json")
        if meta is None:
            continue
        started = json.loads(meta).get("started_utc")
        if started == current_started or len(runs) == limit:
            continue
        names = _git(repo, "ls-tree", "--name-only", commit, f"{relative}/")
        directory = into / commit
        directory.mkdir()
        for name in (names or b"").decode().split():
            if name.endswith((".json", ".jsonl")):
                data = _git(repo, "show", f"{commit}:{name}")
                if data is not None:
                    (directory / Path(name).name).write_bytes(data)
        measured = json.loads(meta).get("commit") or commit[:7]
        runs.append((str(measured)[:7], directory))
    return runs


def _better_is_higher(row: dict) -> bool:
    return not str(row.get("goal", "")).startswith(("<=", "<"))


def _cell(row: dict | None) -> str:
    if row is None or row.get("value") is None:
        return "-"
    value = row["value"]
    return f"{value:.2f}x" if "x" in str(row.get("goal", "")) else f"{value:.3g}"


def section(rows: list[dict], results: Path, repo: Path, current_started: str | None,
            targets_of: Callable[[Path], list[dict]], limit: int = EARLIER_RUNS) -> list[str]:
    """Lines of the section for this run's target ``rows``; ``targets_of(results dir)`` computes an earlier run's."""
    title = ["## Run to run", ""]
    with tempfile.TemporaryDirectory(prefix="bench-history-") as scratch:
        earlier = _earlier_results(repo, results, current_started, limit, Path(scratch))
        if not earlier:
            return title + ["No earlier run found in this repository's history (git log of bench/results/).", ""]
        earlier_rows = [(commit, {r["target"]: r for r in targets_of(directory)}) for commit, directory in earlier]
    lines = title + [
        f"Each ratio target of this run beside the same target in the {len(earlier)} runs before it that are "
        "committed to this repository (newest first; `bench/report_history.py`). The earlier runs measured earlier "
        "commits on the same machine, so their spread bounds the run-to-run noise from above. *Outside* marks a "
        f"value worse than every earlier run shown by more than {MARGIN:.0%}.", "",
        "| target | this run | " + " | ".join(f"at {commit}" for commit, _ in earlier_rows) + " | vs earlier runs |",
        "|---|---:|" + "---:|" * len(earlier_rows) + "---|"]
    for row in rows:
        if row.get("value") is None or not isinstance(row["value"], (int, float)):
            continue
        before = [by_target.get(row["target"]) for _, by_target in earlier_rows]
        values = [r["value"] for r in before if r is not None and r.get("value") is not None]
        if not values:
            verdict = "new"
        elif _better_is_higher(row):
            verdict = "**outside** (lower)" if row["value"] < min(values) * (1 - MARGIN) else "within"
        else:
            verdict = "**outside** (higher)" if row["value"] > max(values) * (1 + MARGIN) else "within"
        lines.append(f"| {row['short'].split(' ', 1)[-1]} ({row['goal']}) | {_cell(row)} | "
                     + " | ".join(_cell(r) for r in before) + f" | {verdict} |")
    return lines + [""]
