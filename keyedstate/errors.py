"""Every error keyedstate raises derives from :class:`KeyedStateError`.

Messages name the thing that went wrong (state, key, type, file, option) and how to fix it.
"""

from __future__ import annotations

import importlib
import re
from contextlib import contextmanager
from typing import Iterator, Optional

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
    "RestartSettingsChangedError",
    "NoSpaceLeftError",
    "CleanupRefusedError",
    "CheckpointNotInspectableError",
    "InvalidTimestampError",
    "UserFunctionError",
    "InvalidOutputError",
    "UnsupportedSparkVersionError",
    "unwrap",
    "unwrapped",
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


class RestartSettingsChangedError(ConfigurationError):
    """A query was restarted on its checkpoint with a setting its committed state depends on changed (the number of
    key groups, their layout, the key types, the state backend, the time mode, the bootstrap, or a state's kind or a
    type its stored values cannot be read as, even after migration). Raised before the restarted query processes
    anything."""
class NoSpaceLeftError(SnapshotError):
    """A state file could not be written because its device is full (``state_storage`` or ``state_local_dir``)."""


class CleanupRefusedError(KeyedStateError):
    """The clean-up after a query refused: the query may still run, or its checkpoint still needs the state.

    Raised by :func:`keyedstate.cleanup.clean_up_query` unless ``force=True``."""


class CheckpointNotInspectableError(ConfigurationError):
    """The checkpoint inspector cannot read the batch asked for: the location is no Spark checkpoint, no batch is
    committed yet, the batch is not (or no longer) retained, or the checkpoint has no keyed_process state.

    Raised by :func:`keyedstate.spark.inspect_keyed_state` before any state is read."""


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


# "connectors.kafka.errors.MissingGroupIdError: offset commits are on ..." in the Python traceback Spark's exception
# carries; the message runs to the end of its line, before the " SQLSTATE: ..." Spark may append.
_RAISED = re.compile(r"\b((?:keyedstate|connectors)(?:\.\w+)+)\.(\w+): (.*?)(?: SQLSTATE: \w+)*$", re.MULTILINE)


def unwrap(error: BaseException) -> Optional[KeyedStateError]:
    """The keyedstate (or connector) error inside ``error``, an exception Spark raised in your process; None if
    there is none. It is ``error`` itself when that is already ours.

    Errors raised in Python processes Spark starts (data-source option checks at ``load()``/``start()``, executor
    tasks) reach you as a Spark exception (``AnalysisException``, ``StreamingQueryException``,
    ``PythonException``) whose message holds the Python traceback, ``module.ClassName: message`` in its last lines.
    The returned error is a new instance of that class with that message, and ``error`` as its ``__cause__``.
    """
    if isinstance(error, KeyedStateError):
        return error
    matches = list(_RAISED.finditer(str(error)))
    for match in reversed(matches):  # the last one raised: a chained traceback prints its causes first
        module_name, class_name, message = match.groups()
        try:
            cls = getattr(importlib.import_module(module_name), class_name, None)
        except ImportError:
            continue
        if isinstance(cls, type) and issubclass(cls, KeyedStateError):
            ours = cls(message.strip())
            ours.__cause__ = error
            return ours
    return None


@contextmanager
def unwrapped() -> Iterator[None]:
    """Re-raise a keyedstate error that Spark wrapped (see :func:`unwrap`) as itself, so that ``except
    KafkaConfigurationError`` (or any keyedstate error class) works around Spark calls::

        with unwrapped():
            df = spark.readStream.format("keyedstate-kafka").options(**opts).load()

    Other exceptions pass unchanged.
    """
    try:
        yield
    except Exception as error:
        ours = unwrap(error)
        if ours is None or ours is error:
            raise
        raise ours from error
