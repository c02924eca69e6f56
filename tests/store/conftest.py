import pytest

from scellis_jupyter.store import Store


@pytest.fixture
def store(tmp_path):
    """A fresh store in the test's temporary folder."""
    return Store.open(tmp_path / "s")
