"""The ``setup`` fixture: every test using it runs for each timer storage setup (see ``timer_helpers.SETUPS``)."""

from __future__ import annotations

from typing import Any

import pytest
from timer_helpers import SETUPS, Setup


@pytest.fixture(params=SETUPS)
def setup(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    made = Setup(request.param, tmp_path)
    yield made
    made.close()
