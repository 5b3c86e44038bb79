"""Bulk mode of RocksDB value state: while a key group's database started empty (its first call in RocksDB mode),
``value()``/``update()`` keep the values in a dict and the store writes them in one batch when anything else needs
its entries. It is the compiled twin of the memo path (``MemoValueState``): the same calls give the same answers, the
same errors and the same stored bytes, including the copies RocksDB hands out of values a caller mutates."""

from __future__ import annotations

import random

import pytest

from keyedstate import Types, ValueStateDescriptor
from keyedstate.errors import KeyedStateError
from keyedstate.state.rocksdb.db import STATE_CF_PREFIX
from keyedstate.state.rocksdb.key_group_backend import KeyGroupRocksDBBackend

pytestmark = pytest.mark.compiled_only  # without the compiled fast path there is no bulk mode, only the memo path

# immutable scalars and tuples of them (kept as they are), then what ends bulk mode: containers, tuples holding one,
# a value of another type than the declared one (bool for LONG, an int for a TUPLE) and a clear
KEPT = [1, 7, -3, 2**70, 1.5, "s", b"b", True, (1, 2), (1, "x", None), (3, "y")]
ENDING = [(1, [2]), [1, 2], {"a": 1}, bytearray(b"x"), None]

TYPES = {
    "pickled": Types.PICKLED_BYTE_ARRAY(),
    "long": Types.LONG(),
    "tuple": Types.TUPLE([Types.LONG(), Types.STRING()]),
    "any": None,
}


def backend_on_a_new_database(tmp_path, name: str, type_info, bulk: bool):
    """A key-group backend with one value state, on a database opened empty (bulk mode) or opened recording (memo)."""
    backend = KeyGroupRocksDBBackend(tmp_path / f"idle-{name}", num_key_groups=4)
    state = backend.get_or_create_state(ValueStateDescriptor("v", type_info))
    backend.open_key_group(str(tmp_path / name), record_changes=not bulk)
    return backend, state


def exercise(backend, state, seed: int, ending_from: int) -> list:
    """600 random calls over 12 keys and two namespaces; before call ``ending_from`` only values bulk mode keeps."""
    rng = random.Random(seed)
    answers: list = []
    for step in range(600):
        backend.set_current_key(f"k{rng.randrange(12)}")
        op = rng.random()
        if op < 0.35:
            answers.append(("value", state.value()))
        elif op < 0.85:
            value = rng.choice(KEPT + ENDING if step >= ending_from else KEPT)
            try:
                state.update(value)
                answers.append(("update", repr(value)))
            except KeyedStateError as error:
                answers.append(("refused", type(error).__name__))
        elif op < 0.9 and step >= ending_from:
            state.clear()
        elif op < 0.95:
            read = state.value()
            if isinstance(read, (list, dict)):
                read.clear()  # a copy: the stored value must not change
            answers.append(("read, mutated, read again", state.value()))
        else:
            state.set_current_namespace(rng.choice([None, "window-1"]))
    return answers


@pytest.mark.parametrize("type_name", list(TYPES))
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ending_from", [400, 600], ids=["bulk-ended-by-a-call", "bulk-to-the-end"])
def test_bulk_mode_answers_and_stores_exactly_what_the_memo_path_does(tmp_path, type_name, seed, ending_from):
    bulk_backend, bulk_state = backend_on_a_new_database(tmp_path, "bulk", TYPES[type_name], bulk=True)
    memo_backend, memo_state = backend_on_a_new_database(tmp_path, "memo", TYPES[type_name], bulk=False)
    assert type(bulk_state.value).__name__ == "builtin_function_or_method"  # the compiled calls are in use
    assert type(memo_state.value).__name__ == "method"
    assert exercise(bulk_backend, bulk_state, seed, ending_from) == exercise(memo_backend, memo_state, seed,
                                                                             ending_from)
    if ending_from == 600 and TYPES[type_name] in (None, Types.PICKLED_BYTE_ARRAY()):  # kept every value given
        assert type(bulk_state.value).__name__ == "builtin_function_or_method"
    assert sorted(bulk_backend.iter_stored_records("v")) == sorted(memo_backend.iter_stored_records("v"))
    bulk_backend.close_key_group()
    memo_backend.close_key_group()


def test_bulk_values_reach_the_database_in_one_batch_when_anything_else_reads_it(tmp_path):
    backend, state = backend_on_a_new_database(tmp_path, "bulk", Types.LONG(), bulk=True)
    for n in range(100):
        backend.set_current_key(f"k{n}")
        state.update(n)
        assert state.value() == n
    family = backend.database.column_families[STATE_CF_PREFIX + "v"]
    assert next(iter(family.keys()), None) is None  # nothing written yet: they are all in the dict
    changes = backend.take_changes()  # the new database's whole content, read after the values were written
    assert sum(1 for op in changes.ops if op[1] == STATE_CF_PREFIX + "v") == 100
    backend.set_current_key("k7")
    assert state.value() == 7 and type(state.value).__name__ == "method"  # the memo path from here on
    backend.close_key_group()


def test_a_mutable_value_ends_bulk_mode_and_is_copied_as_before(tmp_path):
    backend, state = backend_on_a_new_database(tmp_path, "bulk", Types.PICKLED_BYTE_ARRAY(), bulk=True)
    backend.set_current_key("a")
    state.update((1, 2))
    kept = [1, 2]
    state.update(kept)  # a list could change after update(): the store encodes it now, as the memo path does
    kept.append(3)
    assert state.value() == [1, 2]
    backend.set_current_key("b")
    assert state.value() is None
    backend.close_key_group()


def test_a_database_that_records_its_changes_has_no_bulk_mode(tmp_path):
    """Bulk mode reads an absent value as None: only a database that started empty may use it."""
    backend, state = backend_on_a_new_database(tmp_path, "memo", Types.LONG(), bulk=False)
    assert type(state.value).__name__ == "method"
    backend.close_key_group()
