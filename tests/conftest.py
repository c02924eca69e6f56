import os

import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
os.environ.setdefault("SCELLIS_DEVICE", "reference")


@pytest.fixture
def ref():
    """The numpy reference device (supports f64, which the PyTorch comparisons use)."""
    import scellis_jupyter as sc
    return sc.device("reference")


@pytest.fixture
def run_python():
    """Run `python -c code` (or `python -m mod args` with module=...) in a fresh process; for process-global state.

    Returns the CompletedProcess (text); env entries given as keyword arguments override os.environ,
    a value of None removes the variable.
    """
    import subprocess
    import sys

    def run(code: str | None = None, *args: str, module: str | None = None, **env):
        e = dict(os.environ)
        for k, v in env.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = str(v)
        argv = [sys.executable] + (["-m", module] if module else ["-c", code]) + list(args)
        return subprocess.run(argv, capture_output=True, text=True, env=e, timeout=300)
    return run
