"""State schema evolution: whether entries stored under one state declaration can be read under another.

Flink's serializer compatibility model has three outcomes, and so does :func:`entry_migration`:

* **compatible as is** (``None``): the stored entries are read unchanged. Stored values do not depend on the
  declared type (an int is stored as an int whatever its TypeInformation), so equal types and wider number types
  (:data:`WIDENINGS`: INT to LONG, FLOAT to DOUBLE, ...) read the old entries as they are.
* **compatible after migration** (a function ``old entry bytes -> new entry bytes``): each entry is read with the
  old layout and written with the new one. Built in: ROW fields added (filled with the ROW type's default for the
  field, else None), removed, or reordered (named rows, matched by name), numbers widened inside rows, lists, maps
  and tuples, and TTL turned on (old entries count as written at migration time) or off (the timestamp is
  stripped). Anything else migrates only through the descriptor's own function
  (:meth:`~keyedstate.state.descriptors.StateDescriptor.enable_state_migration`).
* **incompatible**: :class:`~keyedstate.errors.StateTypeMismatchError` (or StateDescriptorConflictError for another
  kind), naming the state, both types, what does not fit and the three ways out.

The backends call this where stored entries first meet a registered descriptor (heap: when a key group's records
are loaded; RocksDB: once per key group database, rewriting the state's entries and recording the rewrite so the
next commit persists it). The Spark restart check calls it with the recorded declaration before the first batch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, Optional

from keyedstate.errors import StateDescriptorConflictError, StateTypeMismatchError
from keyedstate.serialization import DEFAULT_CODEC, PickleValueCodec
from keyedstate.state.descriptors import MapStateDescriptor, StateDescriptor
from keyedstate.typeinfo import TypeInformation

__all__ = ["WIDENINGS", "EntryMigration", "entry_migration", "check_evolution", "reads_as_is", "EVOLUTION_FIXES"]

# Stored values do not depend on the declared type, so a type that only admits more values reads the old ones.
WIDENINGS = frozenset({
    ("BYTE", "SHORT"), ("BYTE", "INT"), ("BYTE", "LONG"), ("BYTE", "BIG_INT"),
    ("SHORT", "INT"), ("SHORT", "LONG"), ("SHORT", "BIG_INT"),
    ("INT", "LONG"), ("INT", "BIG_INT"), ("LONG", "BIG_INT"),
    ("FLOAT", "DOUBLE"),
})

EVOLUTION_FIXES = (
    "keep the old type or a compatible one (a wider number type such as INT to LONG or FLOAT to DOUBLE; ROW fields "
    "added, removed, or reordered by name), or declare a migration on the descriptor "
    "(descriptor.enable_state_migration(lambda old_value: new_value)), or move the state through a savepoint "
    "(read_keyed_state_frame, convert the DataFrame, bootstrap_keyed_state)"
)

EntryMigration = Callable[[bytes], bytes]
_timestamp = struct.Struct(">q")
_ROWS = ("ROW",)
_ELEMENTWISE = ("LIST", "BASIC_ARRAY", "OBJECT_ARRAY", "PRIMITIVE_ARRAY")


class _Incompatible(Exception):
    pass


@dataclass(frozen=True)
class _Node:
    """A parsed type signature: ``head<arg,...>``; ROW arguments may be named (``name:TYPE``)."""

    head: str
    args: tuple["_Node", ...] = ()
    names: tuple[Optional[str], ...] = ()

    def __str__(self) -> str:
        if not self.args:
            return self.head
        parts = [f"{n}:{a}" if n is not None else str(a) for n, a in zip(self.names, self.args)]
        return f"{self.head}<{','.join(parts)}>"


def _parse(signature: str) -> _Node:
    node, end = _parse_at(signature, 0)
    if end != len(signature):
        raise _Incompatible(f"cannot read type signature {signature!r}")
    return node


def _parse_at(text: str, start: int) -> tuple[_Node, int]:
    index = start
    while index < len(text) and text[index] not in "<>,":
        index += 1
    head = text[start:index]
    if index >= len(text) or text[index] != "<":
        return _Node(head), index
    args: list[_Node] = []
    names: list[Optional[str]] = []
    index += 1
    while True:
        name = None
        colon = _field_name_end(text, index)
        if head == "ROW" and colon is not None:
            name, index = text[index:colon], colon + 1
        arg, index = _parse_at(text, index)
        args.append(arg)
        names.append(name)
        if index >= len(text):
            raise _Incompatible(f"unbalanced type signature {text!r}")
        if text[index] == ">":
            return _Node(head, tuple(args), tuple(names)), index + 1
        index += 1  # ","


def _field_name_end(text: str, start: int) -> Optional[int]:
    """The ``:`` ending a ROW field's name at ``start``, if one is there (``serializer:x`` is a type, not a name)."""
    index = start
    while index < len(text) and text[index] not in "<>,:":
        index += 1
    if index < len(text) and text[index] == ":" and text[start:index] != "serializer":
        return index
    return None



