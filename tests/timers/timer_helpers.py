"""Helpers of the timer tests: backends of every kind, a recording Triggerable, snapshot + restore (through the
per-key-group save/restore step the harness uses).

(A uniquely named module: every test directory has a ``conftest.py``, so ``from conftest import`` is ambiguous.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from keyedstate.keygroups import KeyGroupRange
from keyedstate.state.heap import HeapKeyedStateBackend
from keyedstate.testing.snapshots import harness_store
from timers import InternalTimer, InternalTimerService, TimeDomain

# (backend kind, timer storage): heap timers on the heap backend; the RocksDB timer storage on the RocksDB backend
# (a real database in tmp_path); and the RocksDB timer storage over the heap backend's sorted in-memory column,
# which exercises the write-through / head-cache logic with a tiny cache over a second kind of column.
SETUPS = ["heap", "rocksdb", "column-on-heap"]


@dataclass
class Setup:
    """Builds backends and services of one storage setup; every backend's snapshots share one storage."""

    name: str
    tmp_path: Any
    num_key_groups: int = 128
    cache_capacity: int = 4
    _count: int = 0
    backends: list = field(default_factory=list)
    stores: dict = field(default_factory=dict)

    @property
    def storage(self) -> str:
        return "heap" if self.name == "heap" else "rocksdb"

    def checkpoint_dir(self) -> str:
        return str(self.tmp_path / "checkpoints")

    def store(self, backend: Any) -> Any:
        """The harness's save/restore step for ``backend`` (one per backend: RocksDB versions continue)."""
        store = self.stores.get(id(backend))
        if store is None:
            store = self.stores[id(backend)] = harness_store(backend, self.checkpoint_dir())
        return store

    def backend(self, key_group_range: Optional[KeyGroupRange] = None, num_key_groups: Optional[int] = None) -> Any:
        self._count += 1
        kwargs = dict(
            num_key_groups=num_key_groups or self.num_key_groups,
            key_group_range=key_group_range,
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
        for store in self.stores.values():
            getattr(store, "close", lambda: None)()


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


def snapshot_restore(setup: Setup, backend: Any, service: InternalTimerService, checkpoint_id: int = 1,
                     ranges: Optional[list[KeyGroupRange]] = None) -> list[Any]:
    """Save every key group of ``backend`` (state and ``service``'s timers) as a harness snapshot does and restore
    the rows into new backends (one per range, each loading only its key groups; default: the same range). A
    loading service of the same name puts the timers into the new backend's raw columns, where a service the test
    creates afterwards finds them."""
    rows = setup.store(backend).snapshot(checkpoint_id, service)
    restored = []
    for key_group_range in ranges or [backend.key_group_range]:
        new = setup.backend(key_group_range=key_group_range, num_key_groups=backend.num_key_groups)
        # RocksDB versions restore timers into raw columns, which a RocksDB timer storage re-reads
        storage = "rocksdb" if new.backend_kind == "rocksdb" else service.storage
        loading = InternalTimerService(new, name=service.name, storage=storage)
        setup.store(new).restore({kg: row for kg, row in rows.items() if kg in key_group_range}, loading)
        loading.write_to_columns()
        restored.append(new)
    return restored


def make(setup: Setup, backend: Any = None, on_fire: Optional[Callable] = None) -> tuple[Any, Any, Recorder]:
    """A backend (new unless given), a timer service of ``setup``'s storage on it, and the recorder it fires into."""
    backend = backend or setup.backend()
    recorder = Recorder(backend, on_fire)
    service = recorder.bind(setup.service(backend))
    return backend, service, recorder


def at(backend: Any, key: Any) -> Any:
    """``backend`` with ``key`` as its current key (registrations are for the current key)."""
    backend.set_current_key(key)
    return backend
