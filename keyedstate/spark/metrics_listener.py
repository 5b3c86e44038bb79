"""Exporting keyed_process's per-batch metrics: StreamingQueryListeners for Prometheus and for JSON lines.

``keyed_process`` puts each micro-batch's metrics into the query's progress (:mod:`keyedstate.spark.metrics`);
:func:`keyed_state_metrics` reads them back from a progress in any of the forms PySpark hands it out (the listener
event's ``StreamingQueryProgress``, ``query.lastProgress``, a dict parsed from its JSON). The listeners run in the
driver's Python process, where Spark calls ``onQueryProgress`` after each batch's commit.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, TextIO, Union

from pyspark.sql.streaming import StreamingQueryListener

from keyedstate.spark.metrics import METRICS_NAME_PREFIX

__all__ = ["keyed_state_metrics", "PrometheusMetricsListener", "JsonLinesMetricsListener", "PROMETHEUS_METRICS"]

logger = logging.getLogger("keyedstate.spark.metrics")

COUNTER = "counter"
GAUGE = "gauge"

# progress name -> (Prometheus name without the "keyedstate_" prefix, kind, scale to the Prometheus unit). Per-batch
# amounts become counters (Prometheus' rate() turns them back into per-second values); levels become gauges.
PROMETHEUS_METRICS: dict[str, tuple[str, str, float]] = {
    "numRecordsIn": ("records_in_total", COUNTER, 1),
    "numRecordsOut": ("records_out_total", COUNTER, 1),
    "numLateRecords": ("late_records_total", COUNTER, 1),
    "currentWatermark": ("watermark_seconds", GAUGE, 1e-3),
    "numRegisteredTimers": ("timers_registered_total", COUNTER, 1),
    "numDeletedTimers": ("timers_deleted_total", COUNTER, 1),
    "numExpiredTimers": ("timers_expired_total", COUNTER, 1),
    "numPendingTimers": ("pending_timers", GAUGE, 1),
    "processingTimeTimerLagMs": ("processing_time_timer_lag_seconds", GAUGE, 1e-3),
    "numKeysWithState": ("keys_with_state", GAUGE, 1),
    "stateSizeBytes": ("state_size_bytes", GAUGE, 1),
    "stateBytesWritten": ("state_written_bytes_total", COUNTER, 1),
    "stateBaseBytesWritten": ("state_base_written_bytes_total", COUNTER, 1),
    "stateRestoreTimeMs": ("state_restore_seconds_total", COUNTER, 1e-3),
    "numKeyGroups": ("key_group_calls_total", COUNTER, 1),
    "maxRecordsPerKeyGroup": ("key_group_max_records", GAUGE, 1),
    "medianRecordsPerKeyGroup": ("key_group_median_records", GAUGE, 1),
    "userFunctionTimeMs": ("user_function_seconds_total", COUNTER, 1e-3),
    "keyedStateTimeMs": ("internal_seconds_total", COUNTER, 1e-3),
    "timerProcessingTimeMs": ("timer_processing_seconds_total", COUNTER, 1e-3),
}
"""How :class:`PrometheusMetricsListener` names each progress metric (prefixed ``keyedstate_``)."""


def _field(progress: Any, name: str) -> Any:
    if isinstance(progress, dict):
        return progress.get(name)
    value = getattr(progress, name, None)
    if value is None:
        try:
            value = progress[name]
        except (KeyError, TypeError, IndexError):
            return None
    return value


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = json.loads(value)
    as_dict = getattr(value, "asDict", None)
    values = as_dict() if callable(as_dict) else dict(value)
    if set(values) == {"values", "schema"}:
        # Spark Connect's form of an observed Row: its values, and its schema as a struct type's JSON
        schema = values["schema"]
        schema = json.loads(schema) if isinstance(schema, str) else _as_plain(schema)
        return dict(zip((field["name"] for field in schema["fields"]), values["values"]))
    return values


def _as_plain(value: Any) -> Any:
    """Rows (and lists of them) as dicts and lists."""
    as_dict = getattr(value, "asDict", None)
    if callable(as_dict):
        return {name: _as_plain(item) for name, item in as_dict().items()}
    if isinstance(value, dict):
        return {name: _as_plain(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_plain(item) for item in value]
    return value


def keyed_state_metrics(progress: Any) -> dict[str, dict[str, Any]]:
    """The keyed-state metrics of one micro-batch: ``{operator uid: {metric: value}}`` (one entry per keyed_process
    or keyed_co_process of the query), from a ``StreamingQueryProgress``, ``query.lastProgress`` /
    ``recentProgress[i]``, or a dict of its JSON. Metric names are docs/operations.md's ("Monitoring")."""
    if isinstance(progress, str):
        progress = json.loads(progress)
    observed = _field(progress, "observedMetrics") or {}
    return {name[len(METRICS_NAME_PREFIX):]: _as_dict(values) for name, values in dict(observed).items()
            if name.startswith(METRICS_NAME_PREFIX)}


