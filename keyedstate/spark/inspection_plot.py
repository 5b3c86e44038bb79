"""Charts of a checkpoint inspection (``python -m keyedstate inspect --plot FILE.png``), drawn with matplotlib, an
optional dependency (``pip install "keyedstate[plot]"``)."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any, Union

from keyedstate.errors import ConfigurationError
from keyedstate.spark.inspection_report import KeyedStateInspection

__all__ = ["plot_inspection", "require_matplotlib"]


def plot_inspection(inspection: KeyedStateInspection, path: Union[str, os.PathLike[str]]) -> None:
    """Draw ``inspection`` into the image file ``path`` (PNG, or any format matplotlib infers from the name): keys
    per key group, state bytes per state name, keys by state bytes, and pending timers by due time.

    Needs matplotlib (``pip install "keyedstate[plot]"``); without it raises
    :class:`~keyedstate.errors.ConfigurationError` saying so. Uses no pyplot state, so it is safe in notebooks and
    servers alike."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(13, 9), layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(f"{inspection.checkpoint}\nbatch {inspection.batch_id}, {inspection.backend}: "
                    f"{inspection.keys:,} keys, {inspection.state_bytes:,} state bytes, "
                    f"{inspection.pending_timers:,} pending timers", fontsize=10)
    (groups, states), (sizes, timers) = figure.subplots(2, 2)
    _key_groups(groups, inspection)
    _states(states, inspection)
    _key_sizes(sizes, inspection)
    _timers(timers, inspection)
    figure.savefig(os.fspath(path), dpi=100)


def require_matplotlib() -> None:
    """Raise :class:`~keyedstate.errors.ConfigurationError` saying how to install matplotlib when it is missing
    (the command checks before it spends minutes on the inspection)."""
    try:
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401
    except ImportError as error:
        raise ConfigurationError(
            f"plotting the inspection needs matplotlib, which is not installed ({error}): "
            f"pip install \"keyedstate[plot]\" (or matplotlib), or leave out --plot") from error


def _key_groups(axes: Any, inspection: KeyedStateInspection) -> None:
    groups = inspection.key_groups
    axes.bar([g.key_group for g in groups], [g.keys for g in groups], width=1.0, color="tab:blue")
    axes.set(title="keys per key group", xlabel="key group", ylabel="keys")
    if inspection.num_key_groups:
        axes.set_xlim(-0.5, inspection.num_key_groups - 0.5)


def _states(axes: Any, inspection: KeyedStateInspection) -> None:
    states = list(reversed(inspection.states))
    axes.barh([s.name for s in states], [s.bytes for s in states], color="tab:green")
    axes.set(title="state bytes per state (stored key + value)", xlabel="bytes")
    if not states:
        axes.text(0.5, 0.5, "no state", ha="center", transform=axes.transAxes)


def _key_sizes(axes: Any, inspection: KeyedStateInspection) -> None:
    buckets = inspection.key_bytes_histogram
    axes.bar(range(len(buckets)), [count for _, _, count in buckets], color="tab:orange")
    axes.set_xticks(range(len(buckets)), [f"<{high:,}" for _, high, _ in buckets], rotation=45, fontsize=8)
    axes.set(title="keys by their state bytes", xlabel="state bytes of a key", ylabel="keys")


def _timers(axes: Any, inspection: KeyedStateInspection) -> None:
    for summary, color in zip(inspection.timers, ("tab:red", "tab:purple")):
        starts = [_when(start) for start, _, _ in summary.histogram]
        widths = [_when(end) - _when(start) for start, end, _ in summary.histogram]
        axes.bar(starts, [count for _, _, count in summary.histogram], width=widths, align="edge", alpha=0.6,
                 color=color, label=f"{summary.domain} ({summary.count:,})")
    axes.set(title="pending timers by due time (UTC)", ylabel="timers")
    if inspection.timers:
        axes.legend(fontsize=8)
        axes.tick_params(axis="x", labelrotation=30, labelsize=8)
    else:
        axes.text(0.5, 0.5, "no pending timers", ha="center", transform=axes.transAxes)


def _when(ms: int) -> dt.datetime:
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        return dt.datetime.max  # Long.MAX_VALUE timers
