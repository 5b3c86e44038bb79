"""The one operator core that drives a ``KeyedProcessFunction`` (one input) or a ``KeyedCoProcessFunction`` (two
inputs keyed the same way), shared by the test harness and Spark.

Per unit of work: set the current key -> fire due timers -> process the elements -> fire timers that became due ->
persist (snapshot). The operator owns the function, the keyed state backend, the timer service and the output
buffer; callers (the harness, the Spark group function) decide when watermarks and processing time advance and
when snapshots happen. Elements carry an input index: 0 for ``process_element`` (or ``process_element1``), 1 for
``process_element2``; both inputs share the key's state and timers.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from keyedstate.api.bootstrap_function import KeyedStateBootstrapFunction
from keyedstate.api.co_process_function import KeyedCoProcessFunction
from keyedstate.api.process_function import KeyedProcessFunction
from keyedstate.api.runtime_context import RuntimeContext
from keyedstate.api.time_domain import OutputTag, TimeDomain
from keyedstate.errors import ConfigurationError, KeyedStateError, UserFunctionError
from keyedstate.operator.output_buffer import OutputBuffer, short_repr
from keyedstate.state.base.backend import KeyedStateBackend
from timers import InternalTimerService, TimerService

__all__ = ["KeyedProcessOperator"]

logger = logging.getLogger("keyedstate.operator")


class _Context(KeyedProcessFunction.OnTimerContext):
    """The single context object passed to ``process_element`` and ``on_timer`` (re-pointed for each call), with
    the operator's single user-facing timer service. Both are valid only during the call that received them; one
    kept and used later acts as the context of the call under way then (see ``KeyedProcessFunction.Context``)."""

    __slots__ = ("_operator", "_timestamp", "_domain", "_timer_service")

    def __init__(self, operator: "KeyedProcessOperator") -> None:
        self._operator = operator
        self._timestamp: Optional[int] = None
        self._domain: Optional[TimeDomain] = None
        self._timer_service: TimerService = operator.user_timer_service  # a slot: timer_service() runs per element

    def get_current_key(self) -> Any:
        return self._operator.backend.get_current_key()

    def timestamp(self) -> Optional[int]:
        return self._timestamp

    def timer_service(self) -> TimerService:
        return self._timer_service

    def output(self, output_tag: OutputTag, value: Any) -> None:
        self._operator.outputs.emit_side(output_tag, value, self._timestamp)

    def time_domain(self) -> TimeDomain:
        if self._domain is None:
            raise KeyedStateError("time_domain() is only available in on_timer")
        return self._domain


# A bootstrap function sees the same context; it only uses the key and the timer service.
KeyedStateBootstrapFunction.Context.register(_Context)

# The element callbacks of each function kind, by input index.
_ELEMENT_METHODS = {
    KeyedProcessFunction: ("process_element",),
    KeyedCoProcessFunction: ("process_element1", "process_element2"),
    KeyedStateBootstrapFunction: ("process_element",),
}


def element_methods(function: Any) -> tuple[str, ...]:
    """The names of ``function``'s element callbacks by input index; raises for anything but a keyed function."""
    for kind, methods in _ELEMENT_METHODS.items():
        if isinstance(function, kind):
            return methods
    raise ConfigurationError(
        f"expected a KeyedProcessFunction or KeyedCoProcessFunction instance, got {type(function).__qualname__}; "
        f"subclass keyedstate.KeyedProcessFunction (one input) or keyedstate.KeyedCoProcessFunction (two inputs) "
        f"and pass an instance"
    )


