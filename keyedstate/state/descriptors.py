"""State descriptors: the name, kind and type of a piece of keyed state (PyFlink's constructors)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from keyedstate.errors import ConfigurationError
from keyedstate.state.functions import AggregateFunction, ReduceFunction, as_reduce_callable
from keyedstate.state.ttl import StateTtlConfig
from keyedstate.typeinfo import TypeInformation, to_type_information

__all__ = [
    "StateKind",
    "StateDescriptor",
    "ValueStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "AggregatingStateDescriptor",
]

_MAX_NAME_LENGTH = 200


class StateKind(enum.Enum):
    VALUE = "value"
    LIST = "list"
    MAP = "map"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"


class StateDescriptor:
    """Base of all descriptors. ``name`` identifies the state across restarts; keep it stable."""

    kind: StateKind

    def __init__(self, name: str, type_info: Any) -> None:
        if not isinstance(name, str) or not name or len(name) > _MAX_NAME_LENGTH or "\x00" in name:
            raise ConfigurationError(
                f"a state name must be a non-empty str of at most {_MAX_NAME_LENGTH} characters without NUL, "
                f"got {name!r}"
            )
        self.name = name
        self.type_info: TypeInformation = to_type_information(type_info)
        self.ttl_config: Optional[StateTtlConfig] = None
        self.state_migration: Optional[Callable[[Any], Any]] = None

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        """Give this state a time-to-live (see :class:`StateTtlConfig`)."""
        if not isinstance(ttl_config, StateTtlConfig):
            raise ConfigurationError(
                f"enable_time_to_live takes a StateTtlConfig (StateTtlConfig.new_builder(...).build()), "
                f"got {type(ttl_config).__qualname__}"
            )
        self.ttl_config = ttl_config if ttl_config.is_enabled() else None

    def enable_state_migration(self, migration: Callable[[Any], Any]) -> None:
        """Convert values stored under an older declared type of this state (keyedstate extension; see
        docs/operations.md, "State schema evolution").

        ``migration(old_value) -> new_value`` is called once per stored value (each list element, each map value)
        whose recorded type differs from this descriptor's, when its key group is first loaded after the restart
        (before any user code sees it); the result must be a value of the new type and is written back in the new
        layout. It takes precedence over the built-in conversions (ROW fields, widening). Map keys never migrate,
        and a state's kind cannot change."""
        if not callable(migration):
            raise ConfigurationError(
                f"enable_state_migration takes a function old_value -> new_value, got {type(migration).__qualname__}"
            )
        self.state_migration = migration

    def get_name(self) -> str:
        return self.name

    _STATE_METHODS = frozenset(
        ("value", "update", "clear", "get", "add", "add_all", "put", "put_all", "remove", "contains", "keys",
         "values", "items", "is_empty")
    )

    if not TYPE_CHECKING:  # to a type checker a missing attribute stays an error, not Any

        def __getattr__(self, attribute: str) -> Any:
            # Only reached for missing attributes: the classic mistake of using a descriptor as if it were state.
            if attribute in StateDescriptor._STATE_METHODS:
                from keyedstate.errors import StateAccessOutsideOpenError

                raise StateAccessOutsideOpenError(
                    f"{type(self).__name__} {self.__dict__.get('name')!r} is a description of state, not the state: "
                    f"create the state in open() with runtime_context.get_state(descriptor) (or get_list_state, "
                    f"get_map_state, ...) and call {attribute}() on what it returns"
                )
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attribute!r}")

    def type_signature(self) -> str:
        """What must stay the same between restarts for stored state to stay readable."""
        return f"{self.kind.value}<{self.type_info.name}>"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.type_info.name})"


class ValueStateDescriptor(StateDescriptor):
    """A single value per key: ``ValueStateDescriptor("count", Types.LONG())``."""

    kind = StateKind.VALUE

    def __init__(self, name: str, value_type_info: Any = None) -> None:
        super().__init__(name, value_type_info)


class ListStateDescriptor(StateDescriptor):
    """A list per key: ``ListStateDescriptor("events", Types.PICKLED_BYTE_ARRAY())``; the type is the element's."""

    kind = StateKind.LIST

    def __init__(self, name: str, elem_type_info: Any = None) -> None:
        super().__init__(name, elem_type_info)


class MapStateDescriptor(StateDescriptor):
    """A map per key: ``MapStateDescriptor("totals", Types.STRING(), Types.LONG())``.

    Map keys are encoded deterministically like stream keys (str, int, bytes, tuples, ...).
    """

    kind = StateKind.MAP

    def __init__(self, name: str, key_type_info: Any = None, value_type_info: Any = None) -> None:
        super().__init__(name, value_type_info)
        self.key_type_info: TypeInformation = to_type_information(key_type_info)

    def type_signature(self) -> str:
        return f"map<{self.key_type_info.name},{self.type_info.name}>"


class ReducingStateDescriptor(StateDescriptor):
    """A value per key folded with ``reduce_function`` on every ``add``."""

    kind = StateKind.REDUCING

    def __init__(
        self, name: str, reduce_function: Union[ReduceFunction, Callable[[Any, Any], Any]], type_info: Any = None
    ) -> None:
        super().__init__(name, type_info)
        try:
            self.reduce = as_reduce_callable(reduce_function)
        except TypeError as error:
            raise ConfigurationError(f"ReducingStateDescriptor {name!r}: {error}") from None
        self.reduce_function = reduce_function


class AggregatingStateDescriptor(StateDescriptor):
    """An accumulator per key driven by an :class:`AggregateFunction`; ``type_info`` is the accumulator's type."""

    kind = StateKind.AGGREGATING

    def __init__(self, name: str, agg_function: AggregateFunction, state_type_info: Any = None) -> None:
        super().__init__(name, state_type_info)
        for method in ("create_accumulator", "add", "get_result"):
            if not callable(getattr(agg_function, method, None)):
                raise ConfigurationError(
                    f"AggregatingStateDescriptor {name!r}: the aggregate function has no {method}() method; "
                    f"subclass keyedstate.AggregateFunction"
                )
        self.agg_function = agg_function
