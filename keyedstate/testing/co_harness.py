"""``KeyedCoProcessHarness``: run a ``KeyedCoProcessFunction`` in-process, without Spark, and inspect everything.

The Python counterpart of Flink's ``KeyedTwoInputStreamOperatorTestHarness``, on the same operator core, state
backends and timer service as :class:`~keyedstate.testing.KeyedProcessHarness` (and as the Spark integration).

    harness = KeyedCoProcessHarness(MatchOrders(), lambda order: order["id"], lambda payment: payment["order"])
    harness.open()
    harness.process_element1({"id": 7, "total": 30}, timestamp=1_000)
    harness.process_element2({"order": 7, "paid": 30}, timestamp=2_000)
    harness.process_watermark(10_000)
    assert harness.extract_output() == [(7, "paid")]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from keyedstate.api.co_process_function import KeyedCoProcessFunction
from keyedstate.api.time_domain import MAX_WATERMARK, MIN_WATERMARK
from keyedstate.testing.harness import (
    HarnessSettings,
    HarnessSnapshot,
    KeyedHarnessBase,
    RestoreSettings,
    key_selector_function,
    require_function,
)
from timers import to_time_bound

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["KeyedCoProcessHarness"]


class KeyedCoProcessHarness(KeyedHarnessBase):
    """Feeds two inputs' elements and watermarks, and processing time, to one ``KeyedCoProcessFunction``.

    ``key_selector1`` keys the first input, ``key_selector2`` the second; equal keys share state and timers. Each
    input has its own watermark (both start at ``MIN_WATERMARK``); the function's watermark, the one event-time
    timers fire on, is their minimum, as in Flink's two-input operators. The keyword arguments (``backend``,
    ``options``, ...), processing time and TTL work as in :class:`~keyedstate.testing.KeyedProcessHarness`.
    """

    def __init__(self, function: KeyedCoProcessFunction, key_selector1: Any, key_selector2: Any,
                 **settings: Unpack[HarnessSettings]) -> None:
        require_function(function, KeyedCoProcessFunction, "KeyedCoProcessHarness", "KeyedProcessHarness")
        self._select_keys = (key_selector_function(key_selector1, "key_selector1"),
                             key_selector_function(key_selector2, "key_selector2"))
        self._input_watermarks = [MIN_WATERMARK, MIN_WATERMARK]
        super().__init__(function, **settings)

    def process_element1(self, value: Any, timestamp: Optional[int] = None) -> None:
        """Process one element of the first input (``process_element1``); ``timestamp`` is its event time."""
        self._process(self._select_keys[0](value), value, timestamp, 0)

    def process_element2(self, value: Any, timestamp: Optional[int] = None) -> None:
        """Process one element of the second input (``process_element2``); ``timestamp`` is its event time."""
        self._process(self._select_keys[1](value), value, timestamp, 1)

    def process_watermark1(self, watermark: int) -> int:
        """The first input's watermark; fires the timers the combined (minimum) watermark reaches. Returns how many
        timers fired."""
        return self._input_watermark(0, watermark)

    def process_watermark2(self, watermark: int) -> int:
        """The second input's watermark; fires the timers the combined (minimum) watermark reaches."""
        return self._input_watermark(1, watermark)

    def process_watermark(self, watermark: int) -> int:
        """The same watermark on both inputs (Flink's ``processBothWatermarks``); fires due event-time timers."""
        watermark = to_time_bound(watermark, "watermark")
        self._input_watermarks = [max(w, watermark) for w in self._input_watermarks]
        return self._advance_watermark(min(self._input_watermarks))

    def end_input(self) -> int:
        """End of both bounded inputs: the watermark jumps to the maximum and every event-time timer fires."""
        return self.process_watermark(MAX_WATERMARK)

    def _input_watermark(self, input_index: int, watermark: int) -> int:
        watermark = to_time_bound(watermark, f"watermark of input {input_index + 1}")
        self._input_watermarks[input_index] = max(self._input_watermarks[input_index], watermark)
        return self._advance_watermark(min(self._input_watermarks))

    @classmethod
    def restore(cls, function: KeyedCoProcessFunction, key_selector1: Any, key_selector2: Any,
                snapshot: Union[HarnessSnapshot, Sequence[HarnessSnapshot]],
                **settings: Unpack[RestoreSettings]) -> "KeyedCoProcessHarness":
        """A new, opened harness for partition ``partition`` of ``partitions`` restored from one snapshot or the
        snapshots of several partitions. Both input watermarks start again at ``MIN_WATERMARK``, as in Flink."""
        return cls._restored(lambda **given: cls(function, key_selector1, key_selector2, **given), snapshot, **settings)
