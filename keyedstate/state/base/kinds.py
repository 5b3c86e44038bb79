"""The one spelling of the two state backends: Spark's ``state_backend=``, the harness's ``backend=``, each backend's
``backend_kind`` and the timers' storage all use these."""

from typing import Final

__all__ = ["HEAP", "ROCKSDB", "STATE_BACKENDS"]

HEAP: Final = "heap"
ROCKSDB: Final = "rocksdb"
STATE_BACKENDS: Final = (HEAP, ROCKSDB)
