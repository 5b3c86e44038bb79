"""The ``setup`` fixture: every test using it runs for each timer storage setup (see ``timer_helpers.SETUPS``)."""

from __future__ import annotations

from typing import Any

import pytest

from timer_helpers import ROCKSDB_AVAILABLE, SETUPS, Setup


@pytest.fixture(params=SETUPS)
def setup(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    if request.param == "rocksdb" and not ROCKSDB_AVAILABLE:
        pytest.skip("the RocksDB backend (keyedstate/state/rocksdb) is not available yet")
    made = Setup(request.param, tmp_path)
    yield made
    made.close()
