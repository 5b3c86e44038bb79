"""The RocksDB keyed state backend (rocksdict, raw mode): one column family per state, incremental snapshots."""

from keyedstate.state.rocksdb.backend import RocksDBKeyedStateBackend
from keyedstate.state.rocksdb.options import RocksDBOptions

__all__ = ["RocksDBKeyedStateBackend", "RocksDBOptions"]
