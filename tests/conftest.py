"""Suite-wide setup: Spark's Python workers use this interpreter and can import the repo's examples."""

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = str(Path(__file__).resolve().parent.parent)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if REPO_ROOT not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, *_paths])


def pytest_configure(config):
    config.addinivalue_line("markers", "compiled_only: tests the compiled extension itself; deselected when "
                            "KEYEDSTATE_PURE_PYTHON turns it off")


def pytest_collection_modifyitems(config, items):
    """A test that uses the shared Spark session must be marked ``spark``: `make test` runs the others in a stream
    of their own, beside the one Spark session on its 2 cores. With ``KEYEDSTATE_PURE_PYTHON=1`` (the suite's
    pure-Python pass in ``make test``) the compiled variants of the tests that run both ways are deselected: there
    is no compiled path to test, and the Python variant runs."""
    from keyedstate.fastpath import PURE_PYTHON_VARIABLE

    unmarked = [item.nodeid for item in items
                if "spark" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("spark")]
    if unmarked:
        raise pytest.UsageError("these tests use the spark fixture without the spark marker (add "
                                "@pytest.mark.spark or a pytestmark): " + ", ".join(unmarked))
    if os.environ.get(PURE_PYTHON_VARIABLE, "").strip().lower() in ("", "0", "false", "no"):
        return
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        (drop if params.get("implementation") == "compiled" or item.get_closest_marker("compiled_only") else keep
         ).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(params=["compiled", "python"])
def implementation(request, monkeypatch):
    """Run the test with the compiled fast path (keyedstate.fastpath) and again with the pure-Python code it
    stands in for; the choice is read when state primitives and timer services are created."""
    from keyedstate.fastpath import fastpath
    from keyedstate.state.primitives import value_state
    from timers import user_service

    if request.param == "python":
        for module in (value_state, user_service):
            monkeypatch.setattr(module, "fastpath", None)
    elif fastpath is None:
        pytest.fail(
            "keyedstate._fastpath is not built (or KEYEDSTATE_PURE_PYTHON is set): reinstall with a C compiler "
            "available (make venv) to test the compiled path"
        )
    return request.param


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server (S3Proxy, filesystem backend) on 127.0.0.1 for the whole session. Tests that stop
    it start it again (``server.kill()`` then ``server.start()``: same port, same objects); each test uses its own
    bucket (``server.new_bucket()``)."""
    sys.path.insert(0, str(Path(REPO_ROOT) / "scripts"))
    from s3proxy_server import S3ProxyServer, s3proxy_jar

    server = S3ProxyServer(s3proxy_jar(), tmp_path_factory.mktemp("s3proxy") / "data")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def s3(s3_server):
    """The session's S3 server, running, with a fresh bucket for this test (``s3.bucket``)."""
    if not s3_server.running:
        s3_server.start()
    s3_server.bucket = s3_server.new_bucket()
    yield s3_server
    if not s3_server.running:
        s3_server.start()
