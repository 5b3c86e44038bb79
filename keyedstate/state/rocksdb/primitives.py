"""RocksDB's ValueState (Flink has ``RocksDBValueState`` for the same reason): the memo ValueState of
:mod:`keyedstate.state.primitives.value_state` over :class:`~keyedstate.state.rocksdb.value_store.RocksDBValueStore`.
"""

from keyedstate.state.primitives.value_state import MemoValueState as RocksDBValueState

__all__ = ["RocksDBValueState"]
