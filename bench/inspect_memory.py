"""The checkpoint inspector's driver memory (issue 33): ``inspect_keyed_state`` run on a large-state checkpoint in the
run's driver process, measured with tracemalloc (the Python heap's peak while it runs) and the process's peak
resident memory (VmHWM, reset before it starts through /proc/self/clear_refs). Used by
bench/large_state_workload.py after its last measured batch; the JVM (in local mode the driver and the executors
in one) is not included: what grows with the keys there is the executors' work, not the driver's."""

from __future__ import annotations

import gc
import time
import tracemalloc
from pathlib import Path
from typing import Any, Optional


def _status_kb(field: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Linux resets VmHWM to the current RSS when "5" is written to clear_refs."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def measure_inspection(spark: Any, checkpoint: Path, batch_id: int, expected_keys: int,
                       state_storage_options: Optional[dict] = None) -> dict:
    """Inspect batch ``batch_id`` of ``checkpoint``; its time, driver memory and what it found. Fails when it did not
    find ``expected_keys`` keys, each with one pending timer (the large-state workload's state)."""
    from keyedstate.spark import inspect_keyed_state

    gc.collect()
    rss_before = _status_kb("VmRSS")
    reset = _reset_peak_rss()
    tracemalloc.start()
    started = time.perf_counter()
    inspection = inspect_keyed_state(spark, str(checkpoint), batch_id=batch_id,
                                     state_storage_options=state_storage_options)
    seconds = time.perf_counter() - started
    _, python_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak = _status_kb("VmHWM") if reset else None
    if inspection.keys != expected_keys or inspection.pending_timers != expected_keys:
        raise AssertionError(f"the inspector found {inspection.keys:,} keys and {inspection.pending_timers:,} timers "
                             f"in batch {batch_id}; the workload holds {expected_keys:,} of each")
    return {
        "inspect_s": round(seconds, 2),
        "inspect_driver_python_peak_mb": python_peak / 1e6,
        "inspect_driver_rss_growth_mb": (None if peak is None or rss_before is None
                                         else (peak - rss_before) * 1024 / 1e6),
        "inspect_keys": inspection.keys,
        "inspect_state_bytes": inspection.state_bytes,
        "inspect_key_groups": len(inspection.key_groups),
    }