def _query_label(progress: Any) -> str:
    return str(_field(progress, "name") or _field(progress, "id"))


class _MetricsListener(StreamingQueryListener):
    """Calls :meth:`export` with every progress that carries keyed-state metrics; never fails the query."""

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        try:
            progress = event.progress
            metrics = keyed_state_metrics(progress)
            if metrics:
                self.export(progress, metrics)
        except Exception:  # a broken exporter must not stop the stream; Spark would only print the error
            logger.warning("exporting keyed-state metrics failed", exc_info=True)

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def export(self, progress: Any, metrics: dict[str, dict[str, Any]]) -> None:
        raise NotImplementedError


class PrometheusMetricsListener(_MetricsListener):
    """Keeps Prometheus metrics (``prometheus_client``) of every keyed_process in the process's queries, labelled
    ``query`` (the query's name, else its id) and ``operator`` (the uid); :data:`PROMETHEUS_METRICS` lists them.

    ``registry``: where the metrics are registered (default ``prometheus_client.REGISTRY``, which
    ``prometheus_client.start_http_server(port)`` serves). Register one listener per registry:
    ``spark.streams.addListener(PrometheusMetricsListener())``.
    """

    def __init__(self, registry: Any = None) -> None:
        super().__init__()
        try:
            import prometheus_client
        except ImportError as error:
            from keyedstate.errors import ConfigurationError

            raise ConfigurationError(
                "PrometheusMetricsListener needs the prometheus_client package: pip install 'keyedstate[prometheus]'"
            ) from error
        registry = prometheus_client.REGISTRY if registry is None else registry
        self._lock = threading.Lock()
        self._metrics: dict[str, tuple[Any, str, float]] = {}
        for progress_name, (name, kind, scale) in PROMETHEUS_METRICS.items():
            make = prometheus_client.Counter if kind == COUNTER else prometheus_client.Gauge
            documentation = f"keyed_process's {progress_name} (docs/operations.md, Monitoring)"
            # Counter adds "_total" itself
            metric_name = "keyedstate_" + (name[: -len("_total")] if kind == COUNTER else name)
            self._metrics[progress_name] = (make(metric_name, documentation, ["query", "operator"],
                                                 registry=registry), kind, scale)

    def export(self, progress: Any, metrics: dict[str, dict[str, Any]]) -> None:
        query = _query_label(progress)
        with self._lock:
            for operator, values in metrics.items():
                for progress_name, value in values.items():
                    known = self._metrics.get(progress_name)
                    if known is None or value is None:
                        continue
                    metric, kind, scale = known
                    labelled = metric.labels(query=query, operator=operator)
                    if kind == COUNTER:
                        labelled.inc(max(value, 0) * scale)
                    else:
                        labelled.set(value * scale)


class JsonLinesMetricsListener(_MetricsListener):
    """Writes one JSON object per micro-batch and keyed_process: ``query`` (name, else id), ``queryId``,
    ``batchId``, ``timestamp`` (the batch's trigger time), ``operator`` (the uid) and the metrics under their
    progress names. ``output``: a path (appended to) or an open text stream; each line is flushed."""

    def __init__(self, output: Union[str, TextIO]) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._owned = isinstance(output, str)
        self._stream: TextIO = open(output, "a", encoding="utf-8") if isinstance(output, str) else output

    def export(self, progress: Any, metrics: dict[str, dict[str, Any]]) -> None:
        common = {"query": _query_label(progress), "queryId": str(_field(progress, "id")),
                  "batchId": _field(progress, "batchId"), "timestamp": _field(progress, "timestamp")}
        lines = "".join(json.dumps({**common, "operator": operator, **values}) + "\n"
                        for operator, values in metrics.items())
        with self._lock:
            self._stream.write(lines)
            self._stream.flush()

    def close(self) -> None:
        """Close the file this listener opened (a stream it was given stays open)."""
        if self._owned:
            self._stream.close()
