"""The restart record's rules, without Spark: what binds a restart, what may change, and what a failed attempt leaves."""

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


def state(name: str, type_info=None) -> StateMetadata:
    return StateMetadata.of(ValueStateDescriptor(name, type_info or Types.LONG()))


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


def test_added_states_are_recorded_from_their_first_batch_and_removed_ones_are_kept(storage, caplog):
    check_restart_settings(storage, SETTINGS, [state("count")], 0, "keyed_process")
    check_restart_settings(storage, SETTINGS, [state("count"), state("last")], 4, "keyed_process")
    assert {s["name"]: s["since_batch"] for s in record(storage)["states"]} == {"count": 0, "last": 4}
    with caplog.at_level(logging.WARNING, logger="keyedstate.spark.restart"):
        check_restart_settings(storage, SETTINGS, [state("last")], 9, "keyed_process")
    assert "'count' hold committed data but are not registered" in caplog.text
    assert {s["name"] for s in record(storage)["states"]} == {"count", "last"}
    with pytest.raises(RestartSettingsChangedError, match="'count' was stored with type value<LONG> but is now "
                                                          "registered with type value<STRING>"):
        check_restart_settings(storage, SETTINGS, [state("count", Types.STRING())], 10, "keyed_process")


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
