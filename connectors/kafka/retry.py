"""Retrying Kafka requests through a broker outage within a time budget (docs/kafka.md, "Failure behaviour").

A request that fails with a transient error (brokers down, leader moving, timeout) is retried with a fixed backoff
until it succeeds or ``brokerRetryTimeoutMs`` has passed since the first failure; then the last error is raised as
:class:`~connectors.kafka.errors.BrokersUnavailableError` naming the brokers, topic and option. Non-transient errors
(unknown topic, out of range) are translated and raised at once. Runs on the driver (metadata, commits) and on
executors (fetches).
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Optional, TypeVar

from connectors.kafka import error_codes

__all__ = ["RetryBudget", "call_with_retry"]

log = logging.getLogger("keyedstate.connectors.kafka.retry")

T = TypeVar("T")


class RetryBudget:
    """Tracks how long a sequence of failures has lasted; reset by a success."""

    def __init__(self, budget_ms: int, backoff_ms: int, brokers: str, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, security_protocol: Optional[str] = None,
                 client_errors: Optional[Callable[[], Iterable[str]]] = None) -> None:
        self.budget_ms = budget_ms
        self.backoff_ms = backoff_ms
        self.brokers = brokers
        self.security_protocol = security_protocol
        self._client_errors = client_errors  # librdkafka's texts behind the failures, for error_codes.listener_hint
        self._clock = clock
        self._sleep = sleep
        self._failing_since: float | None = None

    def client_errors(self) -> list[str]:
        """librdkafka's recent error texts of the client this budget serves (see error_codes.ClientErrors)."""
        return list(self._client_errors()) if self._client_errors is not None else []

    def succeeded(self) -> None:
        if self._failing_since is not None:
            log.info("Kafka brokers %s reachable again after %.1f s", self.brokers,
                     self._clock() - self._failing_since)
        self._failing_since = None

    def failed(self, exc: BaseException, *, topic: str, action: str) -> None:
        """Record a transient failure; sleep the backoff, or raise once the budget is used up."""
        now = self._clock()
        if self._failing_since is None:
            self._failing_since = now
            log.warning("Kafka brokers %s: %s for %s failed (%s); retrying for up to brokerRetryTimeoutMs=%d",
                        self.brokers, action, topic, exc, self.budget_ms)
        elapsed = now - self._failing_since
        if elapsed * 1000 >= self.budget_ms:
            raise error_codes.translate(
                exc, brokers=self.brokers, topic=topic, action=action, elapsed_s=elapsed, budget_ms=self.budget_ms,
                security_protocol=self.security_protocol, client_errors=self.client_errors(),
            ) from (exc if isinstance(exc, BaseException) else None)
        self._sleep(min(self.backoff_ms / 1000, max(0.0, self.budget_ms / 1000 - elapsed)))


def call_with_retry(fn: Callable[[], T], budget: RetryBudget, *, topic: str, action: str) -> T:
    """Call ``fn`` until it returns, retrying transient Kafka errors within ``budget``."""
    while True:
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - classified below
            if error_codes.is_transient(exc):
                budget.failed(exc, topic=topic, action=action)
                continue
            if error_codes.kafka_error_of(exc) is not None:
                raise error_codes.translate(exc, brokers=budget.brokers, topic=topic, action=action) from exc
            raise
        budget.succeeded()
        return result