Convert = Callable[[Any], Any]


def _converter(old: _Node, new: _Node, info: Optional[TypeInformation]) -> Optional[Convert]:
    """None when values of ``old`` are values of ``new`` as they are; else a function converting one value."""
    if old == new or "ANY" in (old.head, new.head):
        return None
    if not old.args and not new.args:
        if (old.head, new.head) in WIDENINGS:
            return None
        raise _Incompatible(f"{old} does not widen to {new}")
    if old.head != new.head:
        raise _Incompatible(f"{old} is not {new}")
    components = info.components if info is not None else ()
    if old.head in _ROWS:
        return _row_converter(old, new, info)
    if old.head in _ELEMENTWISE and len(old.args) == len(new.args) == 1:
        element = _converter(old.args[0], new.args[0], components[0] if components else None)
        return None if element is None else (lambda v: None if v is None else type(v)(element(e) for e in v))
    if old.head in ("MAP", "TUPLE") and len(old.args) == len(new.args):
        parts = [_converter(o, n, components[i] if i < len(components) else None)
                 for i, (o, n) in enumerate(zip(old.args, new.args))]
        if all(p is None for p in parts):
            return None
        converts = [p or (lambda v: v) for p in parts]
        if old.head == "MAP":
            key, value = converts
            return lambda v: None if v is None else {key(k): value(x) for k, x in v.items()}
        return lambda v: None if v is None else tuple(c(x) for c, x in zip(converts, v))
    raise _Incompatible(f"{old} does not convert to {new}")


def _row_converter(old: _Node, new: _Node, info: Optional[TypeInformation]) -> Convert:
    old_named, new_named = all(n is not None for n in old.names), all(n is not None for n in new.names)
    if old_named != new_named:
        raise _Incompatible(f"{old} and {new} are not both named rows (or both positional)")
    defaults = dict(info.field_defaults) if info is not None else {}
    components = info.components if info is not None else ()
    sources: list[Optional[int]] = []
    converts: list[Optional[Convert]] = []
    for position, (name, field) in enumerate(zip(new.names, new.args)):
        source = old.names.index(name) if new_named and name in old.names else None
        if not new_named and position < len(old.args):
            source = position
        sources.append(source)
        if source is None:
            converts.append(None)
            continue
        try:
            converts.append(_converter(old.args[source], field,
                                       components[position] if position < len(components) else None))
        except _Incompatible as error:
            raise _Incompatible(f"field {name if new_named else position}: {error}") from None
    if not new_named and len(new.args) < len(old.args):
        raise _Incompatible(f"{new} drops positional fields of {old} (only named rows can remove fields)")
    keys = list(new.names) if new_named else list(range(len(new.args)))
    old_keys = list(old.names) if old_named else list(range(len(old.args)))
    fill = [defaults.get(key) for key in keys]

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if new_named and hasattr(value, "asDict"):  # a pyspark Row (a tuple with names): rebuilt by name
            return type(value)(**convert(value.asDict(recursive=False)))
        if isinstance(value, dict):
            out = {}
            for key, source, field_convert, default in zip(keys, sources, converts, fill):
                if source is None:
                    out[key] = default
                else:
                    item = value.get(old_keys[source])
                    out[key] = field_convert(item) if field_convert is not None and item is not None else item
            return out
        items = []
        for source, field_convert, default in zip(sources, converts, fill):
            if source is None or source >= len(value):
                items.append(default)
            else:
                item = value[source]
                items.append(field_convert(item) if field_convert is not None and item is not None else item)
        return items if isinstance(value, list) else tuple(items)

    return convert




def _value_decoder(old_value_type: _Node, descriptor: StateDescriptor) -> Callable[[bytes], Any]:
    if old_value_type.head == "PICKLED_BYTE_ARRAY":
        return PickleValueCodec().deserialize
    if old_value_type.head.startswith("serializer:") or descriptor.type_info.name == str(old_value_type):
        return descriptor.type_info.serializer.deserialize  # the type's own serializer, assumed unchanged
    return DEFAULT_CODEC.deserialize


