import pytest


@pytest.fixture(params=["heap", "rocksdb"])
def backend_kind(request) -> str:
    return request.param
