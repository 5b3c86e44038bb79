"""RocksDB tuning for the keyed state backend, as one frozen dataclass with defaults sized for a 2-8 GB executor."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

import rocksdict

from keyedstate.errors import ConfigurationError

__all__ = ["RocksDBOptions", "COMPRESSIONS", "COMPACTION_STYLES", "ARENA_BLOCK_BYTES", "open_files_limits"]

MiB = 1024 * 1024
ARENA_BLOCK_BYTES = 64 * 1024
"""Each memtable reserves at least one arena block against :attr:`RocksDBOptions.memtable_budget_bytes` (RocksDB's
default, an eighth of the write buffer, would let a few dozen open databases use the whole budget up and flush on
every write)."""

COMPRESSIONS = ("none", "snappy", "lz4", "lz4hc", "zstd", "zlib", "bz2")
COMPACTION_STYLES = ("universal", "level")


@dataclass(frozen=True)
class RocksDBOptions:
    """Options of one RocksDB keyed state backend.

    The write-ahead log is always off: checkpoints (snapshots) give durability, as in Flink, and a local database
    is never trusted after a crash (see ``reuse_existing``).
    """

    block_cache_bytes: int = 64 * MiB
    """LRU cache of uncompressed blocks shared by every state (column family) of the backend."""
    write_buffer_bytes: int = 16 * MiB
    """Memtable size per column family before it is flushed to an SST file."""
    memtable_budget_bytes: int = 64 * MiB
    """Memtables of every database built from these options in one process share this budget (RocksDB's write
    buffer manager): past it the largest memtable is flushed. Bounds memory when a Spark worker keeps many key
    groups' databases open between micro-batches (it keeps at most as many column families open as half the budget
    has arena blocks: 512 with the default, 128 databases of a function with two states and both timer kinds)."""
    max_write_buffer_number: int = 3
    compression: str = "lz4"
    """Compression of upper levels: one of none, snappy, lz4, lz4hc, zstd, zlib, bz2."""
    bottommost_compression: str = "zstd"
    """Compression of the last level, which holds most data; zstd trades a little CPU for smaller snapshots."""
    block_size_bytes: int = 4 * 1024
    """A point lookup that misses the block cache reads and decompresses one block. With large state it mostly
    misses, and 4 KiB blocks halve a value-and-timer lookup against 16 KiB (10 us against 21, for 2% larger SSTs:
    ``bench/rocksdb_block_size.py``)."""
    bloom_bits_per_key: float = 10.0
    """Bloom filter bits per key for point lookups (value state, map get); 0 disables the filter."""
    target_file_size_bytes: int = 64 * MiB
    max_background_jobs: int = 2
    max_open_files: int = -1
    level0_compaction_trigger: int = 4
    """Number of L0 files (universal: sorted runs) that starts a compaction; every compaction makes the next
    snapshot upload new files."""
    compaction_style: str = "universal"
    """``universal`` (default) or ``level``. A batch changes a few keys spread over the whole key range. Level
    compaction merges them into every file of the level below, so a key group's database is rewritten every few
    flushes and the next base snapshot uploads all of it. Universal compaction keeps them in small sorted runs that
    merge among themselves, and rewrites the large run only when the small ones add up to twice its size, so a base
    written by the copy that wrote the previous one uploads about what changed (on Spark, a base written by another
    worker's copy still uploads its whole database: docs/rocksdb-mode-design.md). The cost is up to twice the disk
    space locally. A database written with either style opens with the other."""
    lock_timeout_seconds: float = 10.0
    """How long opening waits while another process holds the database lock before it fails."""
    lock_retry_interval_seconds: float = 0.05
    reuse_existing: bool = False
    """Open state already in the directory instead of starting empty. Only safe after a clean ``close()``: with the
    write-ahead log off, a crashed process leaves the local database at an arbitrary older point."""

    def __post_init__(self) -> None:
        for name in ("block_cache_bytes", "write_buffer_bytes", "memtable_budget_bytes", "block_size_bytes",
                     "target_file_size_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigurationError(f"RocksDBOptions.{name} must be a positive int of bytes, got {value!r}")
        for name in ("max_write_buffer_number", "max_background_jobs", "level0_compaction_trigger"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(f"RocksDBOptions.{name} must be an int >= 1, got {value!r}")
        if self.compaction_style not in COMPACTION_STYLES:
            raise ConfigurationError(f"RocksDBOptions.compaction_style must be one of {', '.join(COMPACTION_STYLES)}, "
                                     f"got {self.compaction_style!r}")
        for name in ("compression", "bottommost_compression"):
            if getattr(self, name) not in COMPRESSIONS:
                raise ConfigurationError(
                    f"RocksDBOptions.{name} must be one of {', '.join(COMPRESSIONS)}, got {getattr(self, name)!r}"
                )
        if self.bloom_bits_per_key < 0:
            raise ConfigurationError(f"RocksDBOptions.bloom_bits_per_key must be >= 0, got {self.bloom_bits_per_key}")
        if self.lock_timeout_seconds < 0 or self.lock_retry_interval_seconds <= 0:
            raise ConfigurationError(
                "RocksDBOptions.lock_timeout_seconds must be >= 0 and lock_retry_interval_seconds > 0, got "
                f"{self.lock_timeout_seconds} and {self.lock_retry_interval_seconds}"
            )

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def build(self) -> rocksdict.Options:
        """rocksdict options in raw mode (keys and values are bytes; keyedstate does its own serialization)."""
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(rocksdict.Cache(self.block_cache_bytes))
        # its own cache only for the accounting: charging memtables to the block cache would shrink the cache
        options.set_write_buffer_manager(rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            self.memtable_budget_bytes, False, rocksdict.Cache(self.memtable_budget_bytes)))
        table.set_block_size(self.block_size_bytes)
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        if self.bloom_bits_per_key:
            # rocksdict's stub says int; the binding takes a double, like RocksDB's NewBloomFilterPolicy
            table.set_bloom_filter(self.bloom_bits_per_key, False)  # type: ignore[arg-type]
        options.set_block_based_table_factory(table)
        options.set_write_buffer_size(self.write_buffer_bytes)
        options.set_arena_block_size(ARENA_BLOCK_BYTES)
        options.set_max_write_buffer_number(self.max_write_buffer_number)
        options.set_compression_type(_compression(self.compression))
        options.set_bottommost_compression_type(_compression(self.bottommost_compression))
        options.set_target_file_size_base(self.target_file_size_bytes)
        options.set_max_background_jobs(self.max_background_jobs)
        options.set_max_open_files(self.max_open_files)
        options.set_level_zero_file_num_compaction_trigger(self.level0_compaction_trigger)
        if self.compaction_style == "universal":
            options.set_compaction_style(rocksdict.DBCompactionStyle.universal())
        else:
            options.set_level_compaction_dynamic_level_bytes(True)
        # Opening is on the Spark key-group path (one open per key group and micro-batch): skip the statistics
        # scan over every SST and the periodic stats dumps, and keep two info logs instead of one per open.
        options.set_skip_stats_update_on_db_open(True)
        # RocksDB starts 16 threads per open to open the SST files; a key group's few files open faster (~2 ms
        # less CPU of ~7 per open) in the opening thread
        options.set_max_file_opening_threads(1)
        options.set_keep_log_file_num(2)
        options.set_stats_dump_period_sec(0)
        options.set_stats_persist_period_sec(0)
        options.set_manifest_preallocation_size(64 * 1024)  # RocksDB's 4 MiB, reserved per database and open
        # Flush every column family together so a database closed without WAL is consistent across states.
        options.set_atomic_flush(True)
        return options


def _compression(name: str) -> rocksdict.DBCompressionType:
    return getattr(rocksdict.DBCompressionType, name)()


def open_files_limits() -> tuple[Optional[int], Optional[int]]:
    """This process's (soft, hard) limit of open files, None for unlimited or where the platform has no such limit.
    Every open database keeps its SST files open unless ``max_open_files`` caps them."""
    try:
        import resource
    except ImportError:  # not on this platform
        return None, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (None if soft == resource.RLIM_INFINITY else soft), (None if hard == resource.RLIM_INFINITY else hard)
