"""The runtime context handed to ``KeyedProcessFunction.open``."""

from __future__ import annotations

from typing import Any, Optional

from keyedstate.errors import ConfigurationError
from keyedstate.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from keyedstate.state.primitives import AggregatingState, ListState, MapState, ReducingState, ValueState

__all__ = ["RuntimeContext"]


class RuntimeContext:
    """Task information and access to keyed state (PyFlink's ``RuntimeContext``).

    Get state in ``open()`` and keep the returned object: it always reads and writes the state of the key being
    processed, so one ``ValueState`` object serves every key.
    """

    def __init__(
        self,
        backend: Any,
        *,
        task_name: str,
        index_of_this_subtask: int = 0,
        number_of_parallel_subtasks: int = 1,
        attempt_number: int = 0,
        job_parameters: Optional[dict[str, str]] = None,
    ) -> None:
        self._backend = backend
        self._task_name = task_name
        self._index = index_of_this_subtask
        self._parallelism = number_of_parallel_subtasks
        self._attempt = attempt_number
        self._job_parameters = dict(job_parameters or {})

    def get_task_name(self) -> str:
        return self._task_name

    def get_task_name_with_subtasks(self) -> str:
        return f"{self._task_name} ({self._index + 1}/{self._parallelism})"

    def get_index_of_this_subtask(self) -> int:
        """This partition's index, ``0 <= index < get_number_of_parallel_subtasks()``."""
        return self._index

    def get_number_of_parallel_subtasks(self) -> int:
        """The number of partitions (on Spark: ``spark.sql.shuffle.partitions`` when the query was defined; a
        restart from a checkpoint runs with the checkpoint's own count, which can differ)."""
        return self._parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        """The number of key groups (max parallelism); fixed for the lifetime of the state."""
        return self._backend.num_key_groups

    def get_attempt_number(self) -> int:
        return self._attempt

    def get_job_parameter(self, key: str, default_value: Optional[str] = None) -> Optional[str]:
        return self._job_parameters.get(key, default_value)

    def move_to_task(self, index_of_this_subtask: int, number_of_parallel_subtasks: int, attempt_number: int) -> None:
        """Point the task information at the task now running: on Spark one opened function serves every task its
        Python worker runs, and those tasks can be of different partitions."""
        self._index = index_of_this_subtask
        self._parallelism = number_of_parallel_subtasks
        self._attempt = attempt_number

    def _state(self, descriptor: StateDescriptor, expected: type, method: str) -> Any:
        if not isinstance(descriptor, expected):
            raise ConfigurationError(
                f"{method}() takes a {expected.__name__}, got {type(descriptor).__qualname__}"
                f"{' ' + repr(descriptor.name) if isinstance(descriptor, StateDescriptor) else ''}"
            )
        return self._backend.get_or_create_state(descriptor)

    def get_state(self, state_descriptor: ValueStateDescriptor) -> ValueState:
        return self._state(state_descriptor, ValueStateDescriptor, "get_state")

    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState:
        return self._state(state_descriptor, ListStateDescriptor, "get_list_state")

    def get_map_state(self, state_descriptor: MapStateDescriptor) -> MapState:
        return self._state(state_descriptor, MapStateDescriptor, "get_map_state")

    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> ReducingState:
        return self._state(state_descriptor, ReducingStateDescriptor, "get_reducing_state")

    def get_aggregating_state(self, state_descriptor: AggregatingStateDescriptor) -> AggregatingState:
        return self._state(state_descriptor, AggregatingStateDescriptor, "get_aggregating_state")
