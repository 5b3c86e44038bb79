"""Records the 1-minute load average before and after every benchmark in its ``extra_info``.

The 2-core benchmark machine is often shared; the report shows the load next to each number so a slow round can be
told apart from a slow implementation. Done here rather than in each suite so every suite (including ones owned by
others) gets it the same way.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _record_load_average(request):
    if "benchmark" not in request.fixturenames:
        yield
        return
    benchmark = request.getfixturevalue("benchmark")
    before = round(os.getloadavg()[0], 2)
    yield
    benchmark.extra_info["load_before"] = before
    benchmark.extra_info["load_after"] = round(os.getloadavg()[0], 2)
