"""Per key group: earliest timer per domain, all timers as one versioned blob, and loading a blob back."""

from __future__ import annotations

import pytest
from timer_helpers import Recorder

from keyedstate.errors import KeyGroupNotOwnedError, SerializationError
from keyedstate.keygroups import KeyGroupRange, key_group_of_key
from keyedstate.serialization import encode_key
from keyedstate.state.base.layout import VOID_NAMESPACE as V
from timers import BLOB_FORMAT_VERSION, TimeDomain, decode_key_group_blob, encode_key_group_blob

EVENT, PROCESSING = TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME


def keys_in_group(key_group, count, num_key_groups=128):
    found, i = [], 0
    while len(found) < count:
        if key_group_of_key(f"key-{i}", num_key_groups) == key_group:
            found.append(f"key-{i}")
        i += 1
    return found


def fill(backend, service, keys, base=1_000):
    for i, key in enumerate(keys):
        backend.set_current_key(key)
        service.register_event_time_timer(V, base + i)
        service.register_event_time_timer(V, base + 10 * i)
        service.register_event_time_timer(encode_key(("window", i)), base + 5)
        service.register_processing_time_timer(V, 50_000 - i)


def test_earliest_timer_per_key_group_and_domain(setup):
    backend = setup.backend()
    service = setup.service(backend)
    a, b = keys_in_group(10, 3), keys_in_group(11, 2)
    fill(backend, service, a, base=500)
    fill(backend, service, b, base=100)
    assert service.earliest_timer(EVENT, 10).timestamp == 500
    assert service.earliest_timer(EVENT, 11).timestamp == 100
    assert service.earliest_timer(PROCESSING, 10).timestamp == 50_000 - 2
    assert service.earliest_timer(PROCESSING, 11).timestamp == 50_000 - 1
    assert service.earliest_timer(EVENT, 12) is None
    assert service.earliest_timer(EVENT).timestamp == 100  # over all key groups
    assert service.key_groups_with_timers() == [10, 11]
    assert service.num_event_time_timers(10) == 9 - 1  # base+0 registered twice for key 0 (i == 10 * i)
    backend.set_current_key(b[0])
    service.delete_event_time_timer(V, 100)
    assert service.earliest_timer(EVENT, 11).timestamp == 101


def test_a_key_group_round_trips_through_its_blob(setup):
    backend = setup.backend()
    service = setup.service(backend)
    mine, other = keys_in_group(20, 40), keys_in_group(21, 5)
    fill(backend, service, mine)
    fill(backend, service, other)
    event = list(service.timers(EVENT, 20))
    processing = list(service.timers(PROCESSING, 20))
    blob = service.export_key_group(20)
    assert blob[0] == BLOB_FORMAT_VERSION
    # compact: keys stored once; ~ a few bytes per timer besides them
    key_bytes = sum(len(encode_key(k)) + 1 for k in mine)
    assert len(blob) < key_bytes + 8 * (len(event) + len(processing)) + 64

    # another service (the next micro-batch of the Spark group) loads it
    backend2 = setup.backend()
    recorder = Recorder(backend2)
    service2 = recorder.bind(setup.service(backend2))
    assert service2.import_key_group(blob, 20) == 20
    assert list(service2.timers(EVENT, 20)) == event
    assert list(service2.timers(PROCESSING, 20)) == processing
    assert service2.key_groups_with_timers() == [20]
    service2.end_of_input()
    assert sorted(f.timestamp for f in recorder.fired) == sorted(t.timestamp for t in event)
    assert {f.key for f in recorder.fired} == set(mine)


def test_importing_replaces_the_key_groups_timers_and_nothing_else(setup):
    backend = setup.backend()
    service = setup.service(backend)
    mine, other = keys_in_group(30, 4), keys_in_group(31, 4)
    fill(backend, service, mine, base=10)
    blob = service.export_key_group(30)
    backend.set_current_key(mine[0])
    service.register_event_time_timer(V, 1)  # changes after the export are replaced
    fill(backend, service, other, base=10)
    other_before = list(service.timers(EVENT, 31))
    service.import_key_group(blob)
    assert service.earliest_timer(EVENT).timestamp == 10
    assert list(service.timers(EVENT, 31)) == other_before
    service.clear_key_group(30)
    assert service.num_event_time_timers(30) == 0 and service.num_processing_time_timers(30) == 0
    assert service.key_groups_with_timers() == [31]
    empty = service.export_key_group(30)
    assert decode_key_group_blob(empty) == (30, [], [])


def test_blobs_of_foreign_or_unknown_formats_are_rejected(setup):
    backend = setup.backend(key_group_range=KeyGroupRange(0, 63))
    service = setup.service(backend)
    with pytest.raises(KeyGroupNotOwnedError):
        service.import_key_group(encode_key_group_blob(100, [], []))
    with pytest.raises(SerializationError, match="key group 5, not 6"):
        service.import_key_group(encode_key_group_blob(5, [], []), 6)
    with pytest.raises(SerializationError, match="version"):
        service.import_key_group(b"\x09" + encode_key_group_blob(5, [], [])[1:])
    with pytest.raises(SerializationError):
        service.import_key_group(encode_key_group_blob(5, [], [])[:-1])
    with pytest.raises(SerializationError):
        service.import_key_group(encode_key_group_blob(5, [], []) + b"\x00")
    with pytest.raises(KeyGroupNotOwnedError):
        service.export_key_group(64)