class KeyedProcessOperator:
    """Runs one ``KeyedProcessFunction`` or ``KeyedCoProcessFunction`` over one keyed state backend (one
    partition's key groups)."""

    def __init__(
        self,
        function: Union[KeyedProcessFunction, KeyedCoProcessFunction, KeyedStateBootstrapFunction],
        backend: KeyedStateBackend,
        *,
        task_name: Optional[str] = None,
        index_of_this_subtask: int = 0,
        number_of_parallel_subtasks: int = 1,
        attempt_number: int = 0,
        job_parameters: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.element_methods = element_methods(function)
        self.function = function
        self.function_name = type(function).__qualname__
        # per input: the bound element method and what names it in output errors (built once, not per run)
        self._methods = tuple(getattr(function, name) for name in self.element_methods)
        self._describes = tuple(self._describer(name) for name in self.element_methods)
        self.backend = backend
        self.outputs = OutputBuffer()
        self.internal_timer_service = InternalTimerService(backend, self)
        # The one TimerService user code sees, in process_element and on_timer: it collects a key run's calls
        # (process_key_runs sets `collecting`) and passes the calls of on_timer straight to the queues.
        self.user_timer_service = TimerService(self.internal_timer_service)
        self.runtime_context = RuntimeContext(
            backend,
            task_name=task_name or self.function_name,
            index_of_this_subtask=index_of_this_subtask,
            number_of_parallel_subtasks=number_of_parallel_subtasks,
            attempt_number=attempt_number,
            job_parameters=dict(job_parameters or {}),
        )
        self._context = _Context(self)
        self.timers_fired = 0
        self.elements_processed = 0
        self._opened = False

    def open(self) -> None:
        """Call the function's ``open`` once."""
        if self._opened:
            return
        self._call_user("open", lambda: self.function.open(self.runtime_context), None)
        self._opened = True

    def close(self) -> None:
        if self._opened:
            self._opened = False
            self._call_user("close", self.function.close, None)

    def process_element(self, key: Any, value: Any, timestamp: Optional[int] = None, input_index: int = 0) -> None:
        """Process one element of ``key`` from input ``input_index`` (0 or 1), as a run of one element through
        :meth:`process_key_runs`, the path of the Spark group function (the harness feeds elements this way). The
        backend assigns the key's key group (:mod:`keyedstate.keygroups`) and refuses one it does not own."""
        if input_index:
            self._element_method(input_index)  # an input the function does not have fails here, naming it
        backend = self.backend
        backend.set_current_key(key)
        try:
            self.process_key_runs(((key, backend.current_key_prefix, 0, 1),), (value,), (timestamp,),
                                  None if input_index == 0 else (input_index,))
        finally:
            backend.clear_current_key()

    def process_key_runs(
        self, runs: Iterable[tuple[Any, bytes, int, int]], values: Sequence[Any], timestamps: Sequence[Optional[int]],
        input_indexes: Optional[Sequence[int]] = None,
    ) -> None:
        """Process ``values[start:end]`` for every ``(key, prefix, start, end)`` of ``runs``, with ``key`` current.

        ``prefix`` is the key's ``key group + encoded key`` (the caller checked the key group is owned).
        ``input_indexes[i]`` says which input ``values[i]`` came from (None: all from input 0). The same as
        ``process_element`` per element, in one loop: this is the Spark group function's per-element hot path.
        """
        set_key = self.backend.set_current_key_with_prefix
        methods = self._methods
        process = methods[0]
        collect = self.outputs.collect
        describes = self._describes
        describe = describes[0]
        context = self._context
        context._domain = None
        # A key's timer calls reach the queues once per run (see TimerService); flushed before the key changes, and
        # on the way out even when an element failed, so what the run registered stays registered.
        timer_calls = self.user_timer_service
        flush_timer_calls = timer_calls.apply_collected_calls
        timer_calls.collecting = True
        index = start = 0
        try:
            mark_key = self.outputs.mark_key
            for key, prefix, start, end in runs:
                set_key(key, prefix)
                mark_key(key)
                for index in range(start, end):
                    timestamp = timestamps[index]
                    context._timestamp = timestamp
                    if input_indexes is not None:
                        process = methods[input_indexes[index]]
                        describe = describes[input_indexes[index]]
                    result = process(values[index], context)
                    if result is not None:
                        collect(result, timestamp, describe)
                flush_timer_calls()
                self.elements_processed += end - start
        except Exception as error:
            self.elements_processed += index - start
            method = self.element_methods[0 if input_indexes is None else input_indexes[index]]
            raise self._user_error(method, f"element {short_repr(values[index])}", error) from error
        finally:
            try:
                flush_timer_calls()
            finally:
                timer_calls.collecting = False

    def advance_watermark(self, watermark: int) -> int:
        """Fire every event-time timer with ``timestamp <= watermark``; returns how many fired."""
        before = self.timers_fired
        self.internal_timer_service.advance_watermark(watermark)
        self.backend.clear_current_key()
        return self.timers_fired - before

    def advance_processing_time(self, now: int) -> int:
        """Fire every processing-time timer with ``timestamp <= now``; returns how many fired."""
        before = self.timers_fired
        self.internal_timer_service.advance_processing_time(now)
        self.backend.clear_current_key()
        return self.timers_fired - before

    accepts_timer_tuples = True  # the timer service passes plain (timestamp, key_prefix, namespace, key_group)

    def on_event_time(self, timer: tuple) -> None:
        self._fire(timer, TimeDomain.EVENT_TIME, timer[0])

    def on_processing_time(self, timer: tuple) -> None:
        # Flink erases the record timestamp for processing-time firings.
        self._fire(timer, TimeDomain.PROCESSING_TIME, None)

    def _fire(self, timer: tuple, domain: TimeDomain, output_timestamp: Optional[int]) -> None:
        assert not isinstance(self.function, KeyedStateBootstrapFunction)  # nothing fires while bootstrapping
        context = self._context
        timestamp = context._timestamp = timer[0]
        context._domain = domain
        self.timers_fired += 1
        try:
            self.outputs.mark_key(self.backend.get_current_key())
            result = self.function.on_timer(timestamp, context)
            self.outputs.collect(result, output_timestamp, lambda: f"{self.function_name}.on_timer")
        except Exception as error:
            what = f"{domain.name.lower().replace('_', '-')} timer at {timestamp}"
            raise self._user_error("on_timer", what, error) from error
        finally:
            context._domain = None

    def _element_method(self, input_index: int) -> str:
        if input_index not in range(len(self.element_methods)):
            raise ConfigurationError(
                f"{self.function_name} has {len(self.element_methods)} input(s) "
                f"({', '.join(self.element_methods)}); there is no input {input_index}"
            )
        return self.element_methods[input_index]

    def _describer(self, method: str) -> Any:
        name = f"{self.function_name}.{method}"
        return lambda: name

    def _call_user(self, method: str, call: Any, what: Optional[str]) -> None:
        try:
            call()
        except Exception as error:
            raise self._user_error(method, what, error) from error

    def _user_error(self, method: str, what: Optional[str], error: Exception) -> UserFunctionError:
        """Every exception escaping user code, ours included (bad state use, bad output), is reported with the
        function, key and element or timer; the original stays chained as ``__cause__``."""
        try:
            key = f" for key {short_repr(self.backend.get_current_key())}"
        except KeyedStateError:
            key = ""
        on = f" on {what}" if what else ""
        return UserFunctionError(
            f"{self.function_name}.{method} failed{key}{on}: {type(error).__name__}: {error}"
        )

