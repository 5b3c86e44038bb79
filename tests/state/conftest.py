"""Backends under test: every conformance test runs against each of them (the heap backend, the RocksDB backend the
harness uses, and the key-group RocksDB backend Spark's RocksDB mode uses, pointed at one key group's database and
recording its writes)."""

from __future__ import annotations

from typing import Callable

import pytest

from keyedstate.state.base import KeyedStateBackend
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.testing import ManualClock

BACKEND_KINDS = ["heap", "rocksdb", "rocksdb-key-group"]


def make_backend(kind: str, tmp_path, clock: ManualClock, **kwargs) -> KeyedStateBackend:
    if kind == "heap":
        return HeapKeyedStateBackend(ttl_clock=clock, **kwargs)
    if kind == "rocksdb":
        from keyedstate.state.rocksdb import RocksDBKeyedStateBackend

        return RocksDBKeyedStateBackend(str(tmp_path / "rocksdb"), ttl_clock=clock, **kwargs)
    from keyedstate.state.rocksdb.key_group_backend import KeyGroupRocksDBBackend

    # as Spark's RocksDB mode uses it: created on an idle database, then pointed at a key group's (recording)
    created = KeyGroupRocksDBBackend(str(tmp_path / "idle"), ttl_clock=clock, **kwargs)
    created.open_key_group(str(tmp_path / "kg-00000"))
    return created


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
