"""The clean-up's rules on local directories, without Spark or Kafka: what it finds from a checkpoint's query id,
when it refuses, what a forced or a checkpoint-deleting run removes, and the command line's statuses and output.
(tests/connectors/test_cleanup_query.py runs it after a real query.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keyedstate.cleanup import clean_up_query
from keyedstate.errors import CleanupRefusedError, ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
QUERY_ID = "0f4c6a8e-2b1d-4c55-9f0e-7a1b2c3d4e5f"


def _stopped_query(base: Path, *, age_seconds: float = 3600.0) -> dict:
    """A checkpoint and RocksDB-mode directories laid out as a run of query QUERY_ID leaves them, last written
    ``age_seconds`` ago."""
    checkpoint, storage, local = base / "checkpoint", base / "state-storage", base / "local"
    files = {
        checkpoint / "metadata": json.dumps({"id": QUERY_ID}) + "\n",
        checkpoint / "offsets" / "0": "v1\n{}\n",
        checkpoint / "commits" / "0": "v1\n{}\n",
        checkpoint / "state" / "0" / "0" / "1.delta": "rows",
        storage / QUERY_ID / "Count" / "kg-00001" / "c1-abc.log": "x" * 1000,
        storage / QUERY_ID / "Count" / "_writers" / "run-1.json": "{}",
        storage / "another-query" / "Count" / "kg-00001" / "c1-def.log": "y",
        local / QUERY_ID / "Count" / "kg-00001" / "CURRENT": "MANIFEST-1",
    }
    then = time.time() - age_seconds
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (then, then))
    return {"checkpoint": checkpoint, "state_storage": str(storage), "state_local_dir": str(local)}


def test_a_dry_run_lists_state_and_local_databases_with_sizes_and_removes_nothing(tmp_path):
    query = _stopped_query(tmp_path)
    report = clean_up_query(query["checkpoint"], state_storage=query["state_storage"],
                            state_local_dir=query["state_local_dir"])
    assert report.query_id == QUERY_ID and report.dry_run
    [state] = report.of_kind("state storage")
    assert state.location == f"{query['state_storage']}/{QUERY_ID}" and (state.files, state.size_bytes) == (2, 1002)
    [local] = report.of_kind("local databases")
    assert local.location == os.path.join(query["state_local_dir"], QUERY_ID) and local.files == 1
    assert any("still holds state rows" in reason for reason in report.refusals)
    assert any("bootstrap_servers" in note for note in report.notes)
    assert (tmp_path / "state-storage" / QUERY_ID).exists() and (tmp_path / "local" / QUERY_ID).exists()


def test_recent_batches_refuse_until_idle_seconds_passed(tmp_path):
    query = _stopped_query(tmp_path, age_seconds=5)
    arguments = {"state_storage": query["state_storage"], "state_local_dir": query["state_local_dir"],
                 "delete_checkpoint": True, "dry_run": False}
    with pytest.raises(CleanupRefusedError, match="may still be running"):
        clean_up_query(query["checkpoint"], **arguments)
    assert (tmp_path / "state-storage" / QUERY_ID).exists() and query["checkpoint"].exists()
    clean_up_query(query["checkpoint"], idle_seconds=1, **arguments)
    assert not (tmp_path / "state-storage" / QUERY_ID).exists()


def test_a_kept_checkpoint_holding_state_refuses_unless_forced_and_other_queries_stay(tmp_path):
    query = _stopped_query(tmp_path)
    arguments = {"state_storage": query["state_storage"], "state_local_dir": query["state_local_dir"],
                 "dry_run": False}
    with pytest.raises(CleanupRefusedError, match="still holds state rows.*delete_checkpoint=True"):
        clean_up_query(query["checkpoint"], **arguments)
    clean_up_query(query["checkpoint"], force=True, **arguments)
    assert not (tmp_path / "state-storage" / QUERY_ID).exists() and not (tmp_path / "local" / QUERY_ID).exists()
    assert (tmp_path / "state-storage" / "another-query" / "Count" / "kg-00001" / "c1-def.log").exists()
    assert query["checkpoint"].exists()


def test_what_is_not_a_checkpoint_is_refused_and_not_created(tmp_path):
    with pytest.raises(ConfigurationError, match="is not a Spark checkpoint: it has no 'metadata' file"):
        clean_up_query(tmp_path / "typo", state_storage=str(tmp_path / "storage"))
    assert not (tmp_path / "typo").exists()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "keyedstate", "cleanup", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=120)


def test_the_command_line_lists_removes_and_reports_refusals_with_exit_statuses(tmp_path):
    query = _stopped_query(tmp_path)
    common = [str(query["checkpoint"]), "--state-storage", query["state_storage"], "--state-local-dir",
              query["state_local_dir"]]
    listed = _cli(*common, "--dry-run", "--state-storage-option", "retry_seconds=5")
    assert listed.returncode == 0, listed.stderr
    assert f"query {QUERY_ID}" in listed.stdout and "would remove" in listed.stdout
    assert f"state storage    {query['state_storage']}/{QUERY_ID} (2 files, 1002 B)" in listed.stdout
    assert "a real run refuses" in listed.stdout
    refused = _cli(*common)
    assert refused.returncode == 3 and "refused" in refused.stderr and "still holds state rows" in refused.stderr
    removed = _cli(*common, "--delete-checkpoint")
    assert removed.returncode == 0, removed.stderr
    assert "removed" in removed.stdout and not query["checkpoint"].exists()
    assert not (tmp_path / "state-storage" / QUERY_ID).exists()
    missing = _cli(*common)
    assert missing.returncode == 1 and "ConfigurationError" in missing.stderr
    bad = _cli(*common, "--state-storage-option", "retry_seconds")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr


def test_the_command_line_takes_options_from_files_and_warns_about_secrets_typed_as_flags(tmp_path):
    query = _stopped_query(tmp_path)
    storage_file, kafka_file = tmp_path / "storage.json", tmp_path / "kafka.properties"
    storage_file.write_text(json.dumps({"retry_seconds": 5}))
    kafka_file.write_text("# the admin client's credentials\nsasl.password=file-secret-5678\n")
    listed = _cli(str(query["checkpoint"]), "--state-storage", query["state_storage"], "--state-local-dir",
                  query["state_local_dir"], "--dry-run", "--state-storage-options-file", str(storage_file),
                  "--kafka-options-file", str(kafka_file), "--kafka-option", "sasl.password=typed-secret-1234",
                  "--checkpoint-option", "secret_key=typed-secret-9012")
    assert listed.returncode == 0, listed.stderr
    assert "would remove" in listed.stdout
    assert "--kafka-option sasl.password=... looks like a secret" in listed.stderr
    assert "put it in --kafka-options-file" in listed.stderr
    assert "--checkpoint-option secret_key=... looks like a secret" in listed.stderr
    assert "--state-storage-option" not in listed.stderr and "--kafka-options-file sasl" not in listed.stderr
    for secret in ("typed-secret-1234", "typed-secret-9012", "file-secret-5678"):
        assert secret not in listed.stderr + listed.stdout
    missing = _cli(str(query["checkpoint"]), "--dry-run", "--kafka-options-file", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "--kafka-options-file: cannot read" in missing.stderr


@pytest.mark.slow
def test_a_checkpoint_given_as_a_hadoop_s3a_uri_is_read_and_deleted_on_s3(s3, tmp_path):
    from keyedstate.checkpoint import CheckpointStorage

    options = s3.storage_options()
    checkpoint = CheckpointStorage(f"s3://{s3.bucket}/jobs/checkpoint", options=options)
    checkpoint.write_bytes("metadata", json.dumps({"id": QUERY_ID}).encode(), "metadata")
    checkpoint.write_bytes("commits/0", b"v1\n{}\n", "0")
    state = CheckpointStorage(f"s3://{s3.bucket}/jobs/state/{QUERY_ID}", options=options)
    state.write_bytes("Count/kg-00001/c1-abc.log", b"x" * 10, "c1-abc.log")
    report = clean_up_query(f"s3a://{s3.bucket}/jobs/checkpoint", state_storage=f"s3://{s3.bucket}/jobs/state",
                            state_storage_options=options, state_local_dir=str(tmp_path / "local"),
                            checkpoint_options=options, delete_checkpoint=True, idle_seconds=0, dry_run=False)
    assert [(item.kind, item.files) for item in report.items] == [("state storage", 1), ("checkpoint", 2)]
    assert [p for p in (s3.data_dir / s3.bucket).rglob("*") if p.is_file()] == []