def _state_value_converter(old: _Node, new: _Node, descriptor: StateDescriptor) -> Optional[Convert]:
    """The converter of one stored value (a list element, a map value) of the state signature ``old`` -> ``new``."""
    if old.head != new.head or len(old.args) != len(new.args):
        raise _Incompatible(f"{old} is not {new}")
    if old.head == "map":
        assert isinstance(descriptor, MapStateDescriptor)  # new is a map state's signature
        if _converter(old.args[0], new.args[0], descriptor.key_type_info) is not None:
            raise _Incompatible(f"map keys of {old.args[0]} cannot become {new.args[0]} (map keys are stored as keys)")
        return _converter(old.args[1], new.args[1], descriptor.type_info)
    return _converter(old.args[0], new.args[0], descriptor.type_info)


def entry_migration(old: Any, descriptor: StateDescriptor, now_ms: Callable[[], int]) -> Optional[EntryMigration]:
    """How entries stored under ``old`` (a :class:`~keyedstate.state.base.backend.StateMetadata`) become entries of
    ``descriptor``: None when they are read as they are; raises when they cannot be read at all."""
    new_signature = descriptor.type_signature()
    new_ttl = descriptor.ttl_config is not None
    if descriptor.kind.value != old.kind:
        raise StateDescriptorConflictError(
            f"state {old.name!r} was stored as {old.kind} state but is now registered as {descriptor.kind.value} "
            f"state; register it with its old kind, or use a new state name (a kind cannot change, even with a "
            f"migration), or move the state through a savepoint (read_keyed_state_frame, convert the DataFrame, "
            f"bootstrap_keyed_state)"
        )
    if old.signature == new_signature and old.has_ttl == new_ttl:
        return None
    convert: Optional[Convert] = None
    decode: Optional[Callable[[bytes], Any]] = None
    if old.signature != new_signature:
        try:
            old_node, new_node = _parse(old.signature), _parse(new_signature)
            user = descriptor.state_migration
            if user is not None:
                if old_node.head == "map":  # map keys stay as stored; only the values migrate
                    _state_value_converter(_Node("map", (old_node.args[0], _Node("ANY"))),
                                           _Node("map", (new_node.args[0], _Node("ANY"))), descriptor)
                convert = user
            else:
                convert = _state_value_converter(old_node, new_node, descriptor)
        except _Incompatible as error:
            raise StateTypeMismatchError(
                f"state {old.name!r} was stored with type {old.signature} but is now registered with type "
                f"{new_signature} ({error}): {EVOLUTION_FIXES}"
            ) from None
        if convert is not None:
            decode = _value_decoder(old_node.args[-1], descriptor)
    if convert is None and old.has_ttl == new_ttl:
        return None
    return _entry_function(old.name, old.has_ttl, new_ttl, decode, convert, descriptor, now_ms)


def _entry_function(name: str, old_ttl: bool, new_ttl: bool, decode: Optional[Callable[[bytes], Any]],
                    convert: Optional[Convert], descriptor: StateDescriptor,
                    now_ms: Callable[[], int]) -> EntryMigration:
    serialize = descriptor.type_info.serializer.serialize
    check = descriptor.type_info.check
    type_name = descriptor.type_info.name
    # TTL turned on: every old entry counts as written when it is migrated (Flink would need a migration here).
    stamp = _timestamp.pack(now_ms()) if new_ttl and not old_ttl else b""

    def migrate(entry: bytes) -> bytes:
        prefix, payload = (entry[:8], entry[8:]) if old_ttl else (stamp, entry)
        if not new_ttl:
            prefix = b""
        if convert is not None:
            assert decode is not None
            value = convert(decode(payload))
            if not check(value):
                raise StateTypeMismatchError(
                    f"the migration of state {name!r} produced a {type(value).__qualname__} value ({value!r:.60}), "
                    f"which is not a {type_name}; return values of the new type from the migration"
                )
            payload = serialize(value)
        return prefix + payload

    return migrate


def check_evolution(old: Any, descriptor: StateDescriptor) -> None:
    """Raise when entries stored under ``old`` cannot be read through ``descriptor`` (with or without migration)."""
    entry_migration(old, descriptor, lambda: 0)


def reads_as_is(old_signature: str, new_signature: str) -> bool:
    """Whether values stored under the state type signature ``old_signature`` (``StateDescriptor.type_signature``)
    are values of ``new_signature`` as they are (equal types, or wider numbers: :data:`WIDENINGS`), so entries
    stored under either can be kept together under ``new_signature`` without a migration."""
    try:
        old, new = _parse(old_signature), _parse(new_signature)
        return (old.head == new.head and len(old.args) == len(new.args)
                and all(_converter(o, n, None) is None for o, n in zip(old.args, new.args)))
    except _Incompatible:
        return False
