"""A local RocksDB database on a real full file system (a tmpfs mount) fails saying "no space left on device" where,
and what to do, not with RocksDB's status text alone."""

from __future__ import annotations

import os

import pytest

from keyedstate.errors import StateBackendError
from keyedstate.state.rocksdb import RocksDBOptions
from keyedstate.state.rocksdb.db import RocksDatabase
from tests.mounts import tmpfs


def test_a_full_local_disk_names_the_database_and_the_fix(tmp_path):
    with tmpfs(tmp_path / "local", size="1m") as local:
        db = RocksDatabase(str(local / "kg-00001"), RocksDBOptions(), families=["state"])
        db.column_family("state")
        with pytest.raises(StateBackendError) as failure:
            for _ in range(20):  # 4 MB into the memtable, flushed by the checkpoint
                batch = db.new_batch(record=False)
                for _ in range(200):
                    batch.put(os.urandom(8), os.urandom(1000), db.handles["state"])
                db.write(batch)
            db.checkpoint(str(local / "checkpoint"))
        with pytest.raises(StateBackendError, match="cannot close the state database: no space left on device"):
            db.close()  # its flush fails too, and says so the same way
    message = str(failure.value)
    assert f"no space left on device at {local / 'kg-00001'}" in message
    assert "move the local databases (state_local_dir on Spark)" in message
