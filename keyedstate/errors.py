"""Every error keyedstate raises derives from :class:`KeyedStateError`.

Messages name the thing that went wrong (state, key, type, file, option) and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "KeyedStateError",
    "ConfigurationError",
    "FunctionShippingError",
    "SerializationError",
    "UnsupportedKeyTypeError",
    "StateTypeMismatchError",
    "StateDescriptorConflictError",
    "UnknownStateError",
    "NullKeyError",
    "KeyGroupNotOwnedError",
    "NoKeyContextError",
    "StateAccessOutsideOpenError",
    "StateBackendError",
    "StateBackendLockedError",
    "SnapshotError",
    "SnapshotCorruptedError",
    "NoRestorableSnapshotError",
    "StorageUnavailableError",
    "StateVersionNotRetainedError",
    "StateStorageConflictError",
    "NoSpaceLeftError",
    "CleanupRefusedError",
    "InvalidTimestampError",
    "UserFunctionError",
    "InvalidOutputError",
    "UnsupportedSparkVersionError",
]


class KeyedStateError(Exception):
    """Base class of all keyedstate errors."""


class ConfigurationError(KeyedStateError, ValueError):
    """An option, argument or combination of them is invalid."""


class SerializationError(KeyedStateError):
    """A key or value could not be encoded or decoded."""


class UnsupportedKeyTypeError(SerializationError, TypeError):
    """A key (or map-state user key) has a type that cannot be encoded deterministically."""


class StateTypeMismatchError(KeyedStateError, TypeError):
    """Stored state does not have the type its descriptor declares (or a write has the wrong type)."""


class StateDescriptorConflictError(KeyedStateError):
    """The same state name was registered twice with different kinds or types."""


class UnknownStateError(KeyedStateError, KeyError):
    """A state name was used that was never registered."""


class NullKeyError(KeyedStateError, ValueError):
    """A key is None (or null in Spark); keyed state needs a real key."""


class KeyGroupNotOwnedError(KeyedStateError):
    """A key belongs to a key group this backend (partition) does not own."""


class NoKeyContextError(KeyedStateError, RuntimeError):
    """Keyed state or a timer was used where no current key is set."""


class StateAccessOutsideOpenError(KeyedStateError, RuntimeError):
    """State was requested before the runtime context exists (for example in ``__init__``)."""


class StateBackendError(KeyedStateError):
    """The state backend (RocksDB, storage) failed."""


class StateBackendLockedError(StateBackendError):
    """Another process holds the RocksDB lock and did not release it in time."""


class SnapshotError(KeyedStateError):
    """Taking, storing or restoring a snapshot failed."""


class SnapshotCorruptedError(SnapshotError):
    """A snapshot file is missing or its checksum does not match its manifest."""


class NoRestorableSnapshotError(SnapshotError):
    """No retained snapshot could be restored."""


class StateVersionNotRetainedError(SnapshotCorruptedError):
    """A restart needs state files that were deleted: its checkpoint was rewound past the batches storage retains.

    RocksDB mode keeps the files of the last ``spark.sql.streaming.minBatchesToRetain`` batches."""


class StorageUnavailableError(SnapshotError):
    """The state storage stayed unreachable for longer than the retry budget."""


class StateStorageConflictError(ConfigurationError):
    """A query's state storage is (or was) written by another query, operator or location."""


class NoSpaceLeftError(SnapshotError):
    """A state file could not be written because its device is full (``state_storage`` or ``state_local_dir``)."""


class CleanupRefusedError(KeyedStateError):
    """The clean-up after a query refused: the query may still run, or its checkpoint still needs the state.

    Raised by :func:`keyedstate.cleanup.clean_up_query` unless ``force=True``."""


class InvalidTimestampError(KeyedStateError, ValueError):
    """A timestamp is not a non-negative integer number of epoch milliseconds."""


class UserFunctionError(KeyedStateError):
    """User code (open, process_element, on_timer, close) raised; the original exception is chained as __cause__."""


class FunctionShippingError(ConfigurationError):
    """The function cannot be sent to Spark's Python workers: it does not pickle, or the workers cannot import its
    class."""


class InvalidOutputError(KeyedStateError, TypeError):
    """A function produced something that is not an output record."""


class UnsupportedSparkVersionError(KeyedStateError, RuntimeError):
    """A feature needs a newer Spark, or the installed PySpark does not work with the installed pyarrow."""
