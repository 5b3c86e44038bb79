"""Backends under test: every conformance test runs against each of them."""

from __future__ import annotations

from typing import Callable

import pytest

from keyedstate.state.base import KeyedStateBackend
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.testing import ManualClock

BACKEND_KINDS = ["heap", "rocksdb"]


def make_backend(kind: str, tmp_path, clock: ManualClock, **kwargs) -> KeyedStateBackend:
    if kind == "heap":
        return HeapKeyedStateBackend(ttl_clock=clock, **kwargs)
    from keyedstate.state.rocksdb import RocksDBKeyedStateBackend

    return RocksDBKeyedStateBackend(str(tmp_path / "rocksdb"), ttl_clock=clock, **kwargs)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000)


@pytest.fixture(params=BACKEND_KINDS)
def backend(request, tmp_path, clock) -> KeyedStateBackend:
    created = make_backend(request.param, tmp_path, clock)
    yield created
    created.close()


@pytest.fixture
def backend_factory(tmp_path, clock) -> Callable[..., KeyedStateBackend]:
    created: list[KeyedStateBackend] = []

    def factory(kind: str, **kwargs) -> KeyedStateBackend:
        path = tmp_path / f"{kind}-{len(created)}"
        path.mkdir()
        instance = make_backend(kind, path, clock, **kwargs)
        created.append(instance)
        return instance

    yield factory
    for instance in created:
        instance.close()
