"""Aggregation functions used by reducing and aggregating state (PyFlink's names and signatures)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Generic, TypeVar, Union

__all__ = ["ReduceFunction", "AggregateFunction", "as_reduce_callable"]

IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")


class ReduceFunction(ABC):
    """Combines two values of the same type into one; ``ReducingState.add`` calls ``reduce(stored, new)``."""

    @abstractmethod
    def reduce(self, value1: Any, value2: Any) -> Any: ...


class AggregateFunction(ABC, Generic[IN, ACC, OUT]):
    """Flink's aggregate function: ``AggregatingState.add`` folds values into an accumulator, ``get`` returns
    ``get_result(accumulator)``."""

    @abstractmethod
    def create_accumulator(self) -> ACC: ...

    @abstractmethod
    def add(self, value: IN, accumulator: ACC) -> ACC: ...

    @abstractmethod
    def get_result(self, accumulator: ACC) -> OUT: ...

    def merge(self, acc_a: ACC, acc_b: ACC) -> ACC:
        raise NotImplementedError("merge is not needed by keyed state")


def as_reduce_callable(function: Union[ReduceFunction, Callable[[Any, Any], Any]]) -> Callable[[Any, Any], Any]:
    reduce = getattr(function, "reduce", None)
    if callable(reduce):
        return reduce
    if callable(function):
        return function
    raise TypeError(f"{function!r} is neither a ReduceFunction nor a callable of two arguments")
