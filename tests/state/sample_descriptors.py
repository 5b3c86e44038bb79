"""What the state conformance tests register: an averaging AggregateFunction, and TTL configurations (one short TTL
with any of Flink's update types and visibilities)."""

from __future__ import annotations

from typing import Any

from keyedstate import AggregateFunction, StateTtlConfig, Time

TTL_MS = 1_000


class Average(AggregateFunction):
    """The mean of the added numbers (accumulator: sum and count)."""

    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]


def ttl(update: Any = StateTtlConfig.UpdateType.OnCreateAndWrite,
        visibility: Any = StateTtlConfig.StateVisibility.NeverReturnExpired) -> StateTtlConfig:
    return (StateTtlConfig.new_builder(Time.milliseconds(TTL_MS)).set_update_type(update)
            .set_state_visibility(visibility).build())


def with_ttl(descriptor: Any, **kwargs: Any) -> Any:
    """``descriptor`` with :func:`ttl` ``(**kwargs)`` enabled."""
    descriptor.enable_time_to_live(ttl(**kwargs))
    return descriptor
