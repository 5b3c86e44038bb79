"""Helpers of the timer tests: backends of every kind, a recording Triggerable, snapshot + restore.

(A uniquely named module: every test directory has a ``conftest.py``, so ``from conftest import`` is ambiguous.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.keygroups import KeyGroupRange
from keyedstate.state.heap import HeapKeyedStateBackend
from timers import InternalTimer, InternalTimerService, TimeDomain

import keyedstate.state as _state_pkg

ROCKSDB_AVAILABLE = os.path.exists(os.path.join(os.path.dirname(_state_pkg.__file__), "rocksdb", "__init__.py"))

# (backend kind, timer storage): heap timers on the heap backend; the RocksDB timer storage on the RocksDB backend
# (a real database in tmp_path); and the RocksDB timer storage over the heap backend's sorted in-memory column,
# which exercises the write-through / head-cache logic with a tiny cache even where RocksDB is not available.
SETUPS = ["heap", "rocksdb", "column-on-heap"]


@dataclass
class Setup:
    """Builds backends and services of one storage setup; every backend shares one checkpoint storage."""

    name: str
    tmp_path: Any
    max_parallelism: int = 128
    cache_capacity: int = 4
    _count: int = 0
    backends: list = field(default_factory=list)

    @property
    def storage(self) -> str:
        return "heap" if self.name == "heap" else "rocksdb"

    def checkpoint_storage(self) -> CheckpointStorage:
        return CheckpointStorage(self.tmp_path / "checkpoints")

    def backend(self, key_group_range: Optional[KeyGroupRange] = None, max_parallelism: Optional[int] = None) -> Any:
        self._count += 1
        kwargs = dict(
            max_parallelism=max_parallelism or self.max_parallelism,
            key_group_range=key_group_range,
            checkpoint_storage=self.checkpoint_storage(),
            scope=f"b{self._count}",
        )
        if self.name == "rocksdb":
            from keyedstate.state.rocksdb import RocksDBKeyedStateBackend

            backend = RocksDBKeyedStateBackend(self.tmp_path / f"db{self._count}", **kwargs)
        else:
            backend = HeapKeyedStateBackend(**kwargs)
        self.backends.append(backend)
        return backend

    def service(self, backend: Any, triggerable: Any = None, **kwargs: Any) -> InternalTimerService:
        kwargs.setdefault("storage", self.storage)
        kwargs.setdefault("cache_capacity", self.cache_capacity)
        return InternalTimerService(backend, triggerable, **kwargs)

    def close(self) -> None:
        for backend in self.backends:
            backend.close()


@dataclass
class Fired:
    domain: TimeDomain
    timestamp: int
    key: Any
    namespace: bytes
    watermark: int
    processing_time: int


class Recorder:
    """A Triggerable that records every firing with the key context and times seen inside the callback.

    ``on_fire(fired, timer)`` (optional) runs inside the callback, e.g. to register more timers.
    """

    def __init__(self, backend: Any, on_fire: Optional[Callable[[Fired, InternalTimer], None]] = None) -> None:
        self.backend = backend
        self.service: Optional[InternalTimerService] = None
        self.fired: list[Fired] = []
        self.on_fire = on_fire

    def bind(self, service: InternalTimerService) -> InternalTimerService:
        self.service = service
        service.set_triggerable(self)
        return service

    def _record(self, domain: TimeDomain, timer: InternalTimer) -> None:
        assert self.service is not None
        fired = Fired(
            domain,
            timer.timestamp,
            self.backend.get_current_key(),
            self.service.current_namespace,
            self.service.current_watermark(),
            self.service.current_processing_time(),
        )
        self.fired.append(fired)
        if self.on_fire is not None:
            self.on_fire(fired, timer)

    def on_event_time(self, timer: InternalTimer) -> None:
        self._record(TimeDomain.EVENT_TIME, timer)

    def on_processing_time(self, timer: InternalTimer) -> None:
        self._record(TimeDomain.PROCESSING_TIME, timer)

    def take(self) -> list[tuple[int, Any]]:
        """(timestamp, key) of everything fired since the last take."""
        out = [(f.timestamp, f.key) for f in self.fired]
        self.fired.clear()
        return out


def snapshot_restore(setup: Setup, backend: Any, checkpoint_id: int = 1,
                     ranges: Optional[list[KeyGroupRange]] = None) -> list[Any]:
    """Snapshot ``backend`` and restore the snapshot into new backends (one per range; default: the same range)."""
    manifest = backend.snapshot(checkpoint_id)
    restored = []
    for key_group_range in ranges or [backend.key_group_range]:
        new = setup.backend(key_group_range=key_group_range, max_parallelism=backend.max_parallelism)
        new.restore([manifest])
        restored.append(new)
    return restored

