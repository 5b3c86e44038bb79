"""The restart record's rules, without Spark: what binds a restart, what may change, and what a failed
attempt leaves."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from keyedstate import Types, ValueStateDescriptor
from keyedstate.checkpoint.storage import CheckpointStorage
from keyedstate.errors import RestartSettingsChangedError
from keyedstate.spark.query_settings import SETTINGS_RECORD, QuerySettings, check_restart_settings
from keyedstate.state.base.backend import StateMetadata

SETTINGS = QuerySettings(key_types=("string",), num_key_groups=4, key_group_layout="balanced", state_backend="heap",
                         time_mode="event_time", initial_state=None)


def state(name: str, type_info=None) -> ValueStateDescriptor:
    return ValueStateDescriptor(name, type_info or Types.LONG())


@pytest.fixture
def storage(tmp_path):
    return CheckpointStorage(tmp_path / "operator")


def record(storage) -> dict:
    return json.loads(storage.read_bytes(SETTINGS_RECORD))


def test_the_first_batch_records_the_settings_and_states(storage):
    check_restart_settings(storage, SETTINGS, [state("count")], 0, "keyed_process")
    body = record(storage)
    assert body["since_batch"] == 0 and body["settings"]["num_key_groups"] == 4
    assert [(s["name"], s["signature"], s["since_batch"]) for s in body["states"]] == [("count", "value<LONG>", 0)]


def test_a_committed_setting_binds_every_later_batch(storage):
    check_restart_settings(storage, SETTINGS, [state("count")], 0, "keyed_process")
    check_restart_settings(storage, SETTINGS, [state("count")], 5, "keyed_process")  # unchanged: fine
    with pytest.raises(RestartSettingsChangedError) as raised:
        check_restart_settings(storage, replace(SETTINGS, num_key_groups=8, time_mode="processing_time"),
                               [state("count")], 5, "keyed_process")
    message = str(raised.value)
    assert message.startswith("keyed_process cannot restart on this checkpoint (batch 5")
    assert "num_key_groups=4, but it now runs with num_key_groups=8" in message
    assert "time_mode='event_time', but it now runs with time_mode='processing_time'" in message  # every change
    assert record(storage)["settings"]["num_key_groups"] == 4  # a refused restart changes nothing


def test_a_record_of_the_batch_being_run_again_does_not_bind(storage):
    check_restart_settings(storage, SETTINGS, [state("count")], 3, "keyed_process")  # batch 3 never committed
    check_restart_settings(storage, replace(SETTINGS, num_key_groups=8), [state("count", Types.STRING())], 3,
                           "keyed_process")
    assert record(storage)["settings"]["num_key_groups"] == 8
    assert record(storage)["states"][0]["signature"] == "value<STRING>"


def test_added_states_are_recorded_from_their_first_batch_and_removed_ones_are_dropped(storage, caplog):
    check_restart_settings(storage, SETTINGS, [state("count")], 0, "keyed_process")
    check_restart_settings(storage, SETTINGS, [state("count"), state("last")], 4, "keyed_process")
    assert {s["name"]: s["since_batch"] for s in record(storage)["states"]} == {"count": 0, "last": 4}
    with caplog.at_level(logging.WARNING, logger="keyedstate.spark.restart"):
        assert check_restart_settings(storage, SETTINGS, [state("last")], 9, "keyed_process") == {}
    assert "'count' hold committed data but are not registered by the function any more: their data is dropped" \
        in caplog.text
    assert {s["name"] for s in record(storage)["states"]} == {"last"}
    assert [(s["name"], s["dropped_batch"]) for s in record(storage)["dropped_states"]] == [("count", 9)]
    # registered again, with any type: a new incarnation, so data the dropped one left in key groups is never read
    assert check_restart_settings(storage, SETTINGS, [state("count", Types.STRING()), state("last")], 10,
                                  "keyed_process") == {"count": 1}
    assert {s["name"]: s.get("incarnation", 0) for s in record(storage)["states"]} == {"count": 1, "last": 0}


def test_a_drop_by_an_attempt_that_never_committed_is_undone(storage):
    check_restart_settings(storage, SETTINGS, [state("count"), state("last")], 0, "keyed_process")
    check_restart_settings(storage, SETTINGS, [state("last")], 3, "keyed_process")  # batch 3 never committed
    assert check_restart_settings(storage, SETTINGS, [state("count"), state("last")], 3, "keyed_process") == {}
    assert {s["name"]: s["since_batch"] for s in record(storage)["states"]} == {"count": 0, "last": 0}
    assert "dropped_states" not in record(storage)


def test_a_type_change_without_migration_is_refused_naming_the_fixes_and_with_one_passes(storage):
    check_restart_settings(storage, SETTINGS, [state("count")], 0, "keyed_process")
    with pytest.raises(RestartSettingsChangedError) as raised:
        check_restart_settings(storage, SETTINGS, [state("count", Types.STRING())], 4, "keyed_process")
    message = str(raised.value)
    assert "'count' was stored with type value<LONG> but is now registered with type value<STRING>" in message
    assert "wider number type" in message and "enable_state_migration" in message
    assert "read_keyed_state_frame" in message and "nothing was committed" in message
    migrated = state("count", Types.STRING())
    migrated.enable_state_migration(str)
    check_restart_settings(storage, SETTINGS, [migrated], 4, "keyed_process")


def test_a_widened_type_passes_and_the_record_keeps_the_stored_type(storage):
    check_restart_settings(storage, SETTINGS, [state("count", Types.INT())], 0, "keyed_process")
    check_restart_settings(storage, SETTINGS, [state("count", Types.LONG())], 2, "keyed_process")
    assert record(storage)["states"][0]["signature"] == "value<INT>"


def test_a_checkpoint_without_a_record_gets_one_with_a_warning(storage, caplog):
    with caplog.at_level(logging.WARNING, logger="keyedstate.spark.restart"):
        check_restart_settings(storage, SETTINGS, [state("count")], 7, "keyed_process")
    assert "settings were not recorded" in caplog.text
    assert record(storage)["since_batch"] == 7
    with pytest.raises(RestartSettingsChangedError):
        check_restart_settings(storage, replace(SETTINGS, key_types=("bigint",)), [state("count")], 8,
                               "keyed_process")


def test_a_new_query_whose_first_batches_brought_no_data_records_its_settings_without_a_warning(storage, caplog):
    # the rate or Kafka source's first batch is often empty: no call ran, so batch 1 finds no record
    with caplog.at_level(logging.INFO, logger="keyedstate.spark.restart"):
        check_restart_settings(storage, SETTINGS, [state("count")], 1, "keyed_process", holds_state=False)
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "finds no settings record" in caplog.text and "not recorded" not in caplog.text
    assert record(storage)["since_batch"] == 1
    with pytest.raises(RestartSettingsChangedError):
        check_restart_settings(storage, replace(SETTINGS, num_key_groups=8), [state("count")], 2, "keyed_process")


def test_a_query_started_from_a_savepoint_is_checked_against_the_savepoints_states_before_its_first_batch(storage):
    saved = [StateMetadata.of(state("count", Types.INT())), StateMetadata.of(state("label", Types.STRING()))]
    with pytest.raises(RestartSettingsChangedError) as raised:
        check_restart_settings(storage, SETTINGS, [state("count"), state("label", Types.LONG())], 0, "keyed_process",
                               starting_states=saved)
    message = str(raised.value)
    assert message.startswith("keyed_process cannot start from its savepoint (batch 0")
    assert "'label'" in message and "enable_state_migration" in message
    assert "'count'" not in message  # INT widened to LONG: compatible as is
    assert not storage.exists(SETTINGS_RECORD)  # nothing recorded by a refused start
    check_restart_settings(storage, SETTINGS, [state("count"), state("renamed")], 0, "keyed_process",
                           starting_states=saved)  # a widened type, an added and a removed state are fine
    assert [s["name"] for s in record(storage)["states"]] == ["count", "renamed"]


def operator_storage(tmp_path, uid: str) -> CheckpointStorage:
    return CheckpointStorage(tmp_path / "query" / uid)


def test_a_changed_uid_is_refused_in_rocksdb_mode_and_moves_the_binding_record_in_heap_mode(tmp_path):
    rocksdb = replace(SETTINGS, state_backend="rocksdb")
    query_storage = CheckpointStorage(tmp_path / "query")
    check_restart_settings(operator_storage(tmp_path, "v1"), rocksdb, [state("count")], 0, "keyed_process",
                           query_storage=query_storage, uid="v1")
    with pytest.raises(RestartSettingsChangedError, match="uid='v1', but it now runs with uid='v2'"):
        check_restart_settings(operator_storage(tmp_path, "v2"), rocksdb, [state("count")], 3, "keyed_process",
                               query_storage=query_storage, uid="v2")

    heap_query = CheckpointStorage(tmp_path / "heap-query")
    check_restart_settings(CheckpointStorage(tmp_path / "heap-query" / "h1"), SETTINGS, [state("count")], 0,
                           "keyed_process", query_storage=heap_query, uid="h1")
    with pytest.raises(RestartSettingsChangedError, match="num_key_groups=4, but it now runs with num_key_groups=8"):
        check_restart_settings(CheckpointStorage(tmp_path / "heap-query" / "h2"), replace(SETTINGS, num_key_groups=8),
                               [state("count")], 3, "keyed_process", query_storage=heap_query, uid="h2")
    check_restart_settings(CheckpointStorage(tmp_path / "heap-query" / "h2"), SETTINGS, [state("count")], 3,
                           "keyed_process", query_storage=heap_query, uid="h2")
    assert record(CheckpointStorage(tmp_path / "heap-query" / "h2"))["since_batch"] == 0  # the record moved


def test_operators_recording_for_the_first_time_in_one_batch_do_not_take_each_other_for_a_changed_uid(tmp_path):
    rocksdb = replace(SETTINGS, state_backend="rocksdb")
    query_storage = CheckpointStorage(tmp_path / "query")
    for uid in ("first", "second"):  # a checkpoint older than the records: both record at batch 7
        check_restart_settings(operator_storage(tmp_path, uid), rocksdb, [state("count")], 7, "keyed_process",
                               query_storage=query_storage, uid=uid)
    assert record(operator_storage(tmp_path, "second"))["since_batch"] == 7
