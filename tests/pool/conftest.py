"""The pool the pool tests share: two in-process workers, one pool per test module."""
from collections.abc import Iterator

import pytest

from scellis_jupyter.pool import Pool


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    """Two workers as threads of this process (processes=False): quick to start, closed after the module.

    A module that needs other workers (one worker, separate processes, a ledger) opens its own Pool."""
    with Pool(workers=2, processes=False) as p:
        yield p
