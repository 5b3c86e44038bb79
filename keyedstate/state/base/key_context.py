"""The key context: which key keyed state and timers refer to right now.

This is the whole interface the timer service (:mod:`timers`) and the compiled fast path (``keyedstate/_fastpath_src/``)
depend on; every keyed state backend is a :class:`KeyContext`. Three public fields describe the current key, and
hot paths (every state access, every timer registration, firing timers key after key) read them directly instead of
calling a method: an attribute read is the cheapest thing Python does, and the fields are declared here, once, so a
rename is a change of this interface (``tests/test_fastpath.py`` checks the names the compiled module reads).

* ``key``: the current key (a Python value), None without one.
* ``key_group``: its key group, -1 without one.
* ``key_prefix``: ``key group (2 bytes, big-endian) + encoded key``, the prefix of every stored entry and timer of
  the key; None without a current key, which is what makes keyed access fail clearly.

Set them only through the methods: the three always describe one key.
"""

from __future__ import annotations

from typing import Any, Optional

from keyedstate.errors import NoKeyContextError
from keyedstate.serialization import decode_key
from keyedstate.state.base.layout import KEY_GROUP_PREFIX_BYTES

__all__ = ["KeyContext", "KEY_PREFIX_FIELD", "KEY_GROUP_FIELD"]

KEY_PREFIX_FIELD = "key_prefix"
"""The name of the field holding the current key's prefix (read by the compiled fast path)."""
KEY_GROUP_FIELD = "key_group"
"""The name of the field holding the current key's key group (read by the compiled fast path)."""


class KeyContext:
    """The current key, its key group and its ``key group + encoded key`` prefix (see the module)."""

    key: Any
    key_group: int
    key_prefix: Optional[bytes]

    def __init__(self) -> None:
        self.clear_current_key()

    def set_current_key_from_prefix(self, prefix: bytes) -> Any:
        """Set the current key from a stored ``key group + encoded key`` prefix; return the decoded key (timers
        restore their keys this way)."""
        key, _ = decode_key(prefix, KEY_GROUP_PREFIX_BYTES)
        self.key = key
        self.key_group = (prefix[0] << 8) | prefix[1]
        self.key_prefix = prefix
        return key

    def set_current_key_with_prefix(self, key: Any, prefix: bytes) -> None:
        """Set the current key when its prefix is already known and its key group owned (the timer service's and
        the operator's hot path: no encoding, hashing or range check)."""
        self.key = key
        self.key_group = (prefix[0] << 8) | prefix[1]
        self.key_prefix = prefix

    def clear_current_key(self) -> None:
        """No current key: keyed access fails with :class:`~keyedstate.errors.NoKeyContextError` until one is set."""
        self.key = None
        self.key_group = -1
        self.key_prefix = None

    def get_current_key(self) -> Any:
        """The current key; raises :class:`~keyedstate.errors.NoKeyContextError` without one."""
        if self.key_prefix is None:
            raise NoKeyContextError(
                "there is no current key: keyed state and timers can only be used inside process_element or "
                "on_timer of a keyed function"
            )
        return self.key

    @property
    def current_key_group(self) -> int:
        """The current key's key group; raises without a current key."""
        self.get_current_key()
        return self.key_group

    @property
    def current_key_prefix(self) -> bytes:
        """``key group + encoded key`` of the current key; raises without a current key."""
        self.get_current_key()
        return self.key_prefix  # type: ignore[return-value]
